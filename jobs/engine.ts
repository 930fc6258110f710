import type { Logger } from 'pino';
import type { Sql, SqlTx } from '../src/db/sql';
import { AppError } from '../src/errors';
import { newId } from '../src/ids';
import { checkEventPayload } from '../src/events/outbox';
import { updateNode, type NodeEvent } from '../src/modules/metal/node-store';
import { nodeViewColumns, toNodeRow, type NodeRow } from '../src/modules/metal/node-rows';
import { readPolicy, type PoolPolicy } from '../src/modules/tenancy/pool';
import { reportsOf } from '../src/modules/boot/entries';
import {
  ACTIVE_RUN_STATUSES, decideWorkflowMove, isWorkflowKind, STUCK_RESUMES, WAITS, WORKFLOW_CHAINS, WORKFLOW_KINDS,
  type ProvisionState, type WorkflowKind, type WorkflowOutcome,
} from '../src/modules/metal/states';
import { wakeRun } from './wake';
import { retryDelayMs, type StepResult } from './steps';
import { buildContext, STEP_COMMAND_TTL_MS } from './engine-context';
import { StepInterrupt, type RunInfo, type RunParams, type StepDef, type WorkflowDef } from './engine-types';
import type { CommandRow } from '../src/modules/sites/commands';
import { WORKFLOWS } from './workflows';
import { newObservations, type DomainCounters, type EngineObservations } from '../src/ops/metrics';
import type { DetachedRuns } from './engine-detached';

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
 */

export const LEASE_MS = 60_000;
/** What advanceRun answers when it found the run's lease held (the run is then woken: due once it is released). */
export const BUSY_RETRY_MS = 1_000;
/** A cleanup waits at most this long (its command's expiry usually ends it sooner). */
const CLEANUP_DEADLINE_MS = 15 * 60 * 1000;
const DEFAULT_ATTEMPTS = 3;
const DEFAULT_DEADLINE_S = 3600;
const MAX_MESSAGE = 1000;

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

interface RunRow {
  id: string;
  nodeId: string;
  kind: string;
  status: string;
  params: RunParams;
  stepIndex: number;
  resumes: number;
  leaseUntil: Date | null;
  waitUntil: Date | null;
  abortRequestedAt: Date | null;
  lastErrorCode: string | null;
  lastErrorMessage: string | null;
  batchId: string | null;
}

interface StepRow {
  idx: number;
  name: string;
  title: string;
  cleanup: boolean;
  destructive: boolean;
  status: string;
  attempts: number;
  idempotencyKey: string | null;
  state: StepState;
  message: string | null;
  errorCode: string | null;
  startedAt: Date | null;
  finishedAt: Date | null;
}

/** What the engine keeps in workflow_step.state: its timers, and the body's memo. */
interface StepState {
  deadline?: string;
  /** A retry after a recorded failure is due then (a new attempt). */
  retryAt?: string;
  /** A `continue` result: run the body again then. */
  notBefore?: string;
  /** A cleanup row: the index of the step it cleans up after. */
  cleanupOf?: number;
  memo?: Record<string, unknown>;
}

const ACTIVE: readonly string[] = ACTIVE_RUN_STATUSES;

class LeaseLost extends Error {
  constructor(runId: string) {
    super(`run ${runId}: another worker took its lease`);
  }
}

