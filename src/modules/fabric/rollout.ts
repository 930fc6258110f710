import { isIPv4 } from 'node:net';
import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { decide } from '../../auth/decide';
import { AppError, invalidInput, notFound } from '../../errors';
import { publish } from '../../events/outbox';
import type { Tx } from '../../db/client';
import type { FabricJob, FabricJobNode, PrismaClient } from '../../generated/prisma/client';
import { uuidv7 } from '../../ids';
import { abortRun, fabricRunId, startRun } from './runs';
import { computeNodeByIp, listComputeNodes, type ComputeNode } from './compute-nodes';
import type { RolloutStatus } from './validate';

/**
 * Fabric rollouts (issue 10 item 8), the request side: apply (every compute node or one),
 * teardown of one node, cancel, and the job views. A request records its intent in one
 * transaction (the fabric_job row, one fabric_job_node row per target, the rollout status, the
 * first event and the workflow run that carries it out) and returns at once; the run
 * (jobs/workflows/fabric-rollout.ts, on the workflow engine) does the work. Reading needs a platform-scoped grant (as the fabric config); everything that
 * changes nodes needs fabric:admin on the platform (platform admin holds it): a rollout touches
 * every compute node, more than the fabric:write that saves the intent.
 *
 * Decisions:
 * - One fabric job runs at a time, apply or teardown (a partial unique index backs it). A request
 *   identical to the running one (same type, scope, target and strictness) returns that job with
 *   `created: false`, the seed's "false if updated" (a retried POST never starts a second
 *   rollout); any other request while one runs is CONFLICT naming the running job.
 * - job_status keeps the seed's four values; a cancelled apply ends `failed` with state
 *   `apply_cancelled`. The rollout status after a cancel is `pending`: every node is back to
 *   baseline, which is a saved config not rolled out, not a failure of the fabric.
 * - A cancel of an id that is not the in-flight apply is NOT_FOUND whatever the id looks like
 *   (terminal, a teardown, unknown, or not a UUID at all): the seed answers 404 for all of them.
 */

export const FABRIC_ID = 1;

export type FabricJobType = 'fabric_apply' | 'fabric_teardown';
export type FabricJobStatus = 'running' | 'completed' | 'failed' | 'partial';

/** The steps of an apply, in order; a teardown's below. `connect` is the SSH session itself. */
export const APPLY_STEPS = ['connect', 'install_frr', 'divert_config', 'vtep_interface', 'write_config', 'mtu_sync', 'restart_frr', 'verify_bgp'] as const;
export const TEARDOWN_STEPS = ['connect', 'stop_frr', 'restore_config', 'remove_vtep', 'restore_mtu', 'release_vtep'] as const;
export type StepName = (typeof APPLY_STEPS)[number] | (typeof TEARDOWN_STEPS)[number];

export interface StepRecord {
  step: StepName;
  phase: 'apply' | 'teardown';
  status: 'running' | 'ok' | 'failed' | 'skipped';
  message: string;
  startedAt: string;
  finishedAt: string | null;
}

export interface FabricJobNodeView {
  nodeId: string;
  nodeIp: string;
  fqdn: string;
  vtepIp: string;
  finished: boolean;
  ok: boolean;
  /** false = the SSH dial failed before any step ran. */
  reachable: boolean;
  rolledBack: boolean;
  error: string;
  steps: StepRecord[];
}

export interface FabricJobView {
  jobId: string;
  jobType: FabricJobType;
  scope: 'all' | 'node';
  targetNodeIp: string | null;
  strict: boolean;
  jobStatus: FabricJobStatus;
  state: string;
  progress: number;
  totalNodes: number;
  completedNodes: number;
  failedNodes: number;
  firstFailNode: string;
  firstFailError: string;
  error: string;
  fabricId: string;
  cancelRequestedAt: Date | null;
  createdAt: Date;
  updatedAt: Date;
  finishedAt: Date | null;
  nodes: FabricJobNodeView[];
}

