/**
 * HPE iLO 4 and 5. EjectMedia with nothing inserted is an error (iLO.2.x.UnableToEject, HTTP 400):
 * the driver sends no eject for an empty slot, and an eject that fails that way after the slot is
 * re-read as empty counts as done (eject is idempotent). iLO 4 accepts only `Image` in InsertMedia
 * and refuses Inserted/WriteProtected; the Redfish defaults of both (inserted, write-protected)
 * are what the driver wants, so this flavour sends only Image, to iLO 5 as well. A one-time boot
 * from the virtual CD is the slot's own BootOnNextServerReset (Oem.Hpe, Oem.Hp on iLO 4), set
 * after the image is inserted, not a Boot override.
 */
import { redfishGeneric, type RedfishFlavour } from './driver';

export const ilo: RedfishFlavour = {
  ...redfishGeneric,
  name: 'ilo',
  capabilities: { ...redfishGeneric.capabilities, nmi: true },
  insertBody: (imageUrl) => ({ Image: imageUrl }),
  virtualCdBoot: 'hpe-next-reset',
  ejectOfEmptyError: (res) => res.status === 400 && /UnableToEject|NoMedia|not inserted|no media/i.test(JSON.stringify(res.body ?? {})),
};
