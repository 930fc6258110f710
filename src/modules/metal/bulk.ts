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
import { clearedFailure, decideMove, isDestructive, VERBS, type ProvisionState, type Verb } from './states';
import type { WipeMode } from './verbs';
import { insertJobsSql } from '../../../jobs/registry';
import { nodeArrayView, nodeViewFrom, setClause, type NodeRow } from './node-rows';
import { agentlessRescue } from './verbs';

export const BULK_VERBS = (Object.keys(VERBS) as Verb[]).filter((v) => VERBS[v].bulk) as BulkVerb[];
export type BulkVerb = 'manage' | 'inspect' | 'provide' | 'undeploy' | 'rescue' | 'retire';
export const MAX_BULK = 10000;
/** First key of the per-pool advisory lock bulk calls take (the second is the pool id's hash). */
const BULK_POOL_LOCK = 7243916;
/** The views the bulk statement returns, read by position. */
const BULK_VIEW = nodeArrayView('u');

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

const PLAIN_ELEMENT = /^[A-Za-z0-9_.:-]+$/;
/**
 * A PostgreSQL array literal for ids, states and versions that need no quoting (the ids were just
 * read back from the node table): pg would quote and escape each of 10,000 elements of each of
 * four arrays, about 30 ms of the bulk call. Anything that is not plain goes through pg's own
 * serialisation.
 */
