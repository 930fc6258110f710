import type { Queues } from './registry';
import type { Logger } from 'pino';

/**
 * The workers this process runs when ROLE is worker or all. Each later issue adds its reconciler
 * here; a queue with no worker keeps its jobs until a worker process picks them up.
 */
export async function startWorkers(_queues: Queues, log: Logger): Promise<void> {
  log.info('queue workers started');
}
