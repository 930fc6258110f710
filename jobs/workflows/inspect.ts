import { complete } from '../steps';
import type { StepContext, WorkflowDef } from '../engine-types';
import { bootRamdisk, fail, isReport, latestReport, powerOff, type InventoryReport } from './common';

/**
 * With the pool's trustProvisioningNetwork, the ramdisk's identity is checked against the node
 * before anything of its report is written: a machine on the provisioning network answering for
 * another one must not rewrite that one's inventory.
 */
function mismatch(ctx: StepContext, report: InventoryReport): string | null {
  const node = ctx.node;
  const reportedUuid = typeof report.uuid === 'string' ? report.uuid.toLowerCase() : null;
  if (node.productUuid && reportedUuid !== node.productUuid.toLowerCase()) {
    return `the ramdisk reported UUID ${reportedUuid ?? '(none)'}, the node is ${node.productUuid}`;
  }
  const reported = new Set((report.nics ?? []).map((n) => String(n.mac).toLowerCase()));
  const absent = node.macs.filter((m) => !reported.has(m.toLowerCase()));
  if (absent.length) return `the ramdisk reported no NIC with the node's MAC ${absent.join(', ')}`;
  return null;
}

/** inspecting: boot the inspection ramdisk, take its inventory, power off; then commissioning. */
export const inspectWorkflow: WorkflowDef = {
  kind: 'metal-inspect',
  steps: [
    bootRamdisk({ name: 'boot-inspection-ramdisk', title: 'Booting the inspection ramdisk', purpose: 'inspect' }),
    {
      name: 'await-inventory',
      title: 'Waiting for the inspection ramdisk to report its inventory',
      async run(ctx) {
        const report = await latestReport(ctx, 'inventory', 'the inspection ramdisk to report its inventory');
        if (!isReport(report)) return report;
        const inv = report.payload as InventoryReport;
        if (ctx.pool.policy.trustProvisioningNetwork) {
          const why = mismatch(ctx, inv);
          if (why) fail('INVENTORY_MISMATCH', `${why}: nothing was written`);
        }
        await ctx.updateNode({
          inventory: { ...((ctx.node.inventory ?? {}) as Record<string, unknown>), ramdisk: inv, inspectedAt: ctx.now.toISOString() },
        });
        return complete(`${inv.nics?.length ?? 0} NIC(s), ${inv.cpus?.length ?? 0} CPU(s), ${inv.memoryMiB ?? 0} MiB, ${inv.disks?.length ?? 0} disk(s)`);
      },
    },
    powerOff,
  ],
};
