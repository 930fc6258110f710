import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { newId } from '../src/ids';
import type { ProvisionState } from '../src/modules/metal/states';

/**
 * Every metal verb through both faces, on twin nodes: the REST route and the GraphQL mutation must
 * leave the same node behind and answer with the same view (ids and timestamps aside).
 */
describe('REST and GraphQL give the same result for every verb', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let token: string;
  let profileId: string;
  let agentToken: string;

  const VIEW = `id provisionState failedFrom lastError { code message } maintenance bmc { address driver driverOptions credentialsSet }
    addresses macs productUuid driverBindings { power management virtualMedia } profileId profileVersion role version`;

  beforeAll(async () => {
    // The verbs' answers are compared, not what the workflows do after: with the engine on, the
    // runs the verbs start would move the twins (a rescue run fails at once on a node with no
    // MAC) while the test still reads them.
    t = await startTestApp({ workflowEngine: false });
    tree = await makeTenantTree(t.app.database.prisma, 'twins', { pools: 1, nodesPerPool: 0 });
    token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const saved = await gql(t.url, token, 'mutation ($i: DeployProfileVersionInput!) { saveDeployProfileVersion(input: $i) { id } }', {
      i: { name: 'base', role: 'base', steps: [{ name: 'os', kind: 'image' }] },
    });
    profileId = saved.data!.saveDeployProfileVersion.id;
    const agent = await gql(t.url, token, 'mutation ($s: ID!) { registerSiteAgent(siteId: $s, name: "a1") { token } }', { s: tree.site.id });
    agentToken = agent.data!.registerSiteAgent.token;
    await gql(t.url, agentToken, 'mutation { agentReportStatus { id } }');
  });
  afterAll(() => t.stop());

  async function twin(state: ProvisionState, failedFrom: ProvisionState | null = null): Promise<[string, string]> {
    const make = async () => {
      const id = newId('MetalNode');
      await t.app.database.prisma.node.create({
        data: {
          id, tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id, provisionState: state, failedFrom,
          maintenance: failedFrom !== null, bmcAddress: '127.7.7.7', bmcDriver: 'redfish', bmcCredentialsRef: 'secret://twin',
        },
      });
      return id;
    };
    return [await make(), await make()];
  }
  const comparable = (node: Record<string, unknown>) => {
    const { id: _id, ...rest } = node;
    return rest;
  };

  const cases: { verb: string; field: string; input: string; state: ProvisionState; failedFrom?: ProvisionState; body: () => Record<string, unknown>; gqlExtra?: () => Record<string, unknown> }[] = [
    { verb: 'manage', field: 'manageNode', input: 'MetalNodeVerbInput', state: 'ready', body: () => ({}) },
    { verb: 'inspect', field: 'inspectNode', input: 'MetalNodeVerbInput', state: 'ready', body: () => ({}) },
    { verb: 'provide', field: 'provideNode', input: 'MetalNodeVerbInput', state: 'ready', body: () => ({}) },
    { verb: 'deploy', field: 'deployNode', input: 'MetalDeployInput', state: 'ready', body: () => ({ profileId, profileVersion: 1 }) },
    { verb: 'undeploy', field: 'undeployNode', input: 'MetalUndeployInput', state: 'deployed', body: () => ({ wipe: 'crypto-erase' }), gqlExtra: () => ({ wipe: 'crypto_erase' }) },
    { verb: 'rescue', field: 'rescueNode', input: 'MetalNodeVerbInput', state: 'deployed', body: () => ({}) },
    { verb: 'abort', field: 'abortNode', input: 'MetalAbortInput', state: 'deploying', body: () => ({ reason: 'stuck' }) },
    { verb: 'recover', field: 'recoverNode', input: 'MetalNodeVerbInput', state: 'failed', failedFrom: 'inspecting', body: () => ({}) },
    { verb: 'retire', field: 'retireNode', input: 'MetalNodeVerbInput', state: 'ready', body: () => ({}) },
  ];

  it.each(cases)('$verb', async ({ verb, field, input, state, failedFrom, body, gqlExtra }) => {
    const [viaRest, viaGraphql] = await twin(state, failedFrom ?? null);
    const r = await rest(t.url, token, 'POST', `/api/compute/metal/${verb}`, { nodeId: viaRest, ...body() });
    expect(r.status).toBe(200);
    const g = await gql(t.url, token, `mutation ($i: ${input}!) { ${field}(input: $i) { node { ${VIEW} } } }`, { i: { nodeId: viaGraphql, ...(gqlExtra ?? body)() } });
    expect(g.errors).toBeUndefined();
    const restView = Object.fromEntries(Object.keys(g.data![field].node).map((k) => [k, r.body.node[k]]));
    expect(comparable(restView)).toEqual(comparable(g.data![field].node));
    // Refusals match too: the same verb again is now illegal (or idempotent) on both faces alike.
    const r2 = await rest(t.url, token, 'POST', `/api/compute/metal/${verb}`, { nodeId: viaRest, ...body() });
    const g2 = await gql(t.url, token, `mutation ($i: ${input}!) { ${field}(input: $i) { node { id } } }`, { i: { nodeId: viaGraphql, ...(gqlExtra ?? body)() } });
    expect(r2.body.error?.code).toBe(g2.errors?.[0]?.extensions?.code);
  });

  it('unrescue, power and enroll', async () => {
    const [a, b] = await twin('deployed');
    for (const id of [a, b]) await gql(t.url, token, 'mutation ($i: MetalNodeVerbInput!) { rescueNode(input: $i) { node { id } } }', { i: { nodeId: id } });
    await t.app.database.prisma.workflowRun.updateMany({ where: { nodeId: { in: [a, b] } }, data: { status: 'succeeded' } });
    const ur = await rest(t.url, token, 'POST', '/api/compute/metal/unrescue', { nodeId: a });
    const ug = await gql(t.url, token, `mutation ($i: MetalNodeVerbInput!) { unrescueNode(input: $i) { node { ${VIEW} } } }`, { i: { nodeId: b } });
    expect(comparable(Object.fromEntries(Object.keys(ug.data!.unrescueNode.node).map((k) => [k, ur.body.node[k]])))).toEqual(comparable(ug.data!.unrescueNode.node));

    const [p, q] = await twin('ready');
    const pr = await rest(t.url, token, 'POST', '/api/compute/metal/power', { nodeId: p, action: 'graceful-restart' });
    const pg = await gql(t.url, token, 'mutation ($i: MetalPowerInput!) { powerNode(input: $i) { commandId node { provisionState version } } }', { i: { nodeId: q, action: 'graceful_restart' } });
    expect(pr.body.commandId).toMatch(/^cmd_/);
    expect(pg.data!.powerNode.commandId).toMatch(/^cmd_/);
    expect({ provisionState: pr.body.node.provisionState, version: pr.body.node.version }).toEqual(pg.data!.powerNode.node);

    const enrollBody = { poolId: tree.pools[0]!.id, bmc: { address: '127.8.8.8', driver: 'ipmi', credentials: 'secret://x', driverOptions: { cipherSuite: 3 } }, macs: ['aa:bb:cc:dd:ee:01'] };
    const er = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', enrollBody);
    // A MAC belongs to one machine of the site: the GraphQL twin has its own.
    const eg = await gql(t.url, token, `mutation ($i: MetalEnrollInput!) { enrollNode(input: $i) { node { ${VIEW} } } }`, {
      i: { ...enrollBody, macs: ['aa:bb:cc:dd:ee:02'], bmc: { ...enrollBody.bmc, credentials: { ref: 'secret://x' } } },
    });
    expect([er.body.node.macs, eg.data!.enrollNode.node.macs]).toEqual([['aa:bb:cc:dd:ee:01'], ['aa:bb:cc:dd:ee:02']]);
    const sameMacs = (node: Record<string, unknown>) => ({ ...comparable(node), macs: 'own' });
    expect(sameMacs(Object.fromEntries(Object.keys(eg.data!.enrollNode.node).map((k) => [k, er.body.node[k]])))).toEqual(sameMacs(eg.data!.enrollNode.node));
  });

  it('bulk', async () => {
    const [a, b] = await twin('ready');
    const br = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[0]!.id, verb: 'inspect', nodeIds: [a] });
    const bg = await gql(t.url, token, `mutation ($i: MetalBulkInput!) { bulkNodes(input: $i) { nodes { ${VIEW} } batch { id } } }`, { i: { poolId: tree.pools[0]!.id, verb: 'inspect', nodeIds: [b] } });
    expect(br.body.batch).toBeNull();
    expect(bg.data!.bulkNodes.batch).toBeNull();
    expect(comparable(Object.fromEntries(Object.keys(bg.data!.bulkNodes.nodes[0]).map((k) => [k, br.body.nodes[0][k]])))).toEqual(comparable(bg.data!.bulkNodes.nodes[0]));
  });
});
