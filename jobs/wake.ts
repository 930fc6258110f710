import { ACTIVE_RUN_STATUSES } from '../src/modules/metal/states';

/**
 * The engine's public wake-up API (issue 23): the one module of jobs/ that domain modules
 * (src/modules/**) may import to wake a workflow run, besides jobs/send.ts for pg-boss queues.
 *
 * A run is due when its `workflow_run.due_at` has passed (NULL: nothing to do until something
 * wakes it). The engine's fetch loops (jobs/due-runs.ts) take due runs themselves, with their
 * lease, from the partial index on due_at. Waking a run is setting `due_at = LEAST(due_at, at)` in
 * the statement (or at least the transaction) that makes the wake-up necessary: a command's result,
 * a ramdisk or installer report, a verb, a batch's release. It commits or rolls back with it, and a
 * run being fetched right now cannot be taken before that commit (the row is locked by the wake's
 * UPDATE; the fetch skips locked rows). A row trigger (workflow_run_due, see the migration
 * 20261206100000_workflow_run_due) notifies RUN_DUE_CHANNEL when a run becomes due, so the loops
 * fetch at once instead of at their next poll.
 *
 * A wake of a run already due costs a HOT update of its row (due_at does not change, no index
 * entry is written): no job row, no fetch of its own.
 */

/** What the trigger on workflow_run notifies (at the waking transaction's commit) when a run becomes due. */
export const RUN_DUE_CHANNEL = 'workflow_run_due';

/** The active run statuses as an SQL list, for `status IN ...` (ACTIVE_RUN_STATUSES). */
export const ACTIVE_STATUSES_SQL = `(${ACTIVE_RUN_STATUSES.map((s) => `'${s}'`).join(', ')})`;

/**
 * An UPDATE (for a data-modifying CTE: `woke AS (${wakeRunsSql(...)})`) that makes the active runs
 * whose ids `runIds` yields (an SQL expression of one row or a subquery: `(SELECT run_id FROM rep)`)
 * due by `at` (SQL, default now()), when `when` (an SQL condition) holds. RETURNING id: one row per
 * run woken. A run that has ended is not woken.
 */
export function wakeRunsSql(runIds: string, opts: { at?: string; when?: string } = {}): string {
  const at = opts.at ?? 'now()';
  const when = opts.when ? ` AND ${opts.when}` : '';
  return `UPDATE workflow_run SET due_at = LEAST(due_at, ${at})
     WHERE id IN (${runIds}) AND status IN ${ACTIVE_STATUSES_SQL}${when}
    RETURNING id`;
}

/** Something that runs SQL (a transaction, or a pool for a statement of its own). */
export interface WakeRunner {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
}

/**
 * Wakes `runId` now, or after `afterMs`, in the caller's transaction (or as a statement of its own).
 * Resolves to whether the run is active (an ended run is not woken).
 */
export async function wakeRun(db: WakeRunner, runId: string, afterMs = 0): Promise<boolean> {
  const { rows } = await db.query(
    `WITH woke AS (${wakeRunsSql('$1::text', { at: "now() + $2::int * interval '1 millisecond'" })}) SELECT count(*)::int AS n FROM woke`,
    [runId, Math.max(0, Math.round(afterMs))],
  );
  return Number(rows[0]?.n) === 1;
}

/**
 * A process that runs the engine: after a commit that woke a run (the built-in agent's result, a
 * ramdisk report its API stored), it fetches due runs at once instead of waiting for the
 * notification's round trip through PostgreSQL.
 */
export interface RunWaker {
  /** After the commit: `runId` is due; fetch soon, here. */
  wake(runId: string): void;
}

/** After a statement that woke `runId` (null: none) committed: tells this process's engine, if it runs one. */
export function afterWake(runId: string | null, waker: RunWaker | null | undefined): void {
  if (runId && waker) waker.wake(runId);
}
