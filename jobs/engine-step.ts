import type pg from 'pg';
import type { SqlTx } from '../src/db/sql';
import { newId } from '../src/ids';
import { updateNodeStatement, type NodeEvent } from '../src/modules/metal/node-store';
import { reportsOf } from '../src/modules/boot/entries';
import {
  decideWorkflowMove, isWorkflowKind, STUCK_RESUMES, WAITS, WORKFLOW_CHAINS, WORKFLOW_KINDS,
  type ProvisionState, type WorkflowKind,
} from '../src/modules/metal/states';
import { retryDelayMs, type StepResult } from './steps';
import type { RunInfo, StepDef, WorkflowDef } from './engine-types';
import { WORKFLOWS } from './workflows';
import { newObservations, type EngineObservations } from '../src/ops/metrics';
import type { EngineDeps } from './engine';
import { ACTIVE } from './engine-lease';
import { clip, flush, load, type Base, type Loaded, type StepRow } from './engine-rows';
import { cleanupOnce, endCleanup, endRun, failRun } from './engine-cleanup';
import {
  BodyThrew, DEFAULT_DEADLINE_S, doneStatus, nextStep, runBody, saveStep, startStep, stepEvent, stopWaiting, timerDue, withNotes,
  type Injected, type Step,
} from './engine-step-state';

export { BodyThrew, type Injected, type Step };

/**
 * The step logic (the engine's overview is in jobs/engine.ts): one step transaction (stepOnce)
 * dispatches the run's current step, runs its body, applies its StepResult (the next step, a wait,
 * a retry, a failure) and keeps its timers and deadline; a run whose steps all ran finishes here.
 */

const DEFAULT_ATTEMPTS = 3;


/**
 * Steps of the run, in the caller's transaction: one, and the ones after it while each ends by
 * going on to the next (up to `budget`), so a step that completes and the next one's start (its
 * commands queued, its wait) commit together. Everything is written at the end (flush).
 */
export async function stepOnce(deps: EngineDeps, tx: SqlTx, runId: string, token: Date, lostResumes: number | null,
  injected: Injected | null, budget: number, observed: EngineObservations = newObservations(), first: pg.QueryResult | null = null): Promise<{ step: Step; steps: number }> {
  const base = await load(deps, tx, runId, token, first);
  if (!base) return { step: { kind: 'stop', outcome: { kind: 'idle', status: 'missing' } }, steps: 1 };
  return stepLoaded(base, lostResumes, injected, budget, observed);
}

/** stepOnce for a run whose rows are loaded (by its own load, or by a load of several runs: engine.ts advanceLeasedBatch). */
export async function stepLoaded(base: Base, lostResumes: number | null, injected: Injected | null, budget: number,
  observed: EngineObservations): Promise<{ step: Step; steps: number }> {
  const { run, deps } = base;
  if (!ACTIVE.includes(run.status)) return { step: { kind: 'stop', outcome: { kind: 'idle', status: run.status } }, steps: 1 };
  const kind = run.kind;
  const def = isWorkflowKind(kind) ? (deps.workflows ?? WORKFLOWS)[kind] : undefined;
  const info: RunInfo = { id: run.id, kind: kind as WorkflowKind, params: run.params, batchId: run.batchId };
  const loaded: Loaded = { ...base, def, info, injected, observed };
  let steps = 0;
  let result: Step;
  for (;;) {
    result = await dispatch(loaded, lostResumes);
    lostResumes = null;
    steps += 1;
    if (result.kind !== 'next' || !result.sameTx || steps >= budget) break;
  }
  // The transaction's last write: it goes with the COMMIT.
  await flush(loaded, true);
  return { step: result, steps };
}

