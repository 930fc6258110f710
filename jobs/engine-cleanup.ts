import { updateNode } from '../src/modules/metal/node-store';
import { decideWorkflowMove, isWorkflowKind, type ProvisionState, type WorkflowOutcome } from '../src/modules/metal/states';
import { DUE_WITH } from './engine-lease';
import { clip, flush, type Loaded } from './engine-rows';
import { doneStatus, nextStep, runBody, saveStep, startStep, stepEvent, stopWaiting, timerDue, withNotes, type Step } from './engine-step-state';

/**
 * A run's failure, its cleanup and its end (the engine's overview is in jobs/engine.ts): failRun
 * moves the node to failed, enterCleanup lays out the cleanup rows of the steps that started,
 * cleanupOnce runs one, endCleanup and endRun end the run and withdraw what it left queued.
 */

/** A cleanup waits at most this long (its command's expiry usually ends it sooner). */
const CLEANUP_DEADLINE_MS = 15 * 60 * 1000;

/**
 * The run failed: the node goes to failed with failedFrom and lastError (decideWorkflowMove says
 * so, through the node store), the steps not reached are skipped, commands still queued are
 * withdrawn, and the cleanup of every step that started runs before the run ends failed.
 */
export async function failRun(loaded: Loaded, outcome: WorkflowOutcome): Promise<Step> {
  // What this transaction changed so far goes to the rows first: the statements below read them.
  await flush(loaded);
  const kind = loaded.run.kind;
  const from = loaded.node.provisionState as ProvisionState;
  let code = outcome.kind === 'failed' ? outcome.code : 'INTERNAL';
  let message = outcome.kind === 'failed' ? outcome.message : 'failed';
  if (isWorkflowKind(kind)) {
    const decision = decideWorkflowMove(kind, from, outcome, { wipe: loaded.run.params.wipe ?? null });
    if (decision.action === 'refuse') return endRun(loaded, 'superseded');
    if (decision.action === 'fail') {
      code = decision.code;
      message = clip(decision.message);
      const failedNode = await updateNode(loaded.tx, { id: loaded.node.id, version: loaded.node.version }, {
        data: { provisionState: 'failed', failedFrom: decision.failedFrom, lastErrorCode: code, lastErrorMessage: message, maintenance: true },
        run: null,
        events: [{ type: decision.event, payload: { workflowId: loaded.run.id, kind, from, to: 'failed', failedFrom: decision.failedFrom, error: { code, message } } }],
      }, loaded.run.params.requestId ?? null);
      if (!failedNode) throw new Error(`node ${loaded.node.id} changed under the run's lock`);
      loaded.node = failedNode;
    }
  }
  await loaded.tx.query('UPDATE workflow_run SET last_error_code = $2, last_error_message = $3 WHERE id = $1', [loaded.run.id, code, message]);
  loaded.run.lastErrorCode = code;
  loaded.run.lastErrorMessage = message;
  return enterCleanup(loaded);
}

/** Skips what was not reached, withdraws queued commands, and lays out the cleanup rows (newest step first). */
async function enterCleanup(loaded: Loaded): Promise<Step> {
  // What this transaction changed so far goes to the rows first: the statements below read them.
  await flush(loaded);
  await loaded.tx.query(
    `UPDATE workflow_step SET status = 'skipped', updated_at = now() WHERE run_id = $1 AND NOT cleanup AND status = 'pending'`,
    [loaded.run.id],
  );
  await loaded.tx.query(`UPDATE command SET status = 'expired', result = $2::jsonb, updated_at = now() WHERE run_id = $1 AND status = 'queued'`, [loaded.run.id, WITHDRAWN]);
  const interrupted = loaded.steps.filter((step) => !step.cleanup && (step.status === 'running' || step.status === 'waiting'));
  for (const step of interrupted) {
    step.status = 'failed';
    step.errorCode = step.errorCode ?? (loaded.run.abortRequestedAt ? 'ABORTED' : loaded.run.lastErrorCode);
    step.message = loaded.run.abortRequestedAt ? 'aborted while it ran' : step.message;
    saveStep(loaded, step, true);
    stepEvent(loaded, step, 'failed', step.message, step.errorCode);
  }
  const def = loaded.def;
  const started = loaded.steps
    .filter((step) => !step.cleanup && step.attempts > 0 && def?.steps[step.idx]?.cleanup)
    .sort((a, b) => b.idx - a.idx);
  const first = (def?.steps.length ?? 0);
  if (started.length === 0) return endCleanup(loaded, null);
  const rows = started.map((step, i) => ({ idx: first + i, of: step.idx, cleanup: def!.steps[step.idx]!.cleanup! }));
  await loaded.tx.query(
    `INSERT INTO workflow_step (run_id, idx, name, title, cleanup, state)
     SELECT $1, c.idx, c.name, c.title, true, jsonb_build_object('cleanupOf', c.of) FROM unnest($2::int[], $3::text[], $4::text[], $5::int[]) AS c(idx, name, title, of)
     ON CONFLICT (run_id, idx) DO NOTHING`,
    [loaded.run.id, rows.map((row) => row.idx), rows.map((row) => row.cleanup.name), rows.map((row) => row.cleanup.title), rows.map((row) => row.of)],
  );
  const { rows: lease } = await loaded.tx.query(
    `UPDATE workflow_run SET status = 'aborting', step_index = $2, wait_until = NULL, waiting_for = NULL,
            lease_until = now() + $3::int * interval '1 millisecond', ${DUE_WITH('now() + $3::int * interval \'1 millisecond\'')},
            updated_at = now(), version = version + 1
      WHERE id = $1 RETURNING lease_until`,
    [loaded.run.id, first, loaded.leaseMs],
  );
  // The cleanup rows are in the table, not in loaded.steps: the next transaction reads them.
  return { kind: 'next', leaseUntil: lease[0]!.lease_until as Date, sameTx: false };
}

