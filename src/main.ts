import './production-env';
import { startApp, type App } from './app';
import { loadConfig } from './config';
import { createLogger } from './ops/log';
import { fatalLine } from './ops/fatal';
import { stopEmbeddedPostgresNow } from './db/embedded/process';
import { runAgentProcess } from './agent/process';
import { defaultDriverRegistry } from '../clients/bmc/defaults';
import { databaseFailure } from './db/failure';

/**
 * A terminal's Ctrl-C (or systemd's stop) signals the whole group, and `npm start` forwards the
 * one it got to us as well: the same stop request arrives twice within milliseconds. A signal
 * within this window of the first is that echo; a later one is someone asking again.
 */
const REPEAT_WINDOW_MS = 1000;

/**
 * pino writes asynchronously: exiting with a write in flight would put the lines that follow it
 * first, or lose them. The last lines of a stop are the ones an operator reads.
 */
function exitAfterFlush(log: ReturnType<typeof createLogger>, code: number): void {
  const exit = () => process.exit(code);
  setTimeout(exit, 2000).unref();
  log.flush(exit);
}

async function main(): Promise<void> {
  const config = loadConfig();
  const log = createLogger(config.logLevel);
  if (config.role === 'agent') {
    // A remote site agent: no database, no listener; it handles its own signals.
    const code = await runAgentProcess(config, log, defaultDriverRegistry());
    exitAfterFlush(log, code);
    return;
  }
  // Handlers first: a signal during start-up (initdb takes seconds) must not kill us with the
  // detached PostgreSQL left running; the stop waits for the start to finish instead.
  let starting: Promise<App> | undefined;
  let firstAt: number | null = null;
  let forced = false;
  const shutdown = (signal: NodeJS.Signals) => {
    const now = Date.now();
    if (firstAt === null) {
      firstAt = now;
      log.info({ signal }, 'shutting down: draining HTTP, stopping workers, then the database');
      starting!
        .then((app) => app.stop())
        .then(
          () => {
            log.info('stopped');
            exitAfterFlush(log, 0);
          },
          (error: unknown) => {
            log.error({ err: error }, 'shutdown failed');
            void stopEmbeddedPostgresNow().finally(() => exitAfterFlush(log, 1));
          },
        );
      return;
    }
    if (now - firstAt < REPEAT_WINDOW_MS) {
      log.debug({ signal }, 'the same stop request again (the group and npm both signal us); still draining');
      return;
    }
    if (forced) return;
    forced = true;
    log.warn({ signal }, 'second signal: stopping the embedded PostgreSQL now and exiting without finishing the drain');
    void stopEmbeddedPostgresNow().finally(() => exitAfterFlush(log, 1));
  };
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, () => shutdown(signal));
  // No database error ends the process: every connection and statement of ours handles its
  // errors, and this is the net under them (a connection's 'error' event nobody listened to, a
  // rejection nobody awaited). The database comes back; what failed is retried by its owner (the
  // sweeps, the queue). Anything else still ends the process, as Node does by default.
  process.on('uncaughtException', (error, origin) => {
    if (databaseFailure(error)) {
      log.error({ err: error, origin }, 'a database error nobody handled; carrying on');
      return;
    }
    log.fatal({ err: error, origin }, 'uncaught exception');
    void stopEmbeddedPostgresNow().finally(() => exitAfterFlush(log, 1));
  });
  process.on('unhandledRejection', (reason) => {
    if (databaseFailure(reason)) {
      log.error({ err: reason }, 'a database error nobody awaited; carrying on');
      return;
    }
    log.fatal({ err: reason }, 'unhandled rejection');
    void stopEmbeddedPostgresNow().finally(() => exitAfterFlush(log, 1));
  });
  starting = startApp(config, { log });
  await starting;
}

main().catch((error: unknown) => {
  // Start-up failures are configuration problems far more often than bugs: one line, what failed.
  console.error(fatalLine(error));
  void stopEmbeddedPostgresNow().finally(() => process.exit(1));
});
