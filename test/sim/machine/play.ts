/**
 * A machine's own side of a boot, whatever BMC powers it (issue 9 item 6; reused by the interop
 * suite, issue 20): PXE, the iPXE script fetched from the service by MAC (`GET /boot/ipxe?mac=`),
 * and the ramdisk played against the real callback API with the per-boot token the script carried
 * (instructions, heartbeat, then per purpose: inventory, DCGM, per-disk wipes). Switches make each
 * part fail. The Redfish simulator's fleet (index.ts) and the sushy-tools player
 * (test/interop/helpers/sushy-machine.ts) both drive this one class.
 */
import { request } from 'undici';
import type { DcgmReport, InventoryReport, StepReport, WipeReport } from '../../../src/modules/boot/reports';
import type { BootParams, BootPurpose, ReportKind } from '../../../src/modules/boot/entries';
import { REPORT_PATHS } from '../../../src/modules/boot/routes';
import { swapUuid } from '../../../src/modules/metal/discovery';
import { parseIpxeScript } from './ipxe';
import type { Hardware } from './inventory';

/** Switches that make a machine misbehave, each as a real one can. */
export interface MachineBehaviour {
  /** Fetches its script and boots the ramdisk, which then never calls back (a dead ramdisk, a wrong VLAN). */
  neverCallBack?: boolean;
  /** PXE never reaches the service (no DHCP answer, no iPXE fetch). */
  noPxe?: boolean;
  /** DCGM diagnostics fail (the pcie test). */
  dcgmFails?: boolean;
  /** Wipes are done but not attested by the drive: every disk, or only the first. */
  wipeUnattested?: boolean | 'first';
  /** The last disk is neither wiped nor reported. */
  wipeMissingDisk?: boolean;
  /** The inventory reports this UUID instead of the machine's (an impostor, or a swapped board). */
  reportUuid?: string;
  /** The inventory reports these MACs instead of the machine's. */
  reportMacs?: string[];
  /** Added before every ramdisk call (a slow machine). */
  delayMs?: number;
  /** From power-on to the iPXE fetch (POST, DHCP). */
  bootDelayMs?: number;
  /** The ramdisk stops after this many calls to the service (instructions included): a crash mid-way. */
  stopAfterCalls?: number;
  /** How often a rescue ramdisk heartbeats; default what the instructions say. */
  heartbeatMs?: number;
  /** No step reports (started/succeeded around each phase): fewer callbacks, for benchmarks. */
  quiet?: boolean;
  /**
   * A 503 (the service's database down) is tried again after its Retry-After (at most 30 times),
   * the iPXE fetch and every ramdisk call alike, as firmware and a ramdisk that follow the
   * protocol do; without it a 503 loses that call, as any other refusal.
   */
  retryUnavailable?: boolean;
}

export interface WipeRecord {
  serial: string;
  mode: string;
  entryId: string;
  at: number;
}

export interface MachineCounts {
  /** Power-ons into PXE. */
  pxeBoots: number;
  ipxeFetches: number;
  /** Scripts that said "no entry": the machine went on to its next boot device. */
  noEntryExits: number;
  ramdiskBoots: number;
  /** Reports the service took (2xx), by kind. */
  reports: Record<ReportKind, number>;
  /** Calls the service refused (401: the boot is over; 4xx: a report it did not take). */
  refused: number;
  /** Calls that never got an answer (the service was down). */
  failedCalls: number;
  /** Destructive: each disk wiped, whatever the mode (crypto-erase included). */
  wipesPerformed: number;
  cryptoErases: number;
  wiped: WipeRecord[];
  /** Power-ons that booted the disk (the installed OS) or a virtual medium. */
  diskBoots: number;
  mediaBoots: number;
}

/** What the machine's PXE looked like from the network: what a site agent's DHCP listener sees. */
export interface PxeEvent {
  machineId: string;
  mac: string;
  uuid: string;
  /** The UUID as DHCP option 97 carries it: SMBIOS byte order (the first three fields byte-swapped). */
  dhcpUuid: string;
  arch: 'x86_64';
  /** When the DHCP request went out (ISO 8601). */
  at: string;
  /** What the script said: boot the ramdisk of an entry, or exit (no entry). */
  outcome: 'ramdisk' | 'exit' | 'error';
}

