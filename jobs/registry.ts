import PgBoss from 'pg-boss';
import type { Logger } from 'pino';
import pg from 'pg';

const QUEUE_CREATION_LOCK = 7243916082;

/**
 * Every queue the service uses, with the shape of its job data. Adding a queue here is the only way
 * to send to it: pg-boss drops a `send` to a queue it has never created without any error.
 */
export interface QueueData {
  /** Level-triggered: "make node X match its desired state". Queued by the metal verbs. */
  'metal.reconcile': { nodeId: string; reason: string; wipe?: string; batchId?: string };
}
export type QueueName = keyof QueueData;

export const QUEUES: { [K in QueueName]: PgBoss.Queue & { name: K } } = {
  'metal.reconcile': { name: 'metal.reconcile', policy: 'standard', retryLimit: 5, retryBackoff: true, expireInSeconds: 15 * 60 },
};

/** Something that runs SQL, e.g. an open transaction: jobs sent through it commit or roll back with it. */
export interface SqlExecutor {
  executeSql(text: string, values: unknown[]): Promise<{ rows: unknown[] }>;
}

export type Handler<K extends QueueName> = (jobs: PgBoss.Job<QueueData[K]>[]) => Promise<void>;

export class Queues {
  readonly boss: PgBoss;
  private workers: string[] = [];

  constructor(private databaseUrl: string, private log: Logger, private pollSeconds = 1) {
    this.boss = new PgBoss({ connectionString: databaseUrl, max: 5, application_name: 'metal-queues' });
    this.boss.on('error', (error) => this.log.error({ err: error }, 'queue error'));
  }

  async start(): Promise<void> {
    await this.boss.start();
    // Several processes starting at once deadlock inside createQueue (it creates a partition):
    // create the missing queues one process at a time, under an advisory lock.
    const lock = new pg.Client({ connectionString: this.databaseUrl });
    await lock.connect();
    try {
      await lock.query('SELECT pg_advisory_lock($1)', [QUEUE_CREATION_LOCK]);
      for (const queue of Object.values(QUEUES)) {
        if (!(await this.boss.getQueue(queue.name))) await this.boss.createQueue(queue.name, queue);
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

  /** Registers a worker (only in processes whose ROLE is worker or all). */
  async work<K extends QueueName>(name: K, handler: Handler<K>, opts: { batchSize?: number } = {}): Promise<void> {
    const id = await this.boss.work<QueueData[K]>(
      name,
      { batchSize: opts.batchSize ?? 1, pollingIntervalSeconds: this.pollSeconds },
      handler,
    );
    this.workers.push(id);
  }

  async depths(): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const name of Object.keys(QUEUES)) out[name] = await this.boss.getQueueSize(name);
    return out;
  }

  async stop(timeoutMs: number): Promise<void> {
    await this.boss.stop({ graceful: true, wait: true, timeout: timeoutMs, close: true });
  }
}

/** Runs pg-boss's SQL inside a Prisma interactive transaction. */
export function prismaExecutor(tx: { $queryRawUnsafe<T = unknown>(sql: string, ...values: unknown[]): Promise<T> }): SqlExecutor {
  return {
    async executeSql(text, values) {
      const rows = await tx.$queryRawUnsafe<unknown[]>(text, ...values);
      return { rows };
    },
  };
}
