import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { ERROR_CODES } from '../errors';
import { PROVISION_STATES, isWorkflowKind } from '../modules/metal/states';
import { AGENT_RESULT_CODES, COMMAND_KINDS } from '../modules/sites/commands';

/** The resolution of the event-loop lag histogram (prom-client's eventLoopMonitoringPrecision). */
const EVENT_LOOP_SAMPLE_MS = 100;

/**
 * The error codes a workflow run or a step can end with, as label values: the service's own
 * vocabulary (src/errors.ts), the codes an agent may report (AGENT_RESULT_CODES) and the ones the
 * engine and the workflows fail with (jobs/). Anything else is counted as OTHER, so a label never
 * carries a value the service did not name itself. test/metrics-domain.test.ts checks that every
 * code jobs/ can fail with is on this list.
 */
export const RUN_ERROR_CODES: readonly string[] = [...new Set<string>([
  ...ERROR_CODES,
  ...AGENT_RESULT_CODES,
  'EXPIRED', 'CALLBACK_TIMEOUT', 'WORKER_LOST', 'STEP_ERROR', 'OUTCOME_UNKNOWN', 'NO_CONFIRMED_MAC',
  'DCGM_FAILED', 'DEPLOY_STEP_FAILED', 'INVENTORY_MISMATCH', 'ISO_BUILD_FAILED', 'ISO_DIR_FULL', 'INSTALL_FAILED', 'INSTALL_STUCK',
  // The fabric's runs (jobs/workflows/fabric-*.ts): a node's step, a rollback, the run's end.
  'NODE_FAILED', 'UNREACHABLE', 'ROLLBACK_FAILED', 'JOB_NOT_RUNNING', 'FABRIC_APPLY_FAILED', 'FABRIC_TEARDOWN_FAILED',
])];

const codeLabel = (code: string | null | undefined): string => (code && RUN_ERROR_CODES.includes(code) ? code : 'OTHER');
const kindLabel = (kind: string): string => (isWorkflowKind(kind) ? kind : 'OTHER');
const commandKindLabel = (kind: string): string => ((COMMAND_KINDS as readonly string[]).includes(kind) ? kind : 'OTHER');
/**
 * A step name as a label: the definitions' names (jobs/workflows: `verify-bmc`, a cleanup's
 * `boot-wipe-ramdisk.cleanup`) are short identifiers, written into the rows from the code; a row
 * holding anything else counts as OTHER.
 */
const stepLabel = (step: string): string => (/^[a-z][a-z0-9.-]{0,63}$/.test(step) ? step : 'OTHER');

/** How a command ended, as the command counter's `outcome`. */
export type CommandOutcome = 'succeeded' | 'unverified' | 'failed' | 'expired';

/**
 * What one engine transaction did, handed to the metrics only after it committed (a transaction
 * rolled back counts nothing): the runs it started (laid out their steps) and ended, the steps
 * that finished, and the commands it expired.
 */
export interface EngineObservations {
  started: string[];
  finished: { kind: string; status: string; code: string | null }[];
  steps: { kind: string; step: string; outcome: string; seconds: number }[];
  commands: { kind: string; outcome: CommandOutcome; code: string | null }[];
}

export const newObservations = (): EngineObservations => ({ started: [], finished: [], steps: [], commands: [] });

/** What the counters need from the engine, the agents and the sweeps (a Metrics, or nothing). */
export interface DomainCounters {
  engine(observed: EngineObservations): void;
  command(kind: string, outcome: CommandOutcome, code?: string | null): void;
  /** The built-in agent reached the database (a claim or a lease renewal answered). */
  builtinAgentContact(): void;
}

/**
 * The domain's state, read from the database when /metrics is scraped (src/ops/domain-gauges.ts):
 * nodes by site and provision state, the freshest remote agent heartbeat per site, fabric jobs by
 * status and the nodes of running ones by outcome.
 */
export interface DomainSnapshot {
  nodes: { site: string; state: string; count: number }[];
  heartbeats: { site: string; ageSeconds: number }[];
  fabricJobs: { status: string; count: number }[];
  fabricNodes: { state: string; count: number }[];
}

export const FABRIC_JOB_STATUSES = ['running', 'completed', 'failed', 'partial'] as const;
export const FABRIC_NODE_STATES = ['pending', 'succeeded', 'failed'] as const;

