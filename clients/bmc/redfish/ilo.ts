/**
 * HPE iLO 4 and 5. EjectMedia with nothing inserted is an error (iLO.2.x.UnableToEject, HTTP 400):
 * the driver sends no eject for an empty slot, and an eject that fails that way after the slot is
 * re-read as empty counts as done (eject is idempotent). iLO 4 accepts only `Image` in InsertMedia
 * and refuses Inserted/WriteProtected; the Redfish defaults of both (inserted, write-protected)
 * are what the driver wants, so this flavour sends only Image, to iLO 5 as well. A one-time boot
 * from the virtual CD is the slot's own BootOnNextServerReset (Oem.Hpe, Oem.Hp on iLO 4), set
 * after the image is inserted, not a Boot override.
 */
import { patchResource, pollUntil, readResource, type CallContext, type System } from './call';
import type { Doc } from './client';
import { lastSegment } from './doc';
import { redfishGeneric, type RedfishFlavour } from './flavour';
import { cdSlots } from './virtual-media';

/**
 * HPE iLO: a one-time boot from the virtual CD is BootOnNextServerReset on the slot that holds the
 * image (Oem.Hpe, Oem.Hp on iLO 4); a persistent one is DMTF's Cd override (false: not handled here).
 */
async function hpeVirtualCdBoot(call: CallContext, sys: System, persistent: boolean): Promise<boolean> {
  if (persistent) return false;
  const slot = (await cdSlots(call, sys)).find((candidate) => candidate.doc.Inserted === true && candidate.doc.Image);
  if (!slot) throw call.client.error('BMC_ERROR', 'no virtual media is inserted: insert the image before setting the boot from it');
  const oem = (slot.doc.Oem ?? {}) as Doc;
  const vendor = 'Hpe' in oem || !('Hp' in oem) ? 'Hpe' : 'Hp';
  const name = lastSegment(slot.path);
  const flag = (slotDoc: Doc) => (((slotDoc.Oem ?? {}) as Doc)[vendor] as Doc | undefined)?.BootOnNextServerReset === true;
  if (flag(slot.doc)) {
    call.notes.push(`${name} was already set to boot on the next server reset: nothing sent`);
    return true;
  }
  await patchResource(call, slot.path, { Oem: { [vendor]: { BootOnNextServerReset: true } } }, `BootOnNextServerReset on ${name}`, slot.doc, `boot:${name}`);
  await pollUntil(call, async () => (flag(await readResource(call, slot.path, `virtual media ${name}`)) ? true : `${name} does not show BootOnNextServerReset`), `the BMC accepted BootOnNextServerReset on ${name}`);
  call.notes.push(`ilo: set ${name} to boot on the next server reset (Oem.${vendor}.BootOnNextServerReset)`);
  return true;
}

export const ilo: RedfishFlavour = {
  ...redfishGeneric,
  name: 'ilo',
  capabilities: { ...redfishGeneric.capabilities, nmi: true },
  insertBody: (imageUrl) => ({ Image: imageUrl }),
  bootFromVirtualCd: hpeVirtualCdBoot,
  ejectOfEmptyError: (res) => res.status === 400 && /UnableToEject|NoMedia|not inserted|no media/i.test(JSON.stringify(res.body ?? {})),
};
