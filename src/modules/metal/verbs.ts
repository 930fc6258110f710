import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { absent, decide } from '../../auth/decide';
import { AppError, invalidInput } from '../../errors';
import { newId } from '../../ids';
import { isModuleRegistered } from '../../config';
import { nodeResource } from '../tenancy/resources';
import { clearedFailure, decideMove, RECOVER_TO, runKindOf, type ProvisionState, type Verb } from './states';
import { ACTIVE_RUN_STATUSES, updateNode, type NodeWrite } from './node-store';
import { readPolicy } from '../tenancy/pool';
import { nodeViewColumns, nodeViewFrom, toNodeRow, type NodeChange, type NodeRow } from './node-rows';

/** The single-node verbs whose whole effect is a state move (enroll, power, bulk... live elsewhere). */
export type MoveVerb = Extract<Verb, 'manage' | 'inspect' | 'provide' | 'abort' | 'recover' | 'retire' | 'undeploy' | 'deploy' | 'rescue'>;

export const WIPE_MODES = ['none', 'quick', 'secure-erase', 'crypto-erase'] as const;
export type WipeMode = (typeof WIPE_MODES)[number];

export interface VerbOptions {
  reason?: string | null;
  wipe?: WipeMode | null;
  profile?: { profileId: string; profileVersion: number };
  /**
   * Node fields the caller changes in the verb's own commit (unprovision's new BMC credentials and
   * driver), so the change and the verb's run are written together or not at all.
   */
  nodeChange?: NodeChange;
  /** The node's version as the caller read it: CONFLICT, with nothing written, if it moved since. */
  expectedVersion?: number;
}

/**
 * "On a pool with agent: 'none' the node fails with UNSUPPORTED, since such a machine cannot boot
 * the ramdisk": the change that makes a rescued node of such a pool failed (null for other pools).
 */
export function agentlessRescue(pool: { id: string; policy: unknown }): { data: NodeChange; error: { code: 'UNSUPPORTED'; message: string } } | null {
  if (readPolicy(pool.policy).agent !== 'none') return null;
  const error = { code: 'UNSUPPORTED' as const, message: `pool ${pool.id} is agentless (agent: 'none'): its machines cannot boot the rescue ramdisk` };
  // As every failed node: maintenance on, until an operator recovers it.
  return { data: { provisionState: 'failed', failedFrom: 'rescue', lastErrorCode: error.code, lastErrorMessage: error.message, maintenance: true }, error };
}

/** What a verb resolver hands to its payload: the node's id and, when the verb read it back, its row. */
export interface VerbResult {
  nodeId: string;
  row?: NodeRow;
}

/** The steps every single-node verb starts with: load, decide on the node, ask the state table. */
async function loadForVerb(ctx: Context, verb: Exclude<Verb, 'enroll'>, nodeId: string) {
  const principal = requirePrincipal(ctx);
  const { rows } = await ctx.sql.query(`SELECT ${nodeViewColumns('n')} FROM ${nodeViewFrom('node', 'n')} WHERE n.id = $1`, [nodeId]);
  if (!rows[0]) throw absent('MetalNode', nodeId);
  const node = toNodeRow(rows[0]);
  decide(principal, 'compute:nodes:provision', nodeResource(node));
  const decision = decideMove(verb, node.provisionState as ProvisionState, node.failedFrom as ProvisionState | null);
  if (!decision.legal) {
    throw new AppError(
      'INVALID_STATE',
      `${verb} is not legal for node ${node.id} in state ${decision.current}; legal from: ${decision.legalFrom.join(', ') || 'none'}`,
      { state: decision.current, legalFrom: decision.legalFrom },
    );
  }
  return { node, decision };
}

/**
 * The one transaction every single-node verb commits, through the node store: a compare-and-set
 * on the node's version (CONFLICT when it changed since it was read), the workflow run it starts
 * if any (due at once), its outbox events, in one statement that returns the node's
 * new view. All of it or nothing.
 */
async function commitVerb(ctx: Context, node: { id: string; version: number }, change: NodeWrite): Promise<NodeRow> {
  const row = await ctx.sql.transaction((tx) => updateNode(tx, node, change, ctx.requestId));
  if (!row) throw new AppError('CONFLICT', `node ${node.id} changed concurrently; read it again and retry`);
  return row;
}

/**
 * How every single-node verb runs: authenticate; decide compute:nodes:provision on the node
 * (another tenant's node is NOT_FOUND); ask the state table; then, in one transaction, a
 * compare-and-set on the node's version, the workflow run that carries the verb's intent (its
 * params: verb, wipe, profile version, ...), the outbox event and the job that names the run.
 * abort starts no run: the node's active run becomes aborting and is woken to run its cleanup.
 * No verb touches the machine.
 */
