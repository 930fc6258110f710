/**
 * The fabric rollout's crash test (issue 23, "Done when"): an apply of 10 compute nodes with real
 * sshd and real FRR (test/helpers/ssh-nodes.ts, as fabric-rollout-frr.test.ts), run by a worker
 * in a child process that is SIGKILLed once half the nodes are done and the others are in the
 * middle of their install. A second worker takes the run up again (its lease lapsed: the engine's
 * sweep wakes it, takeLease counts the resume): the job completes with every node applied, and
 * no finished node was contacted again (its recorded apt-get / systemctl / dpkg-divert calls are
 * exactly what they were at the kill).
 */
import { randomBytes } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { startTestApp, type TestApp } from './helpers/app';
import { rest } from './helpers/client';
import { makeTenantTree } from './helpers/fixtures';
import { startSshNodes, type SshNode, type SshNodes } from './helpers/ssh-nodes';
import { fromRoot } from '../src/paths';
import { fabricRunId } from '../src/modules/fabric/runs';

jest.setTimeout(300_000);

const PATH = '/controlnode/fabric-config';
const SECRET_KEY = randomBytes(32).toString('base64');
const NODES = 10;
/** Nodes 0-4 (the gateway among them) apply at once; 5-9 sit in their install until the kill. */
const FAST = 5;

let t: TestApp;
let lab: SshNodes;
const metalIds: string[] = [];
const originals = new Map<string, string>();
const workers: ChildProcess[] = [];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Makes the node's apt-get take `seconds` first (0: as the lab made it). */
async function slowAptGet(node: SshNode, seconds: number): Promise<void> {
  const file = path.join(node.dir, 'bin', 'apt-get');
  if (!originals.has(file)) originals.set(file, await fs.readFile(file, 'utf8'));
  const original = originals.get(file)!;
  await fs.writeFile(file, seconds === 0 ? original : original.replace('#!/bin/sh\n', `#!/bin/sh\nsleep ${seconds}\n`), { mode: 0o755 });
}

