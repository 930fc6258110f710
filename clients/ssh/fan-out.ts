import { getMaxListeners, setMaxListeners } from 'node:events';
import { forEachLimited } from '../concurrency';
import { SshError, type SshErrorCode } from './errors';
import { connect, DEFAULT_CONNECT_TIMEOUT_MS, type SshSession, type SshTarget } from './client';

/**
 * Sessions at once, as pdsh's default fanout. A preflight or rollout step is mostly waiting on
 * round trips (an SSH handshake is about ten of them), not on this process: one node alone took
 * 0.51 s at +50 ms, and 16 at a time 0.7 s each, so 100 nodes cost six waves at 16 (4.4-4.8 s,
 * against the 5 s) and about three at 32.
 */
export const DEFAULT_CONCURRENCY = 32;

/**
 * ok: the task returned. refused: the node would not let us in (nothing listening, host key not
 * the pinned one, key rejected). timeout: the node did not answer in time (connect, a command, or
 * the per-node deadline). failed: anything else, with the reason.
 */
export type FanOutStatus = 'ok' | 'refused' | 'timeout' | 'failed';

export type FanOutCode = SshErrorCode | 'DEADLINE' | 'TASK_FAILED';

export type FanOutResult<T, R> =
  | { index: number; item: T; status: 'ok'; value: R; durationMs: number }
  | { index: number; item: T; status: Exclude<FanOutStatus, 'ok'>; code: FanOutCode; reason: string; durationMs: number };

export interface FanOutOptions {
  /** How many tasks run at once (default 16). */
  concurrency?: number;
  /** Each item's own budget, from the moment its task starts. */
  perNodeTimeoutMs: number;
  /** Cancels the whole fan-out: running tasks are aborted, items not yet started come back failed/ABORTED. */
  signal?: AbortSignal;
}

export interface TaskContext {
  index: number;
  /** Fires at the item's deadline or when the whole fan-out is cancelled. */
  signal: AbortSignal;
  /** Date.now() value past which the result is already recorded as a timeout. */
  deadline: number;
}

const STATUS_OF: Record<SshErrorCode, Exclude<FanOutStatus, 'ok'>> = {
  INVALID_INPUT: 'failed',
  CONNECTION_REFUSED: 'refused',
  HOST_KEY_MISMATCH: 'refused',
  AUTH_FAILED: 'refused',
  UNREACHABLE: 'failed',
  CONNECT_TIMEOUT: 'timeout',
  COMMAND_TIMEOUT: 'timeout',
  OUTPUT_LIMIT: 'failed',
  ABORTED: 'failed',
  CLOSED: 'failed',
  PROTOCOL: 'failed',
};

const MAX_REASON = 500;

function outcomeOf(err: unknown): { status: Exclude<FanOutStatus, 'ok'>; code: FanOutCode; reason: string } {
  if (err instanceof SshError) return { status: STATUS_OF[err.code], code: err.code, reason: err.message };
  const message = err instanceof Error ? err.message : String(err);
  return { status: 'failed', code: 'TASK_FAILED', reason: message.slice(0, MAX_REASON) };
}

/**
 * Runs `task` once per item with at most `concurrency` in flight and returns one result per item,
 * in input order. An item's result is fixed at its deadline even if its task has not settled: the
 * task's signal fires then, and its slot goes to the next item, so a node that hangs (and a task
 * that ignores its signal) never holds the others up past their own deadlines.
 */
export async function fanOut<T, R>(
  items: readonly T[],
  task: (item: T, ctx: TaskContext) => Promise<R>,
  options: FanOutOptions,
): Promise<FanOutResult<T, R>[]> {
  const concurrency = options.concurrency ?? DEFAULT_CONCURRENCY;
  if (!Number.isInteger(concurrency) || concurrency < 1) throw new SshError('INVALID_INPUT', 'concurrency must be a positive integer');
  if (!Number.isInteger(options.perNodeTimeoutMs) || options.perNodeTimeoutMs <= 0) {
    throw new SshError('INVALID_INPUT', 'perNodeTimeoutMs must be a positive integer');
  }
  const results: FanOutResult<T, R>[] = new Array(items.length);
  // Each running item listens on the caller's signal (removed when it settles): with the default
  // 32 at a time that passes Node's leak warning threshold of 10 without any leak.
  if (options.signal && getMaxListeners(options.signal) < concurrency + 10) setMaxListeners(concurrency + 10, options.signal);

  const runOne = (index: number): Promise<FanOutResult<T, R>> => {
    const item = items[index];
    const started = Date.now();
    const deadline = started + options.perNodeTimeoutMs;
    const controller = new AbortController();
    const onCancel = () => controller.abort();
    options.signal?.addEventListener('abort', onCancel, { once: true });
    return new Promise<FanOutResult<T, R>>((resolve) => {
      let done = false;
      const settle = (result: FanOutResult<T, R>) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        options.signal?.removeEventListener('abort', onCancel);
        controller.abort();
        resolve(result);
      };
      const timer = setTimeout(
        () => settle({ index, item, status: 'timeout', code: 'DEADLINE', reason: `no result within the per-node deadline of ${options.perNodeTimeoutMs} ms`, durationMs: Date.now() - started }),
        options.perNodeTimeoutMs,
      );
      let running: Promise<R>;
      try {
        running = task(item, { index, signal: controller.signal, deadline });
      } catch (err) {
        running = Promise.reject(err);
      }
      running.then(
        (value) => settle({ index, item, status: 'ok', value, durationMs: Date.now() - started }),
        (err: unknown) => settle({ index, item, ...outcomeOf(err), durationMs: Date.now() - started }),
      );
    });
  };

  await forEachLimited(items, concurrency, async (item, index) => {
    if (options.signal?.aborted) {
      results[index] = { index, item, status: 'failed', code: 'ABORTED', reason: 'the fan-out was cancelled before this item started', durationMs: 0 };
      return;
    }
    results[index] = await runOne(index);
  });
  return results;
}

/**
 * The SSH form of fanOut: for each node, connect (within what is left of its deadline), run `fn`
 * with the session, close. The deadline's abort destroys the connection, so a hung command or a
 * server that never speaks SSH is cut off rather than left open.
 */
export function fanOutSsh<T, R>(
  nodes: readonly T[],
  targetOf: (node: T) => Omit<SshTarget, 'signal'>,
  fn: (session: SshSession, node: T, ctx: TaskContext) => Promise<R>,
  options: FanOutOptions,
): Promise<FanOutResult<T, R>[]> {
  return fanOut(nodes, async (node, ctx) => {
    const target = targetOf(node);
    const left = Math.max(1, ctx.deadline - Date.now());
    const session = await connect({ ...target, connectTimeoutMs: Math.min(target.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS, left), signal: ctx.signal });
    try {
      return await fn(session, node, ctx);
    } finally {
      await session.close();
    }
  }, options);
}
