import pg from 'pg';
import { capturingLogger, startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { until, wsClient, wsSubscribe } from './helpers/streams';
import { routes } from '../src/rest/routes';
import { LIMITS } from '../src/limits';
import { uniqueViolation } from '../src/db/unique';

const PASSWORD = 'S3cret-edge-BMC-pa55';
const ENROLL = 'mutation ($i: MetalEnrollInput!) { enrollNode(input: $i) { node { id } } }';

/** `depth` levels of `[`: a JSON text no recursive walker survives. */
const deepJson = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);

describe('the edge: auth first, inputs checked without echo, limits, NUL, depth, races', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let token: string;
  let sql: pg.Client;
  const logLines: string[] = [];

  beforeAll(async () => {
    t = await startTestApp({}, { log: capturingLogger(logLines) });
    tree = await makeTenantTree(t.app.database.prisma, 'edge', { pools: 1, nodesPerPool: 6 });
    token = await makeToken(t.app.database.prisma, tree.tenant.id, [
      { permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id },
      { permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id },
    ]);
    sql = new pg.Client({ connectionString: t.app.databaseUrl });
    await sql.connect();
  });
  afterAll(async () => {
    await sql.end();
    await t.stop();
  });

  const secrets = async () => Number((await sql.query('SELECT count(*) FROM secret')).rows[0].count);
  const bmc = (over: Record<string, unknown> = {}, credentials: Record<string, unknown> = {}) => ({
    address: '127.0.0.5', driver: 'redfish', credentials: { username: 'root', password: PASSWORD, ...credentials }, ...over,
  });

  describe('input errors never repeat the input (responses and logs)', () => {
    const graphqlCases: [string, string, Record<string, unknown>, RegExp][] = [
      ['poolId missing', ENROLL, { i: { bmc: bmc() } }, /^\$i\.poolId: is required$/],
      ['bmc.driver missing', ENROLL, { i: { poolId: 'pol_x', bmc: { address: '127.0.0.5', credentials: { username: 'root', password: PASSWORD } } } }, /^\$i\.bmc\.driver: is required$/],
      ['an extra key in credentials', ENROLL, { i: { poolId: 'pol_x', bmc: bmc({}, { foo: 1 }) } }, /^\$i\.bmc\.credentials\.foo: is not a known field$/],
      ['a wrong type beside the password', ENROLL, { i: { poolId: 'pol_x', bmc: bmc({ address: 5 }) } }, /^\$i\.bmc\.address: must be a string$/],
      ['the password over its limit', ENROLL, { i: { poolId: 'pol_x', bmc: bmc({}, { password: PASSWORD.repeat(100) }) } }, /^\$i\.bmc\.credentials\.password: must be at most 1024 characters$/],
      ['a NUL in the password', ENROLL, { i: { poolId: 'pol_x', bmc: bmc({}, { password: `${PASSWORD}\u0000` }) } }, /^\$i\.bmc\.credentials\.password: must not contain a NUL character$/],
      ['the input not an object', ENROLL, { i: PASSWORD }, /^\$i: must be an object$/],
      [
        'a literal with an unknown field',
        `mutation { enrollNode(input: { poolId: "pol_x", bmc: { address: "a", driver: "redfish", credentials: { username: "root", password: "${PASSWORD}", foo: 1 } } }) { node { id } } }`,
        {},
        /^input\.bmc\.credentials\.foo: is not a known field$/,
      ],
      [
        'a literal password of the wrong type',
        `mutation { enrollNode(input: { poolId: "pol_x", bmc: { address: "${PASSWORD}", driver: "redfish", credentials: { username: "root", password: 5 } } }) { node { id } } }`,
        {},
        /^input\.bmc\.credentials\.password: must be a string$/,
      ],
    ];
    it.each(graphqlCases)('GraphQL: %s', async (_what, query, variables, message) => {
      const before = await secrets();
      const lines = logLines.length;
      const result = await gql(t.url, token, query, variables);
      expect(codeOf(result)).toBe('INVALID_INPUT');
      expect(result.errors![0]!.message).toMatch(message);
      expect(result.errors![0]!.extensions!.details).toMatchObject({ field: expect.any(String) });
      expect(JSON.stringify(result)).not.toContain(PASSWORD.slice(0, 12));
      expect(logLines.slice(lines).join('\n')).not.toContain(PASSWORD.slice(0, 12));
      expect(logLines.slice(lines).join('\n')).not.toMatch(/"level":50/);
      expect(await secrets()).toBe(before);
    });

    const restCases: [string, () => Record<string, unknown>, RegExp][] = [
      ['poolId missing', () => ({ bmc: bmc() }), /^body\.poolId: is required$/],
      ['an extra key in credentials', () => ({ poolId: tree.pools[0]!.id, bmc: bmc({}, { foo: 1 }) }), /^body\.bmc\.credentials/],
      ['the password over its limit', () => ({ poolId: tree.pools[0]!.id, bmc: bmc({}, { password: PASSWORD.repeat(100) }) }), /^body\.bmc\.credentials/],
      ['a NUL in the name', () => ({ poolId: tree.pools[0]!.id, name: 'a\u0000b', bmc: bmc() }), /^body\.name: must not contain a NUL character$/],
      ['a lone surrogate in driverOptions', () => ({ poolId: tree.pools[0]!.id, bmc: bmc({ driverOptions: { note: '\ud800' } }) }), /^body\.bmc\.driverOptions\.note: must be valid Unicode/],
    ];
    it.each(restCases)('REST enroll: %s', async (_what, body, message) => {
      const before = await secrets();
      const lines = logLines.length;
      const response = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body());
      expect(response.status).toBe(400);
      expect(response.body.error.code).toBe('INVALID_INPUT');
      expect(response.body.error.message).toMatch(message);
      expect(JSON.stringify(response.body)).not.toContain(PASSWORD.slice(0, 12));
      expect(logLines.slice(lines).join('\n')).not.toContain(PASSWORD.slice(0, 12));
      expect(await secrets()).toBe(before);
    });
  });

  describe('authentication before anything else', () => {
    const concrete = (path: string) => path.replace(/\{\w+\}/g, 'not-an-id');
    it.each([
      ['no token', {}],
      ['an unknown token', { authorization: 'Bearer mcp_unknown-token-that-was-never-issued' }],
      ['a malformed header', { authorization: 'Basic cm9vdDpyb290' }],
    ])('every REST route answers 401 to %s, whatever its input', async (_what, headers) => {
      for (const route of routes) {
        const response = await rest(t.url, null, route.method, concrete(route.path) + '?unknown=1', route.body ? {} : undefined, headers);
        expect([route.method, route.path, response.status, response.body.error?.code]).toEqual([route.method, route.path, 401, 'UNAUTHENTICATED']);
      }
    });

    it('a revoked token is 401 before validation', async () => {
      const revoked = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
      const id = (await gql(t.url, revoked, '{ viewer { tokenId } }')).data!.viewer.tokenId;
      expect((await rest(t.url, token, 'DELETE', `/api/tokens/${id}`)).status).toBe(200);
      expect((await rest(t.url, revoked, 'POST', '/api/compute/metal/enroll', {})).status).toBe(401);
      expect(codeOf(await gql(t.url, revoked, ENROLL, { i: {} }))).toBe('UNAUTHENTICATED');
      expect(codeOf(await gql(t.url, revoked, '{ __typename }'))).toBe('UNAUTHENTICATED');
    });

    it('GraphQL without a token: UNAUTHENTICATED before variables, literals, syntax; introspection is open', async () => {
      for (const [query, variables] of [
        [ENROLL, { i: { bmc: bmc() } }],
        ['mutation { enrollNode(input: { nope: 1 }) { node { id } } }', {}],
        ['{ nodes(first: 1) { edges { node { id } } } }', {}],
        ['{ syntax error', {}],
        ['{ __typename viewer { tokenId } }', {}],
      ] as const) {
        const result = await gql(t.url, null, query, variables);
        expect([query, codeOf(result), result.errors!.length]).toEqual([query, 'UNAUTHENTICATED', 1]);
        expect(JSON.stringify(result)).not.toContain(PASSWORD.slice(0, 12));
      }
      expect((await gql(t.url, null, '{ __typename }')).data).toEqual({ __typename: 'Query' });
      const schema = await gql(t.url, null, 'query { __schema { queryType { name } } ...F } fragment F on Query { __type(name: "MetalNode") { name } }');
      expect(schema.errors).toBeUndefined();
      expect(schema.data).toEqual({ __schema: { queryType: { name: 'Query' } }, __type: { name: 'MetalNode' } });
    });

    it('graphql-ws: a revoked or unknown token is refused at connection_init (4403); a valid one connects', async () => {
      const revoked = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:sites:read', scopeType: 'tenant', scopeId: tree.tenant.id }]);
      const id = (await gql(t.url, revoked, '{ viewer { tokenId } }')).data!.viewer.tokenId;
      expect((await rest(t.url, token, 'DELETE', `/api/tokens/${id}`)).status).toBe(200);
      for (const bad of [revoked, 'mcp_never-issued']) {
        const client = wsClient(t.url, bad);
        const got = wsSubscribe(client, 'subscription { events { cursor } }');
        await until(() => got.done, 5000, 'the connection to be refused');
        expect(got.errors[0]?.code).toBe(4403);
        expect(got.events).toEqual([]);
        await client.dispose();
      }
      const anonymous = wsClient(t.url, null);
      const refused = wsSubscribe(anonymous, 'subscription ($x: Int!) { events(after: $x) { cursor } }', { x: 'not an int' });
      await until(() => refused.errors.length > 0, 5000, 'the anonymous refusal');
      expect(refused.errors[0].extensions?.code).toBe('UNAUTHENTICATED');
      await anonymous.dispose();
      const client = wsClient(t.url, token);
      const ok = wsSubscribe(client, 'subscription ($id: ID!) { nodeUpdated(id: $id) { id } }', { id: tree.nodes[0]!.id });
      const queried = wsSubscribe(client, '{ viewer { tenantId } }');
      await until(() => queried.done, 5000, 'the query over the socket');
      expect(queried.events).toEqual([{ tenantId: tree.tenant.id }]);
      expect(ok.errors).toEqual([]);
      ok.stop();
      await client.dispose();
    });
  });

  describe('string limits, in one place, on both faces', () => {
    it('GraphQL and REST refuse a name over the limit, naming the field', async () => {
      const long = 'n'.repeat(LIMITS.string + 1);
      const viaVariable = await gql(t.url, token, 'mutation ($i: CreateSiteInput!) { createSite(input: $i) { id } }', { i: { name: long } });
      expect(viaVariable.errors![0]).toMatchObject({ message: `$i.name: must be at most ${LIMITS.string} characters`, extensions: { code: 'INVALID_INPUT', details: { field: '$i.name' } } });
      const viaLiteral = await gql(t.url, token, `mutation { createSite(input: { name: "${long}" }) { id } }`);
      expect(viaLiteral.errors![0]).toMatchObject({ message: `input.name: must be at most ${LIMITS.string} characters`, extensions: { code: 'INVALID_INPUT' } });
      const viaRest = await rest(t.url, token, 'POST', '/api/compute/sites', { name: long });
      expect([viaRest.status, viaRest.body.error.message]).toEqual([400, `body.name: must NOT have more than ${LIMITS.string} characters`]);
      const id = await gql(t.url, token, 'query ($id: ID!) { node(id: $id) { id } }', { id: 'x'.repeat(LIMITS.id + 1) });
      expect(id.errors![0]!.message).toBe(`$id: must be at most ${LIMITS.id} characters`);
      expect((await rest(t.url, token, 'GET', `/api/compute/sites/${'x'.repeat(LIMITS.id + 1)}`)).body.error.message).toMatch(/^path\.id: must NOT have more than 128/);
    });

    it('the limits are in /openapi.json as maxLength', async () => {
      const doc = (await rest(t.url, null, 'GET', '/openapi.json')).body;
      const enroll = doc.paths['/api/compute/metal/enroll'].post.requestBody.content['application/json'].schema;
      expect(enroll.properties.name.maxLength).toBe(LIMITS.string);
      expect(enroll.properties.poolId.maxLength).toBe(LIMITS.id);
      expect(enroll.properties.bmc.properties.credentials.anyOf[1].properties.password.maxLength).toBe(1024);
      expect(doc.paths['/api/compute/metal/nodes/{id}'].get.parameters[0].schema.maxLength).toBe(LIMITS.id);
    });
  });

  describe('NUL and lone surrogates are INVALID_INPUT naming the field, before any side effect', () => {
    const node = () => tree.nodes[0]!.id;
    const cases: [string, string, () => unknown, string][] = [
      ['POST', '/api/compute/metal/manage', () => ({ nodeId: 'a\u0000b' }), 'body.nodeId'],
      ['GET', '/api/compute/pools?siteId=%00', () => undefined, 'query.siteId'],
      ['GET', '/api/compute/metal/nodes?after=a%00', () => undefined, 'query.after'],
      ['DELETE', '/api/tokens/%00', () => undefined, 'path.id'],
      ['PATCH', '/api/compute/pools/%00/policy', () => ({ policy: {} }), 'path.id'],
      // Percent-encodings that are not UTF-8 (a lone surrogate's, a bare byte) name the parameter too, not a missing route.
      ['DELETE', '/api/tokens/%ED%A0%80', () => undefined, 'path.id'],
      ['PATCH', '/api/compute/pools/%FF/policy', () => ({ policy: {} }), 'path.id'],
      ['POST', '/api/compute/metal/abort', () => ({ nodeId: node(), reason: '\ud800' }), 'body.reason'],
      ['POST', '/api/compute/metal/bulk', () => ({ poolId: tree.pools[0]!.id, verb: 'retire', nodeIds: [node()], reason: 'x\udc00' }), 'body.reason'],
      ['POST', '/api/compute/metal/bulk', () => ({ poolId: tree.pools[0]!.id, verb: 'retire', nodeIds: [node(), 'n\u0000'], reason: 'r' }), 'body.nodeIds[1]'],
      ['POST', '/api/compute/metal/enroll', () => ({ poolId: tree.pools[0]!.id, name: 'a\u0000b', bmc: bmc() }), 'body.name'],
    ];
    // What a refused call must not write. Nodes with a workflow run are left out: a machine an
    // earlier case enrolled runs its enroll workflow in the background (the service runs its engine
    // and agent) and moves, publishing as it goes; the nodes these calls name have no run.
    const WRITTEN = `SELECT (SELECT count(*) FROM secret) s,
      (SELECT count(*) FROM event e WHERE e.node_id IS NULL OR NOT EXISTS (SELECT 1 FROM workflow_run w WHERE w.node_id = e.node_id)) e,
      (SELECT max(version) FROM node n WHERE NOT EXISTS (SELECT 1 FROM workflow_run w WHERE w.node_id = n.id)) v`;
    it.each(cases)('%s %s', async (method, path, body, field) => {
      const before = (await sql.query(WRITTEN)).rows[0];
      const response = await rest(t.url, token, method, path, body());
      expect([response.status, response.body.error.code, response.body.error.details?.field]).toEqual([400, 'INVALID_INPUT', field]);
      expect(response.body.error.message.startsWith(`${field}: `)).toBe(true);
      expect((await sql.query(WRITTEN)).rows[0]).toEqual(before);
    });

    it('the REST event stream checks nodeId too', async () => {
      for (const [nodeId, message] of [['%00', 'must not contain a NUL character'], ['x'.repeat(LIMITS.id + 1), `must be at most ${LIMITS.id} characters`]]) {
        const response = await rest(t.url, token, 'GET', `/api/events?channel=all&nodeId=${nodeId}`);
        expect([response.status, response.body.error?.message]).toEqual([400, `query.nodeId: ${message}`]);
      }
    });

    it('a cursor that is not one is named, not repeated', async () => {
      const response = await rest(t.url, token, 'GET', '/api/compute/metal/nodes?after=zzz-not-mine');
      expect([response.status, response.body.error.message, response.body.error.details]).toEqual([400, 'query.after: is not a cursor of this list', { field: 'query.after' }]);
    });

    it('GraphQL: in variables and in literals', async () => {
      const viaVariable = await gql(t.url, token, 'mutation ($i: MetalAbortInput!) { abortNode(input: $i) { node { id } } }', { i: { nodeId: node(), reason: 'a\ud800' } });
      expect(viaVariable.errors![0]).toMatchObject({ message: '$i.reason: must be valid Unicode (it holds a lone UTF-16 surrogate)', extensions: { code: 'INVALID_INPUT' } });
      const viaLiteral = await gql(t.url, token, 'mutation { manageNode(input: { nodeId: "a\\u0000b" }) { node { id } } }');
      expect(viaLiteral.errors![0]).toMatchObject({ message: 'input.nodeId: must not contain a NUL character', extensions: { code: 'INVALID_INPUT', details: { field: 'input.nodeId' } } });
      const inJson = await gql(t.url, token, ENROLL, { i: { poolId: tree.pools[0]!.id, bmc: bmc({ driverOptions: { ['k\u0000']: 1 } }) } });
      expect(inJson.errors![0]!.message).toBe('$i.bmc.driverOptions: a key must not contain a NUL character');
      const literalList = await gql(t.url, token, `mutation { bulkNodes(input: { poolId: "p", verb: retire, reason: "r", nodeIds: ["${node()}", "a\\u0000"] }) { nodes { id } } }`);
      expect(literalList.errors![0]!.message).toBe('input.nodeIds[1]: must not contain a NUL character');
    });
  });

  describe('JSON nesting is bounded', () => {
    it('POST /graphql with variables 10,000 deep: 400 naming body, with or without a token, nothing at error level', async () => {
      const lines = logLines.length;
      for (const auth of [null, token]) {
        const response = await fetch(`${t.url}/graphql`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(auth ? { authorization: `Bearer ${auth}` } : {}) },
          body: `{"query":"query ($v: JSON) { __typename }","variables":{"v":${deepJson(10000)}}}`,
        });
        expect(response.status).toBe(400);
        const body = (await response.json()) as { errors: { message: string; extensions: { code: string; details: { field: string } } }[] };
        expect(body.errors[0]).toMatchObject({ message: `body: JSON nested deeper than ${LIMITS.jsonDepth} levels`, extensions: { code: 'INVALID_INPUT', details: { field: 'body' } } });
      }
      const get = await fetch(`${t.url}/graphql?query=${encodeURIComponent('{ __typename }')}&variables=${encodeURIComponent(`{"v":${deepJson(2000)}}`)}`, { headers: { 'x-graphql-csrf': '1' } });
      expect(get.status).toBe(400);
      expect(logLines.slice(lines).join('\n')).not.toMatch(/RangeError|"level":50/);
    });

    it('a document nested 10,000 deep (a list literal) is INVALID_INPUT naming query, UNAUTHENTICATED without a token; over graphql-ws too', async () => {
      const lines = logLines.length;
      const query = `query { nodes(first: 1, filter: { siteId: ${deepJson(10000)} }) { edges { cursor } } }`;
      const result = await gql(t.url, token, query);
      expect(result.errors).toEqual([{ message: 'query: nested deeper than 64 levels', extensions: { code: 'INVALID_INPUT', details: { field: 'query', maxDepth: 64 }, requestId: expect.any(String) } }]);
      expect(codeOf(await gql(t.url, null, query))).toBe('UNAUTHENTICATED');
      const client = wsClient(t.url, token);
      const got = wsSubscribe(client, query);
      await until(() => got.done, 5000, 'the refusal');
      expect(got.errors[0]?.message).toBe('query: nested deeper than 64 levels');
      await client.dispose();
      // The introspection query GraphiQL sends is far from the bound.
      expect(logLines.slice(lines).join('\n')).not.toMatch(/RangeError|"level":50/);
    });

    it('a body GraphQL does not read (text/plain) gets the error shape', async () => {
      const response = await fetch(`${t.url}/graphql`, { method: 'POST', headers: { 'content-type': 'text/plain', 'x-graphql-csrf': '1', authorization: `Bearer ${token}` }, body: '{ __typename }' });
      expect(response.status).toBe(415);
      expect(await response.json()).toMatchObject({ errors: [{ extensions: { code: 'INVALID_INPUT', details: { field: 'body' } } }] });
    });

    it('enroll with driverOptions 10,000 deep is 400 naming body', async () => {
      const response = await rest(t.url, token, 'POST', '/api/compute/metal/enroll',
        `{"poolId":"${tree.pools[0]!.id}","bmc":{"address":"a","driver":"redfish","credentials":"secret://x","driverOptions":{"a":${deepJson(10000)}}}}`);
      expect([response.status, response.body.error.code, response.body.error.details?.field]).toEqual([400, 'INVALID_INPUT', 'body']);
    });

    it('over graphql-ws (no HTTP body), a JSON variable nested past the limit is INVALID_INPUT naming it', async () => {
      let nested: unknown = 1;
      for (let i = 0; i < LIMITS.jsonDepth + 1; i += 1) nested = { n: nested };
      const client = wsClient(t.url, token);
      const got = wsSubscribe(client, ENROLL, { i: { poolId: tree.pools[0]!.id, bmc: { address: 'a', driver: 'redfish', credentials: { ref: 'secret://x' }, driverOptions: nested } } });
      await until(() => got.done, 5000, 'the refusal');
      expect(got.errors[0]?.extensions?.code).toBe('INVALID_INPUT');
      expect(got.errors[0]?.message).toMatch(/^\$i\.bmc\.driverOptions(\.n)+: nested deeper than 32 levels$/);
      await client.dispose();
    });
  });

  describe('unique violations from a check-then-insert race are CONFLICT', () => {
    it('a site inserted between the check and the insert', async () => {
      // A trigger plays the other request: it inserts the same name just before this insert.
      await sql.query(`CREATE FUNCTION edge_race() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO site (id, tenant_id, name) VALUES ('sit_race_' || md5(random()::text), NEW.tenant_id, NEW.name);
          RETURN NEW;
        END $$`);
      await sql.query(`CREATE TRIGGER edge_race BEFORE INSERT ON site FOR EACH ROW WHEN (NEW.name = 'raced' AND NEW.id NOT LIKE 'sit_race_%') EXECUTE FUNCTION edge_race()`);
      try {
        const viaGraphql = await gql(t.url, token, 'mutation { createSite(input: { name: "raced" }) { id } }');
        expect(viaGraphql.errors![0]).toMatchObject({ extensions: { code: 'CONFLICT', details: { field: 'name' } } });
        expect(viaGraphql.errors![0]!.message).toMatch(/already has this tenantId and name/);
        await sql.query(`DELETE FROM site WHERE name = 'raced'`);
        const viaRest = await rest(t.url, token, 'POST', '/api/compute/sites', { name: 'raced' });
        expect([viaRest.status, viaRest.body.error.code, viaRest.body.error.details.field]).toEqual([409, 'CONFLICT', 'body.name']);
      } finally {
        await sql.query('DROP TRIGGER edge_race ON site; DROP FUNCTION edge_race()');
      }
    });

    it('a 23505 from plain SQL (pg) is CONFLICT naming the column, without the values PostgreSQL puts in its detail', async () => {
      const error = await sql.query('INSERT INTO site (id, tenant_id, name) VALUES ($1, $2, $3)', ['sit_dup_edge', tree.tenant.id, tree.site.name]).catch((e: unknown) => e);
      expect((error as { code?: string }).code).toBe('23505');
      const conflict = uniqueViolation({ message: 'wrapped', originalError: error });
      expect(conflict).toMatchObject({ code: 'CONFLICT', extensions: { details: { field: 'name', columns: ['tenantId', 'name'] } } });
      expect(conflict!.message).not.toContain(tree.site.name);
      expect(uniqueViolation(new Error('no'))).toBeNull();
    });

    it('two concurrent createPool with the same name: one wins, the others are CONFLICT', async () => {
      const results = await Promise.all(Array.from({ length: 6 }, () =>
        rest(t.url, token, 'POST', '/api/compute/pools', { siteId: tree.site.id, name: 'concurrent' })));
      const statuses = results.map((r) => r.status).sort();
      expect(statuses.filter((s) => s === 201)).toHaveLength(1);
      expect(statuses.filter((s) => s !== 201).every((s) => s === 409)).toBe(true);
    });
  });

  describe('errors name the element and the REST field', () => {
    it('bulk: a duplicate and a refused node are named by their index', async () => {
      const ids = tree.nodes.map((n) => n.id);
      const duplicate = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[0]!.id, verb: 'inspect', nodeIds: [ids[0], ids[1], ids[2], ids[1]] });
      expect(duplicate.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'body.nodeIds[3]' } });
      expect(duplicate.body.error.message).toMatch(/^body\.nodeIds\[3\]: each node may be listed once; the same node is body\.nodeIds\[1\]$/);
      const foreign = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[0]!.id, verb: 'inspect', reason: 'r', nodeIds: [ids[0], ids[1], ids[2], 'node_missing'] });
      expect(foreign.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'body.nodeIds[3]', refused: [{ nodeId: 'node_missing', field: 'body.nodeIds[3]' }] } });
      expect(foreign.body.error.message).toMatch(/first: body\.nodeIds\[3\] node_missing: not a node of pool/);
      const viaGraphql = await gql(t.url, token, 'mutation ($i: MetalBulkInput!) { bulkNodes(input: $i) { nodes { id } } }', { i: { poolId: tree.pools[0]!.id, verb: 'inspect', reason: 'r', nodeIds: [ids[0], 'node_missing'] } });
      expect(viaGraphql.errors![0]!.extensions!.details).toMatchObject({ field: 'input.nodeIds[1]' });
    });

    it('PATCH /api/compute/pools/{id}/policy names body fields', async () => {
      const response = await rest(t.url, token, 'PATCH', `/api/compute/pools/${tree.pools[0]!.id}/policy`, { policy: { approverKeys: [{ id: 'k1', publicKey: 'not-a-key' }] } });
      expect(response.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'body.policy.approverKeys[0].publicKey' } });
      expect(response.body.error.message).toMatch(/^body\.policy\.approverKeys\[0\]\.publicKey: /);
      const quorum = await rest(t.url, token, 'PATCH', `/api/compute/pools/${tree.pools[0]!.id}/policy`, { policy: { quorum: 3 } });
      expect(quorum.body.error.message).toMatch(/^body\.policy\.quorum: /);
    });
  });
});
