import { newId } from '../src/ids';
import type { CommandRow, QueueCommand } from '../src/modules/sites/commands';
import type { StepResult } from './steps';
import { buildContext, STEP_COMMAND_TTL_MS } from './engine-context';
import { StepInterrupt, type StepDef } from './engine-types';
import type { AdvanceOutcome } from './engine';
import { clip, type Loaded, type StepRow } from './engine-rows';

/**
 * A step's state in memory, shared by the step logic (engine-step.ts) and the cleanup
 * (engine-cleanup.ts), which both start steps, run their bodies, record their ends and decide
 * whether the run goes on or waits; neither imports the other for these. Everything here changes
 * the transaction's rows in memory; the flush (engine-rows.ts) writes them.
 */

/** A step's deadline when neither its definition nor its workflow's waits give one. */
export const DEFAULT_DEADLINE_S = 3600;

/**
 * `next`: the run goes on now. `sameTx`: the step's end and the next step's start are in memory,
 * consistent with the rows as they will be written, so the next step runs in the same transaction;
 * otherwise (the cleanup rows were just laid out by SQL) a new transaction reads them.
 */
export type Step = { kind: 'next'; leaseUntil: Date; sameTx: boolean } | { kind: 'stop'; outcome: AdvanceOutcome };

/** A throw of a step body, recorded by the next transaction (see advanceRun). */
export interface Injected { idx: number; result: StepResult }

export class BodyThrew extends Error {
  constructor(readonly idx: number, readonly stepName: string, readonly thrown: unknown) {
    super(`workflow step ${stepName} threw`);
  }
}

/** A step whose retry delay or `continue` delay has not passed yet: an early wake-up changes nothing. */
export function timerDue(loaded: Loaded, step: StepRow): Step | null {
  const at = step.state.retryAt ?? step.state.notBefore;
  if (!at || new Date(at) <= loaded.now) return null;
  return stopWaiting(loaded, new Date(at), step.state.retryAt ? `a retry of "${step.title}"` : `"${step.title}" to go on`);
}

export function stepEvent(loaded: Loaded, step: StepRow, status: string, message: string | null, errorCode: string | null = null): void {
  loaded.events.push({
    type: 'workflow.step',
    payload: {
      workflowId: loaded.run.id, kind: loaded.run.kind, idx: step.idx, step: step.name, title: step.title, cleanup: step.cleanup,
      status, attempt: step.attempts, message, ...(errorCode ? { errorCode } : {}),
    },
  });
}

/**
 * Marks the step started: attempts + 1, its idempotency key, a fresh deadline, and the previous
 * failure's message cleared (an operator never reads a stale error while the retry runs). The
 * body runs after this in the same transaction, so nothing it queues can exist without it.
 */
export function startStep(loaded: Loaded, step: StepRow, deadline: Date): void {
  step.attempts += 1;
  step.status = 'running';
  step.idempotencyKey = `${loaded.run.id}:${step.idx}:${step.attempts}`;
  step.state = { deadline: deadline.toISOString(), ...(step.state.cleanupOf !== undefined ? { cleanupOf: step.state.cleanupOf } : {}) };
  step.message = null;
  step.errorCode = null;
  step.startedAt = loaded.now;
  step.finishedAt = null;
  // Written with the step's end, in this transaction (flush): before anything the body queues can be seen.
  loaded.dirty.add(step);
  // The run's `attempt` follows in the statement that ends this step's transaction (stopWaiting).
  loaded.attempt = step.attempts;
  stepEvent(loaded, step, 'running', null);
}

