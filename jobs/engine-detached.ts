import type { Logger } from 'pino';
import type { Sql } from '../src/db/sql';
import { STUCK_RESUMES } from '../src/modules/metal/states';
import { clip } from './engine-rows';
import { LeaseLost, releaseLeaseSql, RUN_ENDED_SET } from './engine-lease';
import type { StepResult } from './steps';

/**
 * The engine's runs that are not tied to a metal node (issue 23 item 2): the fabric rollout and
 * preflight. They live in the same workflow_run / workflow_step rows, are woken and fetched the
 * same way, and are leased with the same column and the same takeLease (advanceRun hands a run it
 * leased, but whose row joins no node, to this module). What differs is the body: a fan-out of
 * SSH work that takes seconds to minutes, so it does not run inside one step transaction that
 * locks a node row. Instead the run keeps its lease while its body runs here, in the background:
 *
 * - the lease is renewed every third of its length, fenced by its token (lease_until), and every
 *   write of the body is fenced by it too (fence()): a worker that lost the lease (a stall longer
 *   than the lease, and another worker took the run) stops, and nothing it still tries commits;
 * - a worker killed mid-run leaves the lease to lapse; the run is then due (taking the lease set
 *   its due_at to the lease's first end), and the engine's fetch takes it up and counts the resume, and the body runs again from the rows: a node whose step row is finished is
 *   not run again. After STUCK_RESUMES takeovers the run fails WORKER_LOST (def.lost);
 * - an abort is workflow_run.abort_requested_at (polled), handed to the body as a signal: the body
 *   runs its cleanup (recorded as cleanup step rows) and ends the run `aborted`;
 * - each step's outcome is a typed StepResult, recorded in its workflow_step row (attempts,
 *   idempotency key, status, message, error code) in the same transaction as the body's own rows.
 */

/** The raw-query face of a Prisma client or interactive transaction (what the fabric bodies write with). */
export interface RawDb {
  $executeRawUnsafe(query: string, ...values: unknown[]): Promise<number>;
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): Promise<T>;
}

export interface DetachedRunInfo {
  id: string;
  kind: string;
  params: Record<string, unknown>;
  /** How many times the run was taken up again after its worker died. */
  resumes: number;
}

export interface StepRowView {
  idx: number;
  name: string;
  cleanup: boolean;
  status: string;
  attempts: number;
  message: string | null;
  errorCode: string | null;
  /** The step's memo (workflow_step.state.memo). */
  memo: Record<string, unknown>;
}

export type RunEnd = { status: 'succeeded' } | { status: 'failed' | 'aborted'; code: string; message: string };

export interface DetachedDef {
  kind: string;
  /** The run's body: resumes from its rows, ends the run with lease.end(...) in its last transaction. */
  run(lease: DetachedLease): Promise<void>;
  /** The run's worker died STUCK_RESUMES times: the body's own rows are finished here, in `db` (the run ends failed with it). */
  lost(db: RawDb, run: DetachedRunInfo): Promise<void>;
}


/** How long a stopping worker waits for its bodies before it hands their runs back regardless. */
const STOP_WAIT_MS = 10_000;

/** A StepResult as a step row's status. */
function stepStatusOf(result: StepResult): string {
  switch (result.kind) {
    case 'complete': return 'succeeded';
    case 'skipped': return 'skipped';
    case 'failed': return 'failed';
    default: return 'waiting';
  }
}

/** One leased run, while its body runs in this process. */
export class DetachedLease {
  private token: Date;
  private readonly lostCtl = new AbortController();
  private readonly abortCtl = new AbortController();
  private chain: Promise<unknown> = Promise.resolve();
  private timers: NodeJS.Timeout[] = [];
  private ended = false;

  constructor(
    private readonly sql: Sql,
    readonly run: DetachedRunInfo,
    token: Date,
    private readonly leaseMs: number,
    abortRequested: boolean,
  ) {
    this.token = token;
    if (abortRequested) this.abortCtl.abort('abort requested');
  }

  /** Aborted when this worker must stop: its lease was lost, or the process is stopping. */
  get lost(): AbortSignal {
    return this.lostCtl.signal;
  }