async function dispatch(loaded: Loaded, lostResumes: number | null): Promise<Step> {
  const { run, def } = loaded;
  if (run.status === 'aborting') {
    if (lostResumes !== null && lostResumes >= STUCK_RESUMES) return endCleanup(loaded, 'its worker died repeatedly during cleanup; the remaining cleanup was skipped');
    return cleanupOnce(loaded);
  }
  if (!isWorkflowKind(run.kind) || !def) {
    return failRun(loaded, { kind: 'failed', code: 'UNSUPPORTED', message: `no workflow is defined for ${run.kind}` });
  }
  const kind = run.kind;
  if (loaded.steps.length === 0) createSteps(loaded, def);
  const state = loaded.node.provisionState as ProvisionState;
  if (state !== WORKFLOW_KINDS[kind].state) return endRun(loaded, 'superseded');
  if (lostResumes !== null) {
    const decision = decideWorkflowMove(kind, state, { kind: 'worker-lost', resumes: lostResumes });
    if (decision.action === 'fail') return failRun(loaded, { kind: 'failed', code: decision.code, message: decision.message });
    loaded.deps.log?.warn({ runId: run.id, kind, resumes: lostResumes + 1 }, 'workflow run taken up again: its worker died mid-step');
  }
  const step = loaded.steps.find((row) => !row.cleanup && row.idx === run.stepIndex);
  if (!step) return finishSuccess(loaded, def);
  const stepDef = def.steps[step.idx];
  if (!stepDef) return failRun(loaded, { kind: 'failed', code: 'INTERNAL', message: `step ${step.idx} (${step.name}) is not in the definition of ${kind}` });
  const due = timerDue(loaded, step);
  if (due) return due;
  if (step.status === 'pending' || step.state.retryAt) startStep(loaded, step, deadlineOf(loaded, kind, stepDef));
  const result = await runBody(loaded, step, stepDef.run);
  return applyResult(loaded, step, stepDef, result.result, result.notes, result.unverified);
}


function deadlineOf(loaded: Loaded, kind: WorkflowKind, stepDef: StepDef): Date {
  const seconds = stepDef.deadlineSeconds ?? WAITS[kind]?.deadlineSeconds ?? DEFAULT_DEADLINE_S;
  return new Date(loaded.now.getTime() + seconds * 1000);
}

/**
 * Lays out the run's steps in memory; the next flush inserts them (as they are by then) and, in the
 * same statement, withdraws what the node's other runs left queued: a run the node store superseded
 * is never advanced again, so what it left queued must not run after this one starts (a power-off
 * of the old run arriving in the middle of the new one). Nothing is sent here.
 */
function createSteps(loaded: Loaded, def: WorkflowDef): void {
  loaded.steps = def.steps.map((s, idx) => ({
    idx, name: s.name, title: typeof s.title === 'function' ? s.title(loaded.info) : s.title, cleanup: false, destructive: Boolean(s.destructive),
    status: 'pending', attempts: 0, idempotencyKey: null, state: {}, message: null, errorCode: null, startedAt: null, finishedAt: null,
  }));
  loaded.created = { withdrawnResult: WITHDRAWN_BY_NEWER_RUN };
  loaded.observed.started.push(loaded.run.kind);
}

const WITHDRAWN_BY_NEWER_RUN = JSON.stringify({ ok: false, code: 'EXPIRED', message: 'withdrawn: a newer workflow run of the node started', retryable: false });


async function applyResult(loaded: Loaded, step: StepRow, stepDef: StepDef, result: StepResult, notes: string[], unverified: string[] = []): Promise<Step> {
  const deadline = new Date(step.state.deadline ?? loaded.now);
  switch (result.kind) {
    case 'complete':
    case 'skipped': {
      step.status = doneStatus(result.kind, unverified);
      step.message = withNotes(result.message, notes);
      step.errorCode = null;
      step.state = { ...step.state, retryAt: undefined, notBefore: undefined };
      saveStep(loaded, step, true);
      stepEvent(loaded, step, step.status, step.message);
      return nextStep(loaded, step.idx + 1);
    }
    case 'continue': {
      const at = new Date(loaded.now.getTime() + result.afterMs);
      step.status = 'waiting';
      step.message = withNotes(result.message, notes);
      step.state = { ...step.state, notBefore: at.toISOString() };
      saveStep(loaded, step, false);
      stepEvent(loaded, step, 'waiting', step.message);
      return stopWaiting(loaded, at, `"${step.title}" to go on`);
    }
    case 'wait': {
      if (loaded.now >= deadline) {
        step.status = 'failed';
        step.errorCode = 'CALLBACK_TIMEOUT';
        step.message = clip(`gave up waiting for ${result.for}`);
        saveStep(loaded, step, true);
        stepEvent(loaded, step, 'failed', step.message, step.errorCode);
        return failRun(loaded, { kind: 'deadline-passed' });
      }
      const until = result.until < deadline ? result.until : deadline;
      const message = withNotes(`waiting for ${result.for}`, notes);
      const changed = step.status !== 'waiting' || step.message !== message;
      step.status = 'waiting';
      step.message = message;
      step.state = { ...step.state, notBefore: undefined };
      saveStep(loaded, step, false);
      if (changed) stepEvent(loaded, step, 'waiting', step.message);
      return stopWaiting(loaded, until, result.for);
    }
    case 'failed': {
      const attempts = stepDef.retry?.attempts ?? DEFAULT_ATTEMPTS;
      if (result.retryable && step.attempts < attempts) {
        const delay = retryDelayMs(step.attempts, loaded.deps.random);
        const at = new Date(loaded.now.getTime() + delay);
        step.status = 'waiting';
        step.errorCode = result.code;
        step.message = withNotes(`${result.code}: ${result.message} (attempt ${step.attempts} of ${attempts}; retrying in ${Math.ceil(delay / 1000)} s)`, notes);
        step.state = { ...step.state, retryAt: at.toISOString() };
        saveStep(loaded, step, false);
        stepEvent(loaded, step, 'retrying', step.message, step.errorCode);
        return stopWaiting(loaded, at, `a retry of "${step.title}"`);
      }
      step.status = 'failed';
      step.errorCode = result.code;
      step.message = withNotes(`${result.code}: ${result.message}${step.attempts > 1 ? ` (after ${step.attempts} attempts)` : ''}`, notes);
      saveStep(loaded, step, true);
      stepEvent(loaded, step, 'failed', step.message, step.errorCode);
      return failRun(loaded, { kind: 'failed', code: result.code, message: `${step.title}: ${result.message}` });
    }
  }
}

