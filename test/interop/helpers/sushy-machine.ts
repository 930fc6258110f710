/**
 * The machines behind sushy-tools, played the way their firmware would see them. sushy's fake
 * driver has no machine at all, only a BMC: this player watches each system's power over Redfish
 * (as firmware observes its BMC) and, when the machine powers on, boots what the override says,
 * through the project's one machine play (test/sim/machine/play.ts: PXE, iPXE script by MAC,
 * ramdisk callbacks). It never touches the BMC's state: GETs only.
 *
 * The sushy behaviours it plays, each from ../shared/peers/README.md ("sushy-tools, fake driver")
 * and sushy_tools/emulator/resources/systems/fakedriver.py:
 * - power changes are deferred by 1-11 s and applied on a later GET (fakedriver.py set_power_state,
 *   _update_if_needed): a power-on is seen as Off, then On, on some later poll. The deadline is
 *   int(time.time()) + randint(1, 11), so a change can apply less than a second after it was asked;
 * - ForceRestart/GracefulRestart set PowerState Off at once and On later (fakedriver.py: 'Restart'
 *   sets power_state Off, pending On): a restart is the same Off-then-On transition, so a restart
 *   is a boot too. The Off of a restart can last less than one poll: the deadline can fall a few
 *   ms after the Reset, and the service's own read-back GET then applies the On before this player
 *   looks (seen in CI, 2026-12-07: node-2's release waited 200 s for a ramdisk that never booted).
 *   So the player also reads sushy's access log (werkzeug writes one line per request to
 *   emulator.log, status included): a Reset answered 204 while the machine read On, after which
 *   it still reads On at a poll sent 11 s later (past any deadline: int(time) + 11 at most), with
 *   no Off seen between, was a restart whose Off no poll caught (a pending ForceOff would read Off
 *   by then, and the project's driver sends no On to a machine it reads On: power.ts). It boots
 *   then, late, from the target the BMC held at the first poll after the Reset;
 * - BootSourceOverrideEnabled always reads Continuous (templates/system.json; README "Boot override"):
 *   the target is what the machine boots on every power-on until it is changed, so the player reads
 *   the target at each boot, whatever Enabled says; Hdd (sushy's default, fakedriver.py
 *   get_boot_device) or no override boots the disk (the installed OS), counted;
 * - the fake systems report no CPUs, memory or (except node-1's) drives out of band: the in-band
 *   hardware below is the machine's own, node-1's drive the one emulator.conf gives its BMC.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Hardware } from '../../sim/machine/inventory';
import { PlayedMachine, type MachineBehaviour, type PlayFleet, type PxeEvent } from '../../sim/machine/play';
import { SUSHY_SYSTEMS, type Sushy, type SushyNode } from './sushy';

/** What the machine finds in-band. node-1's drive is SUSHY_EMULATOR_DRIVES of emulator.conf (899527000000 bytes, "Drive Sample"). */
export function sushyHardware(node: SushyNode): Hardware {
  const disks = node === 'node-1'
    ? [{ name: 'sda', serial: `sushy-${node}-DRIVE0001`, sizeBytes: 899527000000, model: 'Drive Sample' }]
    : [{ name: 'sda', serial: `sushy-${node}-D0`, sizeBytes: 480103981056, model: 'Virtual Disk' }];
  return { cpus: [{ model: 'QEMU Virtual CPU version 2.5+', cores: 2, threads: 2 }], memoryMiB: 4096, disks };
}

export interface PowerObservation {
  at: number;
  power: string;
  /** The boot the machine made at this power-on (null: no boot, a power-off or the first read). */
  booted: string | null;
  /** A restart no poll saw Off, found by its Reset in sushy's access log (booted late). */
  offMissed?: boolean;
}

export interface SushyMachine extends PlayedMachine {
  node: SushyNode;
  /** The power states seen, in order (a change only). */
  observations: PowerObservation[];
}

