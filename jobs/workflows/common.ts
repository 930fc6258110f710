import { isIP } from 'node:net';
import { complete, failed, skipped, type StepResult } from '../steps';
import { StepInterrupt, type StepContext, type StepDef } from '../engine-types';
import type { BootPurpose, ReportRow } from '../../src/modules/boot/entries';
import { revokeRunBoot } from '../../src/modules/boot/run-boot';
import { heldPxeContinuous } from '../../src/modules/sites/commands';
import type { PowerState } from '../../clients/bmc/driver';
import { WIPE_STEP } from '../../src/modules/boot/ramdisk-steps';

/**
 * Building blocks the workflow definitions share. Each is re-entrant (see engine-types.ts): the
 * commands it queues are found again by key on every wake-up, so calling it again is free.
 */

/** The ramdisk's reports, as the callback API stores them (src/modules/boot: payload shapes). */
export interface InventoryReport {
  uuid?: string | null;
  nics?: { mac: string; name?: string; speedMbps?: number }[];
  cpus?: { model: string; cores: number; threads: number }[];
  memoryMiB?: number;
  disks?: { name?: string; serial?: string | null; sizeBytes?: number; model?: string }[];
  gpus?: unknown[];
}
export interface DcgmReport { passed: boolean; level?: number; tests?: { name: string; result: string; details?: string }[] }
export interface WipeDisk { serial?: string | null; name?: string; mode?: string; attested?: boolean; method?: string }
export interface WipeReport { disks?: WipeDisk[] }
export interface StepReport { name: string; status: 'started' | 'succeeded' | 'failed'; message?: string }

export const fail = (code: string, message: string, retryable = false): never => {
  throw new StepInterrupt(failed(code, message, retryable));
};

/** Sets PXE for the next boot only, then powers the machine on (or cycles it when it runs). */
export async function pxeBootOnce(ctx: StepContext, beforePower?: () => Promise<void>): Promise<string> {
  // Independent of each other: queued together, run at once by the agent, one wake-up for both.
  const [, state] = (await ctx.commands([
    { kind: 'bmc.boot-device', params: { device: 'pxe', persistent: false } },
    { kind: 'bmc.power-state', params: {} },
  ])) as [unknown, PowerState];
  const action = state === 'off' ? 'on' : 'cycle';
  await beforePower?.();
  await ctx.command('bmc.power', { action });
  return action === 'on' ? 'PXE once, powered on' : `PXE once, power-cycled (it was ${state})`;
}

/**
 * A PXE override the BMC holds Continuous (it offers no Once, or reads Continuous whatever is sent:
 * sushy-tools, older Supermicro) would PXE-boot the machine at every start. The run's ramdisk boot
 * is proven by the time a power-off follows it (the ramdisk called in, or the run is cleaning up),
 * so the disk is set back first. Null when the run left no such override.
 */
export async function clearHeldPxe(ctx: StepContext): Promise<string | null> {
  // Read once per attempt (the step's memo): the body runs again at each of its commands' results,
  // and the answer, from the run's earlier steps, does not change meanwhile.
  if (typeof ctx.memo.heldPxe !== 'boolean') ctx.memo.heldPxe = await heldPxeContinuous(ctx.db, ctx.run.id);
  if (!ctx.memo.heldPxe) return null;
  await ctx.command('bmc.boot-device', { device: 'disk', persistent: false });
  return 'the PXE override the BMC held Continuous set back to the disk';
}

export const powerOff: StepDef = {
  name: 'power-off',
  title: 'Powering off',
  destructive: true,
  async run(ctx) {
    const cleared = await clearHeldPxe(ctx);
    await ctx.command('bmc.power', { action: 'off' });
    return complete(cleared ? `${cleared}; powered off` : 'powered off');
  },
};

/** Leaves the ramdisk for the installed OS: disk once, power cycle (deploy's end, unrescue). */
export const bootInstalledOs: StepDef = {
  name: 'boot-installed-os',
  title: 'Booting the installed OS',
  destructive: true,
  async run(ctx) {
    await ctx.command('bmc.boot-device', { device: 'disk', persistent: false });
    await ctx.command('bmc.power', { action: 'cycle' });
    return complete('disk once, power-cycled');
  },
};

/**
 * A ramdisk boot: the run's boot entry for the node's MACs, PXE once, power on or cycle. Its
 * cleanup (abort, failure) revokes the entry and powers the machine off, so an aborted run leaves
 * no ramdisk running and no token that still works.
 */
