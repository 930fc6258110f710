import type { Logger } from 'pino';
import type { Queues } from './registry';
import type { Sql } from '../src/db/sql';
import { pruneEvents } from '../src/events/retention';
import { releaseBatch } from '../src/modules/metal/bulk';
import { fabricRolloutWorkflows, type RolloutDeps } from './workflows/fabric-rollout';
import { DetachedRuns } from './engine-detached';
import { fabricPreflightWorkflow } from './workflows/fabric-preflight';
import { buildRunIso, type IsoBuildDeps } from './iso-build';
import { ISO_SWEEP_MS, sweepIsoDir } from '../src/modules/provision/iso-janitor';
import { advanceLeased, advanceLeasedBatch, BATCH_RUNS, LEASE_MS, sweepRuns } from './engine';
import { DueRunLoop } from './due-runs';
import { RUN_DUE_CHANNEL, type RunWaker } from './wake';
import type { Notifications } from '../src/db/listen';
import type { DomainCounters } from '../src/ops/metrics';

/** How often a worker looks for runs that look overdue but are not due (sweepRuns, a safety net), and how quiet they must be. */
const SWEEP_EVERY_MS = 15_000;
const SWEEP_GRACE_MS = 10_000;

/**
 * Runs this process advances at once (DueRunLoop): each fetch takes due runs for the free slots,
 * with their leases, in one statement. The loop fetches when a commit made a run due (a trigger on
 * workflow_run notifies RUN_DUE_CHANNEL; this process's own commits kick it directly), when a slot
 * frees while more were due, and at QUEUE_POLL_SECONDS (a wait's end, a retry's backoff).
 */
