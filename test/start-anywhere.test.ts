import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fromRoot } from '../src/paths';
import { socketDir } from '../src/db/embedded/cluster';
import { gql } from './helpers/client';
import { processesMentioning, randomPort, spawnService, waitReady, type Service } from './helpers/service';

const isRoot = process.getuid?.() === 0;

/**
 * The README's commands from a clone in a private folder (mkdtemp is 0700, like root's home). As
 * root, PostgreSQL runs as the postgres user, which cannot enter that folder: the service must
 * still start, stop cleanly and leave nothing behind; so must the test suite's global setup; and
 * where it truly cannot work, it says so in one line.
 */
describe('a clone in a 0700 folder', () => {
  const home = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'metal-anywhere-')));
  const clone = path.join(home, 'x');
  // A system folder of this test's own, so that the copy of the binaries happens every run.
  const sysParent = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'metal-anywhere-sys-')));
  fs.chmodSync(sysParent, 0o755);
  const systemDir = path.join(sysParent, 'sys');
  const port = randomPort(25000);
  const pgPort = randomPort(26000);
  const url = `http://127.0.0.1:${port}`;
  const started: Service[] = [];

  const env = (extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv => {
    const e: NodeJS.ProcessEnv = { ...process.env, PORT: String(port), EMBEDDED_PG_PORT: String(pgPort), EMBEDDED_PG_SYSTEM_DIR: systemDir, LOG_LEVEL: 'info', ...extra };
    delete e.DATABASE_URL;
    delete e.ADMIN_TOKEN;
    delete e.DATA_DIR; // the default, ./.data, inside the clone
    return e;
  };

  beforeAll(() => {
    expect(fs.statSync(home).mode & 0o777).toBe(0o700);
    execFileSync('git', ['clone', '-q', fromRoot(), clone]);
    // Hard links keep node_modules (and so the PostgreSQL binaries) inside the private folder, as
    // `npm ci` would put them; a symbolic link would point out of it and hide the problem.
    const linked = spawnSync('cp', ['-al', fromRoot('node_modules'), path.join(clone, 'node_modules')]);
    if (linked.status !== 0) execFileSync('cp', ['-a', fromRoot('node_modules'), path.join(clone, 'node_modules')]);
    if (!fs.existsSync(fromRoot('dist', 'src', 'main.js'))) throw new Error('run `npm run build` first (npm test does)');
    execFileSync('cp', ['-a', fromRoot('dist'), path.join(clone, 'dist')]);
  }, 120000);

  afterAll(async () => {
    for (const s of started) {
      if (s.proc.exitCode === null && s.proc.signalCode === null) {
        s.signalGroup('SIGKILL');
        await s.exited;
      }
    }
    for (const p of [...processesMentioning(clone), ...processesMentioning(systemDir)]) process.kill(p.pid, 'SIGQUIT');
    fs.rmSync(home, { recursive: true, force: true });
    fs.rmSync(sysParent, { recursive: true, force: true });
  });

  it('npm start serves /readyz and a group SIGTERM stops everything', async () => {
    const service = spawnService(process.execPath, ['dist/src/main.js'], { cwd: clone, env: env() });
    started.push(service);
    await waitReady(url, 60000, service);
    expect((await gql(url, null, '{ __typename }')).data).toEqual({ __typename: 'Query' });
    const dataDir = path.join(clone, '.data');
    const link = path.join(dataDir, 'pg');
    if (isRoot) {
      expect(service.lines().some((l) => l.msg.includes('copied them'))).toBe(true);
      // The cluster went where the postgres user can reach it; DATA_DIR/pg points there.
      expect(fs.lstatSync(link).isSymbolicLink()).toBe(true);
      expect(fs.readlinkSync(link).startsWith(path.join(systemDir, 'clusters') + path.sep)).toBe(true);
      const postmaster = Number(fs.readFileSync(path.join(link, 'postmaster.pid'), 'utf8').split('\n')[0]);
      expect(fs.readlinkSync(`/proc/${postmaster}/exe`).startsWith(systemDir + path.sep)).toBe(true);
    }
    // The secrets stay where the user asked, private.
    expect(fs.statSync(path.join(dataDir, 'admin-token')).mode & 0o777).toBe(0o600);
    expect(fs.statSync(home).mode & 0o777).toBe(0o700);

    service.signalGroup('SIGTERM');
    expect((await service.exited).code).toBe(0);
    expect(service.lines().some((l) => l.msg === 'embedded PostgreSQL stopped')).toBe(true);
    expect(processesMentioning(clone)).toEqual([]);
    expect(processesMentioning(systemDir)).toEqual([]);
  }, 90000);

  it("the test suite's global setup starts and removes its PostgreSQL from the clone's binaries", () => {
    const script = `
      const setup = require('./dist/test/setup/global-setup.js').default;
      const teardown = require('./dist/test/setup/global-teardown.js').default;
      const pg = require('pg');
      (async () => {
        await setup();
        const dir = globalThis.__METAL_TEST_PG__.dir;
        const client = new pg.Client({ connectionString: process.env.METAL_TEST_ADMIN_URL });
        await client.connect();
        const { rows } = await client.query("SELECT count(*)::int AS n FROM pg_database WHERE datname = 'metal_template'");
        await client.end();
        await teardown();
        console.log(JSON.stringify({ template: rows[0].n, dir, dirLeft: require('fs').existsSync(dir) }));
      })().catch((e) => { console.error(e); process.exit(1); });`;
    const run = spawnSync(process.execPath, ['-e', script], { cwd: clone, env: env(), encoding: 'utf8', timeout: 60000 });
    expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: '' });
    const result = JSON.parse(run.stdout.trim().split('\n').pop()!) as { template: number; dir: string; dirLeft: boolean };
    expect(result).toEqual({ template: 1, dir: expect.any(String), dirLeft: false });
    expect(processesMentioning(result.dir)).toEqual([]);
    expect(processesMentioning(systemDir)).toEqual([]);
  }, 90000);

  (isRoot ? it : it.skip)('where the postgres user cannot reach anything usable, one fatal line says why and what to do', () => {
    const closedSystemDir = path.join(home, 'sys'); // inside the 0700 folder
    const run = spawnSync(process.execPath, ['dist/src/main.js'], {
      cwd: clone,
      env: env({ EMBEDDED_PG_SYSTEM_DIR: closedSystemDir, DATA_DIR: path.join(clone, '.data-closed') }),
      encoding: 'utf8',
      timeout: 60000,
    });
    expect(run.status).toBe(1);
    const out = (run.stdout + run.stderr).trim().split('\n');
    expect(out).toHaveLength(1);
    const fatal = JSON.parse(out[0]!) as { level: string; error: string };
    expect(fatal.level).toBe('fatal');
    expect(fatal.error).toContain(`the postgres user cannot enter ${home}`);
    expect(fatal.error).toContain('EMBEDDED_PG_SYSTEM_DIR');
  }, 60000);
});

describe('the embedded PostgreSQL socket', () => {
  it('is in the cluster folder when its path fits a sockaddr_un and needs no quoting; TCP otherwise', () => {
    expect(socketDir({ dir: '/var/lib/metal-control-plane/clusters/ab-cd/pg' }, 31234)).toBe('/var/lib/metal-control-plane/clusters/ab-cd/pg');
    // 107 bytes is the most a socket path may have: dir + "/.s.PGSQL.31234" (15 bytes).
    expect(socketDir({ dir: '/' + 'a'.repeat(91) }, 31234)).toBe('/' + 'a'.repeat(91));
    expect(socketDir({ dir: '/' + 'a'.repeat(92) }, 31234)).toBeNull();
    expect(socketDir({ dir: '/tmp/with,comma/pg' }, 5432)).toBeNull();
    expect(socketDir({ dir: '/tmp/with space/pg' }, 5432)).toBeNull();
    expect(socketDir({ dir: 'relative/pg' }, 5432)).toBeNull();
  });
});
