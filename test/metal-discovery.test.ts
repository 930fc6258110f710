import pg from 'pg';
import { startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { newId } from '../src/ids';
import { swapUuid } from '../src/modules/metal/discovery';

const REPORT = 'mutation ($m: [SightingInput!]) { agentReportStatus(machines: $m) { id } }';
const min = (n: number) => new Date(Date.now() + n * 60000).toISOString();
let macCounter = 0;
const nextMac = () => `52:54:00:00:${(Math.floor(macCounter / 256) % 256).toString(16).padStart(2, '0')}:${(macCounter++ % 256).toString(16).padStart(2, '0')}`;
let uuidCounter = 0;
const nextUuid = () => `4c4c4544-00${(uuidCounter++).toString(16).padStart(2, '0')}-3510-8052-b4c04f4e4b32`;

describe('PXE discovery: discovered and confirmMac', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let other: Awaited<ReturnType<typeof makeTenantTree>>;
  let token: string;
  let agents: string[];
  let sql: pg.Client;

  beforeAll(async () => {
    // No engine: a woken run stays due for the test to see.
    t = await startTestApp({ workflowEngine: false });
    tree = await makeTenantTree(t.app.database.prisma, 'disc', { pools: 2, nodesPerPool: 0 });
    other = await makeTenantTree(t.app.database.prisma, 'disc-other', { pools: 1, nodesPerPool: 0 });
    token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    await t.app.database.prisma.pool.update({ where: { id: tree.pools[1]!.id }, data: { policy: { trustProvisioningNetwork: true } } });
    agents = [];
    for (const name of ['a1', 'a2']) {
      const r = await gql(t.url, token, 'mutation ($s: ID!, $n: String!) { registerSiteAgent(siteId: $s, name: $n) { token } }', { s: tree.site.id, n: name });
      agents.push(r.data!.registerSiteAgent.token);
    }
    sql = new pg.Client({ connectionString: t.app.databaseUrl });
    await sql.connect();
  });
  afterAll(async () => {
    await sql.end();
    await t.stop();
  });

  async function waitingNode(uuid: string, cycledMinutesAgo: number | null, pool = 0, macs: string[] = []) {
    const id = newId('MetalNode');
    await t.app.database.prisma.node.create({
      data: {
        id, tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[pool]!.id, provisionState: 'enrolling',
        bmcAddress: '127.5.5.5', bmcDriver: 'ipmi', bmcCredentialsRef: 'secret://x', productUuid: uuid, macs,
        pxeCycledAt: cycledMinutesAgo === null ? null : new Date(Date.now() - cycledMinutesAgo * 60000),
      },
    });
    return id;
  }
  /** Gives the node the enroll run that waits for its MAC (as the engine leaves it). */
  async function waitingRun(nodeId: string): Promise<string> {
    const id = newId('WorkflowRun');
    await t.app.database.prisma.workflowRun.create({ data: { id, nodeId, kind: 'metal-enroll', status: 'waiting', waitingFor: 'its MAC to be confirmed', params: { verb: 'enroll' }, dueAt: null } });
    await t.app.database.prisma.node.update({ where: { id: nodeId }, data: { workflowId: id } });
    return id;
  }
  /** The run, as { runId }, when it is due (woken). */
  const wakes = async (runId: string) =>
    (await sql.query(`SELECT jsonb_build_object('runId', id) AS data FROM workflow_run WHERE id = $1 AND due_at <= now()`, [runId])).rows.map((r) => r.data);
  const sighting = (mac: string, productUuid: string | null, firstSeenMin: number, extra: Record<string, unknown> = {}) =>
    ({ mac, productUuid, arch: 'x86_64', firstSeen: min(firstSeenMin), lastSeen: min(0), requestCount: 3, relays: ['10.0.0.1'], ...extra });
  const eventsOf = async (nodeId: string, type: string) => (await sql.query('SELECT payload FROM event WHERE node_id = $1 AND type = $2', [nodeId, type])).rows.map((r) => r.payload);
  const report = async (agent: number, machines: unknown[]) => {
    const r = await gql(t.url, agents[agent]!, REPORT, { m: machines });
    expect(r.errors).toBeUndefined();
  };

  it('proposes the MAC first seen within 10 minutes after the PXE cycle, its UUID in SMBIOS byte order, once', async () => {
    const uuid = nextUuid();
    const nodeId = await waitingNode(uuid, 5);
    const runId = await waitingRun(nodeId);
    const mac = nextMac();
    await report(0, [sighting(mac, swapUuid(uuid).toUpperCase(), -3)]);
    const list = await rest(t.url, token, 'POST', '/api/compute/metal/discovered', { siteId: tree.site.id });
    expect(list.status).toBe(200);
    expect(list.body.machines.find((m: any) => m.mac === mac)).toMatchObject({ candidateFor: nodeId, nodeId: null });
    expect(await eventsOf(nodeId, 'node.pxe-mac.discovered')).toEqual([{ nodeId, mac, requestId: expect.any(String) }]);
    await report(0, [sighting(mac, swapUuid(uuid), -3)]);
    expect(await eventsOf(nodeId, 'node.pxe-mac.discovered')).toHaveLength(1);
    // A proposal binds nothing, so the run waiting for the MAC is not woken by it...
    expect(await wakes(runId)).toEqual([]);
    const confirmed = await rest(t.url, token, 'POST', '/api/compute/metal/confirmMac', { nodeId, mac: mac.toUpperCase() });
    expect(confirmed.status).toBe(200);
    expect(confirmed.body.node.macs).toEqual([mac]);
    expect((await eventsOf(nodeId, 'node.pxe-mac.confirmed'))[0]).toMatchObject({ mac, candidate: true });
    // ...confirmMac is: "the waiting boot then goes on from that MAC".
    expect(await wakes(runId)).toEqual([{ runId }]);
  });

  const noCandidate: [string, () => Promise<{ nodeId: string; machines: unknown[] }>][] = [
    ['a MAC first seen before the cycle', async () => {
      const uuid = nextUuid();
      return { nodeId: await waitingNode(uuid, 5), machines: [sighting(nextMac(), uuid, -6)] };
    }],
    ['a MAC first seen more than 10 minutes after the cycle', async () => {
      const uuid = nextUuid();
      return { nodeId: await waitingNode(uuid, 30), machines: [sighting(nextMac(), uuid, -15)] };
    }],
    ['a machine metal never power-cycled', async () => {
      const uuid = nextUuid();
      return { nodeId: await waitingNode(uuid, null), machines: [sighting(nextMac(), uuid, -1)] };
    }],
    ['a UUID seen from two MACs in 24 hours', async () => {
      const uuid = nextUuid();
      return { nodeId: await waitingNode(uuid, 5), machines: [sighting(nextMac(), uuid, -3), sighting(nextMac(), swapUuid(uuid), -600)] };
    }],
    ['a UUID another machine of the site shares', async () => {
      const uuid = nextUuid();
      await waitingNode(swapUuid(uuid), null, 0, [nextMac()]);
      return { nodeId: await waitingNode(uuid, 5), machines: [sighting(nextMac(), uuid, -3)] };
    }],
    ['a MAC already enrolled', async () => {
      const uuid = nextUuid();
      const mac = nextMac();
      await waitingNode(nextUuid(), null, 0, [mac]);
      return { nodeId: await waitingNode(uuid, 5), machines: [sighting(mac, uuid, -3)] };
    }],
  ];
  it.each(noCandidate)('proposes nothing for %s', async (_label, make) => {
    const { nodeId, machines } = await make();
    await report(1, machines);
    expect(await eventsOf(nodeId, 'node.pxe-mac.discovered')).toEqual([]);
    const row = await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: nodeId } });
    expect(row.discoveredMac).toBeNull();
  });

  /**
   * The discovered entry for `mac`, through a query text of its own: the response cache is not yet
   * dropped on an agent's report (issue 8, part 5), and a distinct query is always a miss.
   */
  const listed = async (mac: string) => {
    const alias = `m_${mac.replace(/:/g, '')}_${Date.now()}`;
    const r = await gql(t.url, token, `query ($s: ID!) { ${alias}: discovered(siteId: $s) { mac nodeId candidateFor } }`, { s: tree.site.id });
    return (r.data![alias] as { mac: string; nodeId: string | null; candidateFor: string | null }[]).find((m) => m.mac === mac);
  };

  it.each(['ff:ff:ff:ff:ff:ff', '00:00:00:00:00:00', '01:00:5e:00:00:fb'])('lists a sighting from %s but never proposes or binds it, even on a trusted network', async (mac) => {
    const uuid = nextUuid();
    const nodeId = await waitingNode(uuid, 2, 1);
    await report(1, [sighting(mac, uuid, -1)]);
    expect((await listed(mac))).toMatchObject({ candidateFor: null, nodeId: null });
    expect(await eventsOf(nodeId, 'node.pxe-mac.discovered')).toEqual([]);
    expect(await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: nodeId } })).toMatchObject({ macs: [], discoveredMac: null });
    await report(1, []);
  });

  it('a retired machine\'s MAC may be proposed and bound for the machine enrolled again', async () => {
    const uuid = nextUuid();
    const mac = nextMac();
    const retired = await waitingNode(nextUuid(), null, 0, [mac]);
    await t.app.database.prisma.node.update({ where: { id: retired }, data: { provisionState: 'retired' } });
    const nodeId = await waitingNode(uuid, 2, 1);
    await report(1, [sighting(mac, uuid, -1)]);
    expect(await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: nodeId } })).toMatchObject({ macs: [mac], discoveredMac: mac });
    expect((await listed(mac))?.nodeId).toBe(nodeId);
    await report(1, []);
  });

  it('binds the candidate at once in a pool that trusts its provisioning network', async () => {
    const uuid = nextUuid();
    const nodeId = await waitingNode(uuid, 2, 1);
    const runId = await waitingRun(nodeId);
    const mac = nextMac();
    await report(1, [sighting(mac, uuid, -1)]);
    const row = await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: nodeId } });
    expect(row.macs).toEqual([mac]);
    expect((await eventsOf(nodeId, 'node.pxe-mac.confirmed'))[0]).toMatchObject({ mac, candidate: true, trustedNetwork: true });
    // Bound at once, so the enroll run waiting for it goes on at once.
    expect(await wakes(runId)).toEqual([{ runId }]);
  });

  it('lists by MAC over agents, newest first: summed requests, relays, agents and the enrolled node', async () => {
    const mac = nextMac();
    const known = nextMac();
    const enrolled = await waitingNode(nextUuid(), null, 0, [known]);
    await report(0, [sighting(mac, null, -30, { lastSeen: min(-2), requestCount: 2, relays: ['10.0.0.1'] }), sighting(known, null, -20, { lastSeen: min(-1) })]);
    await report(1, [sighting(mac, null, -40, { lastSeen: min(-5), requestCount: 5, relays: ['10.0.0.2'] })]);
    const result = await gql(t.url, token, 'query ($s: ID!) { discovered(siteId: $s) { mac requestCount relays agentNodeIds nodeId lastSeen firstSeen } }', { s: tree.site.id });
    const machines = result.data!.discovered as any[];
    const row = machines.find((m) => m.mac === mac);
    expect(row).toMatchObject({ requestCount: 7, nodeId: null });
    expect(row.relays.sort()).toEqual(['10.0.0.1', '10.0.0.2']);
    expect(row.agentNodeIds).toHaveLength(2);
    expect(new Date(row.firstSeen).getTime()).toBeLessThan(Date.now() - 39 * 60000);
    expect(machines.find((m) => m.mac === known).nodeId).toBe(enrolled);
    const times = machines.map((m) => new Date(m.lastSeen).getTime());
    expect([...times].sort((a, b) => b - a)).toEqual(times);
    // Each report replaces the agent's previous list.
    await report(0, []);
    const after = await gql(t.url, token, 'query ($s: ID!) { discovered(siteId: $s) { mac requestCount } }', { s: tree.site.id });
    expect(after.data!.discovered.find((m: any) => m.mac === mac).requestCount).toBe(5);
    expect(after.data!.discovered.find((m: any) => m.mac === known)).toBeUndefined();
  });

  it('refuses more than 256 machines in one report', async () => {
    const machines = Array.from({ length: 257 }, () => sighting(nextMac(), null, -1));
    expect(codeOf(await gql(t.url, agents[0]!, REPORT, { m: machines }))).toBe('INVALID_INPUT');
  });

  it('only the owning tenant sees a site\'s list; it needs compute:sites:read', async () => {
    const foreign = await makeToken(t.app.database.prisma, other.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: other.tenant.id }]);
    expect((await rest(t.url, foreign, 'POST', '/api/compute/metal/discovered', { siteId: tree.site.id })).status).toBe(404);
    const powerOnly = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:power', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    expect((await rest(t.url, powerOnly, 'POST', '/api/compute/metal/discovered', { siteId: tree.site.id })).status).toBe(403);
    const reader = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:sites:read', scopeType: 'site', scopeId: tree.site.id, siteId: tree.site.id }]);
    expect((await rest(t.url, reader, 'POST', '/api/compute/metal/discovered', { siteId: tree.site.id })).status).toBe(200);
  });

  it('confirmMac: any MAC the operator knows (candidate false); INVALID_STATE with MACs or retired; CONFLICT on a MAC of the site', async () => {
    const nodeId = await waitingNode(nextUuid(), null);
    const mac = nextMac();
    const ok = await gql(t.url, token, 'mutation ($i: MetalConfirmMacInput!) { confirmMac(input: $i) { node { macs } } }', { i: { nodeId, mac } });
    expect(ok.data!.confirmMac.node.macs).toEqual([mac]);
    expect((await eventsOf(nodeId, 'node.pxe-mac.confirmed'))[0]).toMatchObject({ mac, candidate: false });
    expect((await rest(t.url, token, 'POST', '/api/compute/metal/confirmMac', { nodeId, mac: nextMac() })).body.error.code).toBe('INVALID_STATE');
    const retired = await waitingNode(nextUuid(), null);
    await t.app.database.prisma.node.update({ where: { id: retired }, data: { provisionState: 'retired' } });
    expect((await rest(t.url, token, 'POST', '/api/compute/metal/confirmMac', { nodeId: retired, mac: nextMac() })).body.error.code).toBe('INVALID_STATE');
    const another = await waitingNode(nextUuid(), null);
    expect((await rest(t.url, token, 'POST', '/api/compute/metal/confirmMac', { nodeId: another, mac })).status).toBe(409);
    expect((await rest(t.url, token, 'POST', '/api/compute/metal/confirmMac', { nodeId: another, mac: 'nope' })).status).toBe(400);
  });
});
