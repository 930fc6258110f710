import { createHash, createPublicKey, verify } from 'node:crypto';
import type { CommandBatch } from '../../generated/prisma/client';
import type { Context } from '../../context';
import type { Sql } from '../../db/sql';
import { requirePrincipal } from '../../context';
import { can, decide, isPlatformAdmin } from '../../auth/decide';
import { AppError, invalidInput, notFound, type ErrorCode } from '../../errors';
import { newId } from '../../ids';
import { nodeResource, poolResource } from '../tenancy/resources';
import { readPolicy } from '../tenancy/pool';
import { clearedFailure, decideMove, runKindOf, VERBS, type ProvisionState, type Verb } from './states';
import { isDestructive } from './step-facts';
import type { RunParams, WipeMode } from './verbs';
import { sendInTx } from '../../../jobs/send';
import type { NodeRow } from './node-rows';
import { releaseBatchRuns, updateNodesOfPool } from './node-store';
import { agentlessRescue } from './verbs';

export const BULK_VERBS = (Object.keys(VERBS) as Verb[]).filter((v) => VERBS[v].bulk) as BulkVerb[];
export type BulkVerb = 'manage' | 'inspect' | 'provide' | 'undeploy' | 'rescue' | 'retire';
export const MAX_BULK = 10000;
/** The views the bulk statement returns, read by position. */

export interface BulkInput {
  poolId: string;
  verb: BulkVerb;
  nodeIds: string[];
  reason?: string | null;
  wipe?: WipeMode | null;
}

/** The nodes' new views (in the order given), read back by the statement that changed them. */
export interface BulkResult {
  /** The batch as its row reads (its node_ids are the ids given), or null when none was recorded. */
  batch: CommandBatch | null;
  rows: NodeRow[];
}

interface NodeHead {
  id: string;
  tenantId: string;
  siteId: string;
  poolId: string;
  provisionState: string;
  failedFrom: string | null;
  version: number;
}

export interface Refusal {
  nodeId: string;
  code: ErrorCode;
  message: string;
}

/** What approvers sign: the batch's canonical digest (sha256 of its sorted, fixed-order fields). */
export function batchDigest(batch: { id: string; poolId: string; verb: string; reason: string; nodeIds: string[]; wipe: string | null }): string {
  const canonical = JSON.stringify([batch.id, batch.poolId, batch.verb, batch.reason, [...batch.nodeIds].sort(), batch.wipe]);
  return createHash('sha256').update(canonical).digest('hex');
}

/**
 * bulk: one lifecycle verb on many nodes of a pool, all or nothing. Decided on the pool, then each
 * node exactly as its own verb; any refusal refuses the whole call before anything changes, listing
 * every refused node. Set-based: one read, one compare-and-set update, one event insert and one job
 * insert, whatever the number of nodes.
 */
