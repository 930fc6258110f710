import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { until, wsClient, wsSubscribe } from './helpers/streams';
import { newId, type IdType } from '../src/ids';
import { KIND } from '../src/auth/decide';

/**
 * No existence oracle: for every kind looked up by id and every path that looks it up (REST and
 * GraphQL), another tenant's id and an id that exists nowhere get the same status and the same
 * error body, byte for byte once the id itself and the request id are blanked.
 */

type Reply = { status: number; body: unknown };

/** The reply as bytes, with the looked-up id and every requestId blanked. */
function normalised(reply: Reply, id: string): string {
  const scrub = (value: unknown): unknown => {
    if (typeof value === 'string') return value.split(id).join('<id>');
    if (Array.isArray(value)) return value.map(scrub);
    if (value && typeof value === 'object') {
      return Object.fromEntries(Object.entries(value).filter(([k]) => k !== 'requestId').map(([k, v]) => [k, scrub(v)]));
    }
    return value;
  };
  return JSON.stringify({ status: reply.status, body: scrub(reply.body) });
}

describe('no existence oracle across tenants', () => {
  let t: TestApp;
  let a: Awaited<ReturnType<typeof makeTenantTree>>;
  let b: Awaited<ReturnType<typeof makeTenantTree>>;
  let ownerToken: string;
  let callerToken: string;
  /** Tenant A's objects of each kind, by IdType (ApiToken: A's token; PlatformToken: a platform token). */
  const theirs: Partial<Record<IdType | 'PlatformToken', string>> = {};
  const clients: ReturnType<typeof wsClient>[] = [];

  const viewerId = async (token: string) => (await gql(t.url, token, '{ viewer { tokenId } }')).data!.viewer.tokenId as string;

  beforeAll(async () => {
    t = await startTestApp();
    const prisma = t.app.database.prisma;
    a = await makeTenantTree(prisma, 'oracle-a', { pools: 1, nodesPerPool: 1 });
    b = await makeTenantTree(prisma, 'oracle-b', { pools: 1, nodesPerPool: 1 });
    ownerToken = await makeToken(prisma, a.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: a.tenant.id }]);
    // Admin on its own tenant: every permission there, so only the tenant boundary can refuse it.
    callerToken = await makeToken(prisma, b.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: b.tenant.id }]);
    const platformToken = await makeToken(prisma, null, [{ permission: 'compute:sites:read', scopeType: 'platform', scopeId: null }]);
    const node = a.nodes[0]!;
    const profile = await prisma.deployProfile.create({ data: { id: newId('DeployProfile'), tenantId: a.tenant.id, name: 'oracle-profile' } });
    await prisma.deployProfileVersion.create({ data: { profileId: profile.id, version: 1, role: 'worker', steps: [{ name: 'img', kind: 'image' }] } });
    const agent = await gql(t.url, ownerToken, 'mutation ($s: ID!) { registerSiteAgent(siteId: $s, name: "rack") { agent { id } } }', { s: a.site.id });
    const command = await prisma.command.create({
      data: { id: newId('Command'), tenantId: a.tenant.id, siteId: a.site.id, nodeId: node.id, kind: 'bmc.power', params: { action: 'on' }, status: 'queued', expiresAt: new Date(Date.now() + 60000) },
    });
    const batch = await prisma.commandBatch.create({
      data: { id: newId('CommandBatch'), tenantId: a.tenant.id, poolId: a.pools[0]!.id, verb: 'retire', reason: 'r', nodeIds: [node.id], digest: 'd', quorum: 0, status: 'recorded', createdBy: 'x' },
    });
    const run = await prisma.workflowRun.create({ data: { id: newId('WorkflowRun'), nodeId: node.id, kind: 'metal-rescue', status: 'queued', dueAt: null } });
    Object.assign(theirs, {
      WorkflowRun: run.id,
      Tenant: a.tenant.id, Site: a.site.id, Pool: a.pools[0]!.id, MetalNode: node.id, ApiToken: await viewerId(ownerToken),
      PlatformToken: await viewerId(platformToken), DeployProfile: profile.id, SiteAgent: agent.data!.registerSiteAgent.agent.id,
      Command: command.id, CommandBatch: batch.id,
    });
  });
  afterAll(async () => {
    for (const client of clients) await client.dispose();
    await t.stop();
  });

  const viaRest = (method: string, path: (id: string) => string, body?: (id: string) => unknown) =>
    async (id: string): Promise<Reply> => {
      const r = await rest(t.url, callerToken, method, path(id), body?.(id));
      return { status: r.status, body: r.body };
    };
  const viaGraphql = (query: string, variables: (id: string) => Record<string, unknown>) =>
    async (id: string): Promise<Reply> => {
      const r = await gql(t.url, callerToken, query, variables(id));
      return { status: r.status, body: { data: r.data, errors: r.errors } };
    };
  /** A subscription over graphql-ws: the error it is refused with. */
  const viaSubscription = (query: string, variables: (id: string) => Record<string, unknown>) =>
    async (id: string): Promise<Reply> => {
      const client = wsClient(t.url, callerToken);
      clients.push(client);
      const got = wsSubscribe(client, query, variables(id));
      await until(() => got.errors.length > 0 || got.done, 10000, 'the subscription to be refused');
      got.stop();
      return { status: 0, body: { errors: got.errors, events: got.events } };
    };
  const bmc = { address: '127.9.9.9', driver: 'redfish', credentials: 'secret://vault/x' };
  const NODE = 'query ($id: ID!) { node(id: $id) { id } }';
  const verb = (field: string, input: string) => `mutation ($i: ${input}!) { ${field}(input: $i) { node { id } } }`;

  const cases: { kind: IdType | 'PlatformToken'; path: string; ask: (id: string) => Promise<Reply> }[] = [
    // REST: the documented routes.
    { kind: 'MetalNode', path: 'GET /api/compute/metal/nodes/{id}', ask: viaRest('GET', (id) => `/api/compute/metal/nodes/${id}`) },
    ...['manage', 'inspect', 'provide', 'recover', 'rescue', 'unrescue', 'retire', 'undeploy'].map((v) => ({
      kind: 'MetalNode' as const, path: `POST /api/compute/metal/${v}`, ask: viaRest('POST', () => `/api/compute/metal/${v}`, (id) => ({ nodeId: id })),
    })),
    { kind: 'MetalNode', path: 'POST /api/compute/metal/abort', ask: viaRest('POST', () => '/api/compute/metal/abort', (id) => ({ nodeId: id, reason: 'x' })) },
    { kind: 'MetalNode', path: 'POST /api/compute/metal/deploy', ask: viaRest('POST', () => '/api/compute/metal/deploy', (id) => ({ nodeId: id, profileId: theirs.DeployProfile, profileVersion: 1 })) },
    { kind: 'MetalNode', path: 'POST /api/compute/metal/power', ask: viaRest('POST', () => '/api/compute/metal/power', (id) => ({ nodeId: id, action: 'on' })) },
    { kind: 'MetalNode', path: 'POST /api/compute/metal/confirmMac', ask: viaRest('POST', () => '/api/compute/metal/confirmMac', (id) => ({ nodeId: id, mac: '02:00:00:00:00:01' })) },
    { kind: 'Pool', path: 'GET /api/compute/pools/{id}', ask: viaRest('GET', (id) => `/api/compute/pools/${id}`) },
    { kind: 'Pool', path: 'PATCH /api/compute/pools/{id}/policy', ask: viaRest('PATCH', (id) => `/api/compute/pools/${id}/policy`, () => ({ policy: {} })) },
    { kind: 'Pool', path: 'POST /api/compute/metal/enroll', ask: viaRest('POST', () => '/api/compute/metal/enroll', (id) => ({ poolId: id, bmc })) },
    { kind: 'Pool', path: 'POST /api/compute/metal/bulk', ask: viaRest('POST', () => '/api/compute/metal/bulk', (id) => ({ poolId: id, verb: 'inspect', nodeIds: [b.nodes[0]!.id] })) },
    { kind: 'Site', path: 'GET /api/compute/sites/{id}', ask: viaRest('GET', (id) => `/api/compute/sites/${id}`) },
    { kind: 'Site', path: 'POST /api/compute/pools', ask: viaRest('POST', () => '/api/compute/pools', (id) => ({ siteId: id, name: 'sneaky' })) },
    { kind: 'Site', path: 'POST /api/compute/metal/discovered', ask: viaRest('POST', () => '/api/compute/metal/discovered', (id) => ({ siteId: id })) },
    { kind: 'Tenant', path: 'POST /api/compute/sites', ask: viaRest('POST', () => '/api/compute/sites', (id) => ({ tenantId: id, name: 'sneaky' })) },
    { kind: 'Tenant', path: 'POST /api/tokens', ask: viaRest('POST', () => '/api/tokens', (id) => ({ tenantId: id, name: 'sneaky', grants: [{ permission: 'admin', scopeType: 'tenant', scopeId: id }] })) },
    { kind: 'ApiToken', path: 'DELETE /api/tokens/{id}', ask: viaRest('DELETE', (id) => `/api/tokens/${id}`) },
    { kind: 'PlatformToken', path: 'DELETE /api/tokens/{id}', ask: viaRest('DELETE', (id) => `/api/tokens/${id}`) },
    // GraphQL: node(id) for every kind it serves, then the fields that take an id.
    ...(['Tenant', 'Site', 'Pool', 'MetalNode', 'ApiToken', 'PlatformToken', 'DeployProfile', 'SiteAgent', 'Command', 'CommandBatch'] as const).map((kind) => ({
      kind, path: 'GraphQL node(id)', ask: viaGraphql(NODE, (id) => ({ id })),
    })),
    { kind: 'MetalNode', path: 'GraphQL manageNode', ask: viaGraphql(verb('manageNode', 'MetalNodeVerbInput'), (id) => ({ i: { nodeId: id } })) },
    { kind: 'MetalNode', path: 'GraphQL retireNode', ask: viaGraphql(verb('retireNode', 'MetalNodeVerbInput'), (id) => ({ i: { nodeId: id } })) },
    { kind: 'MetalNode', path: 'GraphQL powerNode', ask: viaGraphql('mutation ($i: MetalPowerInput!) { powerNode(input: $i) { commandId } }', (id) => ({ i: { nodeId: id, action: 'off' } })) },
    { kind: 'MetalNode', path: 'GraphQL confirmMac', ask: viaGraphql(verb('confirmMac', 'MetalConfirmMacInput'), (id) => ({ i: { nodeId: id, mac: '02:00:00:00:00:02' } })) },
    { kind: 'Pool', path: 'GraphQL updatePoolPolicy', ask: viaGraphql('mutation ($i: UpdatePoolPolicyInput!) { updatePoolPolicy(input: $i) { id } }', (id) => ({ i: { poolId: id, policy: {} } })) },
    { kind: 'Pool', path: 'GraphQL enrollNode', ask: viaGraphql(verb('enrollNode', 'MetalEnrollInput'), (id) => ({ i: { poolId: id, bmc: { ...bmc, credentials: { ref: bmc.credentials } } } })) },
    { kind: 'Site', path: 'GraphQL discovered', ask: viaGraphql('query ($s: ID!) { discovered(siteId: $s) { mac } }', (id) => ({ s: id })) },
    { kind: 'Site', path: 'GraphQL createPool', ask: viaGraphql('mutation ($i: CreatePoolInput!) { createPool(input: $i) { id } }', (id) => ({ i: { siteId: id, name: 'sneaky' } })) },
    { kind: 'Site', path: 'GraphQL registerSiteAgent', ask: viaGraphql('mutation ($s: ID!) { registerSiteAgent(siteId: $s, name: "x") { token } }', (id) => ({ s: id })) },
    { kind: 'ApiToken', path: 'GraphQL revokeApiToken', ask: viaGraphql('mutation ($id: ID!) { revokeApiToken(id: $id) { id } }', (id) => ({ id })) },
    { kind: 'PlatformToken', path: 'GraphQL revokeApiToken', ask: viaGraphql('mutation ($id: ID!) { revokeApiToken(id: $id) { id } }', (id) => ({ id })) },
    { kind: 'DeployProfile', path: 'GraphQL validateProfile', ask: viaGraphql('query ($p: ID!) { validateProfile(profileId: $p, profileVersion: 1) { valid } }', (id) => ({ p: id })) },
    {
      kind: 'DeployProfile', path: 'GraphQL saveDeployProfileVersion',
      ask: viaGraphql('mutation ($i: DeployProfileVersionInput!) { saveDeployProfileVersion(input: $i) { id } }', (id) => ({ i: { profileId: id, role: 'w', steps: [{ name: 'i', kind: 'image' }] } })),
    },
    // Subscriptions (graphql-ws).
    { kind: 'WorkflowRun', path: 'subscription workflowProgress', ask: viaSubscription('subscription ($r: ID!) { workflowProgress(runId: $r) { type } }', (id) => ({ r: id })) },
    { kind: 'MetalNode', path: 'subscription nodeUpdated', ask: viaSubscription('subscription ($id: ID!) { nodeUpdated(id: $id) { id } }', (id) => ({ id })) },
    { kind: 'MetalNode', path: 'subscription events(filter.nodeId)', ask: viaSubscription('subscription ($id: ID!) { events(filter: { nodeId: $id }) { type } }', (id) => ({ id })) },
    { kind: 'Pool', path: 'subscription events(filter.poolId)', ask: viaSubscription('subscription ($id: ID!) { events(filter: { poolId: $id }) { type } }', (id) => ({ id })) },
    { kind: 'Site', path: 'subscription events(filter.siteId)', ask: viaSubscription('subscription ($id: ID!) { events(filter: { siteId: $id }) { type } }', (id) => ({ id })) },
  ];

  it.each(cases)('$kind via $path: another tenant\'s id answers exactly as a missing one', async ({ kind, ask }) => {
    const other = theirs[kind]!;
    const missing = newId(kind === 'PlatformToken' ? 'ApiToken' : kind);
    const [forOther, forMissing] = [await ask(other), await ask(missing)];
    expect(JSON.stringify(forOther.body)).toMatch(/"NOT_FOUND"/);
    expect(normalised(forOther, other)).toBe(normalised(forMissing, missing));
    // The answer names the object looked up, never where it sits.
    for (const owner of [a.tenant.id, a.site.id, a.pools[0]!.id, a.nodes[0]!.id].filter((o) => o !== other)) {
      expect(JSON.stringify(forOther.body)).not.toContain(owner);
    }
  });

  it.each(Object.keys(KIND).filter((k) => ['Tenant', 'Site', 'Pool', 'MetalNode', 'HardwareProfile', 'ApiToken', 'DeployProfile', 'SiteAgent', 'Command', 'CommandBatch'].includes(k)) as IdType[])(
    'node(id) of a missing %s says "<kind> <id> not found"',
    async (type) => {
      const id = newId(type);
      const result = await gql(t.url, callerToken, NODE, { id });
      expect(result.errors?.[0]).toMatchObject({ message: `${KIND[type]} ${id} not found`, extensions: { code: 'NOT_FOUND' } });
    },
  );

  it('the ids used above are real: the owner reads each of them', async () => {
    for (const kind of ['Tenant', 'Site', 'Pool', 'MetalNode', 'ApiToken', 'DeployProfile', 'SiteAgent', 'Command', 'CommandBatch'] as const) {
      const result = await gql(t.url, ownerToken, NODE, { id: theirs[kind] });
      expect({ kind, errors: result.errors, id: result.data?.node?.id }).toEqual({ kind, errors: undefined, id: theirs[kind] });
    }
    const platform = await gql(t.url, t.adminToken, NODE, { id: theirs.PlatformToken });
    expect(platform.data?.node?.id).toBe(theirs.PlatformToken);
  });
});