export async function runBody(loaded: Loaded, step: StepRow, body: StepDef['run']): Promise<{ result: StepResult; notes: string[]; unverified: string[] }> {
  const memo = { ...(step.state.memo ?? {}) };
  const { ctx, notes, unverified } = buildContext({
    db: loaded.tx, run: loaded.info, node: loaded.node, pool: loaded.pool, now: loaded.now, memo, commandTtlMs: loaded.deps.commandTtlMs ?? STEP_COMMAND_TTL_MS, known: loaded.commands,
    onExpired: (kind) => loaded.observed.commands.push({ kind, outcome: 'expired', code: 'EXPIRED' }),
    defer: (command) => deferCommand(loaded, command),
    step: {
      idx: step.idx, name: step.name, title: step.title, attempt: step.attempts, key: step.idempotencyKey!,
      startedAt: step.startedAt ?? loaded.now, deadline: new Date(step.state.deadline ?? loaded.now.getTime() + DEFAULT_DEADLINE_S * 1000),
    },
  });
  // A throw of the body the last transaction rolled back: its failure, instead of the body.
  if (loaded.injected && loaded.injected.idx === step.idx) {
    const { result } = loaded.injected;
    loaded.injected = null;
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
  loaded.node = ctx.node;
  step.state = { ...step.state, memo };
  return { result, notes, unverified };
}

/** A command the body queued, written by the flush (engine-rows.ts); the row as it will be. */
function deferCommand(loaded: Loaded, command: QueueCommand): CommandRow {
  const row: CommandRow = { id: newId('Command'), kind: command.kind, status: 'queued', result: null, expiresAt: new Date(loaded.now.getTime() + Math.round(command.ttlMs)) };
  loaded.newCommands.push({ ...row, params: command.params, key: command.idempotencyKey, stepIdx: command.stepIdx });
  loaded.commands.set(command.idempotencyKey, row);
  return row;
}

/**
 * A done step's status: skipped, else succeeded, unless a command it ran ended unverified (sent and
 * accepted, but the BMC shows nothing that proves the effect): then `unverified`, and the
 * workflow's next wait (the ramdisk's call, the installer's report) is the proof.
 */
export const doneStatus = (kind: 'complete' | 'skipped', unverified: readonly string[]): string =>
  kind === 'skipped' ? 'skipped' : unverified.length ? 'unverified' : 'succeeded';

export const withNotes = (message: string | undefined | null, notes: string[]) => {
  const all = [message, ...notes].filter((part): part is string => Boolean(part));
  return all.length ? clip(all.join('; ')) : null;
};

/** The step's row as it is now in memory, written at the flush. */
export function saveStep(loaded: Loaded, step: StepRow, finished: boolean): void {
  step.finishedAt = finished ? loaded.now : null;
  loaded.dirty.add(step);
  if (finished && step.startedAt) {
    loaded.observed.steps.push({ kind: loaded.run.kind, step: step.name, outcome: step.status, seconds: (loaded.now.getTime() - step.startedAt.getTime()) / 1000 });
  }
}

/**
 * Ends the transaction's work with the run waiting (lease released), due at the wait's end (the
 * flush writes due_at = until, or keeps an earlier wake-up that arrived while the run was leased).
 */
export function stopWaiting(loaded: Loaded, until: Date, waitingFor: string): Step {
  loaded.runWrite = { ...loaded.runWrite, status: 'waiting', waitUntil: until, waitingFor: clip(waitingFor), leaseUntil: null };
  if (loaded.run.status !== 'aborting') loaded.run.status = 'waiting';
  loaded.run.waitUntil = until;
  loaded.run.leaseUntil = null;
  return { kind: 'stop', outcome: { kind: 'waiting', until, for: waitingFor } };
}

/** The run goes on with step `stepIndex`, in this transaction: the lease renewed from the transaction's clock. */
export function nextStep(loaded: Loaded, stepIndex: number): Step {
  const leaseUntil = new Date(loaded.now.getTime() + loaded.leaseMs);
  loaded.runWrite = { stepIndex, status: 'running', waitUntil: null, waitingFor: null, leaseUntil };
  loaded.attempt = 0;
  loaded.run.stepIndex = stepIndex;
  if (loaded.run.status !== 'aborting') loaded.run.status = 'running';
  loaded.run.waitUntil = null;
  loaded.run.leaseUntil = leaseUntil;
  return { kind: 'next', leaseUntil, sameTx: true };
}
