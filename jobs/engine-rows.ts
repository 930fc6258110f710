import type pg from 'pg';
import { executeLiteral, type FirstStatement, type SqlTx } from '../src/db/sql';
import { checkEventPayload } from '../src/events/outbox';
import { nodeViewColumns, toNodeRow, type NodeRow } from '../src/modules/metal/node-rows';
import { readPolicy, type PoolPolicy } from '../src/modules/tenancy/pool';
import type { CommandRow } from '../src/modules/sites/commands';
import type { EngineObservations } from '../src/ops/metrics';
import type { RunInfo, RunParams, WorkflowDef } from './engine-types';
import type { EngineDeps } from './engine';
import type { Injected } from './engine-step';
import { DUE_WITH, LEASE_MS, LeaseLost, RUN_ENDED_SET } from './engine-lease';

/**
 * A step transaction's rows (the engine's overview is in jobs/engine.ts): load reads the node, its
 * pool, the run, its steps and its current step's commands in one statement that locks them; the
 * step logic changes them in memory (Loaded); flush writes them back in one statement.
 */

const MAX_MESSAGE = 1000;

export interface RunRow {
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

export interface StepRow {
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
export interface StepState {
  deadline?: string;
  /** A retry after a recorded failure is due then (a new attempt). */
  retryAt?: string;
  /** A `continue` result: run the body again then. */
  notBefore?: string;
  /** A cleanup row: the index of the step it cleans up after. */
  cleanupOf?: number;
  memo?: Record<string, unknown>;
}

export const clip = (text: string) => (text.length > MAX_MESSAGE ? `${text.slice(0, MAX_MESSAGE - 1)}…` : text);

/** The run's columns a step transaction changes, written once at its end (flush). */
export interface RunWrite {
  stepIndex?: number;
  status: 'running' | 'waiting';
  waitUntil: Date | null;
  waitingFor: string | null;
  leaseUntil: Date | null;
}

export interface Loaded {
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
  /** Commands the step bodies queued in this transaction, written by the next flush. */
  newCommands: NewCommand[];
  /**
   * Set when this transaction laid out the run's steps (engine-step.ts createSteps): they are in
   * `steps` only, and the next flush inserts every one of them as it is then, and withdraws what
   * the node's other runs left queued (this result), in its one statement.
   */
  created?: { withdrawnResult: string } | null;
  /**
   * Set by endRun: the next flush ends the run in its one statement (status, no lease, no due time,
   * queued commands withdrawn with `withdrawnResult`, boot entries and their tokens revoked when
   * `revoke`), instead of writing the run's pending change.
   */
  ending?: { status: string; revoke: boolean; withdrawnResult: string } | null;
}

/** A command a body queued (engine-step.ts deferCommand), as the flush inserts it. */
export interface NewCommand extends CommandRow {
  params: unknown;
  key: string;
  stepIdx: number;
}

/** A timestamp as a row (Date) or as to_jsonb gives it (ISO text, milliseconds: timestamptz(3)). */
const dateOf = (value: unknown): Date | null => (value == null ? null : value instanceof Date ? value : new Date(value as string));

function toRun(row: Record<string, unknown>): RunRow {
  return {
    id: row.id as string, nodeId: row.node_id as string, kind: row.kind as string, status: row.status as string,
    params: (row.params ?? {}) as RunParams, stepIndex: Number(row.step_index), resumes: Number(row.resumes),
    leaseUntil: dateOf(row.lease_until), waitUntil: dateOf(row.wait_until),
    abortRequestedAt: dateOf(row.abort_requested_at),
    lastErrorCode: (row.last_error_code ?? null) as string | null, lastErrorMessage: (row.last_error_message ?? null) as string | null,
    batchId: (row.batch_id ?? null) as string | null,
  };
}

export function toStep(row: Record<string, unknown>): StepRow {
  return {
    idx: Number(row.idx), name: row.name as string, title: row.title as string, cleanup: Boolean(row.cleanup), destructive: Boolean(row.destructive),
    status: row.status as string, attempts: Number(row.attempts), idempotencyKey: (row.idempotency_key ?? null) as string | null,
    state: (row.state ?? {}) as StepState, message: (row.message ?? null) as string | null, errorCode: (row.error_code ?? null) as string | null,
    startedAt: dateOf(row.started_at), finishedAt: dateOf(row.finished_at),
  };
}

/**
 * The node, its pool's policy, the run and its steps, in one statement that locks the node and the
 * run (node first, then run: FOR UPDATE OF locks in the order it names them, the order the node
 * store's statements lock them in, so no deadlock with a verb). The steps are read in the same
 * statement: only a worker holding the run's lease writes them, and the lease is checked here.
 * `many`: several runs at once (loadManyStatement), locked in the order of their nodes' ids, the
 * order every such load locks in, so two of them never wait for each other in a circle. The run,
 * its steps and commands come as json, not jsonb: both reach the client as the same text, and
 * json is not built as a binary value first (a load of eight runs: 0.48-0.74 ms of execution
 * against 0.89-1.26 with jsonb, on the lifecycle bench's tables).
 */
const loadSql = (many: boolean) => `SELECT ${nodeViewColumns('n')}, p.policy AS "pool.policy", now() AS "db.now", row_to_json(w) AS "run.row",
            (SELECT COALESCE(json_agg(s ORDER BY s.idx), '[]'::json) FROM workflow_step s WHERE s.run_id = w.id) AS "run.steps",
            (SELECT COALESCE(json_agg(json_build_object('id', c.id, 'kind', c.kind, 'status', c.status, 'result', c.result,
                                                        'expiresAt', c.expires_at, 'key', c.idempotency_key)), '[]'::json)
               FROM command c WHERE c.run_id = w.id AND c.step_idx = w.step_index) AS "run.commands"
       FROM workflow_run w JOIN node n ON n.id = w.node_id LEFT JOIN hardware_profile hp ON hp.id = n.hardware_profile_id JOIN pool p ON p.id = n.pool_id
      WHERE ${many ? 'w.id = ANY($1::text[])\n      ORDER BY n.id, w.id' : 'w.id = $1'}
      FOR UPDATE OF n, w`;
const LOAD_SQL = loadSql(false);
const LOAD_MANY_SQL = loadSql(true);

/** The load as its step transaction's first statement, sent with the BEGIN (Sql.transaction's `first`): one round trip fewer per step transaction. */
export const loadStatement = (runId: string): FirstStatement => ({ name: 'metal_step_load', text: LOAD_SQL, types: ['text'], values: [runId] });

/** The load of several runs (a step transaction of several runs, engine.ts advanceLeasedBatch), sent with the BEGIN. */
export const loadManyStatement = (runIds: readonly string[]): FirstStatement =>
  ({ name: 'metal_step_load_many', text: LOAD_MANY_SQL, types: ['text[]'], values: [executeLiteral(runIds)] });

/** A run's rows as the load read them, checked against the caller's lease (`token`). */
export type Base = Omit<Loaded, 'def' | 'info' | 'injected' | 'observed'>;

export async function load(deps: EngineDeps, tx: SqlTx, runId: string, token: Date, first: pg.QueryResult | null = null): Promise<Base | null> {
  const { rows } = first ?? await tx.query(LOAD_SQL, [runId]);
  const row = rows[0];
  return row ? fromLoadRow(deps, tx, row, token) : null;
}

/** One row of a load (of one run or several) as the step logic's rows; LeaseLost when the lease is no longer `token`. */
export function fromLoadRow(deps: EngineDeps, tx: SqlTx, row: Record<string, unknown>, token: Date): Base {
  const run = toRun(row['run.row'] as Record<string, unknown>);
  if (run.leaseUntil?.getTime() !== token.getTime()) throw new LeaseLost(run.id);
  const node = toNodeRow(row);
  return {
    tx, deps, run, node, pool: { id: node.poolId, policy: readPolicy(row['pool.policy']) },
    steps: (row['run.steps'] as Record<string, unknown>[]).map(toStep),
    commands: new Map((row['run.commands'] as { id: string; kind: string; status: CommandRow['status']; result: CommandRow['result']; expiresAt: string; key: string }[])
      .map((command) => [command.key, { id: command.id, kind: command.kind, status: command.status, result: command.result, expiresAt: new Date(command.expiresAt) }])),
    now: row['db.now'] as Date, events: [], leaseMs: deps.leaseMs ?? LEASE_MS,
    dirty: new Set(), runWrite: null, newCommands: [],
  };
}

/**
 * The flush's statement. Its parts for events and commands are there only when the transaction
 * has some: an INSERT's statement triggers fire even when it inserts nothing (the event
 * sequencer's and the agents' notifications, each a wake-up for nothing). It checks what it wrote
 * itself (metal_flush_check raises): every step row, the run when it had a change, every command
 * (a key already taken: no fresh attempt's keys can be), so it can go with the COMMIT unread.
 * Parameters: $1 the run, $2 the steps (JSON), $3-$9 the run's change, $10-$13 the node's tenant,
 * site, pool and id, $14 the events (JSON), $15 their subject, $16 the commands (JSON), $17 and
 * $18 how many steps and commands must be written, $19 the steps a run just laid out (JSON: all
 * inserted) and $20 the result its withdrawal of the node's other runs' queued commands records;
 * ending the run (endRun): $21 its status, $22 whether its boot entries are revoked, $23 the result
 * its queued commands are withdrawn with. An ending flush inserts no commands: its withdrawal could
 * not see them (one statement, one snapshot), so endRun flushes those first.
 */
function flushSql(withEvents: boolean, withCommands: boolean, withCreated: boolean, withEnd: boolean): string {
  return `WITH ${withCreated ? `withdrawn AS (
    UPDATE command SET status = 'expired', result = $20::jsonb, updated_at = now()
     WHERE node_id = $13::text AND run_id IS NOT NULL AND run_id <> $1::text AND status = 'queued'
    RETURNING 1
  ), created AS (
    INSERT INTO workflow_step (run_id, idx, name, title, destructive, status, attempts, idempotency_key, state, message, error_code, started_at, finished_at)
    SELECT $1::text, v.idx, v.name, v.title, v.destructive, v.status, v.attempts, v.key, COALESCE(v.state, '{}'::jsonb), v.message, v.error_code, v.started_at, v.finished_at
      FROM jsonb_to_recordset($19::jsonb)
           AS v(idx int, name text, title text, destructive boolean, status text, attempts int, key text, state jsonb, message text, error_code text, started_at timestamptz, finished_at timestamptz)
    RETURNING 1
  ), ` : ''}steps AS (
    UPDATE workflow_step s SET status = v.status, attempts = v.attempts, idempotency_key = v.key, state = v.state, message = v.message,
           error_code = v.error_code, started_at = v.started_at, finished_at = v.finished_at, updated_at = now()
      FROM jsonb_to_recordset($2::jsonb)
           AS v(idx int, status text, attempts int, key text, state jsonb, message text, error_code text, started_at timestamptz, finished_at timestamptz)
     WHERE s.run_id = $1::text AND s.idx = v.idx
    RETURNING 1
  ), run AS (${withEnd ? `
    UPDATE workflow_run SET step_index = COALESCE($4::int, step_index), attempt = COALESCE($5::int, attempt), status = $21::text, ${RUN_ENDED_SET}
     WHERE id = $1::text AND $3::boolean
    RETURNING 1
  ), end_withdrawn AS (
    UPDATE command SET status = 'expired', result = $23::jsonb, updated_at = now() WHERE run_id = $1::text AND status = 'queued' RETURNING 1
  ), end_entries AS (
    UPDATE boot_entry SET revoked_at = now() WHERE run_id = $1::text AND revoked_at IS NULL AND $22::boolean RETURNING id
  ), end_tokens AS (
    -- Entries, then their tokens: the order an iPXE fetch locks them in.
    UPDATE boot_token SET revoked_at = now() WHERE revoked_at IS NULL AND boot_entry_id IN (SELECT id FROM end_entries) RETURNING 1` : `
    UPDATE workflow_run SET step_index = COALESCE($4::int, step_index), attempt = COALESCE($5::int, attempt),
           status = CASE WHEN status = 'aborting' THEN status ELSE $6::text END,
           wait_until = $7::timestamptz, waiting_for = $8::text, lease_until = $9::timestamptz,
           ${DUE_WITH('COALESCE($7::timestamptz, $9::timestamptz)')}, updated_at = now(), version = version + 1
     WHERE id = $1::text AND $3::boolean
    RETURNING 1`}
  )${withEvents ? `, ev AS (
    INSERT INTO event (type, tenant_id, site_id, pool_id, node_id, subject, payload)
    SELECT e.x->>'type', $10::text, $11::text, $12::text, $13::text, $15::text, e.x->'payload'
      FROM jsonb_array_elements($14::jsonb) WITH ORDINALITY AS e(x, n) ORDER BY e.n
    RETURNING 1
  )` : ''}${withCommands ? `, cmd AS (
    INSERT INTO command (id, tenant_id, site_id, node_id, kind, params, status, idempotency_key, expires_at, run_id, step_idx)
    SELECT c.id, $10::text, $11::text, $13::text, c.kind, c.params, 'queued', c.key, c.expires_at, $1::text, c.step_idx
      FROM jsonb_to_recordset($16::jsonb) AS c(id text, kind text, params jsonb, key text, expires_at timestamptz, step_idx int)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING 1
  )` : ''}
  SELECT metal_flush_check((SELECT count(*) FROM steps) = $17::int AND (SELECT count(*) FROM run) = CASE WHEN $3::boolean THEN 1 ELSE 0 END
           ${withCommands ? 'AND (SELECT count(*) FROM cmd) = $18::int' : ''}
           ${withCreated ? 'AND (SELECT count(*) FROM created) = jsonb_array_length($19::jsonb)' : ''},
           'run ' || $1::text || ': its rows changed under the step''s lock, or a command key its step queued was taken') AS ok,
         -- Every parameter named with its type, whichever parts are left out (one list of values for the four texts).
         num_nulls($6::text, $7::timestamptz, $8::text, $9::timestamptz, $10::text, $11::text, $12::text, $13::text, $14::jsonb, $15::text,
                   $16::jsonb, $18::int, $19::jsonb, $20::jsonb, $21::text, $22::boolean, $23::jsonb) AS typed`;
}
const FLUSH_TYPES = ['text', 'jsonb', 'boolean', 'int', 'int', 'text', 'timestamptz', 'text', 'timestamptz',
  'text', 'text', 'text', 'text', 'jsonb', 'text', 'jsonb', 'int', 'int', 'jsonb', 'jsonb', 'text', 'boolean', 'jsonb'] as const;
/**
 * By variant: 1 commands, 2 events, 4 the run's steps created, 8 the run's end (each part only when
 * the transaction has it; an end has no commands).
 */
const FLUSH_SQL = Array.from({ length: 16 }, (_, variant) => ((variant & 9) === 9 ? null
  : flushSql((variant & 2) !== 0, (variant & 1) !== 0, (variant & 4) !== 0, (variant & 8) !== 0)));

/**
 * Writes what the transaction changed in memory, in one statement: the step rows, the run's update
 * (the last step's end, with its next due time), the events and the commands the steps queued.
 * One statement where there were five to nine (each step's start, its end, the run, the events,
 * the job), for the engine's hot path. `last`: nothing else is written in this transaction after
 * it, so it goes with the COMMIT (one round trip fewer).
 */
export async function flush(loaded: Loaded, last = false): Promise<void> {
  const created = loaded.created ?? null;
  const ending = loaded.ending ?? null;
  // Steps just laid out are inserted whole, as they are now; none of them is updated.
  const steps = created ? [] : [...loaded.dirty];
  const run = loaded.runWrite;
  const commands = loaded.newCommands;
  if (ending && commands.length > 0) throw new Error(`run ${loaded.run.id}: an ending flush cannot insert commands (endRun flushes them first)`);
  if (!created && !ending && steps.length === 0 && !run && loaded.events.length === 0 && commands.length === 0) return;
  for (const event of loaded.events) checkEventPayload(event.payload);
  const variant = (ending ? 8 : 0) + (created ? 4 : 0) + (loaded.events.length > 0 ? 2 : 0) + (commands.length > 0 ? 1 : 0);
  const values: unknown[] = [
    loaded.run.id,
    JSON.stringify(steps.map((step) => ({
      idx: step.idx, status: step.status, attempts: step.attempts, key: step.idempotencyKey, state: step.state, message: step.message,
      error_code: step.errorCode, started_at: step.startedAt, finished_at: step.finishedAt,
    }))),
    run !== null || ending !== null, run?.stepIndex ?? null, run || ending ? (loaded.attempt ?? null) : null, run?.status ?? null,
    run?.waitUntil ?? null, run?.waitingFor ?? null, run?.leaseUntil ?? null,
    loaded.node.tenantId, loaded.node.siteId, loaded.node.poolId, loaded.node.id,
    JSON.stringify(loaded.events.map((event) => ({ type: event.type, payload: event.payload }))),
    // The events' subject: the run, or the control-node job its chain belongs to (jobProgress(jobId)
    // then shows every run of the job; workflowProgress(runId) finds them by payload.workflowId).
    loaded.run.params.jobId ?? loaded.run.id,
    JSON.stringify(commands.map((c) => ({ id: c.id, kind: c.kind, params: c.params, key: c.key, expires_at: c.expiresAt.toISOString(), step_idx: c.stepIdx }))),
    steps.length, commands.length,
    created ? JSON.stringify(loaded.steps.map((step) => ({
      idx: step.idx, name: step.name, title: step.title, destructive: step.destructive, status: step.status, attempts: step.attempts,
      key: step.idempotencyKey, state: step.state, message: step.message, error_code: step.errorCode, started_at: step.startedAt, finished_at: step.finishedAt,
    }))) : null,
    created?.withdrawnResult ?? null,
    ending?.status ?? null, ending?.revoke ?? null, ending?.withdrawnResult ?? null,
  ];
  if (last) {
    loaded.tx.commitWith({ name: `metal_step_flush_${variant}`, text: FLUSH_SQL[variant]!, types: FLUSH_TYPES, values: values.map(executeLiteral) });
  } else {
    await loaded.tx.query(FLUSH_SQL[variant]!, values);
  }
  loaded.dirty.clear();
  loaded.created = null;
  loaded.ending = null;
  loaded.runWrite = null;
  loaded.events = [];
  loaded.newCommands = [];
}
