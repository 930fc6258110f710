import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import YAML from 'yaml';
import net from 'node:net';
import { processesMentioning } from './service';

/*
 * A Patroni cluster on loopback for tests and benches (issue 24): one etcd, two PostgreSQL members
 * (a primary and a synchronous standby, synchronous_mode: true), each member's Patroni REST API on
 * a port of its own, everything under one temporary folder this helper owns and removes.
 *
 * The PostgreSQL binaries are Debian's 15 (postgresql-15, /usr/lib/postgresql/15/bin), not the
 * embedded package's 18: Debian's patroni 3.0.2 predates PostgreSQL 16 and is built and tested by
 * Debian against its own 15 (it knows 15's parameters and recovery settings); the service's SQL
 * needs 14 or newer and its migrations run on 15 (test/ha-failover.test.ts applies them here).
 *
 * As root, PostgreSQL refuses to run: Patroni (and so PostgreSQL) and etcd run as the `postgres`
 * user then, as the embedded PostgreSQL does (src/db/embedded/binaries.ts).
 */

export const PG_BIN_DIR = '/usr/lib/postgresql/15/bin';
const PATRONI = '/usr/bin/patroni';
const ETCD = '/usr/bin/etcd';

/** Why a Patroni cluster cannot be started on this machine (a test's skip message), or null. */
export function patroniMissing(): string | null {
  const missing = [PATRONI, ETCD, path.join(PG_BIN_DIR, 'postgres')].filter((f) => !fs.existsSync(f));
  return missing.length ? `not installed: ${missing.join(', ')} (apt-get install patroni etcd-server postgresql-15)` : null;
}

export interface Member {
  name: string;
  /** PostgreSQL's port on 127.0.0.1. */
  port: number;
  /** Patroni's REST API port on 127.0.0.1. */
  restPort: number;
  dataDir: string;
}

export interface PatroniCluster {
  dir: string;
  members: Member[];
  /** The application's database and role (owner of it, not a superuser). */
  database: string;
  user: string;
  password: string;
  /** libpq's multi-host URL naming every member, read-write only. */
  url: string;
  /** A single-host URL of one member (superuser: `admin`). */
  memberUrl(m: Member, opts?: { admin?: boolean }): string;
  /** The member whose Patroni answers GET /primary with 200 (null when none does). */
  primary(): Promise<Member | null>;
  /**
   * SIGKILLs the primary's postmaster (primary_start_timeout is 0: Patroni fails over instead of
   * restarting it) and waits until the other member is a writable primary. Returns the new primary.
   */
  killPrimary(opts?: { waitMs?: number }): Promise<{ killed: Member; primary: Member; killedAt: number }>;
  /** A planned switchover through Patroni's REST API to the standby; waits until it is a writable primary. */
  switchover(opts?: { waitMs?: number }): Promise<{ from: Member; primary: Member }>;
  /** Waits until a primary is writable and the other member streams from it as its synchronous standby. */
  waitHealthy(waitMs?: number): Promise<Member>;
  /** Stops Patroni (which stops PostgreSQL) and etcd, kills what is left, removes the folder. */
  stop(): Promise<void>;
  /** Every live process whose command line names the cluster's folder (empty after stop). */
  leftovers(): { pid: number; cmdline: string }[];
  /** The last lines Patroni and etcd wrote, for a failure's message. */
  logs(): string;
}

/**
 * A free port on 127.0.0.1 in 31000..32699: below Linux's ephemeral range (32768 and up), where
 * outgoing connections take their local ports and could take a member's port in the seconds
 * before its PostgreSQL binds it; and apart from the ranges the other suites use.
 */
const taken = new Set<number>();
async function clusterPort(): Promise<number> {
  for (let tries = 0; tries < 200; tries += 1) {
    const port = 31000 + Math.floor(Math.random() * 1700);
    if (taken.has(port)) continue;
    const free = await new Promise<boolean>((resolve) => {
      const server = net.createServer();
      server.unref();
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
    });
    if (free) {
      taken.add(port);
      return port;
    }
  }
  throw new Error('no free port in 31000..32699 on 127.0.0.1');
}

interface RunAs { uid: number; gid: number }

function runAs(): RunAs | null {
  if (process.getuid?.() !== 0) return null;
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
  return { uid: id('-u'), gid: id('-g') };
}

