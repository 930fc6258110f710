import { complete, skipped } from '../steps';
import { fail } from './common';
import type { WorkflowDef } from '../engine-types';
import type { OutOfBandInventory, PowerState } from '../../clients/bmc/driver';
import { ipLiterals, pxeBootOnce } from './common';
import type { StepContext } from '../engine-types';
import type { NodeChange } from '../../src/modules/metal/node-rows';
import { MAX_MACS, lockMacs, notAMachineMac, parseMac, refuseTakenMacs } from '../../src/modules/metal/mac';
import { AppError } from '../../src/errors';

/**
 * The machine's identity from its BMC (issue 20): a node enrolled without MACs takes the MACs the
 * BMC reports for the system's NICs (the driver leaves out the manager's and the host interface),
 * and one without a UUID the BMC's UUID, so no PXE discovery is needed. A MAC another machine of
 * the site has fails the step CONFLICT, as enroll would. What the operator gave is never replaced:
 * a MAC or UUID the BMC does not report is a note.
 */
async function identityFromBmc(ctx: StepContext, facts: OutOfBandInventory): Promise<{ change: NodeChange; notes: string[] }> {
  const node = ctx.node;
  const change: NodeChange = {};
  const notes: string[] = [];
  // A remote agent reports what its driver read: normalised again, as enroll's macs are.
  const reported = [...new Set((facts.macs ?? []).map((m) => (typeof m === 'string' ? parseMac(m) : null)).filter((m): m is string => m !== null && notAMachineMac(m) === null))];
  if (node.macs.length === 0 && reported.length > MAX_MACS) {
    // More NICs than a machine has: a BMC that lies or counts something else. None is taken (which
    // would be a guess); the operator gives the MACs.
    notes.push(`note: the BMC reports ${reported.length} MACs, more than the ${MAX_MACS} a machine may have; none taken: enroll the node with its macs`);
  } else if (node.macs.length === 0 && reported.length > 0) {
    await lockMacs(ctx.db, node.siteId, reported);
    try {
      await refuseTakenMacs(ctx.db, node.siteId, reported, node.id);
    } catch (error) {
      if (!(error instanceof AppError) || error.code !== 'CONFLICT') throw error;
      const mac = (error.extensions.details as { mac?: string } | undefined)?.mac;
      fail('CONFLICT', `the BMC reports MAC ${mac}, and ${error.message}: is this machine enrolled twice?`);
    }
    change.macs = reported;
    notes.push(`MACs from the BMC: ${reported.join(', ')}`);
  } else if (node.macs.length > 0 && reported.length > 0) {
    const missing = node.macs.filter((m) => !reported.includes(m));
    if (missing.length) notes.push(`note: the BMC reports no NIC with the enrolled MAC ${missing.join(', ')} (it reports ${reported.join(', ')}); the enrolled MACs are kept`);
  }
  if (facts.uuid) {
    if (!node.productUuid) {
      change.productUuid = facts.uuid;
      notes.push(`UUID from the BMC`);
    } else if (node.productUuid.toLowerCase() !== facts.uuid) {
      notes.push(`note: the BMC reports UUID ${facts.uuid}, the node was enrolled with ${node.productUuid}; the enrolled UUID is kept`);
    }
  }
  return { change, notes };
}

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
        const identity = await identityFromBmc(ctx, facts);
        await ctx.updateNode({
          inventory: { ...((ctx.node.inventory ?? {}) as Record<string, unknown>), outOfBand: facts, outOfBandAt: ctx.now.toISOString() },
          ...(addresses.length ? { addresses } : {}),
          ...identity.change,
        });
        const unreadable = facts.unreadable ?? [];
        const parts = [
          facts.uuid ? `UUID ${facts.uuid}` : 'no UUID',
          `${facts.macs?.length ?? 0} MAC(s)`,
          facts.cpus ? `${facts.cpus.length} CPU(s)` : null,
          facts.memoryMiB ? `${facts.memoryMiB} MiB` : null,
          facts.storage ? `${facts.storage.length} disk(s)` : null,
          addresses.length ? `addresses ${addresses.join(', ')}` : null,
          unreadable.length ? `not readable: ${unreadable.map((u) => `${u.part} (${u.reason})`).join(', ')}` : null,
          ...identity.notes,
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
