import { updateNode } from '../src/modules/metal/node-store';
import { decideWorkflowMove, isWorkflowKind, type ProvisionState, type WorkflowOutcome } from '../src/modules/metal/states';
import { DUE_WITH } from './engine-lease';
import { clip, flush, type Loaded } from './engine-rows';
import { doneStatus, nextStep, runBody, saveStep, startStep, stepEvent, stopWaiting, timerDue, withNotes, type Step } from './engine-step';

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
export async function failRun(l: Loaded, outcome: WorkflowOutcome): Promise<Step> {
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
export async function cleanupOnce(l: Loaded): Promise<Step> {
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
export async function endCleanup(l: Loaded, skippedWhy: string | null): Promise<Step> {
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
export async function endRun(l: Loaded, status: 'succeeded' | 'failed' | 'aborted' | 'superseded'): Promise<Step> {
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
