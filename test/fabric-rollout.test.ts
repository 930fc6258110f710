import fs from 'node:fs/promises';
import path from 'node:path';
import { startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { startSshNodes, type SshNode, type SshNodes } from './helpers/ssh-nodes';
import { restStream, until, wsClient, wsSubscribe } from './helpers/streams';
import { newId, uuidv7 } from '../src/ids';
import { advanceRun } from '../jobs/engine';
import { DetachedRuns } from '../jobs/engine-detached';
import { fabricRolloutWorkflows } from '../jobs/workflows/fabric-rollout';
import { fabricRunId } from '../src/modules/fabric/runs';

/**
 * Fabric rollouts against real sshd nodes (test/helpers/ssh-nodes.ts): the failure paths, strict
 * rollback, cancel, teardown, the REST and GraphQL faces, permissions and hostile input. Only
 * package installs and service restarts are recording stand-ins; `ip` runs for real in each
 * node's namespace, so "back to baseline" is read from the node's own `ip -j addr`.
 */

jest.setTimeout(180_000);

const PATH = '/controlnode/fabric-config';
const BGP_PASSWORD = 'bgpRollout-S3cret-71';
const SWITCH_PEER = '172.30.10.254';

let t: TestApp;
let lab: SshNodes;
let admin: string;
let reader: string;
let tenantAdmin: string;
let fabricWriter: string;
let fabricAdmin: string;
let noSshd: SshNode;
let silent: SshNode;
let sshdA: SshNode;
let sshdB: SshNode;
/** metal node id per lab node index, and its BMC address. */
const metalIds: string[] = [];
const bmcOf = new Map<string, string>();
const fakeOriginals = new Map<string, string>();

const prisma = () => t.app.services.prisma;

/**
 * These lab nodes share this machine's /etc (no private /etc/frr): an `mv` that refuses /etc/frr
 * keeps a rendered config (with its password) off the machine's own frr.conf should a test ever
 * get that far here. (dpkg-divert on every lab node is the harness's recording stand-in.)
 */
async function installLabGuard(node: SshNode): Promise<void> {
  await fs.writeFile(path.join(node.dir, 'bin', 'mv'), `#!/bin/sh
for a in "$@"; do case "$a" in /etc/frr/*) echo "lab guard: not moving into /etc/frr" >&2; exit 1;; esac; done
exec /bin/mv "$@"
`, { mode: 0o755 });
}

/** Makes the node's apt-get take `seconds` (then succeed, recording the call); 0 restores it. */
async function slowAptGet(node: SshNode, seconds: number): Promise<void> {
  const file = path.join(node.dir, 'bin', 'apt-get');
  if (!fakeOriginals.has(file)) fakeOriginals.set(file, await fs.readFile(file, 'utf8'));
  const original = fakeOriginals.get(file)!;
  if (seconds === 0) return fs.writeFile(file, original, { mode: 0o755 });
  await fs.writeFile(file, original.replace('#!/bin/sh\n', `#!/bin/sh\nsleep ${seconds}\n`), { mode: 0o755 });
}

/** Exactly these lab nodes are the compute nodes (deployed metal nodes with SSH access). */
async function useNodes(nodes: SshNode[]): Promise<void> {
  await prisma().computeNode.deleteMany({});
  const keyRef = await t.app.services.secrets!.put(null, lab.clientPrivateKey);
  for (const node of nodes) {
    await prisma().computeNode.create({
      data: {
        nodeId: metalIds[node.index]!, osIp: node.address, fqdn: `cn${node.index}.lab.example`, sshUser: 'root',
        sshKeyRef: keyRef, sshHostKey: node.hostKeyFingerprint,
      },
    });
  }
}

async function waitDone(jobId: string): Promise<any> {
  let job: any;
  const deadline = Date.now() + 120_000;
  for (;;) {
    const r = await gql(t.url, admin, 'query ($id: ID!) { fabricJob(jobId: $id) { jobStatus state } }', { id: jobId });
    job = r.data?.fabricJob;
    if (job && job.jobStatus !== 'running') break;
    if (Date.now() > deadline) throw new Error(`fabric job ${jobId} still running: ${JSON.stringify(job)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return (await rest(t.url, admin, 'GET', `${PATH}/latest`)).body;
}

async function waitStep(jobId: string, nodeIp: string, step: string, status: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const r = await gql(t.url, admin, 'query ($id: ID!) { fabricJob(jobId: $id) { nodes { nodeIp steps { step status } } } }', { id: jobId });
    const node = r.data?.fabricJob?.nodes.find((n: any) => n.nodeIp === nodeIp);
    if (node?.steps.some((s: any) => s.step === step && s.status === status)) return;
    if (Date.now() > deadline) throw new Error(`step ${step} of ${nodeIp} never became ${status}: ${JSON.stringify(node)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function eventsOf(jobId: string): Promise<{ type: string; payload: any }[]> {
  const rows = await prisma().event.findMany({ where: { subject: jobId }, orderBy: { id: 'asc' } });
  return rows.map((r) => ({ type: r.type, payload: r.payload }));
}

async function hasVtep0(node: SshNode): Promise<boolean> {
  const links = JSON.parse(await lab.inNode(node, ['ip', '-j', 'addr', 'show'])) as { ifname: string }[];
  return links.some((l) => l.ifname === 'vtep0');
}

beforeAll(async () => {
  lab = await startSshNodes('rollout', [{ kind: 'no-sshd' }, { kind: 'silent' }, {}, {}]);
  [noSshd, silent, sshdA, sshdB] = lab.nodes as [SshNode, SshNode, SshNode, SshNode];
  for (const node of lab.nodes) if (node.kind === 'sshd') await installLabGuard(node);
  t = await startTestApp({ fabricBgpWaitMs: 1500, fabricSshConnectTimeoutMs: 1500, fabricNodeTimeoutMs: 60_000 });
  admin = t.adminToken;
  const tree = await makeTenantTree(prisma(), 'rollout', { pools: 1, nodesPerPool: lab.nodes.length });
  for (const [i, node] of tree.nodes.entries()) {
    metalIds[i] = node.id;
    bmcOf.set(node.id, node.bmcAddress);
  }
  await prisma().node.updateMany({ where: { id: { in: metalIds } }, data: { provisionState: 'deployed' } });
  reader = await makeToken(prisma(), null, [{ permission: 'compute:sites:read', scopeType: 'platform', scopeId: null }]);
  tenantAdmin = await makeToken(prisma(), tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  fabricWriter = await makeToken(prisma(), null, [{ permission: 'fabric:write', scopeType: 'platform', scopeId: null }]);
  fabricAdmin = await makeToken(prisma(), null, [{ permission: 'fabric:admin', scopeType: 'platform', scopeId: null }]);
  const saved = await rest(t.url, admin, 'POST', PATH, {
    as: 65000, fabric_switch_as: 65000, external_route_reflector: true, fabric_switch_nos: 'sonic', fabric_switch_peering_ip: SWITCH_PEER,
    fabric_switch_name: 'spine1', router_id_cidr: '10.255.0.1/24', management_cidr: '10.0.0.0/8', ospf_enabled: false,
    bgp_password: BGP_PASSWORD, expected_nodes: 10, expected_vms: 100, vxlan_mtu: 9000,
  });
  expect(saved.status).toBe(200);
  // Saved and not rolled out.
  expect(saved.body.config.rollout_status).toBe('pending');
});

afterAll(async () => {
  await t?.stop();
  await lab?.stop();
});

describe('fabric rollout over real sshd', () => {
  it('refused and silent nodes come out unreachable, a failing step names itself in first_fail_*, and the rollout ends without hanging', async () => {
    await useNodes([noSshd, silent, sshdA]);
    await lab.setFakeExit(sshdA, 'apt-get', 100);
    try {
      const sse = restStream(t.url, admin, '?channel=fabric');
      await until(() => sse.state.status === 200, 10_000, 'the SSE stream to open');
      const started = await rest(t.url, admin, 'POST', `${PATH}/apply`);
      expect(started.status).toBe(202);
      expect(started.body).toEqual({ apply_job_id: expect.any(String), created: true, id: 1, message: 'fabric apply started on 3 compute nodes' });
      const jobId = started.body.apply_job_id as string;
      const latest = await waitDone(jobId);
      expect(latest).toMatchObject({ job_id: jobId, job_type: 'fabric_apply', job_status: 'failed', state: 'apply_failed', progress: 100, total_nodes: 3, completed_nodes: 0, failed_nodes: 3, fabric_id: '1' });
      const byIp = new Map<string, any>(latest.nodes.map((n: any) => [n.node_ip, n]));
      expect(byIp.get(noSshd.address)).toMatchObject({ ok: false, reachable: false, finished: true, error: expect.stringMatching(/connection refused/) });
      expect(byIp.get(silent.address)).toMatchObject({ ok: false, reachable: false, finished: true, error: expect.stringMatching(/no SSH session within 1500 ms/) });
      expect(byIp.get(sshdA.address)).toMatchObject({ ok: false, reachable: true, finished: true, error: '`apt-get install -y frr` exited 100' });
      expect(byIp.get(sshdA.address).steps.map((s: any) => [s.step, s.status])).toEqual([['connect', 'ok'], ['install_frr', 'failed']]);
      // The headline is the first failure verbatim, whichever node it was.
      const first = latest.nodes.find((n: any) => n.fqdn === latest.first_fail_node);
      expect(first).toBeDefined();
      expect(latest.first_fail_error).toBe(first.error);
      // Nothing past the failed step ran on the node.
      expect(await lab.calls(sshdA)).toEqual([{ command: 'apt-get', args: 'install -y frr' }]);

      // fabric-config: failed, with the job inline.
      const config = await rest(t.url, reader, 'GET', PATH);
      expect(config.body.rollout_status).toBe('failed');
      expect(config.body.last_job).toMatchObject({ job_id: jobId, first_fail_node: latest.first_fail_node, first_fail_error: latest.first_fail_error });
      const viaGql = await gql(t.url, reader, '{ fabricConfig { rolloutStatus lastJob } }');
      expect(viaGql.data!.fabricConfig.lastJob).toMatchObject({ job_id: jobId, job_status: 'failed' });

      // Events: started, one outcome per node, the end; never the password.
      const events = await eventsOf(jobId);
      expect(events[0]!.type).toBe('fabric.apply_started');
      expect(events.filter((e) => e.type === 'fabric.node_failed').map((e) => e.payload.node_ip).sort()).toEqual([noSshd.address, silent.address, sshdA.address].sort());
      expect(events[events.length - 1]).toMatchObject({ type: 'fabric.apply_failed', payload: { job_id: jobId, state: 'apply_failed', progress: 100 } });
      for (const e of events) expect(e.payload).toMatchObject({ job_id: jobId, state: e.type.slice('fabric.'.length), node_ip: expect.any(String), fqdn: expect.any(String), progress: expect.any(Number) });
      expect(JSON.stringify(events)).not.toContain(BGP_PASSWORD);
      expect(JSON.stringify(latest)).not.toContain(BGP_PASSWORD);
      // The REST SSE channel `fabric` carried them as fabric_switch.
      await until(() => sse.messages.some((m) => m.data.payload?.state === 'apply_failed'), 10_000, 'apply_failed on the SSE channel');
      sse.stop();
      const mine = sse.messages.filter((m) => m.data.subject === jobId);
      expect(mine.length).toBe(events.length);
      expect(new Set(mine.map((m) => m.event))).toEqual(new Set(['fabric_switch']));

      // The post-deploy checklist of the failed node: connect done, install failed, the rest pending.
      const checklist = await rest(t.url, reader, 'GET', `${PATH}/node/${sshdA.address}/postdeploy`);
      expect(checklist.status).toBe(200);
      expect(checklist.body.map((s: any) => [s.step, s.status])).toEqual([
        ['connect', 'completed'], ['install_frr', 'failed'], ['divert_config', 'pending'], ['vtep_interface', 'pending'],
        ['write_config', 'pending'], ['mtu_sync', 'pending'], ['restart_frr', 'pending'], ['verify_bgp', 'pending'],
      ]);
      expect(checklist.body[1]).toMatchObject({ step_id: `${jobId}:install_frr`, node_ip: sshdA.address, bmc_ip: bmcOf.get(metalIds[sshdA.index]!), job_id: jobId, progress: 0, message: '`apt-get install -y frr` exited 100' });
      expect(checklist.body[0]).toMatchObject({ progress: 100 });
      // Every step has its times (the seed types them as strings): a step not reached is as old as
      // the job's checklist for the node (issue 21 item 17); a reached one has its own.
      const made = (await prisma().fabricJobNode.findUniqueOrThrow({ where: { jobId_nodeId: { jobId, nodeId: metalIds[sshdA.index]! } } })).createdAt.toISOString();
      for (const step of checklist.body.slice(2)) expect([step.step, step.created_at, step.updated_at]).toEqual([step.step, made, made]);
      for (const step of checklist.body.slice(0, 2)) {
        expect(typeof step.created_at).toBe('string');
        expect(Date.parse(step.updated_at)).toBeGreaterThanOrEqual(Date.parse(step.created_at));
      }
      const gqlList = await gql(t.url, reader, 'query ($ip: String!) { fabricNodePostdeploy(nodeIp: $ip) { step createdAt updatedAt } }', { ip: sshdA.address });
      expect(gqlList.errors).toBeUndefined();
      expect((gqlList.data!.fabricNodePostdeploy as { createdAt: string }[]).slice(2).every((x) => x.createdAt === made)).toBe(true);
    } finally {
      await lab.setFakeExit(sshdA, 'apt-get', 0);
    }
  });

  it('strict mode: the first failure stops the fan-out and every touched node goes back to baseline; the job ends failed', async () => {
    await useNodes([sshdA, sshdB]);
    // A fails its install 3 s in, by when B has certainly begun its own (10 s): both are touched.
    // (A failing at once lost that race in a loaded CI run: B had not connected yet, "1 of 1".)
    await lab.setFakeExit(sshdA, 'apt-get', 100);
    await slowAptGet(sshdA, 3);
    await slowAptGet(sshdB, 10);
    try {
      const started = await gql(t.url, admin, 'mutation { applyFabric(strict: true) { applyJobId created id message job { strict jobStatus } } }');
      expect(started.errors).toBeUndefined();
      expect(started.data!.applyFabric).toMatchObject({ created: true, id: 1, job: { strict: true, jobStatus: 'running' } });
      const jobId = started.data!.applyFabric.applyJobId as string;
      const latest = await waitDone(jobId);
      expect(latest).toMatchObject({ job_status: 'failed', state: 'apply_failed', strict: true, first_fail_node: `cn${sshdA.index}.lab.example`, first_fail_error: '`apt-get install -y frr` exited 100' });
      expect(latest.error).toMatch(/^strict mode: cn\d\.lab\.example failed \(`apt-get install -y frr` exited 100\); 2 of 2 touched node\(s\) rolled back to baseline$/);
      for (const node of [sshdA, sshdB]) {
        const row = latest.nodes.find((n: any) => n.node_ip === node.address);
        expect(row).toMatchObject({ rolled_back: true, ok: false });
        expect(row.steps.filter((s: any) => s.phase === 'teardown').map((s: any) => [s.step, s.status])).toEqual([
          ['connect', 'ok'], ['stop_frr', 'ok'], ['restore_config', 'ok'], ['remove_vtep', 'ok'], ['restore_mtu', 'skipped'], ['release_vtep', 'ok'],
        ]);
        expect((await lab.calls(node)).map((c) => `${c.command} ${c.args}`)).toEqual(expect.arrayContaining(['systemctl stop frr', 'dpkg-divert --local --rename --divert /etc/frr/frr.conf.distrib --remove /etc/frr/frr.conf']));
        expect(await hasVtep0(node)).toBe(false);
      }
      // B was stopped in the middle of its install, not failed by it: the headline stays A's.
      expect(latest.nodes.find((n: any) => n.node_ip === sshdB.address).error).toBe('stopped: strict mode rolls back after the first failure');
      expect(await prisma().fabricVtep.count()).toBe(0);
      expect((await rest(t.url, admin, 'GET', PATH)).body.rollout_status).toBe('failed');
      const types = (await eventsOf(jobId)).map((e) => e.type);
      expect(types.indexOf('fabric.apply_rolling_back')).toBeGreaterThan(types.indexOf('fabric.node_failed'));
      expect(types.filter((x) => x === 'fabric.node_rolled_back')).toHaveLength(2);
    } finally {
      await lab.setFakeExit(sshdA, 'apt-get', 0);
      await slowAptGet(sshdA, 0);
      await slowAptGet(sshdB, 0);
    }
  });

  it('cancel mid-rollout: 202 at once, idempotent, apply_cancelling then apply_cancelled, every touched node back to baseline; 404 afterwards and for any other id', async () => {
    await useNodes([sshdA, sshdB]);
    await slowAptGet(sshdA, 30);
    await slowAptGet(sshdB, 30);
    // The event hub shows platform (tenant-less) events to platform admins only (src/events/hub.ts).
    const client = wsClient(t.url, admin);
    try {
      const started = await rest(t.url, admin, 'POST', `${PATH}/apply`);
      expect(started.status).toBe(202);
      const jobId = started.body.apply_job_id as string;
      const sub = wsSubscribe(client, 'subscription ($id: ID!) { fabricRollout(jobId: $id) { jobId state progress nodeIp type } }', { id: jobId });
      await waitStep(jobId, sshdA.address, 'install_frr', 'running');
      await waitStep(jobId, sshdB.address, 'install_frr', 'running');

      // The same apply again returns the running job; any other fabric job is CONFLICT naming it.
      const again = await rest(t.url, admin, 'POST', `${PATH}/apply`);
      expect(again.status).toBe(202);
      expect(again.body).toMatchObject({ apply_job_id: jobId, created: false });
      const other = await rest(t.url, admin, 'POST', `${PATH}/node/${sshdA.address}/apply`);
      expect(other.status).toBe(409);
      expect(other.body.error).toMatchObject({ code: 'CONFLICT', details: { job_id: jobId } });
      expect((await rest(t.url, admin, 'DELETE', `${PATH}/node/${sshdA.address}`)).status).toBe(409);

      const cancel = await rest(t.url, admin, 'POST', `${PATH}/apply/${jobId}/cancel`);
      expect(cancel.status).toBe(202);
      expect(cancel.body).toMatchObject({ job_id: jobId, state: 'apply_cancelling' });
      const twice = await rest(t.url, admin, 'POST', `${PATH}/apply/${jobId}/cancel`);
      expect(twice.status).toBe(202);
      expect(twice.body.job_id).toBe(jobId);

      const latest = await waitDone(jobId);
      expect(latest).toMatchObject({ job_status: 'failed', state: 'apply_cancelled', first_fail_node: '', first_fail_error: '', cancel_requested_at: expect.any(String) });
      expect(latest.error).toBe('cancelled: 2 of 2 touched node(s) back to baseline');
      for (const node of [sshdA, sshdB]) {
        const row = latest.nodes.find((n: any) => n.node_ip === node.address);
        expect(row).toMatchObject({ rolled_back: true, error: 'cancelled before this node finished', reachable: true });
        expect(await hasVtep0(node)).toBe(false);
        expect((await lab.calls(node)).map((c) => `${c.command} ${c.args}`)).toContain('systemctl stop frr');
      }
      const types = (await eventsOf(jobId)).map((e) => e.type);
      expect(types.filter((x) => x === 'fabric.apply_cancelling')).toHaveLength(1);
      expect(types.indexOf('fabric.apply_cancelled')).toBeGreaterThan(types.indexOf('fabric.apply_cancelling'));
      expect(types[types.length - 1]).toBe('fabric.apply_cancelled');
      // Back to baseline is a saved config not rolled out.
      expect((await rest(t.url, admin, 'GET', PATH)).body).toMatchObject({ rollout_status: 'pending', last_job: null });

      // The subscription saw the same sequence, from the first event.
      await until(() => sub.events.some((e) => e.state === 'apply_cancelled'), 10_000, 'apply_cancelled on fabricRollout');
      const states = sub.events.map((e) => e.state as string);
      expect(states[0]).toBe('apply_started');
      expect(states.indexOf('apply_cancelled')).toBeGreaterThan(states.indexOf('apply_cancelling'));
      expect(sub.events.every((e) => e.jobId === jobId && e.type === `fabric.${e.state}`)).toBe(true);
      sub.stop();

      // Terminal now: 404. So are an unknown UUID, a malformed id and the GraphQL face of them.
      expect((await rest(t.url, admin, 'POST', `${PATH}/apply/${jobId}/cancel`)).status).toBe(404);
      expect((await rest(t.url, admin, 'POST', `${PATH}/apply/00000000-0000-7000-8000-000000000000/cancel`)).status).toBe(404);
      expect((await rest(t.url, admin, 'POST', `${PATH}/apply/not-a-uuid/cancel`)).status).toBe(404);
      expect((await rest(t.url, admin, 'POST', `${PATH}/apply/${encodeURIComponent("1' OR '1'='1")}/cancel`)).status).toBe(404);
      expect(codeOf(await gql(t.url, admin, 'mutation ($id: ID!) { cancelFabricApply(jobId: $id) { jobId } }', { id: jobId }))).toBe('NOT_FOUND');
    } finally {
      await client.dispose();
      await slowAptGet(sshdA, 0);
      await slowAptGet(sshdB, 0);
    }
  });

  it('DELETE node: a teardown job back to baseline (202 with removed, steps, job_id); its id is not a cancellable apply', async () => {
    await useNodes([sshdA]);
    // A vtep0 and an allocation from an earlier life of the node.
    await lab.inNode(sshdA, ['ip', 'link', 'add', 'vtep0', 'type', 'bridge']);
    await prisma().fabricVtep.create({ data: { ip: '10.255.0.9', nodeId: metalIds[sshdA.index]! } });
    const res = await rest(t.url, admin, 'DELETE', `${PATH}/node/${sshdA.address}`);
    expect(res.status).toBe(202);
    expect(res.body).toEqual({
      message: `teardown of ${sshdA.address} started`, removed: true, job_id: expect.any(String),
      steps: ['connect', 'stop_frr', 'restore_config', 'remove_vtep', 'restore_mtu', 'release_vtep'],
    });
    expect((await rest(t.url, admin, 'POST', `${PATH}/apply/${res.body.job_id}/cancel`)).status).toBe(404);
    const latest = await waitDone(res.body.job_id);
    expect(latest).toMatchObject({ job_type: 'fabric_teardown', scope: 'node', target_node_ip: sshdA.address, job_status: 'completed', state: 'teardown_completed', completed_nodes: 1 });
    expect(latest.nodes[0].steps.map((s: any) => [s.step, s.status])).toEqual([
      ['connect', 'ok'], ['stop_frr', 'ok'], ['restore_config', 'ok'], ['remove_vtep', 'ok'], ['restore_mtu', 'skipped'], ['release_vtep', 'ok'],
    ]);
    expect(await hasVtep0(sshdA)).toBe(false);
    expect(await prisma().fabricVtep.count()).toBe(0);
    const types = (await eventsOf(res.body.job_id)).map((e) => e.type);
    expect(types[0]).toBe('fabric.teardown_started');
    expect(types[types.length - 1]).toBe('fabric.teardown_completed');
  });

  it('permissions: rollouts need fabric:admin (platform admin holds it), reads a platform grant; fabric:write and a tenant admin are refused', async () => {
    await useNodes([sshdA]);
    for (const [method, url] of [['POST', `${PATH}/apply`], ['POST', `${PATH}/node/${sshdA.address}/apply`], ['DELETE', `${PATH}/node/${sshdA.address}`],
      ['POST', `${PATH}/apply/00000000-0000-7000-8000-000000000000/cancel`]] as const) {
      expect([url, (await rest(t.url, reader, method, url)).status]).toEqual([url, 403]);
      expect([url, (await rest(t.url, fabricWriter, method, url)).status]).toEqual([url, 403]);
      expect([url, (await rest(t.url, tenantAdmin, method, url)).status]).toEqual([url, 403]);
      expect([url, (await rest(t.url, null, method, url)).status]).toEqual([url, 401]);
    }
    // fabric:admin passes the decision: an unknown job is then NOT_FOUND, not PERMISSION_DENIED.
    expect((await rest(t.url, fabricAdmin, 'POST', `${PATH}/apply/00000000-0000-7000-8000-000000000000/cancel`)).status).toBe(404);
    expect((await rest(t.url, fabricAdmin, 'POST', `${PATH}/node/10.9.9.9/apply`)).status).toBe(404);
    expect((await rest(t.url, reader, 'GET', `${PATH}/latest`)).status).toBe(200);
    expect((await rest(t.url, tenantAdmin, 'GET', `${PATH}/latest`)).status).toBe(403);
    expect((await rest(t.url, tenantAdmin, 'GET', `${PATH}/node/${sshdA.address}/postdeploy`)).status).toBe(403);
    expect(codeOf(await gql(t.url, reader, 'mutation { applyFabric { applyJobId } }'))).toBe('PERMISSION_DENIED');
    expect(codeOf(await gql(t.url, tenantAdmin, '{ fabricLatestJob { jobId } }'))).toBe('PERMISSION_DENIED');
    // Nothing was queued by the refusals.
    expect(await prisma().fabricJob.count({ where: { jobStatus: 'running' } })).toBe(0);
  });

  it('hostile and unknown ids: 4xx naming the field before any side effect', async () => {
    await useNodes([sshdA]);
    const before = await prisma().fabricJob.count();
    for (const bad of ['x;reboot', '10.0.0.300', '::1', '$(id)', '1.2.3.4 ']) {
      const r = await rest(t.url, admin, 'POST', `${PATH}/node/${encodeURIComponent(bad)}/apply`);
      expect([bad, r.status, r.body.error?.details?.field]).toEqual([bad, 400, 'path.node_ip']);
      const d = await rest(t.url, admin, 'DELETE', `${PATH}/node/${encodeURIComponent(bad)}`);
      expect([bad, d.status]).toEqual([bad, 400]);
      const p = await rest(t.url, admin, 'GET', `${PATH}/node/${encodeURIComponent(bad)}/postdeploy`);
      expect([bad, p.status]).toEqual([bad, 400]);
    }
    expect((await rest(t.url, admin, 'POST', `${PATH}/node/10.9.9.9/apply`)).status).toBe(404);
    expect((await rest(t.url, admin, 'GET', `${PATH}/node/10.9.9.9/postdeploy`)).status).toBe(404);
    expect((await rest(t.url, admin, 'GET', `${PATH}/batches/${newId('CommandBatch')}/postdeploy`)).status).toBe(404);
    expect((await rest(t.url, admin, 'POST', `${PATH}/apply/${'a'.repeat(300)}/cancel`)).status).toBe(400);
    expect((await rest(t.url, admin, 'POST', `${PATH}/apply?strict=maybe`)).status).toBe(400);
    expect((await rest(t.url, admin, 'POST', `${PATH}/apply`, { strict: true })).status).toBe(400);
    const g = await gql(t.url, admin, 'mutation { applyFabricNode(nodeIp: "1.2.3.4; reboot") { applyJobId } }');
    expect([codeOf(g), g.errors?.[0]?.extensions?.details]).toEqual(['INVALID_INPUT', { field: 'nodeIp' }]);
    expect(codeOf(await gql(t.url, admin, '{ fabricJob(jobId: "\'; DROP TABLE fabric_job; --") { jobId } }'))).toBe('NOT_FOUND');
    expect(await prisma().fabricJob.count()).toBe(before);
  });

  it('a batch\'s post-deploy aggregate: each node of the metal command batch with its checklist', async () => {
    await useNodes([sshdA]);
    const tree = await prisma().node.findUniqueOrThrow({ where: { id: metalIds[sshdA.index]! } });
    const batchId = newId('CommandBatch');
    await prisma().commandBatch.create({
      data: { id: batchId, tenantId: tree.tenantId, poolId: tree.poolId, verb: 'deploy', reason: 'test', nodeIds: [metalIds[sshdA.index]!, metalIds[noSshd.index]!], digest: 'x', quorum: 0, status: 'recorded', createdBy: 'test' },
    });
    const res = await rest(t.url, reader, 'GET', `${PATH}/batches/${batchId}/postdeploy`);
    expect(res.status).toBe(200);
    expect(res.body.batch_id).toBe(batchId);
    expect(res.body.nodes.map((n: any) => [n.node_id, n.node_ip, n.bmc_ip, n.steps.length])).toEqual([
      [metalIds[sshdA.index], sshdA.address, bmcOf.get(metalIds[sshdA.index]!), 8],
      [metalIds[noSshd.index], '', bmcOf.get(metalIds[noSshd.index]!), 0],
    ]);
    expect(res.body.nodes[0].steps.every((s: any) => s.batch_id === batchId)).toBe(true);
    const viaGql = await gql(t.url, reader, 'query ($id: ID!) { fabricBatchPostdeploy(batchId: $id) { batchId nodes { nodeIp steps { step batchId } } } }', { id: batchId });
    expect(viaGql.data!.fabricBatchPostdeploy.nodes[0].steps[0]).toEqual({ step: 'connect', batchId });
  });

  it('a run taken up again resumes from its rows: finished nodes are not contacted again, the rest run, the counts add up; a held lease is respected, a lapsed one taken over, a run lost too often fails', async () => {
    await useNodes([sshdA, sshdB]);
    await lab.setFakeExit(sshdB, 'apt-get', 100);
    const callsBefore = (await lab.calls(sshdA)).length;
    const services = t.app.services;
    // The engine as a worker runs it, driven by hand here: advanceRun leases the run, its body runs under the lease.
    const deps = { prisma: services.prisma, secrets: services.secrets, log: services.log, bgpWaitMs: 1000, connectTimeoutMs: 1500, nodeTimeoutMs: 30_000 };
    const detached = new DetachedRuns({ sql: services.sql, db: services.prisma, log: services.log, leaseMs: 5000, defs: fabricRolloutWorkflows(deps) });
    const engine = { sql: services.sql, log: services.log, leaseMs: 5000, detached };
    // Not due (dueAt null): the service's own engine loop would otherwise take the run first (a new row is due at once) and advanceRun here would find it busy.
    const newRun = async (jobId: string, fields: { leaseUntil?: Date; resumes?: number; status?: string } = {}) => {
      await prisma().workflowRun.create({
        data: { id: fabricRunId(jobId), nodeId: `fabric:${jobId}`, kind: 'fabric-apply', status: fields.status ?? 'queued', params: { fabricJobId: jobId }, leaseUntil: fields.leaseUntil ?? null, resumes: fields.resumes ?? 0, dueAt: null },
      });
      return fabricRunId(jobId);
    };
    const advance = async (runId: string) => {
      const outcome = await advanceRun(engine, runId);
      await detached.settled(runId);
      return outcome;
    };
    // What a killed worker leaves: the job running, node A already finished ok, node B not, the run's lease lapsed.
    const jobId = uuidv7();
    const config = await prisma().fabricConfig.findUniqueOrThrow({ where: { id: 1 } });
    await prisma().fabricJob.create({
      data: { id: jobId, jobType: 'fabric_apply', scope: 'all', state: 'node_ok', totalNodes: 2, completedNodes: 1, progress: 50, configVersion: config.version },
    });
    await prisma().fabricJobNode.createMany({
      data: [
        { jobId, nodeId: metalIds[sshdA.index]!, position: 0, nodeIp: sshdA.address, fqdn: 'a', finished: true, ok: true, touched: true },
        { jobId, nodeId: metalIds[sshdB.index]!, position: 1, nodeIp: sshdB.address, fqdn: 'b' },
      ],
    });
    try {
      const runId = await newRun(jobId, { status: 'running', leaseUntil: new Date(Date.now() - 1000) });
      expect(await advance(runId)).toMatchObject({ kind: 'waiting' });
      const job = await prisma().fabricJob.findUniqueOrThrow({ where: { id: jobId }, include: { nodes: true } });
      expect(job).toMatchObject({ jobStatus: 'partial', state: 'apply_partial', completedNodes: 1, failedNodes: 1, firstFailNode: 'b', firstFailError: '`apt-get install -y frr` exited 100' });
      expect((await lab.calls(sshdA)).length).toBe(callsBefore);
      // The run: taken up once more, ended with the job; node B's step failed with its typed result.
      expect(await prisma().workflowRun.findUniqueOrThrow({ where: { id: runId } })).toMatchObject({ status: 'succeeded', resumes: 1, leaseUntil: null });
      const stepRows = await prisma().workflowStep.findMany({ where: { runId }, orderBy: { idx: 'asc' } });
      expect(stepRows.map((r) => [r.idx, r.name, r.status, r.attempts, r.errorCode])).toEqual([[0, 'apply-node', 'skipped', 0, null], [1, 'apply-node', 'failed', 1, 'NODE_FAILED']]);
      expect(stepRows[1]!.idempotencyKey).toBe(`${runId}:1:1`);
      // A terminal run is left alone by a late wake-up.
      expect(await advance(runId)).toEqual({ kind: 'idle', status: 'succeeded' });
      expect((await prisma().fabricJob.findUniqueOrThrow({ where: { id: jobId } })).updatedAt).toEqual(job.updatedAt);

      // A wake-up while another worker's lease is live backs off; once the lease lapsed (the worker died), the run is taken over.
      const busy = uuidv7();
      await prisma().fabricJob.create({ data: { id: busy, jobType: 'fabric_apply', scope: 'all', state: 'node_step', totalNodes: 0 } });
      const busyRun = await newRun(busy, { status: 'running', leaseUntil: new Date(Date.now() + 60_000) });
      expect(await advance(busyRun)).toMatchObject({ kind: 'busy' });
      expect((await prisma().fabricJob.findUniqueOrThrow({ where: { id: busy } })).jobStatus).toBe('running');
      await prisma().workflowRun.update({ where: { id: busyRun }, data: { leaseUntil: new Date(Date.now() - 1000) } });
      // (The busy wake-up queued a retry: the service's own worker may be the one that takes it over.)
      await advance(busyRun);
      for (let i = 0; (await prisma().fabricJob.findUniqueOrThrow({ where: { id: busy } })).jobStatus === 'running'; i += 1) {
        if (i > 300) throw new Error('the busy job was never taken over');
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect((await prisma().fabricJob.findUniqueOrThrow({ where: { id: busy } })).jobStatus).toBe('completed');
      expect(await prisma().workflowRun.findUniqueOrThrow({ where: { id: busyRun } })).toMatchObject({ status: 'succeeded', resumes: 1 });

      // A run whose worker died too often (STUCK_RESUMES) fails WORKER_LOST with its job, never left running.
      const lost = uuidv7();
      await prisma().fabricJob.create({ data: { id: lost, jobType: 'fabric_apply', scope: 'all', state: 'node_step', totalNodes: 0 } });
      const lostRun = await newRun(lost, { status: 'running', leaseUntil: new Date(Date.now() - 1000), resumes: 3 });
      await advance(lostRun);
      expect(await prisma().fabricJob.findUniqueOrThrow({ where: { id: lost } })).toMatchObject({ jobStatus: 'failed', state: 'apply_failed', progress: 100, error: expect.stringMatching(/worker was lost/) });
      expect(await prisma().workflowRun.findUniqueOrThrow({ where: { id: lostRun } })).toMatchObject({ status: 'failed', lastErrorCode: 'WORKER_LOST', leaseUntil: null });
      expect((await prisma().fabricConfig.findUniqueOrThrow({ where: { id: 1 } })).rolloutStatus).toBe('failed');
      expect((await eventsOf(lost)).map((e) => e.type)).toEqual(['fabric.apply_failed']);
    } finally {
      await lab.setFakeExit(sshdB, 'apt-get', 0);
    }
  });

  it('GraphQL: per-node apply, teardown and the job by id walk the same rows as REST', async () => {
    await useNodes([sshdA]);
    await lab.setFakeExit(sshdA, 'apt-get', 100);
    try {
      const applied = await gql(t.url, admin, 'mutation ($ip: String!) { applyFabricNode(nodeIp: $ip) { applyJobId created id message job { scope targetNodeIp totalNodes } } }', { ip: sshdA.address });
      expect(applied.errors).toBeUndefined();
      expect(applied.data!.applyFabricNode).toMatchObject({ created: true, id: 1, message: `fabric apply started on node ${sshdA.address}`, job: { scope: 'node', targetNodeIp: sshdA.address, totalNodes: 1 } });
      const job = await waitDone(applied.data!.applyFabricNode.applyJobId);
      expect(job).toMatchObject({ scope: 'node', target_node_ip: sshdA.address, job_status: 'failed' });
      const byId = await gql(t.url, reader, 'query ($id: ID!) { fabricJob(jobId: $id) { jobId jobStatus firstFailError nodes { nodeIp reachable steps { step status } } } }', { id: job.job_id });
      expect(byId.data!.fabricJob).toMatchObject({ jobId: job.job_id, jobStatus: 'failed', firstFailError: '`apt-get install -y frr` exited 100', nodes: [{ nodeIp: sshdA.address, reachable: true }] });
    } finally {
      await lab.setFakeExit(sshdA, 'apt-get', 0);
    }
    const torn = await gql(t.url, admin, 'mutation ($ip: String!) { teardownFabricNode(nodeIp: $ip) { jobId removed steps message job { jobType } } }', { ip: sshdA.address });
    expect(torn.errors).toBeUndefined();
    expect(torn.data!.teardownFabricNode).toMatchObject({ job: { jobType: 'fabric_teardown' }, steps: ['connect', 'stop_frr', 'restore_config', 'remove_vtep', 'restore_mtu', 'release_vtep'] });
    const done = await waitDone(torn.data!.teardownFabricNode.jobId);
    expect(done).toMatchObject({ job_type: 'fabric_teardown', job_status: 'completed' });
    const latest = await gql(t.url, reader, '{ fabricLatestJob { jobId jobType } }');
    expect(latest.data!.fabricLatestJob).toEqual({ jobId: torn.data!.teardownFabricNode.jobId, jobType: 'fabric_teardown' });
  });
});
