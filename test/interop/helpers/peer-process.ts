/**
 * Starting and stopping the peers through their own scripts (../shared/peers/bin), each start with a
 * private HARNESS_DIR (mktemp) and a free loopback port. The scripts record the pid they started in
 * that HARNESS_DIR and stop exactly that one; stop() then checks it is gone and removes the folder.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { isRunning, processesMentioning } from '../../helpers/service';
import { freePort } from '../../helpers/ports';

export { freePort };


export function runScript(script: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs = 30000): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile(script, args, { env: { ...process.env, ...env }, timeout: timeoutMs, encoding: 'utf8' }, (error, stdout, stderr) => {
      const code = error ? (typeof (error as { code?: unknown }).code === 'number' ? (error as { code: number }).code : 1) : 0;
      resolve({ code, output: `${stdout}${stderr}`.trim() });
    });
  });
}

export interface PeerProcess {
  /** The pid the peer's start script recorded (the python server). */
  pid: number;
  harnessDir: string;
  /** Runs the peer's stop script, checks the pid is gone and nothing else runs from the folder, removes it. */
  stop(): Promise<void>;
}

export function makeHarnessDir(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `interop-${prefix}-`));
  // The peers' python servers run as this user; nothing else needs the folder.
  return dir;
}

/**
 * Starts a peer with `start` (its script and arguments), reading the pid from `pidFile` once the
 * script has seen the server answer; a start that fails (a port taken meanwhile) is tried again on
 * another port, at most three times.
 */
export async function startPeer(opts: {
  name: string;
  start: (port: number) => { script: string; args: string[]; env?: NodeJS.ProcessEnv };
  stop: (port: number) => { script: string; args: string[] };
  pidFile: (harnessDir: string, port: number) => string;
}): Promise<PeerProcess & { port: number }> {
  let last = '';
  for (let attempt = 0; attempt < 3; attempt += 1) {
    const harnessDir = makeHarnessDir(opts.name);
    const port = await freePort();
    const { script, args, env } = opts.start(port);
    const started = await runScript(script, args, { ...env, HARNESS_DIR: harnessDir }, 60000);
    const pidPath = opts.pidFile(harnessDir, port);
    const pid = fs.existsSync(pidPath) ? Number(fs.readFileSync(pidPath, 'utf8').trim()) : NaN;
    if (started.code === 0 && Number.isInteger(pid) && pid > 0) {
      let stopped = false;
      return {
        pid, harnessDir, port,
        async stop() {
          if (stopped) return;
          stopped = true;
          const s = opts.stop(port);
          const result = await runScript(s.script, s.args, { HARNESS_DIR: harnessDir });
          if (result.code !== 0) throw new Error(`${opts.name}: stop script failed: ${result.output}`);
          for (let i = 0; i < 50 && isRunning(pid); i += 1) await new Promise((r) => setTimeout(r, 100));
          if (isRunning(pid)) throw new Error(`${opts.name}: pid ${pid} still runs after its stop script`);
          const left = processesMentioning(harnessDir);
          if (left.length) throw new Error(`${opts.name}: still running from ${harnessDir}: ${left.map((p) => p.pid).join(', ')}`);
          fs.rmSync(harnessDir, { recursive: true, force: true });
        },
      };
    }
    last = started.output;
    // A half-started server: stop exactly what the script recorded, then try another port.
    if (Number.isInteger(pid) && pid > 0) {
      const s = opts.stop(port);
      await runScript(s.script, s.args, { HARNESS_DIR: harnessDir });
    }
    fs.rmSync(harnessDir, { recursive: true, force: true });
  }
  throw new Error(`${opts.name} did not start: ${last.split('\n').slice(-5).join(' | ')}`);
}
