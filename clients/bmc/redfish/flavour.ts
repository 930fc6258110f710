/**
 * What sets one vendor's Redfish apart from DMTF's (a RedfishFlavour), and DMTF's own behaviour
 * (`redfishGeneric`); each vendor file (idrac.ts, ilo.ts, xcc.ts, cimc.ts, supermicro.ts) is
 * `redfishGeneric` with its quirks.
 */
import type { BootDevice, DriverCapabilities } from '../driver';
import type { CallContext, System } from './call';
import type { Doc, Response } from './client';

/** A vendor's quirks; `redfishGeneric` is DMTF's behaviour. */
export interface RedfishFlavour {
  name: string;
  capabilities: DriverCapabilities;
  /** The InsertMedia body for an image URL. */
  insertBody(imageUrl: string): Doc;
  /** Why a virtual media slot must be ejected before InsertMedia, or null when it is free. */
  occupied(slot: Doc): string | null;
  /** Whether a Continuous override is sent for this device (else Once, with a note). */
  continuousAllowed(device: BootDevice): boolean;
  /** An EjectMedia error answer that only means "nothing was inserted" (the slot is re-read to be sure). */
  ejectOfEmptyError(res: Response): boolean;
  /**
   * How a boot from the virtual CD is set when DMTF's Boot override to Cd is not the way: Dell's
   * own first-boot device VCD-DVD in the manager's DellAttributes (idrac.ts: iDRAC's Cd override
   * boots the physical drive); HPE's BootOnNextServerReset on the inserted slot (ilo.ts, a one-time
   * boot). It resolves false when this boot is DMTF's override after all (a persistent one on iLO).
   * Null: always DMTF's override.
   */
  bootFromVirtualCd: ((call: CallContext, sys: System, persistent: boolean) => Promise<boolean>) | null;
  /**
   * A slot with no InsertMedia/EjectMedia actions is mounted and unmounted by a PATCH of the slot
   * itself (Lenovo XCC's EXT slots); slots whose Id starts with this prefix are preferred. Null:
   * such a slot is unsupported.
   */
  patchMountSlots: string | null;
}

/** Whether a slot reads as holding no image: Inserted false, or an empty, null or "None" Image, whatever ConnectedVia says. */
export function slotEmpty(slot: Doc): boolean {
  const image = typeof slot.Image === 'string' ? slot.Image.trim() : '';
  return slot.Inserted === false || image === '' || image === 'None';
}

/**
 * Which slot state makes DMTF's InsertMedia unsafe: an image in it. sushy-tools' empty slot reads
 * ConnectedVia "URI" with Image "" and Inserted false (peers README), Gigabyte's AMI Image "None"
 * (QUIRKS.md "VirtualMedia"): both are empty.
 */
export function genericOccupied(slot: Doc): string | null {
  if (slotEmpty(slot)) return null;
  return `${String(slot.Image)} is ${slot.Inserted === true ? 'inserted' : `connected (${String(slot.ConnectedVia ?? 'Inserted not said')})`}`;
}

export const redfishGeneric: RedfishFlavour = {
  name: 'redfish',
  capabilities: { reportsMacs: true, virtualMedia: true, nmi: true, persistentBoot: true, bootMode: true },
  insertBody: (imageUrl) => ({ Image: imageUrl, Inserted: true, WriteProtected: true }),
  occupied: genericOccupied,
  continuousAllowed: () => true,
  ejectOfEmptyError: () => false,
  bootFromVirtualCd: null,
  patchMountSlots: null,
};
