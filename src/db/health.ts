import { databaseFailure } from './failure';

/**
 * How long after a write refused for lack of storage (disk full or failing, read-only: see
 * src/db/failure.ts) the process still calls its writes failing. A full disk refuses every write,
 * so while it lasts every write attempt (the engine's, the sweep's, a request's) renews this; once
 * writes succeed again the window runs out and /readyz is ready again.
 */
export const STORAGE_FAILURE_WINDOW_MS = 15_000;

/** What this process has seen of its database's health, for /readyz. */
export class DatabaseHealth {
  private storageFailedAt: number | null = null;

  constructor(private readonly windowMs = STORAGE_FAILURE_WINDOW_MS, private readonly now: () => number = Date.now) {}

  /** Every failed statement passes here; only storage failures are remembered. */
  observe(error: unknown): void {
    if (databaseFailure(error) === 'storage') this.storageFailedAt = this.now();
  }

  /** Whether a write was refused for lack of storage within the window. */
  get writesFailing(): boolean {
    return this.storageFailedAt !== null && this.now() - this.storageFailedAt < this.windowMs;
  }
}
