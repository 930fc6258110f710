/**
 * A remote site agent process, not the built-in one, runs workflows end to end with the real
 * drivers: the service in this process with its built-in agent off (engine, REST, iPXE and the
 * ramdisk callback API), an agent registered through the API and spawned as `ROLE=agent node
 * dist/src/main.js` (defaultDriverRegistry: the real Redfish flavours and IPMI through ipmitool)
 * talking to the service over HTTP only, simulated machines on the Redfish simulator in three
 * vendor flavours that PXE-boot and play the ramdisk, and one real ipmi_sim BMC.
 *
 * Redfish machines go from REST enroll to ready. The IPMI node's enroll (power state, GUID
 * inventory) runs through the agent with ipmitool and chains to inspecting, where it PXE-boots a
 * machine ipmi_sim cannot play: the test aborts it there, and the cleanup's power-off runs
 * through the agent too. Every command was claimed by that agent; its log repeats no password.
 */
import fs from 'node:fs';
import { randomBytes } from 'node:crypto';
import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { spawnService, type Service } from './helpers/service';
import { requireIpmiTools, startIpmiSim, type IpmiSim } from './helpers/ipmi-sim';
import { startMachineSim, type MachineSim } from './sim/machine';
import { fromRoot } from '../src/paths';

jest.setTimeout(240_000);

const MAIN = fromRoot('dist', 'src', 'main.js');
const pw = (tag: string) => `${tag}-${randomBytes(9).toString('hex')}`;
const REDFISH = [
  { id: 'dell', flavour: 'idrac' as const, mockup: 'public-localstorage' as const, password: pw('Idrac') },
  { id: 'smc', flavour: 'supermicro' as const, password: pw('Smc') },
  { id: 'hpe', flavour: 'ilo' as const, password: pw('Ilo') },
];
// ipmi_sim's lan.conf takes at most 20 characters.
const IPMI_PASSWORD = `Ipmi-${randomBytes(6).toString('hex')}`;
const PASSWORDS = [...REDFISH.map((m) => m.password), IPMI_PASSWORD];

let t: TestApp;
let sim: MachineSim;
let ipmi: IpmiSim;
let agent: Service | null = null;
let tree: Awaited<ReturnType<typeof makeTenantTree>>;
let admin: string;
let provision: string;
let agentId: string;
let agentToken: string;

