import { spawn } from 'node:child_process';
import { isIP } from 'node:net';
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
 */

export interface IpmiDriverOptions {
  /** The ipmitool binary (Debian package ipmitool); looked up on PATH by default. */
  ipmitoolPath?: string;
  /** Every ipmitool call is killed (BMC_TIMEOUT) after this long. */
  timeoutMs?: number;
  /** How often a power change is read back while it is not visible yet. */
  pollIntervalMs?: number;
  /** The read-back deadline when the call gives no verifyDeadlineMs. */
  verifyDeadlineMs?: number;
  /** ipmitool -N: seconds between retransmissions of an unanswered request. */
  retransmitSeconds?: number;
  /**
   * ipmitool -R: how many times ipmitool sends each request before it gives up (1 = once; ipmitool
   * reads 0 as its default of 4). Only for commands that do no harm twice: see REPEATABLE.
   */
  retries?: number;
}

/** How a BMC puts its 16 GUID bytes on the wire (see ipmiGuidToUuid). */
export type GuidEncoding = 'ipmi' | 'smbios';

/** The per-node driverOptions this driver reads, checked. */
export interface IpmiNodeOptions {
  cipherSuite: number;
  privilegeLevel: 'ADMINISTRATOR' | 'OPERATOR';
  guidEncoding: GuidEncoding | 'auto';
}

const DEFAULT_CIPHER_SUITE = 3;
/** IPMI 2.0 table 22-20 defines suites 0-14; errata and ipmitool add the SHA-256 ones up to 17. */
const MAX_CIPHER_SUITE = 17;
/** IPMI 2.0 RAKP carries at most 20 password bytes; ipmitool refuses longer ones itself. */
const MAX_PASSWORD_BYTES = 20;
const MAX_OUTPUT_BYTES = 256 * 1024;

/**
 * A node setting this driver cannot work with, found before anything is sent: `field` is the
 * enroll input's name for it (bmc.address, bmc.driverOptions.cipherSuite, ...), so the enroll path
 * can turn it into INVALID_INPUT, and the driver's own check (for rows written before, or through
 * another path) says the same words in the run's lastError.
 */
export class IpmiConfigError extends BmcError {
  constructor(readonly field: string, readonly reason: string) {
    super('BMC_UNSUPPORTED', `${field}: ${reason}`);
    this.name = 'IpmiConfigError';
  }
}

/** Checks the node's driverOptions for this driver; unknown keys are left to other drivers. */
export function checkIpmiDriverOptions(options: Readonly<Record<string, unknown>> | null | undefined): IpmiNodeOptions {
  const o = options ?? {};
  let cipherSuite = DEFAULT_CIPHER_SUITE;
  if (o.cipherSuite !== undefined && o.cipherSuite !== null) {
    const cs = o.cipherSuite;
    if (cs === 0 || cs === '0') {
      throw new IpmiConfigError('bmc.driverOptions.cipherSuite', 'cipher suite 0 is refused: it authenticates nothing, so the BMC accepts any password. Use 3 (the default), or another suite the BMC supports');
    }
    if (typeof cs !== 'number' || !Number.isInteger(cs) || cs < 1 || cs > MAX_CIPHER_SUITE) {
      throw new IpmiConfigError('bmc.driverOptions.cipherSuite', `must be an integer from 1 to ${MAX_CIPHER_SUITE} (default ${DEFAULT_CIPHER_SUITE})`);
    }
    cipherSuite = cs;
  }
  let privilegeLevel: IpmiNodeOptions['privilegeLevel'] = 'ADMINISTRATOR';
  if (o.privilegeLevel !== undefined && o.privilegeLevel !== null) {
    const p = typeof o.privilegeLevel === 'string' ? o.privilegeLevel.toUpperCase() : '';
    // Chassis control needs OPERATOR; USER and CALLBACK could never power a machine.
    if (p !== 'ADMINISTRATOR' && p !== 'OPERATOR') throw new IpmiConfigError('bmc.driverOptions.privilegeLevel', 'must be ADMINISTRATOR or OPERATOR');
    privilegeLevel = p;
  }
  let guidEncoding: IpmiNodeOptions['guidEncoding'] = 'auto';
  if (o.guidEncoding !== undefined && o.guidEncoding !== null) {
    if (o.guidEncoding !== 'auto' && o.guidEncoding !== 'ipmi' && o.guidEncoding !== 'smbios') {
      throw new IpmiConfigError('bmc.driverOptions.guidEncoding', 'must be auto, ipmi or smbios');
    }
    guidEncoding = o.guidEncoding;
  }
  return { cipherSuite, privilegeLevel, guidEncoding };
}

