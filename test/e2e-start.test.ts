import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fromRoot } from '../src/paths';
import { gql } from './helpers/client';

/**
 * The README's run command as an operator uses it: the built service, no DATABASE_URL, an embedded
 * PostgreSQL in DATA_DIR; ready (the 60 s limit only stops a hang: a busy machine takes its time);
 * SIGTERM stops it cleanly; data survives a restart.
 */
describe('npm start on an embedded PostgreSQL', () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'metal-e2e-'));
  const port = 28000 + Math.floor(Math.random() * 1000);
  const pgPort = 29000 + Math.floor(Math.random() * 1000);
  const url = `http://127.0.0.1:${port}`;
  let child: ChildProcess | undefined;
  let output = '';

  function start(): ChildProcess {
    const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, PORT: String(port), EMBEDDED_PG_PORT: String(pgPort), LOG_LEVEL: 'info' };
    delete env.DATABASE_URL;
    delete env.ADMIN_TOKEN;
    const proc = spawn(process.execPath, [fromRoot('dist', 'src', 'main.js')], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    proc.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    proc.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    return proc;
  }

  async function waitReady(limitMs: number): Promise<number> {
    const started = Date.now();
    while (Date.now() - started < limitMs) {
      try {
        if ((await fetch(`${url}/readyz`)).status === 200) return Date.now() - started;
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`not ready within ${limitMs} ms; output:\n${output}`);
  }

  async function stop(proc: ChildProcess): Promise<number | null> {
    const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
    proc.kill('SIGTERM');
    return exited;
  }

  afterAll(async () => {
    if (child && child.exitCode === null) await stop(child);
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  it('serves /graphql and /readyz, keeps data across a restart, stops on SIGTERM', async () => {
    if (!fs.existsSync(fromRoot('dist', 'src', 'main.js'))) throw new Error('run `npm run build` first (npm test does)');
    child = start();
    await waitReady(60000);
    expect((await gql(url, null, '{ __typename }')).data).toEqual({ __typename: 'Query' });

    const tokenFile = path.join(dataDir, 'admin-token');
    expect(fs.statSync(tokenFile).mode & 0o777).toBe(0o600);
    const token = fs.readFileSync(tokenFile, 'utf8').trim();
    expect(output).toContain(tokenFile);
    expect(output).not.toContain(token);
    const created = await gql(url, token, 'mutation { createTenant(input: {name: "kept"}) { id } }');
    expect(created.errors).toBeUndefined();

    expect(await stop(child)).toBe(0);
    expect(output).toContain('embedded PostgreSQL stopped');
    expect(fs.existsSync(path.join(dataDir, 'pg', 'postmaster.pid'))).toBe(false);

    child = start();
    await waitReady(60000);
    const tenants = await gql(url, token, '{ tenants { id name } }');
    expect(tenants.data?.tenants).toEqual([{ id: created.data!.createTenant.id, name: 'kept' }]);
    expect(await stop(child)).toBe(0);
  }, 150000);
});
