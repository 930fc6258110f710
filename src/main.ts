import './production-env';
import { startApp } from './app';
import { loadConfig } from './config';
import { createLogger } from './ops/log';

async function main(): Promise<void> {
  const config = loadConfig();
  const log = createLogger(config.logLevel);
  const app = await startApp(config, { log });
  let signals = 0;
  const shutdown = (signal: string) => {
    signals += 1;
    if (signals > 1) {
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    log.info({ signal }, 'shutting down: draining HTTP, stopping workers, stopping the database');
    app.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        log.error({ err: error }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

main().catch((error: unknown) => {
  // Start-up failures are configuration problems far more often than bugs: say what failed, plainly.
  console.error(JSON.stringify({ level: 'fatal', msg: 'start-up failed', error: (error as Error).message }));
  process.exit(1);
});
