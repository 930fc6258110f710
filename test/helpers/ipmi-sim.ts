/**
 * Real IPMI BMCs for tests: OpenIPMI's `ipmi_sim` (Debian package openipmi), one process per
 * machine, each in its own process group on its own UDP port of 127.0.0.1, spoken to by the real
 * `ipmitool -I lanplus` (Debian package ipmitool). Nothing here fakes the protocol: sessions,
 * RAKP authentication, cipher suites and chassis commands are ipmi_sim's own.
 *
 * The machine behind each BMC is a `chassis_control` hook program (lan.conf), which ipmi_sim runs
 * as `<hook> <machine-dir> get power|boot` and `<hook> <machine-dir> set power 0|1 | reset 1 |
 * shutdown 1 | boot pxe|default|cdrom|bios|none`. It keeps the power state in files, so `power
 * status` reads back what the client set, and appends every `set` to a calls file: what a test
 * counts destructive calls from. ipmi_sim runs the hook synchronously, so it never sleeps: a
 * delayed power change is a pending value with the time it takes effect.
 *
 * What ipmi_sim 2.0.33 does and does not do, as tests rely on it:
 *   - `power cycle`: set power 0 at once, then its own 1 s timer sets power 1.
 *   - `power soft`: only `set shutdown 1`; the hook plays the OS and powers off (ignoreSoft: never).
 *   - `power diag` (NMI): refused with "Invalid data field in request"; the hook is not called.
 *   - boot flags: only the device selector reaches the hook (`disk` arrives as `default`, ipmi_sim's
 *     name for "force boot from default hard drive"); the persistent and EFI bits are dropped, and
 *     read back as zero. Which options the client asked for is in the argv a recordingIpmitool saw.
 *   - Get System GUID answers with lan.conf's `guid`, its 16 bytes in the order given; without one
 *     ipmi_sim speaks no IPMI 2.0 at all (RAKP needs the GUID), so lanplus fails.
 *
 * API:
 *   requireIpmiTools()  throws, naming the Debian packages, when ipmi_sim or ipmitool is missing
 *   startIpmiSim({ machines?: number | IpmiSimMachineSpec[], user?, password?, guid?, onBoot?, bootOverride? })
 *     onBoot(machine, { override }) on every start (off -> on applied, or a reset while on), with
 *     bootOverride 'once' (default: the override is used up) or 'persistent'
 *   IpmiSim.machines[i]: address ('127.0.0.1:<port>'), calls(), destructiveCalls(), boots(), power(),
 *     bootDevice(), setPower(), setFaults({ ignorePower, powerDelayMs, ignoreSoft }), stop(), start()
 *     (a delayed power change applies at the first hook call after its time: any power status read)
 *   IpmiSim.stop(): kills every ipmi_sim and removes the temp dir
 *   recordingIpmitool(dir) -> { path, calls() }: an ipmitool that records its argv, its environment's
 *     variable names and the running ipmitool's /proc/<pid>/cmdline, then runs the real one
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import dgram from 'node:dgram';
import { existsSync, readFileSync, readdirSync, writeFileSync, openSync, closeSync, watch, type FSWatcher } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

export const IPMI_SIM = '/usr/bin/ipmi_sim';
export const IPMITOOL = '/usr/bin/ipmitool';

/** Fails loudly: CI installs both (.ci/run); a silent skip would hide a broken CI. */
export function requireIpmiTools(): void {
  const missing = [
    ...(existsSync(IPMI_SIM) ? [] : [`${IPMI_SIM} (Debian package openipmi)`]),
    ...(existsSync(IPMITOOL) ? [] : [`${IPMITOOL} (Debian package ipmitool)`]),
  ];
  if (missing.length) throw new Error(`IPMI tests need ${missing.join(' and ')}: apt-get install openipmi ipmitool (.ci/run does)`);
}

export interface IpmiSimMachineSpec {
  id?: string;
  user?: string;
  password?: string;
  /**
   * The machine's UUID as the OS prints it. null: no GUID at all, and then ipmi_sim refuses RMCP+
   * ("This BMC does not support IPMI v2 / RMCP+"), since RAKP carries the GUID: an IPMI 1.5-only BMC.
   */
  guid?: string | null;
  /** How this BMC puts the GUID on the wire: the IPMI spec's reversed bytes, or SMBIOS's as they are. */
  guidEncoding?: 'ipmi' | 'smbios';
  power?: 'on' | 'off';
}

