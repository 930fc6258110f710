import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { fromRoot } from '../../src/paths';

/**
 * The built metalctl (dist/clients/cli/main.js) as a child process, as an operator runs it:
 * configured by METAL_URL / METAL_TOKEN in its environment only, its stdout not a terminal
 * (so plain lines, no bars) unless run under `script` (tty: true, a pseudo-terminal).
 */

export const METALCTL = fromRoot('dist', 'clients', 'cli', 'main.js');

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface CliRun {
  proc: ChildProcess;
  /** What it printed so far. */
  stdout(): string;
  stderr(): string;
  done: Promise<CliResult>;
  /** Resolves once stdout matches, or rejects (with what it printed) after `ms` or when it exits first. */
  waitFor(re: RegExp, ms?: number): Promise<void>;
}

export function assertBuilt(): void {
  if (!fs.existsSync(METALCTL)) throw new Error('run `npm run build` first (the tests run the built metalctl)');
}

export function startCli(args: string[], env: { url: string; token: string | null; extra?: Record<string, string> }, opts: { tty?: boolean; timeoutMs?: number } = {}): CliRun {
  const childEnv: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp', METAL_URL: env.url, ...(env.extra ?? {}) };
  if (env.token) childEnv.METAL_TOKEN = env.token;
  const argv = [METALCTL, ...args];
  // util-linux script(1) gives the child a pseudo-terminal: isTTY is true, as for an operator.
  const quote = (a: string) => `'${a.replace(/'/g, `'\\''`)}'`;
  const proc = opts.tty
    ? spawn('script', ['-qfec', [process.execPath, ...argv].map(quote).join(' '), '/dev/null'], { env: { ...childEnv, COLUMNS: '140', LINES: '40', TERM: 'xterm' }, stdio: ['pipe', 'pipe', 'pipe'] })
    : spawn(process.execPath, argv, { env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  proc.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const timer = setTimeout(() => proc.kill('SIGKILL'), opts.timeoutMs ?? 240_000);
  const done = new Promise<CliResult>((resolve) => {
    proc.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout: out, stderr: err });
    });
  });
  return {
    proc,
    stdout: () => out,
    stderr: () => err,
    done,
    async waitFor(re, ms = 60_000) {
      const end = Date.now() + ms;
      let exited = false;
      void done.then(() => (exited = true));
      while (!re.test(out)) {
        if (exited || Date.now() > end) throw new Error(`metalctl ${args.join(' ')}: no ${re} (${exited ? 'it exited' : 'timed out'}); stdout:\n${out}\nstderr:\n${err}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
}

/** Runs metalctl to its end. */
export function metalctl(args: string[], env: { url: string; token: string | null; extra?: Record<string, string> }, opts: { tty?: boolean; timeoutMs?: number } = {}): Promise<CliResult> {
  return startCli(args, env, opts).done;
}
