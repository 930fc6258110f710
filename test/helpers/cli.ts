import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/** The built CLI, run as an operator runs it: a child process (`npm run build` first). */
export const CLI_MAIN = path.join(__dirname, '..', '..', 'dist', 'clients', 'cli', 'main.js');

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** The environment metalctl sees: none of the test process's METAL_* variables, these instead. */
export function cliEnv(vars: Record<string, string | undefined>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('METAL_') && !k.startsWith('METALCTL_')) env[k] = v;
  for (const [k, v] of Object.entries(vars)) if (v !== undefined) env[k] = v;
  return env;
}

export interface RunningCli {
  proc: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves once stdout holds text matching `test`. */
  waitFor(test: RegExp, limitMs: number): Promise<void>;
  done: Promise<CliResult>;
}

export function startCli(args: string[], env: NodeJS.ProcessEnv, opts: { cwd?: string } = {}): RunningCli {
  if (!fs.existsSync(CLI_MAIN)) throw new Error(`${CLI_MAIN} is missing: run npm run build first`);
  const proc = spawn(process.execPath, [CLI_MAIN, ...args], { env, cwd: opts.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  const waiters = new Set<() => void>();
  proc.stdout!.on('data', (d: Buffer) => {
    stdout += d.toString();
    for (const w of waiters) w();
  });
  proc.stderr!.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const done = new Promise<CliResult>((resolve) => proc.once('close', (code, signal) => {
    for (const w of waiters) w();
    resolve({ code, signal, stdout, stderr });
  }));
  return {
    proc,
    stdout: () => stdout,
    stderr: () => stderr,
    done,
    waitFor: (test, limitMs) => new Promise((resolve, reject) => {
      const check = () => {
        if (test.test(stdout)) {
          finish();
          resolve();
        } else if (proc.exitCode !== null || proc.signalCode !== null) {
          finish();
          reject(new Error(`metalctl ended before ${test}; stdout:\n${stdout}\nstderr:\n${stderr}`));
        }
      };
      const timer = setTimeout(() => {
        finish();
        reject(new Error(`no ${test} within ${limitMs} ms; stdout:\n${stdout}\nstderr:\n${stderr}`));
      }, limitMs);
      const finish = () => {
        clearTimeout(timer);
        waiters.delete(check);
      };
      waiters.add(check);
      check();
    }),
  };
}

/** Runs metalctl to its end (killed after limitMs). */
export async function runCli(args: string[], env: NodeJS.ProcessEnv, limitMs = 60_000): Promise<CliResult> {
  const running = startCli(args, env);
  const timer = setTimeout(() => running.proc.kill('SIGKILL'), limitMs);
  try {
    return await running.done;
  } finally {
    clearTimeout(timer);
  }
}
