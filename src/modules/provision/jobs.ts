import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { visibleTo } from '../../auth/decide';
import { AppError, notFound } from '../../errors';
import { nodeResource } from '../tenancy/resources';
import { runMoveVerb } from '../metal/verbs';
import { nodesWithBmc } from './provision';
import { WORKFLOW_CHAINS, type WorkflowKind } from '../metal/states';
import { WORKFLOWS } from '../../../jobs/workflows';
import { hostnameFromSerial } from './hostname';

/**
 * The control-node API's jobs (seed 004: GET /controlnode/job/{id}, POST /job/{id}/cancel) on the
 * one model: a job is a workflow run of the node (metal-install: provisioning), its progress the
 * run's steps, and the installer's percent within its Installing OS step.
 */

export type JobStatus = 'pending' | 'running' | 'cancelling' | 'completed' | 'failed' | 'cancelled';

export interface ControlNodeJob {
  id: string;
  jobType: string;
  jobStatus: JobStatus;
  /** The stage: the running step's title (Building ISO, Mounting ISO, Installing OS...), else how it ended. */
  status: string;
  progress: number;
  /** The job's request as recorded (no secret), as JSON text. */
  metadata: string;
  nodeId: string;
  nodeIp: string;
  parentId: string;
  resourceName: string;
  totalJobs: number;
  lastError: string | null;
  createdAt: Date;
  updatedAt: Date;
}

const JOB_TYPES: Record<string, string> = { 'metal-install': 'provision', 'metal-release': 'unprovision' };

/**
 * The runs a job is made of, in order: one (provision of a known node: its metal-install; an
 * unprovision: its metal-release), or, for provision of a BMC no node had, the enrollment's chain
 * (enroll, inspect, commission) and the install it goes on to (params.then).
 */
function plannedKinds(root: { kind: string; params: Record<string, unknown> }): string[] {
  const kinds = [root.kind];
  for (let k = WORKFLOW_CHAINS[root.kind as WorkflowKind]; k; k = WORKFLOW_CHAINS[k]) kinds.push(k);
  const then = root.params.then as { kind?: string } | undefined;
  if (then?.kind) kinds.push(then.kind);
  return kinds;
}
const jobTypeOf = (root: { kind: string; params: Record<string, unknown> }) => JOB_TYPES[plannedKinds(root).at(-1)!];
const stepCount = (kind: string) => WORKFLOWS[kind as WorkflowKind]?.steps.length ?? 0;

function jobStatusOf(run: string): JobStatus {
  switch (run) {
    case 'queued': return 'pending';
    case 'running': case 'waiting': return 'running';
    case 'aborting': return 'cancelling';
    case 'succeeded': return 'completed';
    case 'failed': return 'failed';
    default: return 'cancelled';
  }
}

interface RunRow {
  id: string; kind: string; status: string; params: Record<string, unknown>; batchId: string | null; createdAt: Date; updatedAt: Date;
  lastErrorCode: string | null; lastErrorMessage: string | null;
  nodeId: string; tenantId: string; siteId: string; poolId: string; bmcAddress: string; provisionState: string;
  /** The serial the node's BMC reported (a job's host name may come from it). */
  bmcSerial: string | null;
  /** The node's error, while this run is the node's latest (an abort records it on the node). */
  nodeErrorCode: string | null; nodeErrorMessage: string | null;
  steps: { title: string; status: string; cleanup: boolean }[]; percent: number | null;
}

/** A job: its runs, oldest first (the first is the job, its id the job's id), and the kinds still to come. */
interface JobRows { root: RunRow; runs: RunRow[]; last: RunRow; pending: string[] }

