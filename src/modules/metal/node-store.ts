import type { Tx } from '../../db/client';
import { executeLiteral, firstStatementName, type FirstStatement, type QueryOptions, type Sql } from '../../db/sql';
import { AppError } from '../../errors';
import { newId } from '../../ids';
import { checkEventPayload } from '../../events/outbox';
import { wakeRunsSql } from '../../../jobs/wake';
import { sendInTx } from '../../../jobs/send';
import { ACTIVE_RUN_STATUSES, runKindOf, VERBS, type Verb, type WorkflowKind } from './states';
import { nodeArrayView, nodeViewColumns, nodeViewFrom, setClause, toNodeRow, type NodeChange, type NodeRow } from './node-rows';

/**
 * The node store: the one module that writes `node` (issue 9's first seam). Every writer (the
 * verbs, bulk and a bulk batch's release, enroll, discovery, confirmMac, and the workflow engine)
 * changes a node here, and each write is one statement: the compare-and-set on the node's version,
 * the workflow run it starts (its intent in the run's params), the node's other active runs
 * superseded, its outbox events and the run due at once (workflow_run.due_at, jobs/wake.ts), all
 * of it or nothing. Event payloads and run params are checked here (checkEventPayload): no credential
 * reaches the outbox or a run row through a node write.
 */

/** Something that runs SQL in an open transaction: a pg transaction (SqlTx) or Prisma's (prismaRunner). */
export interface Runner {
  /** `opts.planEachTime`: planned for its values at every call (Sql.query's); Prisma's statements always are. */
  query<R extends Record<string, unknown> = Record<string, unknown>>(text: string, values?: unknown[], opts?: QueryOptions): Promise<{ rows: R[] }>;
}

/** A Prisma interactive transaction as a Runner, for writers whose other reads are Prisma's. */
export function prismaRunner(tx: Pick<Tx, '$queryRawUnsafe'>): Runner {
  return {
    async query<R extends Record<string, unknown>>(text: string, values: unknown[] = []) {
      return { rows: await tx.$queryRawUnsafe<R[]>(text, ...values) };
    },
  };
}

export interface NodeEvent {
  type: string;
  /** nodeId and requestId are added by the store, and workflowId when the write starts a run. */
  payload: Record<string, unknown>;
}

/** Run statuses of a run that is not over (states.ts): at most one per node (index workflow_run_one_active). */
export { ACTIVE_RUN_STATUSES };
/** The active statuses a newer run supersedes: an aborting run is left to finish its cleanup. */
const SUPERSEDABLE = "('queued', 'running', 'waiting')";
const ACTIVE = `(${ACTIVE_RUN_STATUSES.map((s) => `'${s}'`).join(', ')})`;

/**
 * The workflow run a write starts (runs.md): its intent is `params` (verb, reason, wipe, profile
 * version, batch, ...), the only place the engine reads its inputs from besides the node row.
 */
export interface NodeRun {
  id: string;
  kind: WorkflowKind;
  params?: Record<string, unknown>;
  batchId?: string | null;
}

export interface NodeWrite {
  data: NodeChange;
  /**
   * The workflow run the write starts, in the same statement: the node's workflow_id is set to it,
   * the node's other active runs are marked superseded, and the new run is due at once (due_at).
   */
  run: NodeRun | null;
  /** Published in this order. */
  events: NodeEvent[];
  /**
   * What the write does to the node's active run, if it has one. 'abort': it becomes aborting
   * (abort_requested_at) and is woken, so the engine runs its cleanup and ends it. 'wake': it is
   * woken (a MAC was bound that its enroll run may be waiting for).
   */
  activeRun?: 'abort' | 'wake' | null;
}

function eventPayloads(nodeId: string, write: Pick<NodeWrite, 'events' | 'run'>, requestId: string | null): string[] {
  return write.events.map((e) => {
    checkEventPayload(e.payload);
    const started = write.run && !('workflowId' in e.payload) ? { workflowId: write.run.id } : {};
    return JSON.stringify({ nodeId, ...e.payload, ...started, requestId });
  });
}

