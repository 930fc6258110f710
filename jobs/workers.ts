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
import { advanceRun, LEASE_MS, sweepRuns } from './engine';
import { ADVANCE_QUEUED_CHANNEL, queueAdvance } from './registry';
import { LocalAdvancer, type RunWaker } from './local-wake';
import type { Notifications } from '../src/db/listen';
import type { DomainCounters } from '../src/ops/metrics';

/** How often a worker looks for runs whose wake-up a dead worker took with it, and how quiet they must be. */
const SWEEP_EVERY_MS = 15_000;
const SWEEP_GRACE_MS = 10_000;

/** metal.advance jobs a worker takes at once: each advances its own run, side by side. */
const ADVANCE_BATCH = 16;
/**
 * pg-boss fetch loops on metal.advance. A loop takes a batch, waits for its slowest run, then
 * sleeps out the rest of QUEUE_POLL_SECONDS unless it is notified: by the commit of a statement
 * that queued jobs (ADVANCE_QUEUED_CHANNEL, a trigger on the queue's table), or by itself when its
 * batch was full (more are waiting). Without the notifications a loop drained at most 16 jobs a
 * second (the lifecycle bench: hundreds due and none active); with them two loops suffice, one
 * slow run holding back only its own batch, and an idle service polls twice a second.
 */
const ADVANCE_WORKERS = 2;
/** Runs this process advances at once when it woke them itself (LocalAdvancer), beside the loops' batches. */
const LOCAL_ADVANCE_CONCURRENCY = 16;
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
    /** The process's LISTEN connection, whose metal_advance_queued wakes the metal.advance loops; without it they poll only. */
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
    wake: (runId, afterMs) => queueAdvance(engineSql, runId, afterMs),
    defs: [...fabricRolloutWorkflows({ ...fabric, log }), fabricPreflightWorkflow({ ...fabric, log })],
  }) : null;
  const engine = { sql: engineSql, log, leaseMs: deps.workflow?.leaseMs, metrics: deps.metrics, detached };
  // WORKFLOW_ENGINE=off: this worker advances no workflow run (the runs wait in their rows for a
  // worker that does). For a process that is to do the other jobs only, e.g. the bulk bench, which
  // times the API while 10,000 released runs would otherwise be advancing beside it.
  const engineOn = deps.workflow?.engine ?? true;
  let timer: NodeJS.Timeout | null = null;
  let listener: { stop(): void } | null = null;
  let local: LocalAdvancer | null = null;
  if (engineOn) {
    // The runs this process's own commits wake (the built-in agent's results, the ramdisk reports
    // its API stores) are advanced here at once, with no metal.advance job (see local-wake.ts).
    local = new LocalAdvancer((runId) => advanceRun(engine, runId), (runId) => queueAdvance(engineSql, runId, 1000), LOCAL_ADVANCE_CONCURRENCY, log);
    const loops: string[] = [];
    for (let i = 0; i < ADVANCE_WORKERS; i += 1) {
      let id = '';
      id = await queues.work('metal.advance', async (jobs) => {
        try {
          await eachSettled(jobs, (job) => advanceRun(engine, job.data.runId));
        } finally {
          // A full batch: more are likely due, fetch again without the poll's pause.
          if (jobs.length >= ADVANCE_BATCH && id) queues.notify(id);
        }
      }, { batchSize: ADVANCE_BATCH });
      loops.push(id);
    }
    if (deps.notifications) listener = await deps.notifications.subscribe(ADVANCE_QUEUED_CHANNEL, () => { for (const id of loops) queues.notify(id); });
    // A worker starting after a crash wakes at once every run nobody holds; then, every few
    // seconds, the runs that stayed quiet with something to do (see sweepRuns).
    const sweep = async (graceMs: number) => {
      const woken = await sweepRuns(engineSql, graceMs);
      if (woken) log.info({ woken }, 'woke workflow runs whose wake-up was lost');
    };
    await sweep(0);
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
      await eachSettled(jobs, (job) => buildRunIso({ ...rest, sql: deps.sql, log }, job.data.runId));
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
    waker: local,
    stop: async () => {
      if (timer) clearInterval(timer);
      if (isoTimer) clearInterval(isoTimer);
      listener?.stop();
      await local?.stop();
      // Bodies still running hand their runs back (lease released, woken) for another worker.
      await detached?.stop();
    },
  };
}
