import type { Logger } from 'pino';
import { connect, fanOut, DEFAULT_CONCURRENCY, type SshSession, type SshTarget } from '../../clients/ssh';
import type { SecretBroker } from '../../clients/secrets/broker';
import type { FabricJob, FabricJobNode, PrismaClient } from '../../src/generated/prisma/client';
import type { Tx } from '../../src/db/client';
import { listComputeNodes, pinHostKey, type ComputeNode } from '../../src/modules/fabric/compute-nodes';
import { releaseVtep, vtepsOf } from '../../src/modules/fabric/vtep';
import {
  APPLY_STEPS, TEARDOWN_STEPS, publishJobEvent,
  type FabricJobStatus, type FabricJobType, type StepName, type StepRecord,
} from '../../src/modules/fabric/rollout';
import * as jobStore from '../../src/modules/fabric/job-store';
import type { RolloutStatus } from '../../src/modules/fabric/validate';
import { complete, failed, type StepResult } from '../steps';
import type { DetachedDef, DetachedLease, DetachedRunInfo, RawDb, RunEnd } from '../engine-detached';
import { messageOf, planApply, targetsOf, type NodePlan } from '../fabric-node';
import * as steps from '../fabric-steps';

/**
 * The fabric rollout as workflow runs (issue 23 item 2): `fabric-apply` and `fabric-teardown`,
 * one run per fabric_job (run id `wf_<job id>`), detached runs of the engine (engine-detached.ts):
 * leased, resumed by the engine's sweep after a crash, aborted through abort_requested_at.
 *
 * Each node of the job is one step of the run (workflow_step idx = the node's position), its
 * outcome a typed StepResult recorded in the same transaction as the node's fabric_job_node row
 * and its `fabric.*` event; the node's own SSH steps (connect, install_frr, ...) stay in
 * fabric_job_node.steps, the shape the REST and GraphQL views show. A resumed run reads the rows:
 * a finished node is not contacted again; the rest run from their first SSH step (each is
 * idempotent). A rollback (strict mode's, or a cancel's) is the run's cleanup: one cleanup step
 * per touched node (idx = node count + position), a teardown back to baseline.
 *
 * The fabric's tables (fabric_job, fabric_job_node, fabric_node_baseline, the rollout status) are
 * read and written only through the fabric's store (src/modules/fabric/job-store.ts), in the
 * transactions this file opens; the run's own rows through its lease.
 */

export interface RolloutDeps {
  prisma: PrismaClient;
  secrets: SecretBroker | null;
  log: Logger;
  bgpWaitMs: number;
  connectTimeoutMs: number;
  nodeTimeoutMs: number;
  concurrency?: number;
}

interface NodeState {
  row: FabricJobNode;
  steps: StepRecord[];
  /** Steps of the main phase finished (for progress). */
  done: number;
}

/** One run of a fabric job in this worker: the job's rows as read at the start, kept up to date by the writes. */
interface RolloutRun {
  deps: RolloutDeps;
  lease: DetachedLease;
  job: FabricJob;
  jobType: FabricJobType;
  /** The job's own phase (what progress counts): apply steps for an apply, teardown steps for a teardown. */
  mainPhase: StepRecord['phase'];
  stepCount: number;
  nodes: Map<string, NodeState>;
  scrub: (text: string) => string;
  /** Aborted by a cancel, a strict stop, or the lease lost: every node's work stops. */
  stop: AbortController;
  stopReason: 'cancel' | 'strict' | null;
}

const now = () => new Date();
const CANCELLED = 'cancelled before this node finished';
const STOPPED = 'stopped: strict mode rolls back after the first failure';

function progressOf(run: RolloutRun): number {
  if (run.nodes.size === 0) return 100;
  let sum = 0;
  for (const jobNode of run.nodes.values()) sum += Math.min(jobNode.done, run.stepCount);
  return Math.min(99, Math.floor((100 * sum) / (run.nodes.size * run.stepCount)));
}

/** One change of the job's rows with its event, fenced by the run's lease, in one transaction; a run's writes are serialised. */
function write<T>(run: RolloutRun, fn: (tx: Tx) => Promise<T>): Promise<T> {
  return run.lease.serial(() => run.deps.prisma.$transaction(async (tx) => {
    await run.lease.fence(tx);
    return fn(tx);
  }));
}