/** A run's params as stored: no credential (the rule of events), and the request that started it. */
function runParams(run: NodeRun | null, requestId: string | null): string | null {
  if (!run) return null;
  const params = { ...(run.params ?? {}), ...(requestId && run.params?.requestId === undefined ? { requestId } : {}) };
  checkEventPayload(params, 'params');
  return JSON.stringify(params);
}

/** The unique violation of workflow_run_one_active, through pg or through Prisma's raw query. */
function isSecondActiveRun(error: unknown): boolean {
  if (!error || typeof error !== 'object') return false;
  const e = error as { constraint?: unknown; message?: unknown; meta?: { message?: unknown } };
  return e.constraint === 'workflow_run_one_active' ||
    [e.message, e.meta?.message].some((m) => typeof m === 'string' && m.includes('workflow_run_one_active'));
}

/** Runs a store statement; a second active run of one node is a race another writer won: CONFLICT. */
async function storeQuery<R extends Record<string, unknown>>(db: Runner, text: string, values: unknown[], what: string): Promise<R[]> {
  try {
    return (await db.query<R>(text, values)).rows;
  } catch (error) {
    if (isSecondActiveRun(error)) {
      throw new AppError('CONFLICT', `${what}: another workflow run of it started concurrently; read it again and retry`);
    }
    throw error;
  }
}

/**
 * The CTEs a single-node write ends with, after the CTE `source` that wrote the node: the node's
 * active runs superseded (a run starts) or aborted, the run it starts, its events in order, and
 * every run it started or woke due at once (a new run by due_at's default). Parameters $r to $r+6:
 * run id, run kind, run params, run batch id, event types, event payloads, the active-run action
 * ('abort', 'wake' or null).
 */
function runEventsJob(source: string, r: number): string {
  return `sup AS (
       UPDATE workflow_run SET status = 'superseded', finished_at = now(), lease_until = NULL, due_at = NULL, updated_at = now(), version = version + 1
        WHERE $${r}::text IS NOT NULL AND node_id IN (SELECT id FROM ${source}) AND status IN ${SUPERSEDABLE}
       RETURNING id
     ), ab AS (
       UPDATE workflow_run SET status = 'aborting', abort_requested_at = now(), due_at = LEAST(due_at, now()), updated_at = now(), version = version + 1
        WHERE $${r + 6}::text = 'abort' AND node_id IN (SELECT id FROM ${source}) AND status IN ${SUPERSEDABLE}
       RETURNING id
     ), run AS (
       -- Reading sup first makes its UPDATE run to completion before this row is inserted: the
       -- superseded run has then left the one-active index.
       INSERT INTO workflow_run (id, node_id, kind, status, params, batch_id)
       SELECT $${r}::text, ${source}.id, $${r + 1}::text, 'queued', $${r + 2}::jsonb, $${r + 3}::text
         FROM ${source} WHERE $${r}::text IS NOT NULL AND (SELECT count(*) FROM sup) >= 0
       RETURNING id
     ), woke AS (
       ${wakeRunsSql(`SELECT w.id FROM workflow_run w WHERE w.node_id IN (SELECT id FROM ${source})`, { when: `$${r + 6}::text = 'wake' AND $${r}::text IS NULL` })}
     ), ev AS (
       INSERT INTO event (type, tenant_id, site_id, pool_id, node_id, subject, payload)
       SELECT e.type, ${source}.tenant_id, ${source}.site_id, ${source}.pool_id, ${source}.id, ${source}.id, e.payload
         FROM ${source}, unnest($${r + 4}::text[], $${r + 5}::jsonb[]) WITH ORDINALITY AS e(type, payload, n)
        ORDER BY e.n
     )`;
}

function runValues(nodeId: string, write: Pick<NodeWrite, 'run' | 'events' | 'activeRun'>, requestId: string | null): unknown[] {
  return [
    write.run?.id ?? null,
    write.run?.kind ?? null,
    runParams(write.run, requestId),
    write.run?.batchId ?? null,
    write.events.map((e) => e.type),
    eventPayloads(nodeId, write, requestId),
    write.activeRun ?? null,
  ];
}

