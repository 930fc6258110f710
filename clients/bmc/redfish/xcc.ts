/**
 * Lenovo XClarity Controller. A Continuous boot override to the disk can boot-loop Lenovo UEFI, so
 * a persistent disk boot is set Once (the machine boots its disk by default afterwards anyway), and
 * the capabilities say persistentBoot false. Its EXT virtual media slots have no InsertMedia or
 * EjectMedia actions: an image is mounted by a PATCH of the slot (Image, Inserted,
 * WriteProtected) and unmounted by one that clears it. XCC lists Nmi among its ResetTypes.
 */
import { redfishGeneric, type RedfishFlavour } from './flavour';

export const xcc: RedfishFlavour = {
  ...redfishGeneric,
  name: 'xcc',
  capabilities: { ...redfishGeneric.capabilities, nmi: true, persistentBoot: false },
  continuousAllowed: (device) => device !== 'disk',
  patchMountSlots: 'EXT',
};