async function loadJob(ctx: Context, id: string): Promise<JobRows> {
  const principal = requirePrincipal(ctx);
  // The job of a run of a chain is its first run's (params.jobId); the runs of a job are the node's.
  const { rows } = await ctx.sql.query<RunRow>(
    `WITH job AS (SELECT COALESCE(params->>'jobId', id) AS id, node_id FROM workflow_run WHERE id = $1)
     SELECT w.id, w.kind, w.status, w.params, w.batch_id AS "batchId", w.created_at AS "createdAt", w.updated_at AS "updatedAt",
            w.last_error_code AS "lastErrorCode", w.last_error_message AS "lastErrorMessage",
            n.id AS "nodeId", n.tenant_id AS "tenantId", n.site_id AS "siteId", n.pool_id AS "poolId", n.bmc_address AS "bmcAddress", n.provision_state AS "provisionState",
            n.inventory->'outOfBand'->>'serial' AS "bmcSerial",
            CASE WHEN n.workflow_id = w.id THEN n.last_error_code END AS "nodeErrorCode", CASE WHEN n.workflow_id = w.id THEN n.last_error_message END AS "nodeErrorMessage",
            (SELECT COALESCE(jsonb_agg(jsonb_build_object('title', s.title, 'status', s.status, 'cleanup', s.cleanup) ORDER BY s.idx), '[]') FROM workflow_step s WHERE s.run_id = w.id) AS steps,
            (SELECT (r.payload->>'percent')::int FROM install_report r WHERE r.run_id = w.id AND r.kind = 'step' ORDER BY r.id DESC LIMIT 1) AS percent
       FROM job JOIN workflow_run w ON w.node_id = job.node_id AND (w.id = job.id OR w.params->>'jobId' = job.id)
       JOIN node n ON n.id = w.node_id
      ORDER BY w.created_at, w.id`,
    [id],
  );
  const root = rows[0];
  if (!root || (root.params.jobId && root.params.jobId !== root.id) || !jobTypeOf(root)) throw notFound('job', id);
  // Another tenant's job answers exactly as a made-up id does (issue 21 item 9): no existence oracle.
  if (!visibleTo(principal, 'read', nodeResource({ id: root.nodeId, tenantId: root.tenantId, siteId: root.siteId, poolId: root.poolId }))) throw notFound('job', id);
  const last = rows.at(-1)!;
  return { root, runs: rows, last, pending: plannedKinds(root).slice(rows.length) };
}

/** What a job was asked to do, as recorded (no secret): the install's params, or the run's. */
function requestOf(root: RunRow): Record<string, unknown> {
  const params = (root.params.then as { params?: Record<string, unknown> } | undefined)?.params ?? root.params;
  const { verb: _verb, callbackBase: _cb, chainedFrom: _c, jobId: _j, then: _t, requestId: _r, ...request } = params;
  return request;
}

function view(job: JobRows): ControlNodeJob {
  const { root, last } = job;
  const steps = job.runs.flatMap((r) => r.steps.filter((s) => !s.cleanup));
  // A run's step rows are written at its first dispatch: a run still queued counts its workflow's steps.
  const unstarted = job.runs.filter((r) => r.steps.length === 0).map((r) => r.kind);
  const total = steps.length + [...unstarted, ...job.pending].reduce((n, k) => n + stepCount(k), 0);
  const done = steps.filter((s) => s.status === 'succeeded' || s.status === 'unverified' || s.status === 'skipped').length;
  const current = last.steps.find((s) => !s.cleanup && (s.status === 'running' || s.status === 'waiting' || s.status === 'pending'));
  const installing = current?.title === 'Installing OS' && last.percent !== null ? Math.min(100, Math.max(0, last.percent)) / 100 : 0;
  // A run of the chain that succeeded with more to come is the job still running (the next run is written in the same transaction).
  // Only the job's first run queued is the job pending; a later one queued is the chain going on.
  const jobStatus = (last.status === 'succeeded' && job.pending.length) || (last.status === 'queued' && last !== root) ? 'running' : jobStatusOf(last.status);
  const progress = jobStatus === 'completed' ? 100 : total ? Math.floor((100 * (done + installing)) / total) : 0;
  return {
    id: root.id, jobType: jobTypeOf(root)!, jobStatus,
    status: jobStatus === 'running' || jobStatus === 'pending' ? (current?.title ?? 'Starting') : jobStatus === 'cancelling' ? (last.kind === 'metal-install' ? 'Cancelling: ejecting the ISO' : 'Cancelling') : jobStatus,
    progress, metadata: JSON.stringify(requestOf(root)), nodeId: root.nodeId, nodeIp: root.bmcAddress, parentId: root.batchId ?? '',
    // A new BMC's job names its system by the serial its enrollment read (hostnameSource bmc-serial).
    resourceName: String(requestOf(root).hostname ?? hostnameFromSerial(root.bmcSerial) ?? ''), totalJobs: 1,
    lastError: last.lastErrorCode ? `${last.lastErrorCode}: ${last.lastErrorMessage ?? ''}`
      : jobStatus !== 'running' && jobStatus !== 'pending' && jobStatus !== 'completed' && last.nodeErrorCode ? `${last.nodeErrorCode}: ${last.nodeErrorMessage ?? ''}` : null,
    createdAt: root.createdAt, updatedAt: last.updatedAt,
  };
}

