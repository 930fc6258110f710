import type { Tx } from '../../db/client';
import type { Sql } from '../../db/sql';
import { AppError } from '../../errors';
import { checkEventPayload } from '../../events/outbox';
import { insertJobsSql } from '../../../jobs/registry';
import { nodeArrayView, nodeViewColumns, nodeViewFrom, setClause, toNodeRow, type NodeChange, type NodeRow } from './node-rows';

/**
 * The node store: the one module that writes `node` (issue 9's first seam). Every writer (the
 * verbs, bulk, enroll, discovery, confirmMac, and the reconcilers to come) changes a node here, and
 * each write is one statement: the compare-and-set on the node's version, the workflow run it
 * starts, its outbox events and its reconciler job, all of it or nothing. Event payloads are
 * checked here (checkEventPayload): no credential reaches the outbox through a node write.
 */

/** Something that runs SQL in an open transaction: a pg transaction (SqlTx) or Prisma's (prismaRunner). */
export interface Runner {
  query<R extends Record<string, unknown> = Record<string, unknown>>(text: string, values?: unknown[]): Promise<{ rows: R[] }>;
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
  /** nodeId and requestId are added by the store. */
  payload: Record<string, unknown>;
}

/** The metal.reconcile job a write leaves for the reconciler (null: nothing for it to do). */
export interface NodeJob {
  reason: string;
  wipe?: string;
  batchId?: string;
}

export interface NodeWrite {
  data: NodeChange;
  /**
   * The workflow run the write starts (runs.md): inserted queued with its params and batch, named
   * by node.workflow_id, the node's other active runs superseded, and its metal.advance job queued.
   */
  run: { id: string; kind: string; params?: Record<string, unknown>; batchId?: string | null } | null;
  /** Published in this order. */
  events: NodeEvent[];
  job: NodeJob | null;
}

function eventPayloads(nodeId: string, events: readonly NodeEvent[], requestId: string | null): string[] {
  return events.map((e) => {
    checkEventPayload(e.payload);
    return JSON.stringify({ nodeId, ...e.payload, requestId });
  });
}

function runParams(run: NodeWrite['run']): string | null {
  if (!run) return null;
  // A run's params are read back by subscribers of its events' node: the same rule as a payload.
  checkEventPayload(run.params ?? {}, 'run.params');
  return JSON.stringify(run.params ?? {});
}

function jobData(nodeId: string, job: NodeJob | null): string | null {
  return job ? JSON.stringify({ nodeId, ...job }) : null;
}

/**
 * The CTEs a single-node write ends with, after the CTE `source` that wrote the node: the workflow
 * run it starts, its events in order and its reconciler job. Parameters $r to $r+6: run id, run
 * kind, event types, event payloads, job data (null for none), run params, run batch id.
 */
function runEventsJob(source: string, r: number): string {
  return `run AS (
       INSERT INTO workflow_run (id, node_id, kind, status, params, batch_id)
       SELECT $${r}::text, ${source}.id, $${r + 1}::text, 'queued', COALESCE($${r + 5}::jsonb, '{}'::jsonb), $${r + 6}::text
         FROM ${source} WHERE $${r}::text IS NOT NULL
       RETURNING id
     ), superseded AS (
       UPDATE workflow_run w SET status = 'superseded', finished_at = now(), lease_until = NULL, updated_at = now(), version = w.version + 1
         FROM ${source}
        WHERE $${r}::text IS NOT NULL AND w.node_id = ${source}.id AND w.id <> $${r}::text
          AND w.status IN ('queued', 'running', 'waiting', 'aborting')
     ), advance AS (
       ${insertJobsSql('metal.advance', "jsonb_build_object('runId', run.id)", 'run')} RETURNING 1
     ), ev AS (
       INSERT INTO event (type, tenant_id, site_id, pool_id, node_id, subject, payload)
       SELECT e.type, ${source}.tenant_id, ${source}.site_id, ${source}.pool_id, ${source}.id, ${source}.id, e.payload
         FROM ${source}, unnest($${r + 2}::text[], $${r + 3}::jsonb[]) WITH ORDINALITY AS e(type, payload, n)
        ORDER BY e.n
     ), job AS (
       ${insertJobsSql('metal.reconcile', `$${r + 4}::jsonb`, `(SELECT * FROM ${source} WHERE $${r + 4}::jsonb IS NOT NULL) AS ${source}`)} RETURNING 1
     )`;
}

