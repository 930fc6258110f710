import { createHash } from 'node:crypto';
import PgBoss from 'pg-boss';
import type { Logger } from 'pino';
import pg from 'pg';
import { statementName } from '../src/db/sql';

const QUEUE_CREATION_LOCK = 7243916082;

/**
 * Every queue the service uses, with the shape of its job data. Adding a queue here is the only way
 * to send to it: pg-boss drops a `send` to a queue it has never created without any error.
 */
export interface QueueData {
  /**
   * "Advance workflow run R": everything else (kind, params, step, attempts, waits) is in the
   * workflow_run and workflow_step rows. Queued by the node store when a run starts, by a command
   * result or a ramdisk callback that a waiting run may be waiting for, and by the engine itself
   * for a delayed retry or a deadline. Several jobs for one run are harmless: the run's lease
   * lets one worker at a time advance it, and a job that finds nothing to do does nothing.
   */
  'metal.advance': { runId: string };
  /**
   * "Release batch B": start the workflow run (and its metal.advance job) of each node of a
   * destructive bulk batch still in the verb's target state, once (command_batch.released_at). Queued by bulk for a batch without approver keys and by the
   * approval that reaches the quorum; the node list is the batch row's, never the job's.
   */
  'metal.batch': { batchId: string };
  /** Scheduled: deletes events older than the retention (EVENT_RETENTION_HOURS). */
  'events.prune': Record<string, never>;
  /** "Run fabric job J" (apply or teardown): everything else is in the fabric_job rows. */
  'fabric.rollout': { jobId: string };
  /** fabric.rollout's dead letters: a job whose retries ran out (a worker kept dying) is failed here, never left running. */
  'fabric.rollout.lost': { jobId: string };
  /**
   * "Build the installer ISO of control-node job R" (a metal-install run): queued by its Building
   * ISO step; the worker records the outcome as the run's iso report and wakes it. Bounded by the
   * number of loops a worker runs (CONTROLNODE_ISO_CONCURRENCY).
   */
  'provision.iso': { runId: string };
}
export type QueueName = keyof QueueData;

export const QUEUES: { [K in QueueName]: PgBoss.Queue & { name: K } } = {
  'metal.advance': { name: 'metal.advance', policy: 'standard', retryLimit: 5, retryBackoff: true, expireInSeconds: 15 * 60 },
  'metal.batch': { name: 'metal.batch', policy: 'standard', retryLimit: 5, retryBackoff: true, expireInSeconds: 5 * 60 },
  // One prune at a time is enough; a missed one is caught up by the next.
  'events.prune': { name: 'events.prune', policy: 'singleton', retryLimit: 1, expireInSeconds: 10 * 60 },
  // Before fabric.rollout: a queue's dead-letter queue must exist when the queue is created.
  'fabric.rollout.lost': { name: 'fabric.rollout.lost', policy: 'standard', retryLimit: 5, retryBackoff: true, expireInSeconds: 5 * 60 },
  // A crashed worker's job expires after an hour and is retried from its rows; twice at most.
  'fabric.rollout': { name: 'fabric.rollout', policy: 'standard', retryLimit: 2, retryDelay: 5, expireInSeconds: 60 * 60, deadLetter: 'fabric.rollout.lost' },
  // A build takes a second; one that outlives 10 minutes had its worker die: built again (idempotent).
  'provision.iso': { name: 'provision.iso', policy: 'standard', retryLimit: 3, retryBackoff: true, expireInSeconds: 10 * 60 },
};

/** Something that runs SQL, e.g. an open transaction: jobs sent through it commit or roll back with it. */
export interface SqlExecutor {
  executeSql(text: string, values: unknown[]): Promise<{ rows: unknown[] }>;
}

/**
 * metal.advance's partition of pgboss.job: pg-boss 10 names a queue's table 'j' and the hex SHA-224
 * of the queue's name (create_queue in its plans.js); start() checks it against pgboss.queue. The
 * wake-up lookups read it directly: through pgboss.job the planner took the fetch index
 * (name, start_after), whose estimate from stale statistics of a table that churns this fast was
 * 2 rows, and read every due job (1.3 ms at 300 machines) instead of the run's own.
 */