export async function controlNodeJob(ctx: Context, id: string): Promise<ControlNodeJob> {
  return view(await loadJob(ctx, id));
}

/**
 * Cancels a job: the node's metal abort (its run becomes aborting; its cleanup ejects the media
 * and ends the ISO's URL and callback token; the node fails from deploying as ABORTED). Idempotent:
 * a job already cancelling or cancelled answers as it is; one that ended otherwise is INVALID_STATE.
 */
export async function cancelControlNodeJob(ctx: Context, id: string): Promise<ControlNodeJob> {
  const job = await loadJob(ctx, id);
  const run = job.last;
  if (run.status === 'aborting' || run.status === 'aborted' || run.status === 'superseded') return view(job);
  if (run.status === 'succeeded' || run.status === 'failed') {
    throw new AppError('INVALID_STATE', `job ${job.root.id} has already ${run.status === 'succeeded' ? 'completed' : 'failed'}: there is nothing to cancel`, { jobId: job.root.id, jobStatus: jobStatusOf(run.status) });
  }
  await runMoveVerb(ctx, 'abort', run.nodeId, { reason: `job ${job.root.id} cancelled` });
  return view(await loadJob(ctx, id));
}

/** One provision progress record (seed 004's provision_progresses): a step of a provisioning job. */
export interface ProgressRecord {
  /** Stable per step: the job's creation (ms) and the step's place, as one integer. */
  id: number;
  bmcIp: string;
  jobId: string;
  /** The job's id while it is active (what a UI's cancel button needs), else empty. */
  activeJobId: string;
  stage: string;
  status: 'running' | 'completed' | 'failed' | 'cancelled';
  percentComplete: number;
  message: string;
  createdAt: Date;
  updatedAt: Date;
}

const ACTIVE = ['queued', 'running', 'waiting', 'aborting'];

/**
 * The provision progress of the node whose BMC has this address (POST /controlnode/provision/progress
 * and /progress/all): the steps of its provisioning jobs, oldest first; `latest` keeps the one
 * changed last. Nodes the caller may not read are not there for it.
 */
export async function provisionProgress(ctx: Context, bmcIp: string, latest: boolean): Promise<ProgressRecord[]> {
  const principal = requirePrincipal(ctx);
  const ip = bmcIp.trim().toLowerCase();
  const { rows } = await ctx.sql.query<{
    nodeId: string; tenantId: string; siteId: string; poolId: string; runId: string; jobId: string; kind: string; then: { kind: string } | null;
    runStatus: string; runCreated: Date; idx: number; title: string; status: string; errorCode: string | null; message: string | null;
    startedAt: Date | null; updatedAt: Date; total: number; percent: number | null;
  }>(
    `SELECT n.id AS "nodeId", n.tenant_id AS "tenantId", n.site_id AS "siteId", n.pool_id AS "poolId",
            w.id AS "runId", COALESCE(w.params->>'jobId', w.id) AS "jobId", w.kind, w.params->'then' AS then, w.status AS "runStatus", w.created_at AS "runCreated",
            s.idx, s.title, s.status, s.error_code AS "errorCode", s.message, s.started_at AS "startedAt", s.updated_at AS "updatedAt",
            (SELECT count(*)::int FROM workflow_step x WHERE x.run_id = w.id AND NOT x.cleanup) AS total,
            (SELECT (r.payload->>'percent')::int FROM install_report r WHERE r.run_id = w.id AND r.kind = 'step' ORDER BY r.id DESC LIMIT 1) AS percent
       FROM node n
       -- Provisioning jobs: a known node's install, or a new BMC's enrollment chain and the install it goes on to.
       JOIN workflow_run w ON w.node_id = n.id AND (w.kind = 'metal-install' OR w.params ? 'then')
       -- A step is a record once it started (the steps an abort or a failure skipped never did).
       JOIN workflow_step s ON s.run_id = w.id AND NOT s.cleanup AND s.started_at IS NOT NULL
      WHERE n.id = ANY($1::text[])
      ORDER BY w.created_at, w.id, s.idx`,
    [(await nodesWithBmc(ctx.sql, ip)).map((n) => n.id)],
  );
  // Each run's place in its job (the steps of the job's runs before it) and the job's whole count
  // with the runs still to come (its first run's plan), so a record's percent is the job's.
  const offset = new Map<string, number>();
  const jobs = new Map<string, { steps: number; runs: number }>();
  for (const r of rows) {
    if (offset.has(r.runId)) continue;
    const j = jobs.get(r.jobId) ?? { steps: 0, runs: 0 };
    offset.set(r.runId, j.steps);
    jobs.set(r.jobId, { steps: j.steps + r.total, runs: j.runs + 1 });
  }
  const toCome = new Map<string, number>();
  for (const r of rows) {
    if (r.runId !== r.jobId || toCome.has(r.jobId)) continue;
    toCome.set(r.jobId, plannedKinds({ kind: r.kind, params: r.then ? { then: r.then } : {} }).slice(jobs.get(r.jobId)!.runs).reduce((n, k) => n + stepCount(k), 0));
  }
  const out: ProgressRecord[] = [];
  for (const r of rows) {
    if (!visibleTo(principal, 'read', nodeResource({ id: r.nodeId, tenantId: r.tenantId, siteId: r.siteId, poolId: r.poolId }), { type: 'MetalNode', id: r.nodeId })) continue;
    const ended = r.status === 'succeeded' || r.status === 'unverified' || r.status === 'skipped';
    const open = r.status === 'running' || r.status === 'waiting' || r.status === 'pending';
    const cancelled = r.runStatus === 'aborted' || r.runStatus === 'aborting' || r.errorCode === 'ABORTED';
    const status = ended ? 'completed' : cancelled && (open || r.status === 'failed') ? 'cancelled' : r.status === 'failed' ? 'failed' : open && !ACTIVE.includes(r.runStatus) ? 'cancelled' : 'running';
    const inStep = open && r.title === 'Installing OS' && r.percent !== null ? r.percent / 100 : 0;
    const total = jobs.get(r.jobId)!.steps + (toCome.get(r.jobId) ?? 0);
    out.push({
      id: new Date(r.runCreated).getTime() * 100 + r.idx,
      bmcIp: ip, jobId: r.jobId, activeJobId: ACTIVE.includes(r.runStatus) ? r.jobId : '',
      stage: r.title, status, percentComplete: Math.floor((100 * ((offset.get(r.runId) ?? 0) + r.idx + (ended ? 1 : inStep))) / Math.max(1, total)),
      message: r.message ?? '', createdAt: r.startedAt ?? r.updatedAt, updatedAt: r.updatedAt,
    });
  }
  if (!latest) return out;
  const last = out.reduce<ProgressRecord | null>((a, b) => (!a || b.updatedAt.getTime() >= a.updatedAt.getTime() ? b : a), null);
  return last ? [last] : [];
}

