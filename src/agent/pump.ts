import { setMaxListeners } from 'node:events';
import type { Logger } from 'pino';
import { DESTRUCTIVE_COMMANDS, type CommandKind, type CommandResult } from '../modules/sites/commands';

/**
 * The loop both agents share (remote and built-in): claim while below the concurrency bound, run
 * each claimed command, keep the claims alive, and on stop finish what runs within a grace period,
 * then abandon the rest with a report instead of letting their leases lapse silently.
 */
export interface PumpItem {
  id: string;
  kind: string;
  /** Set by `run` just before the driver is called: until then, a stop knows the BMC saw nothing. */
  started?: boolean;
}

export interface PumpDeps<T extends PumpItem> {
  log: Logger;
  concurrency: number;
  pollMs: number;
  /** How often `renew` runs (heartbeat, lease renewal). */
  renewMs: number;
  claim(max: number): Promise<T[]>;
  run(item: T, signal: AbortSignal): Promise<void>;
  renew(): Promise<void>;
  /** Reports a command the agent gives up on at stop. */
  abandon(item: T, result: CommandResult): Promise<void>;
  /** A claim error that means the agent can no longer work (a revoked token): the pump stops. */
  isFatal?(error: unknown): boolean;
}

/**
 * What an agent that stops mid-command reports: for a destructive kind already sent to the BMC,
 * whether it ran is unknown; anything else certainly did no harm and may be sent again.
 */
export function abandonedResult(item: PumpItem): CommandResult {
  if (item.started && DESTRUCTIVE_COMMANDS[item.kind as CommandKind]) {
    return { ok: false, code: 'AGENT_LOST', message: 'the site agent stopped while it ran the command: whether the action ran is unknown', retryable: false };
  }
  return { ok: false, code: 'AGENT_ERROR', message: item.started ? 'the site agent stopped before the command finished' : 'the site agent stopped before the command was sent to the BMC', retryable: true };
}

/**
 * What the agent reports when running a command threw (a fault of the agent, not the BMC's
 * answer): by the same rule as a stop, so the claim ends now instead of being renewed for ever.
 */
export function failedRunResult(item: PumpItem): CommandResult {
  if (item.started && DESTRUCTIVE_COMMANDS[item.kind as CommandKind]) {
    return { ok: false, code: 'AGENT_LOST', message: 'the site agent failed while it ran the command: whether the action ran is unknown', retryable: false };
  }
  return { ok: false, code: 'AGENT_ERROR', message: item.started ? 'the site agent failed before the command finished' : 'the site agent failed before the command was sent to the BMC', retryable: true };
}

export class CommandPump<T extends PumpItem> {
  private stopping = false;
  private inFlight = new Map<string, { item: T; done: Promise<void> }>();
  private wake: (() => void) | null = null;
  /** A poke that came while a claim was under way: claim again instead of sleeping. */
  private poked = false;
  private abort = new AbortController();
  private loop: Promise<void> | null = null;
  private renewTimer: NodeJS.Timeout | null = null;
  /** Resolves when the pump ends: stopped, or a fatal claim error (then with that error). */
  readonly ended: Promise<unknown>;
  private endWith!: (reason: unknown) => void;

  constructor(private deps: PumpDeps<T>) {
    this.ended = new Promise((resolve) => (this.endWith = resolve));
    // Every running command listens on the one stop signal (its HTTP requests do too): Node's
    // default of 10 listeners warned of a leak under any concurrency above a few commands.
    setMaxListeners(Math.max(10, deps.concurrency * 8), this.abort.signal);
  }

  get running(): number {
    return this.inFlight.size;
  }

  start(): void {
    this.renewTimer = setInterval(() => {
      this.deps.renew().catch((error: unknown) => this.deps.log.warn({ err: error }, 'agent heartbeat failed'));
    }, this.deps.renewMs);
    this.renewTimer.unref();
    this.loop = this.claimLoop();
  }

  /** New work may be waiting (a command was queued): claim now rather than at the next poll. */
  poke(): void {
    this.poked = true;
    this.wake?.();
  }

  private sleep(ms: number): Promise<void> {
    if (this.poked) {
      this.poked = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.wake = null;
        resolve();
      }, ms);
      this.wake = () => {
        this.poked = false;
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
    });
  }

  private async claimLoop(): Promise<void> {
    let failures = 0;
    while (!this.stopping) {
      const free = this.deps.concurrency - this.inFlight.size;
      if (free <= 0) {
        // A finished command wakes this; a poke must not spin it while every slot is busy.
        this.poked = false;
        await this.sleep(this.deps.pollMs);
        continue;
      }
      let claimed: T[] = [];
      try {
        claimed = await this.deps.claim(free);
        failures = 0;
      } catch (error) {
        if (this.deps.isFatal?.(error)) {
          this.deps.log.error({ err: error }, 'the agent cannot claim commands any more; stopping');
          this.stopping = true;
          this.endWith(error);
          break;
        }
        failures += 1;
        this.deps.log.warn({ err: error, failures }, 'claiming commands failed; retrying');
      }
      for (const item of claimed) this.startItem(item);
      // A full batch means more may be waiting: ask again at once; else wait for the next poll.
      if (claimed.length < free || failures) await this.sleep(this.deps.pollMs * Math.min(2 ** failures, 30));
    }
  }

  private startItem(item: T): void {
    const done = this.deps
      .run(item, this.abort.signal)
      .catch(async (error: unknown) => {
        this.deps.log.error({ err: error, commandId: item.id }, 'running a command failed: reporting it as failed');
        // Otherwise the claim would be renewed with every heartbeat and its run never move on.
        await this.deps.abandon(item, failedRunResult(item)).catch((again: unknown) =>
          this.deps.log.warn({ err: again, commandId: item.id }, 'could not report the failed command; its lease will lapse'));
      })
      .finally(() => {
        this.inFlight.delete(item.id);
        this.wake?.();
      });
    this.inFlight.set(item.id, { item, done });
  }

  /** Stops claiming, lets running commands finish for `graceMs`, then aborts and reports the rest. */
  async stop(graceMs: number): Promise<void> {
    this.stopping = true;
    this.wake?.();
    await this.loop;
    const running = [...this.inFlight.values()];
    if (running.length) {
      let timer: NodeJS.Timeout | undefined;
      const graceOver = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), graceMs)));
      await Promise.race([Promise.all(running.map((r) => r.done)), graceOver]);
      clearTimeout(timer);
      const left = [...this.inFlight.values()];
      if (left.length) {
        this.abort.abort(new Error('the agent is stopping'));
        await Promise.all(
          left.map((r) =>
            this.deps.abandon(r.item, abandonedResult(r.item)).catch((error: unknown) =>
              this.deps.log.warn({ err: error, commandId: r.item.id }, 'could not report an abandoned command; its lease will lapse'),
            ),
          ),
        );
        this.deps.log.warn({ commands: left.map((r) => r.item.id) }, 'stopped with commands still running: reported as abandoned');
      }
    }
    if (this.renewTimer) clearInterval(this.renewTimer);
    this.endWith(null);
  }
}
