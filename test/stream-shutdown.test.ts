import { startTestApp, type TestApp } from './helpers/app';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { restStream, sseSubscribe, until, wsClient, wsSubscribe } from './helpers/streams';

/**
 * A stream the server ends says why: when the service stops, every open stream's last message is
 * ABORTED with details.reason "server-stopping" and details.lastCursor, on the REST event stream
 * (each channel, `provision` included), GraphQL over SSE and graphql-ws (which then gets 1001).
 */

jest.setTimeout(60_000);

describe('streams open when the service stops end with a reason', () => {
  let t: TestApp | undefined;
  afterAll(async () => {
    await t?.stop();
  });

  it('REST SSE (metal and provision), GraphQL over SSE and graphql-ws each get a last "server-stopping" error', async () => {
    t = await startTestApp();
    const tree = await makeTenantTree(t.app.database.prisma, 'stopping', { pools: 1, nodesPerPool: 1 });
    const token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const hub = t.app.services.events!;

    const metal = restStream(t.url, token, '?channel=metal');
    const provision = restStream(t.url, t.adminToken, '?channel=provision');
    const sse = sseSubscribe(t.url, token, 'subscription { events { type cursor } }');
    const client = wsClient(t.url, token);
    const closes: number[] = [];
    client.on('closed', (event) => closes.push((event as { code: number }).code));
    const ws = wsSubscribe(client, 'subscription { events { type cursor } }');
    await until(() => hub.subscriberCount === 4, 10000, 'four open streams');
    expect([metal.state.status, provision.state.status]).toEqual([200, 200]);

    const stopping = t.stop();
    t = undefined;
    await until(() => metal.state.done && provision.state.done && sse.errors.length > 0 && ws.errors.length > 0, 15000, 'every stream to end');
    await stopping;

    for (const stream of [metal, provision]) {
      const last = stream.messages[stream.messages.length - 1]!;
      expect(last.event).toBe('error');
      expect(last.data).toEqual({
        code: 'ABORTED',
        message: expect.stringMatching(/server is stopping/),
        requestId: expect.any(String),
        details: { reason: 'server-stopping', lastCursor: expect.stringMatching(/^\d+$/) },
      });
    }
    // graphql-ws' client reports the socket's close (1001) as an error too, after the operation's own.
    for (const errors of [sse.errors, ws.errors.filter((e) => typeof e?.message === 'string' && e.extensions)]) {
      expect(errors.length).toBe(1);
      expect(errors[0]).toMatchObject({
        message: expect.stringMatching(/server is stopping/),
        extensions: { code: 'ABORTED', details: { reason: 'server-stopping', lastCursor: expect.stringMatching(/^\d+$/) } },
      });
    }
    await until(() => closes.length > 0, 5000, 'the WebSocket to close');
    expect(closes[0]).toBe(1001);
    sse.stop();
    await client.dispose();
  });
});
