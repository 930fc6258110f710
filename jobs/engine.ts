import type { Logger } from 'pino';
import type { Sql } from '../src/db/sql';
import { setTimeout as sleep } from 'node:timers/promises';
import { AppError } from '../src/errors';
import { databaseFailure } from '../src/db/failure';
import type { WorkflowKind } from '../src/modules/metal/states';
import { wakeRun } from './wake';
import type { WorkflowDef } from './engine-types';
import { newObservations, type DomainCounters, type EngineObservations } from '../src/ops/metrics';
import type { DetachedRuns } from './engine-detached';
import { BUSY_RETRY_MS, LEASE_MS, LeaseLost, releaseLeaseSql, takeLease, type Lease } from './engine-lease';
import { clip, fromLoadRow, loadManyStatement, loadStatement, type Base } from './engine-rows';
import { BodyThrew, stepLoaded, stepOnce, type Injected, type Step } from './engine-step';
import { isWorkflowKind } from '../src/modules/metal/states';

export { BUSY_RETRY_MS, LEASE_MS, LEASE_SET, type Lease } from './engine-lease';
export { sweepRuns } from './engine-sweep';

/**
 * The workflow engine (issue 9 item 1): `advanceRun(runId)` advances one run (the fetch loops of
 * jobs/due-runs.ts take due runs with their lease and call advanceLeased). It takes the run's lease, then runs one step at a time, each in one transaction that locks the node
 * and the run, marks the step started (attempts, idempotency key, message cleared) before its body
 * queues anything, runs the body, and records the body's StepResult with its events and the run's
 * next due time (workflow_run.due_at: a wait's end, a retry's). Everything the engine knows is in workflow_run / workflow_step,
 * so a worker killed at any point leaves rows the next one carries on from: a commit not made is
 * a step not started, and a step started is found again by its key.
 *
 * Leases: `lease_until` is both the lease and its fencing token (a step transaction whose token
 * is no longer the row's aborts). lease_until is a timestamptz(3), so the token, which travels as
 * a JS Date (milliseconds), compares equal in SQL (`lease_until = $2`). Taking the lease sets due_at to the lease's end, so a
 * worker that dies leaves its run due when the lease runs out. A wake-up that arrives while a worker
 * holds the run sets due_at earlier than that (jobs/wake.ts); the step's commit keeps it (due_at is
 * then no longer the lease's end), so the run is fetched again once the lease is released and never
 * loses a wake-up. A lease found expired
 * means its worker died mid-step: the run is taken up again (resumes + 1) until STUCK_RESUMES,
 * then fails WORKER_LOST.
 *
 * The engine's parts: engine-lease.ts (taking a run's lease), engine-rows.ts (a step transaction's
 * load and flush), engine-step.ts (the step logic), engine-cleanup.ts (a run's failure, cleanup and
 * end), engine-step-state.ts (a step's start, end and wait in memory, which both of those use),
 * engine-sweep.ts (the safety net for runs a writer forgot to wake).
 */

export interface EngineDeps {
  sql: Sql;
  log?: Logger;
  leaseMs?: number;
  commandTtlMs?: number;
  random?: () => number;
  /** Steps one advance runs before it yields the run back to the queue. */
  maxStepsPerAdvance?: number;
  /** The definitions (tests give their own); default jobs/workflows. */
  workflows?: Readonly<Partial<Record<WorkflowKind, WorkflowDef>>>;
  /** The process's metrics: runs started and ended, step durations, commands expired (after each commit). */
  metrics?: DomainCounters | null;
  /** Runs not tied to a node (the fabric's): a leased run whose row joins no node is handed to these (engine-detached.ts). */
  detached?: DetachedRuns | null;
}

export type AdvanceOutcome =
  | { kind: 'busy'; retryInMs: number }
  | { kind: 'idle'; status: string }
  | { kind: 'waiting'; until: Date | null; for: string }
  | { kind: 'finished'; status: 'succeeded' | 'failed' | 'aborted' | 'superseded' };

/** How long a hand-back the database refuses (a failover, a dropped connection) is tried again. */
const HAND_BACK_TRY_MS = 15_000;

/**
 * Hands a run whose step failed back, due shortly (200 ms). The step's failure is often the
 * database's (a failover, connections dropped): then the hand-back is tried again with growing
 * pauses for up to HAND_BACK_TRY_MS, since a run left with its lease waits out the whole lease
 * (a minute) before another worker takes it up as a dead worker's. A hand-back that finds the lease
 * gone (another worker has the run) is done.
 */
