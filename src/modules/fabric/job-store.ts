import type { Tx } from '../../db/client';
import type { FabricJob, FabricJobNode, FabricNodeBaseline, PrismaClient } from '../../generated/prisma/client';
import { listComputeNodes } from './compute-nodes';
import { FABRIC_ID, publishJobEvent, setRolloutStatus, type FabricJobStatus, type FabricJobType, type StepRecord } from './rollout';
import type { RolloutStatus } from './validate';

/**
 * The fabric rollout's store (issue 23 item 3): every read and write the rollout run
 * (jobs/workflows/fabric-rollout.ts) makes of the fabric's tables — fabric_job, fabric_job_node,
 * fabric_node_baseline and the rollout status on fabric_config — as named functions. Each write
 * takes the caller's transaction: the run records a node's step result, its fabric_job_node row
 * and its event in one transaction, fenced by its lease, and this module never opens one of its own.
 * The request side (creating a job, cancelling it, the views) stays in rollout.ts.
 */

type Db = PrismaClient | Tx;

/** A node's row in a job. */
export interface JobNodeKey {
  jobId: string;
  nodeId: string;
}

const nodeWhere = (key: JobNodeKey) => ({ jobId_nodeId: { jobId: key.jobId, nodeId: key.nodeId } });
const now = () => new Date();

/** A job with its node rows (what a run starts from), or null. */
export function jobWithNodes(db: Db, jobId: string): Promise<(FabricJob & { nodes: FabricJobNode[] }) | null> {
  return db.fabricJob.findUnique({ where: { id: jobId }, include: { nodes: true } });
}

/** A job as it stands now (its first failure, after the fan-out recorded it). */
export function jobNow(db: Db, jobId: string): Promise<FabricJob> {
  return db.fabricJob.findUniqueOrThrow({ where: { id: jobId } });
}

/**
 * A node's SSH step records as they stand; with `touched` when the step changes the node, and
 * the node's VTEP when an apply of it starts.
 */
export async function saveNodeSteps(tx: Tx, key: JobNodeKey, steps: StepRecord[], extra: { touched?: true; vtepIp?: string } = {}): Promise<void> {
  await tx.fabricJobNode.update({ where: nodeWhere(key), data: { ...extra, steps: steps as unknown as object, updatedAt: now() } });
}

/** A node's SSH step ended: its records, and the job's progress and state `node_step`. */
export async function recordNodeStep(tx: Tx, key: JobNodeKey, steps: StepRecord[], progress: number): Promise<void> {
  await tx.fabricJobNode.update({ where: nodeWhere(key), data: { steps: steps as unknown as object, updatedAt: now() } });
  await tx.fabricJob.update({ where: { id: key.jobId }, data: { progress, state: 'node_step', updatedAt: now() } });
}

export interface NodeOutcome {
  ok: boolean;
  reachable: boolean;
  error: string;
  /** The job's first failure is this one when none was recorded before (`failNode` and `error` are kept). */
  firstFail: boolean;
  /** The node's name as first_fail_node shows it (fqdn, else its address). */
  failNode: string;
  progress: number;
  state: string;
}

/** A node's outcome: its row, and the job's counters, first failure, progress and state. */
export async function recordNodeOutcome(tx: Tx, key: JobNodeKey, outcome: NodeOutcome): Promise<void> {
  const { ok, reachable, error } = outcome;
  await tx.fabricJobNode.update({ where: nodeWhere(key), data: { finished: true, ok, reachable, error, updatedAt: now() } });
  await tx.$executeRawUnsafe(
    `UPDATE fabric_job SET completed_nodes = completed_nodes + $2, failed_nodes = failed_nodes + $3,
            first_fail_node = CASE WHEN $4 AND first_fail_node = '' THEN $5 ELSE first_fail_node END,
            first_fail_error = CASE WHEN $4 AND first_fail_node = '' THEN $6 ELSE first_fail_error END,
            progress = $7, state = $8, updated_at = now()
      WHERE id = $1::uuid`,
    key.jobId, ok ? 1 : 0, ok ? 0 : 1, outcome.firstFail, outcome.failNode, error, outcome.progress, outcome.state);
}

/** A node's rollback: rolled back, or (`error` not null) the node's error as it reads after the failed rollback. */
export async function recordNodeRollback(tx: Tx, key: JobNodeKey, ok: boolean, error: string | null): Promise<void> {
  await tx.fabricJobNode.update({
    where: nodeWhere(key),
    data: { rolledBack: ok, ...(error === null ? {} : { error }), updatedAt: now() },
  });
}

