/**
 * The one interface every BMC driver implements (issue 9, before any implementation): Redfish and
 * its vendor flavours, and IPMI. Site agents run drivers; the control plane only queues commands.
 * A driver never retries a destructive action on its own and never guesses a result: every action
 * is verified by reading the state back (`verifyPower`), and what it could not verify it reports.
 */

/** The actions of the `power` verb (src/modules/metal/power.ts's POWER_ACTIONS), which a bmc.power command carries. */
export type PowerAction = 'on' | 'off' | 'graceful-off' | 'reset' | 'graceful-restart' | 'cycle' | 'nmi';
export type PowerState = 'on' | 'off' | 'powering-on' | 'powering-off' | 'unknown';
export type BootDevice = 'pxe' | 'disk' | 'cd' | 'bios';

export interface BmcEndpoint {
  /** Address (IPv4/IPv6/hostname), optionally with :port. */
  address: string;
  username: string;
  /** From the secret broker, handed to the driver only for the command being run. */
  password: string;
  /** The node's bmcDriverOptions (per-node CA, insecure flag, IPMI cipher suite, ...). */
  options: Readonly<Record<string, unknown>>;
}

/** What the BMC reports about the machine without booting it (Redfish: all of it; IPMI: the GUID). */
export interface OutOfBandInventory {
  uuid: string | null;
  macs: string[];
  cpus: { model: string; cores: number; threads: number }[] | null;
  memoryMiB: number | null;
  storage: { name: string; sizeBytes: number; serial: string | null }[] | null;
  manufacturer: string | null;
  model: string | null;
  serial: string | null;
  /**
   * The parts the BMC links but would not serve (404, 500, 501, a timeout, an error body): the
   * rest of the inventory is kept (Redfish; IPMI reads no parts).
   */
  unreadable?: { part: string; reason: string }[];
}

export interface DriverCapabilities {
  /** The BMC reports NIC MAC addresses (IPMI does not). */
  reportsMacs: boolean;
  virtualMedia: boolean;
  nmi: boolean;
  /** A persistent (Continuous) boot override is safe: Lenovo UEFI can boot-loop on it, so xcc says false. */
  persistentBoot: boolean;
  /** UEFI/Legacy choice in the override (Supermicro has no BootSourceOverrideMode). */
  bootMode: boolean;
}

/** Every way a BMC call can fail, as the timeline and lastError show it. */
export type BmcErrorCode =
  | 'BMC_UNREACHABLE'
  | 'BMC_TIMEOUT'
  | 'BMC_AUTH_FAILED'
  | 'BMC_TLS'
  | 'BMC_UNSUPPORTED'
  /** The BMC accepted an action and the state never followed within the deadline. */
  | 'BMC_NOT_APPLIED'
  | 'BMC_BUSY'
  | 'BMC_ERROR';

export class BmcError extends Error {
  constructor(readonly code: BmcErrorCode, message: string, readonly retryable = false) {
    super(message);
    this.name = 'BmcError';
  }
}

export interface BmcCallOptions {
  /** Aborts the call (the run was aborted, or the agent is stopping). */
  signal?: AbortSignal;
  /** How long a power change may take to show in the read-back before BMC_NOT_APPLIED. */
  verifyDeadlineMs?: number;
  /**
   * The command's idempotency key: a driver sends it (with a suffix per request) on every
   * destructive request, so a BMC or the simulator can tell a repeat from a new action.
   */
  idempotencyKey?: string;
}

/** A result with the notes a driver wants in the timeline ("ResetType PowerCycle gave 501; used ForceOff then On"). */
export interface DriverResult<T = void> {
  value: T;
  notes: string[];
  /**
   * The action was sent and accepted, but nothing this BMC shows proves its effect (a restart on a
   * BMC with no LastResetTime that showed no power transition; an NMI): why. Never success.
   */
  unverified?: string;
}

export interface BmcDriver {
  readonly name: string;
  readonly capabilities: DriverCapabilities;
  powerState(bmc: BmcEndpoint, opts?: BmcCallOptions): Promise<PowerState>;
  /** Sends the action and reads the state back until it matches or the deadline passes. */
  power(bmc: BmcEndpoint, action: PowerAction, opts?: BmcCallOptions): Promise<DriverResult<PowerState>>;
  setBootDevice(bmc: BmcEndpoint, device: BootDevice, mode: { persistent: boolean; uefi?: boolean }, opts?: BmcCallOptions): Promise<DriverResult>;
  insertMedia(bmc: BmcEndpoint, imageUrl: string, opts?: BmcCallOptions): Promise<DriverResult>;
  ejectMedia(bmc: BmcEndpoint, opts?: BmcCallOptions): Promise<DriverResult>;
  inventory(bmc: BmcEndpoint, opts?: BmcCallOptions): Promise<DriverResult<OutOfBandInventory>>;
}
