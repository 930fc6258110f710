/**
 * metalctl on a terminal (a pseudo-terminal from util-linux `script`): enroll draws one progress bar
 * with every row's result above it, watch redraws its table in place as a node moves. The same
 * commands on a pipe print plain lines, without a terminal code (cli-nodes and cli-enroll read those).
 */
import { spawn } from 'node:child_process';
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

/** metalctl on a 40x200 pseudo-terminal: everything it drew, and its exit code once it ends. */
function onTerminal(args: string[]): { screen(): string; shows(text: string, limitMs: number): Promise<void>; done: Promise<{ code: number; screen: string }> } {
  const command = `stty rows 40 cols 200; exec ${[process.execPath, CLI_MAIN, ...args].map((a) => `'${a}'`).join(' ')}`;
  const child = spawn('script', ['-qec', command, '/dev/null'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let screen = '';
  child.stdout.on('data', (d: Buffer) => { screen += d.toString(); });
  child.stderr.on('data', (d: Buffer) => { screen += d.toString(); });
  const killer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  const done = new Promise<{ code: number; screen: string }>((resolve) => child.once('close', (code) => {
    clearTimeout(killer);
    resolve({ code: code ?? -1, screen });
  }));
  const shows = async (text: string, limitMs: number) => {
    for (const started = Date.now(); !screen.includes(text); await new Promise((r) => setTimeout(r, 50))) {
      if (Date.now() - started > limitMs || child.exitCode !== null) throw new Error(`the terminal never showed ${text}:\n${screen}`);
    }
  };
  return { screen: () => screen, shows, done };
}

const ESC = '\u001b[';

it('enroll draws one progress bar, with each row\'s result printed above it', async () => {
  const file = path.join(dir, 'machines.csv');
  fs.writeFileSync(file, ['name,bmc.address,bmc.driver,bmc.username,bmc.password,macs',
    ...sim.machines.map((m) => `${m.id},${m.bmc.url},redfish,${m.bmc.username},${m.bmc.password},${m.macs.join(' ')}`)].join('\n'));
  const { code, screen } = await onTerminal(['enroll', '--file', file, '--pool', tree.pools[0]!.id]).done;
  expect(code).toBe(0);
  // The bar, ending full. Not its 0/3 frame: cli-progress draws a few frames a second, and on a
  // busy machine the first row was done before the first frame.
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
  const watching = onTerminal(['nodes', 'watch', '--pool', tree.pools[1]!.id, '--timeout', '8']);
  await watching.shows('waiting for events', 20_000);
  expect((await runCli(['retire', node.id], env)).code).toBe(0);
  const { code, screen } = await watching.done;
  expect(code).toBe(0);
  const frames = screen.split(`${ESC}2K`);
  expect(frames.length).toBeGreaterThan(2); // lines erased: drawn again in place
  const text = screen.replace(/\u001b\[[0-9;?]*[A-Za-z]/g, '');
  expect(text).toMatch(/│ ready +│/);
  expect(text).toMatch(/│ retiring +│/);
  expect(text).toMatch(new RegExp(`last: ${node.name} ready -> retiring`));
  expect(screen).not.toMatch(/ready -> retiring\r?\n.*ready -> retiring/); // no plain lines on a terminal
});

it('nodes watch of more nodes than the terminal has rows shows the count per state and the nodes that changed last', async () => {
  const big = await makeTenantTree(t.app.database.prisma, 'tty-big', { pools: 1, nodesPerPool: 50 });
  const token = await makeToken(t.app.database.prisma, big.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: big.tenant.id }]);
  const saved = env;
  env = cliEnv({ METAL_URL: t.url, METAL_TOKEN: token });
  try {
    const { code, screen } = await onTerminal(['nodes', 'watch', '--pool', big.pools[0]!.id, '--timeout', '3']).done;
    expect(code).toBe(0);
    const text = screen.replace(/\u001b\[[0-9;?]*[A-Za-z]/g, '');
    expect(text).toMatch(/│ STATE +│ NODES │/);
    expect(text).toMatch(/│ ready +│ 50 +│/);
    expect(text).toContain('50 node(s)');
    // No more table rows than the 40-row terminal holds.
    const frame = text.slice(text.lastIndexOf('┌──', text.lastIndexOf('│ STATE')));
    expect(frame.split('\n').length).toBeLessThanOrEqual(40);
  } finally {
    env = saved;
  }
});
