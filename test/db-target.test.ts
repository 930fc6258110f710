/**
 * Issue 24 item 2: DATABASE_URL in libpq's multi-host form (src/db/target.ts). Parsed by the
 * service (node-postgres cannot), refused at start with a message that names DATABASE_URL and the
 * part at fault but never the password; a pool and a client of such a URL connect to the member
 * that is a writable primary, past members that refuse. The failover itself:
 * test/ha-failover.test.ts.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { fromRoot } from '../src/paths';
import { createTestDatabase } from './helpers/app';
import { freePort } from './helpers/ports';
import { loadConfig } from '../src/config';
import { databaseFailure } from '../src/db/failure';
import { databaseClient, databasePool, DatabaseUrlError, parseMultiHostUrl, primaryFinder, PrimaryFinder } from '../src/db/target';

const SECRET = 'pw-s3cret-Zq';

describe('parsing a multi-host DATABASE_URL', () => {
  it('takes libpq\'s form: every host, default port, percent-encoded credentials, parameters for each member', () => {
    const parsed = parseMultiHostUrl(`postgresql://app%40x:${encodeURIComponent('p@ss:/w,d')}@10.0.0.1:5001,db2.example.internal,[::1]:5003/metal%20db?target_session_attrs=read-write&sslmode=require&application_name=a`);
    expect(parsed?.hosts).toEqual([{ host: '10.0.0.1', port: 5001 }, { host: 'db2.example.internal', port: 5432 }, { host: '::1', port: 5003 }]);
    expect(parsed?.describe).toBe('10.0.0.1:5001,db2.example.internal:5432,[::1]:5003');
    expect(parsed?.describe).not.toContain('p@ss');
    const first = new URL(parsed!.urls[0]!);
    expect(decodeURIComponent(first.username)).toBe('app@x');
    expect(decodeURIComponent(first.password)).toBe('p@ss:/w,d');
    expect(decodeURIComponent(first.pathname.slice(1))).toBe('metal db');
    expect(first.searchParams.get('sslmode')).toBe('require');
    expect(first.searchParams.get('target_session_attrs')).toBeNull();
    expect(new URL(parsed!.urls[2]!).hostname).toBe('[::1]');
    expect(parseMultiHostUrl('postgres://u:p@h1,h2/db')?.hosts).toEqual([{ host: 'h1', port: 5432 }, { host: 'h2', port: 5432 }]);
  });

  it('leaves a single-host URL to node-postgres, as before', () => {
    for (const url of ['postgresql://u:p@127.0.0.1:5432/db', `postgresql://u:a,b@127.0.0.1/db`, 'postgresql://u:p@127.0.0.1:5432/db?host=/tmp/sock', 'not a url at all']) {
      expect(parseMultiHostUrl(url)).toBeNull();
    }
  });

  it.each([
    ['a port that is not one', `postgresql://u:${SECRET}@h1:5432,h2:99999/db`, /port of host 2/],
    ['a port that is no number', `postgresql://u:${SECRET}@h1:5432,h2:x1/db`, /port of host 2/],
    ['an empty host entry', `postgresql://u:${SECRET}@h1:5432,,h2/db`, /empty entry/],
    ['a host that is no host name', `postgresql://u:${SECRET}@h1:5432,h_2$:5/db`, /host 2 is not a host name/],
    ['a bad IPv6 address', `postgresql://u:${SECRET}@h1,[zz]:5/db`, /host 2 is not an IPv6/],
    ['too many hosts', `postgresql://u:${SECRET}@${Array.from({ length: 17 }, (_, i) => `h${i}`).join(',')}/db`, /more than 16 hosts/],
    ['no user', 'postgresql://h1,h2/db', /no user/],
    ['a password that is not percent-encoding', `postgresql://u:${SECRET}%zz@h1,h2/db`, /password is not valid percent-encoding/],
    ['no database', `postgresql://u:${SECRET}@h1,h2/`, /no database/],
    ['a database name too long', `postgresql://u:${SECRET}@h1,h2/${'d'.repeat(64)}`, /database name/],
    ['a parameter not supported', `postgresql://u:${SECRET}@h1,h2/db?host=/tmp`, /parameter host is not supported/],
    ['a parameter with a strange name', `postgresql://u:${SECRET}@h1,h2/db?${SECRET}=1`, /a query parameter that is not supported/],
    ['target_session_attrs that allows a standby', `postgresql://u:${SECRET}@h1,h2/db?target_session_attrs=any`, /target_session_attrs must be read-write or primary/],
    ['a control character in the password', `postgresql://u:${SECRET}%0A@h1,h2/db`, /control character/],
  ])('refuses %s, naming DATABASE_URL and not the password', (_what, url, reason) => {
    let error: unknown = null;
    try {
      parseMultiHostUrl(url);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(DatabaseUrlError);
    const message = (error as Error).message;
    expect(message).toMatch(/^DATABASE_URL is not a usable PostgreSQL URL: /);
    expect(message).toMatch(reason);
    expect(message).not.toContain(SECRET);
    // The same at start: loadConfig refuses it.
    expect(() => loadConfig({ DATABASE_URL: url })).toThrow(/^DATABASE_URL /);
  });
});

describe('connecting through a multi-host URL', () => {
  /** The test database over TCP, behind a member that refuses connections (nothing listens on its port). */
  async function urls(): Promise<{ live: string; multi: string }> {
    const live = new URL(await createTestDatabase());
    live.searchParams.delete('host'); // TCP on 127.0.0.1, not the Unix socket
    const dead = await freePort();
    const multi = `postgresql://${live.username}:${live.password}@127.0.0.1:${dead},127.0.0.1:${live.port}${live.pathname}?target_session_attrs=read-write`;
    return { live: live.toString(), multi };
  }

  it('a pool and a client connect to the writable member, past one that refuses; the search is shared and remembered', async () => {
    const { live, multi } = await urls();
    const pool = databasePool(multi, { max: 3 });
    try {
      const rows = await Promise.all([1, 2, 3].map(async () => (await pool.query<{ port: number }>('SELECT inet_server_port() AS port')).rows[0]!.port));
      expect(rows).toEqual([1, 2, 3].map(() => Number(new URL(live).port)));
      const client = databaseClient(multi, { application_name: 'target-test' });
      await client.connect();
      expect((await client.query<{ name: string }>('SELECT current_setting(\'application_name\') AS name')).rows[0]!.name).toBe('target-test');
      await client.end();
      // One search for three connections at once and the client after them.
      expect(primaryFinder(multi)!.rounds).toBe(1);
    } finally {
      await pool.end();
    }
  });

  it('a connection lost with its member makes the next one search again (a failover ends every session of the old primary)', async () => {
    const { live, multi } = await urls();
    const client = databaseClient(multi, { application_name: 'target-forget' });
    const lost = new Promise<void>((resolve) => client.on('error', () => resolve()));
    await client.connect();
    const finder = primaryFinder(multi)!;
    const before = finder.rounds;
    const again = databaseClient(multi);
    await again.connect(); // the member found is remembered: no search
    await again.end();
    expect(finder.rounds).toBe(before);
    const admin = new pg.Client({ connectionString: live });
    await admin.connect();
    try {
      await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'target-forget'");
    } finally {
      await admin.end();
    }
    await lost;
    const next = databaseClient(multi);
    await next.connect();
    await next.end();
    expect(finder.rounds).toBe(before + 1);
  });

  it('with no writable member, a connection fails as the database being unavailable (08001), not as a bug', async () => {
    const a = await freePort();
    const b = await freePort();
    const finder = new PrimaryFinder(parseMultiHostUrl(`postgresql://u:${SECRET}@127.0.0.1:${a},127.0.0.1:${b}/db`)!, 400);
    const error = await finder.find().then(() => null, (e: unknown) => e);
    expect(error).toMatchObject({ code: '08001' });
    expect(databaseFailure(error)).toBe('unavailable');
    expect((error as Error).message).not.toContain(SECRET);
    expect(finder.rounds).toBeGreaterThan(1); // it looked again after a pause before giving up
  });
});

