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
}

export type FlavourName = 'plain' | 'idrac' | 'supermicro' | 'ilo' | 'ilo4' | 'xcc' | 'cimc';

export const idrac: Flavour = { name: 'idrac', virtualMediaOnSystem: true, refuseInsertWhileConnected: true };
export const supermicro: Flavour = { name: 'supermicro', noBootSourceOverrideMode: true, refuseInsertWhileImageSet: true };
export const ilo: Flavour = { name: 'ilo', ejectFailsWhenEmpty: true };
export const ilo4: Flavour = { name: 'ilo4', ejectFailsWhenEmpty: true, insertAcceptsOnlyImage: true };
export const xcc: Flavour = { name: 'xcc', recordsContinuousDiskOverride: true };
export const cimc: Flavour = { name: 'cimc' };
export const plain: Flavour = { name: 'plain' };

export const FLAVOURS: Record<FlavourName, Flavour> = { plain, idrac, supermicro, ilo, ilo4, xcc, cimc };
