/**
 * Cisco CIMC (UCS C-Series). It follows DMTF's model closely; what sets it apart for this driver
 * is that whether it lists Nmi is not known statically, so the capability says false (the control
 * plane then refuses nmi for these nodes) while a listed Nmi would still be honoured at call time.
 */
import { redfishGeneric, type RedfishFlavour } from './driver';

export const cimc: RedfishFlavour = {
  ...redfishGeneric,
  name: 'cimc',
  capabilities: { ...redfishGeneric.capabilities, nmi: false },
};
