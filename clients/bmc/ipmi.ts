import { spawn } from 'node:child_process';
import {
  BmcError,
  type BmcCallOptions,
  type BmcDriver,
  type BmcEndpoint,
  type BootDevice,
  type DriverCapabilities,
  type DriverResult,
  type OutOfBandInventory,
  type PowerAction,
  type PowerState,
} from './driver';
import { checkIpmiDriverOptions, MAX_PASSWORD_BYTES, parseIpmiAddress, positive, type IpmiDriverOptions, type IpmiNodeOptions } from './ipmi/options';
import { classify, ipmiGuidToUuid, parseBootFlags, parsePowerStatus, parseRawBytes } from './ipmi/parsing';

/**
 * The IPMI driver: every call is one `ipmitool -I lanplus` process, spawned with an argv array (no
 * shell), in a process group of its own so a timeout or an abort kills it and anything it started.
 *
 * The password reaches ipmitool only through IPMI_PASSWORD with `-E`: the command line of a
 * process is world-readable (ps, /proc/<pid>/cmdline), its environment is not. The child gets a
 * minimal environment, not this process's, so no other secret of the agent travels with it.
 *
 * `-v` is always on: without it ipmitool prints the same "Unable to establish IPMI v2 / RMCP+
 * session" for a wrong password, an unknown user and a BMC that never answers; with it the RAKP
 * error comes first, which is what tells BMC_AUTH_FAILED from BMC_UNREACHABLE.
 *
 * Its options and the node checks are in ipmi/options.ts, the reading of ipmitool's output and
 * errors in ipmi/parsing.ts.
 */

const MAX_OUTPUT_BYTES = 256 * 1024;

const BOOTDEV: Readonly<Record<BootDevice, { arg: string; selector: number }>> = {
  pxe: { arg: 'pxe', selector: 0x1 },
  disk: { arg: 'disk', selector: 0x2 },
  cd: { arg: 'cdrom', selector: 0x5 },
  bios: { arg: 'bios', selector: 0x6 },
};

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Commands that do no harm when they land twice. The others (reset, cycle, diag) are sent once
 * (-R 1): ipmitool retransmits an unanswered request under a new session sequence number, and a BMC
 * that executed the first copy and lost its answer would reset the machine again. Their failures
 * after sending are never retryable: whether the BMC acted is unknown, and the engine decides.
 */
const REPEATABLE: ReadonlySet<string> = new Set(['power status', 'power on', 'power off', 'power soft', 'chassis bootdev', 'chassis bootparam', 'raw 0x06']);

function isRepeatable(command: readonly string[]): boolean {
  return REPEATABLE.has(command.slice(0, 2).join(' '));
}

/** One call's BMC, checked: where to send, the node's options, the credentials. */
interface IpmiCall {
  host: string;
  port: number;
  address: string;
  node: IpmiNodeOptions;
  bmc: BmcEndpoint;
}

const CAPABILITIES: DriverCapabilities = { reportsMacs: false, virtualMedia: false, nmi: true, persistentBoot: true, bootMode: true };

class IpmiDriver implements BmcDriver {
  readonly name = 'ipmi';
  readonly capabilities = CAPABILITIES;
  private readonly ipmitool: string;
  private readonly timeoutMs: number;
  private readonly pollIntervalMs: number;
  private readonly verifyDeadlineMs: number;
  private readonly retransmitSeconds: number;
  private readonly retries: number;

  constructor(opts: IpmiDriverOptions) {
    this.ipmitool = opts.ipmitoolPath ?? 'ipmitool';
    this.timeoutMs = positive(opts.timeoutMs, 20_000, 'timeoutMs');
    this.pollIntervalMs = positive(opts.pollIntervalMs, 1000, 'pollIntervalMs');
    this.verifyDeadlineMs = positive(opts.verifyDeadlineMs, 30_000, 'verifyDeadlineMs');
    this.retransmitSeconds = positive(opts.retransmitSeconds, 1, 'retransmitSeconds');
    if (!Number.isInteger(this.retransmitSeconds)) throw new RangeError('ipmiDriver: retransmitSeconds must be whole seconds (ipmitool -N)');
    this.retries = opts.retries ?? 3;
    if (!Number.isInteger(this.retries) || this.retries < 1 || this.retries > 10) throw new RangeError('ipmiDriver: retries must be 1..10');
  }