const clip = (text: string) => (text.length > MAX_MESSAGE ? `${text.slice(0, MAX_MESSAGE - 1)}…` : text);

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
async function takeLease(sql: Sql, runId: string, leaseMs: number): Promise<
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
export async function advanceLeased(deps: EngineDeps, runId: string, lease: Lease): Promise<AdvanceOutcome> {
  let token = lease.leaseUntil;
  let lostResumes: number | null = lease.workerLost ? lease.previousResumes : null;
  const takenLost = lostResumes;
  const budget = deps.maxStepsPerAdvance ?? 25;
  let injected: Injected | null = null;
  let throws = 0;
  try {
    for (let used = 0; used < budget;) {
      let next: { step: Step; steps: number };
      // What this transaction does, counted only once it committed.
      const observed = newObservations();
      try {
        const pending = injected;
        // Generic plans: the step's statements look rows up by key; their plans do not depend on the values.
        next = await deps.sql.transaction((tx) => stepOnce(deps, tx, runId, token, lostResumes, pending, budget - used, observed), { genericPlans: true });
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
      if (used === next.steps && next.step.kind === 'stop' && next.step.outcome.kind === 'idle' && next.step.outcome.status === 'missing' && deps.detached
        && await deps.detached.take(runId, token, takenLost)) {
        return { kind: 'waiting', until: null, for: 'its body, running in this worker (a detached run)' };
      }
      if (next.step.kind === 'next') {
        token = next.step.leaseUntil;
        continue;
      }
      return next.step.outcome;
    }
    // A long run yields between budgets (due again now, behind the runs due before it), so one run never starves the others.
    await deps.sql.query('UPDATE workflow_run SET lease_until = NULL, due_at = now() WHERE id = $1 AND lease_until = $2', [runId, token]);
    return { kind: 'waiting', until: null, for: 'its next turn (one advance runs at most a budget of steps)' };
  } catch (error) {
    if (error instanceof LeaseLost) return { kind: 'busy', retryInMs: BUSY_RETRY_MS };
    // Leave the run to be taken up again shortly rather than after the lease: a deadlock lost
    // to a verb's write is a retry, anything else is logged and retried the same way.
    await deps.sql.query(
      `UPDATE workflow_run SET lease_until = NULL, due_at = LEAST(due_at, now() + interval '200 milliseconds') WHERE id = $1 AND lease_until = $2`,
      [runId, token],
    ).catch(() => undefined);
    if (error instanceof AppError && error.code === 'CONFLICT') return { kind: 'busy', retryInMs: 200 };
    throw error;
  }
}

/**
 * `next`: the run goes on now. `sameTx`: the step's end and the next step's start are in memory,
 * consistent with the rows as they will be written, so the next step runs in the same transaction;
 * otherwise (the cleanup rows were just laid out by SQL) a new transaction reads them.
 */
type Step = { kind: 'next'; leaseUntil: Date; sameTx: boolean } | { kind: 'stop'; outcome: AdvanceOutcome };

/** A throw of a step body, recorded by the next transaction (see advanceRun). */
interface Injected { idx: number; result: StepResult }

class BodyThrew extends Error {
  constructor(readonly idx: number, readonly stepName: string, readonly thrown: unknown) {
    super(`workflow step ${stepName} threw`);
  }
}

/** The run's columns a step transaction changes, written once at its end (flush). */
interface RunWrite {
  stepIndex?: number;
  status: 'running' | 'waiting';
  waitUntil: Date | null;
  waitingFor: string | null;
  leaseUntil: Date | null;
}

interface Loaded {
  tx: SqlTx;
  deps: EngineDeps;
  run: RunRow;
  info: RunInfo;
  def: WorkflowDef | undefined;
  node: NodeRow;
  pool: { id: string; policy: PoolPolicy };
  steps: StepRow[];
  now: Date;
  /** Events the step's transaction publishes, in order (one statement at the end). */
  events: { type: string; payload: Record<string, unknown> }[];
  leaseMs: number;
  /** The attempt a step started in this transaction (written with the run's next update). */
  attempt?: number;
  /** Step rows changed in memory since the last flush. */
  dirty: Set<StepRow>;
  /** The run's pending update (the last step's end: waiting, or running the next step). */
  runWrite: RunWrite | null;
  injected: Injected | null;
  /** What the transaction did, for the metrics once it committed (advanceRun). */
  observed: EngineObservations;
  /**
   * The commands of the run's current step as the load read them, by idempotency key: a body
   * that runs again (woken by a result) finds the ones it queued before without a statement each.
   * A result recorded after the load shows at the next wake-up, which that result queued.
   */
  commands: Map<string, CommandRow>;
}

/** A timestamp as a row (Date) or as to_jsonb gives it (ISO text, milliseconds: timestamptz(3)). */
const dateOf = (v: unknown): Date | null => (v == null ? null : v instanceof Date ? v : new Date(v as string));

function toRun(r: Record<string, unknown>): RunRow {
  return {
    id: r.id as string, nodeId: r.node_id as string, kind: r.kind as string, status: r.status as string,
    params: (r.params ?? {}) as RunParams, stepIndex: Number(r.step_index), resumes: Number(r.resumes),
    leaseUntil: dateOf(r.lease_until), waitUntil: dateOf(r.wait_until),
    abortRequestedAt: dateOf(r.abort_requested_at),
    lastErrorCode: (r.last_error_code ?? null) as string | null, lastErrorMessage: (r.last_error_message ?? null) as string | null,
    batchId: (r.batch_id ?? null) as string | null,
  };
}

function toStep(r: Record<string, unknown>): StepRow {
  return {
    idx: Number(r.idx), name: r.name as string, title: r.title as string, cleanup: Boolean(r.cleanup), destructive: Boolean(r.destructive),
    status: r.status as string, attempts: Number(r.attempts), idempotencyKey: (r.idempotency_key ?? null) as string | null,
    state: (r.state ?? {}) as StepState, message: (r.message ?? null) as string | null, errorCode: (r.error_code ?? null) as string | null,
    startedAt: dateOf(r.started_at), finishedAt: dateOf(r.finished_at),
  };
}

/**
 * The node, its pool's policy, the run and its steps, in one statement that locks the node and the
 * run (node first, then run: FOR UPDATE OF locks in the order it names them, the order the node
 * store's statements lock them in, so no deadlock with a verb). The steps are read in the same
 * statement: only a worker holding the run's lease writes them, and the lease is checked here.
 */
async function load(deps: EngineDeps, tx: SqlTx, runId: string, token: Date): Promise<Omit<Loaded, 'def' | 'info' | 'injected' | 'observed'> | null> {
  const { rows } = await tx.query(
    `SELECT ${nodeViewColumns('n')}, p.policy AS "pool.policy", now() AS "db.now", to_jsonb(w) AS "run.row",
            (SELECT COALESCE(jsonb_agg(to_jsonb(s) ORDER BY s.idx), '[]'::jsonb) FROM workflow_step s WHERE s.run_id = w.id) AS "run.steps",
            (SELECT COALESCE(jsonb_agg(jsonb_build_object('id', c.id, 'kind', c.kind, 'status', c.status, 'result', c.result,
                                                          'expiresAt', c.expires_at, 'key', c.idempotency_key)), '[]'::jsonb)
               FROM command c WHERE c.run_id = w.id AND c.step_idx = w.step_index) AS "run.commands"
       FROM workflow_run w JOIN node n ON n.id = w.node_id LEFT JOIN hardware_profile hp ON hp.id = n.hardware_profile_id JOIN pool p ON p.id = n.pool_id
      WHERE w.id = $1
      FOR UPDATE OF n, w`,
    [runId],
  );
  const row = rows[0];
  if (!row) return null;
  const run = toRun(row['run.row'] as Record<string, unknown>);
  if (run.leaseUntil?.getTime() !== token.getTime()) throw new LeaseLost(runId);
  const node = toNodeRow(row);
  return {
    tx, deps, run, node, pool: { id: node.poolId, policy: readPolicy(row['pool.policy']) },
    steps: (row['run.steps'] as Record<string, unknown>[]).map(toStep),
    commands: new Map((row['run.commands'] as { id: string; kind: string; status: CommandRow['status']; result: CommandRow['result']; expiresAt: string; key: string }[])
      .map((c) => [c.key, { id: c.id, kind: c.kind, status: c.status, result: c.result, expiresAt: new Date(c.expiresAt) }])),
    now: row['db.now'] as Date, events: [], leaseMs: deps.leaseMs ?? LEASE_MS,
    dirty: new Set(), runWrite: null,
  };
}

/**
 * Steps of the run, in the caller's transaction: one, and the ones after it while each ends by
 * going on to the next (up to `budget`), so a step that completes and the next one's start (its
 * commands queued, its wait) commit together. Everything is written at the end (flush).
 */
async function stepOnce(deps: EngineDeps, tx: SqlTx, runId: string, token: Date, lostResumes: number | null,
  injected: Injected | null, budget: number, observed: EngineObservations = newObservations()): Promise<{ step: Step; steps: number }> {
  const base = await load(deps, tx, runId, token);
  if (!base) return { step: { kind: 'stop', outcome: { kind: 'idle', status: 'missing' } }, steps: 1 };
  const { run } = base;
  if (!ACTIVE.includes(run.status)) return { step: { kind: 'stop', outcome: { kind: 'idle', status: run.status } }, steps: 1 };
  const kind = run.kind;
  const def = isWorkflowKind(kind) ? (deps.workflows ?? WORKFLOWS)[kind] : undefined;
  const info: RunInfo = { id: run.id, kind: kind as WorkflowKind, params: run.params, batchId: run.batchId };
  const l: Loaded = { ...base, def, info, injected, observed };
  let steps = 0;
  let result: Step;
  for (;;) {
    result = await dispatch(l, lostResumes);
    lostResumes = null;
    steps += 1;
    if (result.kind !== 'next' || !result.sameTx || steps >= budget) break;
  }
  await flush(l);
  return { step: result, steps };
}

async function dispatch(l: Loaded, lostResumes: number | null): Promise<Step> {
  const { run, def } = l;
  if (run.status === 'aborting') {
    if (lostResumes !== null && lostResumes >= STUCK_RESUMES) return endCleanup(l, 'its worker died repeatedly during cleanup; the remaining cleanup was skipped');
    return cleanupOnce(l);
  }
  if (!isWorkflowKind(run.kind) || !def) {
    return failRun(l, { kind: 'failed', code: 'UNSUPPORTED', message: `no workflow is defined for ${run.kind}` });
  }
  const kind = run.kind;
  if (l.steps.length === 0) await createSteps(l, def);
  const state = l.node.provisionState as ProvisionState;
  if (state !== WORKFLOW_KINDS[kind].state) return endRun(l, 'superseded');
  if (lostResumes !== null) {
    const decision = decideWorkflowMove(kind, state, { kind: 'worker-lost', resumes: lostResumes });
    if (decision.action === 'fail') return failRun(l, { kind: 'failed', code: decision.code, message: decision.message });
    l.deps.log?.warn({ runId: run.id, kind, resumes: lostResumes + 1 }, 'workflow run taken up again: its worker died mid-step');
  }
  const step = l.steps.find((s) => !s.cleanup && s.idx === run.stepIndex);
  if (!step) return finishSuccess(l, def);
  const stepDef = def.steps[step.idx];
  if (!stepDef) return failRun(l, { kind: 'failed', code: 'INTERNAL', message: `step ${step.idx} (${step.name}) is not in the definition of ${kind}` });
  const due = timerDue(l, step);
  if (due) return due;
  if (step.status === 'pending' || step.state.retryAt) startStep(l, step, deadlineOf(l, kind, stepDef));
  const result = await runBody(l, step, stepDef.run);
  return applyResult(l, step, stepDef, result.result, result.notes, result.unverified);
}

/** A step whose retry delay or `continue` delay has not passed yet: an early wake-up changes nothing. */
function timerDue(l: Loaded, step: StepRow): Step | null {
  const at = step.state.retryAt ?? step.state.notBefore;
  if (!at || new Date(at) <= l.now) return null;
  return stopWaiting(l, new Date(at), step.state.retryAt ? `a retry of "${step.title}"` : `"${step.title}" to go on`);
}

function deadlineOf(l: Loaded, kind: WorkflowKind, stepDef: StepDef): Date {
  const seconds = stepDef.deadlineSeconds ?? WAITS[kind]?.deadlineSeconds ?? DEFAULT_DEADLINE_S;
  return new Date(l.now.getTime() + seconds * 1000);
}

async function createSteps(l: Loaded, def: WorkflowDef): Promise<void> {
  const titles = def.steps.map((s) => (typeof s.title === 'function' ? s.title(l.info) : s.title));
  const { rows } = await l.tx.query(
    `INSERT INTO workflow_step (run_id, idx, name, title, destructive)
     SELECT $1, s.idx - 1, s.name, s.title, s.destructive FROM unnest($2::text[], $3::text[], $4::boolean[]) WITH ORDINALITY AS s(name, title, destructive, idx)
     RETURNING *`,
    [l.run.id, def.steps.map((s) => s.name), titles, def.steps.map((s) => Boolean(s.destructive))],
  );
  l.steps = rows.map(toStep).sort((a, b) => a.idx - b.idx);
  l.observed.started.push(l.run.kind);
  // A run the node store superseded is never advanced again: what it left queued must not run
  // after this one starts (a power-off of the old run arriving in the middle of the new one).
  await l.tx.query(
    `UPDATE command SET status = 'expired', result = $3::jsonb, updated_at = now()
      WHERE node_id = $1 AND run_id IS NOT NULL AND run_id <> $2 AND status = 'queued'`,
    [l.node.id, l.run.id, JSON.stringify({ ok: false, code: 'EXPIRED', message: 'withdrawn: a newer workflow run of the node started', retryable: false })],
  );
}

function stepEvent(l: Loaded, step: StepRow, status: string, message: string | null, errorCode: string | null = null): void {
  l.events.push({
    type: 'workflow.step',
    payload: {
      workflowId: l.run.id, kind: l.run.kind, idx: step.idx, step: step.name, title: step.title, cleanup: step.cleanup,
      status, attempt: step.attempts, message, ...(errorCode ? { errorCode } : {}),
    },
  });
}

/**
 * Marks the step started: attempts + 1, its idempotency key, a fresh deadline, and the previous
 * failure's message cleared (an operator never reads a stale error while the retry runs). The
 * body runs after this in the same transaction, so nothing it queues can exist without it.
 */
function startStep(l: Loaded, step: StepRow, deadline: Date): void {
  step.attempts += 1;
  step.status = 'running';
  step.idempotencyKey = `${l.run.id}:${step.idx}:${step.attempts}`;
  step.state = { deadline: deadline.toISOString(), ...(step.state.cleanupOf !== undefined ? { cleanupOf: step.state.cleanupOf } : {}) };
  step.message = null;
  step.errorCode = null;
  step.startedAt = l.now;
  step.finishedAt = null;
  // Written with the step's end, in this transaction (flush): before anything the body queues can be seen.
  l.dirty.add(step);
  // The run's `attempt` follows in the statement that ends this step's transaction (stopWaiting).
  l.attempt = step.attempts;
  stepEvent(l, step, 'running', null);
}

async function runBody(l: Loaded, step: StepRow, body: StepDef['run']): Promise<{ result: StepResult; notes: string[]; unverified: string[] }> {
  const memo = { ...(step.state.memo ?? {}) };
  const { ctx, notes, unverified } = buildContext({
    db: l.tx, run: l.info, node: l.node, pool: l.pool, now: l.now, memo, commandTtlMs: l.deps.commandTtlMs ?? STEP_COMMAND_TTL_MS, known: l.commands,
    onExpired: (kind) => l.observed.commands.push({ kind, outcome: 'expired', code: 'EXPIRED' }),
    step: {
      idx: step.idx, name: step.name, title: step.title, attempt: step.attempts, key: step.idempotencyKey!,
      startedAt: step.startedAt ?? l.now, deadline: new Date(step.state.deadline ?? l.now.getTime() + DEFAULT_DEADLINE_S * 1000),
    },
  });
  // A throw of the body the last transaction rolled back: its failure, instead of the body.
  if (l.injected && l.injected.idx === step.idx) {
    const { result } = l.injected;
    l.injected = null;
    return { result, notes: [], unverified: [] };
  }
  let result: StepResult;
  try {
    result = await body(ctx);
  } catch (error) {
    if (error instanceof StepInterrupt) result = error.result;
    // A body that throws (a bug, a bad row) must not leave half its writes: the whole transaction
    // is rolled back, and advanceRun records the throw in the next one (nothing of the body
    // stays: not its node write, not its memo).
    else throw new BodyThrew(step.idx, step.name, error);
  }
  l.node = ctx.node;
  step.state = { ...step.state, memo };
  return { result, notes, unverified };
}

/**
 * A done step's status: skipped, else succeeded, unless a command it ran ended unverified (sent and
 * accepted, but the BMC shows nothing that proves the effect): then `unverified`, and the
 * workflow's next wait (the ramdisk's call, the installer's report) is the proof.
 */
const doneStatus = (kind: 'complete' | 'skipped', unverified: readonly string[]): string =>
  kind === 'skipped' ? 'skipped' : unverified.length ? 'unverified' : 'succeeded';

const withNotes = (message: string | undefined | null, notes: string[]) => {
  const all = [message, ...notes].filter((x): x is string => Boolean(x));
  return all.length ? clip(all.join('; ')) : null;
};

/** The step's row as it is now in memory, written at the flush. */
function saveStep(l: Loaded, step: StepRow, finished: boolean): void {
  step.finishedAt = finished ? l.now : null;
  l.dirty.add(step);
  if (finished && step.startedAt) {
    l.observed.steps.push({ kind: l.run.kind, step: step.name, outcome: step.status, seconds: (l.now.getTime() - step.startedAt.getTime()) / 1000 });
  }
}

/**
 * Ends the transaction's work with the run waiting (lease released), due at the wait's end (the
 * flush writes due_at = until, or keeps an earlier wake-up that arrived while the run was leased).
 */
function stopWaiting(l: Loaded, until: Date, waitingFor: string): Step {
  l.runWrite = { ...l.runWrite, status: 'waiting', waitUntil: until, waitingFor: clip(waitingFor), leaseUntil: null };
  if (l.run.status !== 'aborting') l.run.status = 'waiting';
  l.run.waitUntil = until;
  l.run.leaseUntil = null;
  return { kind: 'stop', outcome: { kind: 'waiting', until, for: waitingFor } };
}

/** The run goes on with step `stepIndex`, in this transaction: the lease renewed from the transaction's clock. */
function nextStep(l: Loaded, stepIndex: number): Step {
  const leaseUntil = new Date(l.now.getTime() + l.leaseMs);
  l.runWrite = { stepIndex, status: 'running', waitUntil: null, waitingFor: null, leaseUntil };
  l.attempt = 0;
  l.run.stepIndex = stepIndex;
  if (l.run.status !== 'aborting') l.run.status = 'running';
  l.run.waitUntil = null;
  l.run.leaseUntil = leaseUntil;
  return { kind: 'next', leaseUntil, sameTx: true };
}

async function applyResult(l: Loaded, step: StepRow, stepDef: StepDef, result: StepResult, notes: string[], unverified: string[] = []): Promise<Step> {
  const deadline = new Date(step.state.deadline ?? l.now);
  switch (result.kind) {
    case 'complete':
    case 'skipped': {
      step.status = doneStatus(result.kind, unverified);
      step.message = withNotes(result.message, notes);
      step.errorCode = null;
      step.state = { ...step.state, retryAt: undefined, notBefore: undefined };
      saveStep(l, step, true);
      stepEvent(l, step, step.status, step.message);
      return nextStep(l, step.idx + 1);
    }
    case 'continue': {
      const at = new Date(l.now.getTime() + result.afterMs);
      step.status = 'waiting';
      step.message = withNotes(result.message, notes);
      step.state = { ...step.state, notBefore: at.toISOString() };
      saveStep(l, step, false);
      stepEvent(l, step, 'waiting', step.message);
      return stopWaiting(l, at, `"${step.title}" to go on`);
    }
    case 'wait': {
      if (l.now >= deadline) {
        step.status = 'failed';
        step.errorCode = 'CALLBACK_TIMEOUT';
        step.message = clip(`gave up waiting for ${result.for}`);
        saveStep(l, step, true);
        stepEvent(l, step, 'failed', step.message, step.errorCode);
        return failRun(l, { kind: 'deadline-passed' });
      }
      const until = result.until < deadline ? result.until : deadline;
      const message = withNotes(`waiting for ${result.for}`, notes);
      const changed = step.status !== 'waiting' || step.message !== message;
      step.status = 'waiting';
      step.message = message;
      step.state = { ...step.state, notBefore: undefined };
      saveStep(l, step, false);
      if (changed) stepEvent(l, step, 'waiting', step.message);
      return stopWaiting(l, until, result.for);
    }
    case 'failed': {
      const attempts = stepDef.retry?.attempts ?? DEFAULT_ATTEMPTS;
      if (result.retryable && step.attempts < attempts) {
        const delay = retryDelayMs(step.attempts, l.deps.random);
        const at = new Date(l.now.getTime() + delay);
        step.status = 'waiting';
        step.errorCode = result.code;
        step.message = withNotes(`${result.code}: ${result.message} (attempt ${step.attempts} of ${attempts}; retrying in ${Math.ceil(delay / 1000)} s)`, notes);
        step.state = { ...step.state, retryAt: at.toISOString() };
        saveStep(l, step, false);
        stepEvent(l, step, 'retrying', step.message, step.errorCode);
        return stopWaiting(l, at, `a retry of "${step.title}"`);
      }
      step.status = 'failed';
      step.errorCode = result.code;
      step.message = withNotes(`${result.code}: ${result.message}${step.attempts > 1 ? ` (after ${step.attempts} attempts)` : ''}`, notes);
      saveStep(l, step, true);
      stepEvent(l, step, 'failed', step.message, step.errorCode);
      return failRun(l, { kind: 'failed', code: result.code, message: `${step.title}: ${result.message}` });
    }
  }
}

/** Every step ran: the outcome goes through decideWorkflowMove, and the node moves with the run's end. */
async function finishSuccess(l: Loaded, def: WorkflowDef): Promise<Step> {
  // What this transaction changed so far goes to the rows first: the statements below read them.
  await flush(l);
  const kind = l.run.kind as WorkflowKind;
  const finish = def.finish
    ? await def.finish({ run: l.info, node: l.node, pool: l.pool, db: l.tx, reports: (k) => reportsOf(l.tx, l.run.id, { kind: k }) })
    : {};
  const from = l.node.provisionState as ProvisionState;
  const decision = decideWorkflowMove(kind, from, { kind: 'succeeded', wipeAttested: finish.wipeAttested }, { wipe: l.run.params.wipe ?? null });
  if (decision.action === 'refuse') return endRun(l, 'superseded');
  if (decision.action === 'fail') return failRun(l, { kind: 'failed', code: decision.code, message: decision.message });
  if (decision.action !== 'move') throw new Error(`decideWorkflowMove answered ${decision.action} to a success`);
  const chain = decision.to ? WORKFLOW_CHAINS[kind] : undefined;
  const { then, jobId, verb, requestId } = l.run.params;
  // A chain that reaches ready with a run to start then (provision's install after enrolling a new
  // BMC) goes on into that run's state, as the verb that run stands for would move it from ready.
  const thenRun = !chain && then && decision.to === 'ready' && isWorkflowKind(then.kind) ? then : null;
  const nextKind = chain ?? thenRun?.kind;
  const nextRun = nextKind ? { id: newId('WorkflowRun'), kind: nextKind } : null;
  const to = thenRun ? WORKFLOW_KINDS[thenRun.kind].state : decision.to;
  const ended = await endRun(l, 'succeeded');
  if (decision.to || finish.data) {
    const events: NodeEvent[] = decision.to && decision.event
      ? [{ type: decision.event, payload: { workflowId: l.run.id, kind, from, to: decision.to, ...(nextRun && !thenRun ? { next: { workflowId: nextRun.id, kind: nextRun.kind } } : {}) } }]
      : [];
    if (thenRun && nextRun) {
      events.push({ type: `node.provision.${to}`, payload: { workflowId: nextRun.id, kind: nextRun.kind, from: decision.to, to, ...(jobId ? { jobId } : {}), verb: thenRun.params.verb ?? null } });
    }
    const moved = await updateNode(l.tx, { id: l.node.id, version: l.node.version }, {
      data: { ...(finish.data ?? {}), ...(to ? { provisionState: to } : {}) },
      run: nextRun ? {
        ...nextRun,
        params: thenRun
          ? { ...thenRun.params, chainedFrom: l.run.id, ...(jobId ? { jobId } : {}), ...(requestId ? { requestId } : {}) }
          : { ...(verb ? { verb } : {}), chainedFrom: l.run.id, ...(jobId ? { jobId } : {}), ...(then ? { then } : {}), ...(requestId ? { requestId } : {}) },
        batchId: l.run.batchId,
      } : null,
      events,
    }, requestId ?? null);
    if (!moved) throw new Error(`node ${l.node.id} changed under the run's lock`);
  }
  return ended;
}

/**
 * The run failed: the node goes to failed with failedFrom and lastError (decideWorkflowMove says
 * so, through the node store), the steps not reached are skipped, commands still queued are
 * withdrawn, and the cleanup of every step that started runs before the run ends failed.
 */
async function failRun(l: Loaded, outcome: WorkflowOutcome): Promise<Step> {
  // What this transaction changed so far goes to the rows first: the statements below read them.
  await flush(l);
  const kind = l.run.kind;
  const from = l.node.provisionState as ProvisionState;
  let code = outcome.kind === 'failed' ? outcome.code : 'INTERNAL';
  let message = outcome.kind === 'failed' ? outcome.message : 'failed';
  if (isWorkflowKind(kind)) {
    const decision = decideWorkflowMove(kind, from, outcome, { wipe: l.run.params.wipe ?? null });
    if (decision.action === 'refuse') return endRun(l, 'superseded');
    if (decision.action === 'fail') {
      code = decision.code;
      message = clip(decision.message);
      const failedNode = await updateNode(l.tx, { id: l.node.id, version: l.node.version }, {
        data: { provisionState: 'failed', failedFrom: decision.failedFrom, lastErrorCode: code, lastErrorMessage: message, maintenance: true },
        run: null,
        events: [{ type: decision.event, payload: { workflowId: l.run.id, kind, from, to: 'failed', failedFrom: decision.failedFrom, error: { code, message } } }],
      }, l.run.params.requestId ?? null);
      if (!failedNode) throw new Error(`node ${l.node.id} changed under the run's lock`);
      l.node = failedNode;
    }
  }
  await l.tx.query('UPDATE workflow_run SET last_error_code = $2, last_error_message = $3 WHERE id = $1', [l.run.id, code, message]);
  l.run.lastErrorCode = code;
  l.run.lastErrorMessage = message;
  return enterCleanup(l);
}

/** Skips what was not reached, withdraws queued commands, and lays out the cleanup rows (newest step first). */
async function enterCleanup(l: Loaded): Promise<Step> {
  // What this transaction changed so far goes to the rows first: the statements below read them.
  await flush(l);
  await l.tx.query(
    `UPDATE workflow_step SET status = 'skipped', updated_at = now() WHERE run_id = $1 AND NOT cleanup AND status = 'pending'`,
    [l.run.id],
  );
  await withdrawCommands(l);
  const interrupted = l.steps.filter((s) => !s.cleanup && (s.status === 'running' || s.status === 'waiting'));
  for (const s of interrupted) {
    s.status = 'failed';
    s.errorCode = s.errorCode ?? (l.run.abortRequestedAt ? 'ABORTED' : l.run.lastErrorCode);
    s.message = l.run.abortRequestedAt ? 'aborted while it ran' : s.message;
    saveStep(l, s, true);
    stepEvent(l, s, 'failed', s.message, s.errorCode);
  }
  const def = l.def;
  const started = l.steps
    .filter((s) => !s.cleanup && s.attempts > 0 && def?.steps[s.idx]?.cleanup)
    .sort((a, b) => b.idx - a.idx);
  const first = (def?.steps.length ?? 0);
  if (started.length === 0) return endCleanup(l, null);
  const rows = started.map((s, i) => ({ idx: first + i, of: s.idx, cleanup: def!.steps[s.idx]!.cleanup! }));
  await l.tx.query(
    `INSERT INTO workflow_step (run_id, idx, name, title, cleanup, state)
     SELECT $1, c.idx, c.name, c.title, true, jsonb_build_object('cleanupOf', c.of) FROM unnest($2::int[], $3::text[], $4::text[], $5::int[]) AS c(idx, name, title, of)
     ON CONFLICT (run_id, idx) DO NOTHING`,
    [l.run.id, rows.map((r) => r.idx), rows.map((r) => r.cleanup.name), rows.map((r) => r.cleanup.title), rows.map((r) => r.of)],
  );
  const { rows: lease } = await l.tx.query(
    `UPDATE workflow_run SET status = 'aborting', step_index = $2, wait_until = NULL, waiting_for = NULL,
            lease_until = now() + $3::int * interval '1 millisecond', ${DUE_WITH('now() + $3::int * interval \'1 millisecond\'')},
            updated_at = now(), version = version + 1
      WHERE id = $1 RETURNING lease_until`,
    [l.run.id, first, l.leaseMs],
  );
  // The cleanup rows are in the table, not in l.steps: the next transaction reads them.
  return { kind: 'next', leaseUntil: lease[0]!.lease_until as Date, sameTx: false };
}

/** One cleanup row of an aborting (or failing) run; a cleanup that fails is recorded and the next one runs. */
async function cleanupOnce(l: Loaded): Promise<Step> {
  const cleanups = l.steps.filter((s) => s.cleanup);
  if (cleanups.length === 0) return enterCleanup(l);
  const step = cleanups.find((s) => s.idx === l.run.stepIndex);
  if (!step) return endCleanup(l, null);
  const of = step.state.cleanupOf;
  const body = of !== undefined ? l.def?.steps[of]?.cleanup?.run : undefined;
  if (!body) {
    step.status = 'skipped';
    step.message = 'its definition has no cleanup any more';
    saveStep(l, step, true);
    return nextStep(l, step.idx + 1);
  }
  const due = timerDue(l, step);
  if (due) return due;
  if (step.status === 'pending') startStep(l, step, new Date(l.now.getTime() + CLEANUP_DEADLINE_MS));
  const { result, notes, unverified } = await runBody(l, step, body);
  const deadline = new Date(step.state.deadline ?? l.now);
  if ((result.kind === 'wait' || result.kind === 'continue') && l.now < deadline) {
    const until = result.kind === 'wait' ? (result.until < deadline ? result.until : deadline) : new Date(l.now.getTime() + result.afterMs);
    step.status = 'waiting';
    step.message = withNotes(result.kind === 'wait' ? `waiting for ${result.for}` : result.message, notes);
    if (result.kind === 'continue') step.state = { ...step.state, notBefore: until.toISOString() };
    saveStep(l, step, false);
    return stopWaiting(l, until, result.kind === 'wait' ? result.for : `"${step.title}" to go on`);
  }
  if (result.kind === 'complete' || result.kind === 'skipped') {
    step.status = doneStatus(result.kind, unverified);
    step.message = withNotes(result.message, notes);
  } else {
    step.status = 'failed';
    step.errorCode = result.kind === 'failed' ? result.code : 'CALLBACK_TIMEOUT';
    step.message = withNotes(result.kind === 'failed' ? `${result.code}: ${result.message}` : 'the cleanup did not finish in time', notes);
  }
  step.state = { ...step.state, notBefore: undefined };
  saveStep(l, step, true);
  stepEvent(l, step, step.status, step.message, step.errorCode);
  return nextStep(l, step.idx + 1);
}

/** The cleanup is over (or there was none): the run ends aborted when an abort asked for it, else failed. */
async function endCleanup(l: Loaded, skippedWhy: string | null): Promise<Step> {
  // What this transaction changed so far goes to the rows first: the statements below read them.
  await flush(l);
  if (skippedWhy) {
    await l.tx.query(`UPDATE workflow_step SET status = 'skipped', message = $2, updated_at = now() WHERE run_id = $1 AND cleanup AND status IN ('pending', 'running', 'waiting')`, [l.run.id, skippedWhy]);
  }
  return endRun(l, l.run.abortRequestedAt ? 'aborted' : 'failed');
}

async function withdrawCommands(l: Loaded): Promise<void> {
  await l.tx.query(
    `UPDATE command SET status = 'expired', result = $2::jsonb, updated_at = now() WHERE run_id = $1 AND status = 'queued'`,
    [l.run.id, JSON.stringify({ ok: false, code: 'EXPIRED', message: 'withdrawn: its workflow run ended', retryable: false })],
  );
}

/** Ends the run: its status, finished_at, the lease released, queued commands withdrawn, and its boot entries revoked. */
async function endRun(l: Loaded, status: 'succeeded' | 'failed' | 'aborted' | 'superseded'): Promise<Step> {
  // What this transaction changed so far goes to the rows first: the statements below read them.
  await flush(l);
  await l.tx.query(
    `UPDATE workflow_run SET status = $2, finished_at = now(), lease_until = NULL, due_at = NULL, wait_until = NULL, waiting_for = NULL,
            attempt = COALESCE($3::int, attempt), updated_at = now(), version = version + 1
      WHERE id = $1`,
    [l.run.id, status, l.attempt ?? null],
  );
  await withdrawCommands(l);
  // The rescue ramdisk keeps its entry and token while it runs: its run's success is that it is up.
  if (!(status === 'succeeded' && l.run.kind === 'metal-rescue')) {
    await l.tx.query(
      `WITH e AS (UPDATE boot_entry SET revoked_at = now() WHERE run_id = $1 AND revoked_at IS NULL RETURNING id)
       UPDATE boot_token SET revoked_at = now() WHERE revoked_at IS NULL AND boot_entry_id IN (SELECT id FROM e)`,
      [l.run.id],
    );
  }
  l.observed.finished.push({ kind: l.run.kind, status, code: l.run.lastErrorCode });
  l.events.push({
    type: 'workflow.finished',
    payload: {
      workflowId: l.run.id, kind: l.run.kind, status,
      ...(status === 'failed' || status === 'aborted' ? { error: { code: l.run.lastErrorCode, message: l.run.lastErrorMessage } } : {}),
    },
  });
  return { kind: 'stop', outcome: { kind: 'finished', status } };
}

/**
 * The run's next due time as a step transaction of the lease holder writes it (an UPDATE's SET
 * item; `next` an SQL expression: the wait's end, or the renewed lease's end while the run goes
 * on): `next`, unless a wake-up arrived while the run was leased (due_at is then no longer the
 * lease's end, which taking the lease wrote): that earlier due time stays, so the run is fetched
 * again once the lease is released, and reads what woke it.
 */
const DUE_WITH = (next: string) => `due_at = CASE WHEN due_at IS NOT DISTINCT FROM lease_until THEN ${next} ELSE LEAST(due_at, ${next}) END`;

/**
 * Writes what the transaction changed in memory, in one statement: the step rows, the run's update
 * (the last step's end, with its next due time) and the events. One statement where there were
 * five to nine (each step's start, its end, the run, the events, the job), for the engine's hot path.
 */
const FLUSH_SQL = `WITH steps AS (
    UPDATE workflow_step s SET status = v.status, attempts = v.attempts, idempotency_key = v.key, state = v.state, message = v.message,
           error_code = v.error_code, started_at = v.started_at, finished_at = v.finished_at, updated_at = now()
      FROM unnest($2::int[], $3::text[], $4::int[], $5::text[], $6::jsonb[], $7::text[], $8::text[], $9::timestamptz[], $10::timestamptz[])
           AS v(idx, status, attempts, key, state, message, error_code, started_at, finished_at)
     WHERE s.run_id = $1::text AND s.idx = v.idx
    RETURNING 1
  ), run AS (
    UPDATE workflow_run SET step_index = COALESCE($12::int, step_index), attempt = COALESCE($13::int, attempt),
           status = CASE WHEN status = 'aborting' THEN status ELSE $14::text END,
           wait_until = $15::timestamptz, waiting_for = $16::text, lease_until = $17::timestamptz,
           ${DUE_WITH('COALESCE($15::timestamptz, $17::timestamptz)')}, updated_at = now(), version = version + 1
     WHERE id = $1::text AND $11::boolean
    RETURNING 1
  ), ev AS (
    INSERT INTO event (type, tenant_id, site_id, pool_id, node_id, subject, payload)
    SELECT e.type, $18::text, $19::text, $20::text, $21::text, $24::text, e.payload
      FROM unnest($22::text[], $23::jsonb[]) WITH ORDINALITY AS e(type, payload, n) ORDER BY e.n
    RETURNING 1
  )
  SELECT (SELECT count(*) FROM steps)::int AS steps, (SELECT count(*) FROM run)::int AS run`;

async function flush(l: Loaded): Promise<void> {
  const steps = [...l.dirty];
  const run = l.runWrite;
  if (steps.length === 0 && !run && l.events.length === 0) return;
  for (const e of l.events) checkEventPayload(e.payload);
  const { rows } = await l.tx.query(FLUSH_SQL, [
    l.run.id,
    steps.map((x) => x.idx), steps.map((x) => x.status), steps.map((x) => x.attempts), steps.map((x) => x.idempotencyKey),
    steps.map((x) => JSON.stringify(x.state)), steps.map((x) => x.message), steps.map((x) => x.errorCode),
    steps.map((x) => x.startedAt), steps.map((x) => x.finishedAt),
    run !== null, run?.stepIndex ?? null, run ? (l.attempt ?? null) : null, run?.status ?? null,
    run?.waitUntil ?? null, run?.waitingFor ?? null, run?.leaseUntil ?? null,
    l.node.tenantId, l.node.siteId, l.node.poolId, l.node.id, l.events.map((e) => e.type), l.events.map((e) => JSON.stringify(e.payload)),
    // The events' subject: the run, or the control-node job its chain belongs to (jobProgress(jobId)
    // then shows every run of the job; workflowProgress(runId) finds them by payload.workflowId).
    l.run.params.jobId ?? l.run.id,
  ]);
  const r = rows[0]!;
  if (Number(r.steps) !== steps.length || (run && Number(r.run) !== 1)) throw new Error(`run ${l.run.id}: its rows changed under the step's lock`);
  l.dirty.clear();
  l.runWrite = null;
  l.events = [];
}

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
