/**
 * metalctl on a terminal (a pseudo-terminal from util-linux `script`): enroll draws one progress bar
 * with every row's result above it, watch redraws its table in place as a node moves. The same
 * commands on a pipe print plain lines, without a terminal code (cli-nodes and cli-enroll read those).
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTestApp, type TestApp } from './helpers/app';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { cliEnv, CLI_MAIN, runCli } from './helpers/cli';
import { startMachineSim, type MachineSim } from './sim/machine';

jest.setTimeout(120_000);

let t: TestApp;
let sim: MachineSim;
let tree: Awaited<ReturnType<typeof makeTenantTree>>;
let env: NodeJS.ProcessEnv;
let dir: string;

beforeAll(async () => {
  t = await startTestApp({ role: 'all', agentPollMs: 200 });
  sim = await startMachineSim({ serviceUrl: t.url, redfish: { machines: 3 } });
  tree = await makeTenantTree(t.app.database.prisma, 'tty', { pools: 2, nodesPerPool: 1 });
  const token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  env = cliEnv({ METAL_URL: t.url, METAL_TOKEN: token });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'metalctl-tty-'));
});
afterAll(async () => {
  fs.rmSync(dir, { recursive: true, force: true });
  await sim?.stop();
  await t?.stop();
});

/** metalctl on a 40x200 pseudo-terminal; resolves with its exit code and everything it drew. */
function onTerminal(args: string[]): Promise<{ code: number; screen: string }> {
  const command = `stty rows 40 cols 200; exec ${[process.execPath, CLI_MAIN, ...args].map((a) => `'${a}'`).join(' ')}`;
  return new Promise((resolve) => {
    execFile('script', ['-qec', command, '/dev/null'], { env, encoding: 'utf8', timeout: 60_000 }, (error, stdout) => {
      resolve({ code: error ? Number((error as { code?: number }).code ?? -1) : 0, screen: stdout });
    });
  });
}

const ESC = '\u001b[';

it('enroll draws one progress bar, with each row\'s result printed above it', async () => {
  const file = path.join(dir, 'machines.csv');
  fs.writeFileSync(file, ['name,bmc.address,bmc.driver,bmc.username,bmc.password,macs',
    ...sim.machines.map((m) => `${m.id},${m.bmc.url},redfish,${m.bmc.username},${m.bmc.password},${m.macs.join(' ')}`)].join('\n'));
  const { code, screen } = await onTerminal(['enroll', '--file', file, '--pool', tree.pools[0]!.id]);
  expect(code).toBe(0);
  expect(screen).toMatch(/enroll \[[█░]+\] 0\/3/);
  expect(screen).toMatch(/enroll \[█+\] 3\/3/);
  for (const [i, m] of sim.machines.entries()) expect(screen).toMatch(new RegExp(`row ${i + 1} \\(line ${i + 2}\\) ${m.id}: enrolled as node_`));
  expect(screen).toContain('enrolled 3 of 3 rows (rows 1-3)');
  expect(screen).toContain(ESC); // cursor moves: a bar, not lines
  // The same file's rows on a pipe: plain lines only.
  const piped = await runCli(['enroll', '--file', file, '--pool', tree.pools[1]!.id, '--dry-run'], env);
  expect(piped.code).toBe(1); // the BMCs are already enrolled, in pool 0, with these MACs
  expect(piped.stdout).not.toContain('\u001b');
});

it('nodes watch redraws its table in place when a node moves', async () => {
  const node = tree.nodes.find((n) => n.poolId === tree.pools[1]!.id)!;
  const watching = onTerminal(['nodes', 'watch', '--pool', tree.pools[1]!.id, '--timeout', '6']);
  await new Promise((r) => setTimeout(r, 3000));
  expect((await runCli(['retire', node.id], env)).code).toBe(0);
  const { code, screen } = await watching;
  expect(code).toBe(0);
  const frames = screen.split(`${ESC}2K`);
  expect(frames.length).toBeGreaterThan(2); // lines erased: drawn again in place
  const text = screen.replace(/\u001b\[[0-9;?]*[A-Za-z]/g, '');
  expect(text).toMatch(/│ ready +│/);
  expect(text).toMatch(/│ retiring +│/);
  expect(text).toMatch(new RegExp(`last: ${node.name} ready -> retiring`));
  expect(screen).not.toMatch(/ready -> retiring\r?\n.*ready -> retiring/); // no plain lines on a terminal
});