/**
 * Changes one node. `version` is the compare-and-set (null: no check, for writers that hold the
 * lock that orders them, e.g. discovery under the site's MAC lock). Resolves to the node's new
 * view, or null when the node changed since `version` (the caller says CONFLICT).
 */
export async function updateNode(db: Runner, node: { id: string; version: number | null }, write: NodeWrite, requestId: string | null): Promise<NodeRow | null> {
  const set = setClause(write.data, 10);
  const { rows } = await db.query<Record<string, unknown> & { jobs: number }>(
    `WITH upd AS (
       UPDATE node SET ${set.sql ? `${set.sql}, ` : ''}${write.data.workflowId === undefined ? 'workflow_id = COALESCE($3::text, workflow_id), ' : ''}version = version + 1, updated_at = now()
        WHERE id = $1 AND ($2::int IS NULL OR version = $2::int)
       RETURNING *
     ), ${runEventsJob('upd', 3)}
     SELECT ${nodeViewColumns('u')}, (SELECT count(*) FROM job)::int AS "jobs" FROM ${nodeViewFrom('upd', 'u')}`,
    [
      node.id,
      node.version,
      write.run?.id ?? null,
      write.run?.kind ?? null,
      write.events.map((e) => e.type),
      eventPayloads(node.id, write.events, requestId),
      jobData(node.id, write.job),
      runParams(write.run),
      write.run?.batchId ?? null,
      ...set.values,
    ],
  );
  if (!rows[0]) return null;
  if (Number(rows[0].jobs) !== (write.job ? 1 : 0)) throw new Error('the metal.reconcile queue is missing: the job was not queued');
  return toNodeRow(rows[0]);
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
  bmcCredentialsRef: string;
  addresses: string[];
  macs: string[];
  productUuid: string | null;
  hardwareProfileId: string | null;
  driverBindings: Record<string, unknown>;
}

