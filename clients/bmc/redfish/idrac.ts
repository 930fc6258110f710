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
import { genericOccupied, redfishGeneric, slotEmpty, type CallContext, type RedfishDriver, type RedfishFlavour, type System } from './driver';
import type { Doc } from './client';
import { link } from './doc';

/**
 * iDRAC: a Cd boot override boots the machine's physical drive, so a boot from the virtual CD is
 * Dell's first-boot device VCD-DVD, set in the manager's DellAttributes (Links.Oem.Dell), once
 * (VirtualMedia.1.BootOnce) or for every boot.
 */
async function dellVirtualCdBoot(driver: RedfishDriver, x: CallContext, sys: System, persistent: boolean): Promise<void> {
  let attrsPath: string | null = null;
  for (const m of await driver.managers(x, sys)) {
    const oem = ((((await x.c.get(m, 'the manager')).Links ?? {}) as Doc).Oem ?? {}) as Doc;
    const dell = (oem.Dell ?? {}) as Doc;
    const listed = Array.isArray(dell.DellAttributes) ? (dell.DellAttributes as unknown[]).map(link) : [link(dell.DellAttributes)];
    attrsPath = listed.find((p): p is string => p !== null) ?? null;
    if (attrsPath) break;
  }
  if (!attrsPath) throw x.c.error('BMC_UNSUPPORTED', `the iDRAC at ${x.c.origin} links no DellAttributes from its manager: the virtual CD (VCD-DVD) cannot be set as the boot device`);
  const want = { 'ServerBoot.1.FirstBootDevice': 'VCD-DVD', 'VirtualMedia.1.BootOnce': persistent ? 'Disabled' : 'Enabled' };
  const current = await driver.read(x, attrsPath, 'the iDRAC attributes');
  const has = (d: Doc) => Object.entries(want).every(([k, v]) => ((d.Attributes ?? {}) as Doc)[k] === v);
  if (has(current)) {
    x.notes.push(`the iDRAC's first boot device was already VCD-DVD${persistent ? '' : ' once'}: nothing sent`);
    return;
  }
  await driver.patch(x, attrsPath, { Attributes: want }, 'the iDRAC first boot device (VCD-DVD)', current, 'boot');
  await driver.until(x, async () => (has(await driver.read(x, attrsPath!, 'the iDRAC attributes')) ? true : 'the attributes do not show FirstBootDevice VCD-DVD'), 'the iDRAC accepted FirstBootDevice VCD-DVD');
  x.notes.push(`idrac: set Dell's first boot device VCD-DVD${persistent ? '' : ' once'} (a Cd override would boot the physical drive)`);
}

export const idrac: RedfishFlavour = {
  ...redfishGeneric,
  name: 'idrac',
  capabilities: { ...redfishGeneric.capabilities, nmi: true },
  // iDRAC keeps a connection with the image set after Inserted went false, and refuses InsertMedia
  // over it (IDRAC.2.8.VRM0012): connected with an image counts as occupied here.
  occupied: (vm: Doc) => genericOccupied(vm)
    ?? (!slotEmpty({ ...vm, Inserted: true }) && typeof vm.ConnectedVia === 'string' && vm.ConnectedVia !== 'NotConnected' ? `${String(vm.Image)} is connected (${vm.ConnectedVia})` : null),
  virtualCdBoot: 'dell-vcd',
  setVirtualCdBoot: dellVirtualCdBoot,
};
