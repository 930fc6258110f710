/**
 * POST /controlnode/provision of a BMC address no node has yet (issue 11 item 1: "a BMC address not
 * yet known is enrolled into a configured default site and pool with the vendor's Redfish flavour
 * first"): the address is enrolled into CONTROLNODE_POOL_ID's pool with the vendor's driver, the
 * site's BMC CA and the default credentials of CONTROLNODE_BMC_CREDENTIALS_FILE, and the job is
 * that enrollment's chain (verified, inspected by the ramdisk, commissioned) and the install the
 * engine starts when it reaches ready. The machines are the simulator's: their BMC at a bare IP on
 * 443 over TLS, PXE and the ramdisk played against the real boot API, the installer played from the
 * ISO the BMC was given. Without the settings, or for an address another tenant's node has, the
 * answer is NOT_FOUND and nothing is written.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTestApp, capturingLogger, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { bmcCertificates } from './helpers/tls';
import { playInstall, readInstallerJob, type InstallerJob } from './helpers/installer';
import { startMachineSim, type MachineSim } from './sim/machine';
import { newId } from '../src/ids';
import { bmcHostOf } from '../src/modules/provision/provision';

jest.setTimeout(180_000);

const BMC_PASSWORD = 'Bmc-D3fault-Pa55';
const OS_PASSWORD = 'Os-N3wBmc-Pa55';
const REPORTED = 'Os-N3wBmc-Rep0rted';
const ipOf = (i: number) => `127.78.5.${i + 1}`;

let t: TestApp;
let sim: MachineSim;
let dir: string;
let token: string;
let poolId: string;
let tenantId: string;
let credentialsFile: string;
const lines: string[] = [];
const installs: Promise<void>[] = [];
const played = new Map<string, InstallerJob>();

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cn-enroll-'));
  const certs = bmcCertificates(dir, [ipOf(0), ipOf(1), ipOf(2), ipOf(3)]);
  const caFile = path.join(dir, 'bmc-ca.pem');
  fs.writeFileSync(caFile, certs.ca);
  credentialsFile = path.join(dir, 'bmc-credentials');
  fs.writeFileSync(credentialsFile, `root:${BMC_PASSWORD}\n`, { mode: 0o600 });
  t = await startTestApp({ agentPollMs: 200, isoDir: path.join(dir, 'iso') }, { log: capturingLogger(lines) });
  t.app.services.config.publicUrl = t.url;
  sim = await startMachineSim({
    serviceUrl: t.url,
    redfish: {
      machines: [
        { id: 'new-dell', flavour: 'idrac', mockup: 'public-localstorage', listen: { host: ipOf(0), port: 443 }, username: 'root', password: BMC_PASSWORD },
        { id: 'wrong-password', flavour: 'ilo', listen: { host: ipOf(1), port: 443 }, username: 'root', password: 'Not-The-Default-1' },
        { id: 'hidden', listen: { host: ipOf(2), port: 443 }, username: 'root', password: BMC_PASSWORD },
        { id: 'new-serial', flavour: 'idrac', mockup: 'public-localstorage', listen: { host: ipOf(3), port: 443 }, username: 'root', password: BMC_PASSWORD, serial: 'CN7/00X-9' },
      ],
      tls: { key: certs.key, cert: certs.cert },
    },
    onBoot: (bmc, boot) => {
      if ((bmc.id !== 'new-dell' && bmc.id !== 'new-serial') || boot.target !== 'Cd' || !boot.image) return;
      installs.push((async () => {
        const job = await readInstallerJob(boot.image!, dir, [OS_PASSWORD, BMC_PASSWORD]);
        played.set(bmc.id, job);
        await playInstall(job, bmc.id === 'new-dell' ? '10.40.3.10' : '10.40.3.11', REPORTED);
      })());
    },
  });
  const tree = await makeTenantTree(t.app.services.prisma, 'cnen', { pools: 1, nodesPerPool: 0 });
  poolId = tree.pools[0]!.id;
  tenantId = tree.tenant.id;
  token = await makeToken(t.app.services.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  Object.assign(t.app.services.config, { controlnodePoolId: poolId, controlnodeBmcCaFile: caFile, controlnodeBmcCredentialsFile: credentialsFile });
  // Another tenant's node has the 'hidden' BMC: this tenant cannot see it, and it is not enrolled twice.
  const other = await makeTenantTree(t.app.services.prisma, 'cnen-other', { pools: 1, nodesPerPool: 0 });
  await t.app.services.prisma.node.create({
    data: {
      id: newId('MetalNode'), tenantId: other.tenant.id, siteId: other.site.id, poolId: other.pools[0]!.id, name: 'theirs', provisionState: 'ready',
      bmcAddress: ipOf(2), bmcDriver: 'redfish', driverBindings: { power: 'redfish', management: 'redfish', virtualMedia: 'redfish' },
    },
  });
});
afterAll(async () => {
  await Promise.allSettled(installs);
  await sim?.stop();
  await t?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const body = (ip: string, over: Record<string, unknown> = {}) => ({
  bmc_IP: ip, hostname: 'cn-new', os_username: 'ops', os_password: OS_PASSWORD, selected_disks: ['sda', 'sdb'], pool_type: 'mirror', ...over,
});
const sql = () => t.app.services.sql;
const nodesAt = async (ip: string) => (await sql().query('SELECT id, tenant_id FROM node WHERE bmc_address = $1 ORDER BY id', [ip])).rows;

async function jobUntil(jobId: string, done: (view: Record<string, unknown>) => boolean, limitMs = 150_000): Promise<Record<string, unknown>> {
  const end = Date.now() + limitMs;
  for (;;) {
    const r = await rest(t.url, token, 'GET', `/controlnode/job/${jobId}`);
    expect(r.status).toBe(200);
    if (done(r.body)) return r.body;
    if (Date.now() > end) throw new Error(`job ${jobId}: ${JSON.stringify(r.body)}`);
    await new Promise((res) => setTimeout(res, 250));
  }
}

describe('provision of a BMC address no node has', () => {
  it('enrolls it into the configured pool with the vendor\'s flavour and the default credentials; the job goes through verify, inspect and commission, then installs; the node ends deployed', async () => {
    const ip = ipOf(0);
    const r = await rest(t.url, token, 'POST', '/controlnode/provision/dell', body(ip, { selected_nic_mac: sim.machine('new-dell').macs[0]!.toUpperCase() }));
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ success: true, status: 'enrolling', job_id: expect.any(String), node_id: expect.any(String) });
    expect(r.body.message).toMatch(/enrolling the new BMC 127\.78\.5\.1 .*verified, inspected and commissioned, then installed/);
    const jobId = r.body.job_id as string;
    const node = (await sql().query('SELECT id, pool_id, provision_state, bmc_driver, bmc_driver_options, bmc_credentials_ref, driver_bindings, macs FROM node WHERE id = $1', [r.body.node_id])).rows[0]!;
    // The installer NIC's MAC stands for the machine's, as enroll's macs do.
    expect(node).toMatchObject({ pool_id: poolId, bmc_driver: 'idrac', macs: [sim.machine('new-dell').macs[0]], driver_bindings: { power: 'idrac', management: 'idrac', virtualMedia: 'idrac' } });
    expect(node.bmc_driver_options).toEqual({ caCert: expect.stringContaining('BEGIN CERTIFICATE') });
    // The default credentials went to the broker for this node; the row holds only the reference.
    expect(await t.app.services.secrets!.get(node.bmc_credentials_ref, tenantId)).toEqual({ username: 'root', password: BMC_PASSWORD });

    // While it enrolls, the job is the provision, running, on its first stages.
    const early = (await rest(t.url, token, 'GET', `/controlnode/job/${jobId}`)).body;
    expect(early).toMatchObject({ id: jobId, job_type: 'provision', node_ip: ip, resource_name: 'cn-new' });
    expect(['pending', 'running']).toContain(early.job_status);
    expect(JSON.parse(early.metadata)).toMatchObject({ hostname: 'cn-new', vendor: 'dell', poolType: 'mirror' });
    expect(early.metadata).not.toMatch(/then|jobId|Pa55/);

    // The job's progress never goes back while its runs follow one another, and it is running throughout.
    const seen: { progress: number; status: string }[] = [];
    const view = await jobUntil(jobId, (v) => {
      seen.push({ progress: v.progress as number, status: v.job_status as string });
      return v.job_status !== 'running' && v.job_status !== 'pending';
    });
    const viewed = seen.map((x) => x.progress);
    expect([...viewed].sort((a, b) => a - b)).toEqual(viewed);
    expect(seen.slice(1, -1).every((x) => x.status === 'running')).toBe(true);
    expect(view).toMatchObject({ id: jobId, job_status: 'completed', progress: 100, last_error: null });
    const row = (await sql().query('SELECT provision_state, addresses, role FROM node WHERE id = $1', [r.body.node_id])).rows[0]!;
    expect(row).toMatchObject({ provision_state: 'deployed', addresses: ['10.40.3.10'], role: 'controlnode-os' });
    // One job, four runs, each knowing its job; the install is the enrollment's `then`.
    const runs = (await sql().query(`SELECT id, kind, status, params->>'jobId' AS job FROM workflow_run WHERE node_id = $1 ORDER BY created_at`, [r.body.node_id])).rows;
    expect(runs.map((x) => [x.kind, x.status, x.job])).toEqual([
      ['metal-enroll', 'succeeded', jobId], ['metal-inspect', 'succeeded', jobId], ['metal-commission', 'succeeded', jobId], ['metal-install', 'succeeded', jobId],
    ]);
    // The ISO carries the job's id, the one provision answered with (issue 21 item 14): the installer
    // called back on it with the job's own token; the install run's id names the same job.
    const install = runs[3]!.id as string;
    expect(played.get('new-dell')!.job).toBe(jobId);
    expect((await rest(t.url, token, 'GET', `/controlnode/job/${install}`)).body).toMatchObject({ id: jobId, job_status: 'completed' });
    // Every run's steps are the job's events too (jobProgress(jobId)); workflowProgress finds each run's by workflowId.
    const stepRuns = (await sql().query(`SELECT DISTINCT payload->>'workflowId' AS run FROM event WHERE subject = $1 AND type = 'workflow.step'`, [jobId])).rows.map((e) => e.run);
    expect(new Set(stepRuns)).toEqual(new Set(runs.map((x) => x.id)));
    // Its callbacks are the job's events (jobProgress(jobId), the SSE channel provision), naming the install run.
    const steps = (await sql().query(`SELECT subject, payload FROM event WHERE type = 'provision.step' AND node_id = $1 ORDER BY seq`, [r.body.node_id])).rows;
    expect(steps.length).toBe(5);
    for (const e of steps) expect(e).toMatchObject({ subject: jobId, payload: { jobId, runId: install } });
    // The node went through ready into deploying in the commission's transaction, each move an event.
    const events = (await sql().query(`SELECT type FROM event WHERE subject = $1 AND type LIKE 'node.%' ORDER BY seq`, [r.body.node_id])).rows.map((e) => e.type);
    expect(events).toEqual(expect.arrayContaining(['node.enrolled', 'node.provision.inspecting', 'node.provision.commissioning', 'node.provision.ready', 'node.provision.deploying', 'node.provision.deployed']));
    expect(events.indexOf('node.provision.ready')).toBeLessThan(events.indexOf('node.provision.deploying'));
    // progress/all: every started step of the job, under the job's id, its percent the job's.
    const progress = await rest(t.url, token, 'POST', '/controlnode/provision/progress/all', { bmc_ip: ip });
    expect(progress.status).toBe(200);
    const records = progress.body as { job_id: string; stage: string; status: string; percent_complete: number }[];
    // (REST's job_id is the active job's, for a UI's cancel button: empty now that it ended.)
    expect(new Set(records.map((p) => p.job_id))).toEqual(new Set(['']));
    const q = await gql(t.url, token, 'query($ip: String!) { provisionProgress(bmcIp: $ip) { jobId stage percentComplete } }', { ip });
    expect(q.errors).toBeUndefined();
    expect(new Set((q.data!.provisionProgress as { jobId: string }[]).map((p) => p.jobId))).toEqual(new Set([jobId]));
    expect((q.data!.provisionProgress as unknown[]).length).toBe(records.length);
    const stages = records.map((p) => p.stage);
    expect(stages).toEqual(expect.arrayContaining(['Building ISO', 'Installing OS', 'Ejecting the ISO']));
    expect(stages.indexOf('Building ISO')).toBeGreaterThan(2);
    expect(records.every((p) => p.status === 'completed')).toBe(true);
    const percents = records.map((p) => p.percent_complete);
    expect([...percents].sort((a, b) => a - b)).toEqual(percents);
    expect(percents.at(-1)).toBe(100);
    // The media is out, and no password was logged.
    expect(sim.redfish.machines.find((m) => m.id === 'new-dell')!.state().virtualMedia.every((v) => !v.inserted)).toBe(true);
    expect(lines.join('\n')).not.toMatch(new RegExp(`${BMC_PASSWORD}|${OS_PASSWORD}|${REPORTED}`));
  });

  /**
   * Issue 21 item 15: without hostname, and no NetBox, a new BMC's system is named by the serial its
   * enrollment reads from the BMC (node-<serial>), which provision cannot know yet: the job's
   * metadata says so (hostnameSource bmc-serial), and the install names the system when it runs.
   */
  it('without hostname, the new BMC\'s system is named from the serial its enrollment reads', async () => {
    const ip = ipOf(3);
    const r = await rest(t.url, token, 'POST', '/controlnode/provision/dell', body(ip, { hostname: undefined, selected_nic_mac: sim.machine('new-serial').macs[0] }));
    expect(r.status).toBe(200);
    expect(r.body.message).toMatch(/its host name from the serial the BMC reports/);
    const early = (await rest(t.url, token, 'GET', `/controlnode/job/${r.body.job_id}`)).body;
    expect(JSON.parse(early.metadata)).toMatchObject({ hostname: null, hostnameSource: 'bmc-serial' });
    const view = await jobUntil(r.body.job_id, (v) => v.job_status !== 'running' && v.job_status !== 'pending');
    expect(view).toMatchObject({ job_status: 'completed', resource_name: 'node-cn7-00x-9' });
    expect(played.get('new-serial')!.preseed).toMatch(/netcfg\/get_hostname string node-cn7-00x-9\n/);
    expect((await sql().query('SELECT os_hostname FROM bmc_info WHERE node_id = $1', [r.body.node_id])).rows[0]!.os_hostname).toBe('node-cn7-00x-9');
  });

  it('with BMC credentials the default ones do not open, the job fails while enrolling, naming the BMC\'s refusal', async () => {
    const r = await rest(t.url, token, 'POST', '/controlnode/provision/hp', body(ipOf(1), { hostname: 'cn-wrong' }));
    expect(r.status).toBe(200);
    const view = await jobUntil(r.body.job_id, (v) => v.job_status === 'failed', 60_000);
    expect(view.last_error).toMatch(/^BMC_AUTH|auth|401|credential/i);
    expect((await sql().query('SELECT provision_state, failed_from FROM node WHERE id = $1', [r.body.node_id])).rows[0]).toEqual({ provision_state: 'failed', failed_from: 'enrolling' });
  });

  it('finds a node whose BMC address was enrolled in another form (a URL, with a port): it is that node\'s, never enrolled again', async () => {
    const { prisma } = t.app.services;
    const tree = await prisma.pool.findUniqueOrThrow({ where: { id: poolId } });
    for (const [stored, asked] of [['https://127.78.5.50/', '127.78.5.50'], ['127.78.5.51:443', '127.78.5.51'], ['[fd00::51]:8443', 'FD00:0:0::51']] as const) {
      await prisma.node.create({
        data: {
          id: newId('MetalNode'), tenantId, siteId: tree.siteId, poolId, name: `deployed-${stored}`, provisionState: 'deployed',
          bmcAddress: stored, bmcDriver: 'redfish', driverBindings: { power: 'redfish', management: 'redfish', virtualMedia: 'redfish' },
        },
      });
      const r = await rest(t.url, token, 'POST', '/controlnode/provision/dell', body(asked));
      expect([stored, r.status, r.body.error?.code]).toEqual([stored, 409, 'INVALID_STATE']);
      expect(r.body.error.message).toMatch(/is deployed: provisioning is a deploy/);
    }
    expect(bmcHostOf('https://10.20.0.11:8443/redfish/v1')).toBe('10.20.0.11');
    expect(bmcHostOf('[FD00::1]')).toBe('fd00::1');
    expect(bmcHostOf('bmc-12.lab:623')).toBe('bmc-12.lab');
    expect(bmcHostOf('fd00:0::1')).toBe('fd00::1');
  });

  it('answers NOT_FOUND, writing nothing, for an address another tenant\'s node has, and without the settings', async () => {
    const hidden = await rest(t.url, token, 'POST', '/controlnode/provision/dell', body(ipOf(2)));
    expect(hidden.status).toBe(404);
    expect(hidden.body.error.code).toBe('NOT_FOUND');
    expect(await nodesAt(ipOf(2))).toHaveLength(1);
    const config = t.app.services.config;
    config.controlnodeBmcCredentialsFile = undefined;
    try {
      const r = await rest(t.url, token, 'POST', '/controlnode/provision/dell', body('127.78.5.99'));
      expect(r.status).toBe(404);
      expect(r.body.error.message).toMatch(/register it .*or set CONTROLNODE_POOL_ID and CONTROLNODE_BMC_CREDENTIALS_FILE/);
      expect(await nodesAt('127.78.5.99')).toHaveLength(0);
    } finally {
      config.controlnodeBmcCredentialsFile = credentialsFile;
    }
  });

  it('a credentials file that is not user:password is INVALID_CONFIG, never quoting it, and leaves nothing behind', async () => {
    const bad = path.join(dir, 'bad-credentials');
    fs.writeFileSync(bad, 'Only-A-Secret-Pa55\n');
    const config = t.app.services.config;
    config.controlnodeBmcCredentialsFile = bad;
    const secretsBefore = Number((await sql().query('SELECT count(*) FROM secret')).rows[0]!.count);
    try {
      const r = await rest(t.url, token, 'POST', '/controlnode/provision/dell', body('127.78.5.98'));
      expect(r.status).toBe(422);
      expect(r.body.error).toMatchObject({ code: 'INVALID_CONFIG', message: expect.stringMatching(/CONTROLNODE_BMC_CREDENTIALS_FILE .*one line user:password/) });
      expect(JSON.stringify(r.body)).not.toMatch(/Only-A-Secret/);
      expect(await nodesAt('127.78.5.98')).toHaveLength(0);
      expect(Number((await sql().query('SELECT count(*) FROM secret')).rows[0]!.count)).toBe(secretsBefore);
    } finally {
      config.controlnodeBmcCredentialsFile = credentialsFile;
    }
  });
});