export function bootRamdisk(opts: {
  name: string; title: string; purpose: BootPurpose;
  params?: (ctx: StepContext) => Promise<Record<string, unknown>> | Record<string, unknown>;
  /** Why this run needs no ramdisk (the step is skipped), or null. */
  skipIf?: (ctx: StepContext) => string | null;
}): StepDef {
  return {
    name: opts.name,
    title: opts.title,
    destructive: true,
    async run(ctx) {
      const skip = opts.skipIf?.(ctx);
      if (skip) return skipped(skip);
      await ctx.bootEntry(opts.purpose, opts.params ? await opts.params(ctx) : {});
      return complete(await pxeBootOnce(ctx));
    },
    cleanup: {
      name: `${opts.name}.cleanup`,
      title: 'Revoking the boot entry and powering off',
      async run(ctx) {
        const revoked = await revokeRunBoot(ctx.db, ctx.run.id);
        const cleared = await clearHeldPxe(ctx);
        await ctx.command('bmc.power', { action: 'off' });
        return complete(`${revoked} boot entr${revoked === 1 ? 'y' : 'ies'} revoked; ${cleared ? `${cleared}; ` : ''}powered off`);
      },
    },
  };
}

/** The newest report of a kind, or a wait for it until the step's deadline. */
export async function latestReport(ctx: StepContext, kind: Parameters<StepContext['reports']>[0], what: string): Promise<ReportRow | StepResult> {
  const reports = await ctx.reports(kind);
  return reports.at(-1) ?? ctx.waitFor(what);
}

export const isReport = (report: ReportRow | StepResult): report is ReportRow => 'payload' in report;

/** Disks by serial (else name), as the wipe attestation matches them. */
export const diskKey = (d: { serial?: string | null; name?: string }): string | null => d.serial?.trim() || d.name?.trim() || null;

/** The disks the node's inventory knows: the ramdisk's, else the BMC's. */
export function inventoryDisks(inventory: unknown): string[] {
  const inv = (inventory ?? {}) as { ramdisk?: InventoryReport; outOfBand?: { storage?: { name?: string; serial?: string | null }[] | null } };
  const disks = inv.ramdisk?.disks ?? inv.outOfBand?.storage ?? [];
  return disks.map(diskKey).filter((k): k is string => k !== null);
}

/** Every disk of the inventory with an attested wipe (in `mode` when given), and what is missing. */
export function wipeAttestation(inventory: unknown, reports: readonly ReportRow[], mode: string | null): { attested: boolean; missing: string[]; total: number } {
  const disks = inventoryDisks(inventory);
  const good = new Set<string>();
  for (const report of reports) {
    for (const disk of (report.payload as WipeReport).disks ?? []) {
      const key = diskKey(disk);
      if (key && disk.attested === true && (!mode || !disk.mode || disk.mode === mode)) good.add(key);
    }
  }
  const missing = disks.filter((d) => !good.has(d));
  // No known disk is no attestation at all: the release cannot say what it disk.
  return { attested: disks.length > 0 && missing.length === 0, missing, total: disks.length };
}


/**
 * Whether the ramdisk is done wiping: every disk of the inventory has a wipe record (attested or
 * not), or its `erase-devices` step report says it ended (a disk with no record then counts as
 * not attested). A ramdisk may report one disk at a time as each finishes, so the first wipe
 * report alone says nothing about the others: deciding on it failed a release whose other disks
 * were still being erased.
 */
export async function wipeOver(ctx: StepContext, wipes: readonly ReportRow[]): Promise<boolean> {
  if (wipes.length > 0) {
    const seen = new Set<string>();
    for (const report of wipes) {
      for (const disk of (report.payload as WipeReport).disks ?? []) {
        const key = diskKey(disk);
        if (key) seen.add(key);
      }
    }
    if (inventoryDisks(ctx.node.inventory).every((d) => seen.has(d))) return true;
  }
  return (await ctx.reports('step')).some((report) => {
    const stepReport = report.payload as unknown as StepReport;
    return stepReport.name === WIPE_STEP && (stepReport.status === 'succeeded' || stepReport.status === 'failed');
  });
}

/** The distinct disks the wipe reports name. */
export const wipedDisks = (wipes: readonly ReportRow[]): number =>
  new Set(wipes.flatMap((r) => ((r.payload as WipeReport).disks ?? []).map((d) => diskKey(d)).filter(Boolean))).size;

/** Only IP literals, as enroll takes them: a BMC reporting anything else is ignored. */
export const ipLiterals = (values: unknown): string[] =>
  Array.isArray(values) ? values.filter((v): v is string => typeof v === 'string' && isIP(v) !== 0).slice(0, 16) : [];
