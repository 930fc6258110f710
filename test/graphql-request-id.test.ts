import { startTestApp, type TestApp } from './helpers/app';
import { gql } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { until, wsClient, wsSubscribe } from './helpers/streams';
import { newId } from '../src/ids';
import { CSRF_HEADER } from '../src/graphql/yoga';

/**
 * Every GraphQL error carries the request's id in extensions.requestId, as REST's error body does:
 * the same id as the X-Request-Id header (the caller's own when it sent a usable one), for
 * resolver errors, parse and validation errors, refusals before Yoga, and errors of subscriptions
 * over SSE and graphql-ws.
 */

jest.setTimeout(60_000);

describe('GraphQL errors carry extensions.requestId', () => {
  let t: TestApp;
  let token: string;

  beforeAll(async () => {
    t = await startTestApp();
    const tree = await makeTenantTree(t.app.database.prisma, 'reqid', { pools: 1, nodesPerPool: 1 });
    token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  });
  afterAll(() => t?.stop());

  async function post(body: string, headers: Record<string, string> = {}, auth: string | null = token) {
    const response = await fetch(`${t.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(auth ? { authorization: `Bearer ${auth}` } : {}), ...headers },
      body,
    });
    return { header: response.headers.get('x-request-id'), body: (await response.json()) as { errors?: { extensions?: Record<string, unknown> }[] } };
  }

  const cases: [string, string, string | null, string][] = [
    ['a resolver error (NOT_FOUND)', JSON.stringify({ query: 'query ($id: ID!) { node(id: $id) { id } }', variables: { id: newId('MetalNode') } }), 'token', 'NOT_FOUND'],
    ['a syntax error', JSON.stringify({ query: '{ viewer { ' }), 'token', 'INVALID_INPUT'],
    ['a validation error', JSON.stringify({ query: '{ noSuchField }' }), 'token', 'INVALID_INPUT'],
    ['a variable that does not fit', JSON.stringify({ query: 'query ($n: Int!) { nodes(first: $n) { totalCount } }', variables: { n: 'many' } }), 'token', 'INVALID_INPUT'],
    ['no token', JSON.stringify({ query: '{ viewer { tokenId } }' }), null, 'UNAUTHENTICATED'],
    ['JSON nested too deep (refused before Yoga)', `{"query":"{ __typename }","variables":${'['.repeat(100)}${']'.repeat(100)}}`, 'token', 'INVALID_INPUT'],
  ];

  it.each(cases)('%s: the id of X-Request-Id', async (_name, body, auth, code) => {
    const generated = await post(body, {}, auth ? token : null);
    expect(generated.body.errors?.[0]?.extensions).toMatchObject({ code, requestId: generated.header });
    expect(generated.header).toMatch(/^[0-9a-f-]{36}$/);
    const given = await post(body, { 'x-request-id': `mine-${code.toLowerCase()}` }, auth ? token : null);
    expect(given.header).toBe(`mine-${code.toLowerCase()}`);
    for (const error of given.body.errors ?? []) expect(error.extensions).toMatchObject({ requestId: given.header });
  });

  it('a batch of errors: every one carries it', async () => {
    const r = await post(JSON.stringify({ query: '{ a: noSuchField b: otherMissing }' }), { 'x-request-id': 'mine-batch' });
    expect(r.body.errors!.length).toBeGreaterThanOrEqual(2);
    for (const error of r.body.errors!) expect(error.extensions).toMatchObject({ code: 'INVALID_INPUT', requestId: 'mine-batch' });
  });

  it('a subscription over SSE: an error in the stream carries the id of its request', async () => {
    const abort = new AbortController();
    const response = await fetch(`${t.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream', authorization: `Bearer ${token}`, [CSRF_HEADER]: '1', 'x-request-id': 'mine-sse' },
      body: JSON.stringify({ query: 'subscription ($id: ID!) { nodeUpdated(id: $id) { id } }', variables: { id: newId('MetalNode') } }),
      signal: abort.signal,
    });
    expect(response.headers.get('content-type')).toMatch(/text\/event-stream/);
    let text = '';
    const decoder = new TextDecoder();
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      text += decoder.decode(chunk, { stream: true });
      if (/"errors"/.test(text) && text.includes('\n\n')) break;
    }
    abort.abort();
    const data = text.split('\n').find((l) => l.startsWith('data:') && l.includes('"errors"'))!;
    const result = JSON.parse(data.slice(5)) as { errors: { extensions: Record<string, unknown> }[] };
    expect(result.errors[0]!.extensions).toMatchObject({ code: 'NOT_FOUND', requestId: 'mine-sse' });
  });

  describe('graphql-ws', () => {
    const clients: ReturnType<typeof wsClient>[] = [];
    afterAll(async () => {
      for (const c of clients) await c.dispose();
    });

    it('an error met while running (next) and a refusal before it runs (error) each carry a request id, one per operation', async () => {
      const client = wsClient(t.url, token);
      clients.push(client);
      const running = wsSubscribe(client, 'subscription ($id: ID!) { nodeUpdated(id: $id) { id } }', { id: newId('MetalNode') });
      const refused = wsSubscribe(client, 'subscription { noSuchSubscription }');
      await until(() => running.errors.length > 0 && refused.errors.length > 0, 10000, 'both operations to fail');
      running.stop();
      refused.stop();
      expect(running.errors[0].extensions).toMatchObject({ code: 'NOT_FOUND', requestId: expect.stringMatching(/^[0-9a-f-]{36}$/) });
      expect(refused.errors[0].extensions).toMatchObject({ code: 'INVALID_INPUT', requestId: expect.stringMatching(/^[0-9a-f-]{36}$/) });
      expect(running.errors[0].extensions.requestId).not.toBe(refused.errors[0].extensions.requestId);
    });
  });
});
