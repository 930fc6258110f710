import type { Sql } from '../src/db/sql';
import { ACTIVE_RUN_STATUSES } from '../src/modules/metal/states';
import type { AdvanceOutcome } from './engine';

/**
 * A run's lease (the engine's overview is in jobs/engine.ts): lease_until is both the lease and its
 * fencing token; taking it makes the run due at the lease's end (a dead worker's run comes back).
 */

export const LEASE_MS = 60_000;
/** What advanceRun answers when it found the run's lease held (the run is then woken: due once it is released). */
export const BUSY_RETRY_MS = 1_000;

export const ACTIVE: readonly string[] = ACTIVE_RUN_STATUSES;

/** A run's lease is no longer this worker's (another took the run): thrown by the step transaction's load and by a detached run's fenced writes. */
export class LeaseLost extends Error {
  override readonly name = 'LeaseLost';
  constructor(runId: string) {
    super(`run ${runId}: its lease is no longer this worker's`);
  }
}

/** What ending a run writes besides its status (endRun, a detached run's end): no lease, no due time, no wait. */
export const RUN_ENDED_SET = `finished_at = now(), lease_until = NULL, due_at = NULL, wait_until = NULL, waiting_for = NULL,
  updated_at = now(), version = version + 1`;

/**
 * Hands a run back ($1 the run, $2 the lease's token): the lease released, due at `due`, when the
 * lease is still the caller's. For a run that yields its turn, one whose step failed to run, and a
 * detached run handed back at a worker's stop.
 */
export const releaseLeaseSql = (due: string) =>
  `UPDATE workflow_run SET lease_until = NULL, due_at = ${due}, updated_at = now() WHERE id = $1 AND lease_until = $2::timestamptz`;

/** A run's lease as its taker holds it: the token, and whether a dead worker's lease lapsed on it. */
export interface Lease { leaseUntil: Date; workerLost: boolean; previousResumes: number }

/**
 * What taking a run's lease writes (`w` the run, `cur.prev` its lease before, `$2` the lease's
 * length in ms): the lease, and due_at at the lease's end, so the run is due again if its worker
 * dies; the wake-up that made it due is consumed (a wait's own timer is written again by the step).
 * Shared by takeLease and the fetch of due runs (jobs/due-runs.ts).
 */
export const LEASE_SET = `lease_until = now() + $2::int * interval '1 millisecond',
              due_at = now() + $2::int * interval '1 millisecond',
              status = CASE WHEN w.status = 'queued' THEN 'running' ELSE w.status END,
              started_at = COALESCE(w.started_at, now()),
              resumes = w.resumes + CASE WHEN cur.prev IS NOT NULL THEN 1 ELSE 0 END,
              updated_at = now()`;

/** Takes the run's lease, or says why not. */
export async function takeLease(sql: Sql, runId: string, leaseMs: number): Promise<
  | ({ taken: true } & Lease)
  | { taken: false; outcome: AdvanceOutcome }
> {
  // SKIP LOCKED: a run whose row is locked is in a step transaction (or a verb's) right now, so
  // the call is busy at once instead of waiting for that commit.
  const { rows } = await sql.query(
    `WITH cur AS (
       SELECT id, status, lease_until AS prev, resumes AS prev_resumes FROM workflow_run WHERE id = $1 FOR UPDATE SKIP LOCKED
     ), taken AS (
       UPDATE workflow_run w SET ${LEASE_SET}
         FROM cur
        WHERE w.id = cur.id AND w.status = ANY($3::text[]) AND (cur.prev IS NULL OR cur.prev <= now())
       RETURNING w.lease_until, cur.prev, cur.prev_resumes
     )
     SELECT true AS taken, t.lease_until, t.prev, t.prev_resumes, NULL::text AS status, now() AS db_now, false AS locked FROM taken t
     UNION ALL
     SELECT false, cur.prev, NULL, NULL, cur.status, now(), false FROM cur WHERE NOT EXISTS (SELECT 1 FROM taken)
     UNION ALL
     SELECT false, w.lease_until, NULL, NULL, w.status, now(), true FROM workflow_run w WHERE w.id = $1 AND NOT EXISTS (SELECT 1 FROM cur)`,
    [runId, leaseMs, ACTIVE],
  );
  const row = rows[0];
  if (!row) return { taken: false, outcome: { kind: 'idle', status: 'missing' } };
  // Locked by another transaction: this call may carry news that transaction did not see, so the
  // run is woken (advanceRun) and fetched once that transaction ends.
  if (row.locked) return { taken: false, outcome: ACTIVE.includes(row.status as string) ? { kind: 'busy', retryInMs: BUSY_RETRY_MS } : { kind: 'idle', status: row.status as string } };
  if (row.taken) {
    return { taken: true, leaseUntil: row.lease_until as Date, workerLost: row.prev != null, previousResumes: Number(row.prev_resumes) };
  }
  // cur read the row as the lock holder left it (a statement's other reads see it as it began).
  if (!ACTIVE.includes(row.status as string) || !row.lease_until) return { taken: false, outcome: { kind: 'idle', status: row.status as string } };
  const heldFor = (row.lease_until as Date).getTime() - (row.db_now as Date).getTime();
  return { taken: false, outcome: { kind: 'busy', retryInMs: Math.max(50, Math.min(BUSY_RETRY_MS, heldFor + 50)) } };
}

/**
 * The run's next due time as a step transaction of the lease holder writes it (an UPDATE's SET
 * item; `next` an SQL expression: the wait's end, or the renewed lease's end while the run goes
 * on): `next`, unless a wake-up arrived while the run was leased (due_at is then no longer the
 * lease's end, which taking the lease wrote): that earlier due time stays, so the run is fetched
 * again once the lease is released, and reads what woke it.
 */
export const DUE_WITH = (next: string) => `due_at = CASE WHEN due_at IS NOT DISTINCT FROM lease_until THEN ${next} ELSE LEAST(due_at, ${next}) END`;
