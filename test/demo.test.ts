/**
 * `npm run demo` as a newcomer runs it, from dist, as a child process with piped output (no TTY):
 * every machine reaches ready, the deployed ones deployed, the released ones ready again, and
 * afterwards nothing it started is left: no process mentioning its temp dir (the embedded
 * PostgreSQL), no listener on its ports, no temp dir. Ctrl-C (SIGINT) mid-way cleans up the same.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { fromRoot } from '../src/paths';
import { processesMentioning } from './helpers/service';

jest.setTimeout(150_000);

const DEMO = fromRoot('dist', 'test', 'demo', 'run.js');

interface Demo {
  child: ChildProcess;
  out: string[];
  /** Resolves with the first line matching `re` (or rejects when the demo exits first). */
  line(re: RegExp): Promise<RegExpMatchArray>;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function runDemo(args: string[]): Demo {
  // No TTY on stdout: the demo must print plain lines, which is what this test reads.
  const child = spawn(process.execPath, [DEMO, ...args], { cwd: fromRoot(), stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, DATABASE_URL: '' } });
  const out: string[] = [];
  const waiters: { re: RegExp; resolve: (m: RegExpMatchArray) => void }[] = [];
  let partial = '';
  const feed = (chunk: Buffer) => {
    partial += chunk.toString();
    const lines = partial.split('\n');
    partial = lines.pop()!;
    for (const l of lines) {
      out.push(l);
      for (const w of [...waiters]) {
        const m = l.match(w.re);
        if (m) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(m);
        }
      }
    }
  };
  child.stdout!.on('data', feed);
  child.stderr!.on('data', feed);
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return {
    child, out, exit,
    line: (re) => {
      const seen = out.map((l) => l.match(re)).find(Boolean);
      if (seen) return Promise.resolve(seen);
      return Promise.race([
        new Promise<RegExpMatchArray>((resolve) => waiters.push({ re, resolve })),
        exit.then(() => { throw new Error(`the demo exited before printing ${re}:\n${out.join('\n')}`); }),
      ]);
    },
  };
}

function listening(ports: number[]): number[] {
  const text = execFileSync('ss', ['-ltnH'], { encoding: 'utf8' });
  return ports.filter((p) => new RegExp(`:${p}\\s`).test(text));
}

/** What the demo started, read from its own first lines while it runs. */
async function started(demo: Demo): Promise<{ dataDir: string; ports: number[] }> {
  const [, dataDir] = await demo.line(/data dir (\/\S+) \(removed at exit\)/);
  const m = await demo.line(/^service http:\/\/127\.0\.0\.1:(\d+) \(embedded PostgreSQL on port (\d+)\); Redfish simulator http:\/\/127\.0\.0\.1:(\d+)/);
  const ports = [Number(m[1]), Number(m[2]), Number(m[3])];
  // While it runs, the checks below see what it started: they could fail.
  expect(fs.existsSync(dataDir!)).toBe(true);
  expect(processesMentioning(dataDir!).length).toBeGreaterThan(0);
  expect(listening(ports)).toEqual(ports);
  return { dataDir: dataDir!, ports };
}

function nothingLeft(what: { dataDir: string; ports: number[] }, pid: number): void {
  expect(processesMentioning(what.dataDir)).toEqual([]);
  expect(listening(what.ports)).toEqual([]);
  expect(fs.existsSync(what.dataDir)).toBe(false);
  expect(fs.existsSync(`/proc/${pid}`)).toBe(false);
}

beforeAll(() => {
  if (!fs.existsSync(DEMO)) throw new Error('run `npm run build` first (the demo runs from dist)');
});

