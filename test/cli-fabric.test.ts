import fs from 'node:fs/promises';
import path from 'node:path';
import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree } from './helpers/fixtures';
import { startSshNodes, type SshNode, type SshNodes } from './helpers/ssh-nodes';
import { assertBuilt, metalctl, startCli } from './helpers/metalctl-child';

/**
 * metalctl fabric, end to end: the built CLI as a child process against a running service whose
 * compute nodes are real sshd nodes with real FRR (test/helpers/ssh-nodes.ts, as
 * fabric-rollout-frr.test.ts): a gateway (the software route reflector) and one host on one
 * management segment. plan and preflight print what the API answers; apply --watch follows the
 * rollout from the fabricRollout subscription, a line per node step, until both nodes are done;
 * cancel stops a running apply and the watcher sees it end cancelled.
 */

jest.setTimeout(240_000);

const PATH = '/controlnode/fabric-config';
const BGP_PASSWORD = 'cliFabric-S3cret-19';

let t: TestApp;
let lab: SshNodes;
let gw: SshNode;
let host: SshNode;
let env: { url: string; token: string };
const aptOriginal = new Map<string, string>();

const fqdnOf = (node: SshNode) => (node === gw ? 'gw.cli.example' : 'host1.cli.example');

async function slowAptGet(node: SshNode, seconds: number): Promise<void> {
  const file = path.join(node.dir, 'bin', 'apt-get');
  if (!aptOriginal.has(file)) aptOriginal.set(file, await fs.readFile(file, 'utf8'));
  const original = aptOriginal.get(file)!;
  await fs.writeFile(file, seconds === 0 ? original : original.replace('#!/bin/sh\n', `#!/bin/sh\nsleep ${seconds}\n`), { mode: 0o755 });
}

async function jobOf(jobId: string): Promise<any> {
  const r = await gql(t.url, t.adminToken, 'query ($id: ID!) { fabricJob(jobId: $id) { jobStatus state nodes { nodeIp fqdn ok steps { step phase status } } } }', { id: jobId });
  return r.data!.fabricJob;
}

beforeAll(async () => {
  assertBuilt();
  lab = await startSshNodes('cli-fabric', 2, { lan: true, frr: true, frrDaemonsFile: true });
  [gw, host] = lab.nodes as [SshNode, SshNode];
  t = await startTestApp({ fabricBgpWaitMs: 30_000, fabricSshConnectTimeoutMs: 5000, fabricNodeTimeoutMs: 120_000 });
  env = { url: t.url, token: t.adminToken };
  const prisma = t.app.services.prisma;
  const tree = await makeTenantTree(prisma, 'cli-fabric', { pools: 1, nodesPerPool: 2 });
  await prisma.node.updateMany({ where: { id: { in: tree.nodes.map((n) => n.id) } }, data: { provisionState: 'deployed' } });
  const keyRef = await t.app.services.secrets!.put(null, lab.clientPrivateKey);
  for (const [i, node] of lab.nodes.entries()) {
    await prisma.computeNode.create({
      data: { nodeId: tree.nodes[i]!.id, osIp: node.lanAddress!, fqdn: fqdnOf(node), sshKeyRef: keyRef, sshHostKey: null, isGateway: node === gw },
    });
  }
  const saved = await rest(t.url, t.adminToken, 'POST', PATH, {
    as: 65020, external_route_reflector: false, ospf_enabled: false, management_cidr: lab.lan!.cidr,
    router_id_cidr: '172.30.220.1/24', advertise_all_vni: true, bgp_password: BGP_PASSWORD, expected_nodes: 2, expected_vms: 20, vxlan_mtu: 1500,
  });
  expect(saved.status).toBe(200);
});

afterAll(async () => {
  await t?.stop();
  await lab?.stop();
});

