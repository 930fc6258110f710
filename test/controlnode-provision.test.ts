/**
 * POST /controlnode/provision and /provision/<vendor> end to end (issue 11 items 3-5): the job is
 * the node's metal-install run; its ISO is built for real by xorriso from Debian's netboot
 * installer through the ISO-build queue; the built-in site agent mounts it in each vendor's
 * simulated BMC (reached at its bare IP on 443 over TLS, as bmc_IP implies), sets the boot from
 * the virtual CD that vendor's way, and powers the machine on. The simulated installer is this
 * test: on the BMC's boot from the CD it fetches the ISO from the URL the BMC was given, with a
 * Range request as a BMC does, reads the job's callback token and address out of the ISO's
 * second initrd, and posts steps, completion and first boot as the preseed's scripts would. The
 * node ends deployed with its OS address, the media ejected, the ISO's URL and token dead.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTestApp, capturingLogger, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { bmcCertificates } from './helpers/tls';
import { playInstall, postJson, readInstallerJob, readyNodes, type InstallerJob } from './helpers/installer';
import { restStream, until, wsClient, wsSubscribe } from './helpers/streams';
import { startRedfishSim, type BootEvent, type RedfishSim, type SimMachine } from './sim/redfish/server';
import type { FlavourName } from './sim/redfish/flavours';
import { newId } from '../src/ids';

jest.setTimeout(120_000);

const BMC_PASSWORD = 'Bmc-Pr0vision-Pa55';
const OS_PASSWORD = 'Os-Pr0vision-Pa55';
const REPORTED_PASSWORD = 'Os-Rep0rted-Pa55';
/** The seed's vendor routes and the simulator flavour each drives. */
const VENDORS: [string, FlavourName][] = [['dell', 'idrac'], ['hp', 'ilo'], ['lenovo', 'xcc'], ['cisco', 'cimc'], ['supermicro', 'supermicro']];
const ipOf = (i: number) => `127.77.1.${i + 1}`;

let t: TestApp;
let sim: RedfishSim;
let dir: string;
let isoDir: string;
let token: string;
const lines: string[] = [];
const nodeOf = new Map<string, string>();
/** What the simulated installer does on a machine's boot from the CD. */
const installer = new Map<string, (boot: BootEvent) => Promise<void>>();
const installs: Promise<void>[] = [];

