/**
 * Issue 21 item 1, the net under everything: a database error no code of the service handled (a
 * pg connection's 'error' event with no listener, a rejection nobody awaited) does not end the
 * process; any other uncaught error still does (exit 1). The built service, with a preloaded
 * module that plays the careless code: a pg client of its own with no 'error' listener, whose
 * backend the test terminates.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { fromRoot } from '../src/paths';
import { createTestDatabase } from './helpers/app';
import { randomPort, spawnService, waitReady, type Service } from './helpers/service';

jest.setTimeout(90_000);

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'metal-dbnet-'));
const started: Service[] = [];
let admin: pg.Client;
afterAll(async () => {
  for (const s of started) {
    if (s.proc.exitCode === null && s.proc.signalCode === null) {
      s.signalGroup('SIGKILL');
      await s.exited;
    }
  }
  await admin?.end();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function start(databaseUrl: string, preload: string, ready = true): Promise<{ service: Service; url: string }> {
  const file = path.join(dir, `preload-${randomBytes(4).toString('hex')}.js`);
  fs.writeFileSync(file, preload);
  const port = randomPort(25000);
  const service = spawnService(process.execPath, ['--require', file, fromRoot('dist', 'src', 'main.js')], {
    cwd: fromRoot(),
    env: { ...process.env, DATABASE_URL: databaseUrl, PORT: String(port), HOST: '127.0.0.1', ROLE: 'api', ADMIN_TOKEN: `net-${randomBytes(8).toString('hex')}`, DATA_DIR: path.join(dir, 'data'), LOG_LEVEL: 'warn' },
  });
  started.push(service);
  const url = `http://127.0.0.1:${port}`;
  if (ready) await waitReady(url, 60_000, service);
  return { service, url };
}

describe('a database error nobody handled', () => {
  it('is logged and the service carries on; another uncaught error still ends it', async () => {
    if (!fs.existsSync(fromRoot('dist', 'src', 'main.js'))) throw new Error('run `npm run build` first (npm test does)');
    const databaseUrl = await createTestDatabase();
    admin = new pg.Client({ connectionString: databaseUrl });
    await admin.connect();
    const { service, url } = await start(databaseUrl, `
      const pg = require(${JSON.stringify(require.resolve('pg'))});
      // No 'error' listener: a terminated backend makes the client emit an 'error' nobody hears.
      const client = new pg.Client({ connectionString: process.env.DATABASE_URL, application_name: 'careless-client' });
      client.connect().then(() => setInterval(() => {}, 1000));
      // A rejection nobody awaits: a statement on a client whose backend is gone.
      const lost = new pg.Client({ connectionString: process.env.DATABASE_URL, application_name: 'careless-client' });
      lost.on('error', () => {});
      lost.connect().then(() => { lost.on('end', () => { lost.query('SELECT 1'); }); });
    `);
    for (let i = 0; ; i += 1) {
      const { rowCount } = await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'careless-client'");
      if (rowCount) break;
      if (i > 100) throw new Error('the careless client never connected');
      await new Promise((r) => setTimeout(r, 100));
    }
    await service.waitFor((l) => l.msg === 'a database error nobody awaited; carrying on', 10_000, 'the rejection logged');
    await service.waitFor((l) => l.msg === 'a database error nobody handled; carrying on', 10_000, 'the error event logged');
    await new Promise((r) => setTimeout(r, 500));
    expect(service.proc.exitCode).toBeNull();
    expect((await fetch(`${url}/readyz`)).status).toBe(200);

    const other = await start(databaseUrl, `setTimeout(() => { throw new Error('a bug, not the database'); }, 3000);`, false);
    expect((await other.service.exited).code).toBe(1);
    expect(other.service.lines().some((l) => l.msg === 'uncaught exception')).toBe(true);
  });
});