const HOST_NAME = /^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/** host, IPv4, IPv6 or [IPv6], each optionally with :port (ipmi_sim and BMCs behind NAT use another port than 623). */
export function parseIpmiAddress(address: string): { host: string; port: number } {
  const value = address.trim();
  const bad = (why: string) => new IpmiConfigError('bmc.address', `the ipmi driver takes host[:port]; ${why}`);
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) throw bad('a URL is for Redfish drivers');
  const portOf = (p: string | undefined): number => {
    if (p === undefined) return 623;
    if (!/^\d{1,5}$/.test(p) || Number(p) < 1 || Number(p) > 65535) throw bad(`"${p}" is not a port`);
    return Number(p);
  };
  const bracketed = /^\[([^\]]+)\](?::([^:]*))?$/.exec(value);
  if (bracketed) {
    if (isIP(bracketed[1]!) !== 6) throw bad('the bracketed part is not an IPv6 address');
    return { host: bracketed[1]!, port: portOf(bracketed[2]) };
  }
  if (isIP(value) === 6) return { host: value, port: 623 };
  const [host, port, ...rest] = value.split(':');
  if (rest.length > 0 || !host || (!isIP(host) && !HOST_NAME.test(host))) throw bad(`"${value}" is not a host name or IP address`);
  return { host, port: portOf(port) };
}

/**
 * What enroll checks for a node any of whose bindings is `ipmi`: its address and driverOptions,
 * as IpmiConfigError naming the field, before anything is written.
 */
export function checkIpmiNode(address: string, options: Readonly<Record<string, unknown>> | null | undefined): void {
  parseIpmiAddress(address);
  checkIpmiDriverOptions(options);
}

function hex(bytes: ArrayLike<number>, from: number, to: number): string {
  let s = '';
  for (let i = from; i < to; i++) s += bytes[i]!.toString(16).padStart(2, '0');
  return s;
}

function canonical(b: readonly number[]): string {
  return `${hex(b, 0, 4)}-${hex(b, 4, 6)}-${hex(b, 6, 8)}-${hex(b, 8, 10)}-${hex(b, 10, 16)}`;
}

/** An RFC 4122 UUID: variant bits 10, version 1 to 5 (what firmware generates; SMBIOS 2.6 says RFC 4122). */
function isRfc4122(b: readonly number[]): boolean {
  const version = b[6]! >> 4;
  return (b[8]! & 0xc0) === 0x80 && version >= 1 && version <= 5;
}

/**
 * The machine's UUID from the 16 bytes of Get System GUID (NetFn App, cmd 0x37; what `ipmitool mc
 * guid` sends), as the canonical lower-case string that SMBIOS-reading software prints: the OS
 * (/sys/class/dmi/id/product_uuid, dmidecode), the ramdisk's report and Redfish's UUID.
 *
 * Canonical order is u0..u15, as printed. SMBIOS 2.6+ stores u3 u2 u1 u0 u5 u4 u7 u6 u8..u15 (the
 * first three fields little-endian) and every reader swaps those back. The IPMI spec (2.0, section
 * 20.8, and Get System GUID) stores the whole GUID least-significant byte first, u15..u0: that is
 * `ipmi`. Many BMCs instead hand out the SMBIOS bytes unchanged: that is `smbios`. `auto` decodes
 * both ways and takes the one that is an RFC 4122 UUID when exactly one is; when both or neither
 * are, it follows the spec (`ipmi`) and says so in the note, and driverOptions.guidEncoding fixes
 * it for such a BMC. ipmitool's own `mc guid` output is not parsed: its decoding is a heuristic of
 * its own that changed between versions (1.8.18 printed the bytes as they came).
 *
 * All-zero and all-FF GUIDs are firmware placeholders that identify no machine: null.
 */
