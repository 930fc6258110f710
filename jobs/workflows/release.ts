import { complete, skipped } from '../steps';
import type { RunInfo, WorkflowDef } from '../engine-types';
import { bootRamdisk, inventoryDisks, powerOff, wipeAttestation, wipeOver } from './common';

const wipeOf = (run: RunInfo) => run.params.wipe ?? 'quick';

const WIPE_TITLES: Record<string, string> = {
  quick: 'Quick-wiping disks',
  'secure-erase': 'Securely erasing disks',
  'crypto-erase': 'Crypto-erasing disks',
  none: 'Wiping disks (skipped: wipe none)',
};

/**
 * releasing: wipe with the chosen mode (run.params.wipe) and power off. Unless the mode is none,
 * ready only with an attested wipe of every disk of the inventory (decideWorkflowMove's
 * wipeAttested), otherwise UNVERIFIED_WIPE.
 */
export const releaseWorkflow: WorkflowDef = {
  kind: 'metal-release',
  steps: [
    bootRamdisk({
      name: 'boot-wipe-ramdisk',
      title: 'Booting the wipe ramdisk',
      purpose: 'release',
      params: (ctx) => ({ wipe: wipeOf(ctx.run), disks: inventoryDisks(ctx.node.inventory) }),
      skipIf: (ctx) => (wipeOf(ctx.run) === 'none' ? 'wipe none: no ramdisk boot' : null),
    }),
    {
      name: 'wipe-disks',
      title: (run) => WIPE_TITLES[wipeOf(run)] ?? `Wiping disks (${wipeOf(run)})`,
      destructive: true,
      async run(ctx) {
        const mode = wipeOf(ctx.run);
        if (mode === 'none') return skipped('wipe none');
        const reports = await ctx.reports('wipe');
        // The ramdisk reports once it has wiped what it found; the attestation of every disk
        // of the inventory is the run's outcome (finish), so a missing disk fails the release.
        if (!(await wipeOver(ctx, reports))) return ctx.waitFor('the ramdisk to report an attested wipe of every disk');
        const att = wipeAttestation(ctx.node.inventory, reports, mode);
        return complete(`${att.total - att.missing.length} of ${att.total} disk(s) attested (${mode})${att.missing.length ? `; not attested: ${att.missing.join(', ')}` : ''}`);
      },
    },
    powerOff,
  ],
  async finish(ctx) {
    const mode = wipeOf(ctx.run);
    if (mode === 'none') return {};
    return { wipeAttested: wipeAttestation(ctx.node.inventory, await ctx.reports('wipe'), mode).attested };
  },
};