/** Every step ran: the outcome goes through decideWorkflowMove, and the node moves with the run's end. */
async function finishSuccess(loaded: Loaded, def: WorkflowDef): Promise<Step> {
  // What this transaction changed so far goes to the rows first when finish reads them (its
  // reports, its own queries); else endRun writes it with the run's end, in one statement.
  if (def.finish) await flush(loaded);
  const kind = loaded.run.kind as WorkflowKind;
  const finish = def.finish
    ? await def.finish({ run: loaded.info, node: loaded.node, pool: loaded.pool, db: loaded.tx, reports: (reportKind) => reportsOf(loaded.tx, loaded.run.id, { kind: reportKind }) })
    : {};
  const from = loaded.node.provisionState as ProvisionState;
  const decision = decideWorkflowMove(kind, from, { kind: 'succeeded', wipeAttested: finish.wipeAttested }, { wipe: loaded.run.params.wipe ?? null });
  if (decision.action === 'refuse') return endRun(loaded, 'superseded');
  if (decision.action === 'fail') return failRun(loaded, { kind: 'failed', code: decision.code, message: decision.message });
  if (decision.action !== 'move') throw new Error(`decideWorkflowMove answered ${decision.action} to a success`);
  const chain = decision.to ? WORKFLOW_CHAINS[kind] : undefined;
  const { then, jobId, verb, requestId } = loaded.run.params;
  // A chain that reaches ready with a run to start then (provision's install after enrolling a new
  // BMC) goes on into that run's state, as the verb that run stands for would move it from ready.
  const thenRun = !chain && then && decision.to === 'ready' && isWorkflowKind(then.kind) ? then : null;
  const nextKind = chain ?? thenRun?.kind;
  const nextRun = nextKind ? { id: newId('WorkflowRun'), kind: nextKind } : null;
  const to = thenRun ? WORKFLOW_KINDS[thenRun.kind].state : decision.to;
  const ended = await endRun(loaded, 'succeeded');
  if (decision.to || finish.data) {
    const events: NodeEvent[] = decision.to && decision.event
      ? [{ type: decision.event, payload: { workflowId: loaded.run.id, kind, from, to: decision.to, ...(nextRun && !thenRun ? { next: { workflowId: nextRun.id, kind: nextRun.kind } } : {}) } }]
      : [];
    if (thenRun && nextRun) {
      events.push({ type: `node.provision.${to}`, payload: { workflowId: nextRun.id, kind: nextRun.kind, from: decision.to, to, ...(jobId ? { jobId } : {}), verb: thenRun.params.verb ?? null } });
    }
    // With the COMMIT (before the run's last flush, whose events follow the node's): the node is
    // locked by the load, and the statement raises when it writes no node, so the COMMIT fails.
    loaded.tx.commitWith(updateNodeStatement({ id: loaded.node.id, version: loaded.node.version }, {
      data: { ...(finish.data ?? {}), ...(to ? { provisionState: to } : {}) },
      run: nextRun ? {
        ...nextRun,
        params: thenRun
          ? { ...thenRun.params, chainedFrom: loaded.run.id, ...(jobId ? { jobId } : {}), ...(requestId ? { requestId } : {}) }
          : { ...(verb ? { verb } : {}), chainedFrom: loaded.run.id, ...(jobId ? { jobId } : {}), ...(then ? { then } : {}), ...(requestId ? { requestId } : {}) },
        batchId: loaded.run.batchId,
      } : null,
      events,
    }, requestId ?? null));
  }
  return ended;
}