/** The machine as its BMC shows it: what the play needs to know of its power and identity. */
export interface MachineHost {
  readonly id: string;
  /** The machine's SMBIOS UUID (what its ramdisk reports). */
  uuid(): string;
  /** Whether it still has power: a play stops at its next call once the machine is off. */
  poweredOn(): boolean;
}

/** What a machine's plays report to: the service it boots from, and whoever waits for the plays. */
export interface PlayFleet {
  serviceUrl: string;
  onPxe?: (event: PxeEvent) => void;
  track(play: Promise<void>, machine: PlayedMachine): void;
  /** A play settled into its endless part (rescue heartbeats): idle() stops waiting for it. */
  lingering(): void;
}

export function emptyCounts(): MachineCounts {
  return {
    pxeBoots: 0, ipxeFetches: 0, noEntryExits: 0, ramdiskBoots: 0,
    reports: { heartbeat: 0, inventory: 0, step: 0, dcgm: 0, wipe: 0 },
    refused: 0, failedCalls: 0, wipesPerformed: 0, cryptoErases: 0, wiped: [], diskBoots: 0, mediaBoots: 0,
  };
}

/** The boot is over (401), the machine lost power or rebooted, or a switch stopped it. */
class Stopped extends Error {}

interface Instructions {
  entryId: string;
  purpose: BootPurpose;
  params: BootParams;
  heartbeatSeconds: number;
}

/**
 * One machine's firmware and ramdisk: powered on (by whatever BMC it has) into PXE, it fetches its
 * iPXE script by MAC and plays the ramdisk the script boots; any other boot target boots its disk
 * or a virtual medium (counted). The BMC side is the caller's: the Redfish simulator's onBoot
 * (index.ts), or a player watching a real BMC (test/interop/helpers/sushy-machine.ts).
 */
export class PlayedMachine {
  readonly counters = emptyCounts();
  /** The purpose of each ramdisk boot, in order. */
  readonly boots: { purpose: BootPurpose | null; entryId: string; at: number }[] = [];
  /** Bumped by every power-on: a play of an older boot stops at its next call. */
  generation = 0;
  behaviour: MachineBehaviour;
  /** In the rescue heartbeat loop: up until power-off, so idle() does not wait for it. */
  heartbeating = false;
  private readonly naps = new Set<() => void>();

  constructor(readonly host: MachineHost, readonly macs: string[], readonly serial: string, private readonly hardware: Hardware, behaviour: MachineBehaviour, private sim: PlayFleet) {
    this.behaviour = behaviour;
  }

  get id(): string { return this.host.id; }

