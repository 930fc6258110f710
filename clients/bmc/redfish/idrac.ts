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
import { genericOccupied, redfishGeneric, slotEmpty, type RedfishFlavour } from './driver';
import type { Doc } from './client';

export const idrac: RedfishFlavour = {
  ...redfishGeneric,
  name: 'idrac',
  capabilities: { ...redfishGeneric.capabilities, nmi: true },
  // iDRAC keeps a connection with the image set after Inserted went false, and refuses InsertMedia
  // over it (IDRAC.2.8.VRM0012): connected with an image counts as occupied here.
  occupied: (vm: Doc) => genericOccupied(vm)
    ?? (!slotEmpty({ ...vm, Inserted: true }) && typeof vm.ConnectedVia === 'string' && vm.ConnectedVia !== 'NotConnected' ? `${String(vm.Image)} is connected (${vm.ConnectedVia})` : null),
  virtualCdBoot: 'dell-vcd',
};