async function handBack(deps: EngineDeps, runId: string, token: Date): Promise<void> {
  const until = Date.now() + HAND_BACK_TRY_MS;
  for (let attempt = 0; ; attempt += 1) {
    try {
      await deps.sql.query(releaseLeaseSql(`LEAST(due_at, now() + interval '200 milliseconds')`), [runId, token]);
      return;
    } catch (error) {
      if (!databaseFailure(error) || Date.now() >= until) {
        deps.log?.warn({ err: error, runId }, 'could not hand the run back; it is taken up again when its lease runs out');
        return;
      }
      await sleep(Math.min(250 * 2 ** attempt, 2000));
    }
  }
}

/** A detached run taken: its body runs in this worker's background under the lease. */
const DETACHED: AdvanceOutcome = { kind: 'waiting', until: null, for: 'its body, running in this worker (a detached run)' };

/**
 * Advances one run as far as it can go now. Safe to call any number of times, from any number
 * of workers at once: one holds the lease; the others wake the run, which is then fetched again
 * once the lease is released (its due_at is earlier than the lease's end: see jobs/wake.ts).
 */
export async function advanceRun(deps: EngineDeps, runId: string): Promise<AdvanceOutcome> {
  const leaseMs = deps.leaseMs ?? LEASE_MS;
  const lease = await takeLease(deps.sql, runId, leaseMs);
  if (!lease.taken) {
    if (lease.outcome.kind === 'busy') await wakeRun(deps.sql, runId);
    return lease.outcome;
  }
  return advanceLeased(deps, runId, lease);
}

/** Advances a run whose lease the caller took (advanceRun, or the fetch of due runs). */
export async function advanceLeased(deps: EngineDeps, runId: string, lease: Lease & { kind?: string }, alreadyUsed = 0): Promise<AdvanceOutcome> {
  // A detached run (the fabric's) whose kind the fetch returned goes to its own path at once,
  // without first trying it as a metal run (a step transaction that finds no node).
  if (lease.kind !== undefined && deps.detached?.handles(lease.kind)
    && await deps.detached.take(runId, lease.leaseUntil, lease.workerLost ? lease.previousResumes : null)) {
    return DETACHED;
  }
  let token = lease.leaseUntil;
  let lostResumes: number | null = lease.workerLost ? lease.previousResumes : null;
  const takenLost = lostResumes;
  const budget = deps.maxStepsPerAdvance ?? 25;
  let injected: Injected | null = null;
  let throws = 0;
  try {
    for (let used = alreadyUsed; used < budget;) {
      let next: { step: Step; steps: number };
      // What this transaction does, counted only once it committed.
      const observed = newObservations();
      try {
        const pending = injected;
        // Generic plans: the step's statements look rows up by key; their plans do not depend on the values.
        // The load goes with the BEGIN (one round trip): see engine-rows.ts loadStatement.
        next = await deps.sql.transaction((tx, first) => stepOnce(deps, tx, runId, token, lostResumes, pending, budget - used, observed, first),
          { genericPlans: true, first: loadStatement(runId) });
        deps.metrics?.engine(observed);
      } catch (error) {
        // A body that throws (a bug, a bad row) leaves nothing of its transaction: it is rolled
        // back whole, and the next transaction records the throw as a retryable failure of that
        // step's attempt instead of running its body again.
        if (!(error instanceof BodyThrew) || throws >= 3) throw error;
        throws += 1;
        deps.log?.error({ err: error.thrown, runId, step: error.stepName }, 'workflow step threw');
        injected = { idx: error.idx, result: { kind: 'failed', code: 'STEP_ERROR', message: `the step threw: ${clip((error.thrown as Error)?.message ?? String(error.thrown))}`, retryable: true } };
        continue;
      }
      injected = null;
      lostResumes = null;
      used += next.steps;
      // A run whose row joins no node: a detached run (the fabric's), whose body runs in the background under this lease.
      if (used === alreadyUsed + next.steps && next.step.kind === 'stop' && next.step.outcome.kind === 'idle' && next.step.outcome.status === 'missing' && deps.detached
        && await deps.detached.take(runId, token, takenLost)) {
        return DETACHED;
      }
      if (next.step.kind === 'next') {
        token = next.step.leaseUntil;
        continue;
      }
      return next.step.outcome;
    }
    // A long run yields between budgets (due again now, behind the runs due before it), so one run never starves the others.
    await deps.sql.query(releaseLeaseSql('now()'), [runId, token]);
    return { kind: 'waiting', until: null, for: 'its next turn (one advance runs at most a budget of steps)' };
  } catch (error) {
    if (error instanceof LeaseLost) return { kind: 'busy', retryInMs: BUSY_RETRY_MS };
    // Leave the run to be taken up again shortly rather than after the lease: a deadlock lost
    // to a verb's write is a retry, anything else is logged and retried the same way.
    await handBack(deps, runId, token);
    if (error instanceof AppError && error.code === 'CONFLICT') return { kind: 'busy', retryInMs: 200 };
    throw error;
  }
}