function event(run: RolloutRun, tx: Tx, state: string, extra: Record<string, unknown> & { nodeIp?: string; fqdn?: string } = {}): Promise<void> {
  return publishJobEvent(tx, { jobId: run.job.id, jobType: run.jobType, state, progress: progressOf(run), ...extra });
}

const nodeKey = (run: RolloutRun, jobNode: NodeState): jobStore.JobNodeKey => ({ jobId: run.job.id, nodeId: jobNode.row.nodeId });

async function stepStart(run: RolloutRun, jobNode: NodeState, step: StepName, phase: StepRecord['phase']): Promise<StepRecord> {
  const record: StepRecord = { step, phase, status: 'running', message: '', startedAt: now().toISOString(), finishedAt: null };
  jobNode.steps.push(record);
  const touched = phase === 'apply' && step !== 'connect' && step !== 'verify_bgp' ? true : undefined;
  if (touched) jobNode.row.touched = true;
  await write(run, (tx) => jobStore.saveNodeSteps(tx, nodeKey(run, jobNode), jobNode.steps, touched ? { touched } : {}));
  return record;
}

async function stepEnd(run: RolloutRun, jobNode: NodeState, record: StepRecord, status: StepRecord['status'], message: string): Promise<void> {
  record.status = status;
  record.message = run.scrub(message);
  record.finishedAt = now().toISOString();
  if (record.phase === run.mainPhase && status !== 'failed') jobNode.done += 1;
  const progress = progressOf(run);
  await write(run, async (tx) => {
    await jobStore.recordNodeStep(tx, nodeKey(run, jobNode), jobNode.steps, progress);
    await event(run, tx, 'node_step', { nodeIp: jobNode.row.nodeIp, fqdn: jobNode.row.fqdn, step: record.step, phase: record.phase, status, message: record.message });
  });
}

/** A step's failure as recorded: an apply step cut short by a cancel or a strict stop says so. */
function failureMessage(run: RolloutRun, err: unknown, phase: StepRecord['phase']): string {
  if (phase === 'apply' && run.stop.signal.aborted) return run.stopReason === 'cancel' ? CANCELLED : STOPPED;
  return run.scrub(messageOf(err));
}

/** Runs one named SSH step of a node, recording it; a failure is rethrown for the node's outcome. */
async function step(run: RolloutRun, jobNode: NodeState, name: StepName, phase: StepRecord['phase'], fn: () => Promise<string>): Promise<void> {
  const record = await stepStart(run, jobNode, name, phase);
  try {
    const message = await fn();
    await stepEnd(run, jobNode, record, message.startsWith('skipped:') ? 'skipped' : 'ok', message);
  } catch (err) {
    await stepEnd(run, jobNode, record, 'failed', failureMessage(run, err, phase));
    throw err;
  }
}

/** The message of the node's last failed step (the real reason), if any. */
function lastFailure(jobNode: NodeState): string | undefined {
  for (let i = jobNode.steps.length - 1; i >= 0; i--) if (jobNode.steps[i]!.status === 'failed') return jobNode.steps[i]!.message;
  return undefined;
}

/**
 * false = the SSH dial failed before any step ran (the seed's `reachable`). A node the fan-out
 * never started (cancel, strict stop) or that failed later was reachable as far as we know.
 */
function reachable(jobNode: NodeState, phase: StepRecord['phase']): boolean {
  const dial = jobNode.steps.filter((s) => s.step === 'connect' && s.phase === phase).pop();
  if (!dial || dial.status !== 'failed') return true;
  return dial.message === CANCELLED || dial.message === STOPPED;
}

/** A phase of a node (re)starting: the records of an attempt a dead worker left of that phase are dropped. */
function restartPhase(jobNode: NodeState, phase: StepRecord['phase']): void {
  if (!jobNode.steps.some((s) => s.phase === phase)) return;
  jobNode.steps = jobNode.steps.filter((s) => s.phase !== phase);
  if (jobNode.row.finished === false) jobNode.done = 0;
}

