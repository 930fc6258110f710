import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { decide } from '../../auth/decide';
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

const JOB_TYPES: Record<string, string> = { 'metal-install': 'provision' };

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
