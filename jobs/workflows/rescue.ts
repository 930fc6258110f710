import { complete } from '../steps';
import type { WorkflowDef } from '../engine-types';
import { revokeNodeBoot } from '../../src/modules/boot/entries';
import { bootInstalledOs, bootRamdisk, isReport, latestReport } from './common';

/** rescue: boot the rescue ramdisk; the run succeeds when it calls back, and the node stays in rescue. */
export const rescueWorkflow: WorkflowDef = {
  kind: 'metal-rescue',
  steps: [
    bootRamdisk({ name: 'boot-rescue-ramdisk', title: 'Booting the rescue ramdisk', purpose: 'rescue' }),
    {
      name: 'await-rescue-heartbeat',
      title: 'Waiting for the rescue ramdisk to come up',
      async run(ctx) {
        const report = await latestReport(ctx, 'heartbeat', 'the rescue ramdisk to come up and call back');
        if (!isReport(report)) return report;
        return complete('the rescue ramdisk is up');
      },
    },
  ],
};

/** unrescue: leave the rescue ramdisk and boot the installed OS; then deployed. */
export const unrescueWorkflow: WorkflowDef = {
  kind: 'metal-unrescue',
  steps: [
    {
      name: 'revoke-rescue-entry',
      title: 'Revoking the rescue boot entry',
      async run(ctx) {
        const revoked = await revokeNodeBoot(ctx.db, ctx.node.id);
        return complete(`${revoked} boot entr${revoked === 1 ? 'y' : 'ies'} revoked`);
      },
    },
    bootInstalledOs,
  ],
};