/** The node's step of the run: its typed result, recorded with the node's outcome. */
function nodeResult(ok: boolean, reachableNow: boolean, aborted: boolean, error: string): StepResult {
  if (ok) return complete('the node is done');
  if (aborted) return failed('ABORTED', error || 'stopped before this node finished');
  return failed(reachableNow ? 'NODE_FAILED' : 'UNREACHABLE', error || 'failed');
}

/** A node's outcome with the job's counters, first failure and the run's step row, in one transaction. */
async function nodeDone(run: RolloutRun, jobNode: NodeState, ok: boolean, error: string, reachableNow: boolean): Promise<void> {
  if (jobNode.row.finished) return;
  const aborted = !ok && run.stop.signal.aborted;
  jobNode.row.finished = true;
  jobNode.row.ok = ok;
  jobNode.row.reachable = reachableNow;
  jobNode.row.error = run.scrub(error);
  if (ok) jobNode.done = run.stepCount;
  const state = ok ? 'node_ok' : 'node_failed';
  const firstFail = !ok && !aborted;
  await write(run, async (tx) => {
    await jobStore.recordNodeOutcome(tx, nodeKey(run, jobNode), {
      ok, reachable: reachableNow, error: jobNode.row.error, firstFail, failNode: jobNode.row.fqdn || jobNode.row.nodeIp, progress: progressOf(run), state,
    });
    await run.lease.stepEnded(tx, jobNode.row.position, nodeResult(ok, reachableNow, aborted, jobNode.row.error));
    await event(run, tx, state, { nodeIp: jobNode.row.nodeIp, fqdn: jobNode.row.fqdn, reachable: reachableNow, ...(ok ? {} : { error: jobNode.row.error }) });
  });
  if (firstFail && run.job.strict && run.stopReason === null) {
    run.stopReason = 'strict';
    run.stop.abort();
  }
}

/** The job's end, the rollout status, the last event and the run's end, in one transaction. */
async function finish(run: RolloutRun, status: Exclude<FabricJobStatus, 'running'>, state: string, rollout: RolloutStatus | 'coverage', error = ''): Promise<void> {
  const end: RunEnd = status === 'completed' || status === 'partial'
    ? { status: 'succeeded' }
    : state === 'apply_cancelled'
      ? { status: 'aborted', code: 'ABORTED', message: error }
      : { status: 'failed', code: run.jobType === 'fabric_apply' ? 'FABRIC_APPLY_FAILED' : 'FABRIC_TEARDOWN_FAILED', message: error };
  await write(run, async (tx) => {
    if (await jobStore.endJob(tx, run.job.id, { jobStatus: status, state, error })) {
      // A config saved while this job ran is not what the nodes received: not ready then.
      await jobStore.settleRolloutStatus(tx, run.job.configVersion, rollout);
      await publishJobEvent(tx, {
        jobId: run.job.id, jobType: run.jobType, state, progress: 100, job_status: status, error,
        completed_nodes: [...run.nodes.values()].filter((jobNode) => jobNode.row.finished && jobNode.row.ok).length,
        failed_nodes: [...run.nodes.values()].filter((jobNode) => jobNode.row.finished && !jobNode.row.ok).length,
      });
    }
    await run.lease.end(tx, end);
  });
}

function failJob(run: RolloutRun, error: string, rollout: RolloutStatus): Promise<void> {
  return finish(run, 'failed', run.jobType === 'fabric_apply' ? 'apply_failed' : 'teardown_failed', rollout, run.scrub(error));
}

/** The SSH session of a node's phase, recorded as its `connect` step; the host key is pinned at first contact. */
async function session(run: RolloutRun, jobNode: NodeState, target: SshTarget, node: ComputeNode, signal: AbortSignal, deadline: number,
  phase: StepRecord['phase']): Promise<SshSession> {
  const record = await stepStart(run, jobNode, 'connect', phase);
  try {
    const left = Math.max(1, deadline - Date.now());
    const opened = await connect({ ...target, connectTimeoutMs: Math.min(target.connectTimeoutMs ?? run.deps.connectTimeoutMs, left), signal });
    if (!node.sshHostKey) await pinHostKey(run.deps.prisma, node.nodeId, opened.hostKey.fingerprint);
    await stepEnd(run, jobNode, record, 'ok', `${opened.where} (${opened.hostKey.fingerprint})`);
    return opened;
  } catch (err) {
    await stepEnd(run, jobNode, record, 'failed', failureMessage(run, err, phase));
    throw err;
  }
}

