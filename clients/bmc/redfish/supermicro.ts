/**
 * Supermicro. Boot has no BootSourceOverrideMode (a PATCH naming it is refused), so the driver
 * never sends it and notes that the firmware's mode stays; capabilities say bootMode false.
 * InsertMedia is refused while Image is set, even when it is not Inserted: such a slot is ejected
 * (cleared) first. Supermicro lists Nmi among its ResetTypes.
 */
import { genericOccupied, redfishGeneric, type RedfishFlavour } from './driver';
import type { Doc } from './client';

export const supermicro: RedfishFlavour = {
  ...redfishGeneric,
  name: 'supermicro',
  capabilities: { ...redfishGeneric.capabilities, nmi: true, bootMode: false },
  occupied: (vm: Doc) => genericOccupied(vm) ?? (typeof vm.Image === 'string' && vm.Image ? `Image is set to ${vm.Image}` : null),
};
