/**
 * Issue 21 item 1: the service outlives its PostgreSQL's bad days. The service runs as its own
 * process (the built `main.js`, ROLE all: API, engine, built-in site agent) on a PostgreSQL this
 * test starts itself, given as an external DATABASE_URL; simulated Redfish machines go through
 * enroll -> inspect -> commission while the test sends requests and, meanwhile:
 *   - terminates every backend of the service (pg_terminate_backend),
 *   - SIGKILLs one backend (as the OOM killer does: the postmaster then resets every connection),
 *   - stops PostgreSQL with `pg_ctl stop -m fast` (REST, GraphQL and /readyz answer 503 meanwhile,
 *     naming the database but not where it is) and starts it again,
 *   - restarts it with `pg_ctl restart -m immediate`.
 * The process never exits; /readyz is ready within 2 s of each return; LISTEN is in place again;
 * every machine ends ready with no run left active, every event numbered, and no destructive
 * call accepted twice.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import type { EmbeddedDatabase } from '../src/db/embedded';
import { LISTEN_APPLICATION } from '../src/db/listen';
import { loadConfig } from '../src/config';
import { fromRoot } from '../src/paths';
import { rest, gql } from './helpers/client';
import { randomPort, spawnService, waitReady, type Service } from './helpers/service';
import { startMachineSim, type MachineSim } from './sim/machine';

jest.setTimeout(120_000);

const run = promisify(execFile);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let dir: string;
let db: EmbeddedDatabase;
let service: Service | undefined;
let sim: MachineSim | undefined;
let admin: pg.Client | null = null;
let pgCtl: string;
let runAs: { uid: number; gid: number } | null = null;

/** pg_ctl of the binaries the cluster runs, as the user PostgreSQL runs as. */
async function ctl(...args: string[]): Promise<void> {
  // postmaster.opts keeps only -D: the port and the socket folder go again (as embedded.ts gives them).
  const u = new URL(db.url);
  const options = args[0] === 'stop' ? [] : ['-l', path.join(db.clusterDir, 'chaos.log'), '-o', `-p ${u.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=${u.searchParams.get('host') ?? ''}`];
  await run(pgCtl, ['-D', db.clusterDir, '-w', '-t', '30', ...args, ...options], { cwd: db.clusterDir, env: { PATH: process.env.PATH, LC_MESSAGES: 'C' }, ...(runAs ?? {}) });
}


/**
 * src/db/embedded.ts's startEmbeddedPostgres in a process of its own: it imports the binaries'
 * package (ESM), which jest's module system does not. The process keeps running until the end.
 */
async function startPostgres(dataDir: string, port: number): Promise<EmbeddedDatabase> {
  const script = `
    const { startEmbeddedPostgres } = require(${JSON.stringify(fromRoot('dist', 'src', 'db', 'embedded.js'))});
    const log = { info() {}, warn() {}, error() {}, debug() {} };
    startEmbeddedPostgres({ dataDir: ${JSON.stringify(dataDir)}, port: ${port}, persistent: false, systemDir: ${JSON.stringify(loadConfig().embeddedPgSystemDir)}, log })
      .then((db) => { console.log(JSON.stringify({ url: db.url, clusterDir: db.clusterDir, pid: db.pid })); process.stdin.resume(); process.stdin.on('end', () => db.stop().finally(() => process.exit(0))); },
            (error) => { console.error(String(error)); process.exit(1); });`;
  holder = spawn(process.execPath, ['-e', script], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  holder.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const line = await new Promise<string>((resolve, reject) => {
    holder!.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('\n')) resolve(out.split('\n')[0]!);
    });
    holder!.once('exit', () => reject(new Error(`PostgreSQL did not start: ${err}`)));
  });
  const started = JSON.parse(line) as { url: string; clusterDir: string; pid: number };
  return {
    ...started,
    stop: async () => {
      const gone = new Promise((resolve) => holder!.once('exit', resolve));
      holder!.stdin!.end();
      await gone;
    },
  };
}
let holder: ChildProcess | undefined;
/** The test's request loop runs while this is set (cleared at the end, or by afterAll after a failure). */
let loading = false;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'metal-chaos-'));
  db = await startPostgres(path.join(dir, 'pgdata'), randomPort(27000));
  pgCtl = path.join(path.dirname(fs.readlinkSync(`/proc/${db.pid}/exe`)), 'pg_ctl');
  if (process.getuid?.() === 0) {
    const st = fs.statSync(db.clusterDir);
    runAs = { uid: st.uid, gid: st.gid };
  }
});