type Job = InstallerJob;
/** The job's callback token and address, from the ISO the BMC mounted (which holds the OS password only as its crypt hash). */
const readJob = (image: string) => readInstallerJob(image, dir, [OS_PASSWORD]);
const post = postJson;
/** The installer as the preseed's scripts play it: steps, completion, then the installed system's first boot. */
const install = (job: Job, osIp: string) => playInstall(job, osIp, REPORTED_PASSWORD);

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cn-provision-'));
  isoDir = path.join(dir, 'iso');
  const certs = bmcCertificates(dir, [...VENDORS.map((_, i) => ipOf(i)), ipOf(7), ipOf(8), ipOf(9)]);
  sim = await startRedfishSim({
    machines: [
      ...VENDORS.map(([vendor, flavour], i) => ({ id: vendor, flavour, listen: { host: ipOf(i), port: 443 }, password: BMC_PASSWORD, requireEtag: flavour === 'xcc' || flavour === 'ilo' })),
      { id: 'stuck', listen: { host: ipOf(9), port: 443 }, password: BMC_PASSWORD },
      { id: 'cancel', flavour: 'idrac' as const, listen: { host: ipOf(8), port: 443 }, password: BMC_PASSWORD },
      { id: 'unnamed', flavour: 'idrac' as const, listen: { host: ipOf(7), port: 443 }, password: BMC_PASSWORD },
    ],
    tls: { key: certs.key, cert: certs.cert },
    onBoot: (machine, boot) => {
      const play = installer.get(machine.id);
      if (play && boot.target === 'Cd' && boot.image) installs.push(play(boot));
    },
  });
  t = await startTestApp({ agentPollMs: 200, isoDir, controlnodeInstallStuckS: 10 }, { log: capturingLogger(lines) });
  t.app.services.config.publicUrl = t.url;
  const tree = await makeTenantTree(t.app.services.prisma, 'prov', { pools: 1, nodesPerPool: 0 });
  token = await makeToken(t.app.services.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  // Ready nodes (enrolled, inspected, commissioned): their BMCs verified with the site's CA.
  const ca = certs.ca;
  for (const [id, nodeId] of await readyNodes(t.app.services, { tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id }, sim.machines, { driver: 'redfish', caCert: ca })) nodeOf.set(id, nodeId);
});
afterAll(async () => {
  await Promise.allSettled(installs);
  await t?.stop();
  await sim?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

async function settled(nodeId: string, limitMs = 60_000): Promise<Record<string, unknown>> {
  const end = Date.now() + limitMs;
  for (;;) {
    const row = (await t.app.services.sql.query('SELECT provision_state, failed_from, last_error_code, last_error_message, addresses, role, bmc_driver FROM node WHERE id = $1', [nodeId])).rows[0]!;
    if (row.provision_state !== 'deploying') return row;
    if (Date.now() > end) throw new Error(`node ${nodeId} still deploying`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const body = (m: SimMachine, over: Record<string, unknown> = {}) => ({
  bmc_IP: new URL(m.url).hostname, hostname: `cn-${m.id}`, os_username: 'ops', os_password: OS_PASSWORD,
  selected_disks: ['nvme0n1', 'nvme1n1'], pool_type: 'mirror', selected_nic_mac: m.state().macs[0], ...over,
});

describe.each(VENDORS)('POST /controlnode/provision/%s', (vendor, flavour) => {
  it(`builds the ISO, boots it over ${flavour}'s virtual media through the site agent, and the node ends deployed with its OS address, the media ejected`, async () => {
    const m = sim.machines.find((x) => x.id === vendor)!;
    const osIp = `10.40.0.${VENDORS.findIndex(([v]) => v === vendor) + 10}`;
    let job: Job | null = null;
    installer.set(vendor, async (boot) => {
      job = await readJob(boot.image!);
      await install(job, osIp);
    });
    const r = await rest(t.url, token, 'POST', `/controlnode/provision/${vendor}`, body(m));
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ success: true, node_id: nodeOf.get(vendor), status: 'deploying', job_id: expect.any(String) });
    const node = await settled(nodeOf.get(vendor)!);
    expect(node).toMatchObject({ provision_state: 'deployed', addresses: [osIp], role: 'controlnode-os', bmc_driver: { dell: 'idrac', hp: 'ilo', lenovo: 'xcc', cisco: 'cimc', supermicro: 'supermicro' }[vendor] });
    expect(job!.job).toBe(r.body.job_id);
    expect(job!.bmcIp).toBe(new URL(m.url).hostname);
    // The media is out; the boot from the CD was the vendor's own way.
    expect(m.state().virtualMedia.every((v) => !v.inserted && v.image === null)).toBe(true);
    const calls = sim.counts(vendor).calls;
    expect(calls.filter((c) => c.kind === 'insertMedia' && c.status === 204)).toHaveLength(1);
    if (flavour === 'idrac') expect(calls.some((c) => c.kind === 'bootOverride' && c.detail.includes('VCD-DVD'))).toBe(true);
    if (flavour === 'ilo') expect(calls.some((c) => c.kind === 'bootOverride' && c.detail.includes('BootOnNextServerReset'))).toBe(true);
    if (flavour === 'cimc') expect(calls.some((c) => c.kind === 'insertMedia' && c.status === 405)).toBe(true);
    // The timeline names the seed's stages, every step done.
    const steps = (await t.app.services.sql.query('SELECT title, status FROM workflow_step WHERE run_id = $1 AND NOT cleanup ORDER BY idx', [r.body.job_id])).rows;
    expect(steps.map((s) => s.title)).toEqual(['Building ISO', 'Mounting ISO', 'Setting a one-time boot from the virtual CD', 'Booting the installer', 'Installing OS', 'Waiting for the first boot', 'Ejecting the ISO']);
    expect(steps.every((s) => s.status === 'succeeded')).toBe(true);
    // The reported OS password went to the broker; the ISO's URL and the callback token are dead.
    const info = (await t.app.services.sql.query('SELECT os_ip, os_credentials_ref FROM bmc_info WHERE node_id = $1', [nodeOf.get(vendor)])).rows[0]!;
    expect(info.os_ip).toBe(osIp);
    const tenantId = (await t.app.services.sql.query('SELECT tenant_id FROM node WHERE id = $1', [nodeOf.get(vendor)])).rows[0]!.tenant_id as string;
    expect(await t.app.services.secrets!.get(info.os_credentials_ref as string, tenantId)).toMatchObject({ username: 'ops', password: REPORTED_PASSWORD });
    const image = (await t.app.services.sql.query(`SELECT params->>'imageUrl' AS u FROM command WHERE run_id = $1 AND kind = 'bmc.media-insert'`, [r.body.job_id])).rows[0]!.u as string;
    expect((await fetch(image)).status).toBe(404);
    expect((await post(`${job!.api}/job/${job!.job}/step`, job!.token, { step: 'late', state: 'active' })).status).toBe(401);
    // The ISO (and the password hash in it) leaves ISO_DIR with the job (issue 21 item 12: the worker's sweep, every 5 s).
    const isoFiles = () => fs.readdirSync(isoDir).filter((f) => f.startsWith(`${r.body.job_id}-`));
    for (let i = 0; i < 100 && isoFiles().length; i += 1) await new Promise((res) => setTimeout(res, 100));
    expect(isoFiles()).toEqual([]);
  });
});

describe('the job\'s callbacks and its refusals', () => {
  it('a job whose installer stops reporting fails as stuck, naming its last step; the media is ejected and its token refused', async () => {
    const m = sim.machines.find((x) => x.id === 'stuck')!;
    let job: Job | null = null;
    installer.set('stuck', async (boot) => {
      job = await readJob(boot.image!);
      // Refused, and nothing changes: no token, a wrong one, another path's job id, a bad body.
      expect((await post(`${job.api}/job/${job.job}/step`, null, { step: 'x', state: 'active' })).status).toBe(401);
      expect((await post(`${job.api}/job/${job.job}/step`, 'A'.repeat(43), { step: 'x', state: 'active' })).status).toBe(401);
      expect((await post(`${job.api}/job/wr_other/step`, job.token, { step: 'x', state: 'active' })).status).toBe(401);
      const bad = await post(`${job.api}/job/${job.job}/step`, job.token, { step: 'x', state: 'sideways' });
      expect([bad.status, ((await bad.json()) as { error: { details?: { field?: string } } }).error.details?.field]).toEqual([400, 'body.state']);
      expect((await post(`${job.api}/firstboot`, job.token, { bmc_ip: '127.1.1.1', os_ip: '10.40.0.99' })).status).toBe(400);
      const ok = await post(`${job.api}/job/${job.job}/step`, job.token, { step: 'partitioning', state: 'active', percent: 15 });
      expect(ok.status).toBe(200);
    });
    const r = await rest(t.url, token, 'POST', '/controlnode/provision', body(m, { vendor: 'acme', os_password: undefined }));
    expect(r.status).toBe(200);
    expect(r.body.message).toMatch(/a random one was generated/);
    const node = await settled(nodeOf.get('stuck')!, 90_000);
    expect(node).toMatchObject({ provision_state: 'failed', failed_from: 'deploying', last_error_code: 'INSTALL_STUCK' });
    expect(node.last_error_message).toMatch(/no step for 10 s: the last step was "partitioning" \(15%\)/);
    for (let i = 0; i < 100 && !m.state().virtualMedia.every((v) => !v.inserted); i += 1) await new Promise((res) => setTimeout(res, 100));
    expect(m.state().virtualMedia.every((v) => !v.inserted)).toBe(true);
    // The failed run's cleanup ends the ISO's URL and token too (after the eject).
    const runDone = async () => (await t.app.services.sql.query('SELECT status FROM workflow_run WHERE id = $1', [r.body.job_id])).rows[0]!.status;
    for (let i = 0; i < 100 && (await runDone()) === 'aborting'; i += 1) await new Promise((res) => setTimeout(res, 100));
    expect(await runDone()).toBe('failed');
    const cleanup = (await t.app.services.sql.query('SELECT name, status FROM workflow_step WHERE run_id = $1 AND cleanup ORDER BY idx', [r.body.job_id])).rows;
    expect(cleanup).toEqual([{ name: 'eject-iso-cleanup', status: 'succeeded' }, { name: 'revoke-iso', status: 'succeeded' }]);
    expect((await post(`${job!.api}/job/${job!.job}/step`, job!.token, { step: 'late', state: 'active' })).status).toBe(401);
    const reports = (await t.app.services.sql.query(`SELECT kind, payload FROM install_report WHERE run_id = $1 AND kind <> 'iso' ORDER BY id`, [r.body.job_id])).rows;
    expect(reports).toEqual([{ kind: 'step', payload: { step: 'partitioning', state: 'active', percent: 15 } }]);
    const events = (await t.app.services.sql.query(`SELECT payload FROM event WHERE type = 'provision.step' AND subject = $1`, [r.body.job_id])).rows;
    expect(events.map((e) => e.payload)).toEqual([expect.objectContaining({ jobId: r.body.job_id, step: 'partitioning', state: 'active', percent: 15 })]);
  });

  /**
   * Issue 21 item 15: the seed marks only bmc_IP and vendor "(required)". Without hostname (and no
   * NetBox here) the system is named from the serial the node's BMC reported, node-<serial>; the
   * job's metadata says so, the ISO carries the name and the control-node record keeps it.
   */
  it('without hostname the system is named from the BMC\'s serial, and the job\'s metadata says where the name came from', async () => {
    const m = sim.machines.find((x) => x.id === 'unnamed')!;
    const nodeId = nodeOf.get('unnamed')!;
    await t.app.services.sql.query(`UPDATE node SET inventory = '{"outOfBand": {"serial": "SN 77/A"}}'::jsonb WHERE id = $1`, [nodeId]);
    let preseed = '';
    installer.set('unnamed', async (boot) => {
      const job = await readJob(boot.image!);
      preseed = job.preseed;
      await install(job, '10.40.9.77');
    });
    const r = await rest(t.url, token, 'POST', '/controlnode/provision/dell', body(m, { hostname: undefined }));
    expect(r.status).toBe(200);
    const view = (await rest(t.url, token, 'GET', `/controlnode/job/${r.body.job_id}`)).body;
    expect(view.resource_name).toBe('node-sn-77-a');
    expect(JSON.parse(view.metadata)).toMatchObject({ hostname: 'node-sn-77-a', hostnameSource: 'bmc-serial' });
    expect(await settled(nodeId)).toMatchObject({ provision_state: 'deployed', addresses: ['10.40.9.77'] });
    expect(preseed).toMatch(/netcfg\/get_hostname string node-sn-77-a\n/);
    expect((await t.app.services.sql.query('SELECT os_hostname FROM bmc_info WHERE node_id = $1', [nodeId])).rows[0]!.os_hostname).toBe('node-sn-77-a');
    // A given hostname is the request's, and says so.
    const named = await rest(t.url, token, 'GET', `/controlnode/job/${(await t.app.services.sql.query(`SELECT id FROM workflow_run WHERE kind = 'metal-install' AND params->>'hostname' = 'cn-dell'`)).rows[0]!.id}`);
    expect(JSON.parse(named.body.metadata)).toMatchObject({ hostname: 'cn-dell', hostnameSource: 'request' });
  });

  it('GET /controlnode/job/{id} shows the stage and progress; cancel mid-install ejects the media, ends the token and records cancelled, idempotently', async () => {
    const m = sim.machines.find((x) => x.id === 'cancel')!;
    let job: Job | null = null;
    let reported!: () => void;
    const installing = new Promise<void>((resolve) => (reported = resolve));
    installer.set('cancel', async (boot) => {
      job = await readJob(boot.image!);
      expect((await post(`${job.api}/job/${job.job}/step`, job.token, { step: 'installing-base', state: 'active', percent: 50 })).status).toBe(200);
      reported();
    });
    const r = await rest(t.url, token, 'POST', '/controlnode/provision/dell', body(m));
    expect(r.status).toBe(200);
    await installing;
    const jobUrl = `/controlnode/job/${r.body.job_id}`;
    let view = (await rest(t.url, token, 'GET', jobUrl)).body;
    for (let i = 0; i < 50 && view.status !== 'Installing OS'; i += 1) {
      await new Promise((res) => setTimeout(res, 100));
      view = (await rest(t.url, token, 'GET', jobUrl)).body;
    }
    // Four of seven steps done, and half of Installing OS: 64%.
    expect(view).toMatchObject({ id: r.body.job_id, job_type: 'provision', job_status: 'running', status: 'Installing OS', progress: 64, node_ip: ipOf(8), resource_name: 'cn-cancel', parent_id: '', total_jobs: 1 });
    expect(JSON.parse(view.metadata)).toMatchObject({ vendor: 'dell', hostname: 'cn-cancel', disks: ['nvme0n1', 'nvme1n1'], poolType: 'mirror' });
    expect(view.metadata).not.toContain(OS_PASSWORD);
    const cancelled = await rest(t.url, token, 'POST', `${jobUrl}/cancel`);
    expect(cancelled.status).toBe(200);
    expect(['cancelling', 'cancelled']).toContain(cancelled.body.job_status);
    const node = await settled(nodeOf.get('cancel')!);
    expect(node).toMatchObject({ provision_state: 'failed', failed_from: 'deploying', last_error_code: 'ABORTED' });
    for (let i = 0; i < 100 && (await rest(t.url, token, 'GET', jobUrl)).body.job_status !== 'cancelled'; i += 1) await new Promise((res) => setTimeout(res, 100));
    const after = (await rest(t.url, token, 'GET', jobUrl)).body;
    expect(after).toMatchObject({ job_status: 'cancelled', status: 'cancelled', last_error: expect.stringMatching(/^ABORTED: /) });
    expect(m.state().virtualMedia.every((v) => !v.inserted && v.image === null)).toBe(true);
    expect((await post(`${job!.api}/job/${job!.job}/step`, job!.token, { step: 'late', state: 'active' })).status).toBe(401);
    // Again: the same answer, nothing more sent to the BMC; PATCH job_status cancelled is the same call.
    const calls = sim.counts('cancel').total;
    expect((await rest(t.url, token, 'POST', `${jobUrl}/cancel`)).body.job_status).toBe('cancelled');
    expect((await rest(t.url, token, 'PATCH', jobUrl, { job_status: 'cancelled' })).body.job_status).toBe('cancelled');
    for (const [patch, field] of [[{ job_status: 'completed' }, 'body.job_status'], [{ job_status: 'cancelled', progress: 100 }, 'body.progress'], [{}, 'body.job_status']] as const) {
      const refused = await rest(t.url, token, 'PATCH', jobUrl, patch);
      expect([refused.status, refused.body.error.details?.field]).toEqual([400, field]);
    }
    expect(sim.counts('cancel').total).toBe(calls);
    // A job that completed cannot be cancelled; an unknown one is not found, as is another tenant's.
    const completed = (await t.app.services.sql.query(`SELECT id FROM workflow_run WHERE kind = 'metal-install' AND status = 'succeeded' LIMIT 1`)).rows[0]!.id as string;
    const late = await rest(t.url, token, 'POST', `/controlnode/job/${completed}/cancel`);
    expect([late.status, late.body.error.code]).toEqual([409, 'INVALID_STATE']);
    expect((await rest(t.url, token, 'GET', `/controlnode/job/${completed}`)).body).toMatchObject({ job_status: 'completed', progress: 100 });
    expect((await rest(t.url, token, 'GET', '/controlnode/job/wr_nope')).status).toBe(404);
    const elsewhere = await makeTenantTree(t.app.services.prisma, 'prov-other', { pools: 1, nodesPerPool: 0 });
    const stranger = await makeToken(t.app.services.prisma, elsewhere.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: elsewhere.tenant.id }]);
    expect((await rest(t.url, stranger, 'GET', jobUrl)).status).toBe(404);
    expect((await rest(t.url, stranger, 'POST', `${jobUrl}/cancel`)).status).toBe(404);
    const g = await gql(t.url, token, 'query($id: ID!) { controlNodeJob(id: $id) { jobStatus status node { id provisionState } } }', { id: r.body.job_id });
    expect(g.data!.controlNodeJob).toEqual({ jobStatus: 'CANCELLED', status: 'cancelled', node: { id: nodeOf.get('cancel'), provisionState: 'failed' } });
  });

  it('provision/progress answers the step changed last, with the job id only while it runs; progress/all every step, oldest first; queue the ISO builds', async () => {
    const dell = sim.machines.find((x) => x.id === 'dell')!;
    const bmc = new URL(dell.url).hostname;
    const latest = await rest(t.url, token, 'POST', '/controlnode/provision/progress', { bmc_ip: bmc });
    expect(latest.status).toBe(200);
    expect(latest.body).toMatchObject({ bmc_ip: bmc, stage: 'Ejecting the ISO', status: 'completed', percent_complete: 100, job_id: '', id: expect.any(Number) });
    const all = await rest(t.url, token, 'POST', '/controlnode/provision/progress/all', { bmc_ip: bmc });
    expect(all.body.map((p: { stage: string }) => p.stage)).toEqual(['Building ISO', 'Mounting ISO', 'Setting a one-time boot from the virtual CD', 'Booting the installer', 'Installing OS', 'Waiting for the first boot', 'Ejecting the ISO']);
    expect(all.body.map((p: { percent_complete: number }) => p.percent_complete)).toEqual([14, 28, 42, 57, 71, 85, 100]);
    expect(new Set(all.body.map((p: { id: number }) => p.id)).size).toBe(7);
    // The cancelled job's open step says so; the stuck one's failed.
    const cancelled = (await rest(t.url, token, 'POST', '/controlnode/provision/progress/all', { bmc_ip: ipOf(8) })).body;
    expect(cancelled.at(-1)).toMatchObject({ stage: 'Installing OS', status: 'cancelled', job_id: '' });
    expect((await rest(t.url, token, 'POST', '/controlnode/provision/progress', { bmc_ip: ipOf(9) })).body).toMatchObject({ stage: 'Installing OS', status: 'failed' });
    const none = await rest(t.url, token, 'POST', '/controlnode/provision/progress', { bmc_ip: '127.250.0.1' });
    expect([none.status, none.body.error.code]).toEqual([404, 'NOT_FOUND']);
    expect(JSON.stringify(none.body)).not.toContain('127.250.0.1');
    expect((await rest(t.url, token, 'POST', '/controlnode/provision/progress/all', { bmc_ip: '127.250.0.1' })).body).toEqual([]);
    expect((await rest(t.url, token, 'POST', '/controlnode/provision/progress', {})).body.error.details.field).toBe('body.bmc_ip');
    // Every build is done: the queue is empty; one waiting shows with its job.
    expect((await rest(t.url, token, 'GET', '/controlnode/provision/queue')).body).toEqual([]);
    const run = (await t.app.services.sql.query(`SELECT id FROM workflow_run WHERE kind = 'metal-install' ORDER BY created_at LIMIT 1`)).rows[0]!.id as string;
    // A build queued and not started yet, as the Building ISO step records it (jobs/iso-build.ts queueIsoBuild).
    await t.app.services.sql.query(`INSERT INTO iso_build_job (id, run_id) VALUES (gen_random_uuid(), $1)`, [run]);
    const queue = (await rest(t.url, token, 'GET', '/controlnode/provision/queue')).body;
    expect(queue).toEqual([expect.objectContaining({ job_id: run, state: 'pending', bmc_ip: bmc, hostname: 'cn-dell', started_at: null })]);
    const elsewhere = await makeTenantTree(t.app.services.prisma, 'prov-queue', { pools: 1, nodesPerPool: 0 });
    const stranger = await makeToken(t.app.services.prisma, elsewhere.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: elsewhere.tenant.id }]);
    expect((await rest(t.url, stranger, 'GET', '/controlnode/provision/queue')).body).toEqual([]);
    expect((await rest(t.url, stranger, 'POST', '/controlnode/provision/progress/all', { bmc_ip: bmc })).body).toEqual([]);
    // GraphQL answers the same facts.
    const g = await gql(t.url, token, 'query($b: String!) { latest: provisionProgress(bmcIp: $b, latest: true) { stage status percentComplete activeJobId } all: provisionProgress(bmcIp: $b) { stage } provisionIsoQueue { jobId state bmcIp } }', { b: bmc });
    expect(g.errors).toBeUndefined();
    expect(g.data).toEqual({
      latest: [{ stage: 'Ejecting the ISO', status: 'COMPLETED', percentComplete: 100, activeJobId: '' }],
      all: all.body.map((p: { stage: string }) => ({ stage: p.stage })),
      provisionIsoQueue: [{ jobId: run, state: 'pending', bmcIp: bmc }],
    });
    await t.app.services.sql.query(`DELETE FROM iso_build_job WHERE ended_at IS NULL`);
  });

  it('the installer\'s steps reach the REST SSE channel provision (provision_step) and the jobProgress subscription, replayed from the start', async () => {
    const job = (await t.app.services.sql.query(`SELECT id FROM workflow_run WHERE kind = 'metal-install' AND status = 'succeeded' ORDER BY created_at LIMIT 1`)).rows[0]!.id as string;
    const stream = restStream(t.url, token, '?channel=provision&after=0');
    const ws = wsClient(t.url, token);
    const sub = wsSubscribe(ws, 'subscription ($j: ID!) { jobProgress(jobId: $j) { type payload } }', { j: job });
    try {
      await until(() => stream.messages.filter((m) => m.data.subject === job).length === 5, 10000, 'the job\'s five callbacks on the provision channel');
      const mine = stream.messages.filter((m) => m.data.subject === job);
      expect(mine.every((m) => m.event === 'provision_step')).toBe(true);
      expect(mine.map((m) => [m.data.payload.kind, m.data.payload.step ?? null])).toEqual([
        ['step', 'partitioning'], ['step', 'installing-base'], ['step', 'installing-finish'], ['complete', null], ['firstboot', null],
      ]);
      const steps = () => sub.events.filter((e) => (e as { type: string }).type === 'provision.step');
      await until(() => steps().length === 5, 10000, 'the job\'s five callbacks over graphql-ws');
      expect(steps().map((e) => (e as { payload: { kind: string } }).payload.kind)).toEqual(['step', 'step', 'step', 'complete', 'firstboot']);
      expect(JSON.stringify(stream.messages)).not.toContain(REPORTED_PASSWORD);
    } finally {
      stream.stop();
      sub.stop();
      await ws.dispose();
    }
  });

  it('unprovision is the undeploy of a deployed node (new BMC credentials first, when given); its job is the release run', async () => {
    const m = sim.machines.find((x) => x.id === 'supermicro')!;
    const bmc = new URL(m.url).hostname;
    const nodeId = nodeOf.get('supermicro')!;
    const before = (await t.app.services.sql.query('SELECT bmc_credentials_ref FROM node WHERE id = $1', [nodeId])).rows[0]!.bmc_credentials_ref as string;
    const half = await rest(t.url, token, 'POST', '/controlnode/unprovision', { bmc_ip: bmc, bmc_user: 'admin' });
    expect([half.status, half.body.error.details.field]).toEqual([400, 'body.bmc_pass']);
    expect((await rest(t.url, token, 'POST', '/controlnode/unprovision', { bmc_ip: '127.250.0.1' })).status).toBe(404);
    const stuck = await rest(t.url, token, 'POST', '/controlnode/unprovision', { bmc_ip: ipOf(9) });
    expect([stuck.status, stuck.body.error.code]).toEqual([409, 'INVALID_STATE']);
    const r = await rest(t.url, token, 'POST', '/controlnode/unprovision', { bmc_ip: bmc, bmc_user: m.username, bmc_pass: m.password, vendor: 'supermicro' });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ success: true, node_id: nodeId, status: 'releasing', job_id: expect.any(String) });
    const after = (await t.app.services.sql.query('SELECT bmc_credentials_ref FROM node WHERE id = $1', [nodeId])).rows[0]!.bmc_credentials_ref as string;
    expect(after).not.toBe(before);
    expect((await t.app.services.sql.query('SELECT count(*)::int AS n FROM secret WHERE id = $1', [before.replace('secret://', '')])).rows[0]!.n).toBe(0);
    const run = (await t.app.services.sql.query('SELECT kind, params FROM workflow_run WHERE id = $1', [r.body.job_id])).rows[0]!;
    expect(run).toMatchObject({ kind: 'metal-release', params: expect.objectContaining({ verb: 'undeploy', wipe: 'quick' }) });
    expect((await rest(t.url, token, 'GET', `/controlnode/job/${r.body.job_id}`)).body).toMatchObject({ job_type: 'unprovision', node_ip: bmc });
    const g = await gql(t.url, token, 'mutation($i: UnprovisionControlNodeInput!) { unprovisionControlNode(input: $i) { jobId } }', { i: { bmcIp: bmc } });
    expect(g.errors?.[0]?.extensions?.code).toBe('INVALID_STATE');
    // No ramdisk answers here: the release is cancelled, and its cleanup powers the machine off.
    expect((await rest(t.url, token, 'POST', `/controlnode/job/${r.body.job_id}/cancel`)).status).toBe(200);
    for (let i = 0; i < 100 && (await rest(t.url, token, 'GET', `/controlnode/job/${r.body.job_id}`)).body.job_status !== 'cancelled'; i += 1) await new Promise((res) => setTimeout(res, 100));
    expect((await rest(t.url, token, 'GET', `/controlnode/job/${r.body.job_id}`)).body.job_status).toBe('cancelled');
  });

  const REFUSED: [string, Record<string, unknown>, string][] = [
    ['no bmc_IP', { bmc_IP: undefined }, 'body.bmc_IP'],
    ['no vendor on the plain route', { vendor: undefined }, 'body.vendor'],
    ['no hostname, and neither NetBox nor a BMC serial to name the system by', { hostname: undefined }, 'body.hostname'],
    ['a mirror of one disk', { selected_disks: ['nvme0n1'] }, 'body.pool_type'],
    ['an unknown pool type', { pool_type: 'raid10' }, 'body.pool_type'],
    ['a disk path', { selected_disks: ['../../etc/passwd', 'sda'] }, 'body.selected_disks[0]'],
    ['a short OS password', { os_password: 'short' }, 'body.os_password'],
    ['root as the OS user', { os_username: 'root' }, 'body.os_username'],
    ['a system account as the OS user (never repeated)', { os_username: 'backup' }, 'body.os_username'],
    ['a disk listed twice (never repeated)', { selected_disks: ['nvme7n1', 'nvme7n1'], pool_type: 'mirror' }, 'body.selected_disks[1]'],
    ['a NIC MAC that is none', { selected_nic_mac: 'zz' }, 'body.selected_nic_mac'],
    ['an output ISO outside ISO_DIR', { output_iso: '/etc/shadow' }, 'body.output_iso'],
    ['a cache dir escaping ISO_DIR', { cache_dir: '../..' }, 'body.cache_dir'],
    ['a pxe path with a NUL', { pxe_path: 'a\u0000b' }, 'body.pxe_path'],
    ['a controlnode_port that is none', { controlnode_host: '10.0.0.1', controlnode_port: '99999' }, 'body.controlnode_port'],
    ['a bad gpu_passthrough', { gpu_passthrough: { pci_ids: ['nope'] } }, 'body.gpu_passthrough.pci_ids[0]'],
    ['an unknown field', { is_control_node: true }, 'body.is_control_node'],
  ];
  it.each(REFUSED)('%s: 400 naming the field, nothing written', async (_name, over, field) => {
    const m = sim.machines[0]!;
    const before = (await t.app.services.sql.query('SELECT count(*)::int AS n FROM workflow_run')).rows[0]!.n;
    const r = await rest(t.url, token, 'POST', '/controlnode/provision', body(m, { vendor: 'dell', ...over }));
    expect([r.status, r.body.error?.code, r.body.error?.details?.field]).toEqual([400, 'INVALID_INPUT', field]);
    expect(JSON.stringify(r.body)).not.toContain(OS_PASSWORD);
    // "Input errors never repeat the value sent" (README), issue 21 item 22.
    if (/never repeated/.test(_name)) expect(r.body.error.message).not.toMatch(/backup|nvme7n1/);
    expect((await t.app.services.sql.query('SELECT count(*)::int AS n FROM workflow_run')).rows[0]!.n).toBe(before);
  });

  it('NOT_FOUND for a BMC no node has; INVALID_STATE for a node that is not ready; GraphQL answers the same', async () => {
    const none = await rest(t.url, token, 'POST', '/controlnode/provision/dell', body(sim.machines[0]!, { bmc_IP: '127.250.0.1' }));
    expect([none.status, none.body.error.code]).toEqual([404, 'NOT_FOUND']);
    const deployed = await rest(t.url, token, 'POST', '/controlnode/provision/dell', body(sim.machines[0]!));
    expect([deployed.status, deployed.body.error.code]).toEqual([409, 'INVALID_STATE']);
    const g = await gql(t.url, token, 'mutation($i: ProvisionControlNodeInput!) { provisionControlNode(input: $i, vendor: DELL) { jobId } }',
      { i: { bmcIp: new URL(sim.machines[0]!.url).hostname, hostname: 'x', selectedDisks: ['sda'], poolType: 'single' } });
    expect(g.errors?.[0]?.extensions?.code).toBe('INVALID_STATE');
  });

  it('no password is in any row, event or log line (the ISO was checked as each installer read it)', async () => {
    const dump = JSON.stringify([
      ...(await t.app.services.sql.query('SELECT * FROM workflow_run')).rows,
      ...(await t.app.services.sql.query('SELECT * FROM workflow_step')).rows,
      ...(await t.app.services.sql.query('SELECT * FROM command')).rows,
      ...(await t.app.services.sql.query('SELECT * FROM event')).rows,
      ...(await t.app.services.sql.query('SELECT * FROM install_report')).rows,
      ...(await t.app.services.sql.query('SELECT * FROM bmc_info')).rows,
    ]);
    const logs = lines.join('');
    for (const secret of [BMC_PASSWORD, OS_PASSWORD, REPORTED_PASSWORD]) {
      expect(dump).not.toContain(secret);
      expect(logs).not.toContain(secret);
    }
  });
});
