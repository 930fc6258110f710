import { createHash, createPublicKey, verify } from 'node:crypto';
import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { can, decide, isPlatformAdmin } from '../../auth/decide';
import { AppError, invalidInput, notFound, type ErrorCode } from '../../errors';
import { newId } from '../../ids';
import { nodeResource, poolResource } from '../tenancy/resources';
import { readPolicy } from '../tenancy/pool';
import { clearedFailure, decideMove, isDestructive, VERBS, type ProvisionState, type Verb } from './states';
import type { WipeMode } from './verbs';
import { insertJobsSql } from '../../../jobs/registry';
import { nodeViewColumns, nodeViewFrom, setClause, toNodeRow, type NodeRow } from './node-rows';
import { agentlessRescue } from './verbs';

export const BULK_VERBS = (Object.keys(VERBS) as Verb[]).filter((v) => VERBS[v].bulk) as BulkVerb[];
export type BulkVerb = 'manage' | 'inspect' | 'provide' | 'undeploy' | 'rescue' | 'retire';
export const MAX_BULK = 10000;

export interface BulkInput {
  poolId: string;
  verb: BulkVerb;
  nodeIds: string[];
  reason?: string | null;
  wipe?: WipeMode | null;
}

/** The nodes' new views (in the order given), read back by the statement that changed them. */
export interface BulkResult {
  batchId: string | null;
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
  if (ids.length < 1 || ids.length > MAX_BULK) throw invalidInput('nodeIds', `must list 1 to ${MAX_BULK} nodes, got ${ids.length}`);
  const seen = new Set<string>();
  const duplicates = ids.filter((id) => (seen.has(id) ? true : (seen.add(id), false)));
  if (duplicates.length) throw invalidInput('nodeIds', `each node may be listed once; listed again: ${[...new Set(duplicates)].slice(0, 20).join(', ')}`);
  if (input.wipe && input.verb !== 'undeploy') throw invalidInput('wipe', 'applies to undeploy only');
  // Rescue on an agentless pool sends nothing destructive: its nodes fail with UNSUPPORTED at once.
  const unsupported = input.verb === 'rescue' ? agentlessRescue(pool) : null;
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
  // Each node exactly as its own verb: rescue on an agentless pool fails the nodes with
  // UNSUPPORTED at once (nothing destructive runs, so no batch and no jobs); otherwise rescue
  // starts one workflow run per node, which unrescue reads.
  const runIds = input.verb === 'rescue' && !unsupported ? ids.map(() => newId('WorkflowRun')) : null;
  const batch = destructive ? { id: newId('CommandBatch'), poolId: pool.id, verb: input.verb, reason, nodeIds: ids, wipe } : null;
  const versions = ids.map((id) => byId.get(id)!.version);
  const froms = ids.map((id) => byId.get(id)!.provisionState);
  const common = { verb: input.verb, bulk: true, batchId: batch?.id ?? null, wipe, reason: reason || null, requestId: ctx.requestId };
  const events = unsupported
    ? [
        { type: VERBS.rescue.event, payload: { ...common, to } },
        { type: 'node.provision.failed', payload: { ...common, from: 'rescue', to: 'failed', failedFrom: 'rescue', error: unsupported.error } },
      ]
    : [{ type: VERBS[input.verb].event, payload: { ...common, to } }];
  const job = unsupported ? null : { reason: input.verb, ...(wipe ? { wipe } : {}), ...(batch ? { batchId: batch.id } : {}) };
  const extra = setClause(unsupported ? unsupported.data : { provisionState: to, ...clearedFailure(input.verb) }, 19);