export async function runMoveVerb(ctx: Context, verb: MoveVerb, nodeId: string, opts: VerbOptions = {}): Promise<VerbResult> {
  const { node, decision } = await loadForVerb(ctx, verb, nodeId);
  if (verb === 'deploy') {
    // Records a profile version that exists, in the node's tenant, without running it.
    const profile = opts.profile;
    if (!profile) throw invalidInput('profileId', 'is required');
    const owner = await ctx.prisma.deployProfile.findUnique({ where: { id: profile.profileId } });
    if (!owner || owner.tenantId !== node.tenantId) throw invalidInput('profileId', 'no such deploy profile');
    const version = await ctx.prisma.deployProfileVersion.findUnique({
      where: { profileId_version: { profileId: owner.id, version: profile.profileVersion } },
    });
    if (!version) throw invalidInput('profileVersion', `deploy profile ${owner.id} has no such version`);
  }
  const from = node.provisionState as ProvisionState;
  const to = decision.to ?? from;
  const data: NodeChange = { ...opts.nodeChange, provisionState: to, ...clearedFailure(verb) };
  if (verb === 'abort') {
    data.failedFrom = from;
    data.lastErrorCode = 'ABORTED';
    data.lastErrorMessage = opts.reason?.trim() ? `aborted: ${opts.reason.trim()}` : 'aborted';
    data.maintenance = true;
  }
  if (verb === 'deploy' && opts.profile) {
    data.profileId = opts.profile.profileId;
    data.profileVersion = opts.profile.profileVersion;
  }
  const wipe = verb === 'undeploy' ? (opts.wipe ?? 'quick') : undefined;
  const payload = {
    verb,
    from,
    to,
    ...(verb === 'abort' ? { reason: opts.reason ?? null } : {}),
    ...(verb === 'recover' ? { failedFrom: node.failedFrom, stablePoint: RECOVER_TO[node.failedFrom as ProvisionState] } : {}),
    ...(wipe ? { wipe } : {}),
    ...(verb === 'deploy' ? opts.profile : {}),
  };
  if (verb === 'rescue') {
    const pool = await ctx.prisma.pool.findUniqueOrThrow({ where: { id: node.poolId }, select: { id: true, policy: true } });
    const unsupported = agentlessRescue(pool);
    if (unsupported) {
      // The node moves to rescue and fails there at once: nothing can boot the ramdisk, so no
      // workflow starts and nothing is queued.
      const row = await commitVerb(ctx, node, {
        data: { ...unsupported.data },
        run: null,
        events: [
          { type: decision.event, payload },
          { type: 'node.provision.failed', payload: { verb, from: 'rescue', to: 'failed', failedFrom: 'rescue', error: unsupported.error } },
        ],
      });
      return { nodeId: node.id, row };
    }
  }
  const kind = runKindOf(verb, to);
  const params: RunParams = {
    verb,
    ...(wipe ? { wipe } : {}),
    ...(verb === 'deploy' && opts.profile ? { profileId: opts.profile.profileId, profileVersion: opts.profile.profileVersion } : {}),
  };
  const row = await commitVerb(ctx, { id: node.id, version: opts.expectedVersion ?? node.version }, {
    data,
    // recover and retire (the verbs legal from failed) of a node whose aborted run still cleans
    // up are CONFLICT, with nothing written: the store's statement refuses to start a run then.
    run: kind ? { id: newId('WorkflowRun'), kind, params } : null,
    events: [{ type: decision.event, payload }],
    activeRun: verb === 'abort' ? 'abort' : null,
  });
  return { nodeId: node.id, row };
}

/** A run's params as the verbs write them (runs.md); the store adds requestId. */
export interface RunParams extends Record<string, unknown> {
  /** The metal verb that started the run, or the control-node API's register (a control node's adoption). */
  verb: Verb | 'register';
  reason?: string;
  wipe?: WipeMode;
  profileId?: string;
  profileVersion?: number;
  batchId?: string;
}

/**
 * unrescue: starts the metal-unrescue workflow; the node stays in rescue until it succeeds.
 * A second call while that workflow runs returns the node unchanged; CONFLICT while the rescue
 * ramdisk is still booting (the rescue run has not succeeded, or a bulk rescue's batch has not
 * released it yet); INVALID_CONFIG without the provision module. Publishes
 * node.provision.unrescuing with the workflowId.
 */
export async function unrescue(ctx: Context, nodeId: string): Promise<VerbResult> {
  const { node, decision } = await loadForVerb(ctx, 'unrescue', nodeId);
  if (!isModuleRegistered(ctx.config, 'provision')) {
    throw new AppError('INVALID_CONFIG', 'unrescue needs the provision module, which is not registered (MODULES)');
  }
  const current = node.workflowId ? await ctx.prisma.workflowRun.findUnique({ where: { id: node.workflowId } }) : null;
  const active = (ACTIVE_RUN_STATUSES as readonly string[]).includes(current?.status ?? '');
  if (current?.kind === 'metal-unrescue' && active) return { nodeId: node.id, row: node };
  if (current?.kind === 'metal-rescue' && current.status !== 'succeeded') {
    throw new AppError('CONFLICT', `node ${node.id}: the rescue ramdisk is still booting (workflow ${current.id} is ${current.status}); retry when it is up`);
  }
  // A bulk rescue moved the node to rescue, but its batch (awaiting approval) has not started the
  // rescue run: the ramdisk has not even begun to boot.
  const { rows: pending } = await ctx.sql.query<{ id: string; status: string }>(
    `SELECT id, status FROM command_batch
      WHERE pool_id = $2 AND verb = 'rescue' AND released_at IS NULL AND status IN ('awaiting-approval', 'approved', 'recorded')
        AND $1 = ANY(node_ids) AND created_at >= $3::timestamptz
      ORDER BY created_at DESC LIMIT 1`,
    [node.id, node.poolId, current?.createdAt ?? new Date(0)],
  );
  if (pending[0]) {
    throw new AppError('CONFLICT', `node ${node.id}: the rescue ramdisk has not started booting (batch ${pending[0].id} is ${pending[0].status}); retry when it is up`);
  }
  const workflowId = newId('WorkflowRun');
  const row = await commitVerb(ctx, node, {
    data: {},
    run: { id: workflowId, kind: 'metal-unrescue', params: { verb: 'unrescue' } satisfies RunParams },
    events: [{ type: decision.event, payload: { verb: 'unrescue', from: 'rescue', to: 'rescue', workflowId } }],
  });
  return { nodeId: node.id, row };
}
