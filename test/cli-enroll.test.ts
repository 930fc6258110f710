/**
 * metalctl enroll, watch, a verb with --wait, power and timeline against a real service with the
 * machine simulator (Redfish BMCs, PXE, the ramdisk) and the built-in site agent: nothing played by
 * the test. The CLI runs as a child process from dist/ (npm run build first).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTestApp, type TestApp } from './helpers/app';
import { gql } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { cliEnv, runCli, startCli } from './helpers/cli';
import { startMachineSim, type MachineSim, type SimulatedMachine } from './sim/machine';
import { MetalNodeTimelineDocument } from '../src/generated/operations';

jest.setTimeout(240_000);

let t: TestApp;
let sim: MachineSim;
let tree: Awaited<ReturnType<typeof makeTenantTree>>;
let token: string;
let env: NodeJS.ProcessEnv;
let dir: string;

beforeAll(async () => {
  t = await startTestApp({ role: 'all', agentPollMs: 200 });
  sim = await startMachineSim({
    serviceUrl: t.url,
    // Passwords of their own: the tests check none is ever printed.
    redfish: { machines: ['m1', 'm2', 'm3', 'm4', 'y1', 'gpu-bad'].map((id) => ({ id, username: `admin-${id}`, password: `pw-${id}-${randomBytes(6).toString('hex')}` })) },
    behaviour: (id) => (id === 'gpu-bad' ? { dcgmFails: true } : {}),
  });
  tree = await makeTenantTree(t.app.database.prisma, 'cli-enroll', { pools: 2, nodesPerPool: 0 });
  token = await makeToken(t.app.database.prisma, tree.tenant.id, [
    { permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id },
    { permission: 'compute:nodes:power', scopeType: 'tenant', scopeId: tree.tenant.id },
  ]);
  env = cliEnv({ METAL_URL: t.url, METAL_TOKEN: token });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'metalctl-enroll-'));
});
afterAll(async () => {
  fs.rmSync(dir, { recursive: true, force: true });
  await sim?.stop();
  await t?.stop();
});

const q = (v: string) => `"${v.replace(/"/g, '""')}"`;
const csvRow = (m: SimulatedMachine, over: Partial<Record<'driver' | 'address' | 'macs' | 'password', string>> = {}) =>
  [m.id, q(over.address ?? m.bmc.url), over.driver ?? 'redfish', q(m.bmc.username), q(over.password ?? m.bmc.password), q(over.macs ?? m.macs.join(' '))].join(',');
const HEADER = 'name,BMC Address,bmc_driver,bmc.username,bmc.password,macs';
function write(name: string, text: string): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, text);
  return file;
}
async function nodesOfPool(pool: number): Promise<{ id: string; name: string; bmc: { address: string }; provisionState: string }[]> {
  const r = await runCli(['nodes', 'ls', '--json', '--pool', tree.pools[pool]!.id], env);
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout);
}
const passwords = () => sim.machines.map((m) => m.bmc.password);
function noSecrets(out: { stdout: string; stderr: string }) {
  for (const p of passwords()) {
    expect(out.stdout).not.toContain(p);
    expect(out.stderr).not.toContain(p);
  }
}

describe('enroll --file', () => {
  it('a CSV with one bad row: that row is listed with its field errors and nothing is enrolled', async () => {
    const [m1, m2, m3] = ['m1', 'm2', 'm3'].map((id) => sim.machine(id));
    const file = write('bad.csv', [HEADER, csvRow(m1!), csvRow(m2!, { driver: 'redfsh', macs: `${m2!.macs[0]} 01:00:5e:00:00:01` }), csvRow(m3!)].join('\n'));
    const r = await runCli(['enroll', '--file', file, '--pool', tree.pools[0]!.name], env);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('row 2 (line 3) m2: bmc.driver: must be one of');
    expect(r.stdout).toContain('macs[1]: is a multicast address');
    expect(r.stdout).not.toMatch(/row 1|row 3/);
    expect(r.stderr).toMatch(/^error: INVALID_INPUT: 1 of 3 rows are invalid \(rows 2\); nothing was sent, no machine was enrolled/);
    noSecrets(r);
    expect(await nodesOfPool(0)).toEqual([]);
  });

  it('a row the service refuses stops the sending: the CLI names exactly the rows enrolled, refused and not sent; --skip-existing then sends the rest once', async () => {
    const [m1, m2, m3, m4] = ['m1', 'm2', 'm3', 'm4'].map((id) => sim.machine(id)!);
    // Well formed, but outside the service's BMC_NETWORKS (127.0.0.0/8): only the service knows.
    const remote = csvRow(m4, { address: 'https://10.99.0.4' });
    const first = write('first.csv', [HEADER, csvRow(m1), csvRow(m2), remote, csvRow(m3)].join('\n'));
    const r = await runCli(['enroll', '--file', first, '--pool', tree.pools[0]!.id, '--parallel', '1'], env);
    expect(r.code).toBe(1);
    noSecrets(r);
    const said = Object.fromEntries([...r.stdout.matchAll(/row (\d+) \(line \d+\) (\w+): enrolled as (node_[0-9a-f-]+)/g)].map((m) => [m[2], m[3]]));
    expect(Object.keys(said).sort()).toEqual(['m1', 'm2']);
    expect(r.stdout).toMatch(/row 3 \(line 4\) m4: refused INVALID_INPUT: bmc\.address: /);
    expect(r.stdout).toContain('not sent: rows 4');
    expect(r.stderr).toMatch(/^error: INVALID_INPUT: enrolled rows: 1-2; refused: 3; not sent: 4\./);
    // What the service holds is what the CLI said.
    let held = await nodesOfPool(0);
    expect(Object.fromEntries(held.map((n) => [n.name, n.id]))).toEqual(said);

    // Fixed, sent again: the two enrolled rows are recognised by their BMC and left out.
    const again = write('again.csv', [HEADER, csvRow(m1), csvRow(m2), csvRow(m4), csvRow(m3)].join('\n'));
    const dup = await runCli(['enroll', '--file', again, '--pool', tree.pools[0]!.id], env);
    expect(dup.code).toBe(1);
    expect(dup.stdout).toContain(`row 1 (line 2) m1: bmc.address: is already the BMC of node ${said.m1} in this pool`);
    // A watch of the pool from now on: the new nodes appear on it and move to ready.
    const watch = startCli(['nodes', 'watch', '--pool', tree.pools[0]!.name, '--timeout', '200'], env);
    await watch.waitFor(/watching 2 node\(s\)/, 20_000);
    await new Promise((r) => setTimeout(r, 1500));
    const rest = await runCli(['enroll', '--file', again, '--pool', tree.pools[0]!.id, '--skip-existing'], env);
    expect(rest.stderr).toBe('');
    expect(rest.code).toBe(0);
    expect(rest.stdout).toContain(`row 1 (line 2) m1: skipped, already node ${said.m1}`);
    expect(rest.stdout).toMatch(/row 3 \(line 4\) m4: enrolled as node_/);
    expect(rest.stdout).toMatch(/row 4 \(line 5\) m3: enrolled as node_/);
    expect(rest.stdout).toContain('enrolled 2 of 4 rows (rows 3-4); skipped 2 already enrolled (rows 1-2)');
    held = await nodesOfPool(0);
    expect(held.map((n) => n.name).sort()).toEqual(['m1', 'm2', 'm3', 'm4']);
    noSecrets(rest);

    try {
      for (const name of ['m3', 'm4']) {
        await watch.waitFor(new RegExp(`${name}  - -> enrolling`), 20_000);
        await watch.waitFor(new RegExp(`${name}  (inspecting|commissioning) -> ready`), 180_000);
      }
      watch.proc.kill('SIGINT');
      const end = await watch.done;
      expect(end.code).toBe(0);
      expect(end.stderr).toBe('');
      expect(end.stdout).toMatch(/m3  enrolling -> inspecting|m3  \S+ -> commissioning/);
    } finally {
      watch.proc.kill('SIGKILL');
    }
  });

  it('a YAML with one bad row: the row (by line) and its field errors, nothing enrolled; then the fixed file enrolls every machine', async () => {
    const [y1, bad] = [sim.machine('y1')!, sim.machine('gpu-bad')!];
    const yaml = (second: string) => `machines:
  - name: y1
    pool: ${tree.pools[1]!.name}
    bmc:
      address: ${y1.bmc.url}
      driver: redfish
      username: ${JSON.stringify(y1.bmc.username)}
      password: ${JSON.stringify(y1.bmc.password)}
    macs: [${y1.macs.join(', ')}]
${second}`;
    const broken = write('bad.yaml', yaml(`  - name: gpu-bad
    pool: ${tree.pools[1]!.id}
    bmc: { address: ${bad.bmc.url}, driver: ipmi, username: ${JSON.stringify(bad.bmc.username)} }
    productUuid: 00000000-0000-0000-0000-000000000000
`));
    const r = await runCli(['enroll', '--file', broken], env);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('row 2 (line 10) gpu-bad: bmc.password: is required');
    expect(r.stdout).toContain('productUuid: is a firmware placeholder');
    expect(r.stderr).toMatch(/nothing was sent, no machine was enrolled/);
    noSecrets(r);
    expect(await nodesOfPool(1)).toEqual([]);

    const fixed = write('good.yaml', yaml(`  - name: gpu-bad
    pool: ${tree.pools[1]!.id}
    bmc: { address: ${JSON.stringify(bad.bmc.url)}, driver: redfish, username: ${JSON.stringify(bad.bmc.username)}, password: ${JSON.stringify(bad.bmc.password)} }
    macs: ${bad.macs.join(',')}
`));
    const ok = await runCli(['enroll', '--file', fixed, '--json'], env);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    const answer = JSON.parse(ok.stdout);
    expect(answer).toMatchObject({ total: 2, enrolled: 2 });
    const held = await nodesOfPool(1);
    expect(answer.rows.map((x: { name: string; status: string; nodeId: string }) => [x.name, x.status, x.nodeId]).sort())
      .toEqual(held.map((n) => [n.name, 'enrolled', n.id]).sort());
  });
});

describe('watch, a verb with --wait, power, timeline', () => {
  const idOf = async (name: string) => (await nodesOfPool(0).then((l) => l.concat()).then(async (l) => l.concat(await nodesOfPool(1)))).find((n) => n.name === name)!.id;

  it('nodes watch --until ends with exit 0 once every watched node is ready', async () => {
    const end = await runCli(['nodes', 'watch', 'm1', 'm2', 'm3', 'm4', '--until', 'ready', '--timeout', '200'], env, 210_000);
    expect(end.stderr).toBe('');
    expect(end.code).toBe(0);
    expect(end.stdout).toContain('every node is ready');
  });

  it('inspect --wait follows a node until its workflow ends; power --wait reports the agent\'s result', async () => {
    const m1 = await idOf('m1');
    const r = await runCli(['inspect', 'm1', '--wait', '--timeout', '150'], env);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`inspect ${m1} (m1): now inspecting`);
    expect(r.stdout.trim().split('\n').at(-1)).toBe(`${m1}: ready`);

    const off = await runCli(['power', 'm1', 'graceful-off', '--wait', '--timeout', '60'], env);
    expect(off.stderr).toBe('');
    expect(off.code).toBe(0);
    expect(off.stdout).toMatch(/power graceful-off node_\S+: queued as command cmd_\S+\ncommand cmd_\S+: (succeeded|unverified)/);
    expect(sim.machine('m1').bmc.state().powerState).toBe('Off');
  });

  it('timeline prints the runs with their steps, times and errors; --json is the API\'s timeline, oldest first', async () => {
    // gpu-bad fails commissioning (DCGM): wait for it with the CLI itself.
    const watch = await runCli(['nodes', 'watch', 'gpu-bad', '--until', 'failed', '--timeout', '200'], env, 210_000);
    expect(watch.code).toBe(0);
    const r = await runCli(['timeline', 'gpu-bad'], env);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/run wf_\S+ {2}metal-enroll {2}succeeded {2}started \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ {2}took \S+/);
    expect(r.stdout).toMatch(/run wf_\S+ {2}metal-commission {2}failed .*DCGM_FAILED/);
    expect(r.stdout).toMatch(/STEP.*STATUS.*TRIES.*STARTED.*TOOK.*ERROR/);
    expect(r.stdout).toMatch(/failed.*DCGM_FAILED/);
    const id = await idOf('gpu-bad');
    const json = JSON.parse((await runCli(['timeline', id, '--json'], env)).stdout);
    const api = await gql(t.url, token, MetalNodeTimelineDocument, { id, last: 10 });
    expect(json).toEqual([...(api.data!.node as { timeline: unknown[] }).timeline].reverse());
    expect(json.map((run: { kind: string }) => run.kind)).toEqual(['metal-enroll', 'metal-inspect', 'metal-commission']);
  });
});
