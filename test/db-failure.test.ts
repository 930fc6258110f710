/**
 * Issue 21 items 1 and 5, in one process: a request that fails because of the database answers
 * 503 with Retry-After (UPSTREAM_UNAVAILABLE naming the database when it cannot be reached,
 * STORAGE_UNAVAILABLE when it cannot write), never the database's host and port, and /readyz is
 * not ready meanwhile. Disk full is a trigger raising SQLSTATE 53100 (disk_full); read-only is
 * default_transaction_read_only; unreachable is the database refusing connections.
 */
import pg from 'pg';
import { EnrollDocument } from '../src/generated/operations';
import { DatabaseHealth } from '../src/db/health';
import { databaseFailure } from '../src/db/failure';
import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';

jest.setTimeout(60_000);

let t: TestApp;
let admin: pg.Client;
let dbName: string;
let token: string;
let poolId: string;
let where: { host: string; port: string };
beforeAll(async () => {
  // The API only: no engine or agent writing behind the test's back.
  t = await startTestApp({ role: 'api', tokenCacheMs: 0 });
  const url = new URL(t.app.databaseUrl);
  dbName = url.pathname.slice(1);
  where = { host: url.searchParams.get('host') ?? url.hostname, port: url.port };
  admin = new pg.Client({ connectionString: process.env.METAL_TEST_ADMIN_URL });
  await admin.connect();
  const tree = await makeTenantTree(t.app.database.prisma, 'dbfail', { pools: 1, nodesPerPool: 0 });
  poolId = tree.pools[0]!.id;
  token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
});
afterAll(async () => {
  await admin?.query(`ALTER DATABASE ${dbName} RESET default_transaction_read_only`).catch(() => undefined);
  await admin?.query(`ALTER DATABASE ${dbName} ALLOW_CONNECTIONS true`).catch(() => undefined);
  await admin?.end();
  await t?.stop();
});

let n = 0;
const enrollBody = () => {
  n += 1;
  return { poolId, name: `m${n}`, macs: [`02:00:00:00:10:${String(n).padStart(2, '0')}`], bmc: { address: `127.0.0.1:${20000 + n}`, driver: 'redfish', credentials: { username: 'u', password: 'p' } } };
};
/** Ends the service's sessions: its pool opens new ones, which see the database's new settings. */
const terminateService = () => admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [dbName]);

function expectDatabase503(r: { status: number; headers: Headers }, text: string) {
  expect(r.status).toBe(503);
  expect(r.headers.get('retry-after')).toBe('2');
  // Where the database is stays inside.
  expect(text).not.toContain(where.host);
  expect(text).not.toContain(`:${where.port}`);
  expect(text).not.toMatch(/ECONNREFUSED|127\.0\.0\.1|\.s\.PGSQL/);
}

/**
 * The pool learns that its sessions were ended only when their FATAL arrives: a request that
 * takes one of them first answers UPSTREAM_UNAVAILABLE (a lost connection, also a 503 with
 * Retry-After), and a client that honours Retry-After tries again. This does, a few times, and
 * returns the first answer that is not about a lost connection.
 */
async function pastLostSessions<T extends { status: number; headers: Headers }>(call: () => Promise<T>, code: (r: T) => unknown): Promise<T> {
  let r = await call();
  for (let i = 0; i < 10 && code(r) === 'UPSTREAM_UNAVAILABLE'; i += 1) {
    expect(r.status).toBe(503);
    await new Promise((done) => setTimeout(done, 100));
    r = await call();
  }
  return r;
}

// In this order: a storage failure keeps /readyz not ready for STORAGE_FAILURE_WINDOW_MS after it.
describe('the database refusing connections', () => {
  it('REST and GraphQL answer 503 UPSTREAM_UNAVAILABLE naming the database; /readyz 503; all back once it accepts again', async () => {
    await admin.query(`ALTER DATABASE ${dbName} ALLOW_CONNECTIONS false`);
    await terminateService();
    try {
      const r = await rest(t.url, token, 'GET', `/api/compute/pools/${poolId}/nodes`);
      expectDatabase503(r, JSON.stringify(r.body));
      expect(r.body.error).toMatchObject({ code: 'UPSTREAM_UNAVAILABLE', message: expect.stringMatching(/database/), details: { upstream: 'database' } });
      const w = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', enrollBody());
      expectDatabase503(w, JSON.stringify(w.body));
      expect(w.body.error.code).toBe('UPSTREAM_UNAVAILABLE');

      const g = await gql(t.url, token, '{ metalNodes(first: 1) { totalCount } }');
      expectDatabase503(g, JSON.stringify(g.errors));
      expect(g.errors?.[0]?.extensions).toMatchObject({ code: 'UPSTREAM_UNAVAILABLE', details: { upstream: 'database' } });

      const ready = await fetch(`${t.url}/readyz`);
      const text = await ready.text();
      expectDatabase503(ready, text);
      expect(JSON.parse(text).checks).toMatchObject({ database: 'unavailable' });
    } finally {
      await admin.query(`ALTER DATABASE ${dbName} ALLOW_CONNECTIONS true`);
    }
    expect((await fetch(`${t.url}/readyz`)).status).toBe(200);
    expect((await rest(t.url, token, 'POST', '/api/compute/metal/enroll', enrollBody())).status).toBe(200);
  });
});