/** Read so that the statement's waking CTEs are run (and their count is there for a test to read). */
const COUNTS = '(SELECT count(*) FROM woke)::int AS "woken", (SELECT count(*) FROM run)::int + (SELECT count(*) FROM ab)::int AS "started"';

/**
 * Changes one node. `version` is the compare-and-set (null: no check, for writers that hold the
 * lock that orders them, e.g. discovery under the site's MAC lock). Resolves to the node's new
 * view, or null when the node changed since `version` (the caller says CONFLICT). A run started
 * while the node's aborted run still runs its cleanup is CONFLICT, with nothing written.
 */
export async function updateNode(db: Runner, node: { id: string; version: number | null }, write: NodeWrite, requestId: string | null): Promise<NodeRow | null> {
  const { head, values } = updateNodeParts(node, write, requestId);
  const rows = await storeQuery<Record<string, unknown>>(db,
    `${head}
     SELECT ${nodeViewColumns('u')}, ${COUNTS} FROM ${nodeViewFrom('upd', 'u')}`,
    values,
    `node ${node.id}`,
  );
  if (!rows[0]) {
    if (write.run) await refuseWhileAborting(db, node.id);
    return null;
  }
  return toNodeRow(rows[0]);
}

/** updateNode's write (its CTEs, up to its answer), its values and their types. */
function updateNodeParts(node: { id: string; version: number | null }, write: NodeWrite, requestId: string | null): { head: string; values: unknown[]; types: string[] } {
  if (write.run && write.activeRun === 'abort') throw new Error('an abort starts no run: the aborted run runs its cleanup');
  const data = write.run ? { ...write.data, workflowId: write.run.id } : write.data;
  const set = setClause(data, 10);
  return {
    head: `WITH upd AS (
       UPDATE node SET ${set.sql ? `${set.sql}, ` : ''}version = version + 1, updated_at = now()
        WHERE id = $1::text AND ($2::int IS NULL OR version = $2::int)
          AND ($3::text IS NULL OR NOT EXISTS (SELECT 1 FROM workflow_run WHERE node_id = $1::text AND status = 'aborting'))
       RETURNING *
     ), ${runEventsJob('upd', 3)}`,
    values: [node.id, node.version, ...runValues(node.id, write, requestId), ...set.values],
    types: ['text', 'int', 'text', 'text', 'jsonb', 'text', 'text[]', 'jsonb[]', 'text', ...set.types],
  };
}

/**
 * updateNode as a statement for a transaction's COMMIT message (SqlTx.commitWith), for a writer
 * that holds the node's lock (the workflow engine at a run's end) and needs no answer: the same
 * write, which raises when it wrote no node (metal_flush_check), so the COMMIT does not run.
 */
export function updateNodeStatement(node: { id: string; version: number | null }, write: NodeWrite, requestId: string | null): FirstStatement {
  const { head, values, types } = updateNodeParts(node, write, requestId);
  const text = `${head}
     SELECT metal_flush_check((SELECT count(*) FROM upd) = 1, 'node ' || $1::text || ' changed under its run''s lock') AS ok, ${COUNTS}`;
  return { name: firstStatementName(text), text, types, values: values.map(executeLiteral) };
}

/**
 * CONFLICT when the node has a run still aborting: its cleanup steps are running, and a new run
 * (recover's, retire's) would fight them for the machine. Asked when a write that starts a run
 * wrote nothing, to say why (its statement refuses to start a run beside an aborting one).
 */
async function refuseWhileAborting(db: Runner, nodeId: string): Promise<void> {
  const { rows } = await db.query<{ id: string }>(`SELECT id FROM workflow_run WHERE node_id = $1 AND status = 'aborting' LIMIT 1`, [nodeId]);
  if (rows[0]) {
    throw new AppError('CONFLICT', `node ${nodeId}: its aborted run ${rows[0].id} is still cleaning up; retry when it ends`, { workflowId: rows[0].id });
  }
}

