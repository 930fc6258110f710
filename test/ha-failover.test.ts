/**
 * Issue 24 items 2 and 5: the built service on a Patroni cluster (test/helpers/patroni.ts: etcd, a
 * primary and a synchronous standby on loopback), given DATABASE_URL in libpq's multi-host form,
 * lives through the primary's postmaster being SIGKILLed (Patroni fails over to the standby) and
 * through a planned switchover: the process does not exit, /readyz is 200 again (the database,
 * writable, and pg-boss's queue), a write through the API succeeds, the LISTEN connection is back
 * on the new primary, and an event committed there reaches a subscriber of the event stream.
 *
 * The migrations run on the cluster's PostgreSQL (Debian's 15) when the service starts.
 * Skips only when patroni, etcd or PostgreSQL 15 is not installed; .ci/run installs them.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { fromRoot } from '../src/paths';
import { LISTEN_APPLICATION } from '../src/db/listen';
import { databaseClient } from '../src/db/target';
import { readMigrations } from '../src/db/migrate';
import { gql } from './helpers/client';
import { restStream } from './helpers/streams';
import { patroniMissing, startPatroniCluster, type Member, type PatroniCluster } from './helpers/patroni';
import { randomPort, spawnService, waitReady, type Service } from './helpers/service';

jest.setTimeout(150_000);

const missing = patroniMissing();
if (missing) {
  console.warn(`test/ha-failover.test.ts skipped: ${missing}`);
}
const maybe = missing ? describe.skip : describe;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'metal-ha-svc-'));
let cluster: PatroniCluster | null = null;
let service: Service | null = null;
let stream: { abort(): void } | null = null;

afterAll(async () => {
  stream?.abort();
  if (service && service.proc.exitCode === null && service.proc.signalCode === null) {
    service.signalGroup('SIGKILL');
    await service.exited;
  }
  await cluster?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function waitFor(check: () => Promise<boolean> | boolean, ms: number, what: string): Promise<number> {
  const started = Date.now();
  for (;;) {
    if (await check()) return Date.now() - started;
    if (Date.now() - started > ms) throw new Error(`${what} not within ${ms} ms${service ? `; service output:\n${service.output().slice(-4000)}` : ''}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

maybe('the service on a Patroni cluster (multi-host DATABASE_URL)', () => {
  it('lives through a SIGKILLed primary and a switchover: ready again, writes, LISTEN back, events delivered', async () => {
    if (!fs.existsSync(fromRoot('dist', 'src', 'main.js'))) throw new Error('run `npm run build` first (npm test does)');
    cluster = await startPatroniCluster();
    const c = cluster;
    const adminToken = `ha-${randomBytes(12).toString('hex')}`;
    const port = randomPort(30000);
    const url = `http://127.0.0.1:${port}`;
    service = spawnService(process.execPath, [fromRoot('dist', 'src', 'main.js')], {
      cwd: fromRoot(),
      env: {
        ...process.env, DATABASE_URL: c.url, PORT: String(port), HOST: '127.0.0.1', ROLE: 'all', ADMIN_TOKEN: adminToken,
        DATA_DIR: path.join(dir, 'data'), LOG_LEVEL: 'warn', RESPONSE_CACHE_TTL_MS: '0',
      },
    });
    const svc = service;
    await waitReady(url, 60_000, svc);
    // The migrations ran on this PostgreSQL (Debian's 15) through the multi-host URL.
    const first = (await c.primary())!;
    const version = await query(c, first, "SELECT current_setting('server_version_num')::int AS v, (SELECT count(*)::int FROM _prisma_migrations WHERE finished_at IS NOT NULL) AS applied");
    expect(version.rows[0]).toEqual({ v: expect.any(Number), applied: expect.any(Number) });
    expect(version.rows[0].v).toBeGreaterThanOrEqual(150000);
    expect(version.rows[0].applied).toBe((await readMigrations()).length); // every one of them

    const reader = restStream(url, adminToken, '?channel=all');
    stream = { abort: reader.stop };
    let n = 0;
    const writeTenant = async () => {
      n += 1;
      const r = await gql(url, adminToken, `mutation { createTenant(input: { name: "ha-${n}-${randomBytes(3).toString('hex')}" }) { id } }`, undefined, { 'x-graphql-csrf': '1' });
      return { id: r.data?.createTenant?.id as string | undefined, errors: r.errors };
    };
    /** An event committed on the primary (as any writer's would be): the sequencer numbers it, the hub fans it out. */
    const eventReaches = async (primary: Member, subject: string) => {
      await query(c, primary, `INSERT INTO event (type, subject, payload) VALUES ('node.ha_probe', $1, '{}')`, [subject]);
      await waitFor(() => reader.messages.some((m) => m.data?.subject === subject), 15_000, `the event ${subject} on the stream`);
    };
    const listening = async (primary: Member) =>
      (await query(c, primary, `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'`, [LISTEN_APPLICATION])).rows[0].n as number;

    expect(await writeTenant()).toEqual({ id: expect.any(String), errors: undefined });
    await eventReaches(first, 'ha-before');
    expect(await listening(first)).toBe(1);

    const check = async (primary: Member, label: string) => {
      // /readyz: the pool reaches a writable primary, and pg-boss's queue answers.
      await waitFor(async () => (await fetch(`${url}/readyz`).catch(() => null))?.status === 200, 45_000, `/readyz 200 after the ${label}`);
      expect(await writeTenant()).toEqual({ id: expect.any(String), errors: undefined });
      // The LISTEN connection is back, on the new primary.
      await waitFor(async () => (await listening(primary).catch(() => 0)) === 1, 20_000, `the LISTEN connection on the new primary after the ${label}`);
      await eventReaches(primary, `ha-after-${label}`);
      // pg-boss's pool polls its queues on the new primary (its workers fetch every QUEUE_POLL_SECONDS).
      await waitFor(async () => (await query(c, primary, `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'metal-queues' AND state_change > now() - interval '3 seconds'`)).rows[0].n > 0, 10_000, `pg-boss polling on the new primary after the ${label}`);
      expect(svc.proc.exitCode).toBeNull();
      expect(svc.proc.signalCode).toBeNull();
    };

    const kill = await c.killPrimary();
    expect(kill.primary.name).not.toBe(first.name);
    await check(kill.primary, 'kill');
    console.log(`after the kill: ready again and written ${Date.now() - kill.killedAt} ms after the SIGKILL`);

    // The old primary comes back as the synchronous standby; then a planned switchover back to it.
    await c.waitHealthy(45_000);
    // This process's own multi-host client meets the primary about to be demoted, and leaves it
    // cleanly: nothing tells it of the switchover, so its next connection lands on that member.
    const early = databaseClient(c.url);
    await early.connect();
    expect(await serverPort(early)).toBe(kill.primary.port);
    await early.end();
    const sw = await c.switchover();
    expect(sw.primary.name).toBe(first.name);
    await check(sw.primary, 'switchover');

    // Landing on the member that is a standby now: refused as unavailable (08001, not a write
    // failing later with 25006), and the next connection finds the primary.
    await c.waitHealthy(45_000);
    const landed = databaseClient(c.url);
    landed.on('error', () => undefined);
    const refused = await landed.connect().then(() => null, (e: unknown) => e);
    expect(refused).toMatchObject({ code: '08001', message: expect.stringMatching(/no longer the primary/) });
    const next = databaseClient(c.url);
    await next.connect();
    expect(await serverPort(next)).toBe(sw.primary.port);
    await next.end();

    expect(svc.lines().filter((l) => l.msg === 'uncaught exception')).toEqual([]);
    svc.signalGroup('SIGTERM');
    expect((await svc.exited).code).toBe(0);
    await c.stop();
    expect(c.leftovers()).toEqual([]);
    cluster = null;
  });
});

async function query(c: PatroniCluster, m: Member, text: string, values: unknown[] = []): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: c.memberUrl(m), connectionTimeoutMillis: 3000 });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return await client.query(text, values);
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function serverPort(client: pg.Client): Promise<number> {
  return (await client.query<{ port: number }>('SELECT inet_server_port() AS port')).rows[0]!.port;
}