  /** Aborted once an abort of the run was requested (workflow_run.abort_requested_at). */
  get abort(): AbortSignal {
    return this.abortCtl.signal;
  }

  get tokenIso(): string {
    return this.token.toISOString();
  }

  /** Renews the lease and polls for an abort request, until the body is over. */
  start(abortPollMs: number): void {
    const renew = setInterval(() => void this.renew(), Math.max(200, Math.floor(this.leaseMs / 3)));
    const poll = setInterval(() => void this.pollAbort(), abortPollMs);
    this.timers = [renew, poll];
  }

  stop(reason: string): void {
    for (const timer of this.timers) clearInterval(timer);
    this.timers = [];
    if (!this.lostCtl.signal.aborted) this.lostCtl.abort(reason);
  }

  private async renew(): Promise<void> {
    if (this.ended || this.lostCtl.signal.aborted) return;
    await this.serial(async () => {
      const { rows } = await this.sql.query(
        `UPDATE workflow_run SET lease_until = now() + $3::int * interval '1 millisecond', updated_at = now()
          WHERE id = $1 AND lease_until = $2::timestamptz RETURNING lease_until`,
        [this.run.id, this.tokenIso, this.leaseMs],
      );
      if (!rows[0]) throw new LeaseLost(this.run.id);
      this.token = rows[0].lease_until as Date;
    }).catch((error: unknown) => {
      if (error instanceof LeaseLost) this.stop('lease lost');
      // A failed renewal (the database away a moment) is tried again at the next tick; the lease
      // outlasts two missed renewals.
    });
  }

  private async pollAbort(): Promise<void> {
    if (this.abortCtl.signal.aborted) return;
    const { rows } = await this.sql.query('SELECT abort_requested_at IS NOT NULL AS yes FROM workflow_run WHERE id = $1', [this.run.id]).catch(() => ({ rows: [] as { yes?: boolean }[] }));
    if (rows[0]?.yes) this.abortCtl.abort('abort requested');
  }

