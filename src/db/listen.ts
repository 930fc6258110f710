import type { Logger } from 'pino';
import pg from 'pg';

/**
 * One LISTEN connection on `channel`: `onNotify` runs for every notification. When the connection
 * drops, the caller's polling carries on and it reconnects after a second. For the loops that would
 * otherwise only poll: the built-in agent (metal_command_queued) and the metal.advance fetch loops
 * (metal_advance_queued).
 */
export function listen(databaseUrl: string, channel: string, log: Logger, onNotify: () => void, applicationName: string): { stop(): Promise<void> } {
  let stopped = false;
  let client: pg.Client | null = null;
  const connect = async () => {
    const c = new pg.Client({ connectionString: databaseUrl, application_name: applicationName });
    c.on('notification', onNotify);
    c.on('error', (error) => {
      log.warn({ err: error, channel }, 'a LISTEN connection was lost; polling until it is back');
      void c.end().catch(() => undefined);
      if (client === c) client = null;
      if (!stopped) setTimeout(attempt, 1000).unref();
    });
    await c.connect();
    await c.query(`LISTEN ${channel}`);
    if (stopped) {
      await c.end();
      return;
    }
    client = c;
  };
  let started: Promise<void> = Promise.resolve();
  const attempt = () => {
    started = connect().catch((error: unknown) => {
      log.warn({ err: error, channel }, 'could not LISTEN; polling, and trying again in a second');
      if (!stopped) setTimeout(attempt, 1000).unref();
    });
  };
  attempt();
  return {
    async stop() {
      stopped = true;
      await started;
      await client?.end().catch(() => undefined);
      client = null;
    },
  };
}
