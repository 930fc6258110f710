import fs from 'node:fs/promises';
import { startTestApp, type TestApp } from './helpers/app';
import { uuidv7 } from '../src/ids';
import { fromRoot } from '../src/paths';

/**
 * Upgrading with a fabric job running: before issue 23 a job was carried out by the fabric.rollout
 * queue, now by its workflow run. The migration gives every running job its run, and a worker's
 * sweep takes it up: the job ends instead of staying running forever.
 */

jest.setTimeout(90_000);

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t?.stop();
});

it('a fabric job left running by the queue gets its run from the migration, and a worker finishes it', async () => {
  const prisma = t.app.services.prisma;
  const jobId = uuidv7();
  // What the old request side left: the job, its event, and a pg-boss job nobody consumes any more (not made here).
  await prisma.fabricJob.create({ data: { id: jobId, jobType: 'fabric_apply', scope: 'all', state: 'apply_started', totalNodes: 0 } });
  const sql = await fs.readFile(fromRoot('prisma', 'migrations', '20261206120000_fabric_job_runs', 'migration.sql'), 'utf8');
  await prisma.$executeRawUnsafe(sql);
  expect(await prisma.workflowRun.findUniqueOrThrow({ where: { id: `wf_${jobId}` } })).toMatchObject({ kind: 'fabric-apply', status: 'queued', nodeId: `fabric:${jobId}` });
  // Again: nothing twice.
  await prisma.$executeRawUnsafe(sql);
  expect(await prisma.workflowRun.count({ where: { id: `wf_${jobId}` } })).toBe(1);
  for (let i = 0; (await prisma.fabricJob.findUniqueOrThrow({ where: { id: jobId } })).jobStatus === 'running'; i += 1) {
    if (i > 600) throw new Error('the job was never taken up');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  // Its run carried it out: this database has no fabric config, so the apply fails as it says.
  expect(await prisma.fabricJob.findUniqueOrThrow({ where: { id: jobId } })).toMatchObject({ jobStatus: 'failed', state: 'apply_failed', error: expect.stringMatching(/fabric config/) });
  expect(await prisma.workflowRun.findUniqueOrThrow({ where: { id: `wf_${jobId}` } })).toMatchObject({ status: 'failed', lastErrorCode: 'FABRIC_APPLY_FAILED', resumes: 0 });
});