describe('read-only (25006: a standby after a failover, default_transaction_read_only)', () => {
  it('enroll answers 503 STORAGE_UNAVAILABLE and /readyz says read-only until writes are allowed again', async () => {
    await admin.query(`ALTER DATABASE ${dbName} SET default_transaction_read_only = on`);
    await terminateService();
    try {
      const r = await pastLostSessions(() => rest(t.url, token, 'POST', '/api/compute/metal/enroll', enrollBody()), (x) => x.body?.error?.code);
      expectDatabase503(r, JSON.stringify(r.body));
      expect(r.body.error).toMatchObject({ code: 'STORAGE_UNAVAILABLE', details: { upstream: 'database' } });
      const ready = await fetch(`${t.url}/readyz`);
      expect(ready.status).toBe(503);
      expect((await ready.json()).checks).toMatchObject({ database: 'ok', writes: 'read-only' });
    } finally {
      await admin.query(`ALTER DATABASE ${dbName} RESET default_transaction_read_only`);
      await terminateService();
    }
  });
});

describe('disk full (SQLSTATE 53100 on the write)', () => {
  beforeAll(async () => {
    const c = new pg.Client({ connectionString: t.app.databaseUrl });
    await c.connect();
    await c.query(`CREATE FUNCTION test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'could not extend file "base/1/2": No space left on device' USING ERRCODE = 'disk_full'; END $$`);
    await c.query('CREATE TRIGGER test_disk_full BEFORE INSERT ON node FOR EACH ROW EXECUTE FUNCTION test_disk_full()');
    await c.end();
  });
  afterAll(async () => {
    const c = new pg.Client({ connectionString: t.app.databaseUrl });
    await c.connect();
    await c.query('DROP TRIGGER IF EXISTS test_disk_full ON node');
    await c.end();
  });

  it('enroll answers 503 STORAGE_UNAVAILABLE over REST and GraphQL, and /readyz is not ready', async () => {
    // The read-only test before this one ended the service's sessions once more.
    const r = await pastLostSessions(() => rest(t.url, token, 'POST', '/api/compute/metal/enroll', enrollBody()), (x) => x.body?.error?.code);
    expectDatabase503(r, JSON.stringify(r.body));
    expect(r.body.error).toMatchObject({ code: 'STORAGE_UNAVAILABLE', message: expect.stringMatching(/cannot write/), details: { upstream: 'database' } });
    expect(JSON.stringify(r.body)).not.toContain('No space left');

    const g = await gql(t.url, token, EnrollDocument, { input: enrollBody() } as never);
    expectDatabase503(g, JSON.stringify(g.errors));
    expect(g.errors?.[0]?.extensions).toMatchObject({ code: 'STORAGE_UNAVAILABLE', details: { upstream: 'database' } });

    const ready = await fetch(`${t.url}/readyz`);
    expect(ready.status).toBe(503);
    expect((await ready.json()).checks).toMatchObject({ database: 'ok', writes: expect.stringMatching(/cannot write/), queue: 'ok' });
  });
});

describe('what counts as a database failure', () => {
  it('storage: 53xxx, 58030, 25006; unavailable: connection errors; anything else: not the database', () => {
    for (const code of ['53100', '53200', '58030', '25006']) expect(databaseFailure({ code, severity: 'ERROR', message: 'x' })).toBe('storage');
    for (const code of ['57P01', '57P02', '57P03', '08006', '53300', 'ECONNREFUSED', 'ECONNRESET', 'P1001', 'P1017']) expect(databaseFailure({ code })).toBe('unavailable');
    expect(databaseFailure(new Error('Connection terminated unexpectedly'))).toBe('unavailable');
    expect(databaseFailure({ code: 'ENOENT', syscall: 'connect' })).toBe('unavailable');
    expect(databaseFailure({ code: 'ENOENT', syscall: 'open' })).toBeNull();
    // Prisma's wrapping of the same (the code copied, the syscall only in the message)
    expect(databaseFailure({ code: 'ENOENT', message: 'Invalid `prisma.apiToken.findUnique()` invocation: connect ENOENT /run/pg/.s.PGSQL.5432' })).toBe('unavailable');
    // Prisma over the driver adapter
    expect(databaseFailure({ code: 'P2010', meta: { driverAdapterError: { cause: { kind: 'postgres', originalCode: '53100' } } } })).toBe('storage');
    expect(databaseFailure({ meta: { driverAdapterError: { cause: { kind: 'ConnectionClosed' } } } })).toBe('unavailable');
    for (const code of ['23505', '40001', '22P02', '42P01']) expect(databaseFailure({ code })).toBeNull();
    expect(databaseFailure(new Error('boom'))).toBeNull();
  });

  it('a storage failure keeps writes failing for the window, then they are ok again', () => {
    let now = 1000;
    const health = new DatabaseHealth(15_000, () => now);
    health.observe({ code: '23505' });
    expect(health.writesFailing).toBe(false);
    health.observe({ code: '53100' });
    expect(health.writesFailing).toBe(true);
    now += 14_000;
    expect(health.writesFailing).toBe(true);
    now += 1_001;
    expect(health.writesFailing).toBe(false);
  });
});
