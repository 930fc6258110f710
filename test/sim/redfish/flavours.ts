/**
 * Vendor quirk flavours (issue 9 item 3), each a small set of switches the simulator obeys. They
 * reproduce field behaviour that a driver flavour must work around; "plain" is DMTF's mockup as is.
 */
export interface Flavour {
  name: FlavourName;
  /** iDRAC 6.00.02+: VirtualMedia (and so InsertMedia) lives under the System, not the Manager. */
  virtualMediaOnSystem?: boolean;
  /** iDRAC: InsertMedia while an image is connected fails ("already connected"): eject first. */
  refuseInsertWhileConnected?: boolean;
  /** Supermicro: InsertMedia while Image is set fails, even if not Inserted. */
  refuseInsertWhileImageSet?: boolean;
  /** Supermicro: no Boot.BootSourceOverrideMode at all; a PATCH naming it is refused. */
  noBootSourceOverrideMode?: boolean;
  /** HPE iLO: EjectMedia with nothing inserted is an error. */
  ejectFailsWhenEmpty?: boolean;
  /** iLO 4: InsertMedia accepts only the Image parameter. */
  insertAcceptsOnlyImage?: boolean;
  /**
   * Lenovo XCC: a Continuous disk override is accepted and recorded (a real one can boot-loop UEFI);
   * the simulator notes it in state.continuousDiskOverrides so a test shows the driver used Once.
   */
  recordsContinuousDiskOverride?: boolean;
  /**
   * iDRAC: the manager links DellAttributes (Links.Oem.Dell.DellAttributes) holding
   * ServerBoot.1.FirstBootDevice and VirtualMedia.1.BootOnce; VCD-DVD there boots the virtual CD.
   * A Cd boot override boots the machine's physical drive, which is empty (the boot finds no image).
   */
  dellFirstBootDevice?: boolean;
  /** HPE iLO: each slot has Oem.<vendor>.BootOnNextServerReset; set on an inserted slot, the next boot is from it (then it clears). */
  bootOnNextServerReset?: 'Hpe' | 'Hp';
  /** Lenovo XCC: the CD slots are EXT1, EXT2, ... with no InsertMedia/EjectMedia actions; a PATCH of the slot mounts or clears an image. */
  patchMountSlots?: boolean;
  /** Cisco CIMC blade: with more than one CD slot, InsertMedia on the first answers 405 (another slot takes the image). */
  firstCdSlotRefuses405?: boolean;
}

export type FlavourName = 'plain' | 'idrac' | 'supermicro' | 'ilo' | 'ilo4' | 'xcc' | 'cimc';

export const idrac: Flavour = { name: 'idrac', virtualMediaOnSystem: true, refuseInsertWhileConnected: true, dellFirstBootDevice: true };
export const supermicro: Flavour = { name: 'supermicro', noBootSourceOverrideMode: true, refuseInsertWhileImageSet: true };
export const ilo: Flavour = { name: 'ilo', ejectFailsWhenEmpty: true, bootOnNextServerReset: 'Hpe' };
export const ilo4: Flavour = { name: 'ilo4', ejectFailsWhenEmpty: true, insertAcceptsOnlyImage: true, bootOnNextServerReset: 'Hp' };
export const xcc: Flavour = { name: 'xcc', recordsContinuousDiskOverride: true, patchMountSlots: true };
export const cimc: Flavour = { name: 'cimc', firstCdSlotRefuses405: true };
export const plain: Flavour = { name: 'plain' };

export const FLAVOURS: Record<FlavourName, Flavour> = { plain, idrac, supermicro, ilo, ilo4, xcc, cimc };
