/**
 * A remote site agent as a process of its own (ROLE=agent), not the built-in one, runs commands end
 * to end: the service in-process (built-in agent off), the Redfish simulator standing in for the
 * BMC, and the agent process spawned from dist (test/helpers/agent-main.ts: runAgentProcess with
 * the test driver) talking to the service over HTTP.
 */
import fs from 'node:fs';
import { randomBytes } from 'node:crypto';
import { startTestApp, type TestApp } from './helpers/app';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { spawnService, type Service } from './helpers/service';
import { startRedfishSim, type RedfishSim } from './sim/redfish/server';
import { newId } from '../src/ids';
import { fromRoot } from '../src/paths';
import { queueCommand } from '../src/modules/sites/commands';

const PASSWORD = `pw-${randomBytes(12).toString('hex')}`;
const AGENT_ENTRY = fromRoot('dist', 'test', 'helpers', 'agent-main.js');

describe('a remote site agent process', () => {
  let t: TestApp;
  let sim: RedfishSim;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let admin: string;
  let powerToken: string;
  const started: Service[] = [];

  async function registerAgent(name: string): Promise<{ token: string; id: string }> {
    const response = await fetch(`${t.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${admin}` },
      body: JSON.stringify({ query: 'mutation ($s: ID!, $n: String!) { registerSiteAgent(siteId: $s, name: $n) { token agent { id } } }', variables: { s: tree.site.id, n: name } }),
    });
    const body = (await response.json()) as { data: { registerSiteAgent: { token: string; agent: { id: string } } } };
    return { token: body.data.registerSiteAgent.token, id: body.data.registerSiteAgent.agent.id };
  }

  function spawnAgent(env: Record<string, string>, entry = AGENT_ENTRY): Service {
    const agent = spawnService(process.execPath, [entry], {
      cwd: fromRoot(),
      env: { PATH: process.env.PATH, HOME: process.env.HOME, LOG_LEVEL: 'info', AGENT_POLL_MS: '100', SHUTDOWN_TIMEOUT_MS: '5000', ...env },
    });
    started.push(agent);
    return agent;
  }

  async function until<T>(what: string, read: () => Promise<T>, done: (v: T) => boolean, agent?: Service): Promise<T> {
    for (let i = 0; i < 300; i += 1) {
      const value = await read();
      if (done(value)) return value;
      if (agent && agent.proc.exitCode !== null) throw new Error(`the agent exited before ${what}:\n${agent.output()}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`no ${what} within 30 s${agent ? `; agent output:\n${agent.output()}` : ''}`);
  }
  const command = (id: string) => t.app.database.prisma.command.findUniqueOrThrow({ where: { id } });

  async function nodeFor(machine: number, password = PASSWORD): Promise<string> {
    const ref = await t.app.services.secrets!.put(tree.tenant.id, { username: sim.machines[machine]!.username, password });
    const id = newId('MetalNode');
    await t.app.database.prisma.node.create({
      data: {
        id, tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id, provisionState: 'ready', bmcAddress: sim.machines[machine]!.url,
        bmcDriver: 'redfish', bmcCredentialsRef: ref, driverBindings: { power: 'redfish', management: 'redfish', virtualMedia: 'redfish' },
      },
    });
    return id;
  }

  beforeAll(async () => {
    if (!fs.existsSync(AGENT_ENTRY)) throw new Error('run `npm run build` first (the agent process runs from dist)');
    sim = await startRedfishSim({ machines: [{ id: 'm0', password: PASSWORD }, { id: 'm1', password: PASSWORD }] });
    t = await startTestApp({ builtinAgent: false, tokenCacheMs: 0 });
    tree = await makeTenantTree(t.app.database.prisma, 'rap', { pools: 1, nodesPerPool: 0 });
    admin = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    powerToken = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:power', scopeType: 'site', scopeId: tree.site.id, siteId: tree.site.id }]);
  });
  afterAll(async () => {
    for (const s of started) {
      if (s.proc.exitCode === null && s.proc.signalCode === null) {
        s.signalGroup('SIGKILL');
        await s.exited;
      }
    }
    await t?.stop();
    await sim?.stop();
  });

  it('ROLE=agent of the service\'s own entry refuses to start without API_URL or a token, naming what is missing', async () => {
    const main = fromRoot('dist', 'src', 'main.js');
    const noUrl = spawnAgent({ ROLE: 'agent', AGENT_TOKEN: 'x' }, main);
    expect((await noUrl.exited).code).toBe(1);
    expect(noUrl.output()).toMatch(/API_URL/);
    const noToken = spawnAgent({ ROLE: 'agent', API_URL: t.url }, main);
    expect((await noToken.exited).code).toBe(1);
    expect(noToken.output()).toMatch(/AGENT_TOKEN/);
  });

  let agent: Service;
  it('registers its key, serves the site, powers a machine on through the BMC and reports the structured result', async () => {
    const { token, id: agentId } = await registerAgent('rack-1');
    const tokenFile = `/tmp/agent-token-${randomBytes(6).toString('hex')}`;
    fs.writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
    try {
      agent = spawnAgent({ ROLE: 'agent', API_URL: t.url, AGENT_TOKEN_FILE: tokenFile });
      await agent.waitFor((l) => l.msg === 'site agent registered its key and is serving its site', 20000, 'the agent registering');
    } finally {
      fs.rmSync(tokenFile, { force: true });
    }
    const row = await t.app.database.prisma.siteAgent.findUniqueOrThrow({ where: { id: agentId } });
    expect(row.publicKey).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(row.lastHeartbeatAt).not.toBeNull();

    const nodeId = await nodeFor(0);
    expect(sim.machines[0]!.state().powerState).toBe('Off');
    const response = await fetch(`${t.url}/api/compute/metal/power`, {
      method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${powerToken}` }, body: JSON.stringify({ nodeId, action: 'on' }),
    });
    expect(response.status).toBe(200);
    const { commandId } = (await response.json()) as { commandId: string };
    const done = await until('the power command to finish', () => command(commandId), (c) => c.status !== 'queued' && c.status !== 'claimed', agent);
    expect(done.status).toBe('succeeded');
    expect(done.claimedBy).toBe(agentId);
    expect(done.result).toMatchObject({ ok: true, value: 'on' });
    expect(sim.machines[0]!.state().powerState).toBe('On');
    expect(sim.counts('m0').reset).toBe(1);
  });

  it('runs a run\'s inventory command and wakes the run; a wrong password is BMC_AUTH_FAILED without the password anywhere', async () => {
    const nodeId = await nodeFor(1);
    // A run waiting for the command (and for nothing else for an hour): the result wakes it, and the engine (role all) takes it.
    const runId = `run_inv_${randomBytes(4).toString('hex')}`;
    await t.app.services.sql.query(`INSERT INTO workflow_run (id, node_id, kind, status, wait_until, waiting_for, due_at) VALUES ($1, $2, 'metal-inspect', 'waiting', now() + interval '1 hour', 'the command', now() + interval '1 hour')`, [runId, nodeId]);
    const inv = await queueCommand(t.app.services.sql, { kind: 'bmc.inventory', params: {}, nodeId, runId, stepIdx: 2, idempotencyKey: `inv-${randomBytes(4).toString('hex')}`, ttlMs: 60000 });
    const done = await until('the inventory command to finish', () => command(inv.id), (c) => c.status === 'succeeded' || c.status === 'failed', agent);
    expect(done.result).toMatchObject({ ok: true, value: { uuid: sim.machines[1]!.state().uuid.toLowerCase(), macs: sim.machines[1]!.state().macs.map((m) => m.toLowerCase()) } });
    // Woken: the engine advanced it (its node is not inspecting, so the run ends superseded).
    const run = await until('the run to be woken', async () => (await t.app.services.sql.query('SELECT status FROM workflow_run WHERE id = $1', [runId])).rows[0]!, (r) => r.status !== 'waiting', agent);
    expect(run.status).toBe('superseded');

    const wrong = await nodeFor(1, `${PASSWORD}-wrong`);
    const bad = await queueCommand(t.app.services.sql, { kind: 'bmc.power', params: { action: 'off' }, nodeId: wrong, runId: 'run_bad', stepIdx: 0, idempotencyKey: `bad-${randomBytes(4).toString('hex')}`, ttlMs: 60000 });
    const failed = await until('the refused command to finish', () => command(bad.id), (c) => c.status === 'failed' || c.status === 'succeeded', agent);
    expect(failed.result).toMatchObject({ ok: false, code: 'BMC_AUTH_FAILED' });
    expect(JSON.stringify(failed.result)).not.toContain(PASSWORD);
    expect(sim.machines[1]!.state().powerState).toBe('Off');
    expect(agent.output()).not.toContain(PASSWORD);
  });

  it("a result the service cannot take for a while (its database failing over: 503) is offered again until it is stored, not given up with its claim", async () => {
    const sql = t.app.services.sql;
    await sql.query('DROP SEQUENCE IF EXISTS test_report_seq');
    await sql.query('CREATE SEQUENCE test_report_seq');
    // The first three stores of a result fail as a failover does (sequences are not rolled back).
    await sql.query(`CREATE OR REPLACE FUNCTION test_report_block() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF nextval('test_report_seq') <= 3 THEN RAISE EXCEPTION 'the database is shutting down (test)' USING ERRCODE = '57P01'; END IF;
        RETURN NEW;
      END $$`);
    const nodeId = await nodeFor(0);
    const queued = await queueCommand(sql, { kind: 'bmc.power-state', params: {}, nodeId, runId: null as never, stepIdx: null as never, idempotencyKey: `rep-${randomBytes(4).toString('hex')}`, ttlMs: 60000 });
    await sql.query(`CREATE TRIGGER test_report_block BEFORE UPDATE ON command FOR EACH ROW
      WHEN (NEW.id = '${queued.id}' AND NEW.status = 'succeeded') EXECUTE FUNCTION test_report_block()`);
    try {
      const done = await until('the result to be stored', () => command(queued.id), (c) => c.status !== 'queued' && c.status !== 'claimed', agent);
      expect(done).toMatchObject({ status: 'succeeded', result: { ok: true } });
      expect(Number((await sql.query('SELECT last_value FROM test_report_seq')).rows[0].last_value)).toBe(4);
    } finally {
      await sql.query('DROP TRIGGER IF EXISTS test_report_block ON command');
    }
  });

  it('stops cleanly on SIGTERM (exit 0), and an agent whose token is revoked stops with exit 1', async () => {
    process.kill(agent.pid, 'SIGTERM');
    expect(await agent.exited).toEqual({ code: 0, signal: null });
    expect(agent.lines().some((l) => l.msg === 'site agent stopped')).toBe(true);

    const { token, id } = await registerAgent('rack-2');
    const second = spawnAgent({ ROLE: 'agent', API_URL: t.url, AGENT_TOKEN: token });
    await second.waitFor((l) => l.msg === 'site agent registered its key and is serving its site', 20000, 'the second agent registering');
    const row = await t.app.database.prisma.siteAgent.findUniqueOrThrow({ where: { id } });
    await t.app.database.prisma.apiToken.update({ where: { id: row.tokenId }, data: { revokedAt: new Date() } });
    expect((await second.exited).code).toBe(1);
    expect(second.lines().some((l) => l.msg === 'site agent stopped: the service refused its token')).toBe(true);
    expect(second.output()).not.toContain(token);
  });
});
