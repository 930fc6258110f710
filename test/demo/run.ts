/**
 * `npm run demo -- --machines 20` (test/demo/demo.ts says what it does). The options are checked
 * before the service's modules load, so a bad one is refused at once, with nothing started.
 */
import { parseDemoArgs, USAGE, UsageError, type DemoOptions } from './options';

async function entry(): Promise<void> {
  let opts: DemoOptions;
  try {
    opts = parseDemoArgs(process.argv.slice(2));
  } catch (error) {
    if (error instanceof UsageError) {
      if (error.message) console.error(`demo: ${error.message}\n`);
      console.error(USAGE);
      process.exit(error.message ? 2 : 0);
    }
    throw error;
  }
  const { main, Interrupted } = await import('./demo.js');
  const { stopEmbeddedPostgresNow } = await import('../../src/db/embedded/process.js');
  const controller = new AbortController();
  let stopping: (() => Promise<void>) | null = null;
  let firstSignalAt: number | null = null;
  // A terminal's Ctrl-C reaches the whole group and npm forwards it too: the same request twice
  // within milliseconds. A later one means "now": PostgreSQL is halted and the temp dir removed.
  const onSignal = (sig: NodeJS.Signals) => {
    const now = Date.now();
    if (firstSignalAt === null) {
      firstSignalAt = now;
      console.log(`\n${sig}: stopping the demo (simulator, service, embedded PostgreSQL)...`);
      controller.abort();
      return;
    }
    if (now - firstSignalAt < 1000) return;
    console.log(`${sig} again: halting now`);
    void stopEmbeddedPostgresNow().finally(() => {
      void (stopping ? stopping() : Promise.resolve()).catch(() => undefined).finally(() => process.exit(130));
      setTimeout(() => process.exit(130), 3000).unref();
    });
  };
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => onSignal(sig));
  main(opts, controller.signal, (stop) => { stopping = stop; }).then(
    // With --hold, Ctrl-C after the summary is how the demo ends: its own exit code, not 130.
    (code) => process.exit(controller.signal.aborted && !opts.hold ? 130 : code),
    (error: unknown) => {
      if (error instanceof Interrupted || controller.signal.aborted) {
        console.log('interrupted: everything the demo started is stopped');
        process.exit(130);
      }
      console.error(`demo failed: ${error instanceof Error ? error.message : String(error)}`);
      void stopEmbeddedPostgresNow().finally(() => process.exit(1));
    },
  );
}

void entry();
