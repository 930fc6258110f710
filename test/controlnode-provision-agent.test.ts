/**
 * POST /controlnode/provision/<vendor> end to end with every BMC call carried by a separate site
 * agent PROCESS, as in production (issue 11): the service runs in this process with its built-in
 * agent off; a site agent registered through the API runs as `ROLE=agent node dist/src/main.js`
 * (defaultDriverRegistry: the real Redfish flavour drivers), talking to the service over HTTP
 * only, with its own token and no database. The BMCs are the Redfish simulator's iDRAC, iLO and
 * XCC flavours on bare 127.77.3.x addresses, port 443, TLS signed by the site's BMC CA, which the
 * agent trusts the way the built-in agent does: through the node's driverOptions.caCert, handed
 * to it with each command's endpoint.
 *
 * Where each BMC request came from is not taken on trust from the command rows: every request a
 * simulated BMC receives is seen (diagnostics_channel 'http.server.request.start' of this
 * process's HTTPS servers) and its TCP peer traced through /proc/net/tcp to the process holding
 * the client's socket. Every one must be the agent process's, none this process's (the service).
 *
 * The installer is played as in test/controlnode-provision.test.ts: on the BMC's boot from the
 * virtual CD it fetches the ISO from the URL the BMC was given, reads the job's callback token out
 * of it, and posts steps, completion and first boot.
 */
import diagnostics from 'node:diagnostics_channel';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { bmcCertificates } from './helpers/tls';
import { playInstall, postJson, readInstallerJob, readyNodes, type InstallerJob } from './helpers/installer';
import { spawnService, type Service } from './helpers/service';
import { startRedfishSim, type BootEvent, type RedfishSim, type SimMachine } from './sim/redfish/server';
import type { FlavourName } from './sim/redfish/flavours';
import { newId } from '../src/ids';
import { fromRoot } from '../src/paths';

jest.setTimeout(150_000);

const MAIN = fromRoot('dist', 'src', 'main.js');
const BMC_PASSWORD = 'Bmc-Ag3nt-Pa55';
const OS_PASSWORD = 'Os-Ag3nt-Pa55';
/** The service's claim lease (AGENT_LEASE_MS), short so that a killed agent's claim lapses within the test. */
const LEASE_MS = 3000;
/** Machine id = the seed's vendor route; its simulator flavour; its bare IP. */
const MACHINES: { id: string; flavour: FlavourName; ip: string }[] = [
  { id: 'dell', flavour: 'idrac', ip: '127.77.3.1' },
  { id: 'hp', flavour: 'ilo', ip: '127.77.3.2' },
  { id: 'lenovo', flavour: 'xcc', ip: '127.77.3.3' },
  { id: 'dell-restart', flavour: 'idrac', ip: '127.77.3.4' },
];

let t: TestApp;
let sim: RedfishSim;
let dir: string;
let token: string;
let agentId: string;
let agentToken: string;
/** Every agent process started, the running one last. */
const agents: Service[] = [];
const agent = () => agents.at(-1)!;
const nodeOf = new Map<string, string>();
const installer = new Map<string, (boot: BootEvent) => Promise<void>>();
const installs: Promise<void>[] = [];

// ---- Who sent each BMC request ------------------------------------------------------------

interface Seen { ip: string; method: string; path: string; owner: string }
const seen: Seen[] = [];
const ownerOf = new WeakMap<Socket, string>();

/** /proc/net/tcp's form of an IPv4 address and port: the address's bytes reversed, then the port, in hex. */
const procAddr = (ip: string, port: number) =>
  `${ip.split('.').map((b) => Number(b).toString(16).padStart(2, '0').toUpperCase()).reverse().join('')}:${port.toString(16).padStart(4, '0').toUpperCase()}`;

function holds(pid: number, inode: string): boolean {
  const fdDir = `/proc/${pid}/fd`;
  let fds: string[];
  try {
    fds = fs.readdirSync(fdDir);
  } catch {
    return false;
  }
  return fds.some((fd) => {
    try {
      return fs.readlinkSync(`${fdDir}/${fd}`) === `socket:[${inode}]`;
    } catch {
      return false;
    }
  });
}

/**
 * The process on the other end of an accepted connection: the client's socket is the row of
 * /proc/net/tcp whose local end is our peer and whose remote end is us; its inode is in the fd
 * table of exactly one process. Read while the client waits for our answer, so it is still open.
 */
