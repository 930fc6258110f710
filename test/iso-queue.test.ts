/**
 * GET /controlnode/provision/queue from our own rows (issue 23): the Building ISO step queues its
 * provision.iso job through pg-boss's send inside its transaction and records an iso_build_job
 * row beside it; the worker marks it started and ends it with the build's outcome. Nothing reads
 * pg-boss's tables (test/no-pgboss-tables.test.ts).
 */
import pino from 'pino';
import { startTestApp, type TestApp } from './helpers/app';
import { rest } from './helpers/client';
import { makeNode, makeWorld, startRun, type World } from './helpers/engine';
import { buildRunIso, queueIsoBuild } from '../jobs/iso-build';

let t: TestApp;
let world: World;
beforeAll(async () => {
  // No workers: nothing takes the provision.iso jobs this test queues.
  t = await startTestApp({ role: 'api' });
  world = await makeWorld(t.app.services.prisma);
});
afterAll(async () => { await t?.stop(); });

describe('the ISO-build queue', () => {
  it('lists a queued build as pending, a started one as active, and none once the worker ended it; a rolled-back queueing leaves nothing', async () => {
    const { sql, queues } = t.app.services;
    const node = await makeNode(t.app.services.prisma, world, { state: 'enrolling' });
    const runId = await startRun(sql, node.id, 'metal-enroll', { verb: 'enroll' });
    const queue = async () => (await rest(t.url, t.adminToken, 'GET', '/controlnode/provision/queue')).body as Record<string, unknown>[];
    const mine = async () => (await queue()).filter((e) => e.job_id === runId);
    const jobs = () => queues!.boss.getQueueSize('provision.iso');

    const before = await jobs();
    await expect(sql.transaction(async (tx) => {
      await queueIsoBuild(tx, runId);
      throw new Error('roll back');
    })).rejects.toThrow('roll back');
    expect(await mine()).toEqual([]);
    expect(await jobs()).toBe(before);

    const id = await sql.transaction((tx) => queueIsoBuild(tx, runId));
    expect(await jobs()).toBe(before + 1);
    const job = await queues!.boss.getJobById('provision.iso', id);
    expect(job?.data).toEqual({ runId });
    expect(await mine()).toEqual([{ queue_id: id, job_id: runId, state: 'pending', bmc_ip: '127.20.0.1', hostname: '', created_at: expect.any(String), started_at: null }]);

    // The worker started it (the run is no metal-install run, so it finds nothing to build and ends it).
    await sql.query('UPDATE iso_build_job SET started_at = now() WHERE id = $1::uuid', [id]);
    expect(await mine()).toEqual([expect.objectContaining({ queue_id: id, state: 'active', started_at: expect.any(String) })]);
    const outcome = await buildRunIso({ sql, log: pino({ level: 'silent' }), isoDir: '/nonexistent-iso-dir', publicUrl: () => null, baseDir: '/nonexistent-base' } as never, runId, id);
    expect(outcome).toBe('skipped');
    expect(await mine()).toEqual([]);
  });
});