export interface IsoQueueEntry { queueId: string; jobId: string; state: 'pending' | 'active'; bmcIp: string; hostname: string; createdAt: Date; startedAt: Date | null }

/**
 * GET /controlnode/provision/queue: the ISO builds waiting and running, of nodes the caller may
 * read, from our own rows (iso_build_job: queued by the Building ISO step with its provision.iso
 * job, started and ended by the worker; jobs/iso-build.ts), never from pg-boss's tables.
 */
export async function isoQueue(ctx: Context): Promise<IsoQueueEntry[]> {
  const principal = requirePrincipal(ctx);
  const { rows } = await ctx.sql.query<{ queueId: string; jobId: string; state: string; createdAt: Date; startedAt: Date | null; bmcIp: string; hostname: string; serial: string | null; nodeId: string; tenantId: string; siteId: string; poolId: string }>(
    `SELECT j.id::text AS "queueId", COALESCE(w.params->>'jobId', w.id) AS "jobId", CASE WHEN j.started_at IS NULL THEN 'created' ELSE 'active' END AS state,
            j.created_at AS "createdAt", j.started_at AS "startedAt",
            n.bmc_address AS "bmcIp", COALESCE(w.params->>'hostname', '') AS hostname, n.inventory->'outOfBand'->>'serial' AS serial, n.id AS "nodeId", n.tenant_id AS "tenantId", n.site_id AS "siteId", n.pool_id AS "poolId"
       FROM iso_build_job j JOIN workflow_run w ON w.id = j.run_id JOIN node n ON n.id = w.node_id
      WHERE j.ended_at IS NULL
      ORDER BY j.created_at`,
  );
  return rows.filter((r) => visibleTo(principal, 'read', nodeResource({ id: r.nodeId, tenantId: r.tenantId, siteId: r.siteId, poolId: r.poolId }), { type: 'MetalNode', id: r.nodeId })).map((r) => ({ queueId: r.queueId, jobId: r.jobId, state: r.state === 'active' ? 'active' : 'pending', bmcIp: r.bmcIp, hostname: r.hostname || hostnameFromSerial(r.serial) || '', createdAt: r.createdAt, startedAt: r.startedAt }));
}
