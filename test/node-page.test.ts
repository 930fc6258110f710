import { startTestApp, type TestApp } from './helpers/app';
import { gql } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { newId } from '../src/ids';
import { readFilter } from '../src/auth/decide';
import type { Principal } from '../src/auth/permissions';
import type { Context } from '../src/context';
import { getNamedType, isLeafType, isObjectType, type GraphQLObjectType } from 'graphql';
import { getSchema } from '../src/graphql/schema';
import { nodeListWhere, nodePageStatement, readNodePage, readsOf, whereSql, type PlannedQuery } from '../src/modules/metal/node-page';
import { NODE_FIELDS } from '../src/modules/metal/node-rows';

/**
 * The `nodes` connection reads its page with one SQL statement (src/modules/metal/node-page.ts)
 * instead of Prisma's findMany with include. The rows must be exactly Prisma's, for every cursor,
 * direction, filter and read scope, and a plan it does not know must go to Prisma.
 */
describe('the nodes page in one statement', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let other: Awaited<ReturnType<typeof makeTenantTree>>;
  let ctx: Context;

  beforeAll(async () => {
    // No read cache: the statement count below is what a cache miss costs.
    t = await startTestApp({ tokenCacheMs: 600000, responseCacheTtlMs: 0 });
    tree = await makeTenantTree(t.app.database.prisma, 'page', { pools: 2, nodesPerPool: 6 });
    other = await makeTenantTree(t.app.database.prisma, 'page-other', { pools: 1, nodesPerPool: 3 });
    const prisma = t.app.database.prisma;
    const profile = await prisma.hardwareProfile.create({
      data: { id: newId('HardwareProfile'), name: 'page-profile', driverBindings: { power: 'redfish', management: 'redfish', virtualMedia: 'redfish' } },
    });
    // Variety in the columns the filters read, and one node with every optional field set.
    const [a, b, c] = tree.nodes;
    await prisma.node.update({ where: { id: a!.id }, data: { maintenance: true, provisionState: 'failed', failedFrom: 'deploying', lastErrorCode: 'X', lastErrorMessage: 'y' } });
    await prisma.node.update({
      where: { id: b!.id },
      data: {
        hardwareProfileId: profile.id, macs: ['52:54:00:00:00:01'], addresses: ['10.0.0.1', 'fd00::1'], inventory: { cpus: 2 },
        bmcDriverOptions: { port: 443 }, driverBindings: { power: 'redfish' }, pxeCycledAt: new Date('2026-11-30T01:02:03.456Z'), role: 'worker',
      },
    });
    await prisma.node.update({ where: { id: c!.id }, data: { provisionState: 'deployed' } });
    ctx = { ...t.app.services, requestId: 'test', principal: null, token: null };
  });
  afterAll(() => t.stop());

  const principal = (tenantId: string | null, grants: Principal['grants']): Principal => ({ tokenId: 'tok_test', name: 'test', tenantId, grants });
  const grant = (scopeType: Principal['grants'][number]['scopeType'], scopeId: string | null, siteId: string | null = null, poolId: string | null = null) =>
    ({ permission: 'compute:sites:read' as const, scopeType, scopeId, siteId, poolId });

  const include = { pool: true, site: true, hardwareProfile: true };

  async function both(query: PlannedQuery, where: Record<string, unknown>) {
    const statement = nodePageStatement(query, where);
    expect(statement).not.toBeNull();
    const viaSql = await readNodePage(ctx, statement!);
    const viaPrisma = await t.app.database.prisma.node.findMany({ ...(query as object), where, orderBy: { id: 'asc' } });
    expect(viaSql).toStrictEqual(viaPrisma);
    return viaSql;
  }

  it('returns Prisma\'s rows for every cursor, direction and skip, the relations included', async () => {
    const ids = tree.nodes.concat(other.nodes).map((n) => n.id).sort();
    const missing = 'node_00000000-0000-7000-8000-000000000000';
    const queries: PlannedQuery[] = [
      { include, take: 21, skip: 0 },
      { include, take: 3, skip: 0 },
      { include, take: -4, skip: 0 },
      { include, take: 5, skip: 1, cursor: { id: ids[4]! } },
      { include, take: -5, skip: 1, cursor: { id: ids[8]! } },
      { include, take: 5, skip: 1, cursor: { id: missing } },
      { include, take: 2, skip: 1, cursor: { id: ids[ids.length - 1]! } },
      { include: { pool: true }, take: 4, skip: 0 },
      { take: 4, skip: 0 },
    ];
    const rows = [];
    for (const query of queries) rows.push(await both(query, {}));
    expect(rows[0]!.length).toBe(ids.length);
    expect(rows[0]!.find((n) => n.hardwareProfileId)?.hardwareProfile?.name).toBe('page-profile');
    expect(rows[0]![0]!.pool?.id).toBe(rows[0]![0]!.poolId);
    expect(rows[5]).toEqual([]);
  });

  it('reads exactly what each read scope may read, with the page filters', async () => {
    const [p0, p1] = tree.pools;
    const principals = [
      principal(null, [grant('platform', null)].map((g) => ({ ...g, permission: 'admin' as const }))),
      principal(tree.tenant.id, [grant('tenant', tree.tenant.id)]),
      principal(tree.tenant.id, [grant('site', tree.site.id, tree.site.id)]),
      principal(tree.tenant.id, [grant('pool', p1!.id, tree.site.id, p1!.id)]),
      principal(tree.tenant.id, [grant('node', tree.nodes[2]!.id, tree.site.id, p0!.id), grant('node', tree.nodes[7]!.id, tree.site.id, p1!.id)]),
      principal(tree.tenant.id, []),
      principal(other.tenant.id, [grant('pool', p0!.id, tree.site.id, p0!.id)]),
    ];
    const filters = [
      {},
      { poolId: p0!.id },
      { siteId: tree.site.id, provisionState: 'ready' },
      { maintenance: true },
      { maintenance: false, poolId: p1!.id },
    ];
    let seen = 0;
    for (const who of principals) {
      for (const f of filters) {
        const access = readFilter(who, 'node');
        const where = nodeListWhere(access, f);
        seen += (await both({ include, take: 50, skip: 0 }, where)).length;
        await both({ include, take: -2, skip: 0 }, where);
      }
    }
    expect(seen).toBeGreaterThan(0);
  });

  it('leaves every plan and filter it does not know to Prisma', () => {
    expect(nodePageStatement({ include: { pool: { include: { site: true } } }, take: 3, skip: 0 }, {})).toBeNull();
    expect(nodePageStatement({ include: { tenant: true }, take: 3, skip: 0 }, {})).toBeNull();
    expect(nodePageStatement({ select: { id: true }, take: 3, skip: 0 }, {})).toBeNull();
    expect(nodePageStatement({ include, take: 3, skip: 0, cursor: { id: 'x', tenantId: 'y' } }, {})).toBeNull();
    expect(nodePageStatement({ include, skip: 0 }, {})).toBeNull();
    expect(whereSql({ name: 'x' }, [])).toBeNull();
    expect(whereSql({ tenantId: { not: 'x' } }, [])).toBeNull();
    expect(whereSql({ tenantId: null }, [])).toBeNull();
    expect(whereSql({ OR: [{ tenantId: 'a' }, { id: { in: ['b'] } }] }, [])).toBe('(n.tenant_id = $1::text) OR (n.id = ANY($2::text[]))');
    expect(whereSql({ OR: [] }, [])).toBe('FALSE');
  });

  it('through GraphQL: a page with pool and site is one statement; a deeper selection still resolves', async () => {
    const token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:sites:read', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const page = 'query ($first: Int) { nodes(first: $first) { edges { node { id name pool { id name policy { agent } } site { id name } } } pageInfo { hasNextPage endCursor } } }';
    await gql(t.url, token, page, { first: 5 }); // the token is cached from here on
    const before = t.app.database.statements.count;
    const res = await gql(t.url, token, page, { first: 5 });
    expect(t.app.database.statements.count - before).toBe(1);
    expect(res.errors).toBeUndefined();
    const edges = res.data!.nodes.edges as { node: { id: string; pool: { id: string; name: string }; site: { id: string } } }[];
    expect(edges).toHaveLength(5);
    for (const { node } of edges) {
      const fixture = tree.nodes.find((n) => n.id === node.id)!;
      expect(node.pool.id).toBe(fixture.poolId);
      expect(node.pool.name).toBe(tree.pools.find((p) => p.id === fixture.poolId)!.name);
      expect(node.site).toEqual({ id: tree.site.id, name: tree.site.name });
    }
    const deep = await gql(t.url, token, 'query { nodes(first: 2) { edges { node { id pool { id site { id name } } } } } }');
    expect(deep.errors).toBeUndefined();
    expect((deep.data!.nodes.edges as { node: { pool: { site: unknown } } }[]).map((e) => e.node.pool.site)).toEqual([
      { id: tree.site.id, name: tree.site.name },
      { id: tree.site.id, name: tree.site.name },
    ]);
  });

  /** Every field of a type, object fields with all of theirs, two levels down (enough for every metal type). */
  function fullSelection(type: GraphQLObjectType, depth = 0): string {
    return Object.values(type.getFields())
      .filter((f) => f.args.every((a) => a.type.toString().endsWith('!') === false))
      .map((f) => {
        const named = getNamedType(f.type);
        if (isLeafType(named)) return f.name;
        return isObjectType(named) && depth < 2 ? `${f.name} { ${fullSelection(named, depth + 1)} }` : '';
      })
      .filter(Boolean)
      .join(' ');
  }

  it('reads only the columns the selection needs, and every field of MetalNode answers as a full read does', async () => {
    const token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:sites:read', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const metalNode = getSchema().getType('MetalNode') as GraphQLObjectType;
    const fields = Object.values(metalNode.getFields());
    expect(fields.length).toBeGreaterThan(20);
    for (const field of fields) {
      const named = getNamedType(field.type);
      const selection = isLeafType(named) ? field.name : `${field.name} { ${fullSelection(named as GraphQLObjectType, 1)} }`;
      const page = await gql(t.url, token, `{ nodes(first: 50) { edges { node { id ${selection} } } } }`);
      expect(page.errors).toBeUndefined();
      const edges = page.data!.nodes.edges as { node: Record<string, unknown> & { id: string } }[];
      expect(edges).toHaveLength(tree.nodes.length);
      for (const { node } of edges) {
        // node(id) reads the whole row through Prisma: the reference answer.
        const one = await gql(t.url, token, `query ($id: ID!) { node(id: $id) { ... on MetalNode { id ${selection} } } }`, { id: node.id });
        expect(one.errors).toBeUndefined();
        expect({ field: field.name, value: node }).toEqual({ field: field.name, value: one.data!.node });
      }
    }
  });

  it('maps each selected field to the columns it reads; a field it does not know reads them all', () => {
    expect(readsOf(['id', 'name'], NODE_FIELDS, {})).toEqual(['id', 'name']);
    expect(readsOf(['__typename', 'lastError'], NODE_FIELDS, { __typename: [], lastError: ['lastErrorCode', 'lastErrorMessage'] })).toEqual(['lastErrorCode', 'lastErrorMessage']);
    expect(readsOf(['id', 'somethingNew'], NODE_FIELDS, {})).toBeUndefined();
  });

  it('pages forwards and backwards through every node with Relay cursors, pageInfo as the plugin gave it', async () => {
    const token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:sites:read', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const all = tree.nodes.map((n) => n.id).sort();
    const PAGE = 'query ($first: Int, $after: String, $last: Int, $before: String) { nodes(first: $first, after: $after, last: $last, before: $before) { edges { cursor node { id } } pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }';
    type Page = { edges: { cursor: string; node: { id: string } }[]; pageInfo: { hasNextPage: boolean; hasPreviousPage: boolean; startCursor: string | null; endCursor: string | null } };
    const page = async (v: Record<string, unknown>) => {
      const res = await gql(t.url, token, PAGE, v);
      expect(res.errors).toBeUndefined();
      return res.data!.nodes as Page;
    };
    const forward: string[] = [];
    let after: string | null = null;
    for (let i = 0; i < 20; i += 1) {
      const p: Page = await page({ first: 5, after });
      forward.push(...p.edges.map((e) => e.node.id));
      expect(p.pageInfo.startCursor).toBe(p.edges[0]?.cursor ?? null);
      expect(p.pageInfo.hasPreviousPage).toBe(after !== null);
      if (!p.pageInfo.hasNextPage) break;
      after = p.pageInfo.endCursor;
    }
    expect(forward).toEqual(all);
    const backward: string[] = [];
    let before: string | null = null;
    for (let i = 0; i < 20; i += 1) {
      const p: Page = await page({ last: 5, before });
      backward.unshift(...p.edges.map((e) => e.node.id));
      expect(p.pageInfo.hasNextPage).toBe(before !== null);
      if (!p.pageInfo.hasPreviousPage) break;
      before = p.pageInfo.startCursor;
    }
    expect(backward).toEqual(all);
    const res = await gql(t.url, token, PAGE, { first: 1, after: 'not-a-cursor' });
    expect(res.errors?.[0]?.message).toMatch(/cursor/i);
  });
});
