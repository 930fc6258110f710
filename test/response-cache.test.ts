import pg from 'pg';
import { startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';

const PAGE = '{ nodes(first: 20) { edges { node { id name maintenance pool { id name } site { id name } } } } }';

/**
 * Reads until `ok` or `ms` pass. What it waits for comes through a notification (a commit's, to the
 * read cache), a round trip of milliseconds that can take seconds under the full suite's load; the
 * default stays far below the suite's 60 s TTL, so only an invalidation explains a fresh answer.
 */
async function eventually<T>(read: () => Promise<T>, ok: (value: T) => boolean, ms = 10_000): Promise<T> {
  const started = Date.now();
  for (;;) {
    const value = await read();
    if (ok(value) || Date.now() - started > ms) return value;
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('the GraphQL read cache', () => {
  let t: TestApp;
  let a: Awaited<ReturnType<typeof makeTenantTree>>;
  let b: Awaited<ReturnType<typeof makeTenantTree>>;
  let tokenA: string;
  let tokenB: string;
  beforeAll(async () => {
    t = await startTestApp({ responseCacheTtlMs: 60000 });
    a = await makeTenantTree(t.app.database.prisma, 'cache-a', { pools: 1, nodesPerPool: 3 });
    b = await makeTenantTree(t.app.database.prisma, 'cache-b', { pools: 1, nodesPerPool: 2 });
    tokenA = await makeToken(t.app.database.prisma, a.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: a.tenant.id }]);
    tokenB = await makeToken(t.app.database.prisma, b.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: b.tenant.id }]);
  });
  afterAll(() => t.stop());

  it('answers a repeated read without SQL, per token', async () => {
    const first = await gql(t.url, tokenA, PAGE);
    // The fixtures' commits reach the read cache as notifications, which under the full suite's
    // load can arrive after the first read and rightly keep it from being stored, or drop it: read again
    // until a read is answered from the cache (as the If-None-Match test below does).
    const again = await eventually(async () => {
      const before = t.app.database.statements.count;
      const result = await gql(t.url, tokenA, PAGE);
      return { result, statements: t.app.database.statements.count - before };
    }, (r) => r.statements === 0);
    expect(again.statements).toBe(0);
    expect(again.result.data).toEqual(first.data);
    const other = await gql(t.url, tokenB, PAGE);
    expect(other.data!.nodes.edges.map((e: any) => e.node.id).sort()).toEqual(b.nodes.map((n) => n.id).sort());
  });

  it('drops cached results when any writer commits a change to their types (here: plain SQL, as another process)', async () => {
    await gql(t.url, tokenA, PAGE);
    const sql = new pg.Client({ connectionString: t.app.databaseUrl });
    await sql.connect();
    await sql.query(`UPDATE node SET name = 'renamed-by-sql', maintenance = true WHERE id = $1`, [a.nodes[0]!.id]);
    await sql.query(`UPDATE pool SET name = 'pool-renamed' WHERE id = $1`, [a.pools[0]!.id]);
    await sql.end();
    const result = await eventually(() => gql(t.url, tokenA, PAGE), (r) => JSON.stringify(r.data).includes('pool-renamed'));
    const node = result.data!.nodes.edges.find((e: any) => e.node.id === a.nodes[0]!.id).node;
    expect(node).toMatchObject({ name: 'renamed-by-sql', maintenance: true, pool: { name: 'pool-renamed' } });
  });

  it('never serves a revoked token, even what it had cached', async () => {
    const created = await rest(t.url, tokenA, 'POST', '/api/tokens', {
      name: 'short-lived', grants: [{ permission: 'compute:sites:read', scopeType: 'tenant', scopeId: a.tenant.id }],
    });
    const token = created.body.token as string;
    expect((await gql(t.url, token, PAGE)).errors).toBeUndefined();
    expect((await gql(t.url, token, PAGE)).errors).toBeUndefined();
    await rest(t.url, tokenA, 'DELETE', `/api/tokens/${created.body.apiToken.id}`);
    const after = await gql(t.url, token, PAGE);
    expect(codeOf(after)).toBe('UNAUTHENTICATED');
    expect(after.data ?? null).toBeNull();
  });

  it('a conditional request (If-None-Match) is not answered from the cache', async () => {
    const conditional = async () => {
      const response = await fetch(`${t.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${tokenA}`, 'if-none-match': 'anything' },
        body: JSON.stringify({ query: PAGE }),
      });
      return (await response.json()) as { data?: unknown; errors?: unknown[] };
    };
    // The same token and query are in the cache: a plain read costs no SQL.
    const stored = await eventually(async () => {
      const before = t.app.database.statements.count;
      const result = await gql(t.url, tokenA, PAGE);
      return { result, statements: t.app.database.statements.count - before };
    }, (r) => r.statements === 0);
    expect(stored.statements).toBe(0);
    const before = t.app.database.statements.count;
    const body = await conditional();
    expect(body.errors).toBeUndefined();
    expect(body.data).toEqual(stored.result.data);
    expect(t.app.database.statements.count - before).toBeGreaterThan(0);
  });
});
