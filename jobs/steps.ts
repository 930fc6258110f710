/**
 * What a workflow step returns to the engine (issue 9, before any implementation), as Metal3's
 * baremetal-operator state handlers return typed action results: the engine, not the step,
 * decides what happens next, and records it in the run's row before acting on it.
 */
export type StepResult =
  /** Done: the engine records it and moves to the next step (or the workflow's success). */
  | { kind: 'complete'; message?: string }
  /** Not done yet (a power change not visible yet, a BMC task still running): run again after the delay. */
  | { kind: 'continue'; afterMs: number; message?: string }
  /** Waits for an external callback (ramdisk, installer, operator) until the deadline; then CALLBACK_TIMEOUT. */
  | { kind: 'wait'; until: Date; for: string }
  /** Not needed for this node (a PXE discovery boot of a node that has its MAC): recorded as skipped. */
  | { kind: 'skipped'; message: string }
  /** Failed: retryable ones are retried with backoff until the attempts run out; the code becomes lastError. */
  | { kind: 'failed'; code: string; message: string; retryable: boolean };

/** The longest a step may ask to be run again after: past that it should wait for a callback instead. */
export const MAX_CONTINUE_MS = 10 * 60 * 1000;

export const complete = (message?: string): StepResult => ({ kind: 'complete', ...(message ? { message } : {}) });

export const skipped = (message: string): StepResult => ({ kind: 'skipped', message });

export function continueAfter(afterMs: number, message?: string): StepResult {
  if (!Number.isFinite(afterMs) || afterMs <= 0 || afterMs > MAX_CONTINUE_MS) {
    throw new RangeError(`continueAfter: afterMs must be 1..${MAX_CONTINUE_MS}, not ${afterMs}`);
  }
  return { kind: 'continue', afterMs: Math.ceil(afterMs), ...(message ? { message } : {}) };
}

export function waitUntil(until: Date, waitsFor: string, now = new Date()): StepResult {
  if (!(until instanceof Date) || Number.isNaN(until.getTime()) || until <= now) {
    throw new RangeError('waitUntil: the deadline must be a date in the future');
  }
  return { kind: 'wait', until, for: waitsFor };
}

export function failed(code: string, message: string, retryable = false): StepResult {
  if (!/^[A-Z][A-Z0-9_]{1,63}$/.test(code)) throw new RangeError(`failed: "${code}" is not an error code (UPPER_SNAKE)`);
  return { kind: 'failed', code, message, retryable };
}

/** Backoff before retry `attempt` (1-based) of a retryable failure: doubling from 2 s, capped at 5 min, with jitter. */
export function retryDelayMs(attempt: number, random: () => number = Math.random): number {
  const base = Math.min(5 * 60 * 1000, 2000 * 2 ** Math.max(0, attempt - 1));
  return Math.round(base * (0.75 + random() * 0.5));
}
