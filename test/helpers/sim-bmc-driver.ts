import { BmcError, type BmcCallOptions, type BmcDriver, type BmcEndpoint, type BootDevice, type DriverResult, type OutOfBandInventory, type PowerAction, type PowerState } from '../../clients/bmc/driver';
import { DriverRegistry } from '../../clients/bmc/registry';

/**
 * A small BMC driver for the site agent's tests: it speaks just enough Redfish (basic auth,
 * links followed from the service root, ComputerSystem.Reset, the Boot override) to drive the
 * Redfish simulator (test/sim/redfish), which stands in for the hardware. The real Redfish driver
 * is clients/bmc/redfish; this one exists so the agent can be tested end to end while that one is
 * written, and so a spawned agent process can load it (it compiles to dist/test/helpers).
 */
type Json = Record<string, any>;

const RESET_TYPE: Record<PowerAction, string> = {
  on: 'On', off: 'ForceOff', 'graceful-off': 'GracefulShutdown', reset: 'ForceRestart', 'graceful-restart': 'GracefulRestart', cycle: 'PowerCycle', nmi: 'Nmi',
};
const EXPECT: Record<PowerAction, PowerState | null> = { on: 'on', off: 'off', 'graceful-off': 'off', reset: 'on', 'graceful-restart': 'on', cycle: 'on', nmi: null };
const BOOT_TARGET: Record<BootDevice, string> = { pxe: 'Pxe', disk: 'Hdd', cd: 'Cd', bios: 'BiosSetup' };

function powerOf(redfish: unknown): PowerState {
  switch (redfish) {
    case 'On': return 'on';
    case 'Off': return 'off';
    case 'PoweringOn': return 'powering-on';
    case 'PoweringOff': return 'powering-off';
    default: return 'unknown';
  }
}

export class SimBmcDriver implements BmcDriver {
  readonly capabilities = { reportsMacs: true, virtualMedia: false, nmi: true, persistentBoot: true, bootMode: true };
  /** Every call, for tests that check what the agent ran (never the password). */
  readonly calls: { op: string; address: string; detail: string }[] = [];

  constructor(readonly name = 'redfish') {}

  private base(bmc: BmcEndpoint): string {
    return /^https?:\/\//.test(bmc.address) ? bmc.address : `http://${bmc.address}`;
  }

