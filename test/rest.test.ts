import { spawn } from 'node:child_process';
import path from 'node:path';
import type { DocumentNode } from 'graphql';
import { routes } from '../src/rest/routes';
import { bootOpenApiPaths } from '../src/modules/boot/openapi';
import { installerOpenApiPaths } from '../src/modules/provision/callback-openapi';
import {
  HardwareProfilesDocument,
  MetalNodeDocument,
  MetalNodesDocument,
  PoolDocument,
  PoolsDocument,
  SiteDocument,
  SitesDocument,
  ViewerDocument,
} from '../src/generated/operations';
import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree } from './helpers/fixtures';

/** Every key of a JSON value, at any depth (to check the casing of a whole response). */
function keysOf(value: unknown, out: string[] = []): string[] {
  if (Array.isArray(value)) for (const item of value) keysOf(item, out);
  else if (value && typeof value === 'object') {
    for (const [key, child] of Object.entries(value)) {
      out.push(key);
      keysOf(child, out);
    }
  }
  return out;
}
const CAMEL = /^[a-z][a-zA-Z0-9]*$/;

type Verdict = { valid: true } | { valid: false; message: string };

/**
 * Validates OpenAPI documents with @apidevtools/swagger-parser (the JSON Schema of OpenAPI 3.1 plus
 * $ref resolution), all in one child Node process: its ref parser is ESM-only, which Node 20.19+
 * require()s natively but jest's module registry refuses.
 */
function validateOpenApi(docs: unknown[]): Promise<Verdict[]> {
  const script = `
    let text = '';
    process.stdin.on('data', (c) => (text += c));
    process.stdin.on('end', async () => {
      const SwaggerParser = require('@apidevtools/swagger-parser');
      const verdicts = [];
      for (const doc of JSON.parse(text)) {
        verdicts.push(await SwaggerParser.validate(doc).then(
          () => ({ valid: true }),
          (e) => ({ valid: false, message: String(e && e.message) }),
        ));
      }
      process.stdout.write(JSON.stringify(verdicts));
    });`;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', script], { cwd: path.resolve(__dirname, '..'), stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (err += c));
    child.on('error', reject);
    child.on('close', (code) => {
      try {
        resolve(JSON.parse(out));
      } catch {
        reject(new Error(`validator exited ${code}: ${err || out}`));
      }
    });
    child.stdin.end(JSON.stringify(docs));
  });
}

/** Runs one of the operations the REST layer uses, straight through GraphQL. */
async function viaGraphql(t: TestApp, document: unknown, variables: Record<string, unknown> = {}) {
  const result = await gql(t.url, t.adminToken, document as DocumentNode, variables);
  expect(result.errors).toBeUndefined();
  return result.data as Record<string, any>;
}

function expectErrorEnvelope(body: any, code: string) {
  expect(body).toEqual({ error: expect.objectContaining({ code, message: expect.any(String), requestId: expect.any(String) }) });
  expect(body.error.message.length).toBeGreaterThan(0);
}