describe('metalctl fabric', () => {
  it('plan: the API\'s plan as JSON, as a table, and the switch config; a bad flag is a usage error (2), a refused plan exits 1 naming the code', async () => {
    const flags = ['--management-cidr', lab.lan!.cidr, '--nos', 'sonic', '--vxlan-mtu', '1500', '--expected-nodes', '2'];
    const expected = await gql(t.url, t.adminToken, 'query ($input: FabricPlanInput!) { fabricPlan(input: $input) { planHash switchConfig risks config { routerIdBase routerIdPrefixLen } } }',
      { input: { managementCidr: lab.lan!.cidr, fabricSwitchNos: 'sonic', vxlanMtu: 1500, expectedNodes: 2 } });
    expect(expected.errors).toBeUndefined();
    const want = expected.data!.fabricPlan;

    const json = await metalctl(['fabric', 'plan', ...flags, '--json'], env);
    expect([json.code, json.stderr]).toEqual([0, '']);
    const plan = JSON.parse(json.stdout);
    expect(plan).toMatchObject({ planHash: want.planHash, risks: want.risks, config: { managementCidr: lab.lan!.cidr, fabricSwitchNos: 'sonic', vxlanMtu: 1500, bgpPassword: '' } });

    const table = await metalctl(['fabric', 'plan', ...flags], env);
    expect(table.code).toBe(0);
    expect(table.stdout).toContain(want.planHash);
    expect(table.stdout).toContain(`${want.config.routerIdBase}/${want.config.routerIdPrefixLen}`);
    expect(table.stdout).not.toContain(BGP_PASSWORD);

    const sw = await metalctl(['fabric', 'plan', ...flags, '--switch-config'], env);
    expect(sw.code).toBe(0);
    expect(sw.stdout).toBe(`${want.switchConfig.replace(/\n$/, '')}\n`);

    // The same plan from a YAML file of snake_case fields; a flag overrides the file.
    const file = path.join(lab.nodes[0]!.dir, 'plan.yaml');
    await fs.writeFile(file, `management_cidr: ${lab.lan!.cidr}\nfabric_switch_nos: sonic\nvxlan_mtu: 9000\nexpected_nodes: 2\n`);
    const fromFile = await metalctl(['fabric', 'plan', '--file', file, '--vxlan-mtu', '1500', '--json'], env);
    expect(fromFile.code).toBe(0);
    expect(JSON.parse(fromFile.stdout).planHash).toBe(want.planHash);
    await fs.writeFile(file, '- not\n- a mapping\n');
    expect((await metalctl(['fabric', 'plan', '--file', file], env)).code).toBe(2);

    const usage = await metalctl(['fabric', 'plan', '--vxlan-mtu', 'lots'], env);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/--vxlan-mtu/);

    const refused = await metalctl(['fabric', 'plan', '--management-cidr', lab.lan!.cidr, '--nos', 'sonic', '--vxlan-mtu', '100'], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/INVALID_INPUT/);
    expect(refused.stdout).toBe('');
  });

  it('preflight: every node with how it reaches the underlay (eth1 is no bridge: needs_override); --override resolves them', async () => {
    const bare = await metalctl(['fabric', 'preflight', '--underlay-cidr', lab.lan!.cidr, '--json'], env);
    expect([bare.code, bare.stderr]).toEqual([0, '']);
    const found = JSON.parse(bare.stdout);
    expect(found.ready).toBe(false);
    expect(found.nodes.map((n: any) => [n.nodeIp, n.fqdn, n.mode]).sort()).toEqual(
      [[gw.lanAddress, fqdnOf(gw), 'needs_override'], [host.lanAddress, fqdnOf(host), 'needs_override']].sort());

    const overrides = lab.nodes.flatMap((n) => ['--override', `${n.lanAddress},eth1,${n.lanAddress}/24`]);
    const fixed = await metalctl(['fabric', 'preflight', '--underlay-cidr', lab.lan!.cidr, ...overrides, '--json'], env);
    expect(fixed.code).toBe(0);
    expect(JSON.parse(fixed.stdout).nodes.map((n: any) => n.mode)).toEqual(['override', 'override']);

    const table = await metalctl(['fabric', 'preflight', '--underlay-cidr', lab.lan!.cidr], env);
    expect(table.code).toBe(0);
    for (const node of lab.nodes) expect(table.stdout).toMatch(new RegExp(`${node.lanAddress!.replace(/\./g, '\\.')}.*needs_override`));
    expect(table.stdout).toMatch(/ready: no/);

    const usage = await metalctl(['fabric', 'preflight', '--override', 'only-one-part'], env);
    expect(usage.code).toBe(2);
  });

  it('apply --watch: a line per node step from the rollout\'s events, both nodes to done, exit 0; --json one parseable line per event', async () => {
    const run = await metalctl(['fabric', 'apply', '--watch'], env);
    expect([run.code, run.stderr]).toEqual([0, '']);
    const jobId = /job ([0-9a-f-]{36})/.exec(run.stdout)![1]!;
    const job = await jobOf(jobId);
    expect(job).toMatchObject({ jobStatus: 'completed', state: 'apply_completed' });
    // Each node's progress lines: its steps in order, counting up to 8 of 8, then done.
    for (const node of lab.nodes) {
      const mine = run.stdout.split('\n').filter((l) => l.startsWith(`${fqdnOf(node)}  `));
      const counts = mine.map((l) => Number(/ (\d)\/8 /.exec(l)![1]));
      expect(counts).toEqual([...counts].sort((a, b) => a - b));
      // Step by step: every count from 0 (waiting) to 8, each one step's line.
      expect([...new Set(counts)]).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8]);
      expect(mine.at(-1)).toBe(`${fqdnOf(node)}  8/8  done`);
      for (const step of ['connect', 'install_frr', 'write_config', 'verify_bgp']) expect(mine.some((l) => l.endsWith(`${step} ok`))).toBe(true);
    }
    // No cursor movement or bar when stdout is not a terminal; the summary table at the end.
    expect(run.stdout).not.toMatch(/\u001b\[/);
    expect(run.stdout).toMatch(new RegExp(`job ${jobId} fabric_apply completed \\(apply_completed\\): 2 ok, 0 failed of 2`));
    expect(run.stdout).not.toContain(BGP_PASSWORD);

    // Again (idempotent), as JSON lines over GraphQL-over-SSE: the answer, every event of the job, the job.
    const again = await metalctl(['fabric', 'apply', '--watch', '--json', '--transport', 'sse'], env);
    expect([again.code, again.stderr]).toEqual([0, '']);
    const lines = again.stdout.trim().split('\n').map((l) => JSON.parse(l));
    const answer = lines[0];
    expect(answer).toMatchObject({ created: true, applyJobId: expect.any(String) });
    const events = lines.slice(1, -1);
    expect(events[0]).toMatchObject({ type: 'fabric.apply_started', state: 'apply_started' });
    expect(events.filter((e) => e.state === 'node_ok').map((e) => e.nodeIp).sort()).toEqual([gw.lanAddress, host.lanAddress].sort());
    expect(events.at(-1)).toMatchObject({ state: 'apply_completed', progress: 100 });
    // Exactly the job's events, each once, in order.
    const stored = await t.app.services.prisma.event.findMany({ where: { subject: answer.applyJobId }, orderBy: { id: 'asc' } });
    expect(events.map((e) => e.type)).toEqual(stored.map((e) => e.type));
    expect(lines.at(-1)).toMatchObject({ jobId: answer.applyJobId, jobStatus: 'completed', completedNodes: 2 });
  });

  it('on a terminal: a progress bar per node; cancel stops the running apply and the watcher ends cancelled (exit 1, APPLY_CANCELLED)', async () => {
    await slowAptGet(host, 30);
    try {
      const started = await metalctl(['fabric', 'apply', '--node', host.lanAddress!, '--json'], env);
      expect(started.code).toBe(0);
      const jobId = JSON.parse(started.stdout).applyJobId as string;
      const watcher = startCli(['fabric', 'watch', jobId], env, { tty: true });
      // The bar of the node, drawn on the terminal while its install runs.
      await watcher.waitFor(/host1\.cli\.example\s+\[[█░]+\] 1\/8 install_frr running|host1\.cli\.example\s+\[[█░]+\] 1\/8/, 60_000);
      const deadline = Date.now() + 60_000;
      while (!(await jobOf(jobId)).nodes[0].steps.some((s: any) => s.step === 'install_frr' && s.status === 'running')) {
        if (Date.now() > deadline) throw new Error('install_frr never started');
        await new Promise((r) => setTimeout(r, 100));
      }

      const cancel = await metalctl(['fabric', 'cancel', '--json'], env);
      expect([cancel.code, cancel.stderr]).toEqual([0, '']);
      expect(JSON.parse(cancel.stdout)).toMatchObject({ jobId, state: 'apply_cancelling' });

      const watched = await watcher.done;
      expect(watched.code).toBe(1);
      expect(watched.stdout).toMatch(/APPLY_CANCELLED/);
      expect(watched.stdout).toMatch(/rolled back/);
      // The job's own lines above the bars, the last one too (logged just before the bars stop).
      expect(watched.stdout).toMatch(/job apply_cancelling \d+%/);
      expect(watched.stdout).toMatch(/job apply_cancelled 100%/);
      expect(await jobOf(jobId)).toMatchObject({ jobStatus: 'failed', state: 'apply_cancelled' });

      // Nothing to cancel now: refused with the code.
      const again = await metalctl(['fabric', 'cancel', jobId], env);
      expect(again.code).toBe(1);
      expect(again.stderr).toMatch(/NOT_FOUND/);
      const none = await metalctl(['fabric', 'cancel'], env);
      expect(none.code).toBe(1);
      expect(none.stderr).toMatch(/NOT_FOUND/);
    } finally {
      await slowAptGet(host, 0);
    }

    // The latest job, as JSON and as a table of its nodes and steps.
    const latest = await metalctl(['fabric', 'job', '--json'], env);
    expect(latest.code).toBe(0);
    expect(JSON.parse(latest.stdout)).toMatchObject({ jobStatus: 'failed', state: 'apply_cancelled', nodes: [{ nodeIp: host.lanAddress, rolledBack: true }] });
    const byId = await metalctl(['fabric', 'job', JSON.parse(latest.stdout).jobId], env);
    expect(byId.code).toBe(0);
    expect(byId.stdout).toMatch(/host1\.cli\.example .* rolled back .*connect:ok install_frr:failed -connect:ok -stop_frr:ok/);
    expect((await metalctl(['fabric', 'job', 'not-a-job'], env)).stderr).toMatch(/^error: NOT_FOUND: /);
  });

  it('teardown --watch: one node back to its baseline, a bar of 6 teardown steps to done', async () => {
    const run = await metalctl(['fabric', 'teardown', gw.lanAddress!, '--watch'], env);
    expect([run.code, run.stderr]).toEqual([0, '']);
    const mine = run.stdout.split('\n').filter((l) => l.startsWith(`${fqdnOf(gw)}  `));
    expect([...new Set(mine.map((l) => Number(/ (\d)\/6 /.exec(l)![1])))]).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(mine.at(-1)).toBe(`${fqdnOf(gw)}  6/6  done`);
    expect(run.stdout).toMatch(/fabric_teardown completed \(teardown_completed\): 1 ok, 0 failed of 1/);
    expect((await lab.frrDaemons(gw)).map((d) => d.daemon)).not.toContain('bgpd');
    const usage = await metalctl(['fabric', 'teardown'], env);
    expect(usage.code).toBe(2);
    const refused = await metalctl(['fabric', 'teardown', '10.0.0.300'], env);
    expect([refused.code, /^error: INVALID_INPUT: /.test(refused.stderr)]).toEqual([1, true]);
  });
});