  /** A sleep that a power-on or the fleet's stop cuts short (the next call then stops the play). */
  nap(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => { clearTimeout(timer); this.naps.delete(done); resolve(); };
      const timer = setTimeout(done, ms);
      this.naps.add(done);
    });
  }

  interrupt(): void {
    this.generation++;
    for (const wake of [...this.naps]) wake();
  }
  get uuid(): string { return this.host.uuid(); }

  inventory(): InventoryReport {
    return { uuid: this.uuid, nics: this.macs.map((mac, i) => ({ mac, name: `eno${i + 1}`, speedMbps: 25000 })), ...structuredClone(this.hardware) };
  }

  counts(): MachineCounts {
    return { ...structuredClone(this.counters) };
  }

  /** The BMC powered the machine on: boot what its override (or its boot order) says (`target`: Pxe, Hdd, Cd...). */
  powerOn(target: string): void {
    this.interrupt();
    this.heartbeating = false;
    const generation = this.generation;
    if (target === 'Pxe') this.sim.track(this.pxe(generation), this);
    else if (target === 'Cd' || target === 'Usb') this.counters.mediaBoots++;
    else this.counters.diskBoots++;
  }

  private alive(generation: number): void {
    if (generation !== this.generation || !this.host.poweredOn()) throw new Stopped();
  }

  private async pxe(generation: number): Promise<void> {
    const b = this.behaviour;
    this.counters.pxeBoots++;
    if (b.noPxe) return;
    if (b.bootDelayMs) await this.nap(b.bootDelayMs);
    const mac = this.macs[0]!;
    const at = new Date().toISOString();
    let outcome: PxeEvent['outcome'] = 'error';
    try {
      this.alive(generation);
      this.counters.ipxeFetches++;
      let response = await request(`${this.sim.serviceUrl}/boot/ipxe?mac=${mac}`);
      for (let retry = 0; this.behaviour.retryUnavailable && response.statusCode === 503 && retry < 30; retry += 1) {
        await response.body.text();
        await this.nap(retryAfterMs(response.headers['retry-after']));
        this.alive(generation);
        response = await request(`${this.sim.serviceUrl}/boot/ipxe?mac=${mac}`);
      }
      const script = await response.body.text();
      const ok = response.statusCode >= 200 && response.statusCode < 300;
      const parsed = ok ? parseIpxeScript(script) : null;
      if (!parsed) {
        // iPXE's `exit` (or a script it cannot run): the firmware goes on to the next boot device.
        outcome = ok ? 'exit' : 'error';
        if (ok) this.counters.noEntryExits++;
        this.counters.diskBoots++;
        return;
      }
      outcome = 'ramdisk';
      this.counters.ramdiskBoots++;
      await this.ramdisk(generation, parsed.callback, parsed.token);
    } catch (error) {
      if (!(error instanceof Stopped)) this.counters.failedCalls++;
    } finally {
      this.sim.onPxe?.({ machineId: this.id, mac, uuid: this.uuid, dhcpUuid: swapUuid(this.uuid), arch: 'x86_64', at, outcome });
    }
  }

  private async ramdisk(generation: number, callback: string, token: string): Promise<void> {
    const b = this.behaviour;
    if (b.neverCallBack) return;
    let calls = 0;
    const call = async (method: 'GET' | 'POST', path: string, body?: unknown): Promise<unknown> => {
      if (b.delayMs) await this.nap(b.delayMs);
      this.alive(generation);
      if (b.stopAfterCalls !== undefined && calls >= b.stopAfterCalls) throw new Stopped();
      calls += 1;
      let status = 0;
      let text = '';
      for (let retry = 0; ; retry += 1) {
        let retryAfter: string | string[] | undefined;
        try {
          // undici's request, not fetch: fetch's web streams cost the bench process about a third
          // of its CPU with 1,000 machines reporting (the lifecycle bench's profile).
          const response = await request(`${callback}/${path}`, {
            method,
            headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
            body: body === undefined ? undefined : JSON.stringify(body),
          });
          status = response.statusCode;
          text = await response.body.text();
          retryAfter = response.headers['retry-after'];
        } catch {
          this.counters.failedCalls++;
          throw new Stopped();
        }
        if (!(b.retryUnavailable && status === 503 && retry < 30)) break;
        await this.nap(retryAfterMs(retryAfter));
        this.alive(generation);
      }
      let answer: unknown = null;
      try { answer = JSON.parse(text); } catch { answer = null; }
      if (status < 200 || status >= 300) {
        this.counters.refused++;
        // A boot the service no longer knows is over; any other refusal only loses that report.
        if (status === 401) throw new Stopped();
        return null;
      }
      if (method === 'POST') this.counters.reports[REPORT_PATHS[path]!]++;
      return answer;
    };
    const step = async (name: string, status: StepReport['status'], message?: string) =>
      b.quiet ? null : call('POST', 'steps', { name, status, ...(message ? { message } : {}) } satisfies StepReport);

    const instructions = await call('GET', 'instructions') as Instructions | null;
    if (!instructions) return;
    this.boots.push({ purpose: instructions.purpose, entryId: instructions.entryId, at: Date.now() });
    await call('POST', 'heartbeat', {});
    const params = instructions.params ?? {};
    switch (instructions.purpose) {
      case 'inspect': {
        await step('inspect-hardware', 'started');
        await call('POST', 'inventory', this.reportedInventory());
        await step('inspect-hardware', 'succeeded');
        break;
      }
      case 'commission': {
        const level = typeof params.dcgmLevel === 'number' ? params.dcgmLevel : 1;
        await step('dcgm-diag', 'started');
        const dcgm = this.dcgm(level);
        await call('POST', 'dcgm', dcgm);
        await step('dcgm-diag', dcgm.passed ? 'succeeded' : 'failed', dcgm.passed ? undefined : 'pcie: link width x8, expected x16');
        await this.wipe(call, step, params.wipe ?? 'quick', instructions.entryId);
        break;
      }
      case 'release':
        if (params.wipe !== undefined && (params.wipe as string) === 'none') break;
        await this.wipe(call, step, params.wipe ?? 'quick', instructions.entryId);
        break;
      case 'retire':
        await this.wipe(call, step, 'crypto-erase', instructions.entryId);
        break;
      case 'rescue': {
        // Up until the machine powers off or boots again (or the service ends the boot: 401).
        const every = b.heartbeatMs ?? instructions.heartbeatSeconds * 1000;
        this.heartbeating = true;
        this.sim.lingering();
        for (;;) {
          await this.nap(every);
          await call('POST', 'heartbeat', { message: 'rescue shell up' });
        }
      }
      case 'deploy': {
        await step('deploy', 'started');
        // The installer runs the profile version's steps it was handed and reports each one: the
        // deploy workflow waits for every step of the profile, whatever `quiet` says.
        const steps = Array.isArray(params.steps) ? (params.steps as { name?: unknown }[]) : [];
        for (const s of steps) {
          if (typeof s?.name !== 'string') continue;
          await call('POST', 'steps', { name: s.name, status: 'started' } satisfies StepReport);
          await call('POST', 'steps', { name: s.name, status: 'succeeded' } satisfies StepReport);
        }
        break;
      }
    }
  }

  private reportedInventory(): InventoryReport {
    const honest = this.inventory();
    const b = this.behaviour;
    return {
      ...honest,
      ...(b.reportUuid ? { uuid: b.reportUuid } : {}),
      ...(b.reportMacs ? { nics: b.reportMacs.map((mac, i) => ({ mac, name: `eno${i + 1}` })) } : {}),
    };
  }

  private dcgm(level: number): DcgmReport {
    const fail = this.behaviour.dcgmFails === true;
    return {
      passed: !fail,
      level,
      tests: [
        { name: 'software', result: 'pass' },
        { name: 'pcie', result: fail ? 'fail' : 'pass', ...(fail ? { details: 'GPU 0: PCIe link width x8, expected x16' } : {}) },
        { name: 'memory', result: level >= 2 ? 'pass' : 'skip' },
      ],
    };
  }

  /** One wipe per disk, each reported when it is done (a real ramdisk erases disks one by one). */
  private async wipe(
    call: (method: 'POST', path: string, body: unknown) => Promise<unknown>,
    step: (name: string, status: StepReport['status']) => Promise<unknown>,
    mode: NonNullable<BootParams['wipe']>,
    entryId: string,
  ): Promise<void> {
    const b = this.behaviour;
    let disks = this.hardware.disks.length ? this.inventory().disks : [];
    if (b.wipeMissingDisk) disks = disks.slice(0, -1);
    await step('erase-devices', 'started');
    for (const [i, disk] of disks.entries()) {
      // The destructive act happens on the machine before the report, whatever becomes of the report.
      this.counters.wipesPerformed++;
      if (mode === 'crypto-erase') this.counters.cryptoErases++;
      this.counters.wiped.push({ serial: disk.serial, mode, entryId, at: Date.now() });
      const attested = !(b.wipeUnattested === true || (b.wipeUnattested === 'first' && i === 0));
      const report: WipeReport = {
        disks: [{
          serial: disk.serial, name: disk.name, mode, attested, method: METHOD[mode],
          ...(attested ? { evidence: `${METHOD[mode]} completed; drive reports sanitize status 0x0101` } : { evidence: 'the drive gave no sanitize status' }),
        }],
      };
      await call('POST', 'wipe', report);
    }
    await step('erase-devices', 'succeeded');
  }
}

const METHOD: Record<NonNullable<BootParams['wipe']>, string> = {
  quick: 'blkdiscard',
  'secure-erase': 'nvme-sanitize-block-erase',
  'crypto-erase': 'nvme-format-ses2',
};

/** Retry-After in seconds as milliseconds (1 s when absent or odd), at most 5 s. */
function retryAfterMs(header: string | string[] | undefined): number {
  const seconds = Number(Array.isArray(header) ? header[0] : header);
  return Number.isFinite(seconds) && seconds > 0 ? Math.min(seconds, 5) * 1000 : 1000;
}

export const COUNTED = ['pxeBoots', 'ipxeFetches', 'noEntryExits', 'ramdiskBoots', 'refused', 'failedCalls', 'wipesPerformed', 'cryptoErases', 'diskBoots', 'mediaBoots'] as const;