function startWorker(): { child: ChildProcess; stderr: () => string } {
  let stderr = '';
  const child = spawn(process.execPath, [fromRoot('dist', 'src', 'main.js')], {
    env: {
      ...process.env, DATABASE_URL: t.app.databaseUrl, ROLE: 'worker', ADMIN_TOKEN: `crash-${randomBytes(6).toString('hex')}`, LOG_LEVEL: 'warn',
      SECRET_KEY, WORKFLOW_LEASE_MS: '2000', QUEUE_POLL_SECONDS: '1',
      FABRIC_BGP_WAIT_MS: '30000', FABRIC_SSH_CONNECT_TIMEOUT_MS: '5000', FABRIC_NODE_TIMEOUT_MS: '120000',
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  workers.push(child);
  return { child, stderr: () => stderr };
}

async function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
}

/** Waits until the FAST nodes finished their apply and every other node is inside its (slowed) install_frr. */
async function fastDoneSlowInstalling(jobId: string, fastIps: string[], workerStderr: () => string): Promise<void> {
  for (let i = 0; ; i += 1) {
    if (i > 1200) throw new Error(`the fast nodes never finished: ${workerStderr()}`);
    const rows = await t.app.services.prisma.fabricJobNode.findMany({ where: { jobId } });
    const fastDone = rows.filter((r) => fastIps.includes(r.nodeIp) && r.finished && r.ok).length;
    const slowInstalling = rows.filter((r) => !fastIps.includes(r.nodeIp)
      && ((r.steps ?? []) as { step: string; status: string }[]).some((s) => s.step === 'install_frr' && s.status === 'running')).length;
    if (fastDone === FAST && slowInstalling === NODES - FAST) return;
    await sleep(100);
  }
}

/** Slows the install of every node but the FAST first ones to 120 s and starts an apply (no worker yet). */
async function startSlowApply(): Promise<{ jobId: string; runId: string; fastIps: string[] }> {
  for (const node of lab.nodes.slice(FAST)) await slowAptGet(node, 120);
  const started = await rest(t.url, t.adminToken, 'POST', `${PATH}/apply`);
  expect(started.status).toBe(202);
  const jobId = started.body.apply_job_id as string;
  return { jobId, runId: fabricRunId(jobId), fastIps: lab.nodes.slice(0, FAST).map((n) => n.lanAddress!) };
}

/** Waits until the job is no longer running (the second worker finished it); the job with its node rows. */
async function jobEnded(jobId: string, workerStderr: () => string) {
  for (let i = 0; ; i += 1) {
    const job = await t.app.services.prisma.fabricJob.findUniqueOrThrow({ where: { id: jobId }, include: { nodes: true } });
    if (job.jobStatus !== 'running') return job;
    if (i > 1500) throw new Error(`the job never finished after the restart: ${workerStderr()}`);
    await sleep(100);
  }
}

beforeAll(async () => {
  lab = await startSshNodes('rollout-crash', NODES, { lan: true, frr: true, frrDaemonsFile: true });
  // The API here (the same secret key as the workers: they open the SSH key and the BGP password it sealed); no worker of its own.
  t = await startTestApp({ role: 'api', secretKey: SECRET_KEY });
  const prisma = t.app.services.prisma;
  const tree = await makeTenantTree(prisma, 'rollout-crash', { pools: 1, nodesPerPool: NODES });
  await prisma.node.updateMany({ where: { id: { in: tree.nodes.map((n) => n.id) } }, data: { provisionState: 'deployed' } });
  const keyRef = await t.app.services.secrets!.put(null, lab.clientPrivateKey);
  for (const [i, node] of lab.nodes.entries()) {
    metalIds[i] = tree.nodes[i]!.id;
    await prisma.computeNode.create({
      data: { nodeId: metalIds[i]!, osIp: node.lanAddress!, fqdn: `cn${i}.lab.example`, sshKeyRef: keyRef, sshHostKey: null, isGateway: i === 0 },
    });
  }
  const saved = await rest(t.url, t.adminToken, 'POST', PATH, {
    as: 65020, external_route_reflector: false, ospf_enabled: false, management_cidr: lab.lan!.cidr,
    router_id_cidr: '172.30.220.1/24', bgp_password: 'crashRollout-S3cret-9', expected_nodes: NODES, expected_vms: 10, vxlan_mtu: 1500,
  });
  expect(saved.status).toBe(200);
});

afterAll(async () => {
  for (const w of workers) await kill(w);
  await t?.stop();
  await lab?.stop();
});

describe('a fabric apply whose worker is SIGKILLed', () => {
  it('resumes in another worker without re-applying the nodes that had finished', async () => {
    const prisma = t.app.services.prisma;
    const { jobId, runId, fastIps } = await startSlowApply();

    const first = startWorker();
    try {
      await fastDoneSlowInstalling(jobId, fastIps, first.stderr);
    } catch (error) {
      await kill(first.child);
      throw error;
    }
    // The worker holds the run's lease, mid-way: half the nodes done, the rest in their install.
    expect((await prisma.workflowRun.findUniqueOrThrow({ where: { id: runId } })).leaseUntil!.getTime()).toBeGreaterThan(Date.now());
    await kill(first.child);
    const callsAtKill = new Map<number, number>();
    for (const node of lab.nodes.slice(0, FAST)) callsAtKill.set(node.index, (await lab.calls(node)).length);
    expect((await prisma.fabricJob.findUniqueOrThrow({ where: { id: jobId } })).jobStatus).toBe('running');

    for (const node of lab.nodes.slice(FAST)) await slowAptGet(node, 0);
    const second = startWorker();
    const job = await jobEnded(jobId, second.stderr);
    await kill(second.child);

    expect(job).toMatchObject({ jobStatus: 'completed', state: 'apply_completed', completedNodes: NODES, failedNodes: 0, error: '' });
    // Each node applied once: the resumed ones ran their steps from connect to verify_bgp, once, in the second worker.
    for (const row of job.nodes) {
      const steps = (row.steps as { step: string; status: string }[]);
      const ok = steps.filter((s) => s.status === 'ok').map((s) => s.step);
      expect(ok).toEqual(['connect', 'install_frr', 'divert_config', 'vtep_interface', 'write_config', 'mtu_sync', 'restart_frr', 'verify_bgp']);
    }
    // The finished nodes were not contacted again: no command ran on them after the kill.
    for (const node of lab.nodes.slice(0, FAST)) expect((await lab.calls(node)).length).toBe(callsAtKill.get(node.index));
    // The run: taken up once more after its worker died, ended with the job; one node step each, each run once.
    const run = await prisma.workflowRun.findUniqueOrThrow({ where: { id: runId } });
    expect(run).toMatchObject({ status: 'succeeded', resumes: 1, leaseUntil: null });
    const stepRows = await prisma.workflowStep.findMany({ where: { runId }, orderBy: { idx: 'asc' } });
    expect(stepRows.map((s) => s.status)).toEqual(Array(NODES).fill('succeeded'));
    const fastPositions = new Set(job.nodes.filter((n) => fastIps.includes(n.nodeIp)).map((n) => n.position));
    expect(stepRows.filter((s) => fastPositions.has(s.idx)).map((s) => s.attempts)).toEqual(Array(FAST).fill(1));
    expect(stepRows.filter((s) => !fastPositions.has(s.idx)).map((s) => s.attempts)).toEqual(Array(NODES - FAST).fill(2));
    const config = await rest(t.url, t.adminToken, 'GET', PATH);
    expect(config.body.rollout_status).toBe('ready');
  });

  it('a worker stopped with SIGTERM hands its run back at once: another worker carries on, no resume counted, finished nodes untouched', async () => {
    const prisma = t.app.services.prisma;
    const { jobId, runId, fastIps } = await startSlowApply();
    const first = startWorker();
    try {
      await fastDoneSlowInstalling(jobId, fastIps, first.stderr);
      const exited = new Promise<number | null>((resolve) => first.child.once('exit', (code) => resolve(code)));
      const stoppedAt = Date.now();
      first.child.kill('SIGTERM');
      await exited;
      // Its SSH sessions were cut and the run handed back: well before the 120 s install would have ended.
      expect(Date.now() - stoppedAt).toBeLessThan(30_000);
    } finally {
      await kill(first.child);
    }
    const handedBack = await prisma.workflowRun.findUniqueOrThrow({ where: { id: runId } });
    expect(handedBack).toMatchObject({ status: 'running', leaseUntil: null, resumes: 0 });
    const callsAtStop = new Map<number, number>();
    for (const node of lab.nodes.slice(0, FAST)) callsAtStop.set(node.index, (await lab.calls(node)).length);

    for (const node of lab.nodes.slice(FAST)) await slowAptGet(node, 0);
    const second = startWorker();
    const job = await jobEnded(jobId, second.stderr);
    await kill(second.child);
    expect(job).toMatchObject({ jobStatus: 'completed', completedNodes: NODES, failedNodes: 0 });
    for (const node of lab.nodes.slice(0, FAST)) expect((await lab.calls(node)).length).toBe(callsAtStop.get(node.index));
    expect(await prisma.workflowRun.findUniqueOrThrow({ where: { id: runId } })).toMatchObject({ status: 'succeeded', resumes: 0 });
  });
});
