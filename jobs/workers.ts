import type { Logger } from 'pino';
import type { Queues } from './registry';
import type { Sql } from '../src/db/sql';
import { pruneEvents } from '../src/events/retention';
import { releaseBatch } from '../src/modules/metal/bulk';
import { failLostJob, runFabricJob, type RolloutDeps } from './fabric-rollout';

/** Every ten minutes: the retention check is cheap (a BRIN index on created_at). */
export const PRUNE_CRON = '*/10 * * * *';

/**
 * The workers this process runs when ROLE is worker or all. Each later issue adds its reconciler
 * here; a queue with no worker keeps its jobs until a worker process picks them up.
 */
export async function startWorkers(queues: Queues, log: Logger,
  deps: { sql: Sql; retentionHours: number; fabric?: Omit<RolloutDeps, 'log'> }): Promise<void> {
  await queues.boss.schedule('events.prune', PRUNE_CRON, {}, { tz: 'UTC' });
  await queues.work('events.prune', async () => {
    const result = await pruneEvents(deps.sql, deps.retentionHours);
    if (result.deleted) log.info({ ...result, retentionHours: deps.retentionHours }, 'pruned events past the retention');
  });
  await queues.work('metal.batch', async (jobs) => {
    for (const job of jobs) {
      const queued = await releaseBatch(deps.sql, job.data.batchId);
      if (queued) log.info({ batchId: job.data.batchId, queued }, 'batch released: reconciler jobs queued');
    }
  });
  const fabric = deps.fabric;
  if (fabric) {
    // One job at a time per process; the fabric_job_one_running index keeps it one cluster-wide.
    await queues.work('fabric.rollout', async (jobs) => {
      for (const job of jobs) await runFabricJob({ ...fabric, log }, job.data.jobId);
    });
    await queues.work('fabric.rollout.lost', async (jobs) => {
      for (const job of jobs) {
        await failLostJob(fabric, job.data.jobId);
        log.error({ jobId: job.data.jobId }, 'fabric job failed: its worker was lost on every attempt');
      }
    });
  }
  log.info('queue workers started');
}