const advancePartitionName = `j${createHash('sha224').update('metal.advance').digest('hex')}`;
export const ADVANCE_PARTITION = `pgboss.${advancePartitionName}`;

/**
 * What a statement that queues metal.advance jobs notifies at its commit (a row trigger on the
 * partition; one notification per transaction, PostgreSQL folds the repeats): the workers'
 * fetch loops LISTEN for it and fetch at once instead of at their next poll.
 */
export const ADVANCE_QUEUED_CHANNEL = 'metal_advance_queued';

/**
 * An index of metal.advance's own partition (pg-boss 10 keeps each queue's jobs in a table of its
 * own, named in pgboss.queue.partition_name) on the run a job wakes, over the jobs not yet
 * fetched: what wakeRunCtes and the workflow sweep look up for every wake-up. Without it each
 * lookup read every job of the queue not yet fetched (the lifecycle bench: 3 ms each, a third of
 * PostgreSQL's time at 300 machines, more as the backlog grew). pg-boss knows nothing of it: it
 * only ever inserts, updates and deletes rows, which keep it up to date. Created once, here,
 * under the queue creation lock (IF NOT EXISTS: every later start finds it), with the trigger
 * that notifies ADVANCE_QUEUED_CHANNEL.
 */
const ADVANCE_RUN_INDEX_SQL = `DO $$
  DECLARE part text := (SELECT partition_name FROM pgboss.queue WHERE name = 'metal.advance');
  BEGIN
    IF part IS DISTINCT FROM '${advancePartitionName}' THEN
      RAISE EXCEPTION 'pg-boss keeps metal.advance in %, not in ${advancePartitionName} as this version expects', part;
    END IF;
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgboss.%I ((data->>''runId'')) WHERE state < ''active''', part || '_run', part);
    CREATE OR REPLACE FUNCTION public.metal_advance_queued_notify() RETURNS trigger LANGUAGE plpgsql AS $f$
      BEGIN PERFORM pg_notify('${ADVANCE_QUEUED_CHANNEL}', ''); RETURN NULL; END $f$;
    -- FOR EACH ROW: an insert through pgboss.job fires a partition's row triggers, never its
    -- statement triggers. Repeats within a transaction fold into one notification at the commit.
    EXECUTE format('CREATE OR REPLACE TRIGGER metal_advance_queued AFTER INSERT ON pgboss.%I FOR EACH ROW EXECUTE FUNCTION public.metal_advance_queued_notify()', part);
  END $$`;

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
    this.pool = new pg.Pool({ connectionString: databaseUrl, max: 5, application_name: 'metal-queues' });
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

  constructor(private databaseUrl: string, private log: Logger, private pollSeconds = 1) {
    this.db = new BossDb(databaseUrl, log);
    this.boss = new PgBoss({ db: this.db });
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
      await lock.query(ADVANCE_RUN_INDEX_SQL);
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

/** Runs pg-boss's SQL inside a Prisma interactive transaction. */
export function prismaExecutor(tx: { $queryRawUnsafe<T = unknown>(sql: string, ...values: unknown[]): Promise<T> }): SqlExecutor {
  return {
    async executeSql(text, values) {
      const rows = await tx.$queryRawUnsafe<unknown[]>(text, ...values);
      return { rows };
    },
  };
}

/**
 * SQL that queues one job on `queue` per row of `from`, with `data` (a jsonb expression over those
 * rows): for set-based writers that queue thousands of jobs inside the statement that makes them
 * necessary (a verb's compare-and-set), instead of building a JSON array for `boss.insert`.
 * It is pg-boss 10's own insertJobs (src/plans.js) for a job with no per-job options: every
 * setting comes from the queue's row, then pg-boss's defaults. test/jobs-sql.test.ts checks that
 * its jobs equal boss.insert's and that pg-boss fetches and completes them.
 *
 * pg-boss ends it with ON CONFLICT DO NOTHING, which lets its unique indexes drop a singleton's
 * duplicate. Those indexes all name another policy (short, singleton, stately) or a singleton_on,
 * so a standard queue's job (singleton_on NULL, a fresh uuid) can meet none of them: there the
 * clause only turns every row into a speculative insertion (probes of every unique index, a lock
 * and one more WAL record per row), which was a third of 10,000 jobs' time. Without it, a row
 * that did conflict would fail the statement instead of being dropped silently.
 */
export function insertJobsSql(queue: QueueName, data: string, from: string, startAfter = 'now()'): string {
  const onConflict = QUEUES[queue].policy === 'standard' ? '' : '\n    ON CONFLICT DO NOTHING';
  return `INSERT INTO pgboss.job (id, name, data, priority, start_after, singleton_key, singleton_on, dead_letter,
                          expire_in, keep_until, retry_limit, retry_delay, retry_backoff, policy)
    SELECT gen_random_uuid(), q.name, ${data}, 0, ${startAfter}, NULL, NULL, q.dead_letter,
           CASE WHEN q.expire_seconds IS NOT NULL THEN q.expire_seconds * interval '1s' ELSE interval '15 minutes' END,
           now() + CAST(COALESCE((q.retention_minutes * 60)::text, '14 days') AS interval),
           COALESCE(q.retry_limit, 2),
           CASE WHEN COALESCE(q.retry_backoff, false) THEN GREATEST(COALESCE(q.retry_delay, 0), 1) ELSE COALESCE(q.retry_delay, 0) END,
           COALESCE(q.retry_backoff, false),
           q.policy
      FROM ${from} JOIN pgboss.queue q ON q.name = '${queue}'${onConflict}`;
}

/** Something that runs SQL in an open transaction (the node store's Runner). */
export interface QueryRunner {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
}

/**
 * Two CTEs, `due` and `job`, for a statement that wakes the run `runIdSql` (an SQL expression, null
 * for none): `due` row-locks a job of the run that no worker has fetched yet and that is due by
 * `at`, else `job` queues one due at `at`; nothing when `when` (an SQL condition) is false. A due,
 * unfetched job already wakes the run after the caller's commit, so a second one would only cost
 * a fetch and a lease round trip (the lifecycle bench: 2.8 to 3.8 jobs per step, most of them
 * wake-ups of a run already due). The lock is what makes this safe: pg-boss fetches with SKIP
 * LOCKED, so it cannot take the job before the caller's transaction (and what it wrote for the run)
 * commits; and a job a worker is fetching right now is skipped here (SKIP LOCKED), so the caller
 * queues its own. Exactly one of them
 * has a row when the run is woken: `(SELECT count(*) FROM job) + (SELECT count(*) FROM due)`.
 * queueAdvance, the command results, the ramdisk reports and the engine's flush all wake this way.
 */
export function wakeRunCtes(runIdSql: string, opts: { at?: string; when?: string } = {}): string {
  const at = opts.at ?? 'now()';
  const when = opts.when ?? 'true';
  return `due AS (
       SELECT j.id FROM ${ADVANCE_PARTITION} j
        WHERE ${when} AND j.state < 'active' AND j.start_after <= ${at} AND j.data->>'runId' = ${runIdSql}
        LIMIT 1 FOR UPDATE SKIP LOCKED
     ), job AS (
       ${insertJobsSql('metal.advance', `jsonb_build_object('runId', ${runIdSql})`, `(SELECT 1 WHERE ${when} AND ${runIdSql} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM due)) AS one`, at)}
       RETURNING id
     )`;
}

/**
 * Queues "advance run R" inside the caller's transaction, now or after `afterMs`: what a command
 * result, a ramdisk callback or the engine's own timer does to wake a run. A job of the run not
 * yet fetched and due by then does it instead (wakeRunCtes). Resolves to the job id.
 */
export async function queueAdvance(db: QueryRunner, runId: string, afterMs = 0): Promise<string> {
  const { rows } = await db.query(
    `WITH ${wakeRunCtes('$1::text', { at: "now() + $2::int * interval '1 millisecond'" })}
     SELECT COALESCE((SELECT id FROM job), (SELECT id FROM due))::text AS id`,
    [runId, Math.max(0, Math.round(afterMs))],
  );
  if (!rows[0]?.id) throw new Error('the metal.advance queue is missing: the job was not queued');
  return rows[0].id as string;
}
