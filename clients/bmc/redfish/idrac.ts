/**
 * Dell iDRAC. Since 6.00.02 the VirtualMedia (and so InsertMedia) moved from the Manager to the
 * System: the driver takes the system's own VirtualMedia link when it has one, else the
 * manager's, so both firmware lines work by following links. iDRAC refuses InsertMedia while an
 * image is "already connected" (IDRAC.2.8.VRM0012, HTTP 500), so a slot that is inserted or still
 * connected is ejected first. A one-time boot to `Cd` boots the machine's physical drive, not the
 * virtual one: the boot from the virtual CD is Dell's own first-boot device VCD-DVD
 * (ServerBoot.1.FirstBootDevice, with VirtualMedia.1.BootOnce for once) in the manager's
 * DellAttributes. iDRAC lists Nmi among its ResetTypes.
 */
import { patchResource, pollUntil, readResource, systemManagers, type CallContext, type System } from './call';
import type { Doc } from './client';
import { link } from './doc';
import { genericOccupied, redfishGeneric, slotEmpty, type RedfishFlavour } from './flavour';

/**
 * iDRAC: a Cd boot override boots the machine's physical drive, so a boot from the virtual CD is
 * Dell's first-boot device VCD-DVD, set in the manager's DellAttributes (Links.Oem.Dell), once
 * (VirtualMedia.1.BootOnce) or for every boot.
 */
async function dellVirtualCdBoot(call: CallContext, sys: System, persistent: boolean): Promise<boolean> {
  let attrsPath: string | null = null;
  for (const manager of await systemManagers(call, sys)) {
    const oem = ((((await call.client.get(manager, 'the manager')).Links ?? {}) as Doc).Oem ?? {}) as Doc;
    const dell = (oem.Dell ?? {}) as Doc;
    const listed = Array.isArray(dell.DellAttributes) ? (dell.DellAttributes as unknown[]).map(link) : [link(dell.DellAttributes)];
    attrsPath = listed.find((path): path is string => path !== null) ?? null;
    if (attrsPath) break;
  }
  if (!attrsPath) throw call.client.error('BMC_UNSUPPORTED', `the iDRAC at ${call.client.origin} links no DellAttributes from its manager: the virtual CD (VCD-DVD) cannot be set as the boot device`);
  const want = { 'ServerBoot.1.FirstBootDevice': 'VCD-DVD', 'VirtualMedia.1.BootOnce': persistent ? 'Disabled' : 'Enabled' };
  const current = await readResource(call, attrsPath, 'the iDRAC attributes');
  const has = (attrs: Doc) => Object.entries(want).every(([key, value]) => ((attrs.Attributes ?? {}) as Doc)[key] === value);
  if (has(current)) {
    call.notes.push(`the iDRAC's first boot device was already VCD-DVD${persistent ? '' : ' once'}: nothing sent`);
    return true;
  }
  await patchResource(call, attrsPath, { Attributes: want }, 'the iDRAC first boot device (VCD-DVD)', current, 'boot');
  await pollUntil(call, async () => (has(await readResource(call, attrsPath!, 'the iDRAC attributes')) ? true : 'the attributes do not show FirstBootDevice VCD-DVD'), 'the iDRAC accepted FirstBootDevice VCD-DVD');
  call.notes.push(`idrac: set Dell's first boot device VCD-DVD${persistent ? '' : ' once'} (a Cd override would boot the physical drive)`);
  return true;
}

export const idrac: RedfishFlavour = {
  ...redfishGeneric,
  name: 'idrac',
  capabilities: { ...redfishGeneric.capabilities, nmi: true },
  // iDRAC keeps a connection with the image set after Inserted went false, and refuses InsertMedia
  // over it (IDRAC.2.8.VRM0012): connected with an image counts as occupied here.
  occupied: (slot: Doc) => genericOccupied(slot)
    ?? (!slotEmpty({ ...slot, Inserted: true }) && typeof slot.ConnectedVia === 'string' && slot.ConnectedVia !== 'NotConnected' ? `${String(slot.Image)} is connected (${slot.ConnectedVia})` : null),
  bootFromVirtualCd: dellVirtualCdBoot,
};