/** The underlay's MTU becomes vxlan_mtu; the first value ever seen is kept as the baseline. */
async function syncMtu(run: RolloutRun, ssh: SshSession, plan: NodePlan): Promise<string> {
  const underlay = await steps.underlayOf(ssh, plan.underlayIface, plan.node.nodeIp);
  await jobStore.keepBaseline(run.deps.prisma, plan.node.nodeId, underlay.iface, underlay.mtu);
  if (underlay.mtu === plan.vxlanMtu) return `${underlay.iface} already has MTU ${plan.vxlanMtu}`;
  await steps.setMtu(ssh, underlay.iface, plan.vxlanMtu);
  return `${underlay.iface} MTU ${underlay.mtu} -> ${plan.vxlanMtu}`;
}

async function applyNode(run: RolloutRun, plan: NodePlan, signal: AbortSignal, deadline: number): Promise<void> {
  const jobNode = run.nodes.get(plan.node.nodeId)!;
  // A node taken up again after its worker died starts over: the interrupted attempt's records go.
  restartPhase(jobNode, 'apply');
  await write(run, async (tx) => {
    await jobStore.saveNodeSteps(tx, nodeKey(run, jobNode), jobNode.steps, { vtepIp: plan.vtepIp });
    await run.lease.stepStarted(tx, jobNode.row.position);
  });
  jobNode.row.vtepIp = plan.vtepIp;
  const ssh = await session(run, jobNode, plan.target, plan.node, signal, deadline, 'apply');
  try {
    await step(run, jobNode, 'install_frr', 'apply', () => steps.installFrr(ssh));
    await step(run, jobNode, 'divert_config', 'apply', () => steps.divertConfig(ssh));
    await step(run, jobNode, 'vtep_interface', 'apply', () => steps.ensureVtepInterface(ssh, plan.vtepIp));
    await step(run, jobNode, 'write_config', 'apply', async () => {
      const written = await steps.writeConfig(ssh, plan.config);
      return `${written}; ${await steps.enableDaemons(ssh, plan.daemons)}`;
    });
    await step(run, jobNode, 'mtu_sync', 'apply', () => syncMtu(run, ssh, plan));
    await step(run, jobNode, 'restart_frr', 'apply', () => steps.restartFrr(ssh));
    const waitMs = Math.max(1, Math.min(run.deps.bgpWaitMs, deadline - Date.now() - 1000));
    await step(run, jobNode, 'verify_bgp', 'apply', () => steps.verifyBgp(ssh, plan.expectedNeighbours, waitMs, signal));
  } finally {
    await ssh.close();
  }
}

/** Back to baseline: frr stopped, the distribution's config back, vtep0 gone, MTU restored, VTEP released. */
async function teardownNode(run: RolloutRun, jobNode: NodeState, node: ComputeNode, target: SshTarget, signal: AbortSignal, deadline: number): Promise<void> {
  const ssh = await session(run, jobNode, target, node, signal, deadline, 'teardown');
  try {
    await step(run, jobNode, 'stop_frr', 'teardown', () => steps.stopFrr(ssh));
    await step(run, jobNode, 'restore_config', 'teardown', () => steps.restoreConfig(ssh));
    await step(run, jobNode, 'remove_vtep', 'teardown', () => steps.removeVtepInterface(ssh));
    await step(run, jobNode, 'restore_mtu', 'teardown', async () => {
      const baseline = await jobStore.baselineOf(run.deps.prisma, node.nodeId);
      if (!baseline) return 'skipped: no baseline recorded (the MTU was never changed)';
      const current = await steps.underlayOf(ssh, baseline.underlayIface, node.nodeIp).catch(() => null);
      if (!current) return `skipped: ${baseline.underlayIface} is gone`;
      if (current.mtu !== baseline.underlayMtu) await steps.setMtu(ssh, baseline.underlayIface, baseline.underlayMtu);
      return `${baseline.underlayIface} MTU ${baseline.underlayMtu}`;
    });
    await step(run, jobNode, 'release_vtep', 'teardown', async () => {
      const held = (await vtepsOf(run.deps.prisma, [node.nodeId])).get(node.nodeId);
      const released = await write(run, async (tx) => {
        await jobStore.dropBaseline(tx, node.nodeId);
        return releaseVtep(tx, node.nodeId);
      });
      return released ? `VTEP ${held ?? ''} released`.replace('  ', ' ') : 'skipped: no VTEP was allocated';
    });
  } finally {
    await ssh.close();
  }
}

