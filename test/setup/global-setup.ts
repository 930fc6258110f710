import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import PgBoss from 'pg-boss';
import pino from 'pino';
import { startEmbeddedPostgres } from '../../src/db/embedded';
import { migrate } from '../../src/db/migrate';
import { loadConfig } from '../../src/config';

export const TEMPLATE_DB = 'metal_template';
/** The only BMC network a test's service accepts (issue 21 item 7). */
export const LOOPBACK_ONLY = '127.0.0.0/8';

/**
 * One real PostgreSQL per test run (the embedded one, or TEST_DATABASE_URL's server), with a
 * template database holding the migrated schema and pg-boss's schema. Each suite clones it into a
 * database of its own (test/helpers/app.ts), which takes milliseconds.
 */
export default async function globalSetup(): Promise<void> {
  const log = pino({ level: 'warn' });
  let adminUrl = process.env.TEST_DATABASE_URL;
  if (!adminUrl) {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'metal-test-pg-'));
    const port = 30000 + Math.floor(Math.random() * 2000); // below the ephemeral range (see test/helpers/service.ts randomPort)
    // As root in a clone the postgres user cannot reach, the binaries are copied where it can,
    // exactly as `npm start` does (src/db/embedded.ts).
    const systemDir = loadConfig().embeddedPgSystemDir;
    const db = await startEmbeddedPostgres({ dataDir: dir, port, database: 'postgres', persistent: false, systemDir, log });
    adminUrl = db.url;
    (globalThis as Record<string, unknown>).__METAL_TEST_PG__ = { stop: db.stop, dir };
  }
  process.env.METAL_TEST_ADMIN_URL = adminUrl;
  // Issue 21 item 7: every service a test starts (in process, or spawned with this environment)
  // takes BMCs on loopback only, so a stray address fails at enroll instead of being connected to.
  process.env.BMC_NETWORKS = LOOPBACK_ONLY;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${TEMPLATE_DB}`);
  await admin.query(`CREATE DATABASE ${TEMPLATE_DB}`);
  await admin.end();
  const templateUrl = withDatabase(adminUrl, TEMPLATE_DB);
  await migrate(templateUrl);
  // Only to create pg-boss's schema in the template; no supervisor or scheduler (their timers outlive stop()).
  const boss = new PgBoss({ connectionString: templateUrl, max: 1, supervise: false, schedule: false });
  await boss.start();
  await boss.stop({ graceful: false, close: true, wait: true });
}

export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = '/' + database;
  return u.toString();
}