afterAll(async () => {
  loading = false;
  await sim?.stop();
  if (service && service.proc.exitCode === null && service.proc.signalCode === null) {
    service.signalGroup('SIGKILL');
    await service.exited;
  }
  await admin?.end().catch(() => undefined);
  // A postmaster pg_ctl started is not the one startEmbeddedPostgres watches: stop it by pg_ctl.
  if (db) {
    await ctl('stop', '-m', 'immediate').catch(() => undefined);
    await db.stop().catch(() => undefined);
  }
  if (holder && holder.exitCode === null) holder.kill('SIGKILL');
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('PostgreSQL killed and restarted under load', () => {
  it('the service lives through it, answers 503 meanwhile and resumes every workflow', async () => {
    if (!fs.existsSync(fromRoot('dist', 'src', 'main.js'))) throw new Error('run `npm run build` first (npm test does)');
    const port = randomPort(26000);
    const url = `http://127.0.0.1:${port}`;
    const adminToken = `chaos-${randomBytes(12).toString('hex')}`;
    const env: NodeJS.ProcessEnv = {
      ...process.env, DATABASE_URL: db.url, PORT: String(port), HOST: '127.0.0.1', ROLE: 'all', ADMIN_TOKEN: adminToken,
      SECRET_KEY: randomBytes(32).toString('base64'), DATA_DIR: path.join(dir, 'data'), LOG_LEVEL: 'warn',
      AGENT_POLL_MS: '200', WORKFLOW_LEASE_MS: '3000', AGENT_LEASE_MS: '5000', QUEUE_POLL_SECONDS: '1', TOKEN_CACHE_MS: '0',
    };
    service = spawnService(process.execPath, [fromRoot('dist', 'src', 'main.js')], { cwd: fromRoot(), env });
    await waitReady(url, 60_000, service);
    const alive = () => expect({ exit: service!.proc.exitCode, signal: service!.proc.signalCode, output: service!.proc.exitCode === null ? '' : service!.output() }).toEqual({ exit: null, signal: null, output: '' });

    const u = new URL(db.url);
    const dbName = u.pathname.slice(1);
    const socket = u.searchParams.get('host') ?? u.hostname;
    const connectAdmin = async () => {
      await admin?.end().catch(() => undefined);
      admin = new pg.Client({ connectionString: db.url, application_name: 'chaos-test' });
      admin.on('error', () => undefined);
      await admin.connect();
    };
    await connectAdmin();

    // A tenant, a pool and a token of its own, over the API.
    const api = (method: string, p: string, body?: unknown) => rest(url, adminToken, method, p, body);
    const tenant = await gql(url, adminToken, 'mutation { createTenant(input: { name: "chaos" }) { id } }');
    const tenantId = tenant.data?.createTenant?.id as string | undefined;
    expect(tenantId).toEqual(expect.any(String));
    const s = await gql(url, adminToken, `mutation { createSite(input: { tenantId: "${tenantId}", name: "s1" }) { id } }`);
    const siteId = s.data?.createSite?.id as string;
    const p = await gql(url, adminToken, `mutation { createPool(input: { siteId: "${siteId}", name: "p1" }) { id } }`);
    const poolId = p.data?.createPool?.id as string;
    expect(poolId).toEqual(expect.any(String));

    sim = await startMachineSim({ serviceUrl: url, redfish: { machines: 3 }, behaviour: { quiet: true, retryUnavailable: true } });
    const ids: string[] = [];
    for (const m of sim.machines) {
      const r = await api('POST', '/api/compute/metal/enroll', {
        poolId, name: m.id, macs: m.macs,
        bmc: { address: m.bmc.url, driver: 'redfish', credentials: { username: m.bmc.username, password: m.bmc.password } },
      });
      expect(r.status).toBe(200);
      ids.push(r.body.node.id);
    }

    // Load: reads over REST and GraphQL, all the time. Answers other than 200 and the database's
    // 503 are collected (a 500 is a failure of this test).
    loading = true;
    const odd: string[] = [];
    const statuses = new Map<number, number>();
    const load = (async () => {
      while (loading) {
        const [a, b] = await Promise.all([
          api('GET', `/api/compute/metal/nodes/${ids[0]}`).catch(() => null),
          gql(url, adminToken, '{ metalNodes(first: 5) { totalCount } }').catch(() => null),
        ]);
        for (const r of [a, b]) {
          if (!r) continue;
          statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
          if (r.status !== 200 && r.status !== 503) odd.push(`${r.status} ${JSON.stringify('body' in r ? r.body : r.errors)}`);
        }
        await sleep(20);
      }
    })();

    /** ms from now until /readyz answers 200. */
    const readyAgain = async (limitMs: number): Promise<number> => {
      const started = Date.now();
      for (;;) {
        const r = await fetch(`${url}/readyz`).catch(() => null);
        if (r?.status === 200) return Date.now() - started;
        if (Date.now() - started > limitMs) throw new Error(`not ready within ${limitMs} ms: ${r?.status} ${await r?.text()}\n${service!.output().slice(-3000)}`);
        await sleep(50);
      }
    };
    const serviceBackends = async () => (await admin!.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() AND backend_type = 'client backend'`, [dbName])).rows.map((r) => r.pid);

    // Wait until the machines are moving (some command or ramdisk under way).
    await sleep(1500);

    // 1. every backend of the service terminated, three times
    for (let round = 0; round < 3; round += 1) {
      const before = await serviceBackends();
      expect(before.length).toBeGreaterThan(2);
      await admin!.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [dbName]);
      await sleep(300);
      alive();
      expect(await readyAgain(2000)).toBeLessThan(2000);
      await sleep(300);
    }

    // 2. one backend SIGKILLed: the postmaster resets every connection (ours too) and recovers.
    const victim = (await serviceBackends())[0]!;
    process.kill(victim, 'SIGKILL');
    await sleep(300);
    alive();
    // The postmaster's crash recovery takes its time; 2 s counts from when it accepts connections again.
    for (let i = 0; ; i += 1) {
      try {
        await connectAdmin();
        break;
      } catch (error) {
        if (i > 100) throw error;
        await sleep(100);
      }
    }
    expect(await readyAgain(2000)).toBeLessThan(2000);
    alive();

    // 3. pg_ctl stop -m fast: an outage, then start.
    await ctl('stop', '-m', 'fast');
    await sleep(300);
    alive();
    const down = await fetch(`${url}/readyz`);
    const downText = await down.text();
    expect(down.status).toBe(503);
    expect(JSON.parse(downText).checks.database).toBe('unavailable');
    const r503 = await api('GET', `/api/compute/metal/nodes/${ids[0]}`);
    expect(r503.status).toBe(503);
    expect(r503.headers.get('retry-after')).toEqual(expect.stringMatching(/^\d+$/));
    expect(r503.body.error).toMatchObject({ code: 'UPSTREAM_UNAVAILABLE', message: expect.stringMatching(/database/), details: { upstream: 'database' } });
    const g503 = await gql(url, adminToken, '{ metalNodes(first: 1) { totalCount } }');
    expect(g503.status).toBe(503);
    expect(g503.headers.get('retry-after')).toEqual(expect.stringMatching(/^\d+$/));
    expect(g503.errors?.[0]?.extensions).toMatchObject({ code: 'UPSTREAM_UNAVAILABLE', details: { upstream: 'database' } });
    for (const text of [downText, JSON.stringify(r503.body), JSON.stringify(g503.errors)]) {
      expect(text).not.toContain(socket);
      expect(text).not.toContain(u.port);
      expect(text).not.toMatch(/127\.0\.0\.1|ECONNREFUSED|ENOENT|PGSQL/);
    }
    await sleep(1500);
    alive();
    await ctl('start');
    expect(await readyAgain(2000)).toBeLessThan(2000);
    alive();

    // 4. pg_ctl restart -m immediate (no shutdown checkpoint: crash recovery at start).
    await ctl('restart', '-m', 'immediate');
    expect(await readyAgain(2000)).toBeLessThan(2000);
    alive();
    await connectAdmin();

    loading = false;
    await load;
    expect(odd).toEqual([]);
    expect(statuses.get(200)).toBeGreaterThan(0);

    // LISTEN is in place again, on its own connection.
    for (let i = 0; ; i += 1) {
      const { rows } = await admin!.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`, [dbName, LISTEN_APPLICATION]);
      if (rows[0].n === 1) break;
      if (i > 50) throw new Error('the LISTEN connection did not come back');
      await sleep(100);
    }

    // Every machine ends ready; nothing is left running.
    const states = async () => (await admin!.query(`SELECT provision_state AS s, last_error_code AS e FROM node WHERE id = ANY($1)`, [ids])).rows as { s: string; e: string | null }[];
    for (let i = 0; ; i += 1) {
      const now = await states();
      if (now.every((n) => n.s === 'ready' || n.s === 'failed')) {
        expect(now).toEqual(ids.map(() => ({ s: 'ready', e: null })));
        break;
      }
      if (i > 450) throw new Error(`not settled: ${JSON.stringify(now)}\n${service.output().slice(-5000)}`);
      await sleep(100);
    }
    alive();
    const active = (await admin!.query(`SELECT count(*)::int AS n FROM workflow_run WHERE node_id = ANY($1) AND status IN ('queued', 'running', 'waiting', 'aborting')`, [ids])).rows[0].n;
    expect(active).toBe(0);
    // No event left without its number (the sequencer's own connection came back too).
    for (let i = 0; ; i += 1) {
      const { rows } = await admin!.query('SELECT count(*)::int AS n FROM event WHERE seq IS NULL');
      if (rows[0].n === 0) break;
      if (i > 50) throw new Error(`${rows[0].n} events never numbered`);
      await sleep(100);
    }
    for (const m of sim.machines) {
      const counts = sim.redfish.counts(m.id);
      expect(counts.duplicateKeys).toEqual([]);
      const accepted = counts.calls.filter((c) => c.kind === 'reset' && c.status >= 200 && c.status < 300);
      expect(new Set(accepted.map((c) => c.idempotencyKey!.split(':')[0])).size).toBeLessThanOrEqual(4);
    }
    alive();
  });
});
