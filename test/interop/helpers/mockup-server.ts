/**
 * DMTF's Redfish Mockup Server for the interop suite: started from the peers folder
 * (INTEROP_PEERS, default ../shared/peers beside the repository) with its own start/stop scripts,
 * on loopback, on a free port, with its runtime files in a temporary HARNESS_DIR. The captures
 * (INTEROP_CAPTURES, default ../shared/redfish-captures) are served in place, never copied into
 * the project.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The repository root (test/interop/helpers/ is three levels down). */
export const REPO_ROOT = path.resolve(__dirname, '..', '..', '..');

export function peersDir(): string {
  return path.resolve(REPO_ROOT, process.env.INTEROP_PEERS ?? '../shared/peers');
}

export function capturesDir(): string {
  return path.resolve(REPO_ROOT, process.env.INTEROP_CAPTURES ?? '../shared/redfish-captures');
}

/** Throws one clear line when a folder the suite needs is missing. */
export function requireDir(dir: string, what: string, env: string): string {
  if (!fs.existsSync(dir)) throw new Error(`interop: ${what} not found at ${dir} (set ${env})`);
  return dir;
}

export interface MockupServer {
  port: number;
  /** http://127.0.0.1:<port>: the BMC address a node would be enrolled with. */
  origin: string;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/**
 * Serves one short-form mockup directory (index.json at its top: for a Mockup-Creator capture
 * that is `<capture>/redfish/v1`). Stops exactly the server it started.
 */
export async function startMockup(mockupDir: string): Promise<MockupServer> {
  const peers = requireDir(peersDir(), 'the Redfish peers', 'INTEROP_PEERS');
  const server = requireDir(path.join(peers, 'Redfish-Mockup-Server'), 'Redfish-Mockup-Server', 'INTEROP_PEERS');
  if (!fs.existsSync(path.join(mockupDir, 'index.json'))) throw new Error(`interop: no mockup (index.json) at ${mockupDir}`);
  const harness = fs.mkdtempSync(path.join(os.tmpdir(), 'interop-mockup-'));
  const env = { ...process.env, HARNESS_DIR: harness };
  let lastErr: unknown;
  // A free port can be taken between the probe and the bind: try a few.
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    try {
      await run(path.join(peers, 'bin', 'mockup-start.sh'), [server, mockupDir, String(port)], { env, timeout: 20_000 });
    } catch (e) {
      lastErr = e;
      await run(path.join(peers, 'bin', 'mockup-stop.sh'), [String(port)], { env }).catch(() => undefined);
      continue;
    }
    return {
      port,
      origin: `http://127.0.0.1:${port}`,
      async stop() {
        await run(path.join(peers, 'bin', 'mockup-stop.sh'), [String(port)], { env, timeout: 20_000 });
        fs.rmSync(harness, { recursive: true, force: true });
      },
    };
  }
  fs.rmSync(harness, { recursive: true, force: true });
  const err = lastErr as { stderr?: string; message?: string };
  throw new Error(`interop: the Mockup Server did not start for ${mockupDir}: ${(err.stderr || err.message || String(lastErr)).trim().split('\n').slice(-3).join(' | ')}`);
}

/**
 * A small mockup tree in a temporary directory, for captures that are single responses: each file
 * is copied byte for byte to the path of the resource it is (its own `@odata.id`, or the path
 * given), plus whatever minimal scaffolding the caller adds (a service root, a collection). The
 * directory is removed by the returned cleanup.
 */
export function buildTree(files: { path: string; from?: string; body?: unknown }[]): { dir: string; remove(): void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'interop-tree-'));
  for (const f of files) {
    const rel = f.path.replace(/^\/redfish\/v1\/?/, '').replace(/\/+$/, '');
    const target = path.join(dir, rel, 'index.json');
    fs.mkdirSync(path.dirname(target), { recursive: true });
    if (f.from) fs.copyFileSync(f.from, target);
    else fs.writeFileSync(target, JSON.stringify(f.body, null, 2));
  }
  return { dir, remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}
