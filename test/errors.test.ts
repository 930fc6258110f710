import http from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { AppError, ERROR_CODES, type ErrorCode } from '../src/errors';
import { RestRouter } from '../src/rest/router';
import type { Route } from '../src/rest/routes';
import { createHttpServer } from '../src/server';
import { Metrics } from '../src/ops/metrics';
import { MAX_BODY_BYTES } from '../src/http/body';
import { startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';

/** The mapping the issue documents, written out here so a change in src/errors.ts cannot pass unnoticed. */
const DOCUMENTED_STATUS: Record<ErrorCode, number> = {
  INVALID_INPUT: 400,
  UNAUTHENTICATED: 401,
  PERMISSION_DENIED: 403,
  NOT_FOUND: 404,
  CONFLICT: 409,
  INVALID_STATE: 409,
  ABORTED: 409,
  INVALID_CONFIG: 422,
  UNSUPPORTED: 422,
  UNVERIFIED_WIPE: 422,
  INTERNAL: 500,
  REQUIRES_SWITCH_RECONFIG_ACK: 409,
  UPSTREAM_UNAVAILABLE: 502,
  STORAGE_UNAVAILABLE: 503,
};

/** Lines that look like a JavaScript stack frame, or file paths of this checkout. */
const STACK = /\n\s+at |at [\w.<>]+ \(|\.ts:\d+|\/work\/|node_modules/;

function expectEnvelope(body: any, code: string, requestId?: string) {
  expect(body).toEqual({ error: expect.objectContaining({ code, message: expect.any(String), requestId: requestId ?? expect.any(String) }) });
  expect(Object.keys(body.error).filter((k) => !['code', 'message', 'requestId', 'details'].includes(k))).toEqual([]);
  expect(JSON.stringify(body)).not.toMatch(STACK);
}

/** A raw HTTP request (chunked when `chunks` is given), to control exactly what goes on the wire. */
function rawRequest(url: string, opts: { method: string; path: string; headers: Record<string, string>; chunks: Buffer[] }): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const request = http.request(`${url}${opts.path}`, { method: opts.method, headers: opts.headers }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (c) => (body += c));
      response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, body }));
    });
    // The server may answer and close before the whole body is sent: the answer is what counts.
    request.on('error', (error) => reject(error));
    for (const chunk of opts.chunks) request.write(chunk);
    request.end();
  });
}

