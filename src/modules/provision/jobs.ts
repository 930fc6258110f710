import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { decide, visibleTo } from '../../auth/decide';
import { AppError, notFound } from '../../errors';
import { nodeResource } from '../tenancy/resources';
import { runMoveVerb } from '../metal/verbs';

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
  /** The node's error, while this run is the node's latest (an abort records it on the node). */
  nodeErrorCode: string | null; nodeErrorMessage: string | null;
  steps: { title: string; status: string; cleanup: boolean }[]; percent: number | null;
}

async function loadJob(ctx: Context, id: string): Promise<RunRow> {
  const principal = requirePrincipal(ctx);
  const { rows: [row] } = await ctx.sql.query<RunRow>(
    `SELECT w.id, w.kind, w.status, w.params, w.batch_id AS "batchId", w.created_at AS "createdAt", w.updated_at AS "updatedAt",
            w.last_error_code AS "lastErrorCode", w.last_error_message AS "lastErrorMessage",
            n.id AS "nodeId", n.tenant_id AS "tenantId", n.site_id AS "siteId", n.pool_id AS "poolId", n.bmc_address AS "bmcAddress", n.provision_state AS "provisionState",
            CASE WHEN n.workflow_id = w.id THEN n.last_error_code END AS "nodeErrorCode", CASE WHEN n.workflow_id = w.id THEN n.last_error_message END AS "nodeErrorMessage",
            (SELECT COALESCE(jsonb_agg(jsonb_build_object('title', s.title, 'status', s.status, 'cleanup', s.cleanup) ORDER BY s.idx), '[]') FROM workflow_step s WHERE s.run_id = w.id) AS steps,
            (SELECT (r.payload->>'percent')::int FROM install_report r WHERE r.run_id = w.id AND r.kind = 'step' ORDER BY r.id DESC LIMIT 1) AS percent
       FROM workflow_run w JOIN node n ON n.id = w.node_id WHERE w.id = $1`,
    [id],
  );
  if (!row || !JOB_TYPES[row.kind]) throw notFound('job', id);
  decide(principal, 'read', nodeResource({ id: row.nodeId, tenantId: row.tenantId, siteId: row.siteId, poolId: row.poolId }), { type: 'WorkflowRun', id });
  return row;
}

