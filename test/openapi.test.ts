import http from 'node:http';
import Ajv2020, { type ValidateFunction } from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { routes, type Route } from '../src/rest/routes';
import { openApiDocument } from '../src/rest/openapi';
import { limitRoute } from '../src/rest/router';
import { EXAMPLE_IDS } from '../src/rest/examples';
import { HTTP_STATUS, ERROR_CODES, httpStatusOf, type ErrorCode } from '../src/errors';
import { docsAssets } from '../src/rest/docs';
import { uiAssets } from '../src/ui/page';
import { graphiqlAssets } from '../src/graphql/graphiql';
import { startTestApp, type TestApp } from './helpers/app';
import { makeTenantTree } from './helpers/fixtures';
import { gql } from './helpers/client';

type Doc = { paths: Record<string, Record<string, any>>; components: { schemas: Record<string, unknown> } };

/** JSON Schema 2020-12 (OpenAPI 3.1's dialect) with the document's components, for $ref. */
function schemaChecker(doc: Doc) {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  ajv.addSchema({ $id: 'openapi.json', components: doc.components });
  const rebase = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(rebase);
    if (value && typeof value === 'object') {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, k === '$ref' && typeof v === 'string' && v.startsWith('#/') ? `openapi.json${v}` : rebase(v)]));
    }
    return value;
  };
  const cache = new Map<unknown, ValidateFunction>();
  return (schema: unknown, value: unknown): string[] => {
    let validate = cache.get(schema);
    if (!validate) cache.set(schema, (validate = ajv.compile(rebase(schema) as object)));
    return validate(value) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message}`);
  };
}

// The router writes the string limits of src/limits.ts into its routes; /openapi.json shows them.
const doc = openApiDocument(routes.map(limitRoute), 'test') as unknown as Doc;
const check = schemaChecker(doc);
const operations = Object.entries(doc.paths).flatMap(([path, item]) => Object.entries(item).map(([method, op]) => ({ path, method, op })));
const routeOps = routes.map((route) => ({ route, op: doc.paths[route.path]![route.method.toLowerCase()] }));

describe('/openapi.json: every operation documents its bodies, responses and examples', () => {
  it.each(routes.map((r) => [r.method, r.path, r] as const))('%s %s declares its refusals and a complete example', (_m, _p, route) => {
    expect(route.refusals).toBeDefined();
    for (const code of route.refusals!) expect(ERROR_CODES).toContain(code);
    expect(route.example).toBeDefined();
    expect(route.example!.response).toBeDefined();
    expect(Object.keys(route.example!.params ?? {}).sort()).toEqual(Object.keys(route.params ?? {}).sort());
    expect(route.example!.body !== undefined).toBe(route.body !== undefined);
  });

  it.each(operations.map((o) => [o.method.toUpperCase(), o.path, o.op] as const))('%s %s: every response has a schema and an example', (_m, _p, op) => {
    const statuses = Object.keys(op.responses);
    expect(statuses.some((s) => s.startsWith('2'))).toBe(true);
    expect(statuses).toEqual(expect.arrayContaining(['400', '401', '500']));
    for (const [status, response] of Object.entries<any>(op.responses)) {
      expect(response.description).toEqual(expect.any(String));
      const media = Object.values<any>(response.content ?? {});
      expect(media.length).toBeGreaterThan(0);
      for (const m of media) {
        expect(m.schema).toBeDefined();
        const examples = m.example !== undefined ? [m.example] : Object.values<any>(m.examples ?? {}).map((e) => e.value);
        expect(examples.length).toBeGreaterThan(0);
        if (!status.startsWith('2')) {
          expect(m.schema).toEqual({ $ref: '#/components/schemas/Error' });
          // Each error example's code is one this status carries.
          for (const example of examples) {
            const code = example.error.code as ErrorCode;
            if (status === '413') expect(code).toBe('INVALID_INPUT');
            else expect(String(httpStatusOf(code, example.error.details))).toBe(status);
          }
        }
      }
    }
    if (op.requestBody) {
      const body = op.requestBody.content['application/json'];
      expect(body.schema).toBeDefined();
      expect(body.example).toBeDefined();
    }
  });

  it.each(routeOps.map(({ route, op }) => [route.method, route.path, route, op] as const))('%s %s lists each status its codes answer with, and 413 when it takes a body', (_m, _p, route, op) => {
    const codes: ErrorCode[] = ['INVALID_INPUT', 'UNAUTHENTICATED', 'INTERNAL', 'STORAGE_UNAVAILABLE', ...route.refusals!];
    const expected = [...new Set([...codes.map((c) => String(HTTP_STATUS[c])), ...(route.body ? ['413'] : []), String(route.successStatus ?? 200)])].sort();
    expect(Object.keys(op.responses).sort()).toEqual(expected);
    for (const code of codes) {
      const response = op.responses[String(HTTP_STATUS[code])];
      expect(response.description).toContain(code);
      expect(response.content['application/json'].examples[code].value.error.code).toBe(code);
    }
  });

  it.each(operations.map((o) => [o.method.toUpperCase(), o.path, o.op] as const))('%s %s: every example is valid against its schema', (_m, _p, op) => {
    const problems: string[] = [];
    for (const p of op.parameters ?? []) if (p.example !== undefined) problems.push(...check(p.schema, p.example).map((e) => `parameter ${p.name}: ${e}`));
    if (op.requestBody) {
      const body = op.requestBody.content['application/json'];
      problems.push(...check(body.schema, body.example).map((e) => `request body: ${e}`));
    }
    for (const [status, response] of Object.entries<any>(op.responses)) {
      for (const [type, m] of Object.entries<any>(response.content ?? {})) {
        if (type !== 'application/json') continue;
        const examples = m.example !== undefined ? { example: m.example } : Object.fromEntries(Object.entries<any>(m.examples ?? {}).map(([k, e]) => [k, e.value]));
        for (const [name, value] of Object.entries(examples)) problems.push(...check(m.schema, value).map((e) => `${status} ${name}: ${e}`));
      }
    }
    expect(problems).toEqual([]);
  });

  it('the example check refuses a wrong example (a field missing, a wrong type, an unknown body field)', () => {
    const enroll = routeOps.find(({ route }) => route.operation === 'Enroll')!;
    const success = enroll.op.responses['200'].content['application/json'];
    const { provisionState: _gone, ...node } = success.example.node;
    expect(check(success.schema, { node })).not.toEqual([]);
    expect(check(success.schema, { node: { ...success.example.node, version: 'four' } })).not.toEqual([]);
    const body = enroll.op.requestBody.content['application/json'];
    expect(check(body.schema, { ...body.example, colour: 'blue' })).not.toEqual([]);
    expect(check({ $ref: '#/components/schemas/Error' }, { error: { code: 'NOPE', message: 'x', requestId: 'r' } })).not.toEqual([]);
  });
});

/** Replaces the example ids by the ids of real rows, so an example can be sent as it is documented. */
function withRealIds<T>(value: T, ids: Partial<Record<keyof typeof EXAMPLE_IDS, string>>): T {
  let text = JSON.stringify(value);
  for (const [key, real] of Object.entries(ids)) text = text.split(EXAMPLE_IDS[key as keyof typeof EXAMPLE_IDS]).join(real!);
  return JSON.parse(text) as T;
}

describe('/openapi.json against the running service: the documented examples work and answers match the schemas', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let tenantAdmin: string;
  let ids: Partial<Record<keyof typeof EXAMPLE_IDS, string>>;
  let served: Doc;

  beforeAll(async () => {
    // The API alone: the examples' answers are the verbs' own. With the engine and the built-in
    // agent running, the runs the examples start (their BMCs answer nothing) moved the nodes on in
    // the background, and a loaded CI run saw a ConfirmMac lose its compare-and-set to a run's node
    // write (409) and a node the test refuses Manage for already failed (200).
    t = await startTestApp({ role: 'api' });
    tree = await makeTenantTree(t.app.database.prisma, 'docs', { pools: 1, nodesPerPool: 3 });
    const profile = await gql(t.url, t.adminToken, `mutation { createHardwareProfile(input: {
      name: "r650", driverBindings: { power: "redfish", management: "redfish", virtualMedia: "idrac" } }) { id } }`);
    expect(profile.errors).toBeUndefined();
    const created = await call('POST', '/api/tokens', t.adminToken, {
      name: 'docs-admin', tenantId: tree.tenant.id, grants: [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }],
    });
    expect(created.status).toBe(201);
    tenantAdmin = (created.body as { token: string }).token;
    ids = { tenant: tree.tenant.id, site: tree.site.id, pool: tree.pools[0]!.id, node: tree.nodes[0]!.id, otherNode: tree.nodes[1]!.id };
    served = (await call('GET', '/openapi.json', null)).body as Doc;
  });
  afterAll(() => t.stop());

  async function call(method: string, path: string, token: string | null, body?: unknown): Promise<{ status: number; body: unknown }> {
    const response = await fetch(`${t.url}${path}`, {
      method,
      headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: await response.json() };
  }

  it('serves the document the route table builds', () => {
    expect(served.paths).toEqual(JSON.parse(JSON.stringify(doc.paths)));
  });

  /** Sends the route's documented example (with real ids) and checks the answer against the documented schema. */
  async function sendExample(route: Route, overrides: { params?: Record<string, string>; body?: Record<string, unknown> } = {}) {
    const example = withRealIds(route.example!, ids);
    const params = { ...example.params, ...overrides.params };
    const path = route.path.replace(/\{(\w+)\}/g, (_m, name: string) => encodeURIComponent(params[name]!));
    const query = example.query ? `?${new URLSearchParams(Object.entries(example.query).map(([k, v]) => [k, String(v)]))}` : '';
    const answer = await call(route.method, path + query, tenantAdmin, overrides.body ?? example.body);
    const status = String(route.successStatus ?? 200);
    expect({ status: String(answer.status), body: answer.body }).toEqual({ status, body: expect.anything() });
    const schema = doc.paths[route.path]![route.method.toLowerCase()].responses[status].content['application/json'].schema;
    expect(check(schema, answer.body)).toEqual([]);
    return answer.body as Record<string, any>;
  }
  const route = (operation: string) => routes.find((r) => r.operation === operation)!;

  it.each(['MetalNode', 'MetalNodes', 'Sites', 'Site', 'Pools', 'Pool', 'HardwareProfiles', 'Viewer'])('%s: the example request answers as documented', async (operation) => {
    const body = await sendExample(route(operation));
    expect(Object.keys(body).sort()).toEqual(Object.keys(route(operation).example!.response as object).sort());
  });

  it('CreateSite, CreatePool, UpdatePoolPolicy, CreateApiToken, RevokeApiToken: the examples answer as documented', async () => {
    const site = await sendExample(route('CreateSite'));
    expect(site.site.name).toBe('fra1');
    const pool = await sendExample(route('CreatePool'));
    expect(pool.pool.policy).toEqual((route('CreatePool').example!.response as any).pool.policy);
    const policy = await sendExample(route('UpdatePoolPolicy'));
    expect(policy.pool.policy.quorum).toBe(1);
    const token = await sendExample(route('CreateApiToken'));
    expect(token.token).toMatch(/^mcp_/);
    const revoked = await sendExample(route('RevokeApiToken'), { params: { id: token.apiToken.id } });
    expect(revoked.apiToken.id).toBe(token.apiToken.id);
  });

  it('Enroll, ConfirmMac, Discovered, Inspect, Bulk: the examples answer as documented', async () => {
    // The documented 10.0.0.5 would be connected to by the agent: the test's service takes loopback BMCs only (issue 21 item 7).
    const example = withRealIds(route('Enroll').example!.body!, ids) as { bmc: Record<string, unknown> };
    const enrolled = await sendExample(route('Enroll'), { body: { ...example, bmc: { ...example.bmc, address: '127.0.0.5' }, macs: undefined, productUuid: undefined } });
    expect(enrolled.node.provisionState).toBe('enrolling');
    const confirmed = await sendExample(route('ConfirmMac'), { body: { nodeId: enrolled.node.id, mac: '52:54:00:ab:cd:ef' } });
    expect(confirmed.node.macs).toEqual(['52:54:00:ab:cd:ef']);
    await sendExample(route('Discovered'));
    const inspected = await sendExample(route('Inspect'), { body: { nodeId: tree.nodes[2]!.id } });
    expect(inspected.node.provisionState).toBe('inspecting');
    const bulk = await sendExample(route('Bulk'));
    expect(bulk.nodes.map((n: { provisionState: string }) => n.provisionState)).toEqual(['retiring', 'retiring']);
  });

  it('refusals carry the documented error envelope, with a status the operation documents', async () => {
    const cases: [Route, string, string | null, unknown][] = [
      [route('MetalNode'), `/api/compute/metal/nodes/${EXAMPLE_IDS.node}`, tenantAdmin, undefined],
      [route('Viewer'), '/api/viewer', null, undefined],
      [route('CreateSite'), '/api/compute/sites', tenantAdmin, {}],
      [route('Manage'), '/api/compute/metal/manage', tenantAdmin, { nodeId: tree.nodes[1]!.id }],
    ];
    for (const [r, path, token, body] of cases) {
      const answer = await call(r.method, path, token, body);
      const op = doc.paths[r.path]![r.method.toLowerCase()];
      expect(Object.keys(op.responses)).toContain(String(answer.status));
      expect(answer.status).toBeGreaterThanOrEqual(400);
      expect(check(op.responses[String(answer.status)].content['application/json'].schema, answer.body)).toEqual([]);
    }
  });
});

describe('the files of the browser pages (/docs/assets, /graphiql/assets, /ui/assets)', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t.stop());

  /** A raw request: fetch would normalise `..` out of the path before it left. */
  function raw(method: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
    const { hostname, port } = new URL(t.url);
    return new Promise((resolve, reject) => {
      const req = http.request({ hostname, port, method, path, headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      });
      req.on('error', reject);
      req.end();
    });
  }

  const TYPES: Record<string, RegExp> = { js: /^text\/javascript; charset=utf-8$/, css: /^text\/css; charset=utf-8$/, png: /^image\/png$/, ico: /^image\/x-icon$/ };
  const files = [...docsAssets.names.map((n) => [docsAssets, n] as const), ...graphiqlAssets.names.map((n) => [graphiqlAssets, n] as const), ...uiAssets.names.map((n) => [uiAssets, n] as const)];

  it.each(files.map(([set, name]) => [`${set.prefix}${name}`, set, name] as const))('%s: its content type, a year of cache with ?v=, revalidation without', async (_url, set, name) => {
    const href = await set.href(name);
    const versioned = await raw('GET', href);
    expect(versioned.status).toBe(200);
    expect(versioned.headers['content-type']).toMatch(TYPES[name.split('.').pop()!]!);
    expect(versioned.headers['x-content-type-options']).toBe('nosniff');
    expect(versioned.headers['cache-control']).toBe('public, max-age=31536000, immutable');
    expect(Number(versioned.headers['content-length'])).toBe(versioned.body.length);
    expect(versioned.body.length).toBeGreaterThan(0);
    const plain = await raw('GET', `${set.prefix}${name}`);
    expect(plain.headers['cache-control']).toBe('no-cache');
    expect(plain.body.equals(versioned.body)).toBe(true);
    const again = await raw('GET', `${set.prefix}${name}`, { 'if-none-match': String(plain.headers.etag) });
    expect(again.status).toBe(304);
    expect(again.body.length).toBe(0);
    const head = await raw('HEAD', href);
    expect(head.status).toBe(200);
    expect(head.body.length).toBe(0);
  });

  it('gzips text files for clients that accept it, and only for them', async () => {
    const href = await docsAssets.href('swagger-ui-bundle.js');
    const zipped = await raw('GET', href, { 'accept-encoding': 'gzip, br' });
    expect(zipped.headers['content-encoding']).toBe('gzip');
    expect(zipped.headers.vary).toBe('accept-encoding');
    const { gunzipSync } = await import('node:zlib');
    const plain = await raw('GET', href);
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(gunzipSync(zipped.body).equals(plain.body)).toBe(true);
    expect((await raw('GET', href, { 'accept-encoding': 'gzip;q=0' })).headers['content-encoding']).toBeUndefined();
  });

  it.each([
    '/docs/assets/../package.json',
    '/docs/assets/..%2f..%2fpackage.json',
    '/docs/assets/%2e%2e/package.json',
    '/docs/assets/swagger-ui-bundle.js.map',
    '/docs/assets/index.html',
    '/docs/assets/',
    '/docs/assets/swagger-ui.css/',
    '/graphiql/assets/../../../../etc/passwd',
    '/graphiql/assets/cjs/graphiql.js',
    '/ui/assets/../../package.json',
    '/ui/assets/status.js.map',
    '/ui/assets/client/status.js',
  ])('serves nothing outside its list: %s', async (path) => {
    const answer = await raw('GET', path);
    expect(answer.status).toBe(404);
    expect(JSON.parse(answer.body.toString())).toEqual({ error: expect.objectContaining({ code: 'NOT_FOUND' }) });
    expect(answer.body.toString()).not.toContain('"version"');
  });

  it('refuses methods other than GET and HEAD with 405 and Allow', async () => {
    const answer = await raw('POST', '/docs/assets/swagger-ui.css');
    expect(answer.status).toBe(405);
    expect(answer.headers.allow).toBe('GET, HEAD');
  });

  it('GraphiQL at GET /graphql (Accept: text/html) links only files of this service, each of which loads', async () => {
    const page = await raw('GET', '/graphql', { accept: 'text/html' });
    expect(page.status).toBe(200);
    const html = page.body.toString();
    expect(html).toContain('<title>Metal control plane</title>');
    const links = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(links.length).toBe(4);
    for (const link of links) {
      expect(link).toMatch(/^\/graphiql\/assets\/[\w.-]+\?v=[\w-]+$/);
      expect((await raw('GET', link)).status).toBe(200);
    }
    expect(html).not.toMatch(/https?:\/\//);
    // The options (title, CSRF header, a first query saying where the token goes) travel as JSON
    // that cannot close the script element; no placeholder token is sent (it would fail the schema).
    const options = JSON.parse(/<script type="application\/json" id="graphiql-options">([^<]*)<\/script>/.exec(html)![1]!);
    expect(JSON.parse(options.headers)).toEqual({ 'x-graphql-csrf': '1' });
    expect(options.defaultQuery).toContain('"authorization": "Bearer <your token>"');
  });
});