/** A machine starting: power applied off -> on, or a reset while on. */
export interface IpmiBootEvent {
  atMs: number;
  /** The boot device override in force (ipmi_sim's `default` is the disk); null: none, the machine's own order. */
  override: 'pxe' | 'disk' | 'cdrom' | 'bios' | null;
}

const OVERRIDES: Readonly<Record<string, IpmiBootEvent['override']>> = { pxe: 'pxe', default: 'disk', cdrom: 'cdrom', bios: 'bios', none: null };

export interface IpmiSimOptions {
  machines?: number | IpmiSimMachineSpec[];
  /**
   * Called when a machine starts (test/sim's simulated machine can play PXE from here). ipmi_sim
   * drops the persistent bit of a boot override, so whether one outlives a boot is this setting.
   */
  onBoot?: (machine: IpmiSimMachine, boot: IpmiBootEvent) => void;
  /** once (default): an override is used up by the boot it applies to, as a next-boot-only IPMI override is. */
  bootOverride?: 'once' | 'persistent';
  /** Defaults for every machine that does not set its own. */
  user?: string;
  password?: string;
  /** The first machine's GUID (the others get random ones unless their spec says). */
  guid?: string | null;
}

export interface ChassisCall {
  atMs: number;
  param: 'power' | 'reset' | 'shutdown' | 'boot' | 'identify';
  value: string;
}

export interface IpmiFaults {
  /** The BMC accepts power changes and the machine never follows (a BMC that reports success and does nothing). */
  ignorePower?: boolean;
  /** Power changes take effect this long after the BMC accepted them. */
  powerDelayMs?: number;
  /** The OS ignores the ACPI soft-off request. */
  ignoreSoft?: boolean;
}

export interface IpmiSimMachine {
  id: string;
  host: string;
  port: number;
  /** host:port, as a node's bmc.address. */
  address: string;
  user: string;
  password: string;
  guid: string | null;
  /** The 16 bytes the BMC sends for Get System GUID, as hex. */
  wireGuid: string | null;
  dir: string;
  /** Every `set` ipmi_sim passed to the hook, in order. */
  calls(): ChassisCall[];
  /** Every time the machine started, with the boot override it started with. */
  boots(): IpmiBootEvent[];
  /** power, reset and shutdown calls: what must never happen twice for one intended action. */
  destructiveCalls(): ChassisCall[];
  power(): 'on' | 'off';
  bootDevice(): string;
  setPower(state: 'on' | 'off'): void;
  setFaults(faults: IpmiFaults): void;
  running(): boolean;
  stop(): Promise<void>;
  start(): Promise<void>;
}

export interface IpmiSim {
  dir: string;
  machines: IpmiSimMachine[];
  stop(): Promise<void>;
}

const HOOK = `#!/bin/sh
# ipmi_sim chassis_control hook: <machine-dir> get <parm>... | set <parm> <value>...
d=$1; op=$2; shift 2
ignore_power=0; power_delay_ms=0; ignore_soft=0; boot_override=once
[ -f "$d/faults" ] && . "$d/faults"
now_ms() { date +%s%3N; }
# The machine starts: log what it boots from; a once override is used up, as the valid bit is.
booted() {
  echo "$(now_ms) $(cat "$d/boot")" >> "$d/boots"
  [ "$boot_override" = once ] && echo none > "$d/boot"
  return 0
}
apply_power() {
  old=$(cat "$d/power"); echo "$1" > "$d/power"; rm -f "$d/power.pending"
  [ "$old" = 0 ] && [ "$1" = 1 ] && booted
  return 0
}
settle() {
  if [ -f "$d/power.pending" ]; then
    read -r v at < "$d/power.pending"
    if [ "$(now_ms)" -ge "$at" ]; then apply_power "$v"; fi
  fi
}
set_power() {
  [ "$ignore_power" = 1 ] && return 0
  if [ "$power_delay_ms" -gt 0 ]; then
    echo "$1 $(( $(now_ms) + power_delay_ms ))" > "$d/power.pending"
  else
    apply_power "$1"
  fi
}
settle
case $op in
  get)
    for p in "$@"; do
      case $p in
        power) echo "power:$(cat "$d/power")" ;;
        boot) echo "boot:$(cat "$d/boot")" ;;
        *) echo "Invalid parameter: $p"; exit 1 ;;
      esac
    done ;;
  set)
    while [ $# -ge 2 ]; do
      p=$1; v=$2; shift 2
      echo "$(now_ms) $p $v" >> "$d/calls"
      case $p in
        power) set_power "$v" ;;
        shutdown) [ "$ignore_soft" = 1 ] || set_power 0 ;;
        boot) echo "$v" > "$d/boot" ;;
        reset) [ "$ignore_power" = 1 ] || { [ "$(cat "$d/power")" = 1 ] && booted; } ;;
        identify) ;;
        *) echo "Invalid parameter: $p"; exit 1 ;;
      esac
    done ;;
  *) echo "Unsupported operation: $op"; exit 1 ;;
esac
exit 0
`;

