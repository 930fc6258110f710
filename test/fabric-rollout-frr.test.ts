import fs from 'node:fs/promises';
import path from 'node:path';
import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree } from './helpers/fixtures';
import { bgpPeers } from './helpers/frr-lab';
import { startSshNodes, type SshNode, type SshNodes } from './helpers/ssh-nodes';

/**
 * Rollouts against real FRR (test/helpers/ssh-nodes.ts with `lan` and `frr`): three compute
 * nodes on one management segment, each with its own /etc/frr and real bgpd/zebra behind the
 * stand-in `systemctl`, started only as the node's /etc/frr/daemons says (Debian ships bgpd=no).
 * The gateway hosts the software route reflector; the bgp underlay runs over the segment. The
 * rollout's own verify_bgp step must see the sessions Established; a teardown must leave the
 * node's files, interfaces, MTU and daemons as they were before the first apply.
 */

jest.setTimeout(240_000);

const PATH = '/controlnode/fabric-config';
const BGP_PASSWORD = 'frrRollout-S3cret-42';
/** The MTU one host starts with, so the teardown's restore is visible (the rollout sets 1500). */
const ODD_MTU = 1450;

let t: TestApp;
let lab: SshNodes;
let admin: string;
let gw: SshNode;
let host1: SshNode;
let host2: SshNode;
const metalIds: string[] = [];
/** Each node's /etc/frr files before the fabric touched it. */
const pristine = new Map<number, { conf: string; daemons: string }>();

const prisma = () => t.app.services.prisma;