/** A node as enroll creates it. */
export interface NewNode {
  id: string;
  tenantId: string;
  siteId: string;
  poolId: string;
  name: string | null;
  provisionState: string;
  bmcAddress: string;
  bmcDriver: string;
  bmcDriverOptions: Record<string, unknown>;
  /** Null only for a control node registered without BMC credentials (its adoption then fails at verify-bmc, saying why). */
  bmcCredentialsRef: string | null;
  addresses: string[];
  macs: string[];
  productUuid: string | null;
  hardwareProfileId: string | null;
  driverBindings: Record<string, unknown>;
}

/**
 * Creates a node with its events and the run it starts (and that run's job), in one statement;
 * answers the node as written (its metal view, hardware profile included), so a verb's payload
 * needs no read of its own.
 */
export async function createNode(db: Runner, node: NewNode, write: Omit<NodeWrite, 'data' | 'activeRun'>, requestId: string | null): Promise<NodeRow> {
  const rows = await storeQuery<{ created: number }>(db,
    `WITH ins AS (
       INSERT INTO node (id, tenant_id, site_id, pool_id, name, provision_state, bmc_address, bmc_driver, bmc_driver_options,
                         bmc_credentials_ref, addresses, macs, product_uuid, hardware_profile_id, driver_bindings, workflow_id)
       VALUES ($1, $2, $3, $4, $5, $6::"ProvisionState", $7, $8, $9::jsonb, $10, $11::text[], $12::text[], $13::uuid, $14, $15::jsonb, $16::text)
       RETURNING *
     ), ${runEventsJob('ins', 16)}
     SELECT (SELECT count(*) FROM ins)::int AS created, ${COUNTS}, ${nodeViewColumns('i')}
       FROM ins i LEFT JOIN hardware_profile hp ON hp.id = i.hardware_profile_id`,
    [
      node.id, node.tenantId, node.siteId, node.poolId, node.name, node.provisionState, node.bmcAddress, node.bmcDriver,
      JSON.stringify(node.bmcDriverOptions), node.bmcCredentialsRef, node.addresses, node.macs, node.productUuid,
      node.hardwareProfileId, JSON.stringify(node.driverBindings),
      ...runValues(node.id, { ...write, activeRun: null }, requestId),
    ],
    `node ${node.id}`,
  );
  if (Number(rows[0]?.created) !== 1) throw new Error(`node ${node.id} was not created`);
  return toNodeRow(rows[0]!);
}

/** First key of the per-pool advisory lock bulk writes take (the second is the pool id's hash). */
const BULK_POOL_LOCK = 7243916;
/** The views the bulk statement returns, read by position. */
const BULK_VIEW = nodeArrayView('u');

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

/** A change of many nodes of one pool (bulk): the same change, events and run for each. */
export interface BulkWrite {
  poolId: string;
  /** The nodes as read, in the caller's order: the compare-and-set of each and its state before. */
  nodes: { ids: string[]; versions: number[]; froms: string[] };
  data: NodeChange;
  /**
   * The run each node starts, for a verb that sends nothing destructive (ids in the order of
   * nodes.ids): each due at once. Null for a destructive verb, whose runs the
   * batch's release creates ({@link releaseBatchRuns}), and when there is nothing to run.
   */
  runs: { ids: string[]; kind: WorkflowKind; params: Record<string, unknown> } | null;
  /** Payloads common to every node; each gets nodeId, from and workflowId added. */
  events: NodeEvent[];
  /** The command batch recorded with the change; releaseNow queues its metal.batch job in the transaction. */
  batch: {
    id: string; tenantId: string; verb: string; reason: string; wipe: string | null; digest: string;
    quorum: number; status: string; createdBy: string | null; releaseNow: boolean;
  } | null;
}

/**
 * Changes every node of a bulk call in one statement: the batch, the compare-and-set on every
 * node, the workflow runs with their jobs (or the batch's release job), every node's events, and
 * the new views (NodeRow, in no particular order). CONFLICT, with nothing written, when any node
 * changed since it was read.
 */
