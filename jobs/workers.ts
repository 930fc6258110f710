import type { Logger } from 'pino';
import type { Queues } from './registry';
import type { Sql } from '../src/db/sql';
import { pruneEvents } from '../src/events/retention';
import { releaseBatch } from '../src/modules/metal/bulk';

/** Every ten minutes: the retention check is cheap (a BRIN index on created_at). */
export const PRUNE_CRON = '*/10 * * * *';

/**
 * The workers this process runs when ROLE is worker or all. Each later issue adds its reconciler
 * here; a queue with no worker keeps its jobs until a worker process picks them up.
 */
export async function startWorkers(queues: Queues, log: Logger, deps: { sql: Sql; retentionHours: number }): Promise<void> {
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
  log.info('queue workers started');
}