/** One management controller as the BMC (ipmi_sim starts with none). */
const EMU = `mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02
mc_enable 0x20
`;

/** RMCP presence ping (ASF, DMTF DSP0136): ipmi_sim answers it once its LAN channel is up. */
const ASF_PING = Buffer.from('0600ff06000011be80000000', 'hex');

const SAFE = /^[A-Za-z0-9._@#%+=,-]{1,20}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The UUID's 16 bytes as this BMC would send them (the inverse of what a driver must decode). */
function wireBytes(uuid: string, encoding: 'ipmi' | 'smbios'): string {
  const b = Buffer.from(uuid.replace(/-/g, ''), 'hex');
  const bytes = encoding === 'ipmi' ? [...b].reverse() : [b[3]!, b[2]!, b[1]!, b[0]!, b[5]!, b[4]!, b[7]!, b[6]!, ...b.subarray(8)];
  return Buffer.from(bytes).toString('hex');
}

async function freeUdpPort(host: string): Promise<number> {
  const s = dgram.createSocket('udp4');
  await new Promise<void>((resolve, reject) => {
    s.once('error', reject);
    s.bind(0, host, () => resolve());
  });
  const { port } = s.address();
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

async function pingOnce(host: string, port: number, timeoutMs: number): Promise<boolean> {
  const s = dgram.createSocket('udp4');
  try {
    return await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      s.once('message', () => {
        clearTimeout(timer);
        resolve(true);
      });
      s.once('error', () => {
        clearTimeout(timer);
        resolve(false);
      });
      s.send(ASF_PING, port, host);
    });
  } finally {
    s.close();
  }
}

class SimMachine implements IpmiSimMachine {
  readonly host = '127.0.0.1';
  port = 0;
  private child: ChildProcess | null = null;
  private exited: Promise<void> = Promise.resolve();

  constructor(
    readonly id: string,
    readonly dir: string,
    readonly user: string,
    readonly password: string,
    readonly guid: string | null,
    readonly wireGuid: string | null,
    private readonly hook: string,
    private readonly bootOverride: 'once' | 'persistent',
  ) {}

  private watcher: FSWatcher | null = null;

  unwatch(): void {
    this.watcher?.close();
    this.watcher = null;
  }

  get address(): string {
    return `${this.host}:${this.port}`;
  }

  calls(): ChassisCall[] {
    const file = path.join(this.dir, 'calls');
    if (!existsSync(file)) return [];
    return readFileSync(file, 'utf8').split('\n').filter(Boolean).map((line) => {
      const [at, param, ...value] = line.split(' ');
      return { atMs: Number(at), param: param as ChassisCall['param'], value: value.join(' ') };
    });
  }

  destructiveCalls(): ChassisCall[] {
    return this.calls().filter((c) => c.param === 'power' || c.param === 'reset' || c.param === 'shutdown');
  }

  boots(): IpmiBootEvent[] {
    const file = path.join(this.dir, 'boots');
    if (!existsSync(file)) return [];
    return readFileSync(file, 'utf8').split('\n').filter(Boolean).map((line) => {
      const [at, override] = line.split(' ');
      return { atMs: Number(at), override: OVERRIDES[override ?? 'none'] ?? null };
    });
  }

  /** Calls the listener for each boot after the ones already delivered (fs.watch on the machine's dir). */
  watchBoots(listener: (boot: IpmiBootEvent) => void): void {
    let delivered = this.boots().length;
    this.watcher = watch(this.dir, { persistent: false }, (_event, name) => {
      if (name !== 'boots') return;
      const all = this.boots();
      for (const b of all.slice(delivered)) listener(b);
      delivered = Math.max(delivered, all.length);
    });
  }

