import pg from 'pg';
import { createTestDatabase, startTestApp, type TestApp } from './helpers/app';
import { gql } from './helpers/client';
import { makeTenantTree } from './helpers/fixtures';
import { migrate, readMigrations } from '../src/db/migrate';
import { newId } from '../src/ids';

const PAGE = `query ($first: Int, $after: String) {
  nodes(first: $first, after: $after) {
    edges { node { id name provisionState pool { id name policy { agent } site { id name } } site { id name } } }
    pageInfo { hasNextPage endCursor }
  }
}`;

describe('a page of nodes with pool and site costs a constant number of SQL statements', () => {
  let t: TestApp;
  beforeAll(async () => {
    // The read cache would answer repeats with no SQL at all: measure the query plan itself.
    t = await startTestApp({ responseCacheTtlMs: 0, tokenCacheMs: 600000 });
    const prisma = t.app.database.prisma;
    const tree = await makeTenantTree(prisma, 'stmt', { pools: 5, nodesPerPool: 30 });
    // More sites, so pools and sites of a page are not all the same rows.
    for (let s = 0; s < 3; s += 1) {
      const site = await prisma.site.create({ data: { id: newId('Site'), tenantId: tree.tenant.id, name: `extra-${s}` } });
      const pool = await prisma.pool.create({ data: { id: newId('Pool'), tenantId: tree.tenant.id, siteId: site.id, name: `p-${s}` } });
      await prisma.node.createMany({
        data: Array.from({ length: 20 }, (_, i) => ({
          id: newId('MetalNode'), tenantId: tree.tenant.id, siteId: site.id, poolId: pool.id,
          provisionState: 'ready' as const, bmcAddress: `127.9.${s}.${i}`, bmcDriver: 'ipmi',
        })),
      });
    }
  });
  afterAll(() => t.stop());

  async function statementsFor(variables: Record<string, unknown>): Promise<{ statements: number; count: number }> {
    // Warm the token cache so only the page itself is counted.
    await gql(t.url, t.adminToken, '{ viewer { name } }');
    const before = t.app.database.statements.count;
    const result = await gql(t.url, t.adminToken, PAGE, variables);
    expect(result.errors).toBeUndefined();
    return { statements: t.app.database.statements.count - before, count: result.data!.nodes.edges.length };
  }

  it.each([1, 5, 20, 100, 200])('first: %i', async (first) => {
    const { statements, count } = await statementsFor({ first });
    expect(count).toBe(first);
    // One planned query for nodes with their pool and site (Prisma may split relations into a
    // fixed number of statements); it must not grow with the page.
    const baseline = (await statementsFor({ first: 1 })).statements;
    expect(statements).toBe(baseline);
    expect(statements).toBeLessThanOrEqual(4);
  });

  it('following pages cost the same', async () => {
    const first = await gql(t.url, t.adminToken, PAGE, { first: 50 });
    const after = first.data!.nodes.pageInfo.endCursor;
    const { statements, count } = await statementsFor({ first: 50, after });
    expect(count).toBe(50);
    expect(statements).toBe((await statementsFor({ first: 1 })).statements);
  });
});

describe('migrations', () => {
  it('applied by several processes at once, each migration runs exactly once', async () => {
    const url = await createTestDatabase();
    // A clone of the template is already migrated: start from an empty database instead.
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    await client.query('DROP SCHEMA public CASCADE; CREATE SCHEMA public;');
    await client.end();
    const results = await Promise.all(Array.from({ length: 5 }, () => migrate(url)));
    const expected = (await readMigrations()).map((m) => m.name);
    expect(results.flat().sort()).toEqual([...expected].sort());
    const check = new pg.Client({ connectionString: url });
    await check.connect();
    const rows = await check.query('SELECT migration_name, checksum FROM _prisma_migrations ORDER BY migration_name');
    await check.end();
    expect(rows.rows.map((r) => r.migration_name)).toEqual(expected);
    expect(await migrate(url)).toEqual([]);
  });

  it('a migration edited after it was applied stops the start-up with a clear error', async () => {
    const url = await createTestDatabase();
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    await client.query(`UPDATE _prisma_migrations SET checksum = 'x'`);
    await client.end();
    await expect(migrate(url)).rejects.toThrow(/was changed after it was applied/);
  });
});