/** One cleanup row of an aborting (or failing) run; a cleanup that fails is recorded and the next one runs. */
export async function cleanupOnce(loaded: Loaded): Promise<Step> {
  const cleanups = loaded.steps.filter((step) => step.cleanup);
  if (cleanups.length === 0) return enterCleanup(loaded);
  const step = cleanups.find((cleanup) => cleanup.idx === loaded.run.stepIndex);
  if (!step) return endCleanup(loaded, null);
  const of = step.state.cleanupOf;
  const body = of !== undefined ? loaded.def?.steps[of]?.cleanup?.run : undefined;
  if (!body) {
    step.status = 'skipped';
    step.message = 'its definition has no cleanup any more';
    saveStep(loaded, step, true);
    return nextStep(loaded, step.idx + 1);
  }
  const due = timerDue(loaded, step);
  if (due) return due;
  if (step.status === 'pending') startStep(loaded, step, new Date(loaded.now.getTime() + CLEANUP_DEADLINE_MS));
  const { result, notes, unverified } = await runBody(loaded, step, body);
  const deadline = new Date(step.state.deadline ?? loaded.now);
  if ((result.kind === 'wait' || result.kind === 'continue') && loaded.now < deadline) {
    const until = result.kind === 'wait' ? (result.until < deadline ? result.until : deadline) : new Date(loaded.now.getTime() + result.afterMs);
    step.status = 'waiting';
    step.message = withNotes(result.kind === 'wait' ? `waiting for ${result.for}` : result.message, notes);
    if (result.kind === 'continue') step.state = { ...step.state, notBefore: until.toISOString() };
    saveStep(loaded, step, false);
    return stopWaiting(loaded, until, result.kind === 'wait' ? result.for : `"${step.title}" to go on`);
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
  saveStep(loaded, step, true);
  stepEvent(loaded, step, step.status, step.message, step.errorCode);
  return nextStep(loaded, step.idx + 1);
}

/** The cleanup is over (or there was none): the run ends aborted when an abort asked for it, else failed. */
export async function endCleanup(loaded: Loaded, skippedWhy: string | null): Promise<Step> {
  // What this transaction changed so far goes to the rows first: the statements below read them.
  await flush(loaded);
  if (skippedWhy) {
    await loaded.tx.query(`UPDATE workflow_step SET status = 'skipped', message = $2, updated_at = now() WHERE run_id = $1 AND cleanup AND status IN ('pending', 'running', 'waiting')`, [loaded.run.id, skippedWhy]);
  }
  return endRun(loaded, loaded.run.abortRequestedAt ? 'aborted' : 'failed');
}

const WITHDRAWN = JSON.stringify({ ok: false, code: 'EXPIRED', message: 'withdrawn: its workflow run ended', retryable: false });

/**
 * Ends the run: its status, finished_at, the lease released, queued commands withdrawn, and its
 * boot entries revoked (entries, then their tokens: the order an iPXE fetch locks them in), with
 * what the transaction changed so far, in the one statement of the flush (its check raises when
 * the run's row is gone). Commands queued in this transaction are written by a flush of their own
 * first: the end's withdrawal, in the same statement as their insert, would not see them.
 */
export async function endRun(loaded: Loaded, status: 'succeeded' | 'failed' | 'aborted' | 'superseded'): Promise<Step> {
  if (loaded.newCommands.length > 0) await flush(loaded);
  // The rescue ramdisk keeps its entry and token while it runs: its run's success is that it is up.
  loaded.ending = { status, revoke: !(status === 'succeeded' && loaded.run.kind === 'metal-rescue'), withdrawnResult: WITHDRAWN };
  await flush(loaded);
  loaded.observed.finished.push({ kind: loaded.run.kind, status, code: loaded.run.lastErrorCode });
  loaded.events.push({
    type: 'workflow.finished',
    payload: {
      workflowId: loaded.run.id, kind: loaded.run.kind, status,
      ...(status === 'failed' || status === 'aborted' ? { error: { code: loaded.run.lastErrorCode, message: loaded.run.lastErrorMessage } } : {}),
    },
  });
  return { kind: 'stop', outcome: { kind: 'finished', status } };
}
