import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';

export interface LogLine {
  level: number | string;
  msg: string;
  postgres?: string;
  [key: string]: unknown;
}

/** The service as a process of its own, in a process group of its own, as a terminal starts it. */
export interface Service {
  proc: ChildProcess;
  /** Also the process group id (spawned detached). */
  pid: number;
  output(): string;
  lines(): LogLine[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Signals every process of the group, as Ctrl-C or systemd's stop does. */
  signalGroup(signal: NodeJS.Signals): void;
  waitFor(test: (line: LogLine) => boolean, limitMs: number, what: string): Promise<LogLine>;
}

export function spawnService(command: string, args: string[], opts: { cwd: string; env: NodeJS.ProcessEnv }): Service {
  const proc = spawn(command, args, { cwd: opts.cwd, env: opts.env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const waiters = new Set<() => void>();
  const onData = (d: Buffer) => {
    output += d.toString();
    for (const w of waiters) w();
  };
  proc.stdout!.on('data', onData);
  proc.stderr!.on('data', onData);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.once('close', (code, signal) => {
      for (const w of waiters) w();
      resolve({ code, signal });
    }),
  );
  const lines = () =>
    output
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => {
        try {
          return JSON.parse(l) as LogLine;
        } catch {
          return { level: 'unparsed', msg: l };
        }
      });
  return {
    proc,
    pid: proc.pid!,
    output: () => output,
    lines,
    exited,
    signalGroup: (signal) => process.kill(-proc.pid!, signal),
    waitFor: (test, limitMs, what) =>
      new Promise((resolve, reject) => {
        const check = () => {
          const found = lines().find(test);
          if (found) {
            done();
            resolve(found);
          } else if (proc.exitCode !== null || proc.signalCode !== null) {
            done();
            reject(new Error(`exited before ${what}; output:\n${output}`));
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`no ${what} within ${limitMs} ms; output:\n${output}`));
        }, limitMs);
        const done = () => {
          clearTimeout(timer);
          waiters.delete(check);
        };
        waiters.add(check);
        check();
      }),
  };
}

export async function waitReady(url: string, limitMs: number, service?: Service): Promise<void> {
  const started = Date.now();
  while (Date.now() - started < limitMs) {
    if (service && (service.proc.exitCode !== null || service.proc.signalCode !== null)) {
      throw new Error(`exited before ready; output:\n${service.output()}`);
    }
    try {
      if ((await fetch(`${url}/readyz`)).status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} not ready within ${limitMs} ms${service ? `; output:\n${service.output()}` : ''}`);
}

/** Every live process whose command line mentions `text` (a data or cluster folder), but this one. */
export function processesMentioning(text: string): { pid: number; cmdline: string }[] {
  const found: { pid: number; cmdline: string }[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      const cmdline = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').join(' ');
      // A zombie has an empty command line: it is gone, only not reaped yet.
      if (cmdline.includes(text)) found.push({ pid, cmdline });
    } catch {
      // exited meanwhile
    }
  }
  return found;
}

/** Processes in the group `pgid`, from /proc (field 5 of stat), zombies excluded. */
export function processGroupMembers(pgid: number): number[] {
  const members: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (fields[0] !== 'Z' && Number(fields[2]) === pgid) members.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return members;
}

export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The postmaster pid from the cluster's postmaster.pid, or null. */
export function postmasterPid(clusterDir: string): number | null {
  try {
    return Number(fs.readFileSync(`${clusterDir}/postmaster.pid`, 'utf8').split('\n')[0]);
  } catch {
    return null;
  }
}

/**
 * A port in [base, base + 1000). Each suite has a base of its own below Linux's ephemeral range
 * (32768 and up), where outgoing connections take their local ports: a random port there collided.
 */
export const randomPort = (base: number) => base + Math.floor(Math.random() * 1000);

/**
 * After a suite of spawned services: kills what is still running (its group), then a postmaster a
 * failed test left behind (it runs detached, so the group kill misses it), then removes the folder.
 */
export async function cleanUpServices(started: Service[], clusterDir: string, dataDir: string): Promise<void> {
  for (const s of started) {
    if (s.proc.exitCode === null && s.proc.signalCode === null) {
      s.signalGroup('SIGKILL');
      await s.exited;
    }
  }
  const pid = postmasterPid(clusterDir);
  if (pid && isRunning(pid)) process.kill(pid, 'SIGQUIT');
  fs.rmSync(dataDir, { recursive: true, force: true });
}