export function ipmiGuidToUuid(wire: readonly number[], encoding: GuidEncoding | 'auto' = 'auto'): { uuid: string | null; encoding: GuidEncoding; note: string | null } {
  if (wire.length !== 16 || wire.some((b) => !Number.isInteger(b) || b < 0 || b > 255)) {
    throw new BmcError('BMC_ERROR', `Get System GUID returned ${wire.length} bytes, not 16`);
  }
  if (wire.every((b) => b === 0) || wire.every((b) => b === 0xff)) {
    return { uuid: null, encoding: encoding === 'smbios' ? 'smbios' : 'ipmi', note: `the BMC reports a placeholder GUID (${hex(wire, 0, 16)}): no UUID` };
  }
  const asIpmi = [...wire].reverse();
  const w = wire;
  const asSmbios = [w[3]!, w[2]!, w[1]!, w[0]!, w[5]!, w[4]!, w[7]!, w[6]!, ...w.slice(8)];
  if (encoding === 'ipmi') return { uuid: canonical(asIpmi), encoding, note: null };
  if (encoding === 'smbios') return { uuid: canonical(asSmbios), encoding, note: null };
  const ipmiOk = isRfc4122(asIpmi);
  const smbiosOk = isRfc4122(asSmbios);
  if (ipmiOk && !smbiosOk) return { uuid: canonical(asIpmi), encoding: 'ipmi', note: 'GUID read in IPMI byte order (the spec\'s)' };
  if (smbiosOk && !ipmiOk) return { uuid: canonical(asSmbios), encoding: 'smbios', note: 'GUID read in SMBIOS byte order (the BMC sends the SMBIOS bytes as they are)' };
  return {
    uuid: canonical(asIpmi),
    encoding: 'ipmi',
    note: `GUID byte order is ambiguous (${ipmiOk ? 'both' : 'neither'} order gives an RFC 4122 UUID): read in IPMI byte order; set driverOptions.guidEncoding if the OS reports ${canonical(asSmbios)}`,
  };
}

/** The 16 bytes of `ipmitool raw 0x06 0x37` output (" a1 23 ... ef", possibly over several lines). */
export function parseRawBytes(stdout: string): number[] {
  const tokens = stdout.trim().split(/\s+/).filter(Boolean);
  if (tokens.length === 0 || tokens.some((t) => !/^[0-9a-f]{2}$/i.test(t))) throw new BmcError('BMC_ERROR', 'ipmitool raw printed something that is not hex bytes');
  return tokens.map((t) => parseInt(t, 16));
}

export function parsePowerStatus(stdout: string): PowerState {
  const m = /Chassis Power is (on|off)\b/i.exec(stdout);
  if (!m) throw new BmcError('BMC_ERROR', 'ipmitool power status printed no "Chassis Power is on|off"');
  return m[1]!.toLowerCase() as PowerState;
}

/** Boot flags (chassis boot option parameter 5, IPMI 2.0 table 28-14) from `chassis bootparam get 5`. */
export interface BootFlags {
  valid: boolean;
  persistent: boolean;
  efi: boolean;
  /** Boot device selector, bits 5:2 of data byte 2. */
  selector: number;
}

export function parseBootFlags(stdout: string): BootFlags {
  const m = /Boot parameter data:\s*([0-9a-f]+)/i.exec(stdout);
  if (!m || m[1]!.length < 4) throw new BmcError('BMC_ERROR', 'ipmitool chassis bootparam get 5 printed no boot parameter data');
  const b0 = parseInt(m[1]!.slice(0, 2), 16);
  const b1 = parseInt(m[1]!.slice(2, 4), 16);
  return { valid: (b0 & 0x80) !== 0, persistent: (b0 & 0x40) !== 0, efi: (b0 & 0x20) !== 0, selector: (b1 >> 2) & 0x0f };
}

const BOOTDEV: Readonly<Record<BootDevice, { arg: string; selector: number }>> = {
  pxe: { arg: 'pxe', selector: 0x1 },
  disk: { arg: 'disk', selector: 0x2 },
  cd: { arg: 'cdrom', selector: 0x5 },
  bios: { arg: 'bios', selector: 0x6 },
};

/** Lines ipmitool -v prints on every call, noise in an error message. */
const NOISE = [/^Loading IANA PEN Registry/, /^Running Get VSO Capabilities/, /^Discovered IPMB address/, /^Invalid completion code received: Invalid command$/, /^RAW (REQ|RSP)\b/];

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** ipmitool's stderr for a message: without the -v chatter, without the password, short. */
function scrub(stderr: string, password: string): string {
  let lines = stderr.split('\n').map((l) => l.trim().replace(/^>\s*/, '')).filter((l) => l && !NOISE.some((n) => n.test(l)));
  if (password) lines = lines.map((l) => l.split(password).join('***'));
  const text = lines.join('; ');
  return text.length > 400 ? `${text.slice(0, 400)}...` : text || '(no output)';
}

