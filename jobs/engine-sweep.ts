import type { Sql } from '../src/db/sql';
import { ACTIVE } from './engine-lease';

/**
 * A safety net, every few seconds in every worker: makes due the active runs that look overdue
 * but are not due (due_at NULL or later): no live worker holds them, they have not changed for
 * `graceMs`, and they have something to do: not waiting, or a dead worker's lease lapsed on them,
 * or their wait is over, or a command result or ramdisk report arrived after their last change.
 * Every writer wakes the runs it makes due in its own transaction (jobs/wake.ts), and taking a
 * lease makes the run due at the lease's end, so this finds a run only when a writer forgot to
 * wake it (a row written by hand, a bug). Resolves to how many it woke.
 */
export async function sweepRuns(sql: Sql, graceMs: number, limit = 1000): Promise<number> {
  const { rows } = await sql.query(
    `WITH overdue AS (
       SELECT w.id FROM workflow_run w
        WHERE w.status = ANY($1::text[]) AND (w.lease_until IS NULL OR w.lease_until < now())
          AND (w.due_at IS NULL OR w.due_at > now())
          AND w.updated_at < now() - $2::int * interval '1 millisecond'
          AND (w.status <> 'waiting' OR w.lease_until IS NOT NULL OR w.wait_until IS NULL OR w.wait_until < now()
               OR EXISTS (SELECT 1 FROM command c WHERE c.run_id = w.id AND c.status IN ('succeeded', 'unverified', 'failed', 'expired') AND c.updated_at > w.updated_at)
               OR EXISTS (SELECT 1 FROM ramdisk_report r WHERE r.run_id = w.id AND r.created_at > w.updated_at))
        LIMIT $3
        FOR UPDATE SKIP LOCKED
     ), woke AS (
       UPDATE workflow_run w SET due_at = now() FROM overdue WHERE w.id = overdue.id RETURNING 1
     )
     SELECT count(*)::int AS n FROM woke`,
    [ACTIVE, Math.max(0, Math.round(graceMs)), limit],
  );
  return Number(rows[0]?.n ?? 0);
}