export async function updateNodesOfPool(sql: Sql, write: BulkWrite): Promise<{ rows: NodeRow[]; createdAt: Date | null }> {
  const { nodes, batch, events, runs } = write;
  if (runs && batch) throw new Error('a bulk write starts its runs or records a batch whose release starts them, not both');
  for (const e of events) checkEventPayload(e.payload);
  if (runs) checkEventPayload(runs.params, 'params');
  const extra = setClause(write.data, 20);
  const ids = nodes.ids;
  const expectedRuns = runs ? ids.length : 0;
  return sql.transaction(async (tx) => {
    // Two bulk calls over overlapping nodes listed in different orders would lock them in join
    // order and could deadlock. Bulk calls are the only writers that change more than one node
    // per statement, and the nodes they change are those of their pool, so one lock per pool
    // (transaction-level, advisory) orders them instead of 10,000 row locks taken ahead in id
    // order: those cost a statement, a WAL record per node and a second write of every row.
    // The same round trip lets the statement sort its 10,000 event rows in memory instead of
    // spilling them to disk (work_mem's default is 4 MB).
    await tx.query("SELECT pg_advisory_xact_lock($1::int, hashtext($2::text)), set_config('work_mem', '64MB', true)", [BULK_POOL_LOCK, write.poolId]);
    let rows: unknown[][];
    try {
      rows = await tx.queryArrays(
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
         ), sup AS (
           UPDATE workflow_run SET status = 'superseded', finished_at = now(), lease_until = NULL, updated_at = now(), version = version + 1
            WHERE $17::text IS NOT NULL AND node_id IN (SELECT id FROM upd) AND status IN ${SUPERSEDABLE}
           RETURNING id
         ), run AS (
           INSERT INTO workflow_run (id, node_id, kind, status, params)
           SELECT upd.run_id, upd.id, $17::text, 'queued', $18::jsonb FROM upd
            WHERE upd.run_id IS NOT NULL AND (SELECT count(*) FROM sup) >= 0
           RETURNING id
         ), ev AS (
           INSERT INTO event (type, tenant_id, site_id, pool_id, node_id, subject, payload)
           SELECT e.type, upd.tenant_id, upd.site_id, upd.pool_id, upd.id, upd.id,
                  jsonb_build_object('nodeId', upd.id, 'from', upd.from_state)
                    || CASE WHEN upd.run_id IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('workflowId', upd.run_id) END
                    || e.payload
             FROM upd, unnest($15::text[], $16::jsonb[]) WITH ORDINALITY AS e(type, payload, n)
            ${events.length > 1 ? 'ORDER BY upd.id, e.n' : ''}
         )
         SELECT ${BULK_VIEW.columns}, (SELECT count(*) FROM run)::int, $19::int, (SELECT created_at FROM batch) FROM ${nodeViewFrom('upd', 'u')}`,
        [
          arrayLiteral(nodes.froms), arrayLiteral(ids), arrayLiteral(nodes.versions), write.poolId,
          batch?.id ?? null, batch?.tenantId ?? null, batch?.verb ?? null, batch?.reason ?? null, batch?.wipe ?? null,
          batch?.digest ?? null,
          batch?.quorum ?? null, batch?.status ?? null,
          batch?.createdBy ?? null,
          // unnest pads the shorter arrays with NULLs: no run ids is an empty array, not 10,000 NULLs.
          runs ? arrayLiteral(runs.ids) : '{}',
          events.map((e) => e.type), events.map((e) => JSON.stringify(e.payload)),
          runs?.kind ?? null, runs ? JSON.stringify(runs.params) : null,
          expectedRuns,
          ...extra.values,
        ],
      );
    } catch (error) {
      if (isSecondActiveRun(error)) throw new AppError('CONFLICT', 'a workflow run of one of the nodes started concurrently; nothing changed, read them again and retry');
      throw error;
    }
    if (rows.length !== ids.length) {
      throw new AppError('CONFLICT', `${ids.length - rows.length} of the nodes changed concurrently; nothing changed, read them again and retry`);
    }
    // The two columns after the view: runs started, runs expected.
    if (rows[0]![BULK_VIEW.width] !== rows[0]![BULK_VIEW.width + 1]) throw new Error('the workflow runs of the bulk change were not all started');
    if (batch?.releaseNow) await sendInTx(tx, 'metal.batch', { batchId: batch.id });
    return { rows: rows.map((row) => BULK_VIEW.read(row) as NodeRow), createdAt: rows[0]![BULK_VIEW.width + 2] as Date | null };
  });
}

/**
 * A destructive bulk batch's release (the metal.batch job, once the batch may run): the run of
 * every node of the batch that is still in the verb's target state, whose intent has not moved on
 * since (no active run, and no run started after the batch was recorded), with params {verb,
 * reason, wipe, batchId} and batch_id, the node's workflow_id, each due at once.
 * Once: released_at is set in the same transaction, so a retried or duplicated release starts
 * nothing more. Resolves to the number of runs started.
 */
export async function releaseBatchRuns(sql: Sql, batchId: string): Promise<number> {
  return sql.transaction(async (tx) => {
    // The batch row's lock orders duplicate releases: the second finds released_at set.
    const { rows: [batch] } = await tx.query<{ poolId: string; verb: string; nodeIds: string[] }>(
      `UPDATE command_batch SET released_at = now()
        WHERE id = $1::text AND released_at IS NULL AND status IN ('recorded', 'approved')
       RETURNING pool_id AS "poolId", verb, node_ids AS "nodeIds"`,
      [batchId],
    );
    if (!batch) return 0;
    const verb = batch.verb as Verb;
    const to = VERBS[verb]?.to;
    const kind = to && to !== 'unchanged' && to !== 'stable-point' ? runKindOf(verb, to) : null;
    if (!kind || !to || to === 'unchanged' || to === 'stable-point') throw new Error(`batch ${batchId}: verb ${batch.verb} starts no workflow run`);
    // Ordered against the pool's bulk calls, which lock its nodes in their own order. A single
    // verb racing this statement changes its node's workflow_id when it starts a run (or its state
    // when it aborts): the re-check of the locked row below then leaves that node out.
    await tx.query('SELECT pg_advisory_xact_lock($1::int, hashtext($2::text))', [BULK_POOL_LOCK, batch.poolId]);
    const { rows } = await tx.query<{ started: number }>(
      `WITH b AS (
         SELECT id, verb, reason, wipe, created_at FROM command_batch WHERE id = $1::text
       ), due AS (
         SELECT n.id, n.workflow_id, v.run_id
           FROM b, unnest($5::text[], $6::text[]) AS v(id, run_id) JOIN node n ON n.id = v.id
          WHERE n.pool_id = $2::text AND n.provision_state = $3::"ProvisionState"
            AND NOT EXISTS (
              SELECT 1 FROM workflow_run r
               WHERE r.node_id = n.id AND (r.status IN ${ACTIVE} OR r.created_at >= b.created_at)
            )
       ), upd AS (
         UPDATE node n SET workflow_id = due.run_id, version = n.version + 1, updated_at = now()
           FROM due
          WHERE n.id = due.id AND n.provision_state = $3::"ProvisionState" AND n.workflow_id IS NOT DISTINCT FROM due.workflow_id
         RETURNING n.id, due.run_id
       ), run AS (
         INSERT INTO workflow_run (id, node_id, kind, status, params, batch_id)
         SELECT upd.run_id, upd.id, $4::text, 'queued',
                jsonb_strip_nulls(jsonb_build_object('verb', b.verb, 'reason', b.reason, 'wipe', b.wipe, 'batchId', b.id)), b.id
           FROM upd, b
         RETURNING id
       )
       SELECT (SELECT count(*) FROM run)::int AS started`,
      // Run ids made here, as every id is (time-ordered UUIDv7), one per node of the batch; the
      // ones of nodes left out are never used.
      [batchId, batch.poolId, to, kind, arrayLiteral(batch.nodeIds), arrayLiteral(batch.nodeIds.map(() => newId('WorkflowRun')))],
    );
    return Number(rows[0]!.started);
  });
}