async function waitDone(jobId: string): Promise<any> {
  const deadline = Date.now() + 180_000;
  for (;;) {
    const r = await gql(t.url, admin, 'query ($id: ID!) { fabricJob(jobId: $id) { jobStatus } }', { id: jobId });
    if (r.data?.fabricJob && r.data.fabricJob.jobStatus !== 'running') break;
    if (Date.now() > deadline) throw new Error(`fabric job ${jobId} still running`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  const job = await gql(t.url, admin, `query ($id: ID!) { fabricJob(jobId: $id) { jobId jobType jobStatus state error firstFailNode firstFailError completedNodes failedNodes
    nodes { nodeIp fqdn ok reachable error vtepIp rolledBack steps { step phase status message } } } }`, { id: jobId });
  return job.data!.fabricJob;
}

async function addrs(node: SshNode): Promise<{ ifname: string; mtu: number; addr_info: { family: string; local: string; prefixlen: number }[] }[]> {
  return JSON.parse(await lab.inNode(node, ['ip', '-j', 'addr', 'show']));
}

const etc = (node: SshNode, file: string) => fs.readFile(path.join(node.frrFiles!.etc, file), 'utf8');
const exists = (node: SshNode, file: string) => fs.access(path.join(node.frrFiles!.etc, file)).then(() => true, () => false);

/** The node as it was before the fabric touched it: its files, no vtep0, its MTU, no daemons, no VTEP. */
async function expectBaseline(node: SshNode): Promise<void> {
  expect(await etc(node, 'frr.conf')).toBe(pristine.get(node.index)!.conf);
  expect(await etc(node, 'daemons')).toBe(pristine.get(node.index)!.daemons);
  expect(await exists(node, 'frr.conf.distrib')).toBe(false);
  const links = await addrs(node);
  expect(links.some((l) => l.ifname === 'vtep0')).toBe(false);
  expect(links.find((l) => l.ifname === 'eth1')!.mtu).toBe(ODD_MTU);
  expect(await lab.frrDaemons(node)).toEqual([]);
  expect(await prisma().fabricVtep.count({ where: { nodeId: metalIds[node.index]! } })).toBe(0);
}

beforeAll(async () => {
  lab = await startSshNodes('rollout-frr', 3, { lan: true, frr: true, frrDaemonsFile: true });
  [gw, host1, host2] = lab.nodes as [SshNode, SshNode, SshNode];
  for (const node of lab.nodes) pristine.set(node.index, { conf: await etc(node, 'frr.conf'), daemons: await etc(node, 'daemons') });
  await lab.inNode(host2, ['ip', 'link', 'set', 'dev', 'eth1', 'mtu', String(ODD_MTU)]);
  // Sessions come up within a connect retry (10 s) of the reflector's start.
  t = await startTestApp({ fabricBgpWaitMs: 30_000, fabricSshConnectTimeoutMs: 5000, fabricNodeTimeoutMs: 120_000 });
  admin = t.adminToken;
  const tree = await makeTenantTree(prisma(), 'rollout-frr', { pools: 1, nodesPerPool: 3 });
  await prisma().node.updateMany({ where: { id: { in: tree.nodes.map((n) => n.id) } }, data: { provisionState: 'deployed' } });
  const keyRef = await t.app.services.secrets!.put(null, lab.clientPrivateKey);
  for (const [i, node] of lab.nodes.entries()) {
    metalIds[i] = tree.nodes[i]!.id;
    await prisma().computeNode.create({
      data: {
        nodeId: metalIds[i]!, osIp: node.lanAddress!, fqdn: i === 0 ? 'gw.lab.example' : `host${i}.lab.example`,
        sshKeyRef: keyRef, sshHostKey: null, isGateway: i === 0,
      },
    });
  }
  const saved = await rest(t.url, admin, 'POST', PATH, {
    as: 65010, external_route_reflector: false, ospf_enabled: false, management_cidr: lab.lan!.cidr,
    router_id_cidr: '172.30.210.1/24', advertise_all_vni: true, bgp_password: BGP_PASSWORD,
    expected_nodes: 3, expected_vms: 30, vxlan_mtu: 1500,
  });
  expect(saved.status).toBe(200);
});

afterAll(async () => {
  await t?.stop();
  await lab?.stop();
});

describe('fabric rollout over real FRR', () => {
  it('applies every node: the rollout\'s own verify_bgp sees each session Established; the fabric is ready; a re-run changes nothing', async () => {
    const started = await rest(t.url, admin, 'POST', `${PATH}/apply`);
    expect(started.status).toBe(202);
    const job = await waitDone(started.body.apply_job_id);
    expect(job).toMatchObject({ jobStatus: 'completed', state: 'apply_completed', completedNodes: 3, failedNodes: 0, firstFailNode: '', firstFailError: '', error: '' });
    for (const node of job.nodes) {
      expect(node.steps.map((s: any) => [s.step, s.status])).toEqual([
        ['connect', 'ok'], ['install_frr', 'ok'], ['divert_config', 'ok'], ['vtep_interface', 'ok'], ['write_config', 'ok'],
        ['mtu_sync', 'ok'], ['restart_frr', 'ok'], ['verify_bgp', 'ok'],
      ]);
    }
    const byIp = new Map<string, any>(job.nodes.map((n: any) => [n.nodeIp, n]));
    // The clients waited for their reflector, the reflector only for bgpd (its peers are dynamic).
    for (const host of [host1, host2]) expect(byIp.get(host.lanAddress!).steps[7].message).toBe(`BGP neighbor ${gw.lanAddress} Established`);
    expect(byIp.get(gw.lanAddress!).steps[7].message).toBe('bgpd answers (no static neighbour)');
    // Independently of the rollout: FRR itself says so.
    for (const host of [host1, host2]) {
      const peers = await bgpPeers(lab, host);
      expect(peers.filter((p) => p.peer === gw.lanAddress).map((p) => p.state)).toEqual(expect.arrayContaining(['Established']));
    }

    for (const node of lab.nodes) {
      const vtep = byIp.get(node.lanAddress!).vtepIp as string;
      const vtep0 = (await addrs(node)).find((l) => l.ifname === 'vtep0');
      expect(vtep0?.addr_info.filter((a) => a.family === 'inet').map((a) => `${a.local}/${a.prefixlen}`)).toEqual([`${vtep}/32`]);
      const conf = await etc(node, 'frr.conf');
      expect(conf).toContain('router bgp 65010');
      expect(conf).toContain(`bgp router-id ${vtep}`);
      // The distribution's file is kept by the diversion; bgpd is enabled for frrinit.
      expect(await etc(node, 'frr.conf.distrib')).toBe(pristine.get(node.index)!.conf);
      expect(await etc(node, 'daemons')).toMatch(/^bgpd=yes$/m);
      expect((await lab.frrDaemons(node)).map((d) => d.daemon)).toContain('bgpd');
    }
    expect((await addrs(host2)).find((l) => l.ifname === 'eth1')!.mtu).toBe(1500);
    const config = await rest(t.url, admin, 'GET', PATH);
    expect(config.body).toMatchObject({ rollout_status: 'ready', last_job: null });
    const events = await prisma().event.findMany({ where: { subject: started.body.apply_job_id } });
    expect(JSON.stringify(events.map((e) => e.payload))).not.toContain(BGP_PASSWORD);
    expect(events.filter((e) => e.type === 'fabric.node_ok')).toHaveLength(3);
    // The password did reach the nodes, in their frr.conf only.
    expect(await etc(host1, 'frr.conf')).toContain(`password ${BGP_PASSWORD}`);

    // Idempotent: the same apply again leaves every file and interface as it was.
    const before = await Promise.all(lab.nodes.map(async (n) => [await etc(n, 'frr.conf'), await etc(n, 'frr.conf.distrib'), await etc(n, 'daemons'), JSON.stringify((await addrs(n)).map((l) => [l.ifname, l.mtu, l.addr_info.map((a) => a.local)]))]));
    const again = await rest(t.url, admin, 'POST', `${PATH}/apply`);
    const rerun = await waitDone(again.body.apply_job_id);
    expect(rerun).toMatchObject({ jobStatus: 'completed', completedNodes: 3 });
    const after = await Promise.all(lab.nodes.map(async (n) => [await etc(n, 'frr.conf'), await etc(n, 'frr.conf.distrib'), await etc(n, 'daemons'), JSON.stringify((await addrs(n)).map((l) => [l.ifname, l.mtu, l.addr_info.map((a) => a.local)]))]));
    expect(after).toEqual(before);
  });

  it('DELETE node: the teardown puts the node back to its baseline (files, vtep0, MTU, daemons) and releases its VTEP', async () => {
    const res = await rest(t.url, admin, 'DELETE', `${PATH}/node/${host2.lanAddress}`);
    expect(res.status).toBe(202);
    expect(res.body.removed).toBe(true);
    const job = await waitDone(res.body.job_id);
    expect(job).toMatchObject({ jobType: 'fabric_teardown', jobStatus: 'completed', state: 'teardown_completed' });
    expect(job.nodes[0].steps.map((s: any) => [s.step, s.status, s.message])).toEqual([
      ['connect', 'ok', expect.any(String)],
      ['stop_frr', 'ok', 'frr stopped'],
      ['restore_config', 'ok', '/etc/frr/frr.conf restored from /etc/frr/frr.conf.distrib'],
      ['remove_vtep', 'ok', 'vtep0 removed'],
      ['restore_mtu', 'ok', `eth1 MTU ${ODD_MTU}`],
      ['release_vtep', 'ok', expect.stringMatching(/^VTEP 172\.30\.210\.\d+ released$/)],
    ]);
    await expectBaseline(host2);
    expect(await prisma().fabricNodeBaseline.count({ where: { nodeId: metalIds[host2.index]! } })).toBe(0);
    // One compute node no longer carries the fabric: saved, not rolled out everywhere.
    expect((await rest(t.url, admin, 'GET', PATH)).body.rollout_status).toBe('pending');
  });

  it('a node whose BGP never comes up fails with "BGP neighbor X not Established" after the bounded wait; the fabric is degraded with the job inline', async () => {
    // The reflector's FRR is stopped: host2's session to it can never be Established.
    const stop = await rest(t.url, admin, 'DELETE', `${PATH}/node/${gw.lanAddress}`);
    expect((await waitDone(stop.body.job_id)).jobStatus).toBe('completed');
    const started = await rest(t.url, admin, 'POST', `${PATH}/node/${host2.lanAddress}/apply`);
    expect(started.status).toBe(202);
    expect(started.body.message).toBe(`fabric apply started on node ${host2.lanAddress}`);
    const job = await waitDone(started.body.apply_job_id);
    const reason = `BGP neighbor ${gw.lanAddress} not Established`;
    expect(job).toMatchObject({ jobStatus: 'failed', state: 'apply_failed', firstFailNode: 'host2.lab.example', firstFailError: reason, failedNodes: 1 });
    expect(job.nodes[0]).toMatchObject({ ok: false, reachable: true, error: reason });
    expect(job.nodes[0].steps.map((s: any) => s.status)).toEqual(['ok', 'ok', 'ok', 'ok', 'ok', 'ok', 'ok', 'failed']);
    const config = await rest(t.url, admin, 'GET', PATH);
    expect(config.body.rollout_status).toBe('degraded');
    expect(config.body.last_job).toMatchObject({ job_id: started.body.apply_job_id, first_fail_node: 'host2.lab.example', first_fail_error: reason });
    expect(config.body.last_job.nodes[0]).toMatchObject({ node_ip: host2.lanAddress, ok: false, reachable: true, error: reason });
    const latest = await rest(t.url, admin, 'GET', `${PATH}/latest`);
    expect(latest.body).toMatchObject({ job_id: started.body.apply_job_id, first_fail_error: reason });
    const checklist = await rest(t.url, admin, 'GET', `${PATH}/node/${host2.lanAddress}/postdeploy`);
    expect(checklist.body[7]).toMatchObject({ step: 'verify_bgp', status: 'failed', message: reason, progress: 0 });
  });

  it('cancel while a node waits for BGP: the node goes back to its baseline for real (files, daemons, vtep0, MTU)', async () => {
    // The reflector is still torn down (previous test): host2's verify_bgp waits its full bound.
    const started = await rest(t.url, admin, 'POST', `${PATH}/node/${host2.lanAddress}/apply`);
    const jobId = started.body.apply_job_id as string;
    const deadline = Date.now() + 60_000;
    for (;;) {
      const r = await gql(t.url, admin, 'query ($id: ID!) { fabricJob(jobId: $id) { nodes { steps { step status } } } }', { id: jobId });
      if (r.data!.fabricJob.nodes[0].steps.some((s: any) => s.step === 'verify_bgp' && s.status === 'running')) break;
      if (Date.now() > deadline) throw new Error('verify_bgp never started');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect((await addrs(host2)).find((l) => l.ifname === 'eth1')!.mtu).toBe(1500);
    expect(await exists(host2, 'frr.conf.distrib')).toBe(true);
    const cancel = await rest(t.url, admin, 'POST', `${PATH}/apply/${jobId}/cancel`);
    expect(cancel.status).toBe(202);
    const job = await waitDone(jobId);
    expect(job).toMatchObject({ jobStatus: 'failed', state: 'apply_cancelled', firstFailNode: '', error: 'cancelled: 1 of 1 touched node(s) back to baseline' });
    expect(job.nodes[0]).toMatchObject({ rolledBack: true, error: 'cancelled before this node finished' });
    expect(job.nodes[0].steps.find((s: any) => s.step === 'verify_bgp')).toMatchObject({ status: 'failed', message: 'cancelled before this node finished' });
    await expectBaseline(host2);
  });

  it('some nodes fail, others succeed: partial, the fabric degraded, first_fail_* the failed node\'s step', async () => {
    await lab.setFakeExit(host1, 'apt-get', 100);
    try {
      const started = await gql(t.url, admin, 'mutation { applyFabric { applyJobId created } }');
      const job = await waitDone(started.data!.applyFabric.applyJobId);
      expect(job).toMatchObject({ jobStatus: 'partial', state: 'apply_partial', completedNodes: 2, failedNodes: 1, error: '1 of 3 nodes failed',
        firstFailNode: 'host1.lab.example', firstFailError: '`apt-get install -y frr` exited 100' });
      const byIp = new Map<string, any>(job.nodes.map((n: any) => [n.nodeIp, n]));
      expect(byIp.get(gw.lanAddress!)).toMatchObject({ ok: true });
      expect(byIp.get(host2.lanAddress!)).toMatchObject({ ok: true });
      expect(byIp.get(host2.lanAddress!).steps[7].message).toBe(`BGP neighbor ${gw.lanAddress} Established`);
      const config = await rest(t.url, admin, 'GET', PATH);
      expect(config.body.rollout_status).toBe('degraded');
      expect(config.body.last_job).toMatchObject({ job_status: 'partial', first_fail_node: 'host1.lab.example' });
    } finally {
      await lab.setFakeExit(host1, 'apt-get', 0);
    }
  });
});
