import { startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { newId } from '../src/ids';
import { PROVISION_STATES, decidePower, type ProvisionState } from '../src/modules/metal/states';
import { generateAgentKeyPair } from '../src/modules/sites/seal';

const REGISTER = 'mutation ($s: ID!, $n: String!) { registerSiteAgent(siteId: $s, name: $n) { token agent { id serving } } }';
const HEARTBEAT = 'mutation { agentReportStatus { id serving lastHeartbeatAt } }';
const CLAIM = 'mutation ($m: Int) { claimCommands(max: $m) { id kind nodeId params status } }';

describe('power and site agents', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let other: Awaited<ReturnType<typeof makeTenantTree>>;
  let admin: string;
  let powerToken: string;
  let agentToken: string;

  beforeAll(async () => {
    // The built-in agent off: with it, every site is served (test/site-agent-builtin.test.ts).
    t = await startTestApp({ agentHeartbeatMs: 60000, builtinAgent: false });
    tree = await makeTenantTree(t.app.database.prisma, 'pwr', { pools: 1, nodesPerPool: 0 });
    other = await makeTenantTree(t.app.database.prisma, 'pwr-other', { pools: 1, nodesPerPool: 0 });
    admin = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    powerToken = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:power', scopeType: 'site', scopeId: tree.site.id, siteId: tree.site.id }]);
  });
  afterAll(() => t.stop());

  async function nodeIn(state: ProvisionState, opts: { credentials?: boolean; owner?: typeof tree } = {}) {
    const owner = opts.owner ?? tree;
    const id = newId('MetalNode');
    await t.app.database.prisma.node.create({
      data: {
        id, tenantId: owner.tenant.id, siteId: owner.site.id, poolId: owner.pools[0]!.id, provisionState: state,
        bmcAddress: '127.2.2.2', bmcDriver: 'ipmi', bmcCredentialsRef: opts.credentials === false ? null : 'secret://x',
      },
    });
    return id;
  }
  const powerVia = (token: string, nodeId: string, action: string, requestId?: string) =>
    rest(t.url, token, 'POST', '/api/compute/metal/power', { nodeId, action }, requestId ? { 'x-request-id': requestId } : {});

  it('is INVALID_STATE while no agent serves the site', async () => {
    const nodeId = await nodeIn('ready');
    const response = await powerVia(powerToken, nodeId, 'on');
    expect(response.status).toBe(409);
    expect(response.body.error).toMatchObject({ code: 'INVALID_STATE', message: expect.stringMatching(/no site agent serves/) });
  });

  it('an admin registers an agent; its heartbeat makes it serve the site; only its own token reports', async () => {
    const registered = await gql(t.url, admin, REGISTER, { s: tree.site.id, n: 'rack-1' });
    expect(registered.data!.registerSiteAgent.agent.serving).toBe(false);
    agentToken = registered.data!.registerSiteAgent.token;
    await gql(t.url, agentToken, 'mutation ($k: String!) { registerAgentKey(publicKey: $k) { id } }', { k: generateAgentKeyPair().publicKey });
    const beat = await gql(t.url, agentToken, HEARTBEAT);
    expect(beat.data!.agentReportStatus.serving).toBe(true);
    expect(codeOf(await gql(t.url, admin, HEARTBEAT))).toBe('PERMISSION_DENIED');
    expect(codeOf(await gql(t.url, powerToken, REGISTER, { s: tree.site.id, n: 'rack-2' }))).toBe('PERMISSION_DENIED');
    expect(codeOf(await gql(t.url, admin, REGISTER, { s: tree.site.id, n: 'rack-1' }))).toBe('CONFLICT');
  });

  /** The seed's four workflow states, retiring (its workflow powers the machine off) and retired (terminal). */
  const REFUSED: ProvisionState[] = ['inspecting', 'commissioning', 'deploying', 'releasing', 'retiring', 'retired'];
  it.each(PROVISION_STATES)('power from %s: as the state table says, refused while a workflow controls power and once retired', async (state) => {
    const nodeId = await nodeIn(state);
    const before = await t.app.database.prisma.command.count();
    const response = await powerVia(powerToken, nodeId, 'cycle');
    expect(decidePower(state).legal).toBe(!REFUSED.includes(state));
    if (REFUSED.includes(state)) {
      expect(response.status).toBe(409);
      expect(response.body.error).toMatchObject({ code: 'INVALID_STATE', message: expect.stringContaining(`is ${state}: `), details: { state } });
      expect(await t.app.database.prisma.command.count()).toBe(before);
      const viaGraphql = await gql(t.url, powerToken, 'mutation ($i: MetalPowerInput!) { powerNode(input: $i) { commandId } }', { i: { nodeId, action: 'off' } });
      expect(codeOf(viaGraphql)).toBe('INVALID_STATE');
    } else {
      expect(response.status).toBe(200);
      expect(response.body.commandId).toMatch(/^cmd_/);
      expect(response.body.node.provisionState).toBe(state);
    }
  });

  it('is INVALID_STATE without BMC credentials; NOT_FOUND for another tenant; PERMISSION_DENIED with provision only', async () => {
    expect((await powerVia(powerToken, await nodeIn('ready', { credentials: false }), 'on')).body.error.code).toBe('INVALID_STATE');
    expect((await powerVia(powerToken, await nodeIn('ready', { owner: other }), 'on')).status).toBe(404);
    const provisionOnly = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    expect((await powerVia(provisionOnly, await nodeIn('ready'), 'on')).status).toBe(403);
    expect((await powerVia(powerToken, await nodeIn('ready'), 'explode')).status).toBe(400);
  });

  it('is INVALID_STATE naming the run while a failed or aborted run\'s cleanup still sends power commands, and accepted once it ended', async () => {
    const nodeId = await nodeIn('failed');
    const runId = newId('WorkflowRun');
    await t.app.database.prisma.workflowRun.create({ data: { id: runId, nodeId, kind: 'metal-inspect', status: 'aborting', params: { verb: 'inspect' }, dueAt: null } });
    for (const via of ['rest', 'graphql'] as const) {
      if (via === 'rest') {
        const refused = await powerVia(powerToken, nodeId, 'on');
        expect(refused.status).toBe(409);
        expect(refused.body.error).toMatchObject({ code: 'INVALID_STATE', message: expect.stringContaining(`workflow run ${runId}`) });
      } else {
        const refused = await gql(t.url, powerToken, 'mutation ($i: MetalPowerInput!) { powerNode(input: $i) { commandId } }', { i: { nodeId, action: 'on' } });
        expect(codeOf(refused)).toBe('INVALID_STATE');
      }
    }
    expect(await t.app.database.prisma.command.count({ where: { nodeId } })).toBe(0);
    await t.app.database.prisma.workflowRun.update({ where: { id: runId }, data: { status: 'failed' } });
    expect((await powerVia(powerToken, nodeId, 'on')).status).toBe(200);
  });

  it('a retry with the same X-Request-Id returns the same command; reusing it for another command is CONFLICT', async () => {
    const nodeId = await nodeIn('deployed');
    const first = await powerVia(powerToken, nodeId, 'graceful-off', 'req-power-1');
    const again = await powerVia(powerToken, nodeId, 'graceful-off', 'req-power-1');
    expect(again.body.commandId).toBe(first.body.commandId);
    const gqlRetry = await gql(t.url, powerToken, 'mutation ($i: MetalPowerInput!) { powerNode(input: $i) { commandId } }', { i: { nodeId, action: 'graceful_off' } }, { 'x-request-id': 'req-power-1' });
    expect(gqlRetry.data!.powerNode.commandId).toBe(first.body.commandId);
    const reused = await powerVia(powerToken, nodeId, 'reset', 'req-power-1');
    expect(reused.status).toBe(409);
    const parallel = await Promise.all(Array.from({ length: 5 }, () => powerVia(powerToken, nodeId, 'nmi', 'req-power-2')));
    expect(new Set(parallel.map((r) => r.body.commandId)).size).toBe(1);
    expect(await t.app.database.prisma.command.count({ where: { idempotencyKey: { not: null }, params: { equals: { action: 'nmi' } } } })).toBe(1);
  });

  it('the agent claims queued commands once (SKIP LOCKED), never expired ones, and reports results', async () => {
    await t.app.database.prisma.command.updateMany({ where: { siteId: tree.site.id, status: 'queued' }, data: { status: 'succeeded' } });
    const fresh = await powerVia(powerToken, await nodeIn('ready'), 'on');
    const stale = await powerVia(powerToken, await nodeIn('ready'), 'off');
    await t.app.database.prisma.command.update({ where: { id: stale.body.commandId }, data: { expiresAt: new Date(Date.now() - 1000) } });
    const [a, b] = await Promise.all([gql(t.url, agentToken, CLAIM, { m: 10 }), gql(t.url, agentToken, CLAIM, { m: 10 })]);
    const claimed = [...a.data!.claimCommands, ...b.data!.claimCommands];
    expect(claimed.map((c: { id: string }) => c.id)).toEqual([fresh.body.commandId]);
    expect(claimed[0]).toMatchObject({ kind: 'bmc.power', params: { action: 'on' }, status: 'claimed' });
    expect((await t.app.database.prisma.command.findUniqueOrThrow({ where: { id: stale.body.commandId } })).status).toBe('expired');
    const done = await gql(t.url, agentToken, 'mutation ($c: ID!) { reportCommandResult(commandId: $c, result: { ok: true, value: "on", notes: ["chassis on"] }) { status result } }', { c: fresh.body.commandId });
    expect(done.data!.reportCommandResult).toEqual({ status: 'succeeded', result: { ok: true, value: 'on', notes: ['chassis on'] } });
    expect(codeOf(await gql(t.url, agentToken, 'mutation ($c: ID!) { reportCommandResult(commandId: $c, result: { ok: false, code: "BMC_ERROR", message: "again" }) { status } }', { c: fresh.body.commandId }))).toBe('CONFLICT');
  });

  it('an agent whose heartbeat is older than AGENT_HEARTBEAT_MS no longer serves', async () => {
    await t.app.database.prisma.siteAgent.updateMany({ where: { siteId: tree.site.id }, data: { lastHeartbeatAt: new Date(Date.now() - 61000) } });
    expect((await powerVia(powerToken, await nodeIn('ready'), 'on')).body.error.message).toMatch(/no site agent serves/);
  });
});
