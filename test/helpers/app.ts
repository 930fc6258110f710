import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import pg from 'pg';
import pino from 'pino';
import { startApp, type App } from '../../src/app';
import type { Config } from '../../src/config';
import { Sql } from '../../src/db/sql';
import { StatementCounter } from '../../src/db/client';

export const TEMPLATE_DB = 'metal_template';

function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = '/' + database;
  return u.toString();
}

/** A fresh database cloned from the migrated template: each suite gets its own, no mocks. */
export async function createTestDatabase(): Promise<string> {
  const adminUrl = process.env.METAL_TEST_ADMIN_URL;
  if (!adminUrl) throw new Error('METAL_TEST_ADMIN_URL is unset: run the tests through jest (globalSetup starts PostgreSQL)');
  const name = `metal_test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name} TEMPLATE ${process.env.METAL_TEST_TEMPLATE ?? TEMPLATE_DB}`);
  } finally {
    await admin.end();
  }
  return withDatabase(adminUrl, name);
}

/**
 * Plain SQL on a fresh database through a pool of one connection (a second PREPARE of one name on
 * it would fail; holding it makes every other statement wait, as a busy pool does), with an
 * `item (id text PRIMARY KEY, n int NOT NULL)` table to write.
 */
export async function oneConnectionSql(): Promise<{ pool: pg.Pool; sql: Sql; statements: StatementCounter }> {
  const pool = new pg.Pool({ connectionString: await createTestDatabase(), max: 1 });
  const statements = new StatementCounter();
  const sql = new Sql(pool, statements);
  await sql.query('CREATE TABLE item (id text PRIMARY KEY, n int NOT NULL)');
  return { pool, sql, statements };
}

export interface TestApp {
  app: App;
  url: string;
  adminToken: string;
  stop(): Promise<void>;
}

/** Starts the whole service (HTTP on a free port, queues, workers) on a database of its own. */
export async function startTestApp(overrides: Partial<Config> = {}, opts: { log?: import('pino').Logger; drivers?: import('../../clients/bmc/registry').DriverRegistry } = {}): Promise<TestApp> {
  const databaseUrl = overrides.databaseUrl ?? (await createTestDatabase());
  const adminToken = overrides.adminToken ?? `test-admin-${randomBytes(16).toString('hex')}`;
  const app = await startApp(
    { databaseUrl, adminToken, secretKey: randomBytes(32).toString('base64'), port: 0, host: '127.0.0.1', role: 'all', dataDir: '/nonexistent-not-used', bmcNetworks: ['127.0.0.0/8'], ...overrides },
    { log: opts.log ?? pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }), drivers: opts.drivers },
  );
  return { app, url: app.url!, adminToken, stop: () => app.stop() };
}

/** A trace-level logger whose every line lands in `lines`: for tests that scan the logs (secrets, levels). */
export function capturingLogger(lines: string[]): import('pino').Logger {
  const sink = new Writable({
    write(chunk, _enc, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  return pino({ level: 'trace' }, sink);
}
