/**
 * Supermicro. Older boards' Boot has no BootSourceOverrideMode (a PATCH naming it is refused): the
 * generic driver sends a Mode only where the BMC shows one, so those keep the firmware's mode
 * (noted), while X12, X13 and the HGX B200 boards, which show it, get UEFI (as NVIDIA's libredfish
 * sends them; redfish-captures: bmclib smc_1.14.0_systems_1.json, nvidia-libredfish supermicro,
 * lambdalabs HGX B200). InsertMedia is refused while Image is set, even when it is not Inserted:
 * such a slot is ejected (cleared) first. Supermicro lists Nmi among its ResetTypes.
 */
import { genericOccupied, redfishGeneric, type RedfishFlavour } from './flavour';
import type { Doc } from './client';

export const supermicro: RedfishFlavour = {
  ...redfishGeneric,
  name: 'supermicro',
  capabilities: { ...redfishGeneric.capabilities, nmi: true },
  occupied: (slot: Doc) => genericOccupied(slot) ?? (typeof slot.Image === 'string' && slot.Image && slot.Image !== 'None' ? `Image is set to ${slot.Image}` : null),
};
