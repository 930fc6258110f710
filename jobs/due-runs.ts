import type { Logger } from 'pino';
import type { Sql } from '../src/db/sql';
import { ACTIVE_RUN_STATUSES } from '../src/modules/metal/states';
import { LEASE_MS, LEASE_SET, type Lease } from './engine';
import type { RunWaker } from './wake';

/**
 * The engine's fetch of due runs (issue 23): the runs whose due_at has passed and whose lease is
 * free, oldest due first, each leased in the same statement (LEASE_SET: due_at becomes the lease's
 * end, so a run whose worker dies is due again when its lease runs out). A run that ended while
 * due has its due_at cleared and is not returned (`ended`: a data-modifying WITH runs to completion
 * whether or not the query reads it). Locked rows are skipped: a run in a step
 * transaction, or one a waking transaction has not committed yet, is taken by a later fetch.
 *
 * Sent unnamed (planned at every call): over a table that grows from empty, a generic plan made
 * while workflow_run was small could scan it whole; the partial index on due_at is what it must use.
 */
const FETCH_SQL = `WITH cur AS (
    SELECT id, lease_until AS prev, resumes AS prev_resumes FROM workflow_run
     WHERE due_at <= now() AND (lease_until IS NULL OR lease_until <= now())
     ORDER BY due_at
     LIMIT $1
     FOR UPDATE SKIP LOCKED
  ), taken AS (
    UPDATE workflow_run w SET ${LEASE_SET}
      FROM cur
     WHERE w.id = cur.id AND w.status = ANY($3::text[])
    RETURNING w.id, w.kind, w.lease_until, cur.prev, cur.prev_resumes
  ), ended AS (
    UPDATE workflow_run w SET due_at = NULL
      FROM cur
     WHERE w.id = cur.id AND NOT (w.status = ANY($3::text[]))
  )
  SELECT id, kind, lease_until, prev, prev_resumes FROM taken`;

/** A run the fetch leased, with its kind (a detached run's goes straight to its own path: engine.ts advanceLeased). */
export interface DueRun extends Lease { runId: string; kind: string }

/**
 * Takes up to `limit` due runs with their leases. (It does not look for the earliest due time to
 * come: over an index whose column churns, that scan read every dead entry past now(), ten times
 * the fetch's own cost; a timer is found by the next poll, QUEUE_POLL_SECONDS, as pg-boss found a
 * delayed job.)
 */
export async function fetchDueRuns(sql: Sql, limit: number, leaseMs = LEASE_MS): Promise<{ runs: DueRun[] }> {
  const { rows } = await sql.query(FETCH_SQL, [limit, leaseMs, ACTIVE_RUN_STATUSES], { planEachTime: true });
  const runs: DueRun[] = [];
  for (const row of rows) {
    runs.push({ runId: row.id as string, kind: row.kind as string, leaseUntil: row.lease_until as Date, workerLost: row.prev != null, previousResumes: Number(row.prev_resumes) });
  }
  return { runs };
}

/**
 * A process's engine loop: keeps up to `concurrency` runs advancing at once, and fetches due runs
 * for its free slots when it is kicked (a notification on RUN_DUE_CHANNEL, this process's own
 * wake-up, a run it advanced ending while more may be due), and at its poll (a wait's end, a
 * retry's backoff: found within QUEUE_POLL_SECONDS, as pg-boss found a delayed job). A fetch that fails (the database away) is logged and
 * retried at the next poll: it never ends the loop.
 */
export class DueRunLoop implements RunWaker {
  private active = 0;
  private kicked = true;
  private stopped = false;
  private wakeUp: (() => void) | null = null;
  private loop: Promise<void> | null = null;
  /** The last fetch filled every free slot: a slot that frees fetches again at once. */
  private backlog = false;
  private readonly advancing = new Set<Promise<unknown>>();

  /**
   * `advance` takes one run; `opts.advanceGroup`, when given, takes up to `opts.groupSize` runs of
   * one fetch together (engine.ts advanceLeasedBatch: one step transaction for them) and answers
   * one promise per run, so each still holds its slot until its own advance ends.
   */
  constructor(
    private readonly sql: Sql,
    private readonly advance: (run: DueRun) => Promise<unknown>,
    private readonly log: Logger,
    private readonly opts: { concurrency: number; pollMs: number; leaseMs?: number; advanceGroup?: (runs: DueRun[]) => Promise<unknown>[]; groupSize?: number },
  ) {}

  start(): void {
    this.loop ??= this.run();
  }

  /** Fetch soon (coalesced: many kicks in one tick are one fetch). */
  kick(): void {
    this.kicked = true;
    const wake = this.wakeUp;
    if (wake) {
      this.wakeUp = null;
      setImmediate(wake);
    }
  }

  wake(): void {
    this.kick();
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      const waitMs = this.opts.pollMs;
      const free = this.opts.concurrency - this.active;
      if (this.kicked && free > 0) {
        this.kicked = false;
        try {
          const { runs } = await fetchDueRuns(this.sql, free, this.opts.leaseMs);
          this.backlog = runs.length === free;
          const size = this.opts.advanceGroup ? Math.max(1, this.opts.groupSize ?? 1) : 1;
          for (let i = 0; i < runs.length; i += size) {
            const group = runs.slice(i, i + size);
            const advances = group.length > 1 ? this.opts.advanceGroup!(group) : [this.advance(group[0]!)];
            group.forEach((run, j) => this.begin(run, advances[j]!));
          }
          if (this.backlog) continue;
        } catch (error) {
          this.log.warn({ err: error }, 'fetching due workflow runs failed; retrying at the next poll');
        }
      }
      if (this.stopped) break;
      if (this.kicked && this.active < this.opts.concurrency) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          this.wakeUp = null;
          this.kicked = true;
          resolve();
        }, waitMs);
        timer.unref?.();
        this.wakeUp = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  }

  private begin(run: DueRun, advancing: Promise<unknown>): void {
    this.active += 1;
    const inFlight = advancing
      .catch((error: unknown) => this.log.error({ err: error, runId: run.runId }, 'advancing a workflow run failed; it is due again shortly'))
      .finally(() => {
        this.active -= 1;
        this.advancing.delete(inFlight);
        // More were due than there were slots, or a wake-up arrived meanwhile: fetch for this slot.
        if (this.backlog || this.kicked) this.kick();
      });
    this.advancing.add(inFlight);
  }

  /** Fetches no more; resolves when the advances under way have ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    const wake = this.wakeUp;
    this.wakeUp = null;
    wake?.();
    await this.loop;
    await Promise.allSettled([...this.advancing]);
  }
}

/**
 * How many runs are due and not leased: the engine's backlog, exported as
 * queue_depth{queue="metal.advance"} (the name the workflow backlog had when it was a pg-boss queue;
 * docs/operations.md alerts on it).
 */
export async function dueRunCount(sql: Sql): Promise<number> {
  const { rows } = await sql.query(`SELECT count(*)::int AS n FROM workflow_run WHERE due_at <= now() AND (lease_until IS NULL OR lease_until <= now())`);
  return Number(rows[0]?.n ?? 0);
}