/**
 * What a failed ipmitool run means. The RAKP messages come from the RMCP+ handshake (IPMI 2.0
 * section 13.31): status 0x0d "unauthorized name" for an unknown user, an invalid RAKP 2 HMAC for
 * a wrong password (the BMC's HMAC is keyed with the password we hold).
 */
function classify(what: string, address: string, cipherSuite: number, stderr: string, password: string, repeatable: boolean): BmcError {
  const text = scrub(stderr, password);
  const has = (re: RegExp) => re.test(stderr);
  // Before the credentials: a BMC out of sessions says so in its RAKP or open-session answer.
  if (has(/insufficient resources|Node busy|Out of space|Command response could not be provided|Timeout while processing command|temporarily unavailable/i)) {
    return new BmcError('BMC_BUSY', `${what}: the BMC at ${address} is busy (${text})`, true);
  }
  if (has(/RAKP \d+ HMAC is invalid|unauthorized name|invalid (user ?name|password)|unauthorized role|invalid role|Insufficient privilege|privilege level (not authorized|exceeds)|RAKP \d+ message indicates an error/i)) {
    return new BmcError('BMC_AUTH_FAILED', `${what}: the BMC at ${address} refused the credentials (${text})`);
  }
  if (has(/invalid (authentication|integrity|confidentiality) algorithm|no matching cipher suite|cipher suite .*(not|un)supported/i)) {
    return new BmcError('BMC_UNSUPPORTED', `${what}: the BMC at ${address} does not support cipher suite ${cipherSuite} (bmc.driverOptions.cipherSuite): ${text}`);
  }
  // The session was made and the command sent, and no answer came back: it may have been applied.
  if (has(/Unable to set Chassis Power Control/i)) {
    return new BmcError('BMC_TIMEOUT', `${what}: sent, and the BMC at ${address} never answered${repeatable ? '' : '; whether it acted on it is unknown'} (${text})`, repeatable);
  }
  if (has(/does not support IPMI v2 \/ RMCP\+/i)) {
    return new BmcError('BMC_UNSUPPORTED', `${what}: the BMC at ${address} speaks only IPMI 1.5; the ipmi driver needs IPMI 2.0 (RMCP+, lanplus)`);
  }
  if (has(/Address lookup for .* failed|Could not open socket|Get Auth Capabilities error|Error issuing Get Channel Authentication Capabilities|No response from remote controller|Network is unreachable|Connection refused/i)) {
    return new BmcError('BMC_UNREACHABLE', `${what}: no IPMI answer from ${address} (${text})`, true);
  }
  if (has(/Invalid data field in request|Invalid command\b|Command not supported|Parameter not supported|Request data field length limit exceeded/i)) {
    return new BmcError('BMC_UNSUPPORTED', `${what}: the BMC at ${address} does not support it (${text})`);
  }
  return new BmcError('BMC_ERROR', `${what}: ipmitool failed against ${address} (${text})`);
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

interface Prepared {
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
  private prepare(bmc: BmcEndpoint): Prepared {
    const node = checkIpmiDriverOptions(bmc.options);
    const { host, port } = parseIpmiAddress(bmc.address);
    if (Buffer.byteLength(bmc.password, 'utf8') > MAX_PASSWORD_BYTES) {
      throw new BmcError('BMC_AUTH_FAILED', `the BMC password is longer than the ${MAX_PASSWORD_BYTES} bytes IPMI 2.0 can carry`);
    }
    if (bmc.username.length > 16) throw new BmcError('BMC_AUTH_FAILED', 'the BMC user name is longer than the 16 bytes IPMI 2.0 can carry');
    return { host, port, address: bmc.address, node, bmc };
  }

  /** One ipmitool run; resolves with its outcome, rejects only for a timeout, an abort or a missing binary. */
  private exec(p: Prepared, command: string[], opts: BmcCallOptions | undefined): Promise<Outcome> {
    const argv = [
      '-I', 'lanplus', '-H', p.host, '-p', String(p.port),
      ...(p.bmc.username ? ['-U', p.bmc.username] : []),
      '-E', '-C', String(p.node.cipherSuite), '-L', p.node.privilegeLevel,
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
        env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C', LC_ALL: 'C', IPMI_PASSWORD: p.bmc.password },
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
            reject(new BmcError('BMC_TIMEOUT', `${what}: no answer from ${p.address} within ${this.timeoutMs} ms (ipmitool killed)${repeatable ? '' : '; whether the BMC acted on it is unknown'}`, repeatable));
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
  private async run(p: Prepared, command: string[], opts: BmcCallOptions | undefined): Promise<string> {
    const r = await this.exec(p, command, opts);
    if (r.code !== 0) throw classify(`ipmitool ${command.join(' ')}`, p.address, p.node.cipherSuite, r.stderr, p.bmc.password, isRepeatable(command));
    return r.stdout;
  }

  /**
   * Runs a command the BMC may lack: null when the session was made and the BMC answered the
   * command itself with "invalid command" or "parameter not supported" (completion codes C1h, 80h);
   * every other failure (credentials, reachability, a BMC without IPMI 2.0) throws as run() does.
   */
  private async runOptional(p: Prepared, command: string[], opts: BmcCallOptions | undefined): Promise<string | null> {
    const r = await this.exec(p, command, opts);
    if (r.code === 0) return r.stdout;
    const answered = !/Unable to establish|Error issuing|Get Auth Capabilities/i.test(r.stderr);
    if (answered && /rsp=0x(c1|80)\b|: (Invalid command|Parameter not supported)\s*$/im.test(r.stderr)) return null;
    throw classify(`ipmitool ${command.join(' ')}`, p.address, p.node.cipherSuite, r.stderr, p.bmc.password, isRepeatable(command));
  }

  private async readPower(p: Prepared, opts: BmcCallOptions | undefined): Promise<PowerState> {
    return parsePowerStatus(await this.run(p, ['power', 'status'], opts));
  }

  async powerState(bmc: BmcEndpoint, opts?: BmcCallOptions): Promise<PowerState> {
    return this.readPower(this.prepare(bmc), opts);
  }

  /**
   * Reads power status until it is `target` or `windowMs` passes. With needOffFirst (a cycle) it
   * waits for an off before the on, but takes an on at the deadline: IPMI has no cycle counter, so
   * an off phase shorter than the poll interval is never seen, and the caller notes it.
   */
  private async waitFor(p: Prepared, target: 'on' | 'off', action: string, windowMs: number, opts: BmcCallOptions | undefined, needOffFirst = false): Promise<{ sawOff: boolean; state: PowerState }> {
    const deadline = Date.now() + windowMs;
    let sawOff = false;
    for (;;) {
      const state = await this.readPower(p, opts);
      if (state === 'off') sawOff = true;
      if (state === target && (!needOffFirst || sawOff)) return { sawOff, state };
      const left = deadline - Date.now();
      if (left <= 0) {
        if (state === target) return { sawOff, state };
        throw new BmcError('BMC_NOT_APPLIED', `power ${action}: the BMC at ${p.address} accepted it, and power status still reads ${state} after ${windowMs} ms`);
      }
      await sleep(Math.min(this.pollIntervalMs, left), opts?.signal);
    }
  }

  async power(bmc: BmcEndpoint, action: PowerAction, opts?: BmcCallOptions): Promise<DriverResult<PowerState>> {
    const p = this.prepare(bmc);
    const notes: string[] = [];
    const verifyMs = opts?.verifyDeadlineMs ?? this.verifyDeadlineMs;
    const send = async (verb: string) => {
      await this.run(p, ['power', verb], opts);
    };
    switch (action) {
      case 'on':
      case 'off':
      case 'graceful-off': {
        const target = action === 'on' ? 'on' : 'off';
        await send(action === 'graceful-off' ? 'soft' : action);
        const { state } = await this.waitFor(p, target, action, verifyMs, opts);
        return { value: state, notes };
      }
      case 'reset':
      case 'cycle': {
        // A reset or a cycle of a machine that is off does nothing on a BMC that follows the spec
        // (chassis control on S4/S5), so the machine would stay off: power it on instead, as a
        // Redfish ForceRestart of an off system does.
        if ((await this.readPower(p, opts)) === 'off') {
          await send('on');
          notes.push(`the machine was off: sent power on instead of ${action}`);
          const { state } = await this.waitFor(p, 'on', action, verifyMs, opts);
          return { value: state, notes };
        }
        await send(action);
        // IPMI has no reset counter: only an off phase seen in power status proves the restart
        // (issue 20). A reset is watched for one as long as a Redfish restart without
        // LastResetTime (10 s); without it the result is unverified, never success.
        const window = action === 'reset' ? Math.min(verifyMs, 10_000) : verifyMs;
        const { sawOff, state } = await this.waitFor(p, 'on', action, window, opts, true);
        if (!sawOff) {
          notes.push(`sent power ${action}; not verifiable on this BMC (IPMI has no reset counter, and no off phase was seen): the machine's next boot is the proof`);
          return { value: state, notes, unverified: `IPMI reports no reset counter and power status showed no off phase within ${window} ms` };
        }
        return { value: state, notes };
      }
      case 'graceful-restart': {
        // IPMI has no graceful restart: ACPI soft-off, wait for off, then on (as Ironic's ipmitool driver does).
        if ((await this.readPower(p, opts)) === 'off') {
          notes.push('the machine was off: sent power on instead of a graceful restart');
        } else {
          await send('soft');
          await this.waitFor(p, 'off', 'soft (graceful restart)', verifyMs, opts);
          notes.push('IPMI has no graceful restart: sent a soft power off, saw the machine off, then power on');
        }
        await send('on');
        const { state } = await this.waitFor(p, 'on', action, verifyMs, opts);
        return { value: state, notes };
      }
      case 'nmi': {
        if ((await this.readPower(p, opts)) === 'off') {
          throw new BmcError('BMC_NOT_APPLIED', `power nmi: the machine behind ${p.address} is off: an NMI has nothing to interrupt, none sent`);
        }
        await send('diag');
        const state = await this.readPower(p, opts);
        return { value: state, notes };
      }
    }
  }

  async setBootDevice(bmc: BmcEndpoint, device: BootDevice, mode: { persistent: boolean; uefi?: boolean }, opts?: BmcCallOptions): Promise<DriverResult> {
    const p = this.prepare(bmc);
    const dev = BOOTDEV[device];
    if (!dev) throw new BmcError('BMC_UNSUPPORTED', `boot device ${String(device)}: the ipmi driver sets pxe, disk, cd or bios`);
    // Without efiboot the flags say legacy BIOS (IPMI has no "keep the current mode"): the workflow
    // passes uefi for UEFI machines, as the node's boot mode says.
    const flags = [...(mode.persistent ? ['persistent'] : []), ...(mode.uefi ? ['efiboot'] : [])];
    await this.run(p, ['chassis', 'bootdev', dev.arg, ...(flags.length ? [`options=${flags.join(',')}`] : [])], opts);
    const notes: string[] = [];
    const flagsOut = await this.runOptional(p, ['chassis', 'bootparam', 'get', '5'], opts);
    if (flagsOut === null) {
      notes.push('the BMC does not read boot flags back: the boot device is set but not verified (the boot it was for is the proof)');
      return { value: undefined, notes, unverified: 'the BMC does not read its boot flags back' };
    }
    const read = parseBootFlags(flagsOut);
    if (read.selector !== dev.selector) {
      throw new BmcError('BMC_NOT_APPLIED', `chassis bootdev ${dev.arg}: the BMC at ${p.address} accepted it, and its boot flags read back device selector 0x${read.selector.toString(16)}, not 0x${dev.selector.toString(16)}`);
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
    const p = this.prepare(bmc);
    const empty: OutOfBandInventory = { uuid: null, macs: [], cpus: null, memoryMiB: null, storage: null, manufacturer: null, model: null, serial: null };
    // The session this opens is what verifies the credentials, GUID or not.
    const stdout = await this.runOptional(p, ['raw', '0x06', '0x37'], opts);
    if (stdout === null) return { value: empty, notes: ['the BMC answers Get System GUID with "invalid command": no UUID'] };
    const wire = parseRawBytes(stdout);
    const decoded = ipmiGuidToUuid(wire, p.node.guidEncoding);
    return { value: { ...empty, uuid: decoded.uuid }, notes: decoded.note ? [decoded.note] : [] };
  }
}

function positive(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0) throw new RangeError(`ipmiDriver: ${name} must be a positive number`);
  return value;
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
