import { complete } from '../steps';
import type { WorkflowDef } from '../engine-types';
import { bootRamdisk, fail, inventoryDisks, isReport, latestReport, powerOff, wipedDisks, wipeOver, type DcgmReport } from './common';

/** DCGM's long diagnostic: what commissioning certifies a GPU machine with. */
export const COMMISSION_DCGM_LEVEL = 3;

/** commissioning: DCGM diagnostics, a quick wipe, a power-off; then ready. */
export const commissionWorkflow: WorkflowDef = {
  kind: 'metal-commission',
  steps: [
    bootRamdisk({
      name: 'boot-commissioning-ramdisk',
      title: 'Booting the commissioning ramdisk',
      purpose: 'commission',
      params: (ctx) => ({ dcgmLevel: COMMISSION_DCGM_LEVEL, wipe: 'quick', disks: inventoryDisks(ctx.node.inventory) }),
    }),
    {
      name: 'dcgm-diagnostics',
      title: 'Running DCGM diagnostics',
      async run(ctx) {
        const report = await latestReport(ctx, 'dcgm', 'the ramdisk to report DCGM diagnostics');
        if (!isReport(report)) return report;
        const dcgm = report.payload as unknown as DcgmReport;
        const failedTests = (dcgm.tests ?? []).filter((t) => !/^(pass|skip)/i.test(t.result)).map((t) => `${t.name}: ${t.result}`);
        if (dcgm.passed !== true) fail('DCGM_FAILED', `DCGM level ${dcgm.level ?? '?'} failed${failedTests.length ? ` (${failedTests.join('; ')})` : ''}`);
        return complete(`DCGM level ${dcgm.level ?? '?'} passed, ${dcgm.tests?.length ?? 0} test(s)`);
      },
    },
    {
      name: 'quick-wipe',
      title: 'Quick-wiping the disks',
      destructive: true,
      async run(ctx) {
        const wipes = await ctx.reports('wipe');
        if (!(await wipeOver(ctx, wipes))) return ctx.waitFor('the ramdisk to report the quick wipe of every disk');
        return complete(`${wipedDisks(wipes)} disk(s) wiped`);
      },
    },
    powerOff,
  ],
};
