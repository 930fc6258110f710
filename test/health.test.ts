import { startTestApp, type TestApp } from './helpers/app';
import { gql } from './helpers/client';
import { ViewerDocument } from '../src/generated/operations';

describe('operations endpoints', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t.stop());

  it('answers { __typename } without a token', async () => {
    const result = await gql(t.url, null, '{ __typename }');
    expect(result.data).toEqual({ __typename: 'Query' });
  });

  it('reports ready when the database and the queue answer', async () => {
    const response = await fetch(`${t.url}/readyz`);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ status: 'ready', checks: { database: 'ok', writes: 'ok', queue: 'ok' } });
    expect((await fetch(`${t.url}/healthz`)).status).toBe(200);
  });

  it('runs the typed documents codegen makes from schema/operations', async () => {
    const result = await gql(t.url, t.adminToken, ViewerDocument);
    expect(result.data?.viewer).toMatchObject({ platformAdmin: true, tenantId: null, grants: [{ permission: 'admin', scopeType: 'platform', scopeId: null }] });
  });

  it('reports the server\'s own time in Server-Timing, on REST, GraphQL and errors', async () => {
    const requests: [string, RequestInit][] = [
      [`${t.url}/healthz`, {}],
      [`${t.url}/api/compute/sites`, { headers: { authorization: `Bearer ${t.adminToken}` } }],
      [`${t.url}/api/compute/sites`, {}],
      [`${t.url}/graphql`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ query: '{ __typename }' }) }],
    ];
    for (const [url, init] of requests) {
      // The server's own time is part of the round trip this client saw, never more.
      const sent = performance.now();
      const response = await fetch(url, init);
      const roundTrip = performance.now() - sent;
      const timing = /^app;dur=(\d+\.\d{2})$/.exec(response.headers.get('server-timing') ?? '');
      expect(timing).not.toBeNull();
      expect(Number(timing![1])).toBeLessThanOrEqual(roundTrip);
      // Measured, not a constant: even /healthz takes some microseconds.
      expect(Number(timing![1])).toBeGreaterThan(0);
    }
  });

  it('echoes X-Request-Id, or makes one', async () => {
    const given = await fetch(`${t.url}/healthz`, { headers: { 'x-request-id': 'abc-123' } });
    expect(given.headers.get('x-request-id')).toBe('abc-123');
    const made = await fetch(`${t.url}/healthz`);
    expect(made.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('serves Prometheus metrics with HTTP and GraphQL latencies and queue depths', async () => {
    await gql(t.url, t.adminToken, 'query Probe { viewer { name } }');
    const text = await (await fetch(`${t.url}/metrics`)).text();
    expect(text).toMatch(/http_request_duration_seconds_bucket\{.*route="\/graphql"/);
    expect(text).toMatch(/graphql_operation_duration_seconds_count\{operation="Probe",type="query",outcome="ok"\} 1/);
    expect(text).toMatch(/queue_depth\{queue="metal.advance"\} 0/);
    expect(text).toMatch(/^event_subscribers 0$/m);
  });
});