export async function bulk(ctx: Context, input: BulkInput): Promise<BulkResult> {
  const principal = requirePrincipal(ctx);
  const pool = await ctx.prisma.pool.findUnique({ where: { id: input.poolId } });
  if (!pool) throw notFound('pool', input.poolId);
  decide(principal, 'compute:nodes:provision', poolResource(pool));
  if (!BULK_VERBS.includes(input.verb)) throw invalidInput('verb', `must be one of ${BULK_VERBS.join(', ')}`);
  const ids = input.nodeIds;
  if (ids.length < 1 || ids.length > MAX_BULK) throw invalidInput('nodeIds', `must list 1 to ${MAX_BULK} nodes`);
  const seen = new Set<string>();
  const duplicates = ids.filter((id) => (seen.has(id) ? true : (seen.add(id), false)));
  if (duplicates.length) throw invalidInput('nodeIds', 'each node may be listed once');
  if (input.wipe && input.verb !== 'undeploy') throw invalidInput('wipe', 'applies to undeploy only');
  // Rescue on an agentless pool sends nothing destructive: its nodes fail with UNSUPPORTED at once.
  const unsupported = input.verb === 'rescue' ? agentlessRescue(pool) : null;
  // Destructive by the workflows' own steps (step-facts.ts): a ramdisk boot, a power change, a wipe.
  const destructive = isDestructive(input.verb) && !unsupported;
  const reason = input.reason?.trim() ?? '';
  if (destructive && !reason) throw invalidInput('reason', `is required: ${input.verb} sends destructive commands, recorded in a batch`);

  const { rows: nodes } = await ctx.sql.query<NodeHead>(
    `SELECT id, tenant_id AS "tenantId", site_id AS "siteId", pool_id AS "poolId", provision_state AS "provisionState",
            failed_from AS "failedFrom", version
       FROM node WHERE id = ANY($1::text[])`,
    [ids],
  );
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const refused: Refusal[] = [];
  for (const id of ids) {
    const node = byId.get(id);
    if (!node || node.tenantId !== pool.tenantId || node.poolId !== pool.id) {
      refused.push({ nodeId: id, code: 'INVALID_INPUT', message: `not a node of pool ${pool.id}` });
      continue;
    }
    if (!can(principal, 'compute:nodes:provision', nodeResource(node))) {
      refused.push({ nodeId: id, code: 'PERMISSION_DENIED', message: 'missing compute:nodes:provision on this node' });
      continue;
    }
    const decision = decideMove(input.verb, node.provisionState as ProvisionState, node.failedFrom as ProvisionState | null);
    if (!decision.legal) {
      refused.push({ nodeId: id, code: 'INVALID_STATE', message: `in state ${decision.current}; legal from: ${decision.legalFrom.join(', ')}` });
    }
  }
  if (refused.length) {
    const code: ErrorCode = refused.some((r) => r.code === 'INVALID_INPUT') ? 'INVALID_INPUT'
      : refused.some((r) => r.code === 'PERMISSION_DENIED') ? 'PERMISSION_DENIED' : 'INVALID_STATE';
    throw new AppError(code, `bulk ${input.verb} refused for ${refused.length} of ${ids.length} nodes; nothing changed (first: ${refused[0]!.nodeId}: ${refused[0]!.message})`, { refused });
  }

  const to = VERBS[input.verb].to as ProvisionState;
  const wipe = input.verb === 'undeploy' ? (input.wipe ?? 'quick') : null;
  const policy = readPolicy(pool.policy);
  const batch = destructive ? { id: newId('CommandBatch'), poolId: pool.id, verb: input.verb, reason, nodeIds: ids, wipe } : null;
  const digest = batch ? batchDigest(batch) : null;
  const quorum = policy.approverKeys.length ? (policy.quorum ?? policy.approverKeys.length) : 0;
  const status = policy.approverKeys.length ? 'awaiting-approval' : 'recorded';
  const versions = ids.map((id) => byId.get(id)!.version);
  const froms = ids.map((id) => byId.get(id)!.provisionState);
  const common = { verb: input.verb, bulk: true, batchId: batch?.id ?? null, wipe, reason: reason || null, requestId: ctx.requestId };
  const events = unsupported
    ? [
        { type: VERBS.rescue.event, payload: { ...common, to } },
        { type: 'node.provision.failed', payload: { ...common, from: 'rescue', to: 'failed', failedFrom: 'rescue', error: unsupported.error } },
      ]
    : [{ type: VERBS[input.verb].event, payload: { ...common, to } }];
  // Each node exactly as its own verb, with its intent in a workflow run. A verb that sends
  // nothing destructive starts each node's run (due at once) here. A destructive
  // one records a batch and starts nothing: seed, "with approver keys they wait for its approval".
  // Its runs are created by the batch's release (releaseBatch, the metal.batch job), queued here
  // when the batch needs no approval and by the approval that reaches the quorum otherwise.
  // Rescue on an agentless pool fails its nodes with UNSUPPORTED at once: no batch, no run.
  const kind = unsupported || batch ? null : runKindOf(input.verb, to);
  const runs = kind
    ? { ids: ids.map(() => newId('WorkflowRun')), kind, params: { verb: input.verb, ...(reason ? { reason } : {}), ...(ctx.requestId ? { requestId: ctx.requestId } : {}) } satisfies RunParams }
    : null;
  const releaseNow = batch !== null && status === 'recorded';
  const { rows, createdAt } = await updateNodesOfPool(ctx.sql, {
    poolId: pool.id,
    nodes: { ids, versions, froms },
    data: unsupported ? unsupported.data : { provisionState: to, ...clearedFailure(input.verb) },
    runs,
    events,
    batch: batch && {
      id: batch.id, tenantId: pool.tenantId, verb: input.verb, reason, wipe, digest: digest!, quorum, status,
      createdBy: principal.tokenId, releaseNow,
    },
  });
  // In the order given: each view straight to its place (a sort looked the order up 260,000 times).
  const order = new Map(ids.map((id, i) => [id, i]));
  const views = new Array<NodeRow>(ids.length);
  for (const view of rows) {
    views[order.get(view.id)!] = view;
  }
  // The batch as the statement wrote it: read back, its 10,000 node ids cost Prisma and pg more
  // to parse than the rest of the answer's batch (test/metal-bulk.test.ts compares the two).
  const written: CommandBatch | null = batch && {
    id: batch.id, tenantId: pool.tenantId, poolId: pool.id, verb: input.verb, reason, nodeIds: ids, wipe,
    digest: digest!, quorum, approvals: [], status, createdBy: principal.tokenId, createdAt: createdAt!, releasedAt: null,
  };
  return { batch: written, rows: views };
}

