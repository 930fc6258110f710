import { failed, type StepResult } from './steps';
import { StepInterrupt, type CommandCall, type RunInfo, type StepContext, type StepInfo } from './engine-types';
import { updateNode, type NodeEvent, type Runner } from '../src/modules/metal/node-store';
import type { NodeChange, NodeRow } from '../src/modules/metal/node-rows';
import type { PoolPolicy } from '../src/modules/tenancy/pool';
import { DESTRUCTIVE_COMMANDS, expireQueuedCommand, queueCommand, type CommandKind, type CommandParams, type CommandResult, type CommandRow, type QueueCommand } from '../src/modules/sites/commands';
import { issueBootEntry, NoConfirmedMac, reportsOf, type BootPurpose, type ReportKind } from '../src/modules/boot/entries';
import type { PowerAction } from '../clients/bmc/driver';

/** Commands a step queues expire when no agent claims them within five minutes (as `power`'s do). */
export const STEP_COMMAND_TTL_MS = 5 * 60 * 1000;
/**
 * How long past its expiry a claimed command may stay without a result before the step treats its
 * agent as lost: the agent's own claim lease reports AGENT_LOST sooner; this is the backstop.
 */
export const CLAIM_GRACE_MS = 5 * 60 * 1000;

/**
 * The power state a power action leaves a machine in, where reading it back after a lost agent
 * proves the intent holds: on and off. A restart (cycle, reset, graceful-restart) and an NMI are
 * not here: a machine that was on reads on whether or not it was cycled (issue 20: 18 power cycles
 * that never reached a BMC were recorded as succeeded), so their outcome stays unknown.
 */
const EXPECTED_POWER: Partial<Record<PowerAction, string>> = { on: 'on', off: 'off', 'graceful-off': 'off' };

export interface ContextInput {
  db: Runner;
  run: RunInfo;
  node: NodeRow;
  pool: { id: string; policy: PoolPolicy };
  step: StepInfo;
  now: Date;
  memo: Record<string, unknown>;
  commandTtlMs: number;
  /** Commands already queued, by idempotency key (the engine's load); others are queued or found by SQL. */
  known?: ReadonlyMap<string, CommandRow>;
  /** A command of the step expired here (no agent claimed it in time): for the metrics, after the commit. */
  onExpired?: (kind: string) => void;
  /**
   * Queues a command not known yet with the transaction's other writes (the engine's flush) instead
   * of a statement of its own: it answers the row as it will be written (queued). Without it, each
   * command is its own statement (queueCommand).
   */
  defer?: (command: QueueCommand) => CommandRow;
}

export interface BuiltContext {
  ctx: StepContext;
  /** The timeline lines the body's commands and notes produced. */
  notes: string[];
  /**
   * Why an action the body's commands sent cannot be proven (a command that ended unverified): a
   * step that completes with any is recorded `unverified`, never `succeeded`.
   */
  unverified: string[];
}

const failure = (code: string, message: string, retryable = false) => new StepInterrupt(failed(code, message, retryable));

function resultOf(row: CommandRow): Extract<CommandResult, { ok: false }> {
  const reported = row.result as (Partial<Extract<CommandResult, { ok: false }>> & { ok?: boolean }) | null;
  // The agent protocol before issue 9 reported only {ok, message}: no code means the agent's.
  return {
    ok: false,
    code: reported?.code ?? (row.status === 'expired' ? 'EXPIRED' : 'AGENT_ERROR'),
    message: reported?.message ?? `${row.kind} ${row.status}`,
    retryable: reported?.retryable ?? false,
  };
}