function peerProcess(socket: Socket): string {
  const local = procAddr(socket.remoteAddress!, socket.remotePort!);
  const remote = procAddr(socket.localAddress!, socket.localPort!);
  const row = fs.readFileSync('/proc/net/tcp', 'utf8').split('\n').slice(1).map((l) => l.trim().split(/\s+/)).find((f) => f[1] === local && f[2] === remote);
  if (!row) return `no /proc/net/tcp row for ${socket.remoteAddress}:${socket.remotePort}`;
  const inode = row[9]!;
  for (const a of agents) if (holds(a.pid, inode)) return `agent:${a.pid}`;
  if (holds(process.pid, inode)) return 'service';
  return `another process (socket inode ${inode})`;
}

const onRequest = (message: unknown) => {
  const { request, socket } = message as { request: IncomingMessage; socket: Socket };
  const bmc = MACHINES.find((m) => m.ip === socket.localAddress && socket.localPort === 443);
  if (!bmc) return;
  let owner = ownerOf.get(socket);
  if (!owner) {
    owner = peerProcess(socket);
    ownerOf.set(socket, owner);
  }
  seen.push({ ip: bmc.ip, method: request.method ?? '?', path: request.url ?? '?', owner });
};

// ---- The installer ---------------------------------------------------------------------------

type Job = InstallerJob;
/** The job's callback token and address, from the ISO the BMC mounted (no password in it in plain). */
const readJob = (image: string) => readInstallerJob(image, dir, [OS_PASSWORD]);
const post = postJson;
/** Steps, completion and first boot, as the preseed's scripts and the first-boot unit post them. */
const install = (job: Job, osIp: string) => playInstall(job, osIp, null);

// ---- Setup -----------------------------------------------------------------------------------

function startAgentProcess(): Service {
  const a = spawnService(process.execPath, [MAIN], {
    cwd: fromRoot(),
    // No DATABASE_URL, no secret key: the agent reaches the service over its API only. Its
    // heartbeat (a quarter of the shorter of these) renews its claims well within the lease.
    env: {
      PATH: process.env.PATH, HOME: process.env.HOME, ROLE: 'agent', API_URL: t.url, AGENT_TOKEN: agentToken, LOG_LEVEL: 'info',
      AGENT_POLL_MS: '100', AGENT_LEASE_MS: String(LEASE_MS), AGENT_HEARTBEAT_MS: '10000', SHUTDOWN_TIMEOUT_MS: '3000',
    },
  });
  agents.push(a);
  return a;
}

