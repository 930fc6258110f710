/**
 * The worker's built-in agent (BUILTIN_AGENT on, the default): it serves every site with no remote
 * agent heartbeating, with the same claim, lease and result rows as a remote agent, the Redfish
 * simulator standing in for the BMCs. And it steps aside for a site whose remote agent is alive.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { startApp, type App } from '../src/app';
import { capturingLogger, createTestDatabase } from './helpers/app';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { SimBmcDriver, simDriverRegistry } from './helpers/sim-bmc-driver';
import { startRedfishSim, type RedfishSim } from './sim/redfish/server';
import { newId } from '../src/ids';
import { queueCommand } from '../src/modules/sites/commands';
import { generateAgentKeyPair } from '../src/modules/sites/seal';

const PASSWORD = `pw-${randomBytes(12).toString('hex')}`;

describe('the built-in site agent', () => {
  let app: App;
  let url: string;
  let databaseUrl: string;
  let sim: RedfishSim;
  const driver = new SimBmcDriver();
  const lines: string[] = [];
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let served: Awaited<ReturnType<typeof makeTenantTree>>;
  const powerTokens = new Map<string, string>();

  async function until<T>(what: string, read: () => Promise<T>, done: (v: T) => boolean): Promise<T> {
    for (let i = 0; i < 300; i += 1) {
      const value = await read();
      if (done(value)) return value;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`no ${what} within 30 s`);
  }
  const command = (id: string) => app.database.prisma.command.findUniqueOrThrow({ where: { id } });
  const finished = (c: { status: string }) => c.status !== 'queued' && c.status !== 'claimed';

  async function nodeFor(owner: typeof tree, machine: number, password = PASSWORD): Promise<string> {
    const ref = await app.services.secrets!.put(owner.tenant.id, { username: sim.machines[machine]!.username, password });
    const id = newId('MetalNode');
    await app.database.prisma.node.create({
      data: {
        id, tenantId: owner.tenant.id, siteId: owner.site.id, poolId: owner.pools[0]!.id, provisionState: 'ready', bmcAddress: sim.machines[machine]!.url,
        bmcDriver: 'redfish', bmcCredentialsRef: ref, driverBindings: { power: 'redfish', management: 'redfish', virtualMedia: 'redfish' },
      },
    });
    return id;
  }
  const power = (owner: typeof tree, nodeId: string, action: string) =>
    fetch(`${url}/api/compute/metal/power`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${powerTokens.get(owner.tenant.id)}` }, body: JSON.stringify({ nodeId, action }) });

  beforeAll(async () => {
    sim = await startRedfishSim({ machines: [{ id: 'm0', password: PASSWORD }, { id: 'm1', password: PASSWORD }, { id: 'm2', password: PASSWORD }, { id: 'hang', password: PASSWORD }] });
    databaseUrl = await createTestDatabase();
    app = await startApp(
      { databaseUrl, adminToken: `test-admin-${randomBytes(8).toString('hex')}`, secretKey: randomBytes(32).toString('base64'), port: 0, host: '127.0.0.1', role: 'all', dataDir: '/nonexistent-not-used', shutdownTimeoutMs: 1000,
        // Polling once a minute: every command below is claimed because its INSERT woke the agent (LISTEN).
        agentPollMs: 60000 },
      { log: capturingLogger(lines), drivers: simDriverRegistry(driver) },
    );
    url = app.url!;
    tree = await makeTenantTree(app.database.prisma, 'bia', { pools: 1, nodesPerPool: 0 });
    served = await makeTenantTree(app.database.prisma, 'bia-remote', { pools: 1, nodesPerPool: 0 });
    for (const owner of [tree, served]) {
      powerTokens.set(owner.tenant.id, await makeToken(app.database.prisma, owner.tenant.id, [{ permission: 'compute:nodes:power', scopeType: 'tenant', scopeId: owner.tenant.id }]));
    }
  });
  afterAll(async () => {
    await app?.stop();
    await sim?.stop();
  });

  it('with no remote agent, power is accepted and the built-in agent runs it through the BMC', async () => {
    const nodeId = await nodeFor(tree, 0);
    const response = await power(tree, nodeId, 'on');
    expect(response.status).toBe(200);
    const { commandId } = (await response.json()) as { commandId: string };
    const done = await until('the power command to finish', () => command(commandId), finished);
    expect(done).toMatchObject({ status: 'succeeded', result: { ok: true, value: 'on' }, leaseExpiresAt: null });
    expect(done.claimedBy).toMatch(/^builtin:/);
    expect(sim.machines[0]!.state().powerState).toBe('On');
    expect(sim.counts('m0').reset).toBe(1);
  });

  it('reports a BMC refusal as a structured failure and wakes the run, with the password nowhere', async () => {
    const nodeId = await nodeFor(tree, 1, `${PASSWORD}-wrong`);
    // A run waiting for the command (an inspect run on a node that is ready by now: once woken, the
    // engine ends it as superseded, which shows it was advanced).
    const runId = newId('WorkflowRun');
    // Waiting for the command, due at its wait's end as the engine leaves it (a run inserted with no due_at would be due at once).
    await app.services.sql.query(`INSERT INTO workflow_run (id, node_id, kind, status, wait_until, waiting_for, due_at) VALUES ($1, $2, 'metal-inspect', 'waiting', now() + interval '1 hour', 'the command', now() + interval '1 hour')`, [runId, nodeId]);
    const cmd = await queueCommand(app.services.sql, { kind: 'bmc.power-state', params: {}, nodeId, runId, stepIdx: 0, idempotencyKey: `b-${randomBytes(4).toString('hex')}`, ttlMs: 60000 });
    const done = await until('the command to finish', () => command(cmd.id), finished);
    expect(done.result).toMatchObject({ ok: false, code: 'BMC_AUTH_FAILED' });
    // The agent runs in the engine's process: the result wakes the run (due_at), and the engine there takes it at once.
    const run = await until('the run to be woken', async () => (await app.services.sql.query('SELECT status FROM workflow_run WHERE id = $1', [runId])).rows[0]!, (r) => r.status !== 'waiting');
    expect(run.status).toBe('superseded');
    expect(lines.filter((l) => l.includes(PASSWORD))).toEqual([]);
  });

  it('leaves a site whose remote agent heartbeats to that agent', async () => {
    const admin = await makeToken(app.database.prisma, served.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: served.tenant.id }]);
    const gql = async (token: string, query: string, variables: Record<string, unknown> = {}) =>
      (await (await fetch(`${url}/graphql`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: JSON.stringify({ query, variables }) })).json()) as { data: Record<string, any> };
    const registered = await gql(admin, 'mutation ($s: ID!) { registerSiteAgent(siteId: $s, name: "remote") { token } }', { s: served.site.id });
    const agentToken = registered.data.registerSiteAgent.token as string;
    await gql(agentToken, 'mutation ($k: String!) { registerAgentKey(publicKey: $k) { id } }', { k: generateAgentKeyPair().publicKey });
    await gql(agentToken, 'mutation { agentReportStatus { id } }');
    const remoteSite = await (await power(served, await nodeFor(served, 2), 'on')).json() as { commandId: string };
    // Queued after it, on a site with no agent: claims go oldest first over every site the
    // built-in agent may serve, so once this one is done, the first was passed over on purpose.
    const unserved = await (await power(tree, await nodeFor(tree, 2), 'off')).json() as { commandId: string };
    await until('the unserved site\'s command to finish', () => command(unserved.commandId), finished);
    expect((await command(remoteSite.commandId)).status).toBe('queued');
    const claimed = await gql(agentToken, 'mutation { claimCommands(max: 5) { id } }');
    expect(claimed.data.claimCommands).toEqual([{ id: remoteSite.commandId }]);
    await gql(agentToken, 'mutation ($c: ID!) { reportCommandResult(commandId: $c, result: { ok: true, value: "on" }) { id } }', { c: remoteSite.commandId });
  });

  it('on stop, a command still running after the grace period is reported as abandoned (AGENT_LOST for a destructive one)', async () => {
    sim.setFault('hang', { hang: true });
    const nodeId = await nodeFor(tree, 3);
    const { commandId } = (await (await power(tree, nodeId, 'cycle')).json()) as { commandId: string };
    await until('the built-in agent to claim it', () => command(commandId), (c) => c.status === 'claimed');
    await until('the driver to be at the BMC', async () => driver.calls.filter((c) => c.address === sim.machines[3]!.url).length, (n) => n > 0);
    await app.stop();
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    try {
      const { rows } = await client.query('SELECT status, result FROM command WHERE id = $1', [commandId]);
      expect(rows[0]).toMatchObject({ status: 'failed', result: { ok: false, code: 'AGENT_LOST', retryable: false } });
    } finally {
      await client.end();
    }
    sim.setFault('hang', {});
  });
});
