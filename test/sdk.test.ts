import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTestApp, type TestApp } from './helpers/app';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { newId } from '../src/ids';
import {
  CreateSiteDocument,
  EnrollDocument,
  MetalError,
  MetalClient,
  MetalNodeDocument,
  MetalNodesDocument,
  RetireDocument,
  ViewerDocument,
  type MetalNodeViewFragment,
} from '../clients/sdk/src';

/**
 * The SDK's request side against a running service: typed documents, errors by code, Relay
 * connections followed page by page, REST routes.
 */

/** What the SDK threw, for assertions (fails the test when it did not throw a MetalError). */
async function refusal(promise: Promise<unknown>): Promise<MetalError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(MetalError);
    return error as MetalError;
  }
  throw new Error('expected a MetalError, got an answer');
}

describe('the SDK: requests, errors, pagination, REST', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let token: string;
  let sdk: MetalClient;

  beforeAll(async () => {
    // No workers: the nodes stay where the fixtures put them.
    t = await startTestApp({ role: 'api' });
    tree = await makeTenantTree(t.app.database.prisma, 'sdk', { pools: 2, nodesPerPool: 6 });
    token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    sdk = new MetalClient({ url: t.url, token });
  });
  afterAll(async () => {
    await sdk.close();
    await t.stop();
  });

  it('request: a typed document returns its data', async () => {
    const viewer = await sdk.request(ViewerDocument);
    expect(viewer.viewer.tenantId).toBe(tree.tenant.id);
    const node = tree.nodes[0]!;
    const data = await sdk.request(MetalNodeDocument, { id: node.id });
    expect(data.node).toMatchObject({ id: node.id, name: node.name, provisionState: 'ready', poolId: node.poolId });
  });

  it('errors carry the service\'s code: NOT_FOUND, INVALID_INPUT with its field, UNAUTHENTICATED', async () => {
    const missing = newId('MetalNode');
    const notFound = await refusal(sdk.request(RetireDocument, { input: { nodeId: missing } }));
    expect(notFound).toMatchObject({ code: 'NOT_FOUND', requestId: expect.any(String) });
    expect(notFound.message).toContain(missing);

    const invalid = await refusal(sdk.request(CreateSiteDocument, { input: { name: 'sdk-bad', bmcNetworks: ['not-a-network'] } }));
    expect(invalid.code).toBe('INVALID_INPUT');
    expect(invalid.field).toMatch(/bmcNetworks/);
    expect(invalid.message).not.toContain('not-a-network');

    const anonymous = new MetalClient({ url: t.url });
    const unauthenticated = await refusal(anonymous.request(ViewerDocument));
    expect(unauthenticated.code).toBe('UNAUTHENTICATED');
    const wrongToken = new MetalClient({ url: t.url, token: 'mcp_not-a-real-token' });
    expect((await refusal(wrongToken.request(ViewerDocument))).code).toBe('UNAUTHENTICATED');
  });

  it('an enroll refused for its input names the field, and nothing is created', async () => {
    const before = await t.app.database.prisma.node.count();
    const refused = await refusal(
      sdk.request(EnrollDocument, {
        input: { poolId: tree.pools[0]!.id, siteId: tree.site.id, bmc: { address: '127.20.0.1', driver: 'no-such-driver', credentials: { username: 'root', password: 'pw-123456' } } },
      }),
    );
    expect(refused.code).toBe('INVALID_INPUT');
    expect(refused.field).toMatch(/driver/);
    expect(await t.app.database.prisma.node.count()).toBe(before);
  });

  it('NETWORK when nothing answers; HTTP_<status> when what answers is not the service', async () => {
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const nobody = new MetalClient({ url: `http://127.0.0.1:${port}`, token });
    expect((await refusal(nobody.request(ViewerDocument))).code).toBe('NETWORK');
    expect((await refusal(nobody.rest('GET', '/api/viewer'))).code).toBe('NETWORK');

    // A proxy's error page in front of the service.
    const proxy = http.createServer((_req, res) => {
      res.writeHead(502, { 'content-type': 'text/html' });
      res.end('<html><body>Bad Gateway</body></html>');
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    try {
      const behind = new MetalClient({ url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, token });
      expect(await refusal(behind.request(ViewerDocument))).toMatchObject({ code: 'HTTP_502', status: 502 });
      expect(await refusal(behind.rest('GET', '/api/viewer'))).toMatchObject({ code: 'HTTP_502', status: 502 });
    } finally {
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    }

    // A service that does not answer in time.
    const silent = http.createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const slow = new MetalClient({ url: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, token, timeoutMs: 300 });
      const timedOut = await refusal(slow.request(ViewerDocument));
      expect(timedOut.code).toBe('NETWORK');
      expect(timedOut.message).toMatch(/300 ms/);
    } finally {
      silent.closeAllConnections();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });

  it('paginate follows the connection over more than one page, each node once', async () => {
    let requests = 0;
    const counting = new MetalClient({
      url: t.url,
      token,
      fetch: (input, init) => {
        requests += 1;
        return fetch(input, init);
      },
    });
    const seen: MetalNodeViewFragment[] = [];
    for await (const node of counting.paginate(MetalNodesDocument, { filter: { siteId: tree.site.id } }, (d) => d.nodes, { pageSize: 5 })) {
      seen.push(node);
    }
    expect(requests).toBe(3); // 12 nodes, 5 a page
    expect(seen.map((n) => n.id).sort()).toEqual(tree.nodes.map((n) => n.id).sort());

    // Breaking out stops asking for pages.
    requests = 0;
    for await (const node of counting.paginate(MetalNodesDocument, { filter: { poolId: tree.pools[1]!.id } }, (d) => d.nodes, { pageSize: 2 })) {
      expect(node.poolId).toBe(tree.pools[1]!.id);
      break;
    }
    expect(requests).toBe(1);
  });

  it('rest: JSON in and out, and the error body as a MetalError', async () => {
    const { viewer } = await sdk.rest<{ viewer: { tenantId: string } }>('GET', '/api/viewer');
    expect(viewer.tenantId).toBe(tree.tenant.id);
    const { site } = await sdk.rest<{ site: { id: string; name: string } }>('POST', '/api/compute/sites', { name: 'sdk-rest-site' });
    expect(site.name).toBe('sdk-rest-site');
    expect((await sdk.request(ViewerDocument)).viewer.tenantId).toBe(tree.tenant.id);
    const missing = newId('MetalNode');
    const notFound = await refusal(sdk.rest('GET', `/api/compute/metal/nodes/${missing}`));
    expect(notFound).toMatchObject({ code: 'NOT_FOUND', status: 404, requestId: expect.any(String) });
    const invalid = await refusal(sdk.rest('POST', '/api/compute/sites', { name: 'x', bmcNetworks: ['nope'] }));
    expect(invalid).toMatchObject({ code: 'INVALID_INPUT', status: 400 });
    expect(invalid.field).toMatch(/bmcNetworks/);
    expect((await refusal(new MetalClient({ url: t.url }).rest('GET', '/api/viewer'))).code).toBe('UNAUTHENTICATED');
  });
});