type Db = PrismaClient | Tx;

export function nodeViewOf(row: FabricJobNode): FabricJobNodeView {
  return {
    nodeId: row.nodeId,
    nodeIp: row.nodeIp,
    fqdn: row.fqdn,
    vtepIp: row.vtepIp,
    finished: row.finished,
    ok: row.ok,
    reachable: row.reachable,
    rolledBack: row.rolledBack,
    error: row.error,
    steps: (row.steps ?? []) as unknown as StepRecord[],
  };
}

export function jobViewOf(row: FabricJob, nodes: FabricJobNode[]): FabricJobView {
  return {
    jobId: row.id,
    jobType: row.jobType as FabricJobType,
    scope: row.scope as 'all' | 'node',
    targetNodeIp: row.targetNodeIp,
    strict: row.strict,
    jobStatus: row.jobStatus as FabricJobStatus,
    state: row.state,
    progress: row.progress,
    totalNodes: row.totalNodes,
    completedNodes: row.completedNodes,
    failedNodes: row.failedNodes,
    firstFailNode: row.firstFailNode,
    firstFailError: row.firstFailError,
    error: row.error,
    fabricId: String(FABRIC_ID),
    cancelRequestedAt: row.cancelRequestedAt,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
    finishedAt: row.finishedAt,
    nodes: [...nodes].sort((a, b) => a.position - b.position).map(nodeViewOf),
  };
}

/**
 * The seed's FabricJobView on the wire (snake_case), as GET .../latest answers and as
 * fabric-config's last_job carries it inline (a JSON value, so GraphQL's lastJob has this shape too).
 */
export function wireJobView(view: FabricJobView): Record<string, unknown> {
  return {
    job_id: view.jobId,
    job_type: view.jobType,
    scope: view.scope,
    target_node_ip: view.targetNodeIp,
    strict: view.strict,
    job_status: view.jobStatus,
    state: view.state,
    progress: view.progress,
    total_nodes: view.totalNodes,
    completed_nodes: view.completedNodes,
    failed_nodes: view.failedNodes,
    first_fail_node: view.firstFailNode,
    first_fail_error: view.firstFailError,
    error: view.error,
    fabric_id: view.fabricId,
    cancel_requested_at: view.cancelRequestedAt?.toISOString() ?? null,
    created_at: view.createdAt.toISOString(),
    updated_at: view.updatedAt.toISOString(),
    finished_at: view.finishedAt?.toISOString() ?? null,
    nodes: view.nodes.map((n) => ({
      node_id: n.nodeId,
      node_ip: n.nodeIp,
      fqdn: n.fqdn,
      vtep_ip: n.vtepIp,
      ok: n.ok,
      reachable: n.reachable,
      finished: n.finished,
      rolled_back: n.rolledBack,
      error: n.error,
      steps: n.steps.map((s) => ({ step: s.step, phase: s.phase, status: s.status, message: s.message, started_at: s.startedAt, finished_at: s.finishedAt })),
    })),
  };
}

export async function loadJobView(db: Db, jobId: string): Promise<FabricJobView | null> {
  const row = await db.fabricJob.findUnique({ where: { id: jobId }, include: { nodes: true } });
  return row ? jobViewOf(row, row.nodes) : null;
}

/** The newest apply or teardown job (GET .../latest), or null. */
export async function latestJobView(db: Db): Promise<FabricJobView | null> {
  const row = await db.fabricJob.findFirst({ orderBy: [{ createdAt: 'desc' }, { id: 'desc' }], include: { nodes: true } });
  return row ? jobViewOf(row, row.nodes) : null;
}