it('3 machines: enrolled to ready, 2 deployed, 1 released to ready, a summary, exit 0, nothing left', async () => {
  const demo = runDemo(['--machines', '3', '--flavour', 'mix', '--deploy', '2', '--release', '1', '--json']);
  const what = await started(demo);
  // The status page's address, and where its token is: a read-only token of the demo's tenant in a
  // 0600 file inside the temp dir, never printed.
  const [, pageUrl, tokenFile] = await demo.line(/^status page: (http:\/\/127\.0\.0\.1:\d+\/ui) \(token in (\/\S+): read-only/);
  expect(tokenFile!.startsWith(`${what.dataDir}/`)).toBe(true);
  expect(fs.statSync(tokenFile!).mode & 0o777).toBe(0o600);
  const pageToken = fs.readFileSync(tokenFile!, 'utf8');
  expect(pageToken.length).toBeGreaterThan(20);
  const page = await fetch(pageUrl!);
  expect(page.status).toBe(200);
  expect(page.headers.get('content-security-policy')).toContain("default-src 'none'");
  const ask = (query: string) => fetch(pageUrl!.replace(/\/ui$/, '/graphql'), {
    method: 'POST', headers: { authorization: `Bearer ${pageToken}`, 'content-type': 'application/json' }, body: JSON.stringify({ query }),
  }).then((r) => r.json() as Promise<{ data?: any; errors?: { extensions: { code: string } }[] }>);
  const counts = await ask('{ nodeCounts { provisionState count } }');
  expect(counts.errors).toBeUndefined();
  expect(Array.isArray(counts.data.nodeCounts)).toBe(true);
  // Read-only: it changes nothing.
  expect((await ask('mutation { createTenant(input: { name: "nope" }) { id } }')).errors?.[0]?.extensions.code).toMatch(/^(FORBIDDEN|PERMISSION_DENIED)$/);
  const { code } = await demo.exit;
  expect(demo.out.join('\n')).not.toContain(pageToken);
  expect({ code, tail: code === 0 ? '' : demo.out.slice(-30).join('\n') }).toEqual({ code: 0, tail: '' });
  const json = demo.out.find((l) => l.startsWith('{"summary"'));
  const { summary } = JSON.parse(json!) as { summary: { ok: boolean; states: Record<string, number>; deployed: string[]; released: string[]; failed: unknown[]; runs: number; stepsSucceeded: number } };
  expect(summary).toMatchObject({ ok: true, states: { ready: 2, deployed: 1 }, failed: [] });
  expect(summary.deployed).toHaveLength(2);
  expect(summary.released).toEqual([summary.deployed[0]]);
  // The verbs recorded every run: enroll, inspect, commission per machine, one deploy each, one release.
  expect(summary.runs).toBe(3 * 3 + 2 + 1);
  expect(summary.stepsSucceeded).toBeGreaterThan(0);
  // Plain lines, one per move, in the seed's order for every machine.
  for (const name of ['demo-1', 'demo-2', 'demo-3']) {
    const moves = demo.out.filter((l) => l.includes(` ${name} (`) && l.includes(' -> ')).map((l) => l.split(') ')[1]);
    expect(moves.slice(0, 3)).toEqual(['enrolling -> inspecting', 'inspecting -> commissioning', 'commissioning -> ready']);
  }
  expect(demo.out.join('\n')).not.toMatch(/\x1b\[/);
  nothingLeft(what, demo.child.pid!);
});

it('SIGINT mid-way stops the simulator, the service and PostgreSQL and removes the temp dir (exit 130)', async () => {
  const demo = runDemo(['--machines', '2']);
  const what = await started(demo);
  await demo.line(/enrolling -> inspecting/);
  demo.child.kill('SIGINT');
  expect((await demo.exit).code).toBe(130);
  expect(demo.out.join('\n')).toMatch(/interrupted: everything the demo started is stopped/);
  nothingLeft(what, demo.child.pid!);
});

it('--hold keeps the service and its status page up after the summary until Ctrl-C, then stops everything (exit 0)', async () => {
  const demo = runDemo(['--machines', '1', '--deploy', '0', '--hold']);
  const what = await started(demo);
  const [, url] = await demo.line(/^holding: the service (http:\/\/127\.0\.0\.1:\d+) and its status page/);
  expect(demo.out.some((l) => l.startsWith('summary: ready 1 of 1 machine(s)'))).toBe(true);
  await new Promise((resolve) => setTimeout(resolve, 500));
  expect(demo.child.exitCode).toBeNull();
  expect((await fetch(`${url}/ui`)).status).toBe(200);
  demo.child.kill('SIGINT');
  expect((await demo.exit).code).toBe(0);
  nothingLeft(what, demo.child.pid!);
});

it('its live view reads the service through the API (HTTP: GraphQL and the event stream), not the database', () => {
  for (const file of fs.readdirSync(fromRoot('test', 'demo')).filter((f) => f.endsWith('.ts'))) {
    const text = fs.readFileSync(fromRoot('test', 'demo', file), 'utf8');
    expect([file, /services\.(sql|prisma)|database\.prisma|\bSELECT\b/.test(text)]).toEqual([file, false]);
  }
});

it('refuses a bad --machines with a message naming it, before starting anything', async () => {
  for (const bad of ['0', '201', 'many']) {
    const demo = runDemo(['--machines', bad]);
    expect((await demo.exit).code).toBe(2);
    expect(demo.out[0]).toMatch(/^demo: --machines must be/);
  }
});