  /** Runs `fn` after every earlier write and renewal of this run (the lease token changes with each renewal). */
  serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.chain.then(fn);
    this.chain = next.catch(() => undefined);
    return next;
  }

  /** In the caller's transaction: the lease must still be this worker's (LeaseLost otherwise). */
  async fence(db: RawDb): Promise<void> {
    if (this.lostCtl.signal.aborted) throw new LeaseLost(this.run.id);
    const fenced = await db.$executeRawUnsafe('UPDATE workflow_run SET updated_at = now() WHERE id = $1 AND lease_until = $2::timestamptz', this.run.id, this.tokenIso);
    if (fenced !== 1) {
      this.stop('lease lost');
      throw new LeaseLost(this.run.id);
    }
  }

  /** The run's step rows, in order (what a resumed body reads). */
  async steps(db: RawDb): Promise<StepRowView[]> {
    const rows = await db.$queryRawUnsafe<Record<string, unknown>[]>(
      'SELECT idx, name, cleanup, status, attempts, message, error_code, state FROM workflow_step WHERE run_id = $1 ORDER BY idx', this.run.id);
    return rows.map((r) => ({
      idx: Number(r.idx), name: r.name as string, cleanup: Boolean(r.cleanup), status: r.status as string, attempts: Number(r.attempts),
      message: (r.message ?? null) as string | null, errorCode: (r.error_code ?? null) as string | null,
      memo: ((r.state as { memo?: Record<string, unknown> } | null)?.memo ?? {}),
    }));
  }

  /** Lays out step rows (once: rows already there are kept, so a resumed run finds its own). */
  async layOut(db: RawDb, rows: { idx: number; name: string; title: string; cleanup?: boolean }[]): Promise<void> {
    if (rows.length === 0) return;
    await db.$executeRawUnsafe(
      `INSERT INTO workflow_step (run_id, idx, name, title, cleanup)
       SELECT $1, s.idx, s.name, s.title, s.cleanup FROM unnest($2::int[], $3::text[], $4::text[], $5::boolean[]) AS s(idx, name, title, cleanup)
       ON CONFLICT (run_id, idx) DO NOTHING`,
      this.run.id, rows.map((r) => r.idx), rows.map((r) => r.name), rows.map((r) => r.title), rows.map((r) => Boolean(r.cleanup)));
  }

  /** Marks a step started: attempts + 1 and its idempotency key `<run>:<idx>:<attempt>`. */
  async stepStarted(db: RawDb, idx: number): Promise<void> {
    await db.$executeRawUnsafe(
      `UPDATE workflow_step SET status = 'running', attempts = attempts + 1, idempotency_key = run_id || ':' || idx || ':' || (attempts + 1),
              message = NULL, error_code = NULL, started_at = now(), finished_at = NULL, updated_at = now()
        WHERE run_id = $1 AND idx = $2`, this.run.id, idx);
  }

  /** Records a step's typed result (and its memo, when given). */
  async stepEnded(db: RawDb, idx: number, result: StepResult, memo?: Record<string, unknown>): Promise<void> {
    const message = result.kind === 'failed' ? `${result.code}: ${result.message}` : result.kind === 'wait' ? `waiting for ${result.for}` : result.message ?? null;
    await db.$executeRawUnsafe(
      `UPDATE workflow_step SET status = $3, message = $4, error_code = $5, finished_at = CASE WHEN $3 IN ('succeeded', 'skipped', 'failed') THEN now() END,
              state = CASE WHEN $6::jsonb IS NULL THEN state ELSE jsonb_set(state, '{memo}', $6::jsonb) END, updated_at = now()
        WHERE run_id = $1 AND idx = $2`,
      this.run.id, idx, stepStatusOf(result), message === null ? null : clip(message), result.kind === 'failed' ? result.code : null,
      memo === undefined ? null : JSON.stringify(memo));
  }

  /** Marks the steps not reached skipped (a run ending early). */
  async skipPending(db: RawDb): Promise<void> {
    await db.$executeRawUnsafe(`UPDATE workflow_step SET status = 'skipped', updated_at = now() WHERE run_id = $1 AND status = 'pending'`, this.run.id);
  }

  /** The run goes into its cleanup (an abort or a failure that undoes what was done). */
  async aborting(db: RawDb): Promise<void> {
    await this.fence(db);
    await db.$executeRawUnsafe(`UPDATE workflow_run SET status = 'aborting', updated_at = now(), version = version + 1 WHERE id = $1`, this.run.id);
  }

  /** Ends the run, fenced, in the caller's transaction (with the body's last rows). */
  async end(db: RawDb, end: RunEnd): Promise<void> {
    await this.fence(db);
    await this.skipPending(db);
    await db.$executeRawUnsafe(
      `UPDATE workflow_run SET status = $2, last_error_code = $3, last_error_message = $4, ${RUN_ENDED_SET} WHERE id = $1`,
      this.run.id, end.status, end.status === 'succeeded' ? null : end.code, end.status === 'succeeded' ? null : clip(end.message));
    this.ended = true;
  }

  get hasEnded(): boolean {
    return this.ended;
  }
}

export interface DetachedDeps {
  sql: Sql;
  /** What the bodies write with (Prisma): its raw face, and its interactive transactions. */
  db: RawDb & { $transaction<T>(fn: (tx: RawDb) => Promise<T>): Promise<T> };
  log?: Logger;
  leaseMs: number;
  /** How often a running body looks for an abort request. */
  abortPollMs?: number;
  defs: readonly DetachedDef[];
}

/**
 * The detached runs this process holds. advanceRun calls take() with a lease it took; the body
 * runs in the background (a slot of the due-run loop is not held for minutes), and stop() (the worker's
 * shutdown) stops every body and hands its run back at once.
 */
export class DetachedRuns {
  private readonly active = new Map<string, { lease: DetachedLease; done: Promise<void> }>();
  private readonly defs: Map<string, DetachedDef>;
  private stopping = false;

  constructor(private readonly deps: DetachedDeps) {
    this.defs = new Map(deps.defs.map((d) => [d.kind, d]));
  }

  /** Whether runs of `kind` are detached runs of this process (their bodies run here). */
  handles(kind: string): boolean {
    return this.defs.has(kind);
  }