beforeAll(async () => {
  requireIpmiTools();
  if (!fs.existsSync(MAIN)) throw new Error('run `npm run build` first (the agent process runs from dist)');
  t = await startTestApp({ role: 'all', builtinAgent: false, tokenCacheMs: 0 });
  sim = await startMachineSim({ serviceUrl: t.url, redfish: { machines: REDFISH } });
  ipmi = await startIpmiSim({ machines: [{ id: 'ipmi-0', user: 'admin', password: IPMI_PASSWORD, power: 'off' }] });
  const { prisma } = t.app.services;
  tree = await makeTenantTree(prisma, 'remote-e2e', { pools: 1, nodesPerPool: 0 });
  admin = await makeToken(prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  provision = await makeToken(prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
});
afterAll(async () => {
  if (agent && agent.proc.exitCode === null && agent.proc.signalCode === null) {
    agent.signalGroup('SIGKILL');
    await agent.exited;
  }
  await sim?.stop();
  await ipmi?.stop();
  await t?.stop();
});

const stateOf = async (nodeId: string) =>
  (await t.app.services.sql.query('SELECT provision_state, failed_from, last_error_code FROM node WHERE id = $1', [nodeId])).rows[0] as { provision_state: string; failed_from: string | null; last_error_code: string | null };

/** Polls until `done`; fails at once, with the agent's output, if the agent process exits. */
async function until<T>(what: string, read: () => Promise<T>, done: (v: T) => boolean, limit = 1800): Promise<T> {
  let value = await read();
  for (let i = 0; !done(value); i += 1) {
    if (agent && agent.proc.exitCode !== null) throw new Error(`the agent exited before ${what}:\n${agent.output()}`);
    if (i > limit) throw new Error(`no ${what}: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 100));
    value = await read();
  }
  return value;
}

interface TimelineRun { kind: string; status: string; steps: { name: string; status: string; message: string | null }[] }
async function timeline(nodeId: string): Promise<TimelineRun[]> {
  const r = await rest(t.url, admin, 'GET', `/api/compute/metal/nodes/${nodeId}/timeline`);
  expect(r.status).toBe(200);
  return r.body.runs as TimelineRun[];
}

describe('a remote site agent process runs workflows end to end with the real drivers', () => {
  it('registers through the API and serves its site', async () => {
    const r = await gql(t.url, admin, 'mutation ($s: ID!) { registerSiteAgent(siteId: $s, name: "rack-e2e") { token agent { id } } }', { s: tree.site.id });
    expect(r.errors).toBeUndefined();
    agentToken = r.data!.registerSiteAgent.token as string;
    agentId = r.data!.registerSiteAgent.agent.id as string;
    agent = spawnService(process.execPath, [MAIN], {
      cwd: fromRoot(),
      // No DATABASE_URL, no secret key: the agent reaches the service over its API only.
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ROLE: 'agent', API_URL: t.url, AGENT_TOKEN: agentToken, LOG_LEVEL: 'debug', AGENT_POLL_MS: '100', SHUTDOWN_TIMEOUT_MS: '5000' },
    });
    await agent.waitFor((l) => l.msg === 'site agent registered its key and is serving its site', 30_000, 'the agent registering');
    const row = await t.app.services.prisma.siteAgent.findUniqueOrThrow({ where: { id: agentId } });
    expect(row.publicKey).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });

  const nodes = new Map<string, string>();
  it('Redfish machines of three vendor flavours go from REST enroll to ready through it', async () => {
    for (const spec of REDFISH) {
      const m = sim.machine(spec.id);
      const r = await rest(t.url, provision, 'POST', '/api/compute/metal/enroll', {
        poolId: tree.pools[0]!.id, name: m.id, macs: m.macs,
        bmc: { address: m.bmc.url, driver: spec.flavour, credentials: { username: m.bmc.username, password: m.bmc.password } },
      });
      expect(r.status).toBe(200);
      expect(r.body.node.workflowId).toEqual(expect.any(String));
      nodes.set(spec.id, r.body.node.id);
    }
    const states = async () => Object.fromEntries(await Promise.all([...nodes].map(async ([id, nodeId]) => [id, (await stateOf(nodeId)).provision_state])));
    const settled = await until('the Redfish nodes settling', states, (s) => Object.values(s).every((v) => v === 'ready' || v === 'failed'));
    expect(settled).toEqual({ dell: 'ready', smc: 'ready', hpe: 'ready' });

    const { sql } = t.app.services;
    for (const spec of REDFISH) {
      const nodeId = nodes.get(spec.id)!;
      const runs = await timeline(nodeId);
      expect(runs.map((r) => [r.kind, r.status]).reverse()).toEqual([['metal-enroll', 'succeeded'], ['metal-inspect', 'succeeded'], ['metal-commission', 'succeeded']]);
      for (const run of runs) for (const s of run.steps) expect(['succeeded', 'skipped']).toContain(s.status);
      const inventory = (await sql.query('SELECT inventory FROM node WHERE id = $1', [nodeId])).rows[0]!.inventory;
      expect(inventory.outOfBand.uuid?.toLowerCase()).toBe(sim.machine(spec.id).uuid.toLowerCase());
      expect(inventory.ramdisk).toEqual(sim.machine(spec.id).inventory());
      expect(sim.machine(spec.id).counts()).toMatchObject({ pxeBoots: 2, ramdiskBoots: 2 });
      // Every BMC command of the node went through the remote agent, once each.
      const commands = (await sql.query('SELECT kind, status, claimed_by FROM command WHERE node_id = $1', [nodeId])).rows;
      expect(commands.length).toBeGreaterThan(0);
      for (const c of commands) expect(c).toMatchObject({ status: 'succeeded', claimed_by: agentId });
      expect(commands.filter((c) => c.kind === 'bmc.power')).toHaveLength(4);
      const counts = sim.redfish.counts(spec.id);
      expect(counts.reset).toBe(4);
      expect(counts.duplicateKeys).toEqual([]);
      // The flavour's own driver ran: this simulated Supermicro refuses a Boot PATCH naming BootSourceOverrideMode.
      if (spec.flavour === 'supermicro') {
        const overrides = counts.calls.filter((c) => c.kind === 'bootOverride');
        expect(overrides.length).toBeGreaterThan(0);
        for (const c of overrides) expect(c.detail).not.toContain('BootSourceOverrideMode');
      }
    }
  });

  it('an IPMI node\'s enroll runs its BMC steps through the agent with ipmitool, reaches inspecting, and its abort powers off through it', async () => {
    const { sql } = t.app.services;
    const bmc = ipmi.machines[0]!;
    const r = await rest(t.url, provision, 'POST', '/api/compute/metal/enroll', {
      poolId: tree.pools[0]!.id, name: 'ipmi-0', macs: ['52:54:00:9a:00:01'],
      bmc: { address: bmc.address, driver: 'ipmi', credentials: { username: bmc.user, password: IPMI_PASSWORD } },
    });
    expect(r.status).toBe(200);
    const nodeId = r.body.node.id as string;
    const inspectRun = async () => (await sql.query(`SELECT id, status, waiting_for FROM workflow_run WHERE node_id = $1 AND kind = 'metal-inspect'`, [nodeId])).rows[0] as { id: string; status: string; waiting_for: string | null } | undefined;
    // inspecting, its ramdisk PXE-booted by the agent's ipmitool, now waiting for a callback that never comes.
    await until('the IPMI node waiting in inspecting for its ramdisk', async () => ({ node: (await stateOf(nodeId)).provision_state, run: await inspectRun() }),
      (v) => v.node === 'inspecting' && v.run?.status === 'waiting' && v.run.waiting_for === 'the inspection ramdisk to report its inventory');
    expect(bmc.power()).toBe('on');
    expect(bmc.boots()).toEqual([expect.objectContaining({ override: 'pxe' })]);

    const runs = await timeline(nodeId);
    const enroll = runs.find((x) => x.kind === 'metal-enroll')!;
    expect(enroll.status).toBe('succeeded');
    const step = (name: string) => enroll.steps.find((s) => s.name === name)!;
    expect(step('verify-bmc')).toMatchObject({ status: 'succeeded', message: expect.stringContaining('power is off') });
    expect(step('inspect-out-of-band')).toMatchObject({ status: 'succeeded', message: expect.stringContaining(`UUID ${bmc.guid!.toLowerCase()}`) });
    const enrollCommands = (await sql.query(`SELECT c.kind, c.status, c.claimed_by FROM command c JOIN workflow_run w ON w.id = c.run_id WHERE w.node_id = $1 AND w.kind = 'metal-enroll' ORDER BY c.created_at`, [nodeId])).rows;
    expect(enrollCommands).toEqual([
      { kind: 'bmc.power-state', status: 'succeeded', claimed_by: agentId },
      { kind: 'bmc.inventory', status: 'succeeded', claimed_by: agentId },
    ]);
    const inventory = (await sql.query('SELECT inventory FROM node WHERE id = $1', [nodeId])).rows[0]!.inventory;
    expect(inventory.outOfBand.uuid).toBe(bmc.guid!.toLowerCase());

    const aborted = await rest(t.url, provision, 'POST', '/api/compute/metal/abort', { nodeId, reason: 'ipmi_sim plays no iPXE' });
    expect(aborted.status).toBe(200);
    const run = await until('the inspect run to finish its cleanup', inspectRun, (v) => v?.status === 'aborted');
    expect(run!.status).toBe('aborted');
    expect(await stateOf(nodeId)).toMatchObject({ provision_state: 'failed', failed_from: 'inspecting', last_error_code: 'ABORTED' });
    expect(bmc.power()).toBe('off');
    const inspectCommands = (await sql.query(`SELECT kind, params, status, claimed_by FROM command WHERE run_id = $1 ORDER BY created_at`, [run!.id])).rows;
    for (const c of inspectCommands) expect(c).toMatchObject({ status: 'succeeded', claimed_by: agentId });
    expect(inspectCommands.at(-1)).toMatchObject({ kind: 'bmc.power', params: { action: 'off' } });
    // One power-on into PXE and the cleanup's power-off: nothing sent twice.
    expect(bmc.destructiveCalls().map((c) => `${c.param} ${c.value}`)).toEqual(['power 1', 'power 0']);
    const cleanup = (await timeline(nodeId)).find((x) => x.kind === 'metal-inspect')!.steps.find((s) => s.name.endsWith('.cleanup'));
    expect(cleanup).toMatchObject({ status: 'succeeded', message: expect.stringContaining('powered off') });
  });

  it('no command anywhere was run by a built-in agent; the agent stops on SIGTERM with exit 0 and its log has no password or token', async () => {
    const { rows } = await t.app.services.sql.query('SELECT claimed_by, count(*)::int AS n FROM command GROUP BY claimed_by');
    expect(rows).toEqual([{ claimed_by: agentId, n: expect.any(Number) }]);
    process.kill(agent!.pid, 'SIGTERM');
    expect(await agent!.exited).toEqual({ code: 0, signal: null });
    expect(agent!.lines().some((l) => l.msg === 'site agent stopped')).toBe(true);
    const output = agent!.output();
    // debug level: the agent logged each command it ran, so there was something to leak.
    expect(agent!.lines().length).toBeGreaterThan(10);
    for (const secret of [...PASSWORDS, agentToken]) expect(output).not.toContain(secret);
    // Nothing left running in its process group.
    expect(() => process.kill(-agent!.pid, 0)).toThrow();
  });
});
