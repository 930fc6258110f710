import { startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree } from './helpers/fixtures';

/** `fields { type { fields { type ... } } }`: each level a real field of the introspection schema. */
function alternating(levels: number): string {
  let inner = 'name';
  for (let i = levels; i >= 1; i -= 1) inner = i % 2 === 1 ? `fields { ${inner} }` : `type { ${inner} }`;
  return inner;
}
/** `ofType { ofType { ... name } }`, `levels` deep. */
const ofTypes = (levels: number) => 'ofType { '.repeat(levels) + 'name' + ' }'.repeat(levels);

describe('abuse limits', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  beforeAll(async () => {
    t = await startTestApp();
    tree = await makeTenantTree(t.app.database.prisma, 'acme', { pools: 1, nodesPerPool: 3 });
  });
  afterAll(() => t.stop());

  it('the configured limits are the documented defaults', () => {
    expect(t.app.config.maxDepth).toBe(15);
    expect(t.app.config.maxPageSize).toBe(500);
    expect(t.app.config.maxCost).toBe(100000);
    expect(t.app.config.corsOrigins).toEqual([]);
  });

  describe('query depth', () => {
    // Each query below is 30 fields deep (the issue's example) and valid GraphQL. The data types have
    // no cycle (node -> pool -> site ends there), so depth comes from the introspection types.
    const deep: [string, () => string][] = [
      ['__type with fields/type alternating', () => `{ __type(name: "Pool") { ${alternating(29)} } }`],
      ['__type with an ofType chain', () => `{ __type(name: "Pool") { ${ofTypes(28)} } }`],
      ['nested fragment spreads', () => {
        const fragments = Array.from({ length: 28 }, (_, i) =>
          `fragment F${i} on __Type { ${i === 27 ? 'name' : `ofType { ...F${i + 1} }`} }`);
        return `{ __type(name: "Pool") { ofType { ...F0 } } }\n${fragments.join('\n')}`;
      }],
      ['__schema with an ofType chain', () => `{ __schema { types { ${ofTypes(27)} } } }`],
    ];

    it.each(deep)('a 30-level query (%s) is refused with INVALID_INPUT', async (_name, query) => {
      const result = await gql(t.url, t.adminToken, query(), { id: tree.pools[0]!.id });
      expect(result.errors).toBeDefined();
      expect(codeOf(result)).toBe('INVALID_INPUT');
      expect(result.data ?? null).toBeNull();
    });

    it('the refusal of a 30-level query names the depth limit', async () => {
      const result = await gql(t.url, t.adminToken, deep[0]![1]());
      expect(codeOf(result)).toBe('INVALID_INPUT');
      const messages = (result.errors ?? []).map((e) => e.message);
      expect(messages.some((m) => /depth/i.test(m) && m.includes('15'))).toBe(true);
    });

    it('the full introspection query GraphiQL sends still runs', async () => {
      const { getIntrospectionQuery } = await import('graphql');
      const result = await gql(t.url, t.adminToken, getIntrospectionQuery());
      expect(result.errors).toBeUndefined();
      expect(result.data!.__schema.queryType.name).toBe('Query');
    });

    it('a query at the depth limit runs', async () => {
      // __type, 13 ofType and name: 15 levels
      const result = await gql(t.url, t.adminToken, `{ __type(name: "Pool") { ${ofTypes(13)} } }`);
      expect(result.errors).toBeUndefined();
      expect(result.data).toEqual({ __type: { ofType: null } });
    });

    it('one level past the limit is refused', async () => {
      // __type, 14 ofType and name: 16 levels
      const result = await gql(t.url, t.adminToken, `{ __type(name: "Pool") { ${ofTypes(14)} } }`);
      expect(codeOf(result)).toBe('INVALID_INPUT');
      expect(result.errors![0]!.message).toMatch(/depth/i);
    });

    it('an ordinary nodes page with pool and site runs', async () => {
      const result = await gql(t.url, t.adminToken, '{ nodes(first: 10) { edges { node { id pool { id site { id name } } site { id } } } } }');
      expect(result.errors).toBeUndefined();
      expect(result.data!.nodes.edges).toHaveLength(3);
    });
  });

  describe('page size', () => {
    const pageQuery = 'query ($first: Int, $last: Int) { nodes(first: $first, last: $last) { edges { node { id } } } }';

    it.each([
      ['first', 10000],
      ['first', 501],
      ['first', 0],
      ['last', 10000],
    ])('GraphQL nodes(%s: %i) in variables is INVALID_INPUT naming the argument and the maximum', async (arg, value) => {
      const result = await gql(t.url, t.adminToken, pageQuery, { [arg]: value });
      expect(codeOf(result)).toBe('INVALID_INPUT');
      expect(result.errors![0]!.message).toMatch(new RegExp(`\\b${arg}\\b`));
      expect(result.errors![0]!.message).toContain('500');
      expect(result.data ?? null).toBeNull();
    });

    it.each([['first'], ['last']])('GraphQL nodes(%s: -1) is INVALID_INPUT naming the argument', async (arg) => {
      const result = await gql(t.url, t.adminToken, pageQuery, { [arg]: -1 });
      expect(codeOf(result)).toBe('INVALID_INPUT');
      expect(result.errors![0]!.message).toMatch(new RegExp(`\\b${arg}\\b`));
    });

    it('GraphQL nodes(first: 500) is the largest page allowed', async () => {
      const result = await gql(t.url, t.adminToken, pageQuery, { first: 500 });
      expect(result.errors).toBeUndefined();
      expect(result.data!.nodes.edges).toHaveLength(3);
    });

    it('GraphQL nodes(first: 10000) written in the query is refused with INVALID_INPUT', async () => {
      const result = await gql(t.url, t.adminToken, '{ nodes(first: 10000) { edges { node { id } } } }');
      expect(codeOf(result)).toBe('INVALID_INPUT');
      expect(result.data ?? null).toBeNull();
    });

    it('GraphQL nodes(first: 10000) written in the query names first and the maximum', async () => {
      const result = await gql(t.url, t.adminToken, '{ nodes(first: 10000) { edges { node { id } } } }');
      expect(result.errors![0]!.message).toMatch(/\bfirst\b/);
      expect(result.errors![0]!.message).toContain('500');
    });

    it.each([
      ['?first=10000', /query\.first|\bfirst\b/, '500'],
      ['?first=501', /\bfirst\b/, '500'],
      ['?first=0', /query\.first/, '1'],
      ['?first=ten', /query\.first/, 'integer'],
    ])('REST /api/compute/metal/nodes%s is 400 naming first', async (search, field, limit) => {
      const response = await rest(t.url, t.adminToken, 'GET', `/api/compute/metal/nodes${search}`);
      expect(response.status).toBe(400);
      expect(response.body.error).toEqual(expect.objectContaining({ code: 'INVALID_INPUT', requestId: expect.any(String) }));
      expect(response.body.error.message).toMatch(field);
      expect(response.body.error.message).toContain(limit);
    });

    it('REST ?first=500 is allowed', async () => {
      const response = await rest(t.url, t.adminToken, 'GET', '/api/compute/metal/nodes?first=500');
      expect(response.status).toBe(200);
      expect(response.body.nodes).toHaveLength(3);
    });
  });

  describe('aliases, cost, tokens, directives', () => {
    // `__typename` is on armor's alias allow-list (cheap by nature): count aliases of a real field.
    const aliases = (n: number) => `{ ${Array.from({ length: n }, (_, i) => `a${i}: viewer { name }`).join(' ')} }`;

    it('30 aliases run', async () => {
      const result = await gql(t.url, t.adminToken, aliases(30));
      expect(result.errors).toBeUndefined();
      expect(Object.keys(result.data!)).toHaveLength(30);
    });

    it.each([31, 500])('%i aliases are refused with INVALID_INPUT naming aliases', async (n) => {
      const result = await gql(t.url, t.adminToken, aliases(n));
      expect(codeOf(result)).toBe('INVALID_INPUT');
      expect(result.errors![0]!.message).toMatch(/alias/i);
      expect(result.data ?? null).toBeNull();
    });

    it('aliased expensive pages are refused for cost', async () => {
      const page = 'nodes(first: 400) { edges { node { id name provisionState maintenance pool { id name } site { id name } } } }';
      const result = await gql(t.url, t.adminToken, `{ ${Array.from({ length: 5 }, (_, i) => `p${i}: ${page}`).join(' ')} }`);
      expect(codeOf(result)).toBe('INVALID_INPUT');
      expect(result.errors![0]!.message).toMatch(/cost/i);
      expect(result.data ?? null).toBeNull();
    });

    it('a cheap page of the same shape runs (cost depends on the size asked)', async () => {
      const result = await gql(t.url, t.adminToken, '{ nodes(first: 20) { edges { node { id name provisionState maintenance pool { id name } site { id name } } } } }');
      expect(result.errors).toBeUndefined();
      expect(result.data!.nodes.edges).toHaveLength(3);
    });

    it('a query of more than 5000 tokens is refused', async () => {
      const result = await gql(t.url, t.adminToken, `{ ${'__typename '.repeat(6000)}}`);
      expect(codeOf(result)).toBe('INVALID_INPUT');
      expect(result.errors![0]!.message).toMatch(/token/i);
    });

    it('more than 30 directives are refused', async () => {
      const result = await gql(t.url, t.adminToken, `{ __typename ${'@include(if: true) '.repeat(31)}}`);
      expect(codeOf(result)).toBe('INVALID_INPUT');
      expect(result.errors![0]!.message).toMatch(/directive/i);
    });
  });

  describe('CSRF', () => {
    const url = () => `${t.url}/graphql?query=${encodeURIComponent('{ __typename }')}`;

    it('a GET without the CSRF header is refused with 403', async () => {
      const response = await fetch(url(), { headers: { accept: 'application/json' } });
      expect(response.status).toBe(403);
      const body = (await response.json()) as any;
      expect(body.data ?? null).toBeNull();
      expect(body.errors?.[0]?.extensions?.code).toBe('PERMISSION_DENIED');
    });

    it('a GET with x-graphql-csrf: 1 runs', async () => {
      const response = await fetch(url(), { headers: { accept: 'application/json', 'x-graphql-csrf': '1' } });
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ data: { __typename: 'Query' } });
    });

    it.each([
      ['text/plain'],
      ['application/x-www-form-urlencoded'],
      ['multipart/form-data; boundary=x'],
    ])('a simple-request POST (%s) without the CSRF header is refused with 403', async (contentType) => {
      const response = await fetch(`${t.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': contentType },
        body: JSON.stringify({ query: 'mutation { createTenant(input: {name: "csrf"}) { id } }' }),
      });
      expect(response.status).toBe(403);
      expect(await t.app.database.prisma.tenant.count({ where: { name: 'csrf' } })).toBe(0);
    });

    it('a JSON POST (never a simple request) needs no CSRF header', async () => {
      const result = await gql(t.url, null, '{ __typename }');
      expect(result.status).toBe(200);
      expect(result.data).toEqual({ __typename: 'Query' });
    });
  });

  describe('CORS', () => {
    const preflight = (base: string, origin: string, path = '/graphql') =>
      fetch(`${base}${path}`, {
        method: 'OPTIONS',
        headers: {
          origin,
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'authorization, content-type',
        },
      });

    it.each([
      ['a preflight', (base: string) => preflight(base, 'https://evil.example')],
      ['a POST', (base: string) => fetch(`${base}/graphql`, { method: 'POST', headers: { origin: 'https://evil.example', 'content-type': 'application/json' }, body: '{"query":"{ __typename }"}' })],
      ['a GET with the CSRF header', (base: string) => fetch(`${base}/graphql?query=%7B__typename%7D`, { headers: { origin: 'https://evil.example', 'x-graphql-csrf': '1' } })],
      ['a REST preflight', (base: string) => preflight(base, 'https://evil.example', '/api/viewer')],
    ])('closed by default: %s from another origin gets no Access-Control-Allow-Origin', async (_name, send) => {
      const response = await send(t.url);
      expect(response.headers.get('access-control-allow-origin')).toBeNull();
      expect(response.headers.get('access-control-allow-credentials')).toBeNull();
    });

    describe.each([
      [['https://ui.example']],
      [['https://ui.example', 'https://ops.example']],
    ])('with corsOrigins %j', (origins) => {
      let configured: TestApp;
      beforeAll(async () => {
        configured = await startTestApp({ corsOrigins: origins });
      });
      afterAll(() => configured.stop());

      it.each(origins.map((o) => [o]))('%s is allowed, with the headers a browser client needs', async (origin) => {
        const response = await preflight(configured.url, origin);
        expect(response.status).toBeLessThan(300);
        expect(response.headers.get('access-control-allow-origin')).toBe(origin);
        const allowed = (response.headers.get('access-control-allow-headers') ?? '').toLowerCase().split(/\s*,\s*/);
        expect(allowed).toEqual(expect.arrayContaining(['authorization', 'content-type', 'x-graphql-csrf']));
        expect(response.headers.get('access-control-allow-credentials')).toBeNull();

        const actual = await fetch(`${configured.url}/graphql`, {
          method: 'POST',
          headers: { origin, 'content-type': 'application/json' },
          body: '{"query":"{ __typename }"}',
        });
        expect(actual.status).toBe(200);
        expect(actual.headers.get('access-control-allow-origin')).toBe(origin);
      });

      it('https://evil.example is still not allowed', async () => {
        const response = await preflight(configured.url, 'https://evil.example');
        const allowOrigin = response.headers.get('access-control-allow-origin');
        expect(allowOrigin === null || origins.includes(allowOrigin) || allowOrigin === 'null').toBe(true);
        expect(allowOrigin).not.toBe('https://evil.example');
        expect(allowOrigin).not.toBe('*');
      });
    });
  });
});