  /**
   * A run advanceRun leased whose row joins no node: when it is one of ours, its body starts here
   * (true); false when the run is none of ours (its lease is left to lapse).
   */
  async take(runId: string, token: Date, lostResumes: number | null): Promise<boolean> {
    const { rows } = await this.deps.sql.query(
      'SELECT id, kind, params, resumes, abort_requested_at IS NOT NULL AS abort FROM workflow_run WHERE id = $1 AND lease_until = $2::timestamptz',
      [runId, token.toISOString()],
    );
    const row = rows[0];
    if (!row) return false;
    const def = this.defs.get(row.kind as string);
    if (!def) return false;
    const run: DetachedRunInfo = { id: runId, kind: def.kind, params: (row.params ?? {}) as Record<string, unknown>, resumes: Number(row.resumes) };
    const lease = new DetachedLease(this.deps.sql, run, token, this.deps.leaseMs, Boolean(row.abort));
    if (lostResumes !== null && lostResumes >= STUCK_RESUMES) {
      await this.deps.db.$transaction(async (tx) => {
        await def.lost(tx, run);
        await lease.end(tx, { status: 'failed', code: 'WORKER_LOST', message: `its worker died ${lostResumes + 1} times while it ran` });
      });
      this.deps.log?.error({ runId, kind: def.kind }, 'detached run failed: its worker was lost too often');
      return true;
    }
    if (lostResumes !== null) this.deps.log?.warn({ runId, kind: def.kind, resumes: lostResumes + 1 }, 'detached run taken up again: its worker died');
    if (this.stopping) {
      await this.release(lease);
      return true;
    }
    lease.start(this.deps.abortPollMs ?? 300);
    const done = this.runBody(def, lease).finally(() => {
      lease.stop('done');
      this.active.delete(runId);
    });
    this.active.set(runId, { lease, done });
    return true;
  }

  private async runBody(def: DetachedDef, lease: DetachedLease): Promise<void> {
    try {
      await def.run(lease);
      if (!lease.hasEnded && !lease.lost.aborted) throw new Error(`the body of ${def.kind} returned without ending its run`);
    } catch (error) {
      if (error instanceof LeaseLost || lease.lost.aborted) {
        this.deps.log?.warn({ runId: lease.run.id, kind: def.kind, reason: String(lease.lost.reason ?? '') }, 'detached run stopped in this worker');
        return;
      }
      // The lease is left to lapse: the sweep takes the run up again as a lost worker's, so a body
      // that keeps throwing ends WORKER_LOST after STUCK_RESUMES instead of looping.
      this.deps.log?.error({ err: error, runId: lease.run.id, kind: def.kind }, 'detached run threw');
    }
  }

  /**
   * Hands the run back (lease released) and wakes it (due now), so another worker takes it at once:
   * one statement (a wake-up on another connection would wait for this row's lock).
   */
  private async release(lease: DetachedLease): Promise<void> {
    // After any renewal in flight (it would change the token this compares with).
    await lease.serial(() => this.deps.db.$executeRawUnsafe(
      releaseLeaseSql('LEAST(due_at, now())'),
      lease.run.id, lease.tokenIso,
    )).catch((error: unknown) => this.deps.log?.warn({ err: error, runId: lease.run.id }, 'could not hand a detached run back'));
  }

  /** Waits for a run's body in this process to be over (tests; the preflight's answer). */
  async settled(runId: string): Promise<void> {
    await this.active.get(runId)?.done;
  }

  /**
   * Stops every body (their SSH sessions follow the lease's signal) and hands their runs back. A
   * body still busy after STOP_WAIT_MS is not waited for: its run is handed back all the same, and
   * its fenced writes fail from then on.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    const all = [...this.active.values()];
    for (const taken of all) taken.lease.stop('this process is stopping');
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled(all.map((taken) => taken.done)),
      new Promise((resolve) => { timer = setTimeout(resolve, STOP_WAIT_MS); }),
    ]);
    clearTimeout(timer);
    for (const taken of all) if (!taken.lease.hasEnded) await this.release(taken.lease);
  }
}
