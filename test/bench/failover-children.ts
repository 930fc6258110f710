/**
 * The service processes of `npm run bench -- failover` (issue 24 item 3): each one
 * `node dist/src/main.js` with a role of its own, on a loopback port of its own, in a process group
 * of its own (a Ctrl-C in the terminal reaches only the bench, which stops them in order). Every
 * exit that the bench did not ask for is recorded: a failover must cost no process.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { freePorts, onLines, sleep } from './read';

export interface ChildExit {
  name: string;
  at: number;
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface ServiceChild {
  name: string;
  role: string;
  pid: number | undefined;
  /** http://127.0.0.1:port (an agent listens nowhere: null). */
  url: string | null;
  proc: ChildProcess;
  /** Warnings, errors and lines that are not JSON (the last 200). */
  output: string[];
  /** Lines by level and message, most frequent first. */
  kinds(): [string, number][];
  /** Exits the bench did not ask for (any exit before stop()). */
  exits: ChildExit[];
  alive(): boolean;
  /** SIGTERM to its group, SIGKILL after 20 s; removes its DATA_DIR. Idempotent. */
  stop(): Promise<void>;
}

const ROOT = path.resolve(__dirname, '..', '..', '..');
const LEVELS: Record<number, string> = { 10: 'trace', 20: 'debug', 30: 'info', 40: 'warn', 50: 'error', 60: 'fatal' };

/**
 * Spawns one service process and waits until `ready` says so (polled every 100 ms, with the lines
 * seen so far) or the process exits (an error with its output).
 */
export async function spawnServiceChild(opts: {
  name: string;
  env: Record<string, string>;
  ready: (child: ServiceChild, lines: string[]) => Promise<boolean> | boolean;
  readyTimeoutMs?: number;
  /** Called at once with the child, before it is ready (a Ctrl-C during start-up must stop it too). */
  onSpawn?: (child: ServiceChild) => void;
}): Promise<ServiceChild> {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), `metal-fo-${opts.name}-`));
  const [port] = await freePorts(1);
  const role = opts.env.ROLE ?? 'all';
  const env: NodeJS.ProcessEnv = { ...process.env, HOST: '127.0.0.1', PORT: String(port), DATA_DIR: dataDir, ...opts.env };
  if (role === 'agent') delete env.DATABASE_URL;
  const proc = spawn(process.execPath, [path.join(ROOT, 'dist', 'src', 'main.js')], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  const output: string[] = [];
  const early: string[] = [];
  const kinds = new Map<string, number>();
  let stopping = false;
  const exits: ChildExit[] = [];
  const collect = (stream: NodeJS.ReadableStream | null) => {
    onLines(stream, (line) => {
        if (early.length < 400) early.push(line);
        let kind = 'not JSON';
        try {
          const e = JSON.parse(line) as { level?: number; msg?: string; err?: { message?: string } };
          kind = `${LEVELS[e.level ?? 0] ?? e.level}: ${e.msg ?? '?'}${e.err?.message ? ` (${e.err.message.replace(/\s+/g, ' ').trim().slice(0, 160)})` : ''}`;
          if ((e.level ?? 0) < 40) {
            kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
            return;
          }
        } catch {
          // kept below
        }
        kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
        output.push(`[${opts.name}] ${line.length > 600 ? `${line.slice(0, 600)}…` : line}`);
        if (output.length > 200) output.shift();
    });
  };
  collect(proc.stdout);
  collect(proc.stderr);
  const exited = new Promise<void>((resolve) => proc.once('exit', (code, signal) => {
    if (!stopping) exits.push({ name: opts.name, at: Date.now(), code, signal });
    resolve();
  }));
  let spawnError: Error | null = null;
  proc.on('error', (e) => { spawnError = e; });
  const alive = () => proc.exitCode === null && proc.signalCode === null;
  const group = (signal: NodeJS.Signals) => {
    try {
      process.kill(-proc.pid!, signal);
    } catch {
      // gone
    }
  };
  let stopped: Promise<void> | null = null;
  const stop = () => (stopped ??= (async () => {
    stopping = true;
    if (alive()) {
      group('SIGTERM');
      const t = setTimeout(() => group('SIGKILL'), 20_000);
      await exited;
      clearTimeout(t);
    }
    // Anything of its group still there (it has none of its own, but make sure).
    group('SIGKILL');
    await fs.rm(dataDir, { recursive: true, force: true, maxRetries: 3 });
  })());
  const child: ServiceChild = {
    name: opts.name, role, pid: proc.pid, url: role === 'agent' ? null : `http://127.0.0.1:${port}`, proc, output,
    kinds: () => [...kinds].sort((a, b) => b[1] - a[1]), exits, alive, stop,
  };
  opts.onSpawn?.(child);
  const deadline = Date.now() + (opts.readyTimeoutMs ?? 120_000);
  try {
    for (;;) {
      if (spawnError) throw spawnError;
      if (!alive()) throw new Error(`${opts.name} exited during start-up (code ${proc.exitCode}, signal ${proc.signalCode}):\n${early.slice(-40).join('\n')}`);
      if (await opts.ready(child, early)) return child;
      if (Date.now() > deadline) throw new Error(`${opts.name} was not ready in time:\n${early.slice(-40).join('\n')}`);
      await sleep(100);
    }
  } catch (error) {
    await stop();
    throw error;
  }
}

/** GET /readyz answers 200. */
export async function readyz(child: ServiceChild): Promise<boolean> {
  if (!child.url) return false;
  const res = await fetch(`${child.url}/readyz`, { signal: AbortSignal.timeout(2000) }).catch(() => null);
  await res?.arrayBuffer().catch(() => undefined);
  return res?.status === 200;
}

/** A line of the log says `msg`. */
export const logged = (msg: string) => (_c: ServiceChild, lines: string[]) => lines.some((l) => l.includes(msg));
