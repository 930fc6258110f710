/**
 * Cisco CIMC (UCS C-Series). It follows DMTF's model closely; what sets it apart for this driver
 * is that whether it lists Nmi is not known statically, so the capability says false (the control
 * plane then refuses nmi for these nodes) while a listed Nmi would still be honoured at call time.
 * On blades, a virtual media slot may answer InsertMedia with 405: the generic driver then mounts
 * the image on the next CD/DVD slot (and notes which).
 */
import { redfishGeneric, type RedfishFlavour } from './flavour';

export const cimc: RedfishFlavour = {
  ...redfishGeneric,
  name: 'cimc',
  capabilities: { ...redfishGeneric.capabilities, nmi: false },
};