describe('REST compatibility plumbing', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let profileId: string;

  beforeAll(async () => {
    t = await startTestApp();
    tree = await makeTenantTree(t.app.database.prisma, 'acme', { pools: 2, nodesPerPool: 3 });
    const profile = await gql(t.url, t.adminToken, `mutation { createHardwareProfile(input: {
      name: "r650", driverBindings: { power: "redfish", management: "redfish", virtualMedia: "idrac" } }) { id } }`);
    expect(profile.errors).toBeUndefined();
    profileId = profile.data!.createHardwareProfile.id;
  });
  afterAll(() => t.stop());

  describe('GET /openapi.json', () => {
    /** Copies of the document with one defect each: the validator must refuse every one. */
    const defects: [string, (doc: any) => void][] = [
      ['without info.title', (d) => delete d.info.title],
      ['with an optional path parameter', (d) => {
        const path = Object.keys(d.paths).find((p) => p.includes('{'))!;
        (Object.values(d.paths[path])[0] as any).parameters[0].required = false;
      }],
      ['with a dangling $ref', (d) => delete d.components.schemas.Site],
      ['with a parameter missing "in"', (d) => {
        const path = Object.keys(d.paths).find((p) => p.includes('{'))!;
        delete (Object.values(d.paths[path])[0] as any).parameters[0].in;
      }],
    ];
    let doc: any;
    let verdict: Verdict;
    let defectVerdicts: Verdict[];
    beforeAll(async () => {
      const response = await fetch(`${t.url}/openapi.json`);
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toMatch(/^application\/json/);
      doc = await response.json();
      const broken = defects.map(([, breakIt]) => {
        const copy = structuredClone(doc);
        breakIt(copy);
        return copy;
      });
      [verdict, ...defectVerdicts] = await validateOpenApi([doc, ...broken]);
    });

    it('declares OpenAPI 3.1', () => {
      expect(doc.openapi).toMatch(/^3\.1\.\d+$/);
    });

    it('is a valid OpenAPI 3.1 document for a real validator', () => {
      expect(verdict).toEqual({ valid: true });
    });

    it.each(defects.map(([name], i) => [name, i] as const))('the validator rejects a copy %s (so the check above means something)', (_name, i) => {
      expect(defectVerdicts[i]).toEqual({ valid: false, message: expect.any(String) });
    });

    it.each(routes.map((r) => [r.method, r.path, r.operationId ?? r.operation]))('lists %s %s as operation %s', (method, path, operation) => {
      const entry = doc.paths[path]?.[method.toLowerCase()];
      expect(entry).toBeDefined();
      expect(entry.operationId).toBe(operation);
      const declared = (entry.parameters ?? []).filter((p: any) => p.in === 'path').map((p: any) => p.name).sort();
      const inPath = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
      expect(declared).toEqual(inPath);
      expect(entry.responses).toHaveProperty(String(routes.find((r) => r.method === method && r.path === path)!.successStatus ?? 200));
    });

    it('lists the event stream, with its channels and Last-Event-ID', () => {
      const stream = doc.paths['/api/events'].get;
      expect(stream.operationId).toBe('EventStream');
      expect(stream.parameters.map((p: any) => `${p.in}:${p.name}`)).toEqual(['query:channel', 'query:after', 'query:nodeId', 'header:Last-Event-ID']);
      expect(stream.parameters[0].schema.enum).toEqual(['metal', 'fabric', 'provision', 'all']);
      expect(Object.keys(stream.responses['200'].content)).toEqual(['text/event-stream']);
    });

    it('lists nothing beyond the route table, the event stream and the ramdisk callbacks, and has unique operationIds', () => {
      const operations = Object.values(doc.paths as Record<string, Record<string, any>>).flatMap((item) => Object.values(item));
      expect(operations).toHaveLength(routes.length + 1 + Object.values({ ...bootOpenApiPaths(), ...installerOpenApiPaths() }).flatMap((item) => Object.keys(item)).length);
      const ids = operations.map((o) => o.operationId);
      expect(new Set(ids).size).toBe(ids.length);
    });
  });

  describe('GET /docs', () => {
    let html: string;
    let headers: Headers;
    beforeAll(async () => {
      const response = await fetch(`${t.url}/docs`);
      expect(response.status).toBe(200);
      headers = response.headers;
      html = await response.text();
    });

    it('is an HTML page', () => {
      expect(headers.get('content-type')).toMatch(/^text\/html/);
      expect(html).toMatch(/^<!doctype html>/i);
      expect(html).toContain('</html>');
    });

    // The routes themselves are rendered by Swagger UI in the browser: test/browser.test.ts checks them.
    it('loads Swagger UI from this service only, under a Content-Security-Policy of self', () => {
      const links = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
      expect(links).toEqual(expect.arrayContaining([expect.stringMatching(/^\/docs\/assets\/swagger-ui-bundle\.js\?v=/), expect.stringMatching(/^\/docs\/assets\/swagger-ui\.css\?v=/)]));
      for (const link of links) expect(link).toMatch(/^\/(?!\/)/);
      expect(headers.get('content-security-policy')).toMatch(/script-src 'self'(;|$)/);
      expect(headers.get('content-security-policy')).toMatch(/default-src 'none'/);
    });
  });

  describe('read routes: documented envelope, camelCase, same entity as GraphQL', () => {
    interface ReadCase {
      name: string;
      path: () => string;
      envelope: string[];
      document: unknown;
      variables?: () => Record<string, unknown>;
      /** The GraphQL data shaped as REST documents it. */
      expected: (data: Record<string, any>) => unknown;
      /** Something the body must hold, so equality is not two empty answers agreeing. */
      check: (body: any) => void;
    }
    const cases: ReadCase[] = [
      {
        name: 'node',
        path: () => `/api/compute/metal/nodes/${tree.nodes[1]!.id}`,
        envelope: ['node'],
        document: MetalNodeDocument,
        variables: () => ({ id: tree.nodes[1]!.id }),
        expected: (d) => ({ node: d.node }),
        check: (b) => {
          expect(b.node.id).toBe(tree.nodes[1]!.id);
          expect(b.node).toMatchObject({ provisionState: 'ready', poolId: tree.pools[0]!.id, siteId: tree.site.id, tenantId: tree.tenant.id });
          expect(b.node.bmc).toEqual({ address: '127.10.0.2', driver: 'redfish', driverOptions: expect.anything(), credentialsSet: true });
        },
      },
      {
        name: 'nodes',
        path: () => '/api/compute/metal/nodes',
        envelope: ['nodes', 'pageInfo'],
        document: MetalNodesDocument,
        variables: () => ({ first: 50, filter: {} }),
        expected: (d) => ({ nodes: d.nodes.edges.map((e: any) => e.node), pageInfo: d.nodes.pageInfo }),
        check: (b) => {
          expect(b.nodes.map((n: any) => n.id).sort()).toEqual(tree.nodes.map((n) => n.id).sort());
          expect(b.pageInfo).toEqual({ hasNextPage: false, endCursor: expect.any(String) });
        },
      },
      {
        name: 'sites',
        path: () => '/api/compute/sites',
        envelope: ['sites'],
        document: SitesDocument,
        expected: (d) => ({ sites: d.sites }),
        check: (b) => expect(b.sites.map((s: any) => s.id)).toContain(tree.site.id),
      },
      {
        name: 'site',
        path: () => `/api/compute/sites/${tree.site.id}`,
        envelope: ['site'],
        document: SiteDocument,
        variables: () => ({ id: tree.site.id }),
        expected: (d) => ({ site: d.node }),
        check: (b) => expect(b.site).toMatchObject({ id: tree.site.id, name: 'acme-site', tenantId: tree.tenant.id }),
      },
      {
        name: 'pools',
        path: () => `/api/compute/pools?siteId=${tree.site.id}`,
        envelope: ['pools'],
        document: PoolsDocument,
        variables: () => ({ siteId: tree.site.id }),
        expected: (d) => ({ pools: d.pools }),
        check: (b) => expect(b.pools.map((p: any) => p.id).sort()).toEqual(tree.pools.map((p) => p.id).sort()),
      },
      {
        name: 'pool',
        path: () => `/api/compute/pools/${tree.pools[1]!.id}`,
        envelope: ['pool'],
        document: PoolDocument,
        variables: () => ({ id: tree.pools[1]!.id }),
        expected: (d) => ({ pool: d.node }),
        check: (b) => {
          expect(b.pool).toMatchObject({ id: tree.pools[1]!.id, siteId: tree.site.id, name: 'acme-pool-1' });
          expect(b.pool.policy).toMatchObject({ agent: 'bcd', trustProvisioningNetwork: false, approverKeys: [] });
        },
      },
      {
        name: 'hardwareProfiles',
        path: () => '/api/compute/hardware-profiles',
        envelope: ['hardwareProfiles'],
        document: HardwareProfilesDocument,
        expected: (d) => ({ hardwareProfiles: d.hardwareProfiles }),
        check: (b) => expect(b.hardwareProfiles).toEqual([
          expect.objectContaining({ id: profileId, name: 'r650', driverBindings: { power: 'redfish', management: 'redfish', virtualMedia: 'idrac' } }),
        ]),
      },
      {
        name: 'viewer',
        path: () => '/api/viewer',
        envelope: ['viewer'],
        document: ViewerDocument,
        expected: (d) => ({ viewer: d.viewer }),
        check: (b) => expect(b.viewer).toMatchObject({ platformAdmin: true, tenantId: null, tokenId: expect.stringMatching(/^tok_/) }),
      },
    ];

    it.each(cases.map((c) => [c.name, c]))('%s', async (_name, c) => {
      const response = await rest(t.url, t.adminToken, 'GET', c.path());
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toMatch(/^application\/json/);
      expect(Object.keys(response.body).sort()).toEqual([...c.envelope].sort());
      const nonCamel = keysOf(response.body).filter((k) => !CAMEL.test(k));
      expect(nonCamel).toEqual([]);
      c.check(response.body);
      const data = await viaGraphql(t, c.document, c.variables?.() ?? {});
      expect(response.body).toEqual(c.expected(data));
    });

    it('pages nodes with first/after and filters by pool', async () => {
      const first = await rest(t.url, t.adminToken, 'GET', '/api/compute/metal/nodes?first=4');
      expect(first.status).toBe(200);
      expect(first.body.nodes).toHaveLength(4);
      expect(first.body.pageInfo.hasNextPage).toBe(true);
      const next = await rest(t.url, t.adminToken, 'GET', `/api/compute/metal/nodes?first=4&after=${encodeURIComponent(first.body.pageInfo.endCursor)}`);
      expect(next.status).toBe(200);
      expect(next.body.nodes).toHaveLength(2);
      expect(next.body.pageInfo.hasNextPage).toBe(false);
      const all = [...first.body.nodes, ...next.body.nodes].map((n: any) => n.id);
      expect(all).toEqual([...tree.nodes.map((n) => n.id)].sort());
      const pool = tree.pools[1]!.id;
      const filtered = await rest(t.url, t.adminToken, 'GET', `/api/compute/metal/nodes?poolId=${pool}&maintenance=false`);
      expect(filtered.status).toBe(200);
      expect(filtered.body.nodes.map((n: any) => n.poolId)).toEqual([pool, pool, pool]);
    });

    it('refuses an unknown query parameter, naming it', async () => {
      const response = await rest(t.url, t.adminToken, 'GET', '/api/compute/metal/nodes?colour=red');
      expect(response.status).toBe(400);
      expectErrorEnvelope(response.body, 'INVALID_INPUT');
      expect(response.body.error.message).toContain('query.colour');
    });
  });

  describe('write routes', () => {
    it('POST /api/compute/sites creates a site (201) that GET and GraphQL then return', async () => {
      const created = await rest(t.url, t.adminToken, 'POST', '/api/compute/sites', { tenantId: tree.tenant.id, name: 'fra1' });
      expect(created.status).toBe(201);
      expect(Object.keys(created.body)).toEqual(['site']);
      expect(created.body.site).toMatchObject({ id: expect.stringMatching(/^site_/), name: 'fra1', tenantId: tree.tenant.id });
      const fetched = await rest(t.url, t.adminToken, 'GET', `/api/compute/sites/${created.body.site.id}`);
      expect(fetched.status).toBe(200);
      expect(fetched.body).toEqual(created.body);
      const data = await viaGraphql(t, SiteDocument, { id: created.body.site.id });
      expect(data.node).toEqual(created.body.site);
    });

    it('POST /api/compute/pools creates a pool with its policy (201)', async () => {
      const created = await rest(t.url, t.adminToken, 'POST', '/api/compute/pools', {
        siteId: tree.site.id, name: 'gpu', policy: { agent: 'bcd', trustProvisioningNetwork: true },
      });
      expect(created.status).toBe(201);
      expect(created.body.pool).toMatchObject({
        id: expect.stringMatching(/^pool_/),
        siteId: tree.site.id,
        tenantId: tree.tenant.id,
        name: 'gpu',
        version: expect.any(Number),
        policy: { agent: 'bcd', trustProvisioningNetwork: true, hardwareProfile: null, approverKeys: [], quorum: null },
      });
      const data = await viaGraphql(t, PoolDocument, { id: created.body.pool.id });
      expect(data.node).toEqual(created.body.pool);
    });

    it('PATCH /api/compute/pools/{id}/policy merges, bumps the version, and is a compare-and-set', async () => {
      const created = await rest(t.url, t.adminToken, 'POST', '/api/compute/pools', { siteId: tree.site.id, name: 'cas', policy: { agent: 'bcd' } });
      expect(created.status).toBe(201);
      const { id, version } = created.body.pool;
      const patched = await rest(t.url, t.adminToken, 'PATCH', `/api/compute/pools/${id}/policy`, {
        policy: { trustProvisioningNetwork: true, hardwareProfile: 'r650' }, expectedVersion: version,
      });
      expect(patched.status).toBe(200);
      expect(Object.keys(patched.body)).toEqual(['pool']);
      expect(patched.body.pool.version).toBe(version + 1);
      expect(patched.body.pool.policy).toMatchObject({ agent: 'bcd', trustProvisioningNetwork: true, hardwareProfile: 'r650' });

      const stale = await rest(t.url, t.adminToken, 'PATCH', `/api/compute/pools/${id}/policy`, {
        policy: { agent: 'none' }, expectedVersion: version,
      });
      expect(stale.status).toBe(409);
      expectErrorEnvelope(stale.body, 'CONFLICT');
      const after = await rest(t.url, t.adminToken, 'GET', `/api/compute/pools/${id}`);
      expect(after.body.pool.policy.agent).toBe('bcd');
      expect(after.body.pool.version).toBe(version + 1);

      const unconditional = await rest(t.url, t.adminToken, 'PATCH', `/api/compute/pools/${id}/policy`, { policy: { agent: 'none' } });
      expect(unconditional.status).toBe(200);
      expect(unconditional.body.pool).toMatchObject({ version: version + 2, policy: { agent: 'none', hardwareProfile: 'r650' } });
    });

    it('POST /api/tokens returns a working token once; DELETE /api/tokens/{id} revokes it (then 401)', async () => {
      const created = await rest(t.url, t.adminToken, 'POST', '/api/tokens', {
        name: 'ci-reader',
        tenantId: tree.tenant.id,
        grants: [{ permission: 'compute:sites:read', scopeType: 'site', scopeId: tree.site.id }],
      });
      expect(created.status).toBe(201);
      expect(created.body.token).toEqual(expect.any(String));
      expect(created.body.apiToken).toMatchObject({ id: expect.stringMatching(/^tok_/), name: 'ci-reader', tenantId: tree.tenant.id });
      const token: string = created.body.token;

      const viewer = await rest(t.url, token, 'GET', '/api/viewer');
      expect(viewer.status).toBe(200);
      expect(viewer.body.viewer).toEqual({
        tokenId: created.body.apiToken.id,
        name: 'ci-reader',
        tenantId: tree.tenant.id,
        platformAdmin: false,
        grants: [{ permission: 'compute:sites:read', scopeType: 'site', scopeId: tree.site.id }],
      });
      const site = await rest(t.url, token, 'GET', `/api/compute/sites/${tree.site.id}`);
      expect(site.status).toBe(200);
      expect(site.body.site.id).toBe(tree.site.id);

      const revoked = await rest(t.url, t.adminToken, 'DELETE', `/api/tokens/${created.body.apiToken.id}`);
      expect(revoked.status).toBe(200);
      expect(revoked.body).toEqual({ apiToken: { id: created.body.apiToken.id, revokedAt: expect.any(String) } });
      expect(Number.isNaN(Date.parse(revoked.body.apiToken.revokedAt))).toBe(false);

      const refused = await rest(t.url, token, 'GET', '/api/viewer');
      expect(refused.status).toBe(401);
      expectErrorEnvelope(refused.body, 'UNAUTHENTICATED');
      const refusedGraphql = await gql(t.url, token, '{ viewer { tokenId } }');
      expect(refusedGraphql.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED');
    });
  });

  describe('routing errors', () => {
    it.each([
      ['GET', '/api/nothing-here'],
      ['GET', '/api/compute/metal/nodes/x/y'],
      ['POST', '/controlnode/nothing'],
      ['GET', '/no-such-page'],
    ])('%s %s is a 404 NOT_FOUND envelope', async (method, path) => {
      const response = await rest(t.url, t.adminToken, method, path, undefined, { 'x-request-id': 'rt-404' });
      expect(response.status).toBe(404);
      expectErrorEnvelope(response.body, 'NOT_FOUND');
      expect(response.body.error.requestId).toBe('rt-404');
    });

    const wrongMethod: [string, string, string[]][] = [
      ['DELETE', '/api/compute/sites', ['GET', 'POST']],
      ['PUT', '/api/compute/pools/pool_x/policy', ['PATCH']],
      ['POST', '/api/viewer', ['GET']],
      ['POST', '/api/compute/metal/nodes/node_x', ['GET']],
      ['GET', '/api/tokens/tok_x', ['DELETE']],
    ];
    const allowOf = (headers: Headers) => (headers.get('allow') ?? '').split(',').map((m) => m.trim()).filter(Boolean);

    it.each(wrongMethod)('%s %s is a 405 with Allow', async (method, path, allowed) => {
      const response = await rest(t.url, t.adminToken, method, path, undefined, { 'x-request-id': 'rt-405' });
      expect(response.status).toBe(405);
      expect([...new Set(allowOf(response.headers))].sort()).toEqual([...allowed].sort());
      // The message says what the route takes, not what was sent (docs/api.md: never repeat the value sent).
      expect(response.body).toEqual({ error: { code: expect.any(String), message: expect.stringContaining(allowed[0]!), requestId: 'rt-405' } });
      expect(response.body.error.message).not.toContain(method);
    });

    it.each(wrongMethod)('%s %s names each allowed method once in Allow', async (method, path, allowed) => {
      const response = await rest(t.url, t.adminToken, method, path);
      expect(allowOf(response.headers).sort()).toEqual([...allowed].sort());
    });

    const wrongType: [string, () => string][] = [
      ['a site id as a node', () => `/api/compute/metal/nodes/${tree.site.id}`],
      ['a pool id as a node', () => `/api/compute/metal/nodes/${tree.pools[0]!.id}`],
      ['a node id as a site', () => `/api/compute/sites/${tree.nodes[0]!.id}`],
      ['a site id as a pool', () => `/api/compute/pools/${tree.site.id}`],
      ['a hardware profile id as a pool', () => `/api/compute/pools/${profileId}`],
      ['a well-formed node id that does not exist', () => `/api/compute/metal/nodes/node_01900000-0000-7000-8000-000000000000`],
    ];
    it.each(wrongType)('%s is a 404', async (_name, path) => {
      const response = await rest(t.url, t.adminToken, 'GET', path());
      expect(response.status).toBe(404);
      expectErrorEnvelope(response.body, 'NOT_FOUND');
    });

    it.each([
      ['/api/compute/metal/nodes/garbage'],
      ['/api/compute/metal/nodes/node_not-a-uuid'],
      ['/api/compute/sites/%20'],
      ['/api/compute/pools/zzz_01900000-0000-7000-8000-000000000000'],
    ])('a garbage id (%s) is a 400 naming id', async (path) => {
      const response = await rest(t.url, t.adminToken, 'GET', path);
      expect(response.status).toBe(400);
      expectErrorEnvelope(response.body, 'INVALID_INPUT');
      expect(response.body.error.message).toMatch(/\bid\b/);
    });
  });
});