/** Only what Patroni and etcd need: none of the test's secrets. */
function childEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { LC_ALL: 'C.UTF-8', LANG: 'C.UTF-8', HOME: '/tmp' };
  if (process.env.PATH) env.PATH = process.env.PATH;
  return env;
}


async function httpStatus(url: string, init?: RequestInit, timeoutMs = 2000): Promise<{ status: number; body: string } | null> {
  try {
    const res = await fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
    return { status: res.status, body: await res.text() };
  } catch {
    return null;
  }
}

/** Collects a child's output, the last 200 lines. */
function tail(child: ChildProcess, into: string[], prefix: string): void {
  const add = (d: Buffer) => {
    for (const line of d.toString().split('\n')) if (line.trim()) into.push(`${prefix} ${line}`);
    if (into.length > 400) into.splice(0, into.length - 200);
  };
  child.stdout?.on('data', add);
  child.stderr?.on('data', add);
}

export async function startPatroniCluster(opts: { waitMs?: number; database?: string } = {}): Promise<PatroniCluster> {
  const why = patroniMissing();
  if (why) throw new Error(why);
  const who = runAs();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'metal-ha-'));
  fs.chmodSync(dir, 0o700);
  if (who) fs.chownSync(dir, who.uid, who.gid);
  const own = (p: string) => {
    if (who) fs.chownSync(p, who.uid, who.gid);
  };
  const children: ChildProcess[] = [];
  const log: string[] = [];
  const scope = `metal-ha-${randomBytes(4).toString('hex')}`;
  const superPassword = randomBytes(12).toString('hex');
  const replPassword = randomBytes(12).toString('hex');
  const database = opts.database ?? 'metal';
  const user = 'metal';
  const password = randomBytes(12).toString('hex');

  const spawnChild = (cmd: string, args: string[], prefix: string) => {
    const child = spawn(cmd, args, { cwd: dir, env: childEnv(), stdio: ['ignore', 'pipe', 'pipe'], detached: true, ...(who ?? {}) });
    tail(child, log, prefix);
    children.push(child);
    return child;
  };

  const members: Member[] = [];
  const ports: number[] = [];
  const stop = async () => {
    // Patroni stops its PostgreSQL on SIGTERM (fast shutdown); etcd last, so that Patroni can say goodbye.
    const patronis = children.slice(1);
    for (const c of patronis) if (c.exitCode === null && c.signalCode === null) c.kill('SIGTERM');
    const exited = (c: ChildProcess) => c.exitCode !== null || c.signalCode !== null;
    for (let waited = 0; waited < 15000 && patronis.some((c) => !exited(c)); waited += 100) await sleep(100);
    for (const c of children) if (!exited(c)) c.kill('SIGKILL');
    // A postmaster Patroni could not stop, or one left by a killed Patroni: named by its data folder.
    for (const p of processesMentioning(dir)) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    for (let waited = 0; waited < 5000 && (children.some((c) => !exited(c)) || processesMentioning(dir).length); waited += 100) await sleep(100);
    fs.rmSync(dir, { recursive: true, force: true });
    for (const p of ports) taken.delete(p);
  };

  try {
    const [etcdClient, etcdPeer] = [await clusterPort(), await clusterPort()];
    ports.push(etcdClient, etcdPeer);
    const etcdDir = path.join(dir, 'etcd');
    fs.mkdirSync(etcdDir, { mode: 0o700 });
    own(etcdDir);
    spawnChild(ETCD, [
      '--name', 'e1', '--data-dir', etcdDir,
      '--listen-client-urls', `http://127.0.0.1:${etcdClient}`, '--advertise-client-urls', `http://127.0.0.1:${etcdClient}`,
      '--listen-peer-urls', `http://127.0.0.1:${etcdPeer}`, '--initial-advertise-peer-urls', `http://127.0.0.1:${etcdPeer}`,
      '--initial-cluster', `e1=http://127.0.0.1:${etcdPeer}`, '--initial-cluster-state', 'new', '--initial-cluster-token', scope,
      '--log-level', 'warn',
    ], '[etcd]');
    for (let waited = 0; ; waited += 100) {
      const health = await httpStatus(`http://127.0.0.1:${etcdClient}/health`);
      if (health?.status === 200) break;
      if (waited > 20000) throw new Error('etcd did not answer within 20 s');
      await sleep(100);
    }

    for (const name of ['m1', 'm2']) {
      const memberDir = path.join(dir, name);
      fs.mkdirSync(memberDir, { mode: 0o700 });
      own(memberDir);
      members.push({ name, port: await clusterPort(), restPort: await clusterPort(), dataDir: path.join(memberDir, 'data') });
      ports.push(members.at(-1)!.port, members.at(-1)!.restPort);
    }
    for (const m of members) {
      const memberDir = path.dirname(m.dataDir);
      const config = {
        scope,
        name: m.name,
        restapi: { listen: `127.0.0.1:${m.restPort}`, connect_address: `127.0.0.1:${m.restPort}` },
        etcd3: { hosts: [`127.0.0.1:${etcdClient}`] },
        bootstrap: {
          dcs: {
            // loop_wait + 2 × retry_timeout <= ttl (Patroni's rule). Short: a failover in seconds.
            ttl: 10, loop_wait: 1, retry_timeout: 4,
            maximum_lag_on_failover: 16 * 1024 * 1024,
            synchronous_mode: true,
            // A crashed primary is failed over at once, not restarted in place (Patroni's default waits 300 s).
            primary_start_timeout: 0,
            postgresql: {
              use_pg_rewind: true,
              use_slots: true,
              parameters: {
                max_connections: 200, wal_level: 'replica', hot_standby: 'on', wal_log_hints: 'on',
                max_wal_senders: 5, max_replication_slots: 5, wal_keep_size: '128MB', wal_buffers: '32MB',
              },
            },
          },
          initdb: [{ encoding: 'UTF8' }, 'no-locale', { 'auth-host': 'scram-sha-256' }, { 'auth-local': 'trust' }],
        },
        postgresql: {
          listen: `127.0.0.1:${m.port}`,
          connect_address: `127.0.0.1:${m.port}`,
          data_dir: m.dataDir,
          bin_dir: PG_BIN_DIR,
          pgpass: path.join(memberDir, 'pgpass'),
          authentication: {
            superuser: { username: 'postgres', password: superPassword },
            replication: { username: 'replicator', password: replPassword },
          },
          parameters: { unix_socket_directories: memberDir },
          pg_hba: [
            'local all all trust',
            'host replication replicator 127.0.0.1/32 scram-sha-256',
            'host all all 127.0.0.1/32 scram-sha-256',
          ],
          // A former primary that cannot be rewound is cloned again rather than left out.
          remove_data_directory_on_rewind_failure: true,
          remove_data_directory_on_diverged_timelines: true,
        },
        tags: { nofailover: false, noloadbalance: false, clonefrom: false, nosync: false },
        log: { level: 'INFO' },
      };
      const file = path.join(memberDir, 'patroni.yml');
      fs.writeFileSync(file, YAML.stringify(config), { mode: 0o600 });
      own(file);
    }
    // The first member bootstraps alone, then the second clones it.
    spawnChild(PATRONI, [path.join(dir, 'm1', 'patroni.yml')], '[m1]');
    const started = Date.now();
    const waitMs = opts.waitMs ?? 60000;
    for (;;) {
      if ((await httpStatus(`http://127.0.0.1:${members[0]!.restPort}/primary`))?.status === 200) break;
      if (Date.now() - started > waitMs) throw new Error(`the first member did not become primary within ${waitMs} ms:\n${log.slice(-40).join('\n')}`);
      await sleep(200);
    }
    spawnChild(PATRONI, [path.join(dir, 'm2', 'patroni.yml')], '[m2]');

    const memberUrl = (m: Member, o: { admin?: boolean } = {}) => o.admin
      ? `postgresql://postgres:${superPassword}@127.0.0.1:${m.port}/postgres`
      : `postgresql://${user}:${password}@127.0.0.1:${m.port}/${database}`;

    const primary = async (): Promise<Member | null> => {
      for (const m of members) {
        if ((await httpStatus(`http://127.0.0.1:${m.restPort}/primary`))?.status === 200) return m;
      }
      return null;
    };

    /** The member's view: in recovery or not, and its synchronous streaming standbys (on a primary). */
    const inspect = async (m: Member) => {
      const c = new pg.Client({ connectionString: memberUrl(m, { admin: true }), connectionTimeoutMillis: 2000 });
      c.on('error', () => undefined);
      try {
        await c.connect();
        const { rows } = await c.query<{ recovery: boolean; ro: string; sync: number }>(
          `SELECT pg_is_in_recovery() AS recovery, current_setting('transaction_read_only') AS ro,
                  (SELECT count(*)::int FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = 'sync') AS sync`);
        return rows[0]!;
      } catch {
        return null;
      } finally {
        await c.end().catch(() => undefined);
      }
    };

    /**
     * The member Patroni's DCS names the synchronous standby (its /sync key, which it writes a
     * moment after PostgreSQL's synchronous_standby_names): only that one may be failed over to.
     */
    const syncStandby = async (leader: Member): Promise<Member | null> => {
      const res = await httpStatus(`http://127.0.0.1:${leader.restPort}/cluster`);
      if (res?.status !== 200) return null;
      const cluster = JSON.parse(res.body) as { members?: { name: string; role: string; state: string }[] };
      const sync = cluster.members?.find((m) => m.role === 'sync_standby' && (m.state === 'running' || m.state === 'streaming'));
      return members.find((m) => m.name === sync?.name) ?? null;
    };

    const waitPrimary = async (not: Member | null, waitMs: number, sync: boolean): Promise<Member> => {
      const deadline = Date.now() + waitMs;
      for (;;) {
        const p = await primary();
        if (p && p !== not) {
          const state = await inspect(p);
          if (state && !state.recovery && state.ro === 'off' && (!sync || (state.sync > 0 && (await syncStandby(p)) !== null))) return p;
        }
        if (Date.now() > deadline) throw new Error(`no writable primary${sync ? ' with a synchronous standby' : ''}${not ? ` other than ${not.name}` : ''} within ${waitMs} ms:\n${log.slice(-40).join('\n')}`);
        await sleep(200);
      }
    };

    const first = await waitPrimary(null, Math.max(5000, waitMs - (Date.now() - started)), true);
    // The application's role and database (replicated to the standby like any write).
    const admin = new pg.Client({ connectionString: memberUrl(first, { admin: true }) });
    await admin.connect();
    try {
      await admin.query(`CREATE ROLE ${user} LOGIN PASSWORD '${password}'`);
      await admin.query(`CREATE DATABASE ${database} OWNER ${user}`);
    } finally {
      await admin.end();
    }

    const hostList = members.map((m) => `127.0.0.1:${m.port}`).join(',');
    return {
      dir,
      members,
      database,
      user,
      password,
      url: `postgresql://${user}:${password}@${hostList}/${database}?target_session_attrs=read-write`,
      memberUrl,
      primary,
      waitHealthy: (ms = 60000) => waitPrimary(null, ms, true),
      async killPrimary(o = {}) {
        const killed = await primary();
        if (!killed) throw new Error('no primary to kill');
        const pid = Number(fs.readFileSync(path.join(killed.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
        const killedAt = Date.now();
        process.kill(pid, 'SIGKILL');
        const next = await waitPrimary(killed, o.waitMs ?? 60000, false);
        return { killed, primary: next, killedAt };
      },
      async switchover(o = {}) {
        const deadline = Date.now() + (o.waitMs ?? 60000);
        // Patroni refuses (412) while the standby is not yet its synchronous standby, or while its
        // DCS view of the leader lags: ask again until it accepts.
        for (;;) {
          const from = await primary();
          const candidate = members.find((m) => m !== from);
          if (from && candidate) {
            const res = await httpStatus(`http://127.0.0.1:${from.restPort}/switchover`, {
              method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ leader: from.name, candidate: candidate.name }),
            }, 60000); // Patroni answers when the switchover is done (or its own wait ran out)
            // 503 "status unknown": it did not end within Patroni's wait, but it is under way.
            if (res && (res.status === 200 || (res.status === 503 && /unknown/.test(res.body)))) {
              const next = await waitPrimary(from, Math.max(1000, deadline - Date.now()), false);
              return { from, primary: next };
            }
            if (Date.now() > deadline) throw new Error(`Patroni refused the switchover from ${from.name} to ${candidate.name}: ${res?.status} ${res?.body}`);
          } else if (Date.now() > deadline) {
            throw new Error('no primary to switch over from');
          }
          await sleep(500);
        }
      },
      stop,
      leftovers: () => processesMentioning(dir),
      logs: () => log.join('\n'),
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