/**
 * The most runs one step transaction advances together (advanceLeasedBatch): as many as a fetch
 * hands out (workers.ts ADVANCE_CONCURRENCY), so a fetch is one step transaction. With 8, a fetch
 * of a dozen runs was two or three transactions, each with its BEGIN, load, COMMIT and WAL flush:
 * the lifecycle bench, alternating in the same minutes, measured PostgreSQL at 2.01 ms per step
 * against 2.45 (service 2.20 against 2.33; 16 gave 2.24 against 2.57), commits 22,800 against
 * 24,800 per 1,000 machines, no rollback or deadlock either way. The load locks the batch's
 * nodes and runs in node id order, so a larger batch waits longer for a verb on one of them, but
 * cannot deadlock with another batch.
 */
export const BATCH_RUNS = 32;

/**
 * Advances several leased runs (a fetch's, jobs/due-runs.ts) by one step transaction for all of
 * them: one load that locks their nodes and runs (in node id order), each run's step logic as
 * advanceLeased runs it, and every run's flush sent with the one COMMIT. The transaction's fixed
 * costs (its round trips, the commit's WAL flush, the load's and the BEGIN's statements) are paid
 * once for up to BATCH_RUNS runs instead of once each: in the lifecycle bench a fetch hands out
 * about a dozen runs at a time.
 *
 * Nothing of it is kept unless all of it commits: when any run's step throws, or the commit is
 * refused (a flush's check, a deadlock, the database away), the transaction is rolled back whole
 * and each run is advanced alone (advanceLeased), exactly as without batching; so is a run the
 * load did not find. A run whose lease another worker took meanwhile is left untouched (busy), as
 * advanceLeased leaves it. Only metal workflow runs are batched: a detached run goes to its own path. A run whose step goes on in a transaction of
 * its own (`next`) continues alone, with the steps the batch ran counted in its budget.
 *
 * Returns one outcome per run, in the order given.
 */
export function advanceLeasedBatch(deps: EngineDeps, runs: readonly (Lease & { runId: string; kind: string })[]): Promise<AdvanceOutcome>[] {
  const batchable = runs.filter((run) => isWorkflowKind(run.kind) && !deps.detached?.handles(run.kind));
  const alone = (run: Lease & { runId: string }) => advanceLeased(deps, run.runId, run);
  if (batchable.length < 2) return runs.map(alone);
  const budget = deps.maxStepsPerAdvance ?? 25;
  type Stepped = { step: Step; steps: number; observed: EngineObservations };
  const batch: Promise<Map<string, Stepped> | null> = deps.sql.transaction(async (tx, first) => {
    const stepped = new Map<string, Stepped>();
    const byId = new Map(batchable.map((run) => [run.runId, run]));
    // In the load's order (node ids): each run's statements (a run's end, its steps' creation) then run in that order too.
    for (const row of first!.rows as Record<string, unknown>[]) {
      const runRow = row['run.row'] as { id: string };
      const run = byId.get(runRow.id)!;
      const observed = newObservations();
      let base: Base;
      try {
        base = fromLoadRow(deps, tx, row, run.leaseUntil);
      } catch (error) {
        // Another worker holds this run now (its lease was taken up as a dead worker's): left as it is, the others go on.
        if (!(error instanceof LeaseLost)) throw error;
        stepped.set(run.runId, { step: { kind: 'stop', outcome: { kind: 'busy', retryInMs: BUSY_RETRY_MS } }, steps: 1, observed });
        continue;
      }
      const next = await stepLoaded(base, run.workerLost ? run.previousResumes : null, null, budget, observed);
      stepped.set(run.runId, { ...next, observed });
    }
    return stepped;
  }, { genericPlans: true, first: loadManyStatement(batchable.map((run) => run.runId)) }).catch((error: unknown) => {
    // Rolled back whole: each run is advanced alone, which meets the same error (and handles it) if it was that run's.
    deps.log?.debug({ err: error, runs: batchable.length }, 'a step transaction of several runs was rolled back; advancing each alone');
    return null;
  });
  return runs.map(async (run) => {
    // A run left out of the batch (a detached one) does not wait for it.
    const stepped = batchable.includes(run) ? (await batch)?.get(run.runId) : undefined;
    if (!stepped) return alone(run);
    deps.metrics?.engine(stepped.observed);
    if (stepped.step.kind === 'next') {
      return advanceLeased(deps, run.runId, { leaseUntil: stepped.step.leaseUntil, workerLost: false, previousResumes: 0 }, stepped.steps);
    }
    return stepped.step.outcome;
  });
}