  power(): 'on' | 'off' {
    return readFileSync(path.join(this.dir, 'power'), 'utf8').trim() === '1' ? 'on' : 'off';
  }

  bootDevice(): string {
    return readFileSync(path.join(this.dir, 'boot'), 'utf8').trim();
  }

  setPower(state: 'on' | 'off'): void {
    writeFileSync(path.join(this.dir, 'power'), state === 'on' ? '1\n' : '0\n');
  }

  setFaults(f: IpmiFaults): void {
    const ms = f.powerDelayMs ?? 0;
    if (!Number.isInteger(ms) || ms < 0) throw new RangeError('powerDelayMs must be a whole number of ms');
    writeFileSync(path.join(this.dir, 'faults'), `ignore_power=${f.ignorePower ? 1 : 0}\npower_delay_ms=${ms}\nignore_soft=${f.ignoreSoft ? 1 : 0}\nboot_override=${this.bootOverride}\n`);
  }

  running(): boolean {
    return this.child !== null;
  }

  private writeConfig(): string {
    const conf = path.join(this.dir, 'lan.conf');
    writeFileSync(conf, [
      `name "${this.id}"`,
      'set_working_mc 0x20',
      '  startlan 1',
      `    addr ${this.host} ${this.port}`,
      '    priv_limit admin',
      '    allowed_auths_callback md5',
      '    allowed_auths_user md5',
      '    allowed_auths_operator md5',
      '    allowed_auths_admin md5',
      ...(this.wireGuid ? [`    guid ${this.wireGuid}`] : []),
      '  endlan',
      `  chassis_control "${this.hook} ${this.dir}"`,
      `  user 2 true "${this.user}" "${this.password}" admin 10 md5`,
      '',
    ].join('\n'));
    return conf;
  }

  async start(): Promise<void> {
    if (this.child) return;
    let lastLog = '';
    // A free port can be taken between the probe and ipmi_sim's bind: try a few.
    for (let attempt = 0; attempt < 3; attempt++) {
      if (attempt > 0 || this.port === 0) this.port = await freeUdpPort(this.host);
      const conf = this.writeConfig();
      const state = path.join(this.dir, 'state');
      await fs.mkdir(state, { recursive: true });
      const logFile = path.join(this.dir, 'ipmi_sim.log');
      const log = openSync(logFile, 'a');
      const child = spawn(IPMI_SIM, ['-n', '-c', conf, '-f', path.join(this.dir, 'bmc.emu'), '-s', state], { detached: true, stdio: ['ignore', log, log] });
      closeSync(log);
      let gone = false;
      this.exited = new Promise<void>((resolve) => child.once('exit', () => {
        gone = true;
        resolve();
      }));
      child.once('error', () => undefined);
      for (let i = 0; i < 100 && !gone; i++) {
        if (await pingOnce(this.host, this.port, 100)) {
          this.child = child;
          return;
        }
      }
      if (!gone) {
        killGroup(child);
        await this.exited;
      }
      lastLog = existsSync(logFile) ? readFileSync(logFile, 'utf8').slice(-2000) : '';
    }
    throw new Error(`ipmi_sim ${this.id} did not answer an RMCP ping on ${this.host}:${this.port}: ${lastLog || '(no output)'}`);
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child) return;
    this.child = null;
    killGroup(child, 'SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    const done = await Promise.race([this.exited.then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), 2000)))]);
    clearTimeout(timer);
    if (!done) {
      killGroup(child, 'SIGKILL');
      await this.exited;
    }
  }
}

function killGroup(child: ChildProcess, signal: NodeJS.Signals = 'SIGKILL'): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // Already gone.
  }
}