export interface MetricsOptions {
  readDepths?: () => Promise<Record<string, number>>;
  readStatements?: () => number;
  readSubscribers?: () => number;
  /** The domain gauges' query; without it (a worker-only process) they are not exported. */
  readDomain?: () => Promise<DomainSnapshot>;
  /** How long one domain snapshot serves scrapes (METRICS_CACHE_MS). */
  domainCacheMs?: number;
  /** Told when the domain query fails (the gauges keep their last values; their age says how old). */
  onDomainError?: (error: unknown) => void;
}

/** Prometheus metrics: one registry per service instance (tests start several in one process). */
export class Metrics implements DomainCounters {
  readonly registry = new Registry();
  readonly httpDuration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request latency by route',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });
  readonly graphqlDuration = new Histogram({
    name: 'graphql_operation_duration_seconds',
    help: 'GraphQL operation latency by operation name and type',
    labelNames: ['operation', 'type', 'outcome'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });
  readonly graphqlErrors = new Counter({
    name: 'graphql_errors_total',
    help: 'GraphQL errors by code',
    labelNames: ['code'] as const,
    registers: [this.registry],
  });
  readonly dbStatements = new Counter({
    name: 'db_statements_total',
    help: 'SQL statements sent through Prisma',
    registers: [this.registry],
  });
  readonly queueDepth = new Gauge({
    name: 'queue_depth',
    help: 'Jobs waiting in each queue',
    labelNames: ['queue'] as const,
    registers: [this.registry],
  });

  readonly eventSubscribers = new Gauge({
    name: 'event_subscribers',
    help: 'Open event stream subscriptions in this process (graphql-ws, SSE, REST SSE)',
    registers: [this.registry],
  });

  // The domain's counters: in the process where the thing happens (docs/operations.md).
  readonly runsStarted = new Counter({
    name: 'metal_workflow_runs_started_total',
    help: 'Workflow runs this process started (laid out their steps), by kind',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });
  readonly runsFinished = new Counter({
    name: 'metal_workflow_runs_finished_total',
    help: 'Workflow runs this process ended, by kind and outcome (succeeded, failed, aborted, superseded); failed ones by error code',
    labelNames: ['kind', 'outcome', 'code'] as const,
    registers: [this.registry],
  });
  readonly stepDuration = new Histogram({
    name: 'metal_workflow_step_duration_seconds',
    help: 'Time from a workflow step\'s (last) start to its end, by kind, step and outcome',
    labelNames: ['kind', 'step', 'outcome'] as const,
    buckets: [0.05, 0.25, 1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600],
    registers: [this.registry],
  });
  readonly commands = new Counter({
    name: 'metal_bmc_commands_total',
    help: 'BMC commands that ended, by kind and outcome (succeeded, unverified, failed, expired); failed and expired ones by code',
    labelNames: ['kind', 'outcome', 'code'] as const,
    registers: [this.registry],
  });

  // The domain's state, from the database at scrape time (processes that serve the API).
  private readonly nodesGauge: Gauge<'site' | 'state'> | null = null;
  private readonly heartbeatGauge: Gauge<'site'> | null = null;
  private readonly fabricJobsGauge: Gauge<'status'> | null = null;
  private readonly fabricNodesGauge: Gauge<'state'> | null = null;
  private readonly snapshotAge: Gauge | null = null;
  private snapshotAt: number | null = null;
  private snapshotting: Promise<void> | null = null;
  private builtinContact: number | null = null;
  private builtinGauge: Gauge | null = null;

  constructor(private readonly opts: MetricsOptions = {}) {
    // The event-loop lag histogram samples at this resolution: prom-client's default of 10 ms woke
    // an idle service 100 times a second, 17 of its 41 ms of CPU per second (the idle bench); lag
    // worth an alert is far longer than 100 ms, and the loop's own timers still show it.
    collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
    if (opts.readDomain) {
      this.nodesGauge = new Gauge({
        name: 'metal_nodes',
        help: 'Nodes by site (id) and provision state, from the database (every state of a site with nodes, 0 included)',
        labelNames: ['site', 'state'] as const,
        registers: [this.registry],
      });
      this.heartbeatGauge = new Gauge({
        name: 'metal_agent_heartbeat_age_seconds',
        help: 'Seconds since the freshest heartbeat of a remote site agent of the site (sites with a registered agent that has heartbeaten)',
        labelNames: ['site'] as const,
        registers: [this.registry],
      });
      this.fabricJobsGauge = new Gauge({
        name: 'metal_fabric_rollouts',
        help: 'Fabric rollout jobs by status (running, completed, failed, partial)',
        labelNames: ['status'] as const,
        registers: [this.registry],
      });
      this.fabricNodesGauge = new Gauge({
        name: 'metal_fabric_rollout_nodes',
        help: 'Nodes of the running fabric rollout by state (pending, succeeded, failed)',
        labelNames: ['state'] as const,
        registers: [this.registry],
      });
      this.snapshotAge = new Gauge({
        name: 'metal_domain_snapshot_age_seconds',
        help: 'Age of the database read the metal_nodes, heartbeat and fabric gauges show (METRICS_CACHE_MS; more when that read fails)',
        registers: [this.registry],
      });
    }
  }

  engine(observed: EngineObservations): void {
    for (const kind of observed.started) this.runsStarted.inc({ kind: kindLabel(kind) });
    for (const f of observed.finished) {
      this.runsFinished.inc({ kind: kindLabel(f.kind), outcome: f.status, ...(f.status === 'failed' ? { code: codeLabel(f.code) } : {}) });
    }
    for (const s of observed.steps) {
      this.stepDuration.observe({ kind: kindLabel(s.kind), step: stepLabel(s.step), outcome: s.outcome }, Math.max(0, s.seconds));
    }
    for (const c of observed.commands) this.command(c.kind, c.outcome, c.code);
  }

  command(kind: string, outcome: CommandOutcome, code?: string | null): void {
    this.commands.inc({ kind: commandKindLabel(kind), outcome, ...(outcome === 'failed' || outcome === 'expired' ? { code: codeLabel(code) } : {}) });
  }

  builtinAgentContact(): void {
    this.builtinContact = Date.now();
  }

  /** This process runs the built-in agent: its heartbeat age is exported from now on. */
  builtinAgentStarted(): void {
    if (this.builtinGauge) return;
    const started = Date.now();
    this.builtinGauge = new Gauge({
      name: 'metal_builtin_agent_heartbeat_age_seconds',
      help: 'Seconds since this process\'s built-in site agent last reached the database (a claim or a lease renewal)',
      registers: [this.registry],
      collect: () => {
        this.builtinGauge!.set((Date.now() - (this.builtinContact ?? started)) / 1000);
      },
    });
  }

  /**
   * Reads the domain gauges from the database at most once per domainCacheMs, however many
   * scrapes come (concurrent ones share the one read). A failed read keeps the last values.
   */
  private async refreshDomain(): Promise<void> {
    const read = this.opts.readDomain;
    if (!read) return;
    const ttl = this.opts.domainCacheMs ?? 5000;
    if (this.snapshotAt !== null && Date.now() - this.snapshotAt < ttl) return;
    this.snapshotting ??= read()
      .then((snapshot) => {
        this.applySnapshot(snapshot);
        this.snapshotAt = Date.now();
      })
      .catch((error: unknown) => this.opts.onDomainError?.(error))
      .finally(() => (this.snapshotting = null));
    await this.snapshotting;
  }

  private applySnapshot(snapshot: DomainSnapshot): void {
    const nodes = this.nodesGauge!;
    nodes.reset();
    for (const site of new Set(snapshot.nodes.map((n) => n.site))) {
      for (const state of PROVISION_STATES) nodes.set({ site, state }, 0);
    }
    for (const n of snapshot.nodes) nodes.set({ site: n.site, state: n.state }, n.count);
    const heartbeats = this.heartbeatGauge!;
    heartbeats.reset();
    for (const h of snapshot.heartbeats) heartbeats.set({ site: h.site }, h.ageSeconds);
    const jobs = this.fabricJobsGauge!;
    for (const status of FABRIC_JOB_STATUSES) jobs.set({ status }, snapshot.fabricJobs.find((j) => j.status === status)?.count ?? 0);
    const fabricNodes = this.fabricNodesGauge!;
    for (const state of FABRIC_NODE_STATES) fabricNodes.set({ state }, snapshot.fabricNodes.find((n) => n.state === state)?.count ?? 0);
  }

  async render(): Promise<string> {
    const { readDepths, readStatements, readSubscribers } = this.opts;
    await this.refreshDomain();
    if (this.snapshotAge) this.snapshotAge.set(this.snapshotAt === null ? -1 : (Date.now() - this.snapshotAt) / 1000);
    if (readDepths) {
      const depths = await readDepths().catch(() => ({}) as Record<string, number>);
      for (const [queue, depth] of Object.entries(depths)) this.queueDepth.set({ queue }, depth);
    }
    if (readStatements) {
      const total = readStatements();
      const seen = (await this.dbStatements.get()).values[0]?.value ?? 0;
      if (total > seen) this.dbStatements.inc(total - seen);
    }
    if (readSubscribers) this.eventSubscribers.set(readSubscribers());
    return this.registry.metrics();
  }
}