/**
 * Tears the given nodes down side by side; returns how many could not be brought back. A
 * rollback (the run's cleanup) records one cleanup step per node; a teardown job, the node's step.
 */
async function teardownAll(run: RolloutRun, list: NodeState[], rollback: boolean): Promise<number> {
  if (list.length === 0) return 0;
  const all = await listComputeNodes(run.deps.prisma);
  const byId = new Map(all.map((node) => [node.nodeId, node]));
  const present = list.filter((jobNode) => byId.has(jobNode.row.nodeId));
  const targets = await targetsOf({ prisma: run.deps.prisma, secrets: run.deps.secrets, connectTimeoutMs: run.deps.connectTimeoutMs }, present.map((jobNode) => byId.get(jobNode.row.nodeId)!));
  const cleanupIdx = (jobNode: NodeState) => run.nodes.size + jobNode.row.position;
  let failures = list.length - present.length;
  const results = await fanOut(present, async (jobNode, ctx) => {
    const node = byId.get(jobNode.row.nodeId)!;
    restartPhase(jobNode, 'teardown');
    await write(run, async (tx) => {
      await jobStore.saveNodeSteps(tx, nodeKey(run, jobNode), jobNode.steps);
      await run.lease.stepStarted(tx, rollback ? cleanupIdx(jobNode) : jobNode.row.position);
    });
    await teardownNode(run, jobNode, node, targets.get(node.nodeId)!, AbortSignal.any([ctx.signal, run.lease.lost]), ctx.deadline);
  }, { perNodeTimeoutMs: run.deps.nodeTimeoutMs, concurrency: run.deps.concurrency ?? DEFAULT_CONCURRENCY });
  for (const result of results) {
    const jobNode = result.item;
    const ok = result.status === 'ok';
    if (!ok) failures += 1;
    const error = ok ? '' : run.scrub(result.reason);
    if (rollback) {
      jobNode.row.rolledBack = ok;
      await write(run, async (tx) => {
        await jobStore.recordNodeRollback(tx, nodeKey(run, jobNode), ok, ok ? null : jobNode.row.error ? `${jobNode.row.error}; rollback failed: ${error}` : `rollback failed: ${error}`);
        await run.lease.stepEnded(tx, cleanupIdx(jobNode), ok ? complete('back to baseline') : failed('ROLLBACK_FAILED', error));
        await event(run, tx, ok ? 'node_rolled_back' : 'node_rollback_failed', { nodeIp: jobNode.row.nodeIp, fqdn: jobNode.row.fqdn, ...(ok ? {} : { error }) });
      });
    } else {
      await nodeDone(run, jobNode, ok, ok ? '' : result.code === 'DEADLINE' ? error : lastFailure(jobNode) ?? error, reachable(jobNode, 'teardown'));
    }
  }
  return failures;
}

/** The run's cleanup: every touched node not rolled back yet gets a cleanup step, then a teardown. */
async function rollback(run: RolloutRun, touched: NodeState[]): Promise<number> {
  await write(run, async (tx) => {
    await run.lease.aborting(tx);
    await run.lease.layOut(tx, touched.map((jobNode) => ({ idx: run.nodes.size + jobNode.row.position, name: 'rollback-node', title: `Rolling ${jobNode.row.fqdn || jobNode.row.nodeIp} back to baseline`, cleanup: true })));
  });
  return teardownAll(run, touched, true);
}

async function cancelPhase(run: RolloutRun): Promise<void> {
  run.stopReason = 'cancel';
  const touched = [...run.nodes.values()].filter((jobNode) => jobNode.row.touched && !jobNode.row.rolledBack);
  const left = await rollback(run, touched);
  await finish(run, 'failed', 'apply_cancelled', left ? 'failed' : 'pending',
    `cancelled: ${touched.length - left} of ${touched.length} touched node(s) back to baseline${left ? `, ${left} could not be` : ''}`);
}