/** Creates a node with its events and its reconciler job, in one statement. */
export async function createNode(db: Runner, node: NewNode, write: Omit<NodeWrite, 'data'>, requestId: string | null): Promise<void> {
  const { rows } = await db.query<{ jobs: number; created: number }>(
    `WITH ins AS (
       INSERT INTO node (id, tenant_id, site_id, pool_id, name, provision_state, bmc_address, bmc_driver, bmc_driver_options,
                         bmc_credentials_ref, addresses, macs, product_uuid, hardware_profile_id, driver_bindings, workflow_id)
       VALUES ($1, $2, $3, $4, $5, $6::"ProvisionState", $7, $8, $9::jsonb, $10, $11::text[], $12::text[], $13::uuid, $14, $15::jsonb, $16::text)
       RETURNING *
     ), ${runEventsJob('ins', 16)}
     SELECT (SELECT count(*) FROM ins)::int AS created, (SELECT count(*) FROM job)::int AS jobs`,
    [
      node.id, node.tenantId, node.siteId, node.poolId, node.name, node.provisionState, node.bmcAddress, node.bmcDriver,
      JSON.stringify(node.bmcDriverOptions), node.bmcCredentialsRef, node.addresses, node.macs, node.productUuid,
      node.hardwareProfileId, JSON.stringify(node.driverBindings),
      write.run?.id ?? null, write.run?.kind ?? null,
      write.events.map((e) => e.type), eventPayloads(node.id, write.events, requestId),
      jobData(node.id, write.job),
      runParams(write.run),
      write.run?.batchId ?? null,
    ],
  );
  if (Number(rows[0]?.created) !== 1) throw new Error(`node ${node.id} was not created`);
  if (Number(rows[0]?.jobs) !== (write.job ? 1 : 0)) throw new Error('the metal.reconcile queue is missing: the job was not queued');
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

/** A change of many nodes of one pool (bulk): the same change, events and job for each. */
export interface BulkWrite {
  poolId: string;
  /** The nodes as read, in the caller's order: the compare-and-set of each and its state before. */
  nodes: { ids: string[]; versions: number[]; froms: string[] };
  data: NodeChange;
  /** One metal-rescue run per node (rescue), in the order of nodes.ids. */
  runIds: string[] | null;
  /** Payloads common to every node; each gets nodeId, from and workflowId added. */
  events: NodeEvent[];
  /** A metal.reconcile job per node, or null (a batch releases its jobs, or there is nothing to do). */
  job: NodeJob | null;
  /** The command batch recorded with the change; releaseNow queues its metal.batch job in the statement. */
  batch: {
    id: string; tenantId: string; verb: string; reason: string; wipe: string | null; digest: string;
    quorum: number; status: string; createdBy: string | null; releaseNow: boolean;
  } | null;
}

/**
 * Changes every node of a bulk call in one statement: the batch, the compare-and-set on every
 * node, the workflow runs, every node's events and job, and the new views (NodeRow, in no
 * particular order). CONFLICT, with nothing written, when any node changed since it was read.
 */
export async function updateNodesOfPool(sql: Sql, write: BulkWrite): Promise<{ rows: NodeRow[]; createdAt: Date | null }> {
  const { nodes, batch, events, job } = write;
  for (const e of events) checkEventPayload(e.payload);
  const jobSql = job
    ? insertJobsSql('metal.reconcile', `jsonb_build_object('nodeId', upd.id) || $17::jsonb`, '(SELECT * FROM upd WHERE $17::jsonb IS NOT NULL) AS upd')
    : insertJobsSql('metal.batch', `jsonb_build_object('batchId', $5::text)`, '(SELECT 1 WHERE $17::jsonb IS NULL AND $18::int = 1) AS one');
  const extra = setClause(write.data, 19);
  const ids = nodes.ids;
  return sql.transaction(async (tx) => {
    // Two bulk calls over overlapping nodes listed in different orders would lock them in join
    // order and could deadlock. Bulk calls are the only writers that change more than one node
    // per statement, and the nodes they change are those of their pool, so one lock per pool
    // (transaction-level, advisory) orders them instead of 10,000 row locks taken ahead in id
    // order: those cost a statement, a WAL record per node and a second write of every row.
    // The same round trip lets the statement sort its 10,000 event rows in memory instead of
    // spilling them to disk (work_mem's default is 4 MB).
    await tx.query("SELECT pg_advisory_xact_lock($1::int, hashtext($2::text)), set_config('work_mem', '64MB', true)", [BULK_POOL_LOCK, write.poolId]);
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
        arrayLiteral(nodes.froms), arrayLiteral(ids), arrayLiteral(nodes.versions), write.poolId,
        batch?.id ?? null, batch?.tenantId ?? null, batch?.verb ?? null, batch?.reason ?? null, batch?.wipe ?? null,
        batch?.digest ?? null,
        batch?.quorum ?? null, batch?.status ?? null,
        batch?.createdBy ?? null,
        // unnest pads the shorter arrays with NULLs: no run ids is an empty array, not 10,000 NULLs.
        write.runIds ? arrayLiteral(write.runIds) : '{}',
        events.map((e) => e.type), events.map((e) => JSON.stringify(e.payload)),
        job ? JSON.stringify(job) : null,
        job ? ids.length : batch?.releaseNow ? 1 : 0,
        ...extra.values,
      ],
    );
    if (rows.length !== ids.length) {
      throw new AppError('CONFLICT', `${ids.length - rows.length} of the nodes changed concurrently; nothing changed, read them again and retry`);
    }
    // The two columns after the view: jobs queued, jobs expected.
    if (rows[0]![BULK_VIEW.width] !== rows[0]![BULK_VIEW.width + 1]) throw new Error('a metal queue is missing: the jobs were not queued');
    return { rows: rows.map((row) => BULK_VIEW.read(row) as NodeRow), createdAt: rows[0]![BULK_VIEW.width + 2] as Date | null };
  });
}
