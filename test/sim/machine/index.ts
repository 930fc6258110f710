/**
 * Simulated machines (issue 9 item 6): a fleet on top of the Redfish BMC simulator. When a BMC
 * powers its machine on into PXE, the machine does what its firmware would: it fetches its iPXE
 * script from the service by MAC (`GET /boot/ipxe?mac=`), and when the script boots the ramdisk,
 * it plays that ramdisk against the real callback API with the per-boot token the script carried
 * (instructions, heartbeat, then per purpose: inventory, DCGM, per-disk wipes). Switches make each
 * part fail. Everything runs in this process on timers and fetch: no process or server per machine
 * beyond the BMC's own, so 1,000 machines cost little more than their BMCs.
 *
 * The counts are the machine side's destructive calls (disks wiped, crypto-erased), beside the
 * Redfish simulator's counts of the BMC calls.
 */
import { startRedfishSim, type BootEvent, type MachineOptions, type RedfishSim, type RedfishSimOptions, type SimMachine } from '../redfish/server';
import type { MockupName } from '../redfish/mockup';
import type { InventoryReport } from '../../../src/modules/boot/reports';
import type { BootPurpose, ReportKind } from '../../../src/modules/boot/entries';
import { hardwareOf } from './inventory';
import { COUNTED, emptyCounts, PlayedMachine, type MachineBehaviour, type MachineCounts, type PlayFleet, type PxeEvent } from './play';

export { parseIpxeScript, type IpxeBoot } from './ipxe';
export { PlayedMachine, type MachineBehaviour, type MachineCounts, type MachineHost, type PxeEvent, type WipeRecord } from './play';

export interface SimulatedMachine {
  id: string;
  bmc: SimMachine;
  /** The NICs, boot NIC first: the BMC's MACs when its mockup has EthernetInterfaces, else the machine's own. */
  macs: string[];
  uuid: string;
  serial: string;
  /** What an honest inspection ramdisk reports for it. */
  inventory(): InventoryReport;
  behaviour: MachineBehaviour;
  counts(): MachineCounts;
  /** The purpose of each ramdisk boot, in order. */
  boots: { purpose: BootPurpose | null; entryId: string; at: number }[];
}

export interface MachineSimOptions {
  /** The Redfish simulator's options (its onBoot is the machine sim's). */
  redfish?: Omit<RedfishSimOptions, 'onBoot'>;
  /** The service the machines boot from: http://host:port. */
  serviceUrl: string;
  /** Every machine's switches, or a function of the machine. Changeable later with setBehaviour. */
  behaviour?: MachineBehaviour | ((id: string, index: number) => MachineBehaviour);
  /** Each PXE boot, for a test's site agent to report as a sighting. */
  onPxe?: (event: PxeEvent) => void;
  /** Every boot the BMC starts, after the machine's own handling (a test's installer plays media boots). */
  onBoot?: (bmc: SimMachine, boot: BootEvent) => void;
}

export interface MachineSim {
  redfish: RedfishSim;
  machines: SimulatedMachine[];
  machine(id: string): SimulatedMachine;
  setBehaviour(id: string, behaviour: MachineBehaviour): void;
  /** Resolves once no machine is booting or playing its ramdisk (rescue heartbeats aside: they end at power-off). */
  idle(): Promise<void>;
  /** Totals over the fleet. */
  totals(): Omit<MachineCounts, 'wiped'>;
  stop(): Promise<void>;
}

const hex = (n: number) => (n & 0xff).toString(16).padStart(2, '0');

/** A machine of the simulator's fleet: the play, powered by its simulated BMC. */
class Machine extends PlayedMachine implements SimulatedMachine {
  constructor(readonly bmc: SimMachine, macs: string[], serial: string, mockup: MockupName, behaviour: MachineBehaviour, fleet: PlayFleet) {
    super({
      id: bmc.id,
      uuid: () => bmc.state().uuid,
      poweredOn: () => { const power = bmc.state().powerState; return power !== 'Off' && power !== 'PoweringOff'; },
    }, macs, serial, hardwareOf(mockup, serial), behaviour, fleet);
  }
}

/** The machine's own MACs when its BMC reports none: the Redfish simulator's scheme, per index. */
function ownMacs(index: number, given: MachineOptions): string[] {
  if (given.macs?.length) return given.macs.map((m) => m.toLowerCase());
  return [0, 1].map((i) => `52:54:00:${hex(index >> 16)}:${hex(index >> 8)}:${hex((index + i * 0x40) & 0xff)}`);
}

export async function startMachineSim(opts: MachineSimOptions): Promise<MachineSim> {
  const list: MachineOptions[] = Array.isArray(opts.redfish?.machines)
    ? opts.redfish.machines
    : Array.from({ length: opts.redfish?.machines ?? 1 }, () => ({}));
  const plays = new Map<Promise<void>, PlayedMachine>();
  const fleet: PlayFleet = {
    serviceUrl: opts.serviceUrl.replace(/\/+$/, ''),
    onPxe: opts.onPxe,
    track(play, machine) {
      plays.set(play, machine);
      void play.finally(() => plays.delete(play));
    },
    lingering() {
      for (const wake of lingerWaiters.splice(0)) wake();
    },
  };
  const lingerWaiters: (() => void)[] = [];
  const byId = new Map<string, Machine>();
  const ordered: Machine[] = [];
  const redfish = await startRedfishSim({
    ...opts.redfish,
    machines: list,
    // A power-on is the BMC's business; the boot itself runs after it, off the BMC's request.
    onBoot: (bmc, boot) => {
      const m = byId.get(bmc.id);
      if (m) setImmediate(() => m.powerOn(boot.target));
      opts.onBoot?.(bmc, boot);
    },
  });
  redfish.machines.forEach((bmc, index) => {
    const given = { ...opts.redfish?.defaults, ...list[index] };
    const state = bmc.state();
    const macs = state.macs.length ? state.macs.map((m) => m.toLowerCase()) : ownMacs(index, given);
    const behaviour = typeof opts.behaviour === 'function' ? opts.behaviour(bmc.id, index) : { ...opts.behaviour };
    const machine = new Machine(bmc, macs, state.serial, given.mockup ?? 'public-rackmount1', behaviour, fleet);
    byId.set(bmc.id, machine);
    ordered.push(machine);
  });
  const lookup = (id: string) => {
    const m = byId.get(id);
    if (!m) throw new Error(`no simulated machine ${id}`);
    return m;
  };
  let stopped = false;
  return {
    redfish,
    machines: ordered,
    machine: lookup,
    setBehaviour: (id, behaviour) => { lookup(id).behaviour = { ...behaviour }; },
    async idle() {
      // setImmediate above: a boot the BMC just applied starts on the next turn.
      await new Promise((r) => setImmediate(r));
      for (;;) {
        const busy = [...plays].filter(([, m]) => !m.heartbeating).map(([p]) => p);
        if (!busy.length) return;
        await Promise.race([Promise.allSettled(busy), new Promise<void>((r) => lingerWaiters.push(r))]);
        await new Promise((r) => setImmediate(r));
      }
    },
    totals() {
      const total = emptyCounts();
      for (const { counters: c } of ordered) {
        for (const key of COUNTED) total[key] += c[key];
        for (const kind of Object.keys(c.reports) as ReportKind[]) total.reports[kind] += c.reports[kind];
      }
      const { wiped: _wiped, ...rest } = total;
      return rest;
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      // Every play stops at its next call: a machine whose BMC is gone has no power.
      for (const m of ordered) m.interrupt();
      await redfish.stop();
      await Promise.allSettled([...plays.keys()]);
    },
  };
}
