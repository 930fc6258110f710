import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fsSync from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { StartupError } from '../../ops/fatal';
import type { Binaries, RunAs } from './binaries';
import type { Cluster } from './cluster';
import { errno, type Log } from './common';

// ---- the postmaster, and initdb before it ----

/** Resolves when `promise` does or after `ms`; the timer never outlives it (no 30 s wait at exit). */
export async function within(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([promise, new Promise((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}

/**
 * A client backend's process title: `postgres: <user> <database> <host>(<port>) <state>` over TCP,
 * `postgres: <user> <database> [local] <state>` over the Unix socket the service uses.
 */
const CLIENT_BACKEND = /^postgres: \S+ \S+ (\[local\]|\S+\(\d+\)) /;

/**
 * How many client backends the postmaster still has. A pool's `end()` resolves when its sockets
 * close, but each backend exits a moment later: a fast shutdown sent in between makes PostgreSQL
 * log "terminating connection due to administrator command" for a session nobody uses any more.
 * Read from /proc (Linux); elsewhere 0, and the stop just goes ahead.
 */
function clientBackends(pid: number): number {
  try {
    const children = fsSync.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
    let count = 0;
    for (const child of children) {
      try {
        if (CLIENT_BACKEND.test(fsSync.readFileSync(`/proc/${child}/cmdline`, 'utf8').replace(/\0/g, ' '))) count += 1;
      } catch {
        // exited meanwhile
      }
    }
    return count;
  } catch {
    return 0;
  }
}

/** Waits (at most `ms`) for the sessions whose clients have already closed to leave. */
export async function sessionsGone(pid: number, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (clientBackends(pid) > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
}

export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return errno(error) === 'EPERM';
  }
}
async function waitExit(pid: number, ms: number): Promise<boolean> {
  for (let waited = 0; waited < ms; waited += 50) {
    if (!isRunning(pid)) return true;
    await sleep(50);
  }
  return !isRunning(pid);
}

/**
 * A postmaster still running on the cluster while we hold the lock belongs to a service that is
 * gone (SIGKILLed, crashed): an orphan, stopped before ours starts. A pid in postmaster.pid that
 * now belongs to another program (pid reuse) is left alone; only its stale file goes.
 */
export async function stopOrphan(clusterDir: string, log: Log): Promise<void> {
  const pidFile = path.join(clusterDir, 'postmaster.pid');
  const text = await fs.readFile(pidFile, 'utf8').catch(() => null);
  if (text === null) return;
  const pid = Number(text.split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0 || !isRunning(pid)) return; // stale: postgres removes it on start
  let cmdline: string | null = null;
  try {
    cmdline = fsSync.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    // no /proc: trust the pid file, as PostgreSQL itself does
  }
  if (cmdline !== null && !cmdline.split('\0').includes(clusterDir)) {
    await fs.rm(pidFile, { force: true });
    return;
  }
  log.warn({ pid, clusterDir }, 'an orphaned embedded PostgreSQL (its service is gone) still runs on the cluster; stopping it');
  process.kill(pid, 'SIGINT'); // fast shutdown
  if (await waitExit(pid, 15000)) return;
  process.kill(pid, 'SIGQUIT'); // immediate shutdown
  if (await waitExit(pid, 5000)) return;
  throw new StartupError(`the orphaned embedded PostgreSQL (pid ${pid}) on ${clusterDir} does not stop: kill it, then start again`);
}

/** Only what PostgreSQL needs: no secret of ours (ADMIN_TOKEN, SECRET_KEY...) in its environment. */
function postgresEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { LC_MESSAGES: 'C' };
  for (const [key, value] of Object.entries(process.env)) {
    if (key === 'PATH' || key === 'TZ' || key === 'LANG' || (key.startsWith('LC_') && key !== 'LC_MESSAGES')) env[key] = value;
  }
  return env;
}

export function runInitdb(bin: Binaries, cluster: Cluster, who: RunAs | null, password: string, log: Log): Promise<void> {
  return (async () => {
    await fs.mkdir(cluster.dir, { recursive: true, mode: 0o700 });
    if (who) await fs.chown(cluster.dir, who.uid, who.gid);
    // The password reaches initdb in a 0600 file its user owns, removed right after.
    const pwfile = path.join(cluster.home, `.pwfile-${randomBytes(6).toString('hex')}`);
    await fs.writeFile(pwfile, password + '\n', { mode: 0o600, flag: 'wx' });
    try {
      if (who) await fs.chown(pwfile, who.uid, who.gid);
      const args = [
        `--pgdata=${cluster.dir}`,
        '--auth=scram-sha-256',
        '--username=postgres',
        `--pwfile=${pwfile}`,
        '--encoding=UTF8',
        // The builtin provider needs no OS locale: the same cluster on every machine.
        '--no-locale',
        '--locale-provider=builtin',
        '--builtin-locale=C.UTF-8',
      ];
      const output = await new Promise<{ code: number | null; text: string }>((resolve, reject) => {
        const child = spawn(bin.initdb, args, { cwd: cluster.home, env: postgresEnv(), stdio: ['ignore', 'pipe', 'pipe'], ...(who ?? {}) });
        let text = '';
        child.stdout.on('data', (d: Buffer) => (text += d.toString()));
        child.stderr.on('data', (d: Buffer) => (text += d.toString()));
        child.once('error', reject);
        child.once('close', (code) => resolve({ code, text }));
      });
      log.debug({ postgres: output.text.trim() }, 'initdb');
      if (output.code !== 0) {
        const why = output.text.split('\n').find((l) => /error|fatal/i.test(l)) ?? output.text.trim().split('\n').pop();
        throw new StartupError(`initdb failed on ${cluster.dir}: ${why}`);
      }
    } catch (error) {
      if (errno(error) === 'EACCES') throw new StartupError(`cannot run ${bin.initdb} (${(error as Error).message}): set DATABASE_URL, or run from a folder the user can reach`);
      throw error;
    } finally {
      await fs.rm(pwfile, { force: true });
    }
  })();
}

/**
 * The postmaster runs detached, in a session and process group of its own: the signal a terminal
 * or a service manager sends to our group does not reach it, and we stop it ourselves, last.
 */
export function spawnPostgres(bin: Binaries, cluster: Cluster, who: RunAs | null, port: number, socket: string | null, log: Log, statStatements: boolean): Promise<ChildProcess> {
  // wal_buffers: the default (1/32 of shared_buffers, 4 MB) fills up within one bulk call's
  // statement (10,000 events and node updates write about 9 MB of WAL), and every time it is full
  // the backend stops to write WAL out itself: 275 such stops made the statement 450-520 ms
  // instead of 280-330 (auto_explain's "WAL: buffers full", npm run bench -- bulk). The WAL is
  // still flushed at every commit (fsync on).
  const args = ['-D', cluster.dir, '-p', String(port), '-c', 'listen_addresses=127.0.0.1', '-c', `unix_socket_directories=${socket ?? ''}`,
    '-c', 'max_connections=200', '-c', 'fsync=on', '-c', 'wal_buffers=32MB',
    ...(statStatements ? ['-c', 'shared_preload_libraries=pg_stat_statements', '-c', 'pg_stat_statements.track=all', '-c', 'pg_stat_statements.track_planning=on'] : [])];
  const child = spawn(bin.postgres, args, { cwd: cluster.home, env: postgresEnv(), detached: true, stdio: ['ignore', 'pipe', 'pipe'], ...(who ?? {}) });
  return new Promise((resolve, reject) => {
    let tail: string[] = [];
    let ready = false;
    const onLine = (chunk: Buffer) => {
      for (const line of chunk.toString().split('\n')) {
        if (!line.trim()) continue;
        log.debug({ postgres: line.trim() }, 'postgres');
        if (!ready) tail = [...tail.slice(-20), line];
        if (!ready && line.includes('database system is ready to accept connections')) {
          ready = true;
          clearTimeout(timer);
          resolve(child);
        }
      }
    };
    child.stdout!.on('data', onLine);
    child.stderr!.on('data', onLine);
    const timer = setTimeout(() => {
      child.kill('SIGQUIT');
      reject(new StartupError(`embedded PostgreSQL on ${cluster.dir} not ready within 60 s`));
    }, 60000);
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(new StartupError(`cannot run ${bin.postgres}: ${error.message}`));
    });
    // 'close', not 'exit': the FATAL line that says why may still be in the pipe at 'exit'.
    child.once('close', (code, signal) => {
      if (ready) return;
      clearTimeout(timer);
      const why = tail.find((l) => /FATAL|PANIC/.test(l)) ?? tail.at(-1) ?? `exit ${code ?? signal}`;
      const hint = /could not bind|Address already in use/.test(why) ? ` (is EMBEDDED_PG_PORT ${port} taken? set another one)` : '';
      reject(new StartupError(`embedded PostgreSQL did not start: ${why.replace(/^.*?(FATAL|PANIC):\s*/, '')}${hint}`));
    });
  });
}

export interface Running {
  /** Stops the postmaster: fast shutdown, then immediate, then a kill, each after its wait. */
  halt(waitMs: number, opts?: { letSessionsEnd?: boolean }): Promise<void>;
}

/** Every postmaster this process started and has not stopped yet (for {@link stopEmbeddedPostgresNow}). */
export const running = new Set<Running>();

/**
 * For a second stop signal while the drain is still running: the database goes now (fast shutdown,
 * ending the connections still open) so that exiting right after leaves no orphan behind.
 */
export async function stopEmbeddedPostgresNow(): Promise<void> {
  await Promise.all([...running].map((r) => r.halt(5000)));
}
