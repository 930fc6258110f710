/**
 * A database from before the engine's due-run index (issue 23) still has the metal.advance queue,
 * with jobs, and the index and notify trigger the old service built on its partition. The service
 * must start on it (pg-boss's deleteQueue would refuse the queue: its finished jobs hold a foreign
 * key, so its pending jobs are purged instead), and the migration's clean-up drops what the old
 * service built there.
 */
import fs from 'node:fs';
import path from 'node:path';
import { startTestApp } from './helpers/app';

const MIGRATION = path.resolve(__dirname, '../prisma/migrations/20261206100000_workflow_run_due/migration.sql');

it('an old database with the metal.advance queue: the migration drops our objects on its partition, and start purges its pending jobs', async () => {
  const first = await startTestApp({ role: 'api' });
  const boss = first.app.queues!.boss;
  const sql = first.app.services.sql;
  await boss.createQueue('metal.advance', { name: 'metal.advance', policy: 'standard' } as never);
  await boss.send('metal.advance', { runId: 'x' });
  await boss.send('metal.advance', { runId: 'y' });
  const [job] = await boss.fetch('metal.advance');
  await boss.complete('metal.advance', job!.id);
  expect(await boss.getQueueSize('metal.advance')).toBe(1);
  // What the old service built on the partition (its jobs/registry.ts), then the migration's clean-up.
  const { rows: [{ part }] } = await sql.query(`SELECT partition_name AS part FROM pgboss.queue WHERE name = 'metal.advance'`);
  await sql.query(`CREATE INDEX ${part}_run ON pgboss.${part} ((data->>'runId')) WHERE state < 'active'`);
  await sql.query(`CREATE FUNCTION public.metal_advance_queued_notify() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN PERFORM pg_notify('metal_advance_queued', ''); RETURN NULL; END $f$`);
  await sql.query(`CREATE TRIGGER metal_advance_queued AFTER INSERT ON pgboss.${part} FOR EACH ROW EXECUTE FUNCTION public.metal_advance_queued_notify()`);
  const cleanUp = fs.readFileSync(MIGRATION, 'utf8').split('\n');
  const from = cleanUp.findIndex((l) => l.startsWith('DO $$'));
  const to = cleanUp.findIndex((l) => l.startsWith('DROP FUNCTION IF EXISTS public.metal_advance_queued_notify'));
  await sql.query(cleanUp.slice(from, to + 1).join('\n'));
  const { rows: [left] } = await sql.query(
    `SELECT (SELECT count(*)::int FROM pg_trigger WHERE tgname = 'metal_advance_queued') AS triggers,
            (SELECT count(*)::int FROM pg_class WHERE relname = $1) AS indexes,
            (SELECT count(*)::int FROM pg_proc WHERE proname = 'metal_advance_queued_notify') AS functions`, [`${part}_run`]);
  expect(left).toEqual({ triggers: 0, indexes: 0, functions: 0 });
  await first.stop();

  const second = await startTestApp({ role: 'all', databaseUrl: first.app.databaseUrl, adminToken: first.adminToken });
  try {
    expect(await second.app.queues!.boss.getQueueSize('metal.advance')).toBe(0);
  } finally {
    await second.stop();
  }
}, 120000);