describe('the service started with a multi-host DATABASE_URL it cannot use', () => {
  const run = (url: string) => {
    if (!fs.existsSync(fromRoot('dist', 'src', 'main.js'))) throw new Error('run `npm run build` first (npm test does)');
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'metal-target-'));
    try {
      return spawnSync(process.execPath, [fromRoot('dist', 'src', 'main.js')], {
        env: { ...process.env, DATABASE_URL: url, DATA_DIR: dataDir, PORT: '0', LOG_LEVEL: 'warn' }, encoding: 'utf8', timeout: 25_000,
      });
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  };

  it('a malformed one: exits 1 at once, its one fatal line naming DATABASE_URL and not the password', () => {
    const r = run(`postgresql://u:${SECRET}@127.0.0.1:5432,127.0.0.1:0/db`);
    expect(r.status).toBe(1);
    expect(r.stdout + r.stderr).toMatch(/"msg":"start-up failed".*DATABASE_URL is not a usable PostgreSQL URL: the port of host 2/);
    expect(r.stdout + r.stderr).not.toContain(SECRET);
  });

  it('one with no member up: waits for a primary for a while, then exits 1 saying so (not 0, silently, while waiting)', async () => {
    const r = run(`postgresql://u:${SECRET}@127.0.0.1:${await freePort()},127.0.0.1:${await freePort()}/db`);
    expect(r.status).toBe(1);
    expect(r.stdout + r.stderr).toMatch(/"msg":"start-up failed".*none of the 2 hosts of DATABASE_URL/);
    expect(r.stdout + r.stderr).not.toContain(SECRET);
  });
});