function arrayLiteral(values: readonly (string | number)[]): string | readonly (string | number)[] {
  for (const v of values) if (typeof v !== 'number' && (!PLAIN_ELEMENT.test(v) || v.toUpperCase() === 'NULL')) return values;
  return `{${values.join(',')}}`;
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
  // The reconciler jobs. A destructive batch's go through the batch (seed: with approver keys its
  // commands wait for the approval): one metal.batch job, queued here when the batch needs no
  // approval and by the approval that reaches the quorum otherwise, which queues each node's job
  // from the batch row (releaseBatch). Other verbs queue each node's job here.
  const job = unsupported || batch ? null : { reason: input.verb };
  const releaseNow = batch !== null && status === 'recorded';
  const jobSql = job
    ? insertJobsSql('metal.reconcile', `jsonb_build_object('nodeId', upd.id) || $17::jsonb`, '(SELECT * FROM upd WHERE $17::jsonb IS NOT NULL) AS upd')
    : insertJobsSql('metal.batch', `jsonb_build_object('batchId', $5::text)`, '(SELECT 1 WHERE $17::jsonb IS NULL AND $18::int = 1) AS one');
  const extra = setClause(unsupported ? unsupported.data : { provisionState: to, ...clearedFailure(input.verb) }, 19);

  // One statement writes the batch, the compare-and-set on every node, the workflow runs, every
  // node's events and reconciler job, and returns the new views.
  const { rows, createdAt } = await ctx.sql.transaction(async (tx) => {
    // Two bulk calls over overlapping nodes listed in different orders would lock them in join
    // order and could deadlock. Bulk calls are the only writers that change more than one node
    // per statement, and the nodes they change are those of their pool, so one lock per pool
    // (transaction-level, advisory) orders them instead of 10,000 row locks taken ahead in id
    // order: those cost a statement, a WAL record per node and a second write of every row.
    // The same round trip lets the statement sort its 10,000 event rows in memory instead of
    // spilling them to disk (work_mem's default is 4 MB).
    await tx.query("SELECT pg_advisory_xact_lock($1::int, hashtext($2::text)), set_config('work_mem', '64MB', true)", [BULK_POOL_LOCK, pool.id]);
    const rows = await tx.queryArrays(
      `WITH batch AS (
         INSERT INTO command_batch (id, tenant_id, pool_id, verb, reason, node_ids, wipe, digest, quorum, status, created_by)
         SELECT $5::text, $6::text, $4::text, $7::text, $8::text, $2::text[], $9::text, $10::text, $11::int, $12::text, $13::text
          WHERE $5::text IS NOT NULL
         RETURNING created_at
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
          ${events.length > 1 ? 'ORDER BY upd.id, e.n' : ''}
       ), job AS (
         ${jobSql} RETURNING 1
       )
       SELECT ${BULK_VIEW.columns}, (SELECT count(*) FROM job)::int, $18::int, (SELECT created_at FROM batch) FROM ${nodeViewFrom('upd', 'u')}`,
      [
        arrayLiteral(froms), arrayLiteral(ids), arrayLiteral(versions), pool.id,
        batch?.id ?? null, pool.tenantId, input.verb, reason, wipe,
        digest,
        quorum, status,
        principal.tokenId,
        // unnest pads the shorter arrays with NULLs: no run ids is an empty array, not 10,000 NULLs.
        runIds ? arrayLiteral(runIds) : '{}',
        events.map((e) => e.type), events.map((e) => JSON.stringify(e.payload)),
        job ? JSON.stringify(job) : null,
        job ? ids.length : releaseNow ? 1 : 0,
        ...extra.values,
      ],
    );
    if (rows.length !== ids.length) {
      throw new AppError('CONFLICT', `${ids.length - rows.length} of the nodes changed concurrently; nothing changed, read them again and retry`);
    }
    // The two columns after the view: jobs queued, jobs expected.
    if (rows[0]![BULK_VIEW.width] !== rows[0]![BULK_VIEW.width + 1]) throw new Error('a metal queue is missing: the jobs were not queued');
    return { rows, createdAt: rows[0]![BULK_VIEW.width + 2] as Date | null };
  });
  // In the order given: each view straight to its place (a sort looked the order up 260,000 times).
  const order = new Map(ids.map((id, i) => [id, i]));
  const views = new Array<NodeRow>(ids.length);
  for (const row of rows) {
    const view = BULK_VIEW.read(row) as NodeRow;
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
  // The approval that reaches the quorum releases the batch (its metal.batch job) in the same
  // transaction: the batch's destructive work starts only once it is approved, and then surely.
  await ctx.sql.transaction(async (tx) => {
    const { rows } = await tx.query<{ queued: number }>(
      `WITH b AS (
         UPDATE command_batch SET approvals = $2::jsonb, status = $3::text
          WHERE id = $1::text AND status = 'awaiting-approval' AND approvals = $4::jsonb
         RETURNING id
       ), j AS (
         ${insertJobsSql('metal.batch', `jsonb_build_object('batchId', b.id)`, "(SELECT * FROM b WHERE $3::text = 'approved') AS b")} RETURNING 1
       )
       SELECT (SELECT count(*) FROM b)::int AS updated, (SELECT count(*) FROM j)::int AS queued`,
      [batch.id, JSON.stringify(next), status, JSON.stringify(batch.approvals)],
    );
    const { updated, queued } = rows[0] as unknown as { updated: number; queued: number };
    if (updated !== 1) throw new AppError('CONFLICT', `batch ${batch.id} changed concurrently; retry`);
    if (status === 'approved' && queued !== 1) throw new Error('the metal.batch queue is missing: the approved batch was not released');
  });
  return batch.id;
}

/**
 * The metal.batch job: queues the metal.reconcile job of every node of a destructive batch that
 * may run (recorded, or approved), once. The batch row says which nodes and with what (verb,
 * wipe); the statement that queues the jobs also sets released_at, so a retried or duplicated
 * release queues nothing more. Returns how many jobs it queued.
 */
export async function releaseBatch(sql: Sql, batchId: string): Promise<number> {
  const { rows } = await sql.query<{ queued: number }>(
    `WITH b AS (
       UPDATE command_batch SET released_at = now()
        WHERE id = $1::text AND released_at IS NULL AND status IN ('recorded', 'approved')
       RETURNING id, verb, wipe, node_ids
     ), j AS (
       ${insertJobsSql('metal.reconcile', `jsonb_strip_nulls(jsonb_build_object('nodeId', n.id, 'reason', b.verb, 'wipe', b.wipe, 'batchId', b.id))`, 'b CROSS JOIN LATERAL unnest(b.node_ids) AS n(id)')} RETURNING 1
     )
     SELECT (SELECT count(*) FROM j)::int AS queued`,
    [batchId],
  );
  return rows[0]!.queued;
}