describe('one error vocabulary', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let other: Awaited<ReturnType<typeof makeTenantTree>>;
  let readerToken: string;

  beforeAll(async () => {
    t = await startTestApp();
    tree = await makeTenantTree(t.app.database.prisma, 'acme', { pools: 1, nodesPerPool: 1 });
    other = await makeTenantTree(t.app.database.prisma, 'globex', { pools: 1, nodesPerPool: 1 });
    readerToken = await makeToken(t.app.database.prisma, tree.tenant.id, [
      { permission: 'compute:sites:read', scopeType: 'tenant', scopeId: tree.tenant.id },
    ]);
  });
  afterAll(() => t.stop());

  describe('every code through the real REST router', () => {
    let server: http.Server;
    let base: string;
    const path = (code: string) => `/api/errors/${code.toLowerCase()}`;

    beforeAll(async () => {
      // A route per code, over the app's own Yoga: the operation runs for real, then respond() refuses.
      const table: Route[] = ERROR_CODES.map((code) => ({
        method: 'GET',
        path: path(code),
        operation: 'Viewer',
        tag: 'test',
        summary: `refuses with ${code}`,
        variables: () => ({}),
        respond: () => {
          throw new AppError(code, `refused with ${code}`);
        },
        response: { type: 'object' },
      }));
      table.push({
        method: 'GET',
        path: '/api/errors/unexpected',
        operation: 'Viewer',
        tag: 'test',
        summary: 'throws a plain Error',
        variables: () => ({}),
        respond: () => {
          throw new Error('database password is hunter2');
        },
        response: { type: 'object' },
      });
      const router = new RestRouter(t.app.yoga!, table);
      server = createHttpServer({
        yoga: t.app.yoga!,
        events: null,
        tokens: t.app.services.tokens,
        rest: router,
        metrics: new Metrics(),
        log: pino({ level: 'silent' }),
        version: 'test',
        ready: async () => ({ ok: true, checks: {} }),
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    });
    afterAll(async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    });

    it('the documented table covers exactly ERROR_CODES', () => {
      expect(Object.keys(DOCUMENTED_STATUS).sort()).toEqual([...ERROR_CODES].sort());
    });

    it.each(ERROR_CODES.map((code) => [code, DOCUMENTED_STATUS[code]]))('%s -> HTTP %i', async (code, status) => {
      const requestId = `req-${code.toLowerCase()}`;
      const response = await rest(base, t.adminToken, 'GET', path(code), undefined, { 'x-request-id': requestId });
      expect(response.status).toBe(status);
      expect(response.headers.get('content-type')).toMatch(/^application\/json/);
      expect(response.headers.get('x-request-id')).toBe(requestId);
      expect(response.body).toEqual({ error: { code, message: `refused with ${code}`, requestId } });
    });

    it('a plain exception is 500 INTERNAL with no message, stack or path leaked', async () => {
      const response = await rest(base, t.adminToken, 'GET', '/api/errors/unexpected', undefined, { 'x-request-id': 'req-boom' });
      expect(response.status).toBe(500);
      expectEnvelope(response.body, 'INTERNAL', 'req-boom');
      expect(JSON.stringify(response.body)).not.toContain('hunter2');
      expect(response.body.error).not.toHaveProperty('stack');
    });

    it('a request id that is not safe to echo is replaced by a generated one', async () => {
      const response = await rest(base, t.adminToken, 'GET', path('CONFLICT'), undefined, { 'x-request-id': 'bad id with spaces' });
      expect(response.status).toBe(409);
      expect(response.body.error.requestId).toMatch(/^[0-9a-f-]{36}$/);
      expect(response.headers.get('x-request-id')).toBe(response.body.error.requestId);
    });
  });

  describe('UNAUTHENTICATED', () => {
    const cases: [string, Record<string, string>][] = [
      ['no token', {}],
      ['an unknown token', { authorization: 'Bearer mcp_this-token-does-not-exist' }],
      ['a malformed Authorization header', { authorization: 'Basic dXNlcjpwYXNz' }],
      ['a Bearer header without a token', { authorization: 'Bearer' }],
    ];
    it.each(cases)('GraphQL with %s', async (_name, headers) => {
      const result = await gql(t.url, null, '{ viewer { tokenId } }', undefined, headers);
      expect(codeOf(result)).toBe('UNAUTHENTICATED');
      expect(result.data?.viewer ?? null).toBeNull();
    });
    it.each(cases)('REST with %s is 401', async (_name, headers) => {
      const response = await rest(t.url, null, 'GET', '/api/compute/sites', undefined, { ...headers, 'x-request-id': 'req-401' });
      expect(response.status).toBe(401);
      expectEnvelope(response.body, 'UNAUTHENTICATED', 'req-401');
    });
  });

  describe('PERMISSION_DENIED, NOT_FOUND, CONFLICT', () => {
    it('a tenant token without admin cannot create a site (GraphQL and REST 403)', async () => {
      const result = await gql(t.url, readerToken, 'mutation { createSite(input: {name: "nope"}) { id } }');
      expect(codeOf(result)).toBe('PERMISSION_DENIED');
      const response = await rest(t.url, readerToken, 'POST', '/api/compute/sites', { name: 'nope' });
      expect(response.status).toBe(403);
      expectEnvelope(response.body, 'PERMISSION_DENIED');
      expect(await t.app.database.prisma.site.count({ where: { name: 'nope' } })).toBe(0);
    });

    it.each<[string, () => string]>([
      ['a pool that does not exist', () => 'pool_01900000-0000-7000-8000-000000000000'],
      ['another tenant\'s pool', () => other.pools[0]!.id],
    ])('%s is NOT_FOUND (GraphQL) and 404 (REST)', async (_name, id) => {
      const result = await gql(t.url, readerToken, 'query ($id: ID!) { node(id: $id) { id } }', { id: id() });
      expect(codeOf(result)).toBe('NOT_FOUND');
      const response = await rest(t.url, readerToken, 'GET', `/api/compute/pools/${id()}`);
      expect(response.status).toBe(404);
      expectEnvelope(response.body, 'NOT_FOUND');
    });

    it('a duplicate site name is CONFLICT (GraphQL) and 409 (REST)', async () => {
      const result = await gql(t.url, t.adminToken, 'mutation ($t: ID) { createSite(input: {tenantId: $t, name: "acme-site"}) { id } }', { t: tree.tenant.id });
      expect(codeOf(result)).toBe('CONFLICT');
      const response = await rest(t.url, t.adminToken, 'POST', '/api/compute/sites', { tenantId: tree.tenant.id, name: 'acme-site' });
      expect(response.status).toBe(409);
      expectEnvelope(response.body, 'CONFLICT');
      expect(await t.app.database.prisma.site.count({ where: { tenantId: tree.tenant.id } })).toBe(1);
    });
  });

  describe('INVALID_INPUT names the field', () => {
    it.each([
      ['truncated JSON', '{"name": '],
      ['a trailing comma', '{"name": "x",}'],
      ['not JSON at all', 'name=x'],
    ])('REST: %s is 400 naming body', async (_name, raw) => {
      const response = await rest(t.url, t.adminToken, 'POST', '/api/compute/sites', raw, { 'x-request-id': 'req-json' });
      expect(response.status).toBe(400);
      expectEnvelope(response.body, 'INVALID_INPUT', 'req-json');
      expect(response.body.error.message).toMatch(/^body\b/);
    });

    it.each([
      ['a JSON array', '[]'],
      ['a JSON string', '"site"'],
      ['an empty body', ''],
    ])('REST: %s instead of an object is 400 naming body', async (_name, raw) => {
      const response = await rest(t.url, t.adminToken, 'POST', '/api/compute/sites', raw, { 'content-type': 'application/json' });
      expect(response.status).toBe(400);
      expectEnvelope(response.body, 'INVALID_INPUT');
      expect(response.body.error.message).toMatch(/^body\b/);
    });

    it('REST: a body that is not declared JSON is 400 naming body', async () => {
      const response = await rest(t.url, t.adminToken, 'POST', '/api/compute/sites', '{"name":"x"}', { 'content-type': 'text/plain' });
      expect(response.status).toBe(400);
      expect(response.body.error.message).toMatch(/^body\b/);
    });

    it.each([
      // GraphQL over HTTP: with the standard media type a request error is a 4xx; legacy
      // application/json clients get 200 (Yoga's behaviour, per the spec's compatibility rules).
      ['application/graphql-response+json', 400],
      ['application/json', 200],
    ])('GraphQL: malformed JSON is INVALID_INPUT (Accept %s -> HTTP %i)', async (accept, status) => {
      const response = await fetch(`${t.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept, authorization: `Bearer ${t.adminToken}` },
        body: '{"query": "{ viewer { tokenId } }"',
      });
      expect(response.status).toBe(status);
      const body = (await response.json()) as any;
      expect(body.errors).toHaveLength(1);
      expect(body.errors[0].extensions.code).toBe('INVALID_INPUT');
      expect(body.errors[0].message).toMatch(/JSON/);
      expect(body.data ?? null).toBeNull();
    });

    const restCases: [string, string, string, () => unknown, RegExp][] = [
      ['an unknown field', 'POST', '/api/compute/sites', () => ({ name: 'x1', colour: 'red' }), /^body\.colour\b/],
      ['a wrong type', 'POST', '/api/compute/sites', () => ({ name: 42 }), /^body\.name\b/],
      ['a missing field', 'POST', '/api/compute/sites', () => ({ tenantId: tree.tenant.id }), /^body\.name\b/],
      ['a wrong nested value', 'POST', '/api/compute/pools', () => ({ siteId: tree.site.id, name: 'p', policy: { agent: 'windows' } }), /^body\.policy\.agent\b/],
      ['an unknown nested field', 'POST', '/api/compute/pools', () => ({ siteId: tree.site.id, name: 'p', policy: { agnet: 'bcd' } }), /^body\.policy\.agnet\b/],
      ['a field inside an array item', 'PATCH', '', () => ({ policy: { approverKeys: [{ id: 'k1' }] } }), /^body\.policy\.approverKeys\[0\]\.publicKey\b/],
      ['a value outside the enum in a grant', 'POST', '/api/tokens', () => ({ name: 'tk', tenantId: tree.tenant.id, grants: [{ permission: 'root', scopeType: 'tenant' }] }), /^body\.grants\[0\]\.permission\b/],
      ['an integer field given as a string', 'PATCH', '', () => ({ policy: {}, expectedVersion: '1' }), /^body\.expectedVersion\b/],
    ];
    it.each(restCases)('REST: %s is 400 naming its path', async (_name, method, path, body, field) => {
      const target = path || `/api/compute/pools/${tree.pools[0]!.id}/policy`;
      const response = await rest(t.url, t.adminToken, method, target, body());
      expect(response.status).toBe(400);
      expectEnvelope(response.body, 'INVALID_INPUT');
      expect(response.body.error.message).toMatch(field);
    });

    it('REST: a domain rule names the GraphQL input path (bad site name)', async () => {
      const response = await rest(t.url, t.adminToken, 'POST', '/api/compute/sites', { tenantId: tree.tenant.id, name: 'has spaces' });
      expect(response.status).toBe(400);
      expectEnvelope(response.body, 'INVALID_INPUT');
      expect(response.body.error.message).toMatch(/name/);
    });

    const graphqlCases: [string, string, Record<string, unknown> | undefined, RegExp][] = [
      ['a syntax error', '{ viewer { tokenId ', undefined, /Syntax Error/i],
      ['an unknown field', '{ viewer { tokenId shoeSize } }', undefined, /shoeSize/],
      ['an unknown input field', 'mutation { createSite(input: {name: "x", colour: "red"}) { id } }', undefined, /colour/],
      ['an unknown input field in variables', 'mutation ($i: CreateSiteInput!) { createSite(input: $i) { id } }', { i: { name: 'x', colour: 'red' } }, /colour/],
      ['a wrong type in variables', 'mutation ($i: CreateSiteInput!) { createSite(input: $i) { id } }', { i: { name: 42 } }, /name/],
      ['a wrong nested enum', 'mutation ($i: CreatePoolInput!) { createPool(input: $i) { id } }', { i: { siteId: 'site_x', name: 'p', policy: { agent: 'windows' } } }, /policy\.agent/],
      ['a missing variable', 'query ($id: ID!) { node(id: $id) { id } }', undefined, /\$id/],
      ['an undefined operation name', 'query A { viewer { tokenId } } query B { viewer { name } }', undefined, /operation/i],
    ];
    it.each(graphqlCases)('GraphQL: %s is INVALID_INPUT', async (_name, query, variables, message) => {
      const result = await gql(t.url, t.adminToken, query, variables);
      expect(codeOf(result)).toBe('INVALID_INPUT');
      expect(result.errors![0]!.message).toMatch(message);
      expect(result.data ?? null).toBeNull();
      expect(JSON.stringify(result.errors)).not.toMatch(STACK);
    });

    it('GraphQL field suggestions are not leaked', async () => {
      const result = await gql(t.url, t.adminToken, '{ viewer { tokenI } }');
      expect(codeOf(result)).toBe('INVALID_INPUT');
      expect(result.errors![0]!.message).not.toMatch(/Did you mean/);
    });
  });

  describe('bodies over 1 MiB', () => {
    const big = Buffer.alloc(MAX_BODY_BYTES + 1, 0x20);

    it('MAX_BODY_BYTES is 1 MiB', () => {
      expect(MAX_BODY_BYTES).toBe(1024 * 1024);
    });

    it.each([
      ['/graphql', 'POST'],
      ['/api/compute/sites', 'POST'],
      ['/api/compute/pools', 'POST'],
      ['/api/tokens/tok_x', 'DELETE'],
    ])('%s %s with a declared length over 1 MiB is 413 with the error envelope', async (path, method) => {
      const response = await rest(t.url, t.adminToken, method, path, big.toString(), { 'content-type': 'application/json', 'x-request-id': 'req-413' });
      expect(response.status).toBe(413);
      expectEnvelope(response.body, 'INVALID_INPUT', 'req-413');
      expect(response.body.error.message).toMatch(/^body\b/);
    });

    it.each([
      ['/graphql', 'POST'],
      ['/api/compute/sites', 'POST'],
    ])('%s %s with a chunked body over 1 MiB is 413', async (path, method) => {
      const half = Buffer.alloc(Math.ceil(big.length / 2), 0x20);
      const response = await rawRequest(t.url, {
        method,
        path,
        headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked', authorization: `Bearer ${t.adminToken}` },
        chunks: [half, half],
      });
      expect(response.status).toBe(413);
      expect(JSON.parse(response.body).error.code).toBe('INVALID_INPUT');
    });

    it('exactly 1 MiB is still accepted (GraphQL and REST)', async () => {
      const query = JSON.stringify({ query: '{ __typename }' });
      const graphqlBody = query.slice(0, -1) + ' '.repeat(MAX_BODY_BYTES - query.length) + '}';
      expect(Buffer.byteLength(graphqlBody)).toBe(MAX_BODY_BYTES);
      const graphql = await rest(t.url, null, 'POST', '/graphql', graphqlBody, { 'content-type': 'application/json' });
      expect(graphql.status).toBe(200);
      expect(graphql.body).toEqual({ data: { __typename: 'Query' } });

      const site = JSON.stringify({ tenantId: tree.tenant.id, name: 'exactly-1mib' });
      const restBody = site.slice(0, -1) + ' '.repeat(MAX_BODY_BYTES - site.length) + '}';
      const created = await rest(t.url, t.adminToken, 'POST', '/api/compute/sites', restBody);
      expect(created.status).toBe(201);
      expect(created.body.site.name).toBe('exactly-1mib');
    });

    it('the server still answers after refusing a big body', async () => {
      const response = await rest(t.url, t.adminToken, 'GET', '/api/viewer');
      expect(response.status).toBe(200);
    });
  });

  describe('a cursor that is not one of ours', () => {
    const query = 'query ($after: String) { nodes(first: 1, after: $after) { edges { cursor } } }';

    it('never leaks a stack or the decoder\'s message, whatever code it gets', async () => {
      const result = await gql(t.url, t.adminToken, query, { after: '%%%not-a-cursor' });
      expect(result.errors).toBeDefined();
      expect(ERROR_CODES).toContain(codeOf(result));
      expect(JSON.stringify(result.errors)).not.toMatch(STACK);
      for (const error of result.errors!) expect(Object.keys(error.extensions ?? {})).not.toContain('stack');
    });

    it('is INVALID_INPUT naming after (GraphQL)', async () => {
      const result = await gql(t.url, t.adminToken, query, { after: '%%%not-a-cursor' });
      expect(codeOf(result)).toBe('INVALID_INPUT');
      expect(result.errors![0]!.message).toMatch(/\bafter\b/);
    });

    it('is 400 naming after (REST)', async () => {
      const response = await rest(t.url, t.adminToken, 'GET', '/api/compute/metal/nodes?after=%25%25not-a-cursor');
      expect(response.status).toBe(400);
      expectEnvelope(response.body, 'INVALID_INPUT');
      expect(response.body.error.message).toMatch(/\bafter\b/);
    });
  });
});