  private async rf(bmc: BmcEndpoint, path: string, init: { method?: string; body?: unknown; signal?: AbortSignal } = {}): Promise<Json | null> {
    let res: Response;
    try {
      res = await fetch(this.base(bmc) + path, {
        method: init.method ?? 'GET',
        headers: {
          authorization: `Basic ${Buffer.from(`${bmc.username}:${bmc.password}`).toString('base64')}`,
          ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}),
        },
        body: init.body === undefined ? undefined : JSON.stringify(init.body),
        signal: init.signal ? AbortSignal.any([init.signal, AbortSignal.timeout(5000)]) : AbortSignal.timeout(5000),
      });
    } catch (error) {
      const name = (error as Error).name;
      if (name === 'TimeoutError') throw new BmcError('BMC_TIMEOUT', `${bmc.address} did not answer ${path} within 5 s`, true);
      throw new BmcError('BMC_UNREACHABLE', `${bmc.address}: ${(error as Error).message}`, true);
    }
    const text = await res.text();
    if (res.status === 401 || res.status === 403) throw new BmcError('BMC_AUTH_FAILED', `${bmc.address} refused the credentials of user ${bmc.username} (${res.status})`);
    if (res.status === 503) throw new BmcError('BMC_BUSY', `${bmc.address} is busy (503)`, true);
    if (res.status >= 400) throw new BmcError('BMC_ERROR', `${bmc.address} answered ${res.status} to ${init.method ?? 'GET'} ${path}`);
    return text ? (JSON.parse(text) as Json) : null;
  }

  private async systemPath(bmc: BmcEndpoint, signal?: AbortSignal): Promise<string> {
    const root = await this.rf(bmc, '/redfish/v1', { signal });
    const systems = await this.rf(bmc, root!.Systems['@odata.id'], { signal });
    return systems!.Members[0]['@odata.id'] as string;
  }

  async powerState(bmc: BmcEndpoint, opts: BmcCallOptions = {}): Promise<PowerState> {
    this.calls.push({ op: 'powerState', address: bmc.address, detail: '' });
    const sys = await this.rf(bmc, await this.systemPath(bmc, opts.signal), { signal: opts.signal });
    return powerOf(sys!.PowerState);
  }

  async power(bmc: BmcEndpoint, action: PowerAction, opts: BmcCallOptions = {}): Promise<DriverResult<PowerState>> {
    this.calls.push({ op: 'power', address: bmc.address, detail: action });
    const path = await this.systemPath(bmc, opts.signal);
    const sys = await this.rf(bmc, path, { signal: opts.signal });
    await this.rf(bmc, sys!.Actions['#ComputerSystem.Reset'].target as string, { method: 'POST', body: { ResetType: RESET_TYPE[action] }, signal: opts.signal });
    const want = EXPECT[action];
    const deadline = Date.now() + (opts.verifyDeadlineMs ?? 5000);
    for (;;) {
      const state = powerOf((await this.rf(bmc, path, { signal: opts.signal }))!.PowerState);
      if (want === null || state === want) return { value: state, notes: [`ResetType ${RESET_TYPE[action]}; read back ${state}`] };
      if (Date.now() > deadline) throw new BmcError('BMC_NOT_APPLIED', `${bmc.address} accepted ${RESET_TYPE[action]} but the power state stayed ${state}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async setBootDevice(bmc: BmcEndpoint, device: BootDevice, mode: { persistent: boolean; uefi?: boolean }, opts: BmcCallOptions = {}): Promise<DriverResult> {
    this.calls.push({ op: 'setBootDevice', address: bmc.address, detail: device });
    const path = await this.systemPath(bmc, opts.signal);
    await this.rf(bmc, path, { method: 'PATCH', body: { Boot: { BootSourceOverrideTarget: BOOT_TARGET[device], BootSourceOverrideEnabled: mode.persistent ? 'Continuous' : 'Once' } }, signal: opts.signal });
    return { value: undefined, notes: [] };
  }

  async insertMedia(bmc: BmcEndpoint): Promise<DriverResult> {
    throw new BmcError('BMC_UNSUPPORTED', `the test driver has no virtual media (${bmc.address})`);
  }

  async ejectMedia(bmc: BmcEndpoint): Promise<DriverResult> {
    throw new BmcError('BMC_UNSUPPORTED', `the test driver has no virtual media (${bmc.address})`);
  }

  async inventory(bmc: BmcEndpoint, opts: BmcCallOptions = {}): Promise<DriverResult<OutOfBandInventory>> {
    this.calls.push({ op: 'inventory', address: bmc.address, detail: '' });
    const path = await this.systemPath(bmc, opts.signal);
    const sys = (await this.rf(bmc, path, { signal: opts.signal }))!;
    const nics = await this.rf(bmc, sys.EthernetInterfaces['@odata.id'] as string, { signal: opts.signal });
    const macs: string[] = [];
    for (const m of (nics?.Members ?? []) as Json[]) {
      const nic = await this.rf(bmc, m['@odata.id'] as string, { signal: opts.signal });
      if (typeof nic?.MACAddress === 'string') macs.push(nic.MACAddress.toLowerCase());
    }
    return {
      value: { uuid: (sys.UUID as string | undefined)?.toLowerCase() ?? null, macs, cpus: null, memoryMiB: null, storage: null,
        manufacturer: (sys.Manufacturer as string | undefined) ?? null, model: (sys.Model as string | undefined) ?? null, serial: (sys.SerialNumber as string | undefined) ?? null },
      notes: [],
    };
  }
}

export function simDriverRegistry(driver = new SimBmcDriver()): DriverRegistry {
  return new DriverRegistry().register(driver);
}