function view(r: RunRow): ControlNodeJob {
  const steps = r.steps.filter((s) => !s.cleanup);
  const done = steps.filter((s) => s.status === 'succeeded' || s.status === 'skipped').length;
  const current = steps.find((s) => s.status === 'running' || s.status === 'waiting' || s.status === 'pending');
  const installing = current?.title === 'Installing OS' && r.percent !== null ? Math.min(100, Math.max(0, r.percent)) / 100 : 0;
  const jobStatus = jobStatusOf(r.status);
  const progress = jobStatus === 'completed' ? 100 : steps.length ? Math.floor((100 * (done + installing)) / steps.length) : 0;
  const { verb: _verb, callbackBase: _cb, ...request } = r.params;
  return {
    id: r.id, jobType: JOB_TYPES[r.kind]!, jobStatus,
    status: jobStatus === 'running' || jobStatus === 'pending' ? (current?.title ?? 'Starting') : jobStatus === 'cancelling' ? 'Cancelling: ejecting the ISO' : jobStatus,
    progress, metadata: JSON.stringify(request), nodeId: r.nodeId, nodeIp: r.bmcAddress, parentId: r.batchId ?? '',
    resourceName: String(r.params.hostname ?? ''), totalJobs: 1,
    lastError: r.lastErrorCode ? `${r.lastErrorCode}: ${r.lastErrorMessage ?? ''}`
      : jobStatus !== 'running' && jobStatus !== 'pending' && jobStatus !== 'completed' && r.nodeErrorCode ? `${r.nodeErrorCode}: ${r.nodeErrorMessage ?? ''}` : null,
    createdAt: r.createdAt, updatedAt: r.updatedAt,
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
  const run = await loadJob(ctx, id);
  if (run.status === 'aborting' || run.status === 'aborted' || run.status === 'superseded') return view(run);
  if (run.status === 'succeeded' || run.status === 'failed') {
    throw new AppError('INVALID_STATE', `job ${id} has already ${run.status === 'succeeded' ? 'completed' : 'failed'}: there is nothing to cancel`, { jobId: id, jobStatus: jobStatusOf(run.status) });
  }
  await runMoveVerb(ctx, 'abort', run.nodeId, { reason: `job ${id} cancelled` });
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
    nodeId: string; tenantId: string; siteId: string; poolId: string; runId: string; runStatus: string; runCreated: Date;
    idx: number; title: string; status: string; errorCode: string | null; message: string | null; startedAt: Date | null; updatedAt: Date; total: number; percent: number | null;
  }>(
    `SELECT n.id AS "nodeId", n.tenant_id AS "tenantId", n.site_id AS "siteId", n.pool_id AS "poolId",
            w.id AS "runId", w.status AS "runStatus", w.created_at AS "runCreated",
            s.idx, s.title, s.status, s.error_code AS "errorCode", s.message, s.started_at AS "startedAt", s.updated_at AS "updatedAt",
            (SELECT count(*)::int FROM workflow_step x WHERE x.run_id = w.id AND NOT x.cleanup) AS total,
            (SELECT (r.payload->>'percent')::int FROM install_report r WHERE r.run_id = w.id AND r.kind = 'step' ORDER BY r.id DESC LIMIT 1) AS percent
       FROM node n JOIN workflow_run w ON w.node_id = n.id AND w.kind = 'metal-install'
       -- A step is a record once it started (the steps an abort or a failure skipped never did).
       JOIN workflow_step s ON s.run_id = w.id AND NOT s.cleanup AND s.started_at IS NOT NULL
      WHERE n.bmc_address = $1
      ORDER BY w.created_at, s.idx`,
    [ip],
  );
  const out: ProgressRecord[] = [];
  for (const r of rows) {
    if (!visibleTo(principal, 'read', nodeResource({ id: r.nodeId, tenantId: r.tenantId, siteId: r.siteId, poolId: r.poolId }), { type: 'MetalNode', id: r.nodeId })) continue;
    const ended = r.status === 'succeeded' || r.status === 'skipped';
    const open = r.status === 'running' || r.status === 'waiting' || r.status === 'pending';
    const cancelled = r.runStatus === 'aborted' || r.runStatus === 'aborting' || r.errorCode === 'ABORTED';
    const status = ended ? 'completed' : cancelled && (open || r.status === 'failed') ? 'cancelled' : r.status === 'failed' ? 'failed' : open && !ACTIVE.includes(r.runStatus) ? 'cancelled' : 'running';
    const inStep = open && r.title === 'Installing OS' && r.percent !== null ? r.percent / 100 : 0;
    out.push({
      id: new Date(r.runCreated).getTime() * 100 + r.idx,
      bmcIp: ip, jobId: r.runId, activeJobId: ACTIVE.includes(r.runStatus) ? r.runId : '',
      stage: r.title, status, percentComplete: Math.floor((100 * (r.idx + (ended ? 1 : inStep))) / Math.max(1, r.total)),
      message: r.message ?? '', createdAt: r.startedAt ?? r.updatedAt, updatedAt: r.updatedAt,
    });
  }
  if (!latest) return out;
  const last = out.reduce<ProgressRecord | null>((a, b) => (!a || b.updatedAt.getTime() >= a.updatedAt.getTime() ? b : a), null);
  return last ? [last] : [];
}

export interface IsoQueueEntry { queueId: string; jobId: string; state: 'pending' | 'active'; bmcIp: string; hostname: string; createdAt: Date; startedAt: Date | null }

/** GET /controlnode/provision/queue: the ISO builds waiting and running (pg-boss provision.iso), of nodes the caller may read. */
export async function isoQueue(ctx: Context): Promise<IsoQueueEntry[]> {
  const principal = requirePrincipal(ctx);
  const { rows } = await ctx.sql.query<{ queueId: string; jobId: string; state: string; createdAt: Date; startedAt: Date | null; bmcIp: string; hostname: string; nodeId: string; tenantId: string; siteId: string; poolId: string }>(
    `SELECT j.id::text AS "queueId", j.data->>'runId' AS "jobId", j.state::text AS state, j.created_on AS "createdAt", j.started_on AS "startedAt",
            n.bmc_address AS "bmcIp", COALESCE(w.params->>'hostname', '') AS hostname, n.id AS "nodeId", n.tenant_id AS "tenantId", n.site_id AS "siteId", n.pool_id AS "poolId"
       FROM pgboss.job j JOIN workflow_run w ON w.id = j.data->>'runId' JOIN node n ON n.id = w.node_id
      WHERE j.name = 'provision.iso' AND j.state IN ('created', 'retry', 'active')
      ORDER BY j.created_on`,
  );
  return rows.filter((r) => visibleTo(principal, 'read', nodeResource({ id: r.nodeId, tenantId: r.tenantId, siteId: r.siteId, poolId: r.poolId }), { type: 'MetalNode', id: r.nodeId })).map((r) => ({ queueId: r.queueId, jobId: r.jobId, state: r.state === 'active' ? 'active' : 'pending', bmcIp: r.bmcIp, hostname: r.hostname, createdAt: r.createdAt, startedAt: r.startedAt }));
}
