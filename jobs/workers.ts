import type { Logger } from 'pino';
import type { Queues } from './registry';
import type { Sql } from '../src/db/sql';
import { pruneEvents } from '../src/events/retention';
import { releaseBatch } from '../src/modules/metal/bulk';
import { failLostJob, runFabricJob, type RolloutDeps } from './fabric-rollout';
import { advanceRun, reconcileNode } from './engine';

/** metal.advance jobs a worker takes at once: each advances its own run, side by side. */
const ADVANCE_BATCH = 8;

/** Runs one job per item side by side; a throw fails the batch (pg-boss retries it: advancing is idempotent). */
async function eachSettled<T>(items: readonly T[], fn: (item: T) => Promise<unknown>): Promise<void> {
  const results = await Promise.allSettled(items.map(fn));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
}

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
  const engine = { sql: deps.sql, log };
  await queues.work('metal.advance', async (jobs) => {
    await eachSettled(jobs, (job) => advanceRun(engine, job.data.runId));
  }, { batchSize: ADVANCE_BATCH });
  // The verbs' queue before runs existed: a job left in it advances the node's active run.
  await queues.work('metal.reconcile', async (jobs) => {
    await eachSettled(jobs, (job) => reconcileNode(engine, job.data.nodeId));
  }, { batchSize: ADVANCE_BATCH });
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