  /** Everything that can be refused is refused here, before any process is started. */
  private prepare(bmc: BmcEndpoint): IpmiCall {
    const node = checkIpmiDriverOptions(bmc.options);
    const { host, port } = parseIpmiAddress(bmc.address);
    if (Buffer.byteLength(bmc.password, 'utf8') > MAX_PASSWORD_BYTES) {
      throw new BmcError('BMC_AUTH_FAILED', `the BMC password is longer than the ${MAX_PASSWORD_BYTES} bytes IPMI 2.0 can carry`);
    }
    if (bmc.username.length > 16) throw new BmcError('BMC_AUTH_FAILED', 'the BMC user name is longer than the 16 bytes IPMI 2.0 can carry');
    return { host, port, address: bmc.address, node, bmc };
  }

  /** One ipmitool run; resolves with its outcome, rejects only for a timeout, an abort or a missing binary. */
  private exec(call: IpmiCall, command: string[], opts: BmcCallOptions | undefined): Promise<Outcome> {
    const argv = [
      '-I', 'lanplus', '-H', call.host, '-p', String(call.port),
      ...(call.bmc.username ? ['-U', call.bmc.username] : []),
      '-E', '-C', String(call.node.cipherSuite), '-L', call.node.privilegeLevel,
      '-N', String(this.retransmitSeconds), '-R', String(isRepeatable(command) ? this.retries : 1), '-v',
      ...command,
    ];
    const what = `ipmitool ${command.slice(0, 2).join(' ')}`;
    return new Promise<Outcome>((resolve, reject) => {
      if (opts?.signal?.aborted) {
        reject(new BmcError('BMC_ERROR', `${what}: aborted before it was sent`));
        return;
      }
      const child = spawn(this.ipmitool, argv, {
        env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C', LC_ALL: 'C', IPMI_PASSWORD: call.bmc.password },
        stdio: ['ignore', 'pipe', 'pipe'],
        detached: true,
      });
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      let outBytes = 0;
      let errBytes = 0;
      let settled = false;
      let ended: 'timeout' | 'abort' | null = null;
      const killGroup = () => {
        if (child.pid === undefined) return;
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {
          // The group is already gone.
        }
      };
      const timer = setTimeout(() => {
        ended = 'timeout';
        killGroup();
      }, this.timeoutMs);
      const onAbort = () => {
        ended = 'abort';
        killGroup();
      };
      opts?.signal?.addEventListener('abort', onAbort, { once: true });
      const finish = (fn: () => void) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        opts?.signal?.removeEventListener('abort', onAbort);
        fn();
      };
      child.stdout.on('data', (c: Buffer) => {
        if (outBytes < MAX_OUTPUT_BYTES) out.push(c);
        outBytes += c.length;
      });
      child.stderr.on('data', (c: Buffer) => {
        if (errBytes < MAX_OUTPUT_BYTES) err.push(c);
        errBytes += c.length;
      });
      child.on('error', (e: NodeJS.ErrnoException) => {
        finish(() => reject(new BmcError('BMC_ERROR', e.code === 'ENOENT' ? `ipmitool not found (${this.ipmitool}): install the Debian package ipmitool` : `${what}: could not start ipmitool (${e.code ?? 'error'})`)));
      });
      child.on('close', (code) => {
        finish(() => {
          if (ended === 'timeout') {
            const repeatable = isRepeatable(command);
            reject(new BmcError('BMC_TIMEOUT', `${what}: no answer from ${call.address} within ${this.timeoutMs} ms (ipmitool killed)${repeatable ? '' : '; whether the BMC acted on it is unknown'}`, repeatable));
          } else if (ended === 'abort') {
            reject(new BmcError('BMC_ERROR', `${what}: aborted while running; whether the BMC acted on it is unknown`));
          } else {
            resolve({ code, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') });
          }
        });
      });
    });
  }

  /** Runs a command and throws the classified BmcError when ipmitool exits non-zero. */
  private async run(call: IpmiCall, command: string[], opts: BmcCallOptions | undefined): Promise<string> {
    const r = await this.exec(call, command, opts);
    if (r.code !== 0) throw classify(`ipmitool ${command.join(' ')}`, call.address, call.node.cipherSuite, r.stderr, call.bmc.password, isRepeatable(command));
    return r.stdout;
  }

  /**
   * Runs a command the BMC may lack: null when the session was made and the BMC answered the
   * command itself with "invalid command" or "parameter not supported" (completion codes C1h, 80h);
   * every other failure (credentials, reachability, a BMC without IPMI 2.0) throws as run() does.
   */
  private async runOptional(call: IpmiCall, command: string[], opts: BmcCallOptions | undefined): Promise<string | null> {
    const r = await this.exec(call, command, opts);
    if (r.code === 0) return r.stdout;
    const answered = !/Unable to establish|Error issuing|Get Auth Capabilities/i.test(r.stderr);
    if (answered && /rsp=0x(c1|80)\b|: (Invalid command|Parameter not supported)\s*$/im.test(r.stderr)) return null;
    throw classify(`ipmitool ${command.join(' ')}`, call.address, call.node.cipherSuite, r.stderr, call.bmc.password, isRepeatable(command));
  }

  private async readPower(call: IpmiCall, opts: BmcCallOptions | undefined): Promise<PowerState> {
    return parsePowerStatus(await this.run(call, ['power', 'status'], opts));
  }

  async powerState(bmc: BmcEndpoint, opts?: BmcCallOptions): Promise<PowerState> {
    return this.readPower(this.prepare(bmc), opts);
  }

  /**
   * Reads power status until it is `target` or `windowMs` passes. With needOffFirst (a cycle) it
   * waits for an off before the on, but takes an on at the deadline: IPMI has no cycle counter, so
   * an off phase shorter than the poll interval is never seen, and the caller notes it.
   */
  private async waitFor(call: IpmiCall, target: 'on' | 'off', action: string, windowMs: number, opts: BmcCallOptions | undefined, needOffFirst = false): Promise<{ sawOff: boolean; state: PowerState }> {
    const deadline = Date.now() + windowMs;
    let sawOff = false;
    for (;;) {
      const state = await this.readPower(call, opts);
      if (state === 'off') sawOff = true;
      if (state === target && (!needOffFirst || sawOff)) return { sawOff, state };
      const left = deadline - Date.now();
      if (left <= 0) {
        if (state === target) return { sawOff, state };
        throw new BmcError('BMC_NOT_APPLIED', `power ${action}: the BMC at ${call.address} accepted it, and power status still reads ${state} after ${windowMs} ms`);
      }
      await sleep(Math.min(this.pollIntervalMs, left), opts?.signal);
    }
  }

  async power(bmc: BmcEndpoint, action: PowerAction, opts?: BmcCallOptions): Promise<DriverResult<PowerState>> {
    const call = this.prepare(bmc);
    const notes: string[] = [];
    const verifyMs = opts?.verifyDeadlineMs ?? this.verifyDeadlineMs;
    const send = async (verb: string) => {
      await this.run(call, ['power', verb], opts);
    };
    switch (action) {
      case 'on':
      case 'off':
      case 'graceful-off': {
        const target = action === 'on' ? 'on' : 'off';
        await send(action === 'graceful-off' ? 'soft' : action);
        const { state } = await this.waitFor(call, target, action, verifyMs, opts);
        return { value: state, notes };
      }
      case 'reset':
      case 'cycle': {
        // A reset or a cycle of a machine that is off does nothing on a BMC that follows the spec
        // (chassis control on S4/S5), so the machine would stay off: power it on instead, as a
        // Redfish ForceRestart of an off system does.
        if ((await this.readPower(call, opts)) === 'off') {
          await send('on');
          notes.push(`the machine was off: sent power on instead of ${action}`);
          const { state } = await this.waitFor(call, 'on', action, verifyMs, opts);
          return { value: state, notes };
        }
        await send(action);
        // IPMI has no reset counter: only an off phase seen in power status proves the restart
        // (issue 20). A reset is watched for one as long as a Redfish restart without
        // LastResetTime (10 s); without it the result is unverified, never success.
        const window = action === 'reset' ? Math.min(verifyMs, 10_000) : verifyMs;
        const { sawOff, state } = await this.waitFor(call, 'on', action, window, opts, true);
        if (!sawOff) {
          notes.push(`sent power ${action}; not verifiable on this BMC (IPMI has no reset counter, and no off phase was seen): the machine's next boot is the proof`);
          return { value: state, notes, unverified: `IPMI reports no reset counter and power status showed no off phase within ${window} ms` };
        }
        return { value: state, notes };
      }
      case 'graceful-restart': {
        // IPMI has no graceful restart: ACPI soft-off, wait for off, then on (as Ironic's ipmitool driver does).
        if ((await this.readPower(call, opts)) === 'off') {
          notes.push('the machine was off: sent power on instead of a graceful restart');
        } else {
          await send('soft');
          await this.waitFor(call, 'off', 'soft (graceful restart)', verifyMs, opts);
          notes.push('IPMI has no graceful restart: sent a soft power off, saw the machine off, then power on');
        }
        await send('on');
        const { state } = await this.waitFor(call, 'on', action, verifyMs, opts);
        return { value: state, notes };
      }
      case 'nmi': {
        if ((await this.readPower(call, opts)) === 'off') {
          throw new BmcError('BMC_NOT_APPLIED', `power nmi: the machine behind ${call.address} is off: an NMI has nothing to interrupt, none sent`);
        }
        await send('diag');
        const state = await this.readPower(call, opts);
        return { value: state, notes };
      }
    }
  }

  async setBootDevice(bmc: BmcEndpoint, device: BootDevice, mode: { persistent: boolean; uefi?: boolean }, opts?: BmcCallOptions): Promise<DriverResult> {
    const call = this.prepare(bmc);
    const dev = BOOTDEV[device];
    if (!dev) throw new BmcError('BMC_UNSUPPORTED', `boot device ${String(device)}: the ipmi driver sets pxe, disk, cd or bios`);
    // Without efiboot the flags say legacy BIOS (IPMI has no "keep the current mode"): the workflow
    // passes uefi for UEFI machines, as the node's boot mode says.
    const flags = [...(mode.persistent ? ['persistent'] : []), ...(mode.uefi ? ['efiboot'] : [])];
    await this.run(call, ['chassis', 'bootdev', dev.arg, ...(flags.length ? [`options=${flags.join(',')}`] : [])], opts);
    const notes: string[] = [];
    const flagsOut = await this.runOptional(call, ['chassis', 'bootparam', 'get', '5'], opts);
    if (flagsOut === null) {
      notes.push('the BMC does not read boot flags back: the boot device is set but not verified (the boot it was for is the proof)');
      return { value: undefined, notes, unverified: 'the BMC does not read its boot flags back' };
    }
    const read = parseBootFlags(flagsOut);
    if (read.selector !== dev.selector) {
      throw new BmcError('BMC_NOT_APPLIED', `chassis bootdev ${dev.arg}: the BMC at ${call.address} accepted it, and its boot flags read back device selector 0x${read.selector.toString(16)}, not 0x${dev.selector.toString(16)}`);
    }
    // Many BMCs (ipmi_sim among them) keep only the device selector and read the other bits back as
    // zero; the override still applies, so this is a note, not a failure.
    const dropped = [
      ...(!read.valid ? ['valid'] : []),
      ...(mode.persistent && !read.persistent ? ['persistent'] : []),
      ...(mode.uefi && !read.efi ? ['efiboot'] : []),
    ];
    if (dropped.length) notes.push(`the BMC reads the boot flags back without ${dropped.join(', ')}; the device (${dev.arg}) is what was set`);
    return { value: undefined, notes };
  }

  async insertMedia(): Promise<DriverResult> {
    throw new BmcError('BMC_UNSUPPORTED', 'IPMI has no virtual media: bind driverBindings.virtualMedia to a Redfish driver');
  }

  async ejectMedia(): Promise<DriverResult> {
    throw new BmcError('BMC_UNSUPPORTED', 'IPMI has no virtual media: bind driverBindings.virtualMedia to a Redfish driver');
  }

  /** IPMI knows the machine only by its System GUID: no MACs, CPUs, memory or disks out of band. */
  async inventory(bmc: BmcEndpoint, opts?: BmcCallOptions): Promise<DriverResult<OutOfBandInventory>> {
    const call = this.prepare(bmc);
    const empty: OutOfBandInventory = { uuid: null, macs: [], cpus: null, memoryMiB: null, storage: null, manufacturer: null, model: null, serial: null };
    // The session this opens is what verifies the credentials, GUID or not.
    const stdout = await this.runOptional(call, ['raw', '0x06', '0x37'], opts);
    if (stdout === null) return { value: empty, notes: ['the BMC answers Get System GUID with "invalid command": no UUID'] };
    const wire = parseRawBytes(stdout);
    const decoded = ipmiGuidToUuid(wire, call.node.guidEncoding);
    return { value: { ...empty, uuid: decoded.uuid }, notes: decoded.note ? [decoded.note] : [] };
  }
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(new BmcError('BMC_ERROR', 'aborted while waiting for the power state'));
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(new BmcError('BMC_ERROR', 'aborted while waiting for the power state'));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** The IPMI driver (name `ipmi`), for a DriverRegistry. */
export function ipmiDriver(opts: IpmiDriverOptions = {}): BmcDriver {
  return new IpmiDriver(opts);
}