export interface SushyMachines {
  machine(node: SushyNode): SushyMachine;
  pxe: PxeEvent[];
  /**
   * Poll errors that lasted (the BMC down or refusing for POLL_FAILURES_TOLERATED polls in a row):
   * a running suite expects none.
   */
  errors: string[];
  /**
   * Single failed polls that the next poll got past. Firmware polling its BMC polls again; sushy's
   * fake driver keeps its systems in SQLite and once answered one GET 500 on a loaded CI host
   * (2026-12-06, node-2 during inspection; nothing else failed). Kept, with sushy's own error
   * message, and printed when the machines stop.
   */
  transient: string[];
  /** Each machine's last power observations, boots and refused or failed calls: for a failing test's message. */
  describe(): string;
  stop(): Promise<void>;
}

/** A poll sent this long after a Reset was read from the log is past sushy's deadline for it (int(time) + randint(1, 11)). */
export const RESET_APPLIED_MS = 11_100;

/**
 * Resets sushy answered 204, per system, from its access log (werkzeug's request lines in
 * emulator.log): `take(uuid)` counts those read since the last take. Reads only what was appended.
 */
function resetLog(file: string): { take(uuid: string): number } {
  let offset = 0;
  let partial = '';
  const counts = new Map<string, number>();
  const RESET = /"POST \/redfish\/v1\/Systems\/([^/\s]+)\/Actions\/ComputerSystem\.Reset HTTP\/1\.[01]" 204 /;
  const read = () => {
    let size = 0;
    try { size = fs.statSync(file).size; } catch { return; }
    if (size <= offset) return;
    const fd = fs.openSync(file, 'r');
    try {
      const buffer = Buffer.alloc(size - offset);
      const got = fs.readSync(fd, buffer, 0, buffer.length, offset);
      offset += got;
      const lines = (partial + buffer.subarray(0, got).toString('utf8')).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        const uuid = RESET.exec(line)?.[1];
        if (uuid) counts.set(uuid, (counts.get(uuid) ?? 0) + 1);
      }
    } finally {
      fs.closeSync(fd);
    }
  };
  return {
    take(uuid) {
      read();
      const n = counts.get(uuid) ?? 0;
      counts.delete(uuid);
      return n;
    },
  };
}

/** The target a machine powered on now boots: the override when one is set, else its disk. */
function bootTarget(body: any): string {
  const boot = (body?.Boot ?? {}) as { BootSourceOverrideTarget?: string; BootSourceOverrideEnabled?: string };
  const enabled = boot.BootSourceOverrideEnabled ?? 'Disabled';
  return (enabled === 'Once' || enabled === 'Continuous') && boot.BootSourceOverrideTarget && boot.BootSourceOverrideTarget !== 'None' ? boot.BootSourceOverrideTarget : 'Hdd';
}

/** Failed polls in a row a machine rides out (as firmware polling its BMC would) before it is an error. */
export const POLL_FAILURES_TOLERATED = 2;

/** sushy's own error message (`{"error":{"message":...}}`), shortened: what a 500 was about. */
function upstreamMessage(body: unknown): string {
  const message = (body as { error?: { message?: unknown } } | null)?.error?.message;
  return typeof message === 'string' ? `: ${message.slice(0, 200)}` : '';
}

