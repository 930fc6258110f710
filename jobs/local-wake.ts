import type { Logger } from 'pino';

/**
 * Wakes a workflow run in this process, after a commit that may be news to it (a command result of
 * the built-in agent, a ramdisk report), instead of queuing a metal.advance job for it.
 *
 * Why: in a process that runs the engine, a job queued by the same process only came back to it
 * through pg-boss: the job's insert (its indexes, its foreign key, the notify trigger), the fetch
 * and the completion, each in PostgreSQL, for a run id this process already had in hand. That was
 * most of the 1.5 jobs per workflow step of the lifecycle bench.
 *
 * Nothing is lost when this process dies before it advances the run: what woke it is a committed
 * row (a command's result, a ramdisk report) newer than the run's last change, which is what the
 * engine's sweep (sweepRuns, in every worker, and at once when a worker starts) looks for. A wake
 * that fails to advance (the database away, a bug) is handed to pg-boss instead, with its retries.
 */
export interface RunWaker {
  /** After the commit: advance `runId` soon, here. */
  wake(runId: string): void;
}

/**
 * After a statement that may have woken `runId` (null: it woke none): hands the run to `waker`
 * (the statement was told to queue no job), or checks that the statement queued or found its job.
 */
export function afterWake(runId: string | null, jobs: number, waker: RunWaker | null | undefined): void {
  if (!runId) return;
  if (waker) waker.wake(runId);
  else if (jobs !== 1) throw new Error('the metal.advance queue is missing: the run was not woken');
}

/**
 * At most `concurrency` runs advanced at once (the metal.advance loops have their own budget);
 * one pending entry per run, and a run woken while it is being advanced is advanced once more
 * afterwards (the wake may carry news its advance did not read).
 */
export class LocalAdvancer implements RunWaker {
  private readonly pending = new Set<string>();
  /** Runs being advanced now, and whether they were woken again meanwhile. */
  private readonly active = new Map<string, boolean>();
  private stopped = false;
  private idle: (() => void) | null = null;

  constructor(
    private readonly advance: (runId: string) => Promise<unknown>,
    private readonly fallback: (runId: string) => Promise<unknown>,
    private readonly concurrency: number,
    private readonly log: Logger,
  ) {}

  wake(runId: string): void {
    if (this.stopped) return;
    if (this.active.has(runId)) {
      this.active.set(runId, true);
      return;
    }
    this.pending.add(runId);
    this.pump();
  }

  /** How many wakes wait for a slot. */
  get backlog(): number {
    return this.pending.size;
  }

  private pump(): void {
    for (const runId of this.pending) {
      if (this.active.size >= this.concurrency) return;
      this.pending.delete(runId);
      this.active.set(runId, false);
      void this.advance(runId)
        .catch(async (error: unknown) => {
          this.log.warn({ err: error, runId }, 'advancing a run woken in this process failed; it goes through the queue');
          await this.fallback(runId).catch((e: unknown) => this.log.error({ err: e, runId }, 'queueing the run failed; the engine sweep will find it'));
        })
        .finally(() => {
          const again = this.active.get(runId);
          this.active.delete(runId);
          if (again && !this.stopped) this.pending.add(runId);
          if (this.active.size === 0 && this.pending.size === 0) this.idle?.();
          this.pump();
        });
    }
  }

  /** Takes no more wakes; resolves when the advances under way have ended. Wakes not started are left to the sweep. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.pending.clear();
    if (this.active.size === 0) return;
    await new Promise<void>((resolve) => {
      this.idle = resolve;
    });
  }
}