  // One statement writes the batch, the compare-and-set on every node, the workflow runs, every
  // node's events and reconciler job, and returns the new views.
  const rows = await ctx.sql.transaction(async (tx) => {
    // Lock the nodes in id order first: two bulk calls over overlapping nodes listed in different
    // orders would otherwise lock them in join order and could deadlock.
    await tx.query('SELECT 1 FROM node WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE', [ids]);
    const result = await tx.query(
      `WITH batch AS (
         INSERT INTO command_batch (id, tenant_id, pool_id, verb, reason, node_ids, wipe, digest, quorum, status, created_by)
         SELECT $5::text, $6::text, $4::text, $7::text, $8::text, $2::text[], $9::text, $10::text, $11::int, $12::text, $13::text
          WHERE $5::text IS NOT NULL
       ), upd AS (
         UPDATE node AS n SET ${extra.sql}, workflow_id = COALESCE(v.run_id, n.workflow_id), version = n.version + 1, updated_at = now()
           FROM unnest($2::text[], $3::int[], $1::text[], $14::text[]) AS v(id, version, from_state, run_id)
          WHERE n.id = v.id AND n.version = v.version AND n.pool_id = $4::text
         RETURNING n.*, v.from_state, v.run_id
       ), run AS (
         INSERT INTO workflow_run (id, node_id, kind, status)
         SELECT upd.run_id, upd.id, 'metal-rescue', 'queued' FROM upd WHERE upd.run_id IS NOT NULL
       ), ev AS (
         INSERT INTO event (type, tenant_id, site_id, pool_id, node_id, subject, payload)
         SELECT e.type, upd.tenant_id, upd.site_id, upd.pool_id, upd.id, upd.id,
                jsonb_build_object('nodeId', upd.id, 'from', upd.from_state)
                  || CASE WHEN upd.run_id IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('workflowId', upd.run_id) END
                  || e.payload
           FROM upd, unnest($15::text[], $16::jsonb[]) WITH ORDINALITY AS e(type, payload, n)
          ORDER BY upd.id, e.n
       ), job AS (
         ${insertJobsSql('metal.reconcile', `jsonb_build_object('nodeId', upd.id) || $17::jsonb`, '(SELECT * FROM upd WHERE $17::jsonb IS NOT NULL) AS upd')} RETURNING 1
       )
       SELECT ${nodeViewColumns('u')}, (SELECT count(*) FROM job)::int AS "jobs", $18::int AS "expectedJobs" FROM ${nodeViewFrom('upd', 'u')}`,
      [
        froms, ids, versions, pool.id,
        batch?.id ?? null, pool.tenantId, input.verb, reason, wipe,
        batch ? batchDigest(batch) : null,
        policy.approverKeys.length ? (policy.quorum ?? policy.approverKeys.length) : 0,
        policy.approverKeys.length ? 'awaiting-approval' : 'recorded',
        principal.tokenId,
        runIds ?? ids.map(() => null),
        events.map((e) => e.type), events.map((e) => JSON.stringify(e.payload)),
        job ? JSON.stringify(job) : null,
        job ? ids.length : 0,
        ...extra.values,
      ],
    );
    if (result.rows.length !== ids.length) {
      throw new AppError('CONFLICT', `${ids.length - result.rows.length} of the nodes changed concurrently; nothing changed, read them again and retry`);
    }
    if (result.rows[0]!.jobs !== result.rows[0]!.expectedJobs) throw new Error('the metal.reconcile queue is missing: the jobs were not queued');
    return result.rows;
  });
  const order = new Map(ids.map((id, i) => [id, i]));
  const views = rows.map(toNodeRow).sort((a, b) => order.get(a.id)! - order.get(b.id)!);
  return { batchId: batch?.id ?? null, rows: views };
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
  if (!key) throw invalidInput('keyId', `no approver key "${keyId}" in pool ${pool.id}'s policy`);
  const approvals = batch.approvals as { keyId: string; at: string }[];
  if (approvals.some((a) => a.keyId === keyId)) throw new AppError('CONFLICT', `key "${keyId}" has already approved batch ${batch.id}`);
  const publicKey = key.publicKey.includes('BEGIN PUBLIC KEY')
    ? createPublicKey(key.publicKey)
    : createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(key.publicKey, 'base64').toString('base64url') }, format: 'jwk' });
  const signature = Buffer.from(signatureBase64, 'base64');
  if (signature.length !== 64 || !verify(null, Buffer.from(batch.digest, 'hex'), publicKey, signature)) {
    throw invalidInput('signature', `is not ${keyId}'s Ed25519 signature over the batch digest ${batch.digest}`);
  }
  const next = [...approvals, { keyId, at: new Date().toISOString() }];
  const status = next.length >= batch.quorum ? 'approved' : 'awaiting-approval';
  const updated = await ctx.prisma.commandBatch.updateMany({
    where: { id: batch.id, status: 'awaiting-approval', approvals: { equals: batch.approvals as object } },
    data: { approvals: next, status },
  });
  if (updated.count !== 1) throw new AppError('CONFLICT', `batch ${batch.id} changed concurrently; retry`);
  return batch.id;
}