/** Starts one machine per node, each polling its system every `pollMs` (default 100 ms). */
export async function startSushyMachines(opts: { sushy: Sushy; serviceUrl: string; nodes: SushyNode[]; pollMs?: number; behaviour?: MachineBehaviour }): Promise<SushyMachines> {
  const pollMs = opts.pollMs ?? 100;
  const plays = new Set<Promise<void>>();
  const pxe: PxeEvent[] = [];
  const errors: string[] = [];
  const transient: string[] = [];
  const fleet: PlayFleet = {
    serviceUrl: opts.serviceUrl.replace(/\/+$/, ''),
    onPxe: (e) => pxe.push(e),
    track(play) {
      plays.add(play);
      void play.finally(() => plays.delete(play));
    },
    lingering() {},
  };
  const machines = new Map<SushyNode, SushyMachine>();
  const resets = resetLog(path.join(opts.sushy.harnessDir, 'sushy', 'emulator.log'));
  let stopped = false;
  const loops: Promise<void>[] = [];
  for (const node of opts.nodes) {
    const system = SUSHY_SYSTEMS[node];
    const state = { power: null as string | null };
    const machine = new PlayedMachine(
      { id: node, uuid: () => system.uuid, poweredOn: () => state.power === 'On' },
      [...system.macs], `sushy-${node}`, sushyHardware(node), { ...opts.behaviour }, fleet,
    ) as SushyMachine;
    machine.node = node;
    machine.observations = [];
    machines.set(node, machine);
    loops.push((async () => {
      let failedInARow: string[] = [];
      // A Reset answered while the machine read On, with no Off seen since: when it was read, and the target the BMC held then.
      let unexplained: { at: number; target: string | null } | null = null;
      while (!stopped) {
        try {
          if (resets.take(system.uuid) > 0 && state.power === 'On' && !unexplained) unexplained = { at: Date.now(), target: null };
          const sentAt = Date.now();
          const r = await opts.sushy.get(`/redfish/v1/Systems/${system.uuid}`);
          if (r.status !== 200) throw new Error(`GET system answered ${r.status}${upstreamMessage(r.body)}`);
          if (failedInARow.length) transient.push(...failedInARow);
          failedInARow = [];
          const power = String(r.body.PowerState);
          if (unexplained && unexplained.target === null) unexplained.target = bootTarget(r.body);
          if (power !== state.power) {
            const before = state.power;
            state.power = power;
            let booted: string | null = null;
            // Off -> On: a power-on or the second half of a restart; the first read is no transition.
            if (before === 'Off' && power === 'On') {
              booted = bootTarget(r.body);
              machine.powerOn(booted);
            } else if (power === 'Off') {
              // Power gone: a play in progress stops at its next call (poweredOn() is false now).
              machine.interrupt();
              unexplained = null;
            }
            machine.observations.push({ at: Date.now(), power, booted });
          } else if (power === 'On' && unexplained && sentAt >= unexplained.at + RESET_APPLIED_MS) {
            // Still On past the Reset's deadline with no Off seen: a restart whose Off no poll caught.
            const booted = unexplained.target ?? bootTarget(r.body);
            unexplained = null;
            machine.powerOn(booted);
            machine.observations.push({ at: Date.now(), power, booted, offMissed: true });
          }
        } catch (error) {
          if (!stopped) {
            failedInARow.push(`${node}: ${(error as Error).message}`);
            if (failedInARow.length === POLL_FAILURES_TOLERATED + 1) errors.push(...failedInARow);
            else if (failedInARow.length > POLL_FAILURES_TOLERATED + 1) errors.push(failedInARow[failedInARow.length - 1]);
          }
        }
        await new Promise((r) => setTimeout(r, pollMs));
      }
    })());
  }
  return {
    machine: (node) => {
      const m = machines.get(node);
      if (!m) throw new Error(`no sushy machine ${node}`);
      return m;
    },
    pxe,
    errors,
    transient,
    describe() {
      return [...machines.values()].map((m) => {
        const c = m.counters;
        const seen = m.observations.slice(-8).map((o) => `${new Date(o.at).toISOString().slice(11, 23)} ${o.power}${o.booted ? ` booted ${o.booted}` : ''}${o.offMissed ? ' (Off missed)' : ''}`);
        return `machine ${m.node}: boots ${m.boots.map((b) => b.purpose).join(', ') || 'none'}; pxe ${c.pxeBoots}, ramdisk ${c.ramdiskBoots}, disk ${c.diskBoots}, refused ${c.refused}, failed calls ${c.failedCalls}, wipes ${c.wipesPerformed}\n    power: ${seen.join('; ')}`;
      }).join('\n');
    },
    async stop() {
      stopped = true;
      for (const m of machines.values()) m.interrupt();
      await Promise.allSettled(loops);
      await Promise.allSettled([...plays]);
      if (transient.length) console.warn(`sushy machines: ${transient.length} poll(s) failed once and passed on the next poll:\n${transient.join('\n')}`);
    },
  };
}
