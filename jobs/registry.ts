import PgBoss from 'pg-boss';
import type { Logger } from 'pino';
import pg from 'pg';
import { statementName } from '../src/db/sql';
import { databaseClient, databasePool } from '../src/db/target';
import type { SqlExecutor } from './send';

const QUEUE_CREATION_LOCK = 7243916082;

/**
 * Every queue the service uses, with the shape of its job data. Adding a queue here is the only way
 * to send to it: pg-boss drops a `send` to a queue it has never created without any error.
 */
export interface QueueData {
  /**
   * "Release batch B": start the workflow run of each node of a
   * destructive bulk batch still in the verb's target state, once (command_batch.released_at). Queued by bulk for a batch without approver keys and by the
   * approval that reaches the quorum; the node list is the batch row's, never the job's.
   */
  'metal.batch': { batchId: string };
  /** Scheduled: deletes events older than the retention (EVENT_RETENTION_HOURS). */
  'events.prune': Record<string, never>;
  /**
   * "Build the installer ISO of control-node job R" (a metal-install run): queued by its Building
   * ISO step; the worker records the outcome as the run's iso report and wakes it. Bounded by the
   * number of loops a worker runs (CONTROLNODE_ISO_CONCURRENCY).
   */
  'provision.iso': { runId: string };
}
export type QueueName = keyof QueueData;

export const QUEUES: { [K in QueueName]: PgBoss.Queue & { name: K } } = {
  'metal.batch': { name: 'metal.batch', policy: 'standard', retryLimit: 5, retryBackoff: true, expireInSeconds: 5 * 60 },
  // One prune at a time is enough; a missed one is caught up by the next.
  'events.prune': { name: 'events.prune', policy: 'singleton', retryLimit: 1, expireInSeconds: 10 * 60 },
  // A build takes a second; one that outlives 10 minutes had its worker die: built again (idempotent).
  'provision.iso': { name: 'provision.iso', policy: 'standard', retryLimit: 3, retryBackoff: true, expireInSeconds: 10 * 60 },
};

/**
 * Queues no longer used (issue 23): metal.advance, the engine's wake-ups before it kept its own
 * due-run index (the migration that added workflow_run.due_at made its runs due), and
 * fabric.rollout with its dead letters, before a fabric job became a workflow run (the migration
 * fabric_job_runs gave a running job its run). Their jobs not yet fetched are purged at start
 * (pg-boss's purgeQueue). The queue itself stays: pg-boss's deleteQueue
 * refuses a queue that still holds fetched or finished jobs (a foreign key), and its own
 * maintenance ends those within their retention.
 */
const RETIRED_QUEUES = ['metal.advance', 'fabric.rollout', 'fabric.rollout.lost'];

export type Handler<K extends QueueName> = (jobs: PgBoss.Job<QueueData[K]>[]) => Promise<void>;

/**
 * pg-boss's connections, given to it as its `db`: each of its statements with parameters goes as
 * a named prepared statement (the text's hash, as Sql does), so its fetch and completion are
 * planned once per connection instead of at every call (the fetch's planning was 1.2 ms a call,
 * more than its execution, in the lifecycle bench). A text without parameters may hold several
 * statements (its migrations): sent as it is.
 */
class BossDb {
  private readonly pool: pg.Pool;
  private closed = false;

  constructor(databaseUrl: string, log: Logger) {
    this.pool = databasePool(databaseUrl, { max: 5, application_name: 'metal-queues' });
    this.pool.on('error', (error) => log.warn({ err: error }, 'a queue connection failed'));
  }

  /**
   * After close, undefined, as pg-boss's own Db answers then (its typing says otherwise; its
   * complete() reads `result && result.rows`): a handler that outlived stop()'s grace completes
   * its job into a closed pool, and that must not be an unhandled rejection.
   */
  async executeSql(text: string, values?: unknown[]): Promise<{ rows: unknown[] }> {
    if (this.closed) return undefined as unknown as { rows: unknown[] };
    return values?.length ? this.pool.query({ text, values, name: statementName(text) }) : this.pool.query(text, values);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pool.end();
  }
}

export class Queues {
  readonly boss: PgBoss;
  private readonly db: BossDb;
  private workers: string[] = [];

  constructor(private databaseUrl: string, private log: Logger, readonly pollSeconds = 1) {
    this.db = new BossDb(databaseUrl, log);
    this.boss = new PgBoss({ db: this.db });
    this.boss.on('error', (error) => this.log.error({ err: error }, 'queue error'));
  }

  async start(): Promise<void> {
    await this.boss.start();
    // Several processes starting at once deadlock inside createQueue (it creates a partition):
    // create the missing queues one process at a time, under an advisory lock.
    const lock = databaseClient(this.databaseUrl);
    await lock.connect();
    try {
      await lock.query('SELECT pg_advisory_lock($1)', [QUEUE_CREATION_LOCK]);
      for (const queue of Object.values(QUEUES)) {
        if (!(await this.boss.getQueue(queue.name))) await this.boss.createQueue(queue.name, queue);
      }
      for (const name of RETIRED_QUEUES) {
        if (await this.boss.getQueue(name)) await this.boss.purgeQueue(name);
      }
    } finally {
      await lock.query('SELECT pg_advisory_unlock($1)', [QUEUE_CREATION_LOCK]).catch(() => undefined);
      await lock.end();
    }
  }

  /** Queues a job; with `db`, inside the caller's transaction. */
  async send<K extends QueueName>(name: K, data: QueueData[K], opts: { db?: SqlExecutor; singletonKey?: string } = {}): Promise<string> {
    const id = await this.boss.send(name, data, {
      ...(opts.db ? { db: opts.db as PgBoss.Db } : {}),
      ...(opts.singletonKey ? { singletonKey: opts.singletonKey } : {}),
    });
    if (id === null) throw new Error(`queue ${name} refused the job (not created, or a singleton is queued)`);
    return id;
  }

  /** Registers a worker (only in processes whose ROLE is worker or all); resolves to its id (for notify). */
  async work<K extends QueueName>(name: K, handler: Handler<K>, opts: { batchSize?: number; pollSeconds?: number } = {}): Promise<string> {
    const id = await this.boss.work<QueueData[K]>(
      name,
      { batchSize: opts.batchSize ?? 1, pollingIntervalSeconds: opts.pollSeconds ?? this.pollSeconds },
      handler,
    );
    this.workers.push(id);
    return id;
  }

  /** Ends a worker's wait between polls: it fetches again at once (after its current batch, if any). */
  notify(workerId: string): void {
    this.boss.notifyWorker(workerId);
  }

  async depths(): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const name of Object.keys(QUEUES)) out[name] = await this.boss.getQueueSize(name);
    return out;
  }

  async stop(timeoutMs: number): Promise<void> {
    await this.boss.stop({ graceful: true, wait: true, timeout: timeoutMs, close: true });
    // pg-boss closes only a pool it made itself.
    await this.db.close();
  }
}

export { prismaExecutor, type SqlExecutor } from './send';