export async function startIpmiSim(options: IpmiSimOptions = {}): Promise<IpmiSim> {
  requireIpmiTools();
  const specs: IpmiSimMachineSpec[] = typeof options.machines === 'number' || options.machines === undefined
    ? Array.from({ length: options.machines ?? 1 }, () => ({}))
    : options.machines;
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'ipmi-sim-'));
  const hook = path.join(dir, 'chassis-control');
  await fs.writeFile(hook, HOOK, { mode: 0o755 });
  const machines: SimMachine[] = [];
  try {
    for (const [i, spec] of specs.entries()) {
      const id = spec.id ?? `bmc${i}`;
      if (!/^[A-Za-z0-9_-]{1,32}$/.test(id)) throw new Error(`machine id "${id}" must be [A-Za-z0-9_-]`);
      const user = spec.user ?? options.user ?? 'admin';
      const password = spec.password ?? options.password ?? 'ipmi-sim-pw';
      // lan.conf has no escaping: keep what is written there to characters it reads as-is.
      if (!SAFE.test(user) || user.length > 16) throw new Error(`machine ${id}: user must match ${SAFE} (at most 16)`);
      if (!SAFE.test(password)) throw new Error(`machine ${id}: password must match ${SAFE}`);
      const guid = spec.guid !== undefined ? spec.guid : i === 0 && options.guid !== undefined ? options.guid : randomUUID();
      if (guid !== null && !UUID.test(guid)) throw new Error(`machine ${id}: guid must be a UUID`);
      const mdir = path.join(dir, id);
      await fs.mkdir(mdir);
      await fs.writeFile(path.join(mdir, 'bmc.emu'), EMU);
      await fs.writeFile(path.join(mdir, 'power'), spec.power === 'on' ? '1\n' : '0\n');
      await fs.writeFile(path.join(mdir, 'boot'), 'none\n');
      const m = new SimMachine(id, mdir, user, password, guid?.toLowerCase() ?? null, guid ? wireBytes(guid, spec.guidEncoding ?? 'ipmi') : null, hook, options.bootOverride ?? 'once');
      m.setFaults({});
      const onBoot = options.onBoot;
      if (onBoot) m.watchBoots((boot) => onBoot(m, boot));
      machines.push(m);
    }
    await Promise.all(machines.map((m) => m.start()));
  } catch (e) {
    machines.forEach((m) => m.unwatch());
    await Promise.all(machines.map((m) => m.stop()));
    await fs.rm(dir, { recursive: true, force: true });
    throw e;
  }
  return {
    dir,
    machines,
    async stop() {
      machines.forEach((m) => m.unwatch());
      await Promise.all(machines.map((m) => m.stop()));
      await fs.rm(dir, { recursive: true, force: true });
    },
  };
}

export interface RecordedIpmitoolCall {
  /** The argv the driver spawned (without argv[0]). */
  argv: string[];
  /** /proc/<pid>/cmdline of the real ipmitool while it ran (without argv[0]); null if it ended first. */
  cmdline: string[] | null;
  /** Names of the environment variables ipmitool was given. */
  envNames: string[];
}

/**
 * An ipmitool for the driver's ipmitoolPath that records how it was run, then runs the real one
 * in the background and reads its /proc/<pid>/cmdline (what `ps` shows to every user), waiting for
 * its exit status. A kill of the process group reaches both.
 */
export async function recordingIpmitool(dir: string): Promise<{ path: string; calls(): RecordedIpmitoolCall[] }> {
  requireIpmiTools();
  const logDir = path.join(dir, 'ipmitool-calls');
  await fs.mkdir(logDir, { recursive: true });
  const script = path.join(dir, 'ipmitool');
  await fs.writeFile(script, `#!/bin/sh
log=${logDir}
n=$(date +%s%N)-$$
for a in "$@"; do printf '%s\\n' "$a"; done > "$log/$n.argv"
env | cut -d= -f1 | sort > "$log/$n.env"
${IPMITOOL} "$@" &
child=$!
i=0
while [ $i -lt 200 ]; do
  exe=$(readlink /proc/$child/exe 2>/dev/null) || break
  case $exe in
    */ipmitool) tr '\\0' '\\n' < /proc/$child/cmdline > "$log/$n.cmdline"; break ;;
  esac
  i=$((i+1))
done
wait $child
`, { mode: 0o755 });
  return {
    path: script,
    calls() {
      const names = readdirSync(logDir).filter((f) => f.endsWith('.argv')).map((f) => f.slice(0, -5)).sort();
      return names.map((n) => {
        const read = (ext: string): string[] | null => {
          const f = path.join(logDir, `${n}.${ext}`);
          if (!existsSync(f)) return null;
          const text = readFileSync(f, 'utf8').replace(/\n$/, '');
          return text === '' ? [] : text.split('\n');
        };
        const cmdline = read('cmdline');
        return { argv: read('argv') ?? [], cmdline: cmdline ? cmdline.slice(1) : null, envNames: read('env') ?? [] };
      });
    },
  };
}
