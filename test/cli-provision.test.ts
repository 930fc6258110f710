/**
 * metalctl provision and metalctl jobs, end to end: the built CLI as a child process against a
 * running service (its built-in agent) and the Redfish simulator's Supermicro BMCs on bare
 * 127.78.22.x addresses, port 443, TLS signed by the site's BMC CA, as
 * controlnode-provision-static.test.ts sets them up. The installer is played from the ISO the
 * BMC was given (test/helpers/installer.ts): for one machine at once (provision --watch follows
 * it to completed), for the other not at all (the job waits in Installing OS until jobs cancel).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTestApp, capturingLogger, type TestApp } from './helpers/app';
import { gql } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { bmcCertificates } from './helpers/tls';
import { playInstall, postJson, readInstallerJob, readyNodes, type InstallerJob } from './helpers/installer';
import { startRedfishSim, type RedfishSim, type SimMachine } from './sim/redfish/server';
import { assertBuilt, metalctl, startCli } from './helpers/metalctl-child';

jest.setTimeout(180_000);

const BMC_PASSWORD = 'Bmc-Cl1-Pa55';
const OS_PASSWORD = 'Os-Cl1-Pa55-w0rd';
const ipOf = (i: number) => `127.78.22.${i + 1}`;

let t: TestApp;
let sim: RedfishSim;
let dir: string;
let token: string;
let env: { url: string; token: string; extra: Record<string, string> };
let passwordFile: string;
const lines: string[] = [];
const nodeOf = new Map<string, string>();
const installs: Promise<void>[] = [];
const jobs = new Map<string, InstallerJob>();

beforeAll(async () => {
  assertBuilt();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cli-provision-'));
  passwordFile = path.join(dir, 'os-password');
  fs.writeFileSync(passwordFile, `${OS_PASSWORD}\n`, { mode: 0o600 });
  const certs = bmcCertificates(dir, [ipOf(0), ipOf(1)]);
  sim = await startRedfishSim({
    machines: [
      { id: 'one', flavour: 'supermicro', listen: { host: ipOf(0), port: 443 }, password: BMC_PASSWORD },
      { id: 'two', flavour: 'supermicro', listen: { host: ipOf(1), port: 443 }, password: BMC_PASSWORD },
    ],
    tls: { key: certs.key, cert: certs.cert },
    onBoot: (machine, boot) => {
      if (boot.target !== 'Cd' || !boot.image) return;
      installs.push((async () => {
        const job = await readInstallerJob(boot.image!, dir, [OS_PASSWORD, BMC_PASSWORD]);
        jobs.set(machine.id, job);
        if (machine.id === 'one') await playInstall(job, '10.42.0.10', null);
        // 'two': the installer says it is installing, then never finishes (until the job is cancelled).
        else await postJson(`${job.api}/job/${job.job}/step`, job.token, { step: 'installing-base', state: 'active', percent: 40 });
      })());
    },
  });
  t = await startTestApp({ agentPollMs: 200, isoDir: path.join(dir, 'iso') }, { log: capturingLogger(lines) });
  t.app.services.config.publicUrl = t.url;
  const tree = await makeTenantTree(t.app.services.prisma, 'cli-prov', { pools: 1, nodesPerPool: 0 });
  token = await makeToken(t.app.services.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  // The watchers re-read the job only on its events: no timed refresh moves them (METALCTL_WATCH_REFRESH_MS).
  env = { url: t.url, token, extra: { METALCTL_WATCH_REFRESH_MS: '600000' } };
  for (const [id, nodeId] of await readyNodes(t.app.services, { tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id }, sim.machines, { driver: 'supermicro', caCert: certs.ca })) nodeOf.set(id, nodeId);
});

afterAll(async () => {
  await Promise.allSettled(installs);
  await t?.stop();
  await sim?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const machine = (id: string) => sim.machines.find((x) => x.id === id)!;
const args = (m: SimMachine, host: string) => [
  'provision', 'supermicro', '--bmc', new URL(m.url).hostname, '--hostname', host, '--os-user', 'ops', '--os-password-file', passwordFile,
  '--disk', 'nvme0n1', '--pool-type', 'single', '--nic-mac', m.state().macs[0]!,
];
const nodeRow = async (id: string) => (await t.app.services.sql.query('SELECT provision_state, addresses, last_error_code FROM node WHERE id = $1', [nodeOf.get(id)])).rows[0]!;

describe('metalctl provision', () => {
  it('provision VENDOR --bmc IP --watch: the job\'s stages and percent as it moves, to completed (exit 0); the node is deployed with its OS address', async () => {
    const run = await metalctl([...args(machine('one'), 'cn-one'), '--watch'], env);
    expect([run.code, run.stderr]).toEqual([0, '']);
    const jobId = /job ([0-9A-Za-z_-]{10,})/.exec(run.stdout)![1]!;
    expect(jobs.get('one')!.job).toBe(jobId);
    // One line per change of the job: the percent only grows, through the installer's stages, to 100.
    const progress = run.stdout.split('\n').filter((l) => l.startsWith('cn-one  '));
    const percents = progress.map((l) => Number(/ (\d+)\/100 /.exec(l)![1]));
    expect(percents).toEqual([...percents].sort((a, b) => a - b));
    expect(progress.length).toBeGreaterThanOrEqual(3);
    expect(progress.some((l) => /Installing OS/.test(l))).toBe(true);
    expect(progress.at(-1)).toMatch(/^cn-one {2}100\/100 {2}completed/);
    expect(run.stdout).toMatch(new RegExp(`job ${jobId} completed`));
    expect(run.stdout).not.toMatch(/\u001b\[/);
    expect(await nodeRow('one')).toMatchObject({ provision_state: 'deployed', addresses: ['10.42.0.10'] });
    // The password went from the file to the service's broker, never to the output or a log line.
    expect(run.stdout + run.stderr + lines.join('\n')).not.toContain(OS_PASSWORD);

    // The finished job, watched again: one JSON line, completed.
    const again = await metalctl(['jobs', 'watch', jobId, '--json'], env);
    expect(again.code).toBe(0);
    expect(again.stdout.trim().split('\n').map((l) => JSON.parse(l))).toEqual([expect.objectContaining({ id: jobId, jobStatus: 'COMPLETED', progress: 100 })]);

    // Usage errors (2) before any request; refusals (1) with the code.
    expect((await metalctl(['provision', 'acme', '--bmc', ipOf(0)], env)).code).toBe(2);
    expect((await metalctl(['provision', 'supermicro'], env)).code).toBe(2);
    const unauthenticated = await metalctl(args(machine('one'), 'cn-one'), { url: t.url, token: null });
    expect(unauthenticated.code).toBe(1);
    expect(unauthenticated.stderr).toMatch(/UNAUTHENTICATED/);
    const refused = await metalctl(['provision', 'supermicro', '--bmc', ipOf(0), '--pool-type', 'raid99'], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/INVALID_INPUT/);
  });
});

describe('metalctl jobs', () => {
  it('jobs get | watch | cancel: a running job as JSON and as a table, its watcher ends when it is cancelled (exit 1, ABORTED)', async () => {
    const started = await metalctl([...args(machine('two'), 'cn-two'), '--json'], env);
    expect([started.code, started.stderr]).toEqual([0, '']);
    const answer = JSON.parse(started.stdout);
    expect(answer).toMatchObject({ jobId: expect.any(String), node: { id: nodeOf.get('two'), provisionState: 'deploying' } });
    const jobId = answer.jobId as string;

    const got = await metalctl(['jobs', 'get', jobId, '--json'], env);
    expect(got.code).toBe(0);
    expect(JSON.parse(got.stdout)).toMatchObject({ id: jobId, jobType: 'provision', nodeIp: ipOf(1), resourceName: 'cn-two' });
    expect(['PENDING', 'RUNNING']).toContain(JSON.parse(got.stdout).jobStatus);

    const watcher = startCli(['jobs', 'watch', jobId], env);
    await watcher.waitFor(/cn-two {2}\d+\/100 {2}running: Installing OS/, 90_000);

    // Ctrl-C stops a watcher, not the job: INTERRUPTED (exit 1), the job still running.
    const second = startCli(['jobs', 'watch', jobId], env);
    await second.waitFor(/Installing OS/);
    second.proc.kill('SIGINT');
    const stopped = await second.done;
    expect(stopped.code).toBe(1);
    expect(stopped.stderr).toMatch(/^error: INTERRUPTED: /);
    expect(watcher.proc.exitCode).toBeNull();

    const table = await metalctl(['jobs', 'get', jobId], env);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/status\s*│\s*running/);
    expect(table.stdout).toMatch(/stage\s*│\s*Installing OS/);

    const cancelled = await metalctl(['jobs', 'cancel', jobId, '--json'], env);
    expect([cancelled.code, cancelled.stderr]).toEqual([0, '']);
    expect(['CANCELLING', 'CANCELLED']).toContain(JSON.parse(cancelled.stdout).jobStatus);

    const watched = await watcher.done;
    expect(watched.code).toBe(1);
    expect(watched.stderr).toMatch(/ABORTED/);
    expect(watched.stdout).toMatch(/cancelled/);
    const view = await gql(t.url, token, 'query ($id: ID!) { controlNodeJob(id: $id) { jobStatus lastError } }', { id: jobId });
    expect(view.data!.controlNodeJob).toMatchObject({ jobStatus: 'CANCELLED', lastError: expect.stringMatching(/^ABORTED: /) });
    expect(await nodeRow('two')).toMatchObject({ provision_state: 'failed', last_error_code: 'ABORTED' });

    // Unknown job: refused with the code; a missing id: usage.
    const unknown = await metalctl(['jobs', 'get', '00000000-0000-7000-8000-000000000000'], env);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/NOT_FOUND/);
    expect((await metalctl(['jobs', 'get'], env)).code).toBe(2);
    expect((await metalctl(['jobs', 'cancel', '00000000-0000-7000-8000-000000000000'], env)).code).toBe(1);
  });
});
