import PgBoss from 'pg-boss';
import type { QueueData, QueueName } from './registry';

/**
 * Queues pg-boss jobs inside the caller's transaction, through pg-boss's own public API (`send`
 * with its `db` option): the public module domain modules (src/modules/**) use to queue a job with
 * the write that makes it necessary (a bulk batch's release, an approved batch, an ISO build, a
 * fabric rollout). Nothing here knows pg-boss's tables: `send` writes its own INSERT, with the
 * queue's settings from its queue row, so a pg-boss upgrade is a version bump.
 *
 * The PgBoss instance below is never started: it only builds and sends `send`'s statement through
 * the executor it is given. pg-boss drops a job for a queue it has never created, so every queue
 * is created at start-up (Queues.start, jobs/registry.ts); a send that returns no id throws.
 */

/** Something that runs SQL, e.g. an open transaction: jobs sent through it commit or roll back with it. */
export interface SqlExecutor {
  executeSql(text: string, values: unknown[]): Promise<{ rows: unknown[] }>;
}

/** A transaction as the node store and the engine hold one (query(text, values)). */
export interface QueryRunner {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

const noDb: PgBoss.Db = {
  async executeSql() {
    throw new Error('jobs/send.ts sends only through the caller\'s transaction (its db option)');
  },
};
let sender: PgBoss | null = null;
const boss = () => (sender ??= new PgBoss({ db: noDb }));

/** A QueryRunner (SqlTx, the node store's Runner) as the executor pg-boss's `db` option takes. */
function runnerExecutor(db: QueryRunner): SqlExecutor {
  return { executeSql: async (text, values) => ({ rows: (await db.query(text, values)).rows }) };
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

/** Queues one job on `name` in `db`'s transaction (pg-boss's send); resolves to its id. `id`: the job's own, to record it beside. */
export async function sendInTx<K extends QueueName>(db: QueryRunner | SqlExecutor, name: K, data: QueueData[K], opts: { id?: string } = {}): Promise<string> {
  const executor = 'executeSql' in db ? db : runnerExecutor(db);
  const id = await boss().send(name, data, { db: executor as PgBoss.Db, ...(opts.id ? { id: opts.id } : {}) });
  if (id === null) throw new Error(`queue ${name} refused the job (not created yet?)`);
  return id;
}
