/**
 * The Redfish driver (DMTF Redfish over undici, see client.ts for addresses, TLS and sessions): a
 * thin composition of its parts, each vendor flavour (idrac.ts, ilo.ts, xcc.ts, cimc.ts,
 * supermicro.ts) being this driver with a RedfishFlavour of its quirks (flavour.ts).
 *
 * Every URL comes from the BMC: the service root's Systems and Links.Sessions, the system's
 * Actions['#ComputerSystem.Reset'].target, its VirtualMedia (or its managers' VirtualMedia), each
 * VirtualMedia's Actions targets, task monitors' Location headers, and redirects. Nothing is built.
 *
 * - call.ts: one call's context, the node's system, reads, PATCHes, tasks and read-back polling;
 * - power.ts: power state and the Reset action (POWER_PLANS), read back;
 * - boot-override.ts: the boot device (DMTF's Boot override, on the system or its settings object);
 * - virtual-media.ts: CD/DVD slots, insert and eject;
 * - inventory.ts: the out-of-band inventory.
 */
import type {
  BmcCallOptions,
  BmcDriver,
  BmcEndpoint,
  BootDevice,
  BootOverrideHeld,
  DriverCapabilities,
  DriverResult,
  PowerAction,
  PowerState,
} from '../driver';
import { callResult, DEFAULT_TUNING, openCall, readSystem, type CallContext, type DriverTuning } from './call';
import type { RedfishTransport } from './client';
import { bootTargetOf, planBootOverride, setBootDevice, type BootMode, type BootOverridePlan } from './boot-override';
import type { RedfishFlavour } from './flavour';
import { readSystemInventory, type RedfishInventory } from './inventory';
import { assertPowerAction, readPowerState, setPower } from './power';
import { ejectAllMedia, insertMedia, listMediaSlots, type MediaSlot } from './virtual-media';

export class RedfishDriver implements BmcDriver {
  readonly name: string;
  readonly capabilities: DriverCapabilities;
  private readonly tuning: Required<DriverTuning>;

  constructor(readonly flavour: RedfishFlavour, private readonly transport: RedfishTransport, tuning: DriverTuning = {}) {
    this.name = flavour.name;
    this.capabilities = flavour.capabilities;
    this.tuning = { ...DEFAULT_TUNING, ...tuning };
  }

  private open(bmc: BmcEndpoint, opts: BmcCallOptions | undefined): CallContext {
    return openCall(this.transport, this.tuning, bmc, opts);
  }

  async powerState(bmc: BmcEndpoint, opts?: BmcCallOptions): Promise<PowerState> {
    return readPowerState(this.open(bmc, opts));
  }

  async power(bmc: BmcEndpoint, action: PowerAction, opts?: BmcCallOptions): Promise<DriverResult<PowerState>> {
    assertPowerAction(action);
    const call = this.open(bmc, opts);
    return callResult(call, await setPower(call, action));
  }

  async setBootDevice(bmc: BmcEndpoint, device: BootDevice, mode: BootMode, opts?: BmcCallOptions): Promise<DriverResult<BootOverrideHeld | void>> {
    const call = this.open(bmc, opts);
    return callResult(call, await setBootDevice(call, this.flavour, device, mode));
  }

  /**
   * What setBootDevice would PATCH, and where, without sending it (the interop tests read it for
   * every captured BMC).
   */
  async bootOverridePlan(bmc: BmcEndpoint, device: BootDevice, mode: BootMode, opts?: BmcCallOptions): Promise<BootOverridePlan & { notes: string[] }> {
    const call = this.open(bmc, opts);
    bootTargetOf(device);
    const { pendingBoot: _pending, ...plan } = await planBootOverride(call, this.flavour, await readSystem(call), device, mode);
    return { ...plan, notes: [...call.client.notes, ...call.notes] };
  }

  /** The CD/DVD slots as the driver reads them (the interop tests compare them with each captured BMC). */
  async mediaSlots(bmc: BmcEndpoint, opts?: BmcCallOptions): Promise<MediaSlot[]> {
    return listMediaSlots(this.open(bmc, opts), this.flavour);
  }

  async insertMedia(bmc: BmcEndpoint, imageUrl: string, opts?: BmcCallOptions): Promise<DriverResult> {
    const call = this.open(bmc, opts);
    await insertMedia(call, this.flavour, imageUrl);
    return callResult(call, undefined);
  }

  async ejectMedia(bmc: BmcEndpoint, opts?: BmcCallOptions): Promise<DriverResult> {
    const call = this.open(bmc, opts);
    await ejectAllMedia(call, this.flavour);
    return callResult(call, undefined);
  }

  async inventory(bmc: BmcEndpoint, opts?: BmcCallOptions): Promise<DriverResult<RedfishInventory>> {
    const call = this.open(bmc, opts);
    return callResult(call, await readSystemInventory(call));
  }
}