export function buildContext(input: ContextInput): BuiltContext {
  const { db, run, step, now } = input;
  let node = input.node;
  let calls = 0;
  const notes: string[] = [];
  const unverified: string[] = [];

  /**
   * The command of this key: the one the load read, else queued now (with the transaction's other
   * writes when the engine defers it; a key the load read under another kind goes to queueCommand,
   * whose conflict answers the row that holds the key).
   */
  async function queue(command: QueueCommand): Promise<CommandRow> {
    const known = input.known?.get(command.idempotencyKey);
    if (known && known.kind === command.kind) return known;
    return input.defer && !known ? input.defer(command) : queueCommand(db, command);
  }

  /** The step's next command call: its key `<step key>/<n>` (n = call order), queued or found. */
  async function nextCall<K extends CommandKind>(kind: K, params: CommandParams[K], ttlMs?: number): Promise<{ row: CommandRow; key: string }> {
    calls += 1;
    const key = `${step.key}/${calls}`;
    return { row: await queue({ kind, params, nodeId: node.id, runId: run.id, stepIdx: step.idx, idempotencyKey: key, ttlMs: ttlMs ?? input.commandTtlMs }), key };
  }

  async function expire(row: CommandRow): Promise<boolean> {
    const expired = await expireQueuedCommand(db, row.id, 'no site agent claimed it before it expired');
    if (expired) input.onExpired?.(row.kind);
    return expired;
  }

  async function settle(row: CommandRow, params: unknown, key: string): Promise<unknown> {
    const kind = row.kind as CommandKind;
    if (row.status === 'succeeded' || row.status === 'unverified') {
      const result = row.result as Extract<CommandResult, { ok: true }> | null;
      for (const note of result?.notes ?? []) notes.push(`${kind}: ${note}`);
      if (row.status === 'unverified') unverified.push(`${kind}: ${result?.unverified ?? 'its effect cannot be proven on this BMC'}`);
      return result?.value;
    }
    if (row.status === 'queued') {
      if (row.expiresAt > now) throw new StepInterrupt({ kind: 'wait', until: row.expiresAt, for: `the site agent to run ${kind}` });
      if (await expire(row)) {
        throw failure('EXPIRED', `no site agent of site ${node.siteId} claimed ${kind} before it expired (is the site's agent running?)`);
      }
      // Claimed between our read and the expiry: settle what it is now.
      const { rows } = await db.query('SELECT id, kind, status, result, expires_at FROM command WHERE id = $1', [row.id]);
      const fresh = rows[0]!;
      return settle({ id: row.id, kind: row.kind, status: fresh.status as CommandRow['status'], result: (fresh.result ?? null) as CommandResult | null, expiresAt: fresh.expires_at as Date }, params, key);
    }
    if (row.status === 'claimed') {
      const backstop = new Date(row.expiresAt.getTime() + CLAIM_GRACE_MS);
      if (backstop > now) throw new StepInterrupt({ kind: 'wait', until: backstop, for: `the site agent to report ${kind}` });
      return lost(kind, params, key, 'its agent claimed it and never reported a result');
    }
    const result = resultOf(row);
    if (result.code === 'AGENT_LOST') return lost(kind, params, key, result.message);
    throw failure(result.code, `${kind}: ${result.message}`, result.retryable ?? false);
  }

  /**
   * The agent running a command was lost, so whether the action ran is unknown. A destructive one
   * is never sent again (not under this key, not under another): where a read-back proves the
   * intent holds (on, off) it is read back and taken as done when it shows, else the step fails.
   * A restart or an NMI cannot be proven by any read-back: the step fails OUTCOME_UNKNOWN, saying
   * the command may or may not have run. Anything else is simply asked again by a retry.
   */
  async function lost(kind: CommandKind, params: unknown, key: string, why: string): Promise<unknown> {
    if (!DESTRUCTIVE_COMMANDS[kind]) throw failure('AGENT_LOST', `${kind}: ${why}`, true);
    const action = kind === 'bmc.power' ? (params as CommandParams['bmc.power']).action : undefined;
    const expected = action ? EXPECTED_POWER[action] : undefined;
    if (!expected) {
      throw failure('OUTCOME_UNKNOWN', `${kind}${action ? ` ${action}` : ''}: ${why}; it may or may not have run, and no read-back can tell: not sent again (check the machine, then retry the verb)`);
    }
    const readBack = await queue({
      kind: 'bmc.power-state', params: {}, nodeId: node.id, runId: run.id, stepIdx: step.idx, idempotencyKey: `${key}/read-back`, ttlMs: input.commandTtlMs,
    });
    const state = await settle(readBack, {}, `${key}/read-back`);
    if (state === expected) {
      notes.push(`${kind}: ${why}; not sent again: the power state reads back as ${String(state)}, as the action intended`);
      return state;
    }
    throw failure('AGENT_LOST', `${kind}: ${why}; not sent again: the power state reads back as ${String(state)}, not ${expected}`);
  }

  const ctx: StepContext = {
    run,
    get node() { return node; },
    pool: input.pool,
    step,
    now,
    db,
    memo: input.memo,
    async command<K extends CommandKind>(kind: K, params: CommandParams[K], opts: { ttlMs?: number } = {}) {
      const { row, key } = await nextCall(kind, params, opts.ttlMs);
      return settle(row, params, key);
    },
    async commands(list: readonly CommandCall[]) {
      const rows: { row: CommandRow; params: unknown; key: string }[] = [];
      for (const { kind, params } of list) rows.push({ ...(await nextCall(kind, params)), params });
      // In order, as separate calls would: the first failure fails the step; a command without a
      // result yet suspends it only once the others are settled too (the earliest of their waits).
      const values: unknown[] = [];
      let wait: StepInterrupt | null = null;
      for (const { row, params, key } of rows) {
        try {
          values.push(await settle(row, params, key));
        } catch (error) {
          if (!(error instanceof StepInterrupt) || error.result.kind !== 'wait') throw error;
          if (!wait || (wait.result.kind === 'wait' && error.result.until < wait.result.until)) wait = error;
          values.push(undefined);
        }
      }
      if (wait) throw wait;
      return values;
    },
    async bootEntry(purpose: BootPurpose, params: Record<string, unknown>) {
      const known = input.memo.bootEntries;
      if (Array.isArray(known)) return known as string[];
      try {
        // The entry lives as long as the step may wait for the ramdisk, and a little more.
        const ids = await issueBootEntry(db, { nodeId: node.id, runId: run.id, purpose, params, ttlMs: step.deadline.getTime() - now.getTime() + 10 * 60 * 1000 });
        input.memo.bootEntries = ids;
        return ids;
      } catch (error) {
        if (error instanceof NoConfirmedMac) throw failure('NO_CONFIRMED_MAC', error.message);
        throw error;
      }
    },
    reports: (kind: ReportKind) => reportsOf(db, run.id, { kind }),
    waitFor: (what: string): StepResult => ({ kind: 'wait', until: step.deadline, for: what }),
    async updateNode(data: NodeChange, events: NodeEvent[] = []) {
      const row = await updateNode(db, { id: node.id, version: node.version }, { data, run: null, events }, run.params.requestId ?? null);
      // The step's transaction holds the node's row lock: a lost compare-and-set is a bug, not a race.
      if (!row) throw new Error(`node ${node.id} changed under the step's lock`);
      node = row;
      return row;
    },
    note: (text: string) => { notes.push(text); },
  };
  return { ctx, notes, unverified };
}
