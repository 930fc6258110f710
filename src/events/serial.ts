/**
 * Runs a task one at a time. A call while it runs asks for exactly one more run after it, however
 * many calls came: the shape of "a notification arrived, go and read", where a burst of
 * notifications needs one more read, not one each.
 */
export class SerialTask {
  private running: Promise<void> | null = null;
  private again = false;

  constructor(
    private task: () => Promise<void>,
    /** false once its owner stops: no run is started after that. */
    private active: () => boolean,
  ) {}

  /** Starts a run, or asks for one more; resolves when the run it joined ends. */
  run(): Promise<void> {
    if (!this.active()) return Promise.resolve();
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = this.task().finally(() => {
      this.running = null;
      if (this.again) {
        this.again = false;
        void this.run();
      }
    });
    return this.running;
  }

  /** The run in progress, if any (to wait for it at shutdown). */
  get current(): Promise<void> | null {
    return this.running;
  }
}
