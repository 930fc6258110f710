import { complete, skipped } from '../steps';
import type { WorkflowDef } from '../engine-types';
import type { OutOfBandInventory, PowerState } from '../../clients/bmc/driver';
import { ipLiterals, pxeBootOnce } from './common';

/**
 * enrolling (seed: "verify BMC access and inspect the machine out of band"): the BMC answers with
 * the broker's credentials, its inventory lands in node.inventory (addresses replaced only when
 * it reports some), and a machine known only by its UUID is PXE-booted once with no boot entry
 * (discovery sees it within its window after pxe_cycled_at) and waits for confirmMac. Success
 * chains to inspecting (WORKFLOW_CHAINS).
 */
export const enrollWorkflow: WorkflowDef = {
  kind: 'metal-enroll',
  steps: [
    {
      name: 'verify-bmc',
      title: 'Verifying BMC access',
      async run(ctx) {
        const state = (await ctx.command('bmc.power-state', {})) as PowerState;
        return complete(`the BMC answers with the stored credentials; power is ${state}`);
      },
    },
    {
      name: 'inspect-out-of-band',
      title: 'Reading the inventory from the BMC',
      async run(ctx) {
        const inv = (await ctx.command('bmc.inventory', {})) as OutOfBandInventory & { addresses?: unknown };
        const addresses = ipLiterals(inv.addresses);
        const { addresses: _ignored, ...facts } = inv;
        await ctx.updateNode({
          inventory: { ...((ctx.node.inventory ?? {}) as Record<string, unknown>), outOfBand: facts, outOfBandAt: ctx.now.toISOString() },
          ...(addresses.length ? { addresses } : {}),
        });
        const parts = [
          facts.uuid ? `UUID ${facts.uuid}` : 'no UUID',
          `${facts.macs?.length ?? 0} MAC(s)`,
          facts.cpus ? `${facts.cpus.length} CPU(s)` : null,
          facts.memoryMiB ? `${facts.memoryMiB} MiB` : null,
          facts.storage ? `${facts.storage.length} disk(s)` : null,
          addresses.length ? `addresses ${addresses.join(', ')}` : null,
        ].filter(Boolean);
        return complete(parts.join(', '));
      },
    },
    {
      name: 'pxe-discovery-boot',
      title: 'PXE-booting once so discovery can see its MAC',
      destructive: true,
      async run(ctx) {
        if (ctx.node.macs.length > 0) return skipped('the node has a confirmed MAC');
        const how = await pxeBootOnce(ctx, async () => {
          // Discovery binds a PXE sighting to this node only within its window after this instant,
          // so it is recorded with the power command, before the machine can boot: once.
          if (ctx.memo.pxeCycledAt) return;
          await ctx.updateNode({ pxeCycledAt: ctx.now });
          ctx.memo.pxeCycledAt = ctx.now.toISOString();
        });
        return complete(`${how}, with no boot entry`);
      },
    },
    {
      name: 'await-mac',
      title: 'Waiting for its MAC address to be confirmed',
      async run(ctx) {
        if (ctx.node.macs.length > 0) return complete(`MAC ${ctx.node.macs.join(', ')}`);
        return ctx.waitFor('its MAC address to be confirmed (confirmMac)');
      },
    },
  ],
};