const ADVANCE_CONCURRENCY = 32;
/** The ISO-build queue's poll: a build takes about a second, so two more to start it are not felt. */
const ISO_POLL_SECONDS = 2;

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
  deps: {
    sql: Sql; retentionHours: number; fabric?: Omit<RolloutDeps, 'log'>; engineSql?: Sql;
    /** The process's LISTEN connection, whose workflow_run_due wakes the engine's fetch loop; without it, it polls only. */
    notifications?: Notifications;
    /** config.workflowEngine (WORKFLOW_ENGINE) and config.workflowLeaseMs (WORKFLOW_LEASE_MS). */
    workflow?: { engine: boolean; leaseMs?: number };
    /** The process's metrics: the engine's runs, steps and expired commands. */
    metrics?: DomainCounters | null;
    /** The ISO-build queue (control-node jobs): its loops, each one build at a time. */
    iso?: Omit<IsoBuildDeps, 'sql' | 'log'> & { concurrency: number };
  }): Promise<{ stop(): Promise<void>; waker: RunWaker | null }> {
  await queues.boss.schedule('events.prune', PRUNE_CRON, {}, { tz: 'UTC' });
  await queues.work('events.prune', async () => {
    const result = await pruneEvents(deps.sql, deps.retentionHours);
    if (result.deleted) log.info({ ...result, retentionHours: deps.retentionHours }, 'pruned events past the retention');
  });
  await queues.work('metal.batch', async (jobs) => {
    for (const job of jobs) {
      const queued = await releaseBatch(deps.sql, job.data.batchId);
      if (queued) log.info({ batchId: job.data.batchId, queued }, 'batch released: its workflow runs started');
    }
  });
  // The engine's statements are background work (engineSql: the pool's uncounted face), not a request's.
  const engineSql = deps.engineSql ?? deps.sql;
  const fabric = deps.fabric;
  // Runs not tied to a node (the fabric's rollout and preflight): their bodies run in the background under their lease.
  const detached = fabric ? new DetachedRuns({
    sql: engineSql, db: fabric.prisma, log, leaseMs: deps.workflow?.leaseMs ?? LEASE_MS,
    defs: [...fabricRolloutWorkflows({ ...fabric, log }), fabricPreflightWorkflow({ ...fabric, log })],
  }) : null;
  const engine = { sql: engineSql, log, leaseMs: deps.workflow?.leaseMs, metrics: deps.metrics, detached };
  // WORKFLOW_ENGINE=off: this worker advances no workflow run (the runs wait in their rows for a
  // worker that does). For a process that is to do the other jobs only, e.g. the bulk bench, which
  // times the API while 10,000 released runs would otherwise be advancing beside it.
  const engineOn = deps.workflow?.engine ?? true;
  let timer: NodeJS.Timeout | null = null;
  let listener: { stop(): void } | null = null;
  let loop: DueRunLoop | null = null;
  if (engineOn) {
    loop = new DueRunLoop(engineSql, (run) => advanceLeased(engine, run.runId, run), log, {
      concurrency: ADVANCE_CONCURRENCY, pollMs: queues.pollSeconds * 1000, leaseMs: deps.workflow?.leaseMs,
      advanceGroup: (runs) => advanceLeasedBatch(engine, runs), groupSize: BATCH_RUNS,
    });
    if (deps.notifications) listener = await deps.notifications.subscribe(RUN_DUE_CHANNEL, () => loop?.kick());
    const dueLoop = loop;
    // Every few seconds, the runs that look overdue but are not due (see sweepRuns).
    const sweep = async (graceMs: number) => {
      const woken = await sweepRuns(engineSql, graceMs);
      if (woken) {
        log.info({ woken }, 'woke workflow runs nothing had made due');
        dueLoop.kick();
      }
    };
    await sweep(SWEEP_GRACE_MS);
    loop.start();
    let sweeping: Promise<void> | null = null;
    timer = setInterval(() => {
      sweeping ??= sweep(SWEEP_GRACE_MS).catch((error: unknown) => log.warn({ err: error }, 'workflow sweep failed')).finally(() => { sweeping = null; });
    }, SWEEP_EVERY_MS);
    timer.unref();
  } else {
    log.warn('WORKFLOW_ENGINE=off: this worker advances no workflow run');
  }
  const iso = deps.iso;
  let isoTimer: NodeJS.Timeout | null = null;
  if (iso) {
    // One loop taking up to `concurrency` builds at a time (one poll for all of them, every 2 s:
    // a build waits at most that long to start, and an idle service polls once more per 2 s).
    // A full batch means more may be waiting: the loop fetches again as soon as it is done
    // instead of after the poll's 2 s (a backlog of 20 builds lost 2 s between every batch).
    const { concurrency, ...rest } = iso;
    let isoLoop: string | null = null;
    isoLoop = await queues.work('provision.iso', async (jobs) => {
      await eachSettled(jobs, (job) => buildRunIso({ ...rest, sql: deps.sql, log }, job.data.runId, job.id));
      if (isoLoop && jobs.length >= concurrency) queues.notify(isoLoop);
    }, { batchSize: concurrency, pollSeconds: ISO_POLL_SECONDS });
    // Ended jobs' ISOs off the disk (issue 21 item 12): what a crash left, now, then every ISO_SWEEP_MS.
    const isoSql = deps.engineSql ?? deps.sql;
    const sweepIsos = () => sweepIsoDir(isoSql, rest.isoDir, log).catch((error: unknown) => log.warn({ err: error }, 'the ISO_DIR sweep failed'));
    await sweepIsos();
    let isoSweeping: Promise<unknown> | null = null;
    isoTimer = setInterval(() => {
      isoSweeping ??= sweepIsos().finally(() => { isoSweeping = null; });
    }, ISO_SWEEP_MS);
    isoTimer.unref();
  }
  log.info('queue workers started');
  return {
    waker: loop,
    stop: async () => {
      if (timer) clearInterval(timer);
      if (isoTimer) clearInterval(isoTimer);
      listener?.stop();
      await loop?.stop();
      // Bodies still running hand their runs back (lease released, woken) for another worker.
      await detached?.stop();
    },
  };
}