async function apply(run: RolloutRun): Promise<void> {
  if (run.lease.abort.aborted || run.job.cancelRequestedAt) return cancelPhase(run);
  // Resume: only the nodes without an outcome are (re)run; a finished node is never contacted again.
  const pending = [...run.nodes.values()].filter((jobNode) => !jobNode.row.finished);
  let planned: Awaited<ReturnType<typeof planApply>>;
  try {
    planned = await planApply({ prisma: run.deps.prisma, secrets: run.deps.secrets, connectTimeoutMs: run.deps.connectTimeoutMs }, pending.map((jobNode) => jobNode.row.nodeId));
  } catch (err) {
    run.deps.log.warn({ jobId: run.job.id, err: { message: run.scrub(messageOf(err)) } }, 'fabric apply could not start');
    return failJob(run, messageOf(err), 'failed');
  }
  run.scrub = planned.scrub;
  for (const id of planned.gone) await nodeDone(run, run.nodes.get(id)!, false, 'no longer a deployed compute node', false);
  const onAbort = () => {
    if (run.stopReason === null) run.stopReason = 'cancel';
    run.stop.abort();
  };
  run.lease.abort.addEventListener('abort', onAbort, { once: true });
  try {
    const list = [...planned.plans.values()];
    const results = await fanOut(list, async (plan, ctx) => {
      const jobNode = run.nodes.get(plan.node.nodeId)!;
      if (run.stop.signal.aborted) throw new Error('stopped before this node started');
      try {
        await applyNode(run, plan, AbortSignal.any([ctx.signal, run.stop.signal]), ctx.deadline);
      } catch (err) {
        if (run.lease.lost.aborted) throw err;
        // Recorded here, not after the fan-out: strict mode must stop the others at once.
        const pastDeadline = ctx.signal.aborted && !run.stop.signal.aborted && Date.now() >= ctx.deadline;
        const error = pastDeadline ? `no result within the per-node deadline of ${run.deps.nodeTimeoutMs} ms` : lastFailure(jobNode) ?? messageOf(err);
        await nodeDone(run, jobNode, false, error, reachable(jobNode, 'apply'));
        throw err;
      }
      await nodeDone(run, jobNode, true, '', true);
    }, { perNodeTimeoutMs: run.deps.nodeTimeoutMs, concurrency: run.deps.concurrency ?? DEFAULT_CONCURRENCY, signal: run.stop.signal });
    if (run.lease.lost.aborted) return;
    for (const result of results) {
      const jobNode = run.nodes.get(result.item.node.nodeId)!;
      if (result.status === 'ok') await nodeDone(run, jobNode, true, '', true);
      else await nodeDone(run, jobNode, false, result.code === 'DEADLINE' ? result.reason : lastFailure(jobNode) ?? result.reason, reachable(jobNode, 'apply'));
    }
  } finally {
    run.lease.abort.removeEventListener('abort', onAbort);
  }
  if (run.stopReason === 'cancel' || run.lease.abort.aborted) return cancelPhase(run);
  const rows = [...run.nodes.values()];
  const failedCount = rows.filter((jobNode) => !jobNode.row.ok).length;
  if (run.job.strict && failedCount > 0) {
    await write(run, (tx) => event(run, tx, 'apply_rolling_back', {}));
    const touched = rows.filter((jobNode) => jobNode.row.touched && !jobNode.row.rolledBack);
    const left = await rollback(run, touched);
    const first = await jobStore.jobNow(run.deps.prisma, run.job.id);
    return failJob(run, `strict mode: ${first.firstFailNode} failed (${first.firstFailError}); ${touched.length - left} of ${touched.length} touched node(s) rolled back to baseline${left ? `, ${left} could not be` : ''}`, 'failed');
  }
  if (failedCount === 0) return finish(run, 'completed', 'apply_completed', 'coverage');
  if (failedCount === rows.length) {
    const first = await jobStore.jobNow(run.deps.prisma, run.job.id);
    return failJob(run, `every node failed; first: ${first.firstFailNode}: ${first.firstFailError}`, run.job.scope === 'all' ? 'failed' : 'degraded');
  }
  return finish(run, 'partial', 'apply_partial', 'degraded', `${failedCount} of ${rows.length} nodes failed`);
}

