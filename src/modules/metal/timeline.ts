import { requirePrincipal, type Context } from '../../context';
import { absent, decide } from '../../auth/decide';
import { invalidInput } from '../../errors';
import { nodeResource } from '../tenancy/resources';

/**
 * A node's timeline: its workflow runs, newest first, each with every step as the engine records
 * it (human title, status, start and end, attempts, the last message). Read straight from
 * workflow_run / workflow_step on every call: a run's steps change every second while it runs,
 * so no cache holds them (NEVER_CACHED_FIELDS).
 */

export interface TimelineStep {
  idx: number;
  name: string;
  title: string;
  status: string;
  destructive: boolean;
  /** A cleanup the run ran on abort or failure (after the steps it cleans up after). */
  cleanup: boolean;
  attempts: number;
  startedAt: Date | null;
  finishedAt: Date | null;
  message: string | null;
  errorCode: string | null;
}

export interface TimelineRun {
  id: string;
  nodeId: string;
  kind: string;
  status: string;
  params: Record<string, unknown>;
  createdAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
  waitingFor: string | null;
  waitUntil: Date | null;
  attempt: number;
  resumes: number;
  lastError: { code: string; message: string } | null;
  steps: TimelineStep[];
}

/** The most runs one timeline read returns. */
export const MAX_TIMELINE_RUNS = 50;

interface Runner {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
}

async function readRuns(db: Runner, where: string, values: unknown[]): Promise<TimelineRun[]> {
  const { rows } = await db.query(
    `SELECT w.id, w.node_id, w.kind, w.status, w.params, w.created_at, w.started_at, w.finished_at, w.waiting_for, w.wait_until,
            w.attempt, w.resumes, w.last_error_code, w.last_error_message,
            COALESCE((SELECT jsonb_agg(jsonb_build_object(
                'idx', s.idx, 'name', s.name, 'title', s.title, 'status', s.status, 'destructive', s.destructive, 'cleanup', s.cleanup,
                'attempts', s.attempts, 'startedAt', s.started_at, 'finishedAt', s.finished_at, 'message', s.message, 'errorCode', s.error_code)
              ORDER BY s.idx) FROM workflow_step s WHERE s.run_id = w.id), '[]'::jsonb) AS steps
       FROM workflow_run w WHERE ${where}`,
    values,
  );
  const date = (v: unknown) => (v == null ? null : new Date(v as string));
  return rows.map((r) => ({
    id: r.id as string,
    nodeId: r.node_id as string,
    kind: r.kind as string,
    status: r.status as string,
    params: (r.params ?? {}) as Record<string, unknown>,
    createdAt: r.created_at as Date,
    startedAt: (r.started_at ?? null) as Date | null,
    finishedAt: (r.finished_at ?? null) as Date | null,
    waitingFor: (r.waiting_for ?? null) as string | null,
    waitUntil: (r.wait_until ?? null) as Date | null,
    attempt: Number(r.attempt),
    resumes: Number(r.resumes),
    lastError: r.last_error_code ? { code: r.last_error_code as string, message: (r.last_error_message ?? '') as string } : null,
    steps: (r.steps as Record<string, unknown>[]).map((s) => ({
      idx: Number(s.idx), name: s.name as string, title: s.title as string, status: s.status as string,
      destructive: Boolean(s.destructive), cleanup: Boolean(s.cleanup), attempts: Number(s.attempts),
      startedAt: date(s.startedAt), finishedAt: date(s.finishedAt),
      message: (s.message ?? null) as string | null, errorCode: (s.errorCode ?? null) as string | null,
    })),
  }));
}

/** The runs of a node the caller has already read (its view authorized it), newest first. */
export async function nodeTimeline(ctx: Pick<Context, 'sql'>, nodeId: string, last: number | null | undefined): Promise<TimelineRun[]> {
  const limit = last ?? 10;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_TIMELINE_RUNS) throw invalidInput('last', `must be 1..${MAX_TIMELINE_RUNS}`);
  return readRuns(ctx.sql, `w.node_id = $1 ORDER BY w.created_at DESC, w.id DESC LIMIT $2`, [nodeId, limit]);
}

/** One run, decided as read on its node (another tenant's run is NOT_FOUND). */
export async function workflowRun(ctx: Context, runId: string): Promise<TimelineRun> {
  const principal = requirePrincipal(ctx);
  const [run] = await readRuns(ctx.sql, 'w.id = $1', [runId]);
  const node = run ? await ctx.prisma.node.findUnique({ where: { id: run.nodeId }, select: { id: true, tenantId: true, siteId: true, poolId: true } }) : null;
  if (!run || !node) throw absent('WorkflowRun', runId);
  decide(principal, 'read', nodeResource(node), { type: 'WorkflowRun', id: runId });
  return run;
}
