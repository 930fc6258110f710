import { startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';

const NODE = `query ($id: ID!) { node(id: $id) { id ... on MetalNode { provisionState pool { id } site { id } } ... on Pool { name } } }`;
const NODES = `query ($filter: NodeFilter) { nodes(first: 100, filter: $filter) { edges { node { id poolId } } } }`;

describe('tenancy, tokens and authorization', () => {
  let t: TestApp;
  let a: Awaited<ReturnType<typeof makeTenantTree>>;
  let b: Awaited<ReturnType<typeof makeTenantTree>>;
  let tokenA: string;
  let tokenB: string;
  let poolToken: string;

  beforeAll(async () => {
    t = await startTestApp();
    const prisma = t.app.database.prisma;
    a = await makeTenantTree(prisma, 'alpha', { pools: 2, nodesPerPool: 3 });
    b = await makeTenantTree(prisma, 'bravo', { pools: 1, nodesPerPool: 2 });
    tokenA = await makeToken(prisma, a.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: a.tenant.id }]);
    tokenB = await makeToken(prisma, b.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: b.tenant.id }]);
    const pool0 = a.pools[0]!;
    poolToken = await makeToken(prisma, a.tenant.id, [
      { permission: 'compute:nodes:provision', scopeType: 'pool', scopeId: pool0.id, siteId: pool0.siteId, poolId: pool0.id },
    ]);
  });
  afterAll(() => t.stop());

  describe('tenant isolation: another tenant\'s objects are NOT_FOUND, never PERMISSION_DENIED', () => {
    const cases = [
      { what: 'pool', id: () => a.pools[0]!.id, path: (id: string) => `/api/compute/pools/${id}` },
      { what: 'node', id: () => a.nodes[0]!.id, path: (id: string) => `/api/compute/metal/nodes/${id}` },
      { what: 'site', id: () => a.site.id, path: (id: string) => `/api/compute/sites/${id}` },
    ];
    it.each(cases)('GraphQL node(id) of tenant A\'s $what with a tenant-B token', async ({ id }) => {
      const result = await gql(t.url, tokenB, NODE, { id: id() });
      expect(codeOf(result)).toBe('NOT_FOUND');
      expect(result.data?.node ?? null).toBeNull();
    });
    it.each(cases)('REST GET of tenant A\'s $what with a tenant-B token', async ({ id, path }) => {
      const response = await rest(t.url, tokenB, 'GET', path(id()));
      expect(response.status).toBe(404);
      expect(response.body.error.code).toBe('NOT_FOUND');
    });
    it.each(cases)('the owner reads tenant A\'s $what', async ({ id, path }) => {
      const result = await gql(t.url, tokenA, NODE, { id: id() });
      expect(result.errors).toBeUndefined();
      expect(result.data?.node.id).toBe(id());
      expect((await rest(t.url, tokenA, 'GET', path(id()))).status).toBe(200);
    });
    it('lists hold only the caller\'s tenant', async () => {
      const nodes = await gql(t.url, tokenB, NODES);
      expect(nodes.data?.nodes.edges.map((e: any) => e.node.id).sort()).toEqual(b.nodes.map((n) => n.id).sort());
      const sites = await rest(t.url, tokenB, 'GET', '/api/compute/sites');
      expect(sites.body.sites.map((s: any) => s.id)).toEqual([b.site.id]);
      const pools = await rest(t.url, tokenB, 'GET', '/api/compute/pools');
      expect(pools.body.pools.map((p: any) => p.id)).toEqual([b.pools[0]!.id]);
      const filtered = await gql(t.url, tokenB, NODES, { filter: { poolId: a.pools[0]!.id } });
      expect(filtered.data?.nodes.edges).toEqual([]);
    });
    it('a tenant admin cannot create a site in another tenant, nor grant on another tenant\'s scope', async () => {
      const site = await gql(t.url, tokenB, 'mutation ($i: CreateSiteInput!) { createSite(input: $i) { id } }', { i: { tenantId: a.tenant.id, name: 'sneaky' } });
      expect(codeOf(site)).toBe('NOT_FOUND');
      const token = await rest(t.url, tokenB, 'POST', '/api/tokens', {
        name: 'sneaky', grants: [{ permission: 'admin', scopeType: 'pool', scopeId: a.pools[0]!.id }],
      });
      expect(token.status).toBe(400);
      expect(token.body.error.message).toMatch(/grants\[0\]\.scopeId/);
    });
  });

  describe('authentication', () => {
    const attempts: [string, Record<string, string>][] = [
      ['no Authorization header', {}],
      ['an unknown token', { authorization: 'Bearer mcp_not-a-real-token' }],
      ['a malformed header', { authorization: 'Token abc' }],
    ];
    it.each(attempts)('%s is UNAUTHENTICATED over GraphQL and REST (401)', async (_label, headers) => {
      const result = await gql(t.url, null, '{ viewer { name } }', undefined, headers);
      expect(codeOf(result)).toBe('UNAUTHENTICATED');
      const response = await rest(t.url, null, 'GET', '/api/viewer', undefined, headers);
      expect(response.status).toBe(401);
      expect(response.body.error.code).toBe('UNAUTHENTICATED');
    });
    it('an expired token is UNAUTHENTICATED', async () => {
      const token = await makeToken(t.app.database.prisma, a.tenant.id, [{ permission: 'compute:sites:read', scopeType: 'tenant', scopeId: a.tenant.id }]);
      await t.app.database.prisma.apiToken.updateMany({ where: { name: 'fixture', expiresAt: null, createdBy: null, grants: { some: { permission: 'compute:sites:read' } } }, data: { expiresAt: new Date(Date.now() - 1000) } });
      expect((await rest(t.url, token, 'GET', '/api/viewer')).status).toBe(401);
    });
  });

  describe('grants on a pool allow that pool and nothing else', () => {
    it('reads the pool, its nodes and the path to it', async () => {
      const pool = await gql(t.url, poolToken, NODE, { id: a.pools[0]!.id });
      expect(pool.data?.node.name).toBe(a.pools[0]!.name);
      const node = await gql(t.url, poolToken, NODE, { id: a.nodes[0]!.id });
      expect(node.data?.node).toMatchObject({ id: a.nodes[0]!.id, pool: { id: a.pools[0]!.id }, site: { id: a.site.id } });
    });
    it('lists only that pool\'s nodes and that pool', async () => {
      const nodes = await gql(t.url, poolToken, NODES);
      const ids = nodes.data?.nodes.edges.map((e: any) => e.node.id).sort();
      expect(ids).toEqual(a.nodes.filter((n) => n.poolId === a.pools[0]!.id).map((n) => n.id).sort());
      const pools = await rest(t.url, poolToken, 'GET', '/api/compute/pools');
      expect(pools.body.pools.map((p: any) => p.id)).toEqual([a.pools[0]!.id]);
    });
    it('the sibling pool and its nodes are refused (same tenant: PERMISSION_DENIED)', async () => {
      const pool = await gql(t.url, poolToken, NODE, { id: a.pools[1]!.id });
      expect(codeOf(pool)).toBe('PERMISSION_DENIED');
      const sibling = a.nodes.find((n) => n.poolId === a.pools[1]!.id)!;
      const node = await rest(t.url, poolToken, 'GET', `/api/compute/metal/nodes/${sibling.id}`);
      expect(node.status).toBe(403);
    });
    it('cannot administer the pool, its site or tokens', async () => {
      const policy = await rest(t.url, poolToken, 'PATCH', `/api/compute/pools/${a.pools[0]!.id}/policy`, { policy: { agent: 'bcd' } });
      expect(policy.status).toBe(403);
      const site = await rest(t.url, poolToken, 'POST', '/api/compute/sites', { name: 'nope' });
      expect(site.status).toBe(403);
      const token = await rest(t.url, poolToken, 'POST', '/api/tokens', { name: 'x', grants: [{ permission: 'admin', scopeType: 'tenant', scopeId: a.tenant.id }] });
      expect(token.status).toBe(403);
    });
  });

  describe('tokens through the API', () => {
    it('are shown once, stored only as a hash, work at once and stop working when revoked', async () => {
      const created = await rest(t.url, tokenA, 'POST', '/api/tokens', {
        name: 'reader', grants: [{ permission: 'compute:sites:read', scopeType: 'site', scopeId: a.site.id }],
      });
      expect(created.status).toBe(201);
      const { token, apiToken } = created.body;
      expect(token).toMatch(/^mcp_[A-Za-z0-9_-]{43}$/);
      const row = await t.app.database.prisma.apiToken.findUniqueOrThrow({ where: { id: apiToken.id } });
      expect(row.hash).not.toContain(token);
      expect(JSON.stringify(row)).not.toContain(token);
      const viewer = await rest(t.url, token, 'GET', '/api/viewer');
      expect(viewer.body.viewer).toMatchObject({ tokenId: apiToken.id, tenantId: a.tenant.id, platformAdmin: false });
      const revoked = await rest(t.url, tokenA, 'DELETE', `/api/tokens/${apiToken.id}`);
      expect(revoked.status).toBe(200);
      expect(revoked.body.apiToken.revokedAt).toEqual(expect.any(String));
      expect((await rest(t.url, token, 'GET', '/api/viewer')).status).toBe(401);
    });
    it('bad grants are INVALID_INPUT naming the field', async () => {
      const cases: [unknown, RegExp][] = [
        [{ permission: 'compute:nodes:fly', scopeType: 'tenant', scopeId: a.tenant.id }, /body\.grants\[0\]\.permission/],
        [{ permission: 'admin', scopeType: 'pool' }, /grants\[0\]\.scopeId: is required/],
        [{ permission: 'admin', scopeType: 'platform' }, /grants\[0\]\.scopeType: a tenant token cannot hold a platform grant/],
        [{ permission: 'admin', scopeType: 'node', scopeId: 'node_00000000-0000-7000-8000-000000000000' }, /grants\[0\]\.scopeId: no such node/],
        [{ permission: 'fabric:write', scopeType: 'tenant', scopeId: a.tenant.id }, /grants\[0\]\.scopeType: this permission is held on the platform scope only/],
        [{ permission: 'fabric:admin', scopeType: 'site', scopeId: a.site.id }, /grants\[0\]\.scopeType: this permission is held on the platform scope only/],
      ];
      for (const [grant, message] of cases) {
        const response = await rest(t.url, tokenA, 'POST', '/api/tokens', { name: 'bad', grants: [grant] });
        expect(response.status).toBe(400);
        expect(response.body.error.message).toMatch(message);
      }
    });
    it('only a platform admin creates tenants and hardware profiles', async () => {
      const tenant = await gql(t.url, tokenA, 'mutation { createTenant(input: {name: "x"}) { id } }');
      expect(codeOf(tenant)).toBe('PERMISSION_DENIED');
      const ok = await gql(t.url, t.adminToken, 'mutation { createTenant(input: {name: "charlie"}) { id name } }');
      expect(ok.data?.createTenant.name).toBe('charlie');
      const dup = await gql(t.url, t.adminToken, 'mutation { createTenant(input: {name: "charlie"}) { id } }');
      expect(codeOf(dup)).toBe('CONFLICT');
    });
  });

  describe('pool policy', () => {
    it('updates with compare-and-set and validates the hardware profile and approver keys', async () => {
      const admin = t.adminToken;
      await gql(t.url, admin, 'mutation { createHardwareProfile(input: {name: "gpu-r750", driverBindings: {power: "idrac", management: "idrac", virtualMedia: "idrac"}}) { id } }');
      const pool = a.pools[1]!;
      const unknown = await rest(t.url, tokenA, 'PATCH', `/api/compute/pools/${pool.id}/policy`, { policy: { hardwareProfile: 'nope' } });
      expect(unknown.status).toBe(400);
      expect(unknown.body.error.message).toMatch(/hardwareProfile/);
      const key = Buffer.from(require('node:crypto').generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }).x, 'base64url').toString('base64');
      const ok = await rest(t.url, tokenA, 'PATCH', `/api/compute/pools/${pool.id}/policy`, {
        policy: { hardwareProfile: 'gpu-r750', approverKeys: [{ id: 'alice', publicKey: key }], quorum: 1, trustProvisioningNetwork: true },
        expectedVersion: 1,
      });
      expect(ok.status).toBe(200);
      expect(ok.body.pool).toMatchObject({ version: 2, policy: { hardwareProfile: 'gpu-r750', agent: 'bcd', quorum: 1, trustProvisioningNetwork: true } });
      const stale = await rest(t.url, tokenA, 'PATCH', `/api/compute/pools/${pool.id}/policy`, { policy: { agent: 'bcd' }, expectedVersion: 1 });
      expect(stale.status).toBe(409);
      const quorum = await rest(t.url, tokenA, 'PATCH', `/api/compute/pools/${pool.id}/policy`, { policy: { quorum: 2 } });
      expect(quorum.body.error.message).toMatch(/quorum/);
    });
    it('concurrent policy updates: each lands once, none is lost silently', async () => {
      const pool = a.pools[0]!;
      const before = (await t.app.database.prisma.pool.findUniqueOrThrow({ where: { id: pool.id } })).version;
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, i) => rest(t.url, tokenA, 'PATCH', `/api/compute/pools/${pool.id}/policy`, { policy: { trustProvisioningNetwork: i % 2 === 0 } })),
      );
      const ok = results.filter((r) => r.status === 200).length;
      const conflicts = results.filter((r) => r.status === 409).length;
      expect(ok + conflicts).toBe(8);
      expect(ok).toBeGreaterThanOrEqual(1);
      const after = (await t.app.database.prisma.pool.findUniqueOrThrow({ where: { id: pool.id } })).version;
      expect(after - before).toBe(ok);
    });
  });
});