/**
 * The rollout status the nodes' latest results add up to: ready when every compute node's latest
 * fabric result is an applied node, degraded when some latest result is a failure, else pending
 * (some node was never rolled out, or was torn down).
 */
async function coverageStatus(tx: Tx): Promise<RolloutStatus> {
  const nodes = await listComputeNodes(tx);
  if (nodes.length === 0) return 'ready';
  const rows = await tx.$queryRawUnsafe<{ node_id: string; job_type: string; ok: boolean; rolled_back: boolean; finished: boolean }[]>(
    `SELECT DISTINCT ON (n.node_id) n.node_id, j.job_type, n.ok, n.rolled_back, n.finished
       FROM fabric_job_node n JOIN fabric_job j ON j.id = n.job_id
      WHERE n.node_id = ANY($1::text[]) AND n.finished
      ORDER BY n.node_id, n.created_at DESC, j.created_at DESC`, nodes.map((n) => n.nodeId));
  const latest = new Map(rows.map((row) => [row.node_id, row]));
  let pending = false;
  for (const node of nodes) {
    const row = latest.get(node.nodeId);
    if (!row || row.rolled_back || row.job_type !== 'fabric_apply') pending = true;
    else if (!row.ok) return 'degraded';
  }
  return pending ? 'pending' : 'ready';
}

/** The job's end, if it is still running; false when it had already ended (nothing written). */
export async function endJob(tx: Tx, jobId: string, end: { jobStatus: Exclude<FabricJobStatus, 'running'>; state: string; error: string }): Promise<boolean> {
  const updated = await tx.fabricJob.updateMany({
    where: { id: jobId, jobStatus: 'running' },
    data: { jobStatus: end.jobStatus, state: end.state, progress: 100, error: end.error, finishedAt: now(), updatedAt: now() },
  });
  return updated.count > 0;
}

/**
 * The rollout status after a job of config version `configVersion` ended: `rollout`, or
 * ('coverage') what the nodes' latest results add up to; never ready when the config was saved
 * again while the job ran (that is not what the nodes received). Nothing without a fabric config.
 */
export async function settleRolloutStatus(tx: Tx, configVersion: number, rollout: RolloutStatus | 'coverage'): Promise<void> {
  const config = await tx.fabricConfig.findUnique({ where: { id: FABRIC_ID }, select: { version: true } });
  if (!config) return;
  let next: RolloutStatus = rollout === 'coverage' ? await coverageStatus(tx) : rollout;
  if (next === 'ready' && config.version !== configVersion) next = 'pending';
  await setRolloutStatus(tx, next);
}

/**
 * A job whose worker was lost on every attempt ends failed, with the rollout status failed and
 * its last event; nothing when it is not running (or gone).
 */
export async function failLostJob(tx: Tx, jobId: string, error: string): Promise<void> {
  const job = await tx.fabricJob.findUnique({ where: { id: jobId } });
  if (!job || job.jobStatus !== 'running') return;
  const state = job.jobType === 'fabric_apply' ? 'apply_failed' : 'teardown_failed';
  await tx.fabricJob.update({ where: { id: jobId }, data: { jobStatus: 'failed', state, error, progress: 100, finishedAt: now(), updatedAt: now() } });
  await setRolloutStatus(tx, 'failed');
  await publishJobEvent(tx, { jobId, jobType: job.jobType as FabricJobType, state, progress: 100, job_status: 'failed', error });
}

/** The node's underlay as first seen (the MTU a teardown restores); an existing baseline is kept. */
export async function keepBaseline(db: Db, nodeId: string, underlayIface: string, underlayMtu: number): Promise<void> {
  await db.fabricNodeBaseline.upsert({
    where: { nodeId },
    create: { nodeId, underlayIface, underlayMtu },
    update: {},
  });
}

export function baselineOf(db: Db, nodeId: string): Promise<FabricNodeBaseline | null> {
  return db.fabricNodeBaseline.findUnique({ where: { nodeId } });
}

/** The node is back at its baseline: the record goes. */
export async function dropBaseline(tx: Tx, nodeId: string): Promise<void> {
  await tx.fabricNodeBaseline.deleteMany({ where: { nodeId } });
}
