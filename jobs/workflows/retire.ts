import { complete, skipped } from '../steps';
import type { StepContext, WorkflowDef } from '../engine-types';
import { revokeNodeBoot } from '../../src/modules/boot/entries';
import { withdrawQueuedCommands } from '../../src/modules/sites/commands';
import { bootRamdisk, fail, inventoryDisks, powerOff, wipeAttestation, wipeOver } from './common';

const notBcd = (ctx: StepContext) => (ctx.pool.policy.agent === 'bcd' ? null : `pool ${ctx.pool.id} does not run bcd: no crypto-erase`);

/** retiring: crypto-erase the disks (bcd pools), power off, revoke the node's identity; then retired. */
export const retireWorkflow: WorkflowDef = {
  kind: 'metal-retire',
  steps: [
    bootRamdisk({
      name: 'boot-erase-ramdisk',
      title: 'Booting the crypto-erase ramdisk',
      purpose: 'retire',
      params: (ctx) => ({ wipe: 'crypto-erase', disks: inventoryDisks(ctx.node.inventory) }),
      skipIf: notBcd,
    }),
    {
      name: 'crypto-erase',
      title: 'Crypto-erasing disks',
      destructive: true,
      async run(ctx) {
        const skip = notBcd(ctx);
        if (skip) return skipped(skip);
        const reports = await ctx.reports('wipe');
        if (!(await wipeOver(ctx, reports))) return ctx.waitFor('the crypto-erase report of every disk (bcd pools)');
        const att = wipeAttestation(ctx.node.inventory, reports, 'crypto-erase');
        if (!att.attested) {
          fail('UNVERIFIED_WIPE', att.total === 0
            ? 'the inventory lists no disk, so the crypto-erase cannot be attested'
            : `no attested crypto-erase for ${att.missing.join(', ')}`);
        }
        return complete(`${att.total} disk(s) crypto-erased, attested`);
      },
    },
    powerOff,
    {
      name: 'revoke-identity',
      title: "Revoking the node's identity",
      async run(ctx) {
        const entries = await revokeNodeBoot(ctx.db, ctx.node.id);
        // Its boot tokens go with its entries; any still unclaimed command for it goes too.
        const withdrawn = await withdrawQueuedCommands(ctx.db, ctx.node.id, ctx.run.id, 'withdrawn: the node was retired');
        return complete(`${entries} boot entr${entries === 1 ? 'y' : 'ies'} and their tokens revoked; ${withdrawn} queued command(s) withdrawn`);
      },
    },
  ],
};