async function teardown(run: RolloutRun): Promise<void> {
  const pending = [...run.nodes.values()].filter((jobNode) => !jobNode.row.finished);
  let failures: number;
  try {
    failures = await teardownAll(run, pending, false);
  } catch (err) {
    if (run.lease.lost.aborted) throw err;
    return failJob(run, messageOf(err), 'degraded');
  }
  const failedCount = [...run.nodes.values()].filter((jobNode) => !jobNode.row.ok).length;
  if (failures === 0 && failedCount === 0) return finish(run, 'completed', 'teardown_completed', 'coverage');
  const first = await jobStore.jobNow(run.deps.prisma, run.job.id);
  return failJob(run, `teardown failed on ${first.firstFailNode}: ${first.firstFailError}`, 'degraded');
}

/** The fabric job a run carries out (params.fabricJobId), with its node rows; its steps laid out once. */
async function startRun(deps: RolloutDeps, lease: DetachedLease, jobType: FabricJobType): Promise<RolloutRun | null> {
  const jobId = String(lease.run.params.fabricJobId ?? '');
  const job = await jobStore.jobWithNodes(deps.prisma, jobId);
  if (!job || job.jobStatus !== 'running' || job.jobType !== jobType) {
    // A job already ended (or never was): nothing to do, the run ends with it.
    await lease.serial(() => deps.prisma.$transaction((tx) => lease.end(tx, { status: 'failed', code: 'JOB_NOT_RUNNING', message: `fabric job ${jobId} is not a running ${jobType}` })));
    return null;
  }
  const mainPhase = jobType === 'fabric_apply' ? 'apply' : 'teardown';
  const stepCount = jobType === 'fabric_apply' ? APPLY_STEPS.length : TEARDOWN_STEPS.length;
  const nodes = new Map<string, NodeState>();
  for (const row of [...job.nodes].sort((a, b) => a.position - b.position)) {
    const recorded = (row.steps ?? []) as unknown as StepRecord[];
    const done = row.finished ? stepCount : recorded.filter((s) => s.phase === mainPhase && s.status !== 'failed' && s.status !== 'running').length;
    nodes.set(row.nodeId, { row, steps: recorded, done });
  }
  const stop = new AbortController();
  lease.lost.addEventListener('abort', () => stop.abort(), { once: true });
  const run: RolloutRun = { deps, lease, job, jobType, mainPhase, stepCount, nodes, scrub: (t) => t, stop, stopReason: null };
  const verb = jobType === 'fabric_apply' ? 'Applying the fabric on' : 'Tearing the fabric down on';
  await write(run, (tx) => lease.layOut(tx, job.nodes.map((jobNode) => ({ idx: jobNode.position, name: jobType === 'fabric_apply' ? 'apply-node' : 'teardown-node', title: `${verb} ${jobNode.fqdn || jobNode.nodeIp}` }))));
  return run;
}

/** The worker died on every attempt (STUCK_RESUMES): the job must not stay running forever. */
async function failLostJob(db: RawDb, run: DetachedRunInfo): Promise<void> {
  await jobStore.failLostJob(db as unknown as Tx, String(run.params.fabricJobId ?? ''),
    'the rollout worker was lost on every attempt (its run was taken up again too often); nodes may be half-applied: re-run apply or tear them down');
}

/** The two fabric rollout workflows, for the engine's detached runs. */
export function fabricRolloutWorkflows(deps: RolloutDeps): DetachedDef[] {
  return [
    {
      kind: 'fabric-apply',
      run: async (lease) => {
        const run = await startRun(deps, lease, 'fabric_apply');
        if (run) await apply(run);
      },
      lost: failLostJob,
    },
    {
      kind: 'fabric-teardown',
      run: async (lease) => {
        const run = await startRun(deps, lease, 'fabric_teardown');
        if (run) await teardown(run);
      },
      lost: failLostJob,
    },
  ];
}