/** fabric-config's last_job: the latest job, only when the rollout status is failed or degraded. */
export async function lastJobFor(db: Db, status: RolloutStatus): Promise<Record<string, unknown> | null> {
  if (status !== 'failed' && status !== 'degraded') return null;
  const view = await latestJobView(db);
  return view ? wireJobView(view) : null;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isUuid = (value: string): boolean => UUID.test(value);

/** An OS address from a path or argument: INVALID_INPUT naming `field` unless a dotted-quad IPv4. */
export function checkNodeIp(nodeIp: string, field = 'nodeIp'): string {
  if (!isIPv4(nodeIp)) throw invalidInput(field, 'must be an IPv4 address (the node\'s OS address)');
  return nodeIp;
}

export async function getLatestJob(ctx: Context): Promise<FabricJobView | null> {
  decide(requirePrincipal(ctx), 'read', { type: 'platform' });
  return latestJobView(ctx.prisma);
}

/** A job by id; NOT_FOUND for an unknown or malformed id (one answer, no oracle on the id's shape). */
export async function getJob(ctx: Context, jobId: string): Promise<FabricJobView> {
  decide(requirePrincipal(ctx), 'read', { type: 'platform' });
  const view = isUuid(jobId) ? await loadJobView(ctx.prisma, jobId) : null;
  if (!view) throw notFound('fabric job');
  return view;
}

/** Serializes fabric job creation with the fabric config's writes ("fabr" lock in config.ts). */
const WRITE_LOCK = 0x66616272;

export interface JobEvent {
  jobId: string;
  jobType: FabricJobType;
  state: string;
  progress: number;
  nodeIp?: string;
  fqdn?: string;
  [extra: string]: unknown;
}

/**
 * Every state change of a job is one `fabric.<state>` event whose subject is the job id (the REST
 * SSE channel `fabric` streams it as `fabric_switch`; fabricRollout(jobId) subscribes by subject).
 * Payloads carry names, addresses, states and step messages: never a secret (the runner scrubs
 * the fabric's secrets out of every message before it is recorded).
 */
export async function publishJobEvent(tx: Tx, event: JobEvent): Promise<void> {
  const { jobId, jobType, state, progress, nodeIp, fqdn, ...extra } = event;
  await publish(tx, {
    type: `fabric.${state}`,
    tenantId: null,
    subject: jobId,
    payload: { job_id: jobId, job_type: jobType, state, progress, node_ip: nodeIp ?? '', fqdn: fqdn ?? '', ...extra },
  });
}

export async function setRolloutStatus(tx: Tx, status: RolloutStatus): Promise<void> {
  await tx.fabricConfig.updateMany({ where: { id: FABRIC_ID }, data: { rolloutStatus: status } });
}

export interface ApplyRequest {
  /** One node by OS address; absent = every compute node. */
  nodeIp?: string | null;
  strict?: boolean | null;
}

export interface ApplyResult {
  applyJobId: string;
  /** true: a new job was started; false: the identical request already running was returned. */
  created: boolean;
  /** The fabric config's id. */
  id: number;
  message: string;
  job: FabricJobView;
}

interface NewJob {
  jobType: FabricJobType;
  scope: 'all' | 'node';
  targetNodeIp: string | null;
  strict: boolean;
  nodes: ComputeNode[];
  state: string;
}

/** The running job, or null; CONFLICT naming it when `wanted` differs from it. */
async function runningJob(tx: Tx, wanted: Omit<NewJob, 'nodes' | 'state'>): Promise<FabricJob | null> {
  const running = await tx.fabricJob.findFirst({ where: { jobStatus: 'running' } });
  if (!running) return null;
  const same = running.jobType === wanted.jobType && running.scope === wanted.scope
    && running.targetNodeIp === wanted.targetNodeIp && running.strict === wanted.strict;
  if (same && running.cancelRequestedAt === null) return running;
  throw new AppError('CONFLICT',
    `fabric job ${running.id} (${running.jobType}${running.targetNodeIp ? ` of ${running.targetNodeIp}` : ''}) is still running: wait for it or cancel it`,
    { job_id: running.id, job_type: running.jobType, state: running.state });
}

async function createJob(ctx: Context, tx: Tx, job: NewJob, configVersion: number): Promise<FabricJobView> {
  const id = uuidv7();
  const principal = requirePrincipal(ctx);
  const row = await tx.fabricJob.create({
    data: {
      id,
      jobType: job.jobType,
      scope: job.scope,
      targetNodeIp: job.targetNodeIp,
      strict: job.strict,
      state: job.state,
      totalNodes: job.nodes.length,
      configVersion,
      requestedBy: principal.name,
    },
  });
  await tx.fabricJobNode.createMany({
    data: job.nodes.map((n, position) => ({ jobId: id, nodeId: n.nodeId, position, nodeIp: n.nodeIp, fqdn: n.fqdn })),
  });
  await publishJobEvent(tx, { jobId: id, jobType: job.jobType, state: job.state, progress: 0, total_nodes: job.nodes.length, strict: job.strict });
  await startRun(tx, { id: fabricRunId(id), subject: `fabric:${id}`, kind: job.jobType === 'fabric_apply' ? 'fabric-apply' : 'fabric-teardown', params: { fabricJobId: id } });
  const nodes = await tx.fabricJobNode.findMany({ where: { jobId: id } });
  return jobViewOf(row, nodes);
}

/**
 * POST .../apply and .../node/{node_ip}/apply: records the job and queues it. INVALID_STATE when
 * there is no fabric config, or (apply to all) no compute node; NOT_FOUND for an address that is
 * not a deployed compute node.
 */
export async function requestApply(ctx: Context, request: ApplyRequest): Promise<ApplyResult> {
  decide(requirePrincipal(ctx), 'fabric:admin', { type: 'platform' });
  const nodeIp = request.nodeIp == null ? null : checkNodeIp(request.nodeIp);
  const strict = request.strict ?? false;
  return ctx.prisma.$transaction(async (tx) => {
    await tx.$executeRawUnsafe('SELECT pg_advisory_xact_lock($1)', WRITE_LOCK);
    const config = await tx.fabricConfig.findUnique({ where: { id: FABRIC_ID }, select: { version: true } });
    if (!config) throw new AppError('INVALID_STATE', 'no network fabric is configured (POST /controlnode/fabric-config first)');
    const wanted = { jobType: 'fabric_apply' as const, scope: nodeIp ? 'node' as const : 'all' as const, targetNodeIp: nodeIp, strict };
    const running = await runningJob(tx, wanted);
    if (running) {
      const view = (await loadJobView(tx, running.id))!;
      return { applyJobId: running.id, created: false, id: FABRIC_ID, message: `fabric apply ${running.id} is already running`, job: view };
    }
    let nodes: ComputeNode[];
    if (nodeIp) {
      const node = await computeNodeByIp(tx, nodeIp);
      if (!node) throw notFound('compute node', nodeIp);
      nodes = [node];
    } else {
      nodes = await listComputeNodes(tx);
      // An empty cluster has nothing to roll out: a job of no node would "complete" having done nothing.
      if (nodes.length === 0) {
        throw new AppError('INVALID_STATE', 'no compute node is deployed: the fabric has nothing to roll out to (provision a node and register it as a compute node first)');
      }
    }
    const job = await createJob(ctx, tx, { ...wanted, nodes, state: 'apply_started' }, config.version);
    await setRolloutStatus(tx, 'rolling_out');
    const what = nodeIp ? `node ${nodeIp}` : `${nodes.length} compute node${nodes.length === 1 ? '' : 's'}`;
    return { applyJobId: job.jobId, created: true, id: FABRIC_ID, message: `fabric apply started on ${what}`, job };
  });
}

export interface TeardownResult {
  jobId: string;
  /** Whether the node had fabric state to remove (a VTEP, a baseline, an applied job row). */
  removed: boolean;
  /** The teardown steps the job runs, in order. */
  steps: string[];
  message: string;
  job: FabricJobView;
}

/** DELETE .../node/{node_ip}: queues a teardown of one node back to its baseline. */
export async function requestTeardown(ctx: Context, nodeIpInput: string): Promise<TeardownResult> {
  decide(requirePrincipal(ctx), 'fabric:admin', { type: 'platform' });
  const nodeIp = checkNodeIp(nodeIpInput);
  return ctx.prisma.$transaction(async (tx) => {
    await tx.$executeRawUnsafe('SELECT pg_advisory_xact_lock($1)', WRITE_LOCK);
    const node = await computeNodeByIp(tx, nodeIp);
    if (!node) throw notFound('compute node', nodeIp);
    const config = await tx.fabricConfig.findUnique({ where: { id: FABRIC_ID }, select: { version: true } });
    const wanted = { jobType: 'fabric_teardown' as const, scope: 'node' as const, targetNodeIp: nodeIp, strict: false };
    const running = await runningJob(tx, wanted);
    const hadState = (await tx.fabricVtep.count({ where: { nodeId: node.nodeId } })) > 0
      || (await tx.fabricNodeBaseline.count({ where: { nodeId: node.nodeId } })) > 0
      || (await tx.fabricJobNode.count({ where: { nodeId: node.nodeId, touched: true, rolledBack: false } })) > 0;
    if (running) {
      const view = (await loadJobView(tx, running.id))!;
      return { jobId: running.id, removed: hadState, steps: [...TEARDOWN_STEPS], message: `fabric teardown ${running.id} of ${nodeIp} is already running`, job: view };
    }
    const job = await createJob(ctx, tx, { ...wanted, nodes: [node], state: 'teardown_started' }, config?.version ?? 0);
    return {
      jobId: job.jobId,
      removed: hadState,
      steps: [...TEARDOWN_STEPS],
      message: hadState ? `teardown of ${nodeIp} started` : `teardown of ${nodeIp} started (no fabric state was recorded for it: the steps only confirm the baseline)`,
      job,
    };
  });
}

export interface CancelResult {
  jobId: string;
  state: string;
  message: string;
}

/**
 * POST .../apply/{job_id}/cancel: marks the in-flight apply for cancellation and publishes
 * apply_cancelling; the runner notices within a poll, stops the fan-out, tears every touched
 * node back to baseline and ends with apply_cancelled. A second cancel answers the same without
 * a second event.
 */
export async function requestCancel(ctx: Context, jobId: string): Promise<CancelResult> {
  decide(requirePrincipal(ctx), 'fabric:admin', { type: 'platform' });
  const missing = () => new AppError('NOT_FOUND', 'no in-flight fabric apply has this job id');
  if (!isUuid(jobId)) throw missing();
  return ctx.prisma.$transaction(async (tx) => {
    const rows = await tx.$queryRawUnsafe<{ id: string }[]>(
      `SELECT id::text AS id FROM fabric_job WHERE id = $1::uuid AND job_status = 'running' AND job_type = 'fabric_apply' FOR UPDATE`, jobId);
    if (rows.length === 0) throw missing();
    const job = await tx.fabricJob.findUniqueOrThrow({ where: { id: jobId } });
    if (job.cancelRequestedAt) {
      return { jobId, state: job.state, message: `cancellation of fabric apply ${jobId} is already under way` };
    }
    await tx.fabricJob.update({ where: { id: jobId }, data: { cancelRequestedAt: new Date(), state: 'apply_cancelling', updatedAt: new Date() } });
    // The cancel is the run's abort: its body stops the fan-out and runs its cleanup (the rollback).
    await abortRun(tx, fabricRunId(jobId));
    await publishJobEvent(tx, { jobId, jobType: 'fabric_apply', state: 'apply_cancelling', progress: job.progress });
    return { jobId, state: 'apply_cancelling', message: `cancelling fabric apply ${jobId}: every touched node goes back to baseline` };
  });
}