/**
 * Approves a batch with an Ed25519 signature over its digest by one of the pool's approver keys.
 * When the approvals reach the quorum, the batch is approved and its commands may run.
 */
export async function approveBatch(ctx: Context, batchId: string, keyId: string, signatureBase64: string): Promise<string> {
  const principal = requirePrincipal(ctx);
  const batch = await ctx.prisma.commandBatch.findUnique({ where: { id: batchId } });
  // Another tenant's batch is as absent as a missing one (and its pool is not named).
  if (!batch || (!isPlatformAdmin(principal) && batch.tenantId !== principal.tenantId)) throw notFound('command batch', batchId);
  const pool = await ctx.prisma.pool.findUniqueOrThrow({ where: { id: batch.poolId } });
  decide(principal, 'compute:nodes:provision', poolResource(pool));
  if (batch.status !== 'awaiting-approval') throw new AppError('INVALID_STATE', `batch ${batch.id} is ${batch.status}, not awaiting approval`);
  const key = readPolicy(pool.policy).approverKeys.find((k) => k.id === keyId);
  if (!key) throw invalidInput('keyId', `is not an approver key of pool ${pool.id}'s policy`);
  const approvals = batch.approvals as { keyId: string; at: string }[];
  if (approvals.some((a) => a.keyId === keyId)) throw new AppError('CONFLICT', `keyId: this key has already approved batch ${batch.id}`);
  const publicKey = key.publicKey.includes('BEGIN PUBLIC KEY')
    ? createPublicKey(key.publicKey)
    : createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(key.publicKey, 'base64').toString('base64url') }, format: 'jwk' });
  const signature = Buffer.from(signatureBase64, 'base64');
  if (signature.length !== 64 || !verify(null, Buffer.from(batch.digest, 'hex'), publicKey, signature)) {
    throw invalidInput('signature', `is not that key's Ed25519 signature over the batch digest ${batch.digest}`);
  }
  const next = [...approvals, { keyId, at: new Date().toISOString() }];
  const status = next.length >= batch.quorum ? 'approved' : 'awaiting-approval';
  // The approval that reaches the quorum releases the batch (its metal.batch job) in the same
  // transaction: the batch's destructive work starts only once it is approved, and then surely.
  await ctx.sql.transaction(async (tx) => {
    const { rows } = await tx.query<{ updated: number }>(
      `UPDATE command_batch SET approvals = $2::jsonb, status = $3::text
        WHERE id = $1::text AND status = 'awaiting-approval' AND approvals = $4::jsonb
       RETURNING 1 AS updated`,
      [batch.id, JSON.stringify(next), status, JSON.stringify(batch.approvals)],
    );
    if (rows.length !== 1) throw new AppError('CONFLICT', `batch ${batch.id} changed concurrently; retry`);
    if (status === 'approved') await sendInTx(tx, 'metal.batch', { batchId: batch.id });
  });
  return batch.id;
}

/**
 * The metal.batch job: starts the workflow run of every node of a destructive batch that may run
 * (recorded, or approved), once, through the node store (releaseBatchRuns): the batch row says
 * which nodes and with what (verb, reason, wipe), each run's params and batch_id carry them, and
 * each run is due at once. A node no longer in the verb's target state, or whose
 * intent moved on since the batch (another run), is left out. The statement that starts them also
 * sets released_at, so a retried or duplicated release starts nothing more. Returns how many runs
 * (and jobs) it started.
 */
export async function releaseBatch(sql: Sql, batchId: string): Promise<number> {
  return releaseBatchRuns(sql, batchId);
}