beforeAll(async () => {
  if (!fs.existsSync(MAIN)) throw new Error('run `npm run build` first (the agent process runs from dist)');
  diagnostics.subscribe('http.server.request.start', onRequest);
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cn-agent-'));
  const certs = bmcCertificates(dir, MACHINES.map((m) => m.ip));
  sim = await startRedfishSim({
    machines: MACHINES.map((m) => ({ id: m.id, flavour: m.flavour, listen: { host: m.ip, port: 443 }, password: BMC_PASSWORD, requireEtag: m.flavour !== 'idrac' })),
    tls: { key: certs.key, cert: certs.cert },
    onBoot: (machine, boot) => {
      const play = installer.get(machine.id);
      if (play && boot.target === 'Cd' && boot.image) installs.push(play(boot));
    },
  });
  t = await startTestApp({ builtinAgent: false, agentPollMs: 200, agentLeaseMs: LEASE_MS, isoDir: path.join(dir, 'iso'), controlnodeInstallStuckS: 60 });
  t.app.services.config.publicUrl = t.url;
  const { prisma } = t.app.services;
  const tree = await makeTenantTree(prisma, 'prov-agent', { pools: 1, nodesPerPool: 0 });
  token = await makeToken(prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  const admin = await makeToken(prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  const reg = await gql(t.url, admin, 'mutation ($s: ID!) { registerSiteAgent(siteId: $s, name: "rack-cn") { token agent { id } } }', { s: tree.site.id });
  expect(reg.errors).toBeUndefined();
  agentToken = reg.data!.registerSiteAgent.token as string;
  agentId = reg.data!.registerSiteAgent.agent.id as string;
  await startAgentProcess().waitFor((l) => l.msg === 'site agent registered its key and is serving its site', 30_000, 'the agent registering');
  // Ready nodes whose BMCs are verified with the site's CA: the agent gets it with each command's endpoint.
  for (const [id, nodeId] of await readyNodes(t.app.services, { tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id }, sim.machines, { driver: 'redfish', caCert: certs.ca })) nodeOf.set(id, nodeId);
});
afterAll(async () => {
  diagnostics.unsubscribe('http.server.request.start', onRequest);
  await Promise.allSettled(installs);
  for (const a of agents) {
    if (a.proc.exitCode === null && a.proc.signalCode === null) {
      a.signalGroup('SIGKILL');
      await a.exited;
    }
  }
  await t?.stop();
  await sim?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

// ---- Reading the outcome ---------------------------------------------------------------------

const q = async (text: string, values: unknown[] = []) => (await t.app.services.sql.query(text, values)).rows;

/** Polls until `done`; fails at once, with its output, if the running agent process exits (unless it is meant to be dead). */
async function until<T>(what: string, read: () => Promise<T>, done: (v: T) => boolean, limitMs = 60_000, agentDown = false): Promise<T> {
  const end = Date.now() + limitMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (!agentDown && (agent().proc.exitCode !== null || agent().proc.signalCode !== null)) throw new Error(`the agent exited before ${what}:\n${agent().output()}`);
    if (Date.now() > end) throw new Error(`no ${what} within ${limitMs} ms: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const nodeRow = async (id: string) => (await q('SELECT provision_state, failed_from, last_error_code, addresses, bmc_driver FROM node WHERE id = $1', [nodeOf.get(id)]))[0]!;
const settled = (id: string) => until(`node ${id} to leave deploying`, () => nodeRow(id), (n) => n.provision_state !== 'deploying');
const commandsOf = (runId: string) => q('SELECT kind, status, claimed_by, params, result FROM command WHERE run_id = $1 ORDER BY created_at', [runId]);
const sent = (m: SimMachine) => seen.filter((s) => s.ip === new URL(m.url).hostname);

const body = (m: SimMachine) => ({
  bmc_IP: new URL(m.url).hostname, hostname: `cn-${m.id}`, os_username: 'ops', os_password: OS_PASSWORD,
  selected_disks: ['nvme0n1', 'nvme1n1'], pool_type: 'mirror', selected_nic_mac: m.state().macs[0],
});

/** Every request the BMC answered was seen, and came from the running agent process. */
function fromAgentOnly(m: SimMachine): void {
  const mine = sent(m);
  expect(mine.length).toBeGreaterThan(0);
  expect(mine.length).toBe(sim.requests(m.id).length);
  expect([...new Set(mine.map((s) => s.owner))]).toEqual([`agent:${agent().pid}`]);
}

describe('control-node provisioning with every BMC call carried by a separate site agent process', () => {
  it('POST /controlnode/provision/dell: ISO built, mounted and booted over iDRAC by the agent process; deployed with its OS IP, media ejected, ISO URL dead', async () => {
    const m = sim.machines.find((x) => x.id === 'dell')!;
    const osIp = '10.41.0.10';
    let job: Job | null = null;
    installer.set('dell', async (boot) => {
      job = await readJob(boot.image!);
      await install(job, osIp);
    });
    const r = await rest(t.url, token, 'POST', '/controlnode/provision/dell', body(m));
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ success: true, node_id: nodeOf.get('dell'), status: 'deploying', job_id: expect.any(String) });
    expect(await settled('dell')).toMatchObject({ provision_state: 'deployed', addresses: [osIp], bmc_driver: 'idrac' });
    expect(job!.job).toBe(r.body.job_id);
    expect(await q('SELECT status FROM workflow_run WHERE id = $1', [r.body.job_id])).toEqual([{ status: 'succeeded' }]);

    // Every command of the job was claimed and completed by the remote agent, each BMC verb of the workflow once.
    const commands = await commandsOf(r.body.job_id);
    expect(commands.map((c) => c.kind)).toEqual(['bmc.media-insert', 'bmc.boot-device', 'bmc.power-state', 'bmc.power', 'bmc.media-eject']);
    for (const c of commands) expect(c).toMatchObject({ status: 'succeeded', claimed_by: agentId });
    // And every request the iDRAC received came from the agent process's sockets, none from the service's.
    fromAgentOnly(m);
    expect(sent(m).some((s) => s.method === 'POST' && /InsertMedia/.test(s.path))).toBe(true);
    // The iDRAC flavour's own way, so the agent ran the real vendor driver: VCD-DVD, then the media out.
    const calls = sim.counts('dell').calls;
    expect(calls.filter((c) => c.kind === 'insertMedia' && c.status === 204)).toHaveLength(1);
    expect(calls.some((c) => c.kind === 'bootOverride' && c.detail.includes('VCD-DVD'))).toBe(true);
    expect(calls.filter((c) => c.kind === 'ejectMedia' && c.status === 204)).toHaveLength(1);
    expect(m.state().virtualMedia.every((v) => !v.inserted && v.image === null)).toBe(true);
    // The ISO's URL and the callback token are dead.
    const image = commands[0]!.params.imageUrl as string;
    expect(image).toMatch(/^http:\/\/127\.0\.0\.1:\d+\//);
    expect((await fetch(image)).status).toBe(404);
    expect((await post(`${job!.api}/job/${job!.job}/step`, job!.token, { step: 'late', state: 'active' })).status).toBe(401);
  });

  it('POST /controlnode/job/{id}/cancel mid-install (iLO): the cleanup ejects the media through the agent process; cancelled, node failed', async () => {
    const m = sim.machines.find((x) => x.id === 'hp')!;
    let job: Job | null = null;
    let reported!: () => void;
    const installing = new Promise<void>((resolve) => (reported = resolve));
    installer.set('hp', async (boot) => {
      job = await readJob(boot.image!);
      expect((await post(`${job.api}/job/${job.job}/step`, job.token, { step: 'installing-base', state: 'active', percent: 50 })).status).toBe(200);
      reported();
    });
    const r = await rest(t.url, token, 'POST', '/controlnode/provision/hp', body(m));
    expect(r.status).toBe(200);
    await installing;
    const jobUrl = `/controlnode/job/${r.body.job_id}`;
    const view = await until('the job in Installing OS', async () => (await rest(t.url, token, 'GET', jobUrl)).body, (v) => v.status === 'Installing OS', 10_000);
    expect(view).toMatchObject({ job_status: 'running', status: 'Installing OS', progress: 64 });
    expect(m.state().virtualMedia.some((v) => v.inserted)).toBe(true);
    const before = sent(m).length;

    const cancelled = await rest(t.url, token, 'POST', `${jobUrl}/cancel`);
    expect(cancelled.status).toBe(200);
    expect(['cancelling', 'cancelled']).toContain(cancelled.body.job_status);
    expect(await settled('hp')).toMatchObject({ provision_state: 'failed', failed_from: 'deploying', last_error_code: 'ABORTED' });
    const after = await until('the job cancelled', async () => (await rest(t.url, token, 'GET', jobUrl)).body, (v) => v.job_status === 'cancelled', 10_000);
    expect(after).toMatchObject({ job_status: 'cancelled', status: 'cancelled', last_error: expect.stringMatching(/^ABORTED: /) });
    expect(m.state().virtualMedia.every((v) => !v.inserted && v.image === null)).toBe(true);
    expect((await post(`${job!.api}/job/${job!.job}/step`, job!.token, { step: 'late', state: 'active' })).status).toBe(401);
    const cleanup = await q('SELECT name, status FROM workflow_step WHERE run_id = $1 AND cleanup ORDER BY idx', [r.body.job_id]);
    expect(cleanup).toEqual([{ name: 'eject-iso-cleanup', status: 'succeeded' }, { name: 'revoke-iso', status: 'succeeded' }]);

    // The cleanup's eject was a command the agent claimed and ran; the iLO heard it from the agent process.
    const commands = await commandsOf(r.body.job_id);
    expect(commands.map((c) => c.kind)).toEqual(['bmc.media-insert', 'bmc.boot-device', 'bmc.power-state', 'bmc.power', 'bmc.media-eject']);
    for (const c of commands) expect(c).toMatchObject({ status: 'succeeded', claimed_by: agentId });
    expect(sim.counts('hp').calls.filter((c) => c.kind === 'ejectMedia' && c.status === 204)).toHaveLength(1);
    expect(sim.counts('hp').calls.some((c) => c.kind === 'bootOverride' && c.detail.includes('BootOnNextServerReset'))).toBe(true);
    expect(sent(m).slice(before).some((s) => s.method === 'POST' && /EjectMedia/.test(s.path))).toBe(true);
    fromAgentOnly(m);
  });

  it('the agent process SIGKILLed while it runs the job\'s InsertMedia: once its claim lapses the command is queued again, a restarted agent runs it, the job finishes', async () => {
    const m = sim.machines.find((x) => x.id === 'lenovo')!;
    const osIp = '10.41.0.12';
    installer.set('lenovo', async (boot) => install(await readJob(boot.image!), osIp));
    // The XCC receives InsertMedia (and any other destructive call) and never answers: the agent waits on it.
    sim.setFault('lenovo', { hangDestructive: true });
    const r = await rest(t.url, token, 'POST', '/controlnode/provision/lenovo', body(m));
    expect(r.status).toBe(200);
    const insert = async () => (await q(`SELECT id, status, claimed_by FROM command WHERE run_id = $1 AND kind = 'bmc.media-insert'`, [r.body.job_id]))[0];
    await until('InsertMedia hanging at the XCC', async () => ({ calls: sim.counts('lenovo').calls, insert: await insert() }),
      (v) => v.calls.some((c) => c.kind === 'insertMedia' && c.detail === 'fault:hang') && v.insert?.status === 'claimed');
    expect(await insert()).toMatchObject({ status: 'claimed', claimed_by: agentId });
    const first = agent();
    first.signalGroup('SIGKILL');
    expect(await first.exited).toEqual({ code: null, signal: 'SIGKILL' });
    sim.setFault('lenovo', {});

    // No result came; the lease lapses and the sweep queues the (not destructive) insert again.
    const requeued = await until('the insert queued again', insert, (c) => c?.status === 'queued', LEASE_MS * 4, true);
    expect(requeued).toMatchObject({ status: 'queued', claimed_by: null });
    expect(await q('SELECT status FROM workflow_run WHERE id = $1', [r.body.job_id])).toEqual([{ status: 'waiting' }]);

    await startAgentProcess().waitFor((l) => l.msg === 'site agent registered its key and is serving its site', 30_000, 'the restarted agent registering');
    expect(await settled('lenovo')).toMatchObject({ provision_state: 'deployed', addresses: [osIp], bmc_driver: 'xcc' });
    const commands = await commandsOf(r.body.job_id);
    expect(commands.map((c) => c.kind)).toEqual(['bmc.media-insert', 'bmc.boot-device', 'bmc.power-state', 'bmc.power', 'bmc.media-eject']);
    for (const c of commands) expect(c).toMatchObject({ status: 'succeeded', claimed_by: agentId });
    // The insert reached the XCC twice (the hung one, then the restarted agent's, which XCC's
    // flavour sends again with its ETag after a 428), every other destructive call once.
    const calls = sim.counts('lenovo').calls;
    const inserts = calls.filter((c) => c.kind === 'insertMedia').map((c) => c.status);
    expect(inserts[0]).toBe(0);
    expect(inserts.filter((s) => s === 204)).toHaveLength(1);
    expect(calls.filter((c) => c.kind === 'reset' && c.status < 300)).toHaveLength(1);
    expect(m.state().virtualMedia.every((v) => !v.inserted && v.image === null)).toBe(true);
    // Every request came from one of the two agent processes: the first up to its death, the restarted one after.
    const owners = sent(m).map((s) => s.owner);
    expect(owners.length).toBe(sim.requests(m.id).length + 1 /* the hung InsertMedia, never answered */);
    const k = owners.findIndex((o) => o !== `agent:${first.pid}`);
    expect(k).toBeGreaterThan(0);
    expect(new Set(owners.slice(0, k))).toEqual(new Set([`agent:${first.pid}`]));
    expect(new Set(owners.slice(k))).toEqual(new Set([`agent:${agent().pid}`]));
    expect((await fetch(commands[0]!.params.imageUrl as string)).status).toBe(404);
  });

  // A restart of the agent process within its claim's lease, as a supervisor's restart always is
  // with the default AGENT_LEASE_MS (120 s): the new process is the same site agent (same token,
  // same id), so its heartbeat would renew the lease of every command claimed under that id,
  // including the one its dead predecessor was running, which it knows nothing of: that claim
  // would never lapse, and the job would wait for the engine's backstop (the command's 5-minute
  // TTL plus CLAIM_GRACE_MS). registerAgentKey settles such claims as lapsed instead, at once.
  it('the agent process SIGKILLed mid-InsertMedia and restarted at once, within its claim\'s lease: the claim it held is settled when the new process registers, and the job finishes', async () => {
    const m = sim.machines.find((x) => x.id === 'dell-restart')!;
    installer.set('dell-restart', async (boot) => install(await readJob(boot.image!), '10.41.0.13'));
    sim.setFault('dell-restart', { hangDestructive: true });
    const r = await rest(t.url, token, 'POST', '/controlnode/provision/dell', body(m));
    expect(r.status).toBe(200);
    const insert = async () => (await q(`SELECT status, claimed_by, lease_expires_at > now() AS held, result FROM command WHERE run_id = $1 AND kind = 'bmc.media-insert'`, [r.body.job_id]))[0];
    await until('InsertMedia hanging at the iDRAC', async () => ({ calls: sim.counts('dell-restart').calls, insert: await insert() }),
      (v) => v.calls.some((c) => c.kind === 'insertMedia' && c.detail === 'fault:hang') && v.insert?.status === 'claimed');
    const first = agent();
    first.signalGroup('SIGKILL');
    expect(await first.exited).toEqual({ code: null, signal: 'SIGKILL' });
    sim.setFault('dell-restart', {});
    // The claim as the default lease (120 s) leaves it after a supervisor's restart: still held
    // for minutes (this file's lease is 3 s, shorter than a node start, so it is lengthened here).
    await q(`UPDATE command SET lease_expires_at = now() + interval '10 minutes' WHERE run_id = $1 AND kind = 'bmc.media-insert'`, [r.body.job_id]);
    expect(await insert()).toMatchObject({ status: 'claimed', claimed_by: agentId, held: true });
    const started = Date.now();
    await startAgentProcess().waitFor((l) => l.msg === 'site agent registered its key and is serving its site', 30_000, 'the restarted agent registering');
    await until('the orphaned insert to run again', insert, (c) => c?.status === 'succeeded', LEASE_MS * 3);
    expect(await settled('dell-restart')).toMatchObject({ provision_state: 'deployed', addresses: ['10.41.0.13'] });
    // Well within one lease of the restart, not after the backstop's minutes.
    expect(Date.now() - started).toBeLessThan(60_000);
  });

  it('refuses a node of a site no agent serves (the built-in agent off, no heartbeat): INVALID_STATE, nothing written', async () => {
    const { prisma } = t.app.services;
    const tenantId = (await q('SELECT tenant_id FROM node WHERE id = $1', [nodeOf.get('dell')]))[0]!.tenant_id as string;
    const site = await prisma.site.create({ data: { id: newId('Site'), tenantId, name: 'unserved' } });
    const pool = await prisma.pool.create({ data: { id: newId('Pool'), tenantId, siteId: site.id, name: 'unserved-pool' } });
    const id = newId('MetalNode');
    await prisma.node.create({
      data: {
        id, tenantId, siteId: site.id, poolId: pool.id, name: 'unserved', provisionState: 'ready', bmcAddress: '127.77.3.200', bmcDriver: 'redfish',
        driverBindings: { power: 'redfish', management: 'redfish', virtualMedia: 'redfish' },
      },
    });
    const r = await rest(t.url, token, 'POST', '/controlnode/provision/dell', { ...body(sim.machines[0]!), bmc_IP: '127.77.3.200' });
    expect([r.status, r.body.error.code]).toEqual([409, 'INVALID_STATE']);
    expect(r.body.error.message).toMatch(/no site agent serves site .*the job's BMC calls would never run/);
    expect(await q('SELECT id FROM workflow_run WHERE node_id = $1', [id])).toEqual([]);
    expect((await q('SELECT provision_state FROM node WHERE id = $1', [id]))[0]).toEqual({ provision_state: 'ready' });
  });

  it('no BMC request of the whole file came from the service process', () => {
    expect(seen.length).toBeGreaterThan(0);
    expect(seen.filter((s) => !s.owner.startsWith('agent:'))).toEqual([]);
    expect((agents.map((a) => a.output()).join(''))).not.toContain(BMC_PASSWORD);
  });
});
