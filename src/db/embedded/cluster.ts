import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { StartupError } from '../../ops/fatal';
import { ensureSystemDir, firstClosed, mkdirOpen, type RunAs } from './binaries';
import type { Log } from './common';

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

export interface Cluster {
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
export async function locateCluster(dataDir: string, who: RunAs | null, systemDir: string, log: Log): Promise<Cluster> {
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
