import net from 'node:net';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { startTestApp, type TestApp } from './helpers/app';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { until } from './helpers/streams';
import { newId } from '../src/ids';
import { EventsDocument, MetalClient, MetalError, NodeUpdatedDocument, RetireDocument, type EventsSubscription, type Transport } from '../clients/sdk/src';

/**
 * MetalClient.subscribe against a running service, over graphql-ws and GraphQL over SSE: events
 * arrive in order with their cursors; after the connection drops (a TCP proxy cut in the middle)
 * or the service stops (ABORTED server-stopping) and starts again, the subscription comes back on
 * its own from the last cursor it received: no event lost, none repeated.
 */

jest.setTimeout(90_000);

const TYPE = 'node.test.sdk';
type Event = EventsSubscription['events'];

/** A TCP forwarder on 127.0.0.1 whose connections can be cut, as a network drop would. */
async function tcpProxy(target: string) {
  const { hostname, port } = new URL(target);
  const sockets = new Set<net.Socket>();
  let frozen = false;
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(port), hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    // Forwarded unless frozen; while frozen, whatever either side sends is lost (a black hole).
    client.on('data', (chunk) => void (frozen || upstream.write(chunk)));
    upstream.on('data', (chunk) => void (frozen || client.write(chunk)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    /** Stops forwarding anything, in both directions, without closing a connection (until thaw). */
    freeze: () => {
      frozen = true;
    },
    thaw: () => {
      frozen = false;
    },
    /** Drops every open connection (no close frame, no message: a reset). */
    cut: () => {
      for (const s of sockets) s.destroy();
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Consumes an async iterable in the background, keeping what arrived and how it ended. */
function drain<T>(iterable: AsyncIterable<T>) {
  const state = { items: [] as T[], error: undefined as unknown, done: false };
  const finished = (async () => {
    try {
      for await (const item of iterable) state.items.push(item);
    } catch (error) {
      state.error = error;
    }
    state.done = true;
  })();
  return { state, finished };
}

describe('the SDK: subscriptions with reconnect and cursor replay', () => {
  let t: TestApp;
  let sql: pg.Client;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let token: string;
  let databaseUrl: string;

  beforeAll(async () => {
    t = await startTestApp({ role: 'api' });
    databaseUrl = t.app.databaseUrl;
    sql = new pg.Client({ connectionString: databaseUrl });
    await sql.connect();
    tree = await makeTenantTree(t.app.database.prisma, 'sdk-sub', { pools: 1, nodesPerPool: 3 });
    token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  });
  afterAll(async () => {
    await sql.end();
    await t.stop();
  });

  let label = 0;
  /** n events of TYPE for the tenant, committed as any writer's transaction would write them. */
  const publish = async (n: number) => {
    const first = label + 1;
    label += n;
    await sql.query(
      `INSERT INTO event (type, tenant_id, site_id, pool_id, node_id, subject, payload)
       SELECT $1, $2, $3, $4, $5, 'sdk-' || i, jsonb_build_object('i', i) FROM generate_series($6::int, $7::int) i`,
      [TYPE, tree.tenant.id, tree.site.id, tree.pools[0]!.id, tree.nodes[0]!.id, first, label],
    );
    return Array.from({ length: n }, (_, i) => first + i);
  };
  /** The head of the stream: what a subscription given it as `after` starts after. */
  const head = async () => {
    for (let i = 0; i < 200; i += 1) {
      const { rows } = await sql.query('SELECT count(*)::int AS n FROM event WHERE seq IS NULL');
      if (rows[0].n === 0) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    return (await sql.query(`SELECT COALESCE(max(seq), 0)::text AS c FROM event`)).rows[0].c as string;
  };
  /** Every TYPE event after `after`, as the database has them, in stream order. */
  const committed = async (after: string) =>
    (await sql.query(`SELECT seq::text AS cursor, (payload->>'i')::int AS i FROM event WHERE type = $1 AND seq > $2 ORDER BY seq`, [TYPE, after])).rows as { cursor: string; i: number }[];
  const asRows = (events: Event[]) => events.map((e) => ({ cursor: e.cursor, i: (e.payload as { i: number }).i }));

  for (const transport of ['ws', 'sse'] as Transport[]) {
    describe(`over ${transport}`, () => {
      it('delivers typed events in order with cursors; breaking out of the loop closes the stream', async () => {
        const sdk = new MetalClient({ url: t.url, token });
        const hub = t.app.services.events!;
        const after = await head();
        const got: Event[] = [];
        const sent = await publish(3);
        for await (const result of sdk.subscribe(EventsDocument, { filter: { types: [TYPE] }, after }, { transport })) {
          got.push(result.events);
          if (got.length === 3) break;
        }
        expect(got.map((e) => (e.payload as { i: number }).i)).toEqual(sent);
        expect(asRows(got)).toEqual(await committed(after));
        await until(() => hub.subscriberCount === 0, 5000, 'the stream to leave the hub');
        await sdk.close();
      });

      it('a refusal that is not about the connection ends the iteration with a MetalError (NOT_FOUND), and no token is UNAUTHENTICATED', async () => {
        const sdk = new MetalClient({ url: t.url, token });
        const missing = newId('MetalNode');
        const notFound = drain(sdk.subscribe(EventsDocument, { filter: { nodeId: missing } }, { transport, retryDelayMs: () => 50 }));
        await notFound.finished;
        expect(notFound.state.error).toBeInstanceOf(MetalError);
        expect(notFound.state.error).toMatchObject({ code: 'NOT_FOUND' });
        const anonymous = drain(new MetalClient({ url: t.url }).subscribe(EventsDocument, {}, { transport, retryDelayMs: () => 50 }));
        await anonymous.finished;
        expect(anonymous.state.error).toMatchObject({ code: 'UNAUTHENTICATED' });
        const badToken = new MetalClient({ url: t.url, token: 'mcp_no-such-token' });
        const refused = drain(badToken.subscribe(EventsDocument, {}, { transport, retryDelayMs: () => 50 }));
        await refused.finished;
        expect(refused.state.error).toMatchObject({ code: 'UNAUTHENTICATED' });
        await Promise.all([sdk.close(), badToken.close()]);
      });

      it('after the connection drops, it resubscribes from its last cursor: nothing lost, nothing repeated', async () => {
        const proxy = await tcpProxy(t.url);
        const sdk = new MetalClient({ url: proxy.url, token });
        const hub = t.app.services.events!;
        const after = await head();
        const reconnects: string[] = [];
        const stream = drain(
          sdk.subscribe(EventsDocument, { filter: { types: [TYPE] }, after }, {
            transport,
            // Long enough that the second batch is committed while nobody listens.
            retryDelayMs: () => 400,
            onReconnect: ({ error }) => reconnects.push(error.code),
          }),
        );
        try {
          await publish(4);
          await until(() => stream.state.items.length === 4, 10000, 'the first batch');
          proxy.cut();
          await until(() => reconnects.length > 0, 10000, 'the drop to be noticed');
          await publish(4);
          await until(() => stream.state.items.length >= 8, 15000, 'the second batch, replayed');
          await publish(2);
          await until(() => stream.state.items.length >= 10, 10000, 'live events after the replay');
          // Anything repeated would have arrived by the time a marker published after it does.
          await publish(1);
          await until(() => stream.state.items.length >= 11, 10000, 'the last event');
          expect(stream.state.error).toBeUndefined();
          expect(reconnects[0]).toBe('NETWORK');
          expect(asRows(stream.state.items.map((r) => r.events))).toEqual(await committed(after));
          expect(stream.state.items).toHaveLength(11);
        } finally {
          await sdk.close();
          await stream.finished;
          await proxy.close();
        }
        expect(stream.state.done).toBe(true);
        await until(() => hub.subscriberCount === 0, 5000, 'the stream to leave the hub');
      });
    });
  }

  it('close() ends a subscription that waits to reconnect, at once and without an error', async () => {
    const proxy = await tcpProxy(t.url);
    const sdk = new MetalClient({ url: proxy.url, token });
    const reconnects: string[] = [];
    const stream = drain(sdk.subscribe(EventsDocument, { filter: { types: [TYPE] } }, { transport: 'sse', retryDelayMs: () => 60_000, onReconnect: ({ error }) => reconnects.push(error.code) }));
    await until(() => t.app.services.events!.subscriberCount === 1, 10000, 'the stream to open');
    proxy.cut();
    await until(() => reconnects.length === 1, 10000, 'the drop to be noticed');
    const started = Date.now();
    await sdk.close();
    await stream.finished;
    expect(Date.now() - started).toBeLessThan(2000);
    expect(stream.state).toMatchObject({ done: true, error: undefined });
    await proxy.close();
  });

  for (const transport of ['ws', 'sse'] as Transport[]) {
    it(`over ${transport}, a connection that goes silent without closing is noticed by the keep-alive and resumed from the cursor`, async () => {
      const proxy = await tcpProxy(t.url);
      // A 1 s handshake timeout: reconnects while the network still swallows everything give up and try again.
      const sdk = new MetalClient({ url: proxy.url, token, keepAliveMs: 500, timeoutMs: 1000 });
      const after = await head();
      const reconnects: string[] = [];
      const stream = drain(sdk.subscribe(EventsDocument, { filter: { types: [TYPE] }, after }, { transport, retryDelayMs: () => 100, onReconnect: ({ error }) => reconnects.push(error.code) }));
      try {
        await publish(3);
        await until(() => stream.state.items.length === 3, 10000, 'the first batch');
        proxy.freeze();
        await publish(3); // sent into the black hole
        await until(() => reconnects.length > 0, 5000, 'the silent connection to be noticed');
        proxy.thaw();
        await until(() => stream.state.items.length >= 6, 15000, 'the batch sent while frozen, replayed');
        await publish(1);
        await until(() => stream.state.items.length >= 7, 10000, 'a live event after it');
        expect(reconnects[0]).toBe('NETWORK');
        expect(asRows(stream.state.items.map((r) => r.events))).toEqual(await committed(after));
        expect(stream.state.error).toBeUndefined();
      } finally {
        await sdk.close();
        await stream.finished;
        await proxy.close();
      }
    });
  }

  it('when the service stops (ABORTED server-stopping) and starts again, ws and sse subscriptions resume from their cursor', async () => {
    const url = t.url;
    const port = Number(new URL(url).port);
    const ws = new MetalClient({ url, token });
    const sse = new MetalClient({ url, token });
    const after = await head();
    const reasons: Record<Transport, string[]> = { ws: [], sse: [] };
    const opts = (transport: Transport) => ({
      transport,
      retries: 100,
      retryDelayMs: () => 200,
      onReconnect: ({ error }: { error: MetalError }) => reasons[transport].push(`${error.code}:${(error.details as { reason?: string } | undefined)?.reason ?? ''}`),
    });
    const overWs = drain(ws.subscribe(EventsDocument, { filter: { types: [TYPE] }, after }, opts('ws')));
    const overSse = drain(sse.subscribe(EventsDocument, { filter: { types: [TYPE] }, after }, opts('sse')));
    try {
      await publish(3);
      await until(() => overWs.state.items.length === 3 && overSse.state.items.length === 3, 10000, 'the first batch on both');
      const stoppedHub = t.app.services.events!;
      await t.stop();
      // A stream asked for while (or after) the service stops hears the same as the open ones did,
      // so a client resubscribing then tries again instead of taking it for a refusal.
      await expect(stoppedHub.subscribe({ principal: null as never, token: token, filter: {}, after: '2' })).rejects.toMatchObject({
        extensions: { code: 'ABORTED', details: { reason: 'server-stopping', lastCursor: '2' } },
      });
      // Committed while the service is down: only a replay from the cursor can deliver these.
      await publish(3);
      t = await startTestApp({ role: 'api', databaseUrl, port });
      expect(t.url).toBe(url);
      await until(() => overWs.state.items.length >= 6 && overSse.state.items.length >= 6, 20000, 'the replayed batch on both');
      await publish(2);
      await until(() => overWs.state.items.length >= 8 && overSse.state.items.length >= 8, 10000, 'live events after the restart');
      const expected = await committed(after);
      expect(expected).toHaveLength(8);
      expect(asRows(overWs.state.items.map((r) => r.events))).toEqual(expected);
      expect(asRows(overSse.state.items.map((r) => r.events))).toEqual(expected);
      expect([overWs.state.error, overSse.state.error]).toEqual([undefined, undefined]);
      // The first reconnect of each was for the service's own "server-stopping".
      expect(reasons.ws[0]).toBe('ABORTED:server-stopping');
      expect(reasons.sse[0]).toBe('ABORTED:server-stopping');
    } finally {
      await Promise.all([ws.close(), sse.close()]);
      await Promise.all([overWs.finished, overSse.finished]);
    }
  });

  it('a loop that takes results slower than they come keeps a bounded buffer: the stream is reopened from the last one taken, nothing lost or repeated', async () => {
    const sdk = new MetalClient({ url: t.url, token });
    const after = await head();
    const reasons: string[] = [];
    const got: Event[] = [];
    await publish(40);
    for await (const result of sdk.subscribe(EventsDocument, { filter: { types: [TYPE] }, after }, {
      bufferSize: 5,
      retryDelayMs: () => 20,
      onReconnect: ({ error }) => reasons.push(error.code === 'NETWORK' ? 'NETWORK' : `${error.code}:${(error.details as { reason?: string } | undefined)?.reason}`),
    })) {
      got.push(result.events);
      await new Promise((r) => setTimeout(r, 5));
      if (got.length === 40) break;
    }
    expect(asRows(got)).toEqual(await committed(after));
    expect(reasons.length).toBeGreaterThan(0);
    // The buffer is what closes it; on a busy machine a socket may also drop (a missed keep-alive),
    // which is resumed the same way.
    expect(reasons).toContain('ABORTED:slow-consumer');
    expect(reasons.filter((r) => r !== 'ABORTED:slow-consumer' && r !== 'NETWORK')).toEqual([]);
    await sdk.close();
  });

  it('nodeUpdated (no cursor) over ws: the current view, then one per change', async () => {
    const sdk = new MetalClient({ url: t.url, token });
    const node = tree.nodes[1]!;
    const abort = new AbortController();
    const stream = drain(sdk.subscribe(NodeUpdatedDocument, { id: node.id }, { signal: abort.signal }));
    await until(() => stream.state.items.length === 1, 10000, 'the current view');
    expect(stream.state.items[0]!.nodeUpdated).toMatchObject({ id: node.id, provisionState: 'ready' });
    await sdk.request(RetireDocument, { input: { nodeId: node.id } });
    await until(() => stream.state.items.some((r) => r.nodeUpdated.provisionState === 'retiring'), 10000, 'the change');
    abort.abort();
    await stream.finished;
    expect(stream.state.error).toBeUndefined();
    await sdk.close();
  });
});
