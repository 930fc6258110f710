import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fromRoot } from '../src/paths';
import { gql } from './helpers/client';
import { cleanUpServices, isRunning, postmasterPid, processesMentioning, randomPort, spawnService, waitReady, type Service } from './helpers/service';

/**
 * One service per DATA_DIR. A second start while the first lives refuses at once, naming the
 * owner's pid and the folder, and leaves the first one's database alone. A service that died
 * without stopping (SIGKILL) leaves an orphaned postmaster: the next start stops it and recovers.
 */
describe('a second start on the same DATA_DIR', () => {
  const dataDir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'metal-second-')));
  const clusterDir = path.join(dataDir, 'pg');
  const first = { port: randomPort(21000), pgPort: randomPort(22000) };
  const started: Service[] = [];

  function start(ports: { port: number; pgPort: number }): Service {
    if (!fs.existsSync(fromRoot('dist', 'src', 'main.js'))) throw new Error('run `npm run build` first (npm test does)');
    const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, PORT: String(ports.port), EMBEDDED_PG_PORT: String(ports.pgPort), LOG_LEVEL: 'info' };
    delete env.DATABASE_URL;
    delete env.ADMIN_TOKEN;
    const service = spawnService(process.execPath, [fromRoot('dist', 'src', 'main.js')], { cwd: fromRoot(), env });
    started.push(service);
    return service;
  }

  afterAll(() => cleanUpServices(started, clusterDir, dataDir));

  it('refuses at once while the first serves on, and recovers from an orphaned postmaster', async () => {
    const url = `http://127.0.0.1:${first.port}`;
    const a = start(first);
    await waitReady(url, 60000, a);
    const token = fs.readFileSync(path.join(dataDir, 'admin-token'), 'utf8').trim();
    const created = await gql(url, token, 'mutation { createTenant(input: {name: "before-orphan"}) { id } }');
    expect(created.errors).toBeUndefined();
    const postmaster = postmasterPid(clusterDir)!;

    // Other ports, same DATA_DIR: refused by the lock before anything else happens.
    const b = start({ port: randomPort(21000), pgPort: randomPort(22000) });
    const refused = await b.exited;
    expect(refused.code).toBe(1);
    const out = b.output().trim().split('\n');
    expect(out).toHaveLength(1); // one line, no stack trace
    const fatal = JSON.parse(out[0]!) as { level: string; error: string };
    expect(fatal.level).toBe('fatal');
    expect(fatal.error).toContain(`pid ${a.pid}`);
    expect(fatal.error).toContain(dataDir);
    // The first one still serves, on the same postmaster.
    expect((await fetch(`${url}/readyz`)).status).toBe(200);
    expect((await gql(url, token, '{ tenants { name } }')).data?.tenants).toEqual([{ name: 'before-orphan' }]);
    expect(postmasterPid(clusterDir)).toBe(postmaster);
    expect(isRunning(postmaster)).toBe(true);

    // The service dies without stopping anything: its postmaster (detached) runs on, an orphan.
    process.kill(a.pid, 'SIGKILL');
    await a.exited;
    expect(isRunning(postmaster)).toBe(true);

    const c = start(first);
    await waitReady(url, 60000, c);
    const lines = c.lines();
    expect(lines.some((l) => l.msg.includes('stale lock'))).toBe(true);
    expect(lines.some((l) => l.msg.includes('orphaned embedded PostgreSQL') && l.pid === postmaster)).toBe(true);
    expect(isRunning(postmaster)).toBe(false);
    expect((await gql(url, token, '{ tenants { name } }')).data?.tenants).toEqual([{ name: 'before-orphan' }]);

    c.signalGroup('SIGTERM');
    expect((await c.exited).code).toBe(0);
    expect(processesMentioning(dataDir)).toEqual([]);
  }, 120000);
});
