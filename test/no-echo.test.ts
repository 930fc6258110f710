import { generateKeyPairSync } from 'node:crypto';
import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree } from './helpers/fixtures';

/**
 * "Input errors name the field and never repeat the value sent" (docs/api.md). Each case sends a value
 * carrying a marker (or a number no message would otherwise hold) to a refusal that used to quote
 * it, and checks the whole answer: refused, and the value nowhere in it.
 */

jest.setTimeout(60_000);

const MARK = 'ZqEchoMark';
/** A real Ed25519 public key (base64 of its 32 bytes), so the approver keys pass every other check. */
const PUBLIC_KEY = Buffer.from(generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }).x!, 'base64url').toString('base64');

describe('refusals never repeat the value sent', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  const admin = () => t.adminToken;

  beforeAll(async () => {
    t = await startTestApp();
    tree = await makeTenantTree(t.app.database.prisma, 'echo', { pools: 1, nodesPerPool: 0 });
  });
  afterAll(() => t?.stop());

  const graphql = async (query: string, variables?: Record<string, unknown>) => {
    const r = await gql(t.url, admin(), query, variables);
    return { refused: (r.errors?.length ?? 0) > 0, text: JSON.stringify({ data: r.data, errors: r.errors }) };
  };
  const restCall = async (method: string, path: string, body?: unknown) => {
    const r = await rest(t.url, admin(), method, path, body);
    return { refused: r.status >= 400, text: JSON.stringify(r.body) };
  };
  const raw = async (method: string, path: string, body?: string) => {
    const r = await fetch(`${t.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${admin()}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body,
    });
    return { refused: r.status >= 400, text: await r.text() };
  };
  const enroll = (extra: Record<string, unknown>) =>
    restCall('POST', '/api/compute/metal/enroll', {
      poolId: tree.pools[0]!.id,
      bmc: { address: '127.0.0.1:9', driver: 'redfish', credentials: { username: 'u', password: 'p' } },
      ...extra,
    });
  /** Asks twice: the second is the refusal (a name taken by the first). */
  const twice = async (ask: () => Promise<{ refused: boolean; text: string }>) => {
    await ask();
    return ask();
  };

  const cases: [string, () => Promise<{ refused: boolean; text: string }>, string][] = [
    ['REST: a path id that is no id of this service', () => restCall('GET', `/api/compute/metal/nodes/${MARK}-1`), MARK],
    ['GraphQL: node(id) with no id of this service', () => graphql(`{ node(id: "${MARK}-2") { id } }`), MARK],
    ['GraphQL: a variable id that is no id of this service', () => graphql('query ($id: ID!) { node(id: $id) { id } }', { id: `${MARK}-3` }), MARK],
    ['a tenant name taken', () => twice(() => graphql(`mutation { createTenant(input: { name: "${MARK}-tenant" }) { id } }`)), MARK],
    ['a site name taken', () => twice(() => graphql(`mutation { createSite(input: { name: "${MARK}-site", tenantId: "${tree.tenant.id}" }) { id } }`)), MARK],
    ['a pool name taken', () => twice(() => graphql(`mutation { createPool(input: { name: "${MARK}-pool", siteId: "${tree.site.id}" }) { id } }`)), MARK],
    ['a hardware profile name taken', () => twice(() => graphql(`mutation { createHardwareProfile(input: { name: "${MARK}-hw", driverBindings: { management: "redfish", power: "redfish", virtualMedia: "none" } }) { id } }`)), MARK],
    ['a site agent name taken', () => twice(() => graphql(`mutation { registerSiteAgent(siteId: "${tree.site.id}", name: "${MARK}-agent") { token } }`)), MARK],
    ['a pool policy with an unknown hardware profile', () => graphql(`mutation { createPool(input: { name: "p-hw", siteId: "${tree.site.id}", policy: { hardwareProfile: "${MARK}-nohw" } }) { id } }`), MARK],
    ['an approver key listed twice', () => graphql(`mutation { createPool(input: { name: "p-keys", siteId: "${tree.site.id}", policy: { quorum: 1, approverKeys: [{ id: "${MARK}-k", publicKey: "${PUBLIC_KEY}" }, { id: "${MARK}-k", publicKey: "${PUBLIC_KEY}" }] } }) { id } }`), MARK],
    ['a deploy profile step name used twice', () => graphql(`mutation { saveDeployProfileVersion(input: { name: "dp", tenantId: "${tree.tenant.id}", role: "r", steps: [{ name: "${MARK}-s", kind: "image" }, { name: "${MARK}-s", kind: "image" }] }) { id } }`), MARK],
    ['a grant on an unknown scope id', () => graphql(`mutation { createApiToken(input: { name: "t", tenantId: "${tree.tenant.id}", grants: [{ permission: "admin", scopeType: site, scopeId: "${MARK}-scope" }] }) { token } }`), MARK],
    ['enroll: an address that is no IP literal', () => enroll({ addresses: [`${MARK}-addr`] }), MARK],
    ['enroll: a MAC that is no MAC', () => enroll({ macs: [`${MARK}-mac`] }), MARK],
    ['enroll: the broadcast MAC', () => enroll({ macs: ['FF:FF:FF:FF:FF:FF'] }), 'ff:ff:ff:ff:ff:ff'],
    ['enroll: an unknown hardware profile', () => enroll({ hardwareProfile: `${MARK}-profile` }), MARK],
    ['REST: malformed JSON (its parser quotes the text)', () => raw('POST', '/api/compute/metal/enroll', `{"poolId": ${MARK}secret}`), MARK],
    ['an unknown route', () => raw('GET', `/api/${MARK}-route`), MARK],
    ['a method a route does not take', () => raw('DELETE', '/api/compute/metal/enroll'), 'DELETE'],
    ['the event stream: a cursor that is no cursor', () => raw('GET', `/api/events?after=${MARK}`), MARK],
    ['the event stream: a cursor ahead of the stream', () => raw('GET', '/api/events?after=987654321987'), '987654321987'],
    ['NOT_FOUND of an address (no id of this service): the address is not repeated', () => restCall('GET', '/controlnode/fabric-config/node/10.201.33.44/postdeploy'), '10.201.33.44'],
    ['NOT_FOUND of a made-up batch id', () => restCall('GET', `/controlnode/fabric-config/batches/${MARK}-batch/postdeploy`), MARK],
    ['a page size literal over the limit', () => graphql('{ nodes(first: 987654) { edges { cursor } } }'), '987654'],
    ['a page size variable over the limit', () => graphql('query ($n: Int) { nodes(first: $n) { edges { cursor } } }', { n: 987653 }), '987653'],
  ];

  it.each(cases)('%s', async (_name, ask, sent) => {
    const { refused, text } = await ask();
    expect(refused).toBe(true);
    expect(text).not.toContain(sent);
  });
});
