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

function progressOf(r: RolloutRun): number {
  if (r.nodes.size === 0) return 100;
  let sum = 0;
  for (const n of r.nodes.values()) sum += Math.min(n.done, r.stepCount);
  return Math.min(99, Math.floor((100 * sum) / (r.nodes.size * r.stepCount)));
}

/** One change of the job's rows with its event, fenced by the run's lease, in one transaction; a run's writes are serialised. */
function write<T>(r: RolloutRun, fn: (tx: Tx) => Promise<T>): Promise<T> {
  return r.lease.serial(() => r.deps.prisma.$transaction(async (tx) => {
    await r.lease.fence(tx);
    return fn(tx);
  }));
}

function event(r: RolloutRun, tx: Tx, state: string, extra: Record<string, unknown> & { nodeIp?: string; fqdn?: string } = {}): Promise<void> {
  return publishJobEvent(tx, { jobId: r.job.id, jobType: r.jobType, state, progress: progressOf(r), ...extra });
}

const nodeKey = (r: RolloutRun, n: NodeState): jobStore.JobNodeKey => ({ jobId: r.job.id, nodeId: n.row.nodeId });

async function stepStart(r: RolloutRun, n: NodeState, step: StepName, phase: StepRecord['phase']): Promise<StepRecord> {
  const record: StepRecord = { step, phase, status: 'running', message: '', startedAt: now().toISOString(), finishedAt: null };
  n.steps.push(record);
  const touched = phase === 'apply' && step !== 'connect' && step !== 'verify_bgp' ? true : undefined;
  if (touched) n.row.touched = true;
  await write(r, (tx) => jobStore.saveNodeSteps(tx, nodeKey(r, n), n.steps, touched ? { touched } : {}));
  return record;
}

async function stepEnd(r: RolloutRun, n: NodeState, record: StepRecord, status: StepRecord['status'], message: string): Promise<void> {
  record.status = status;
  record.message = r.scrub(message);
  record.finishedAt = now().toISOString();
  if (record.phase === r.mainPhase && status !== 'failed') n.done += 1;
  const progress = progressOf(r);
  await write(r, async (tx) => {
    await jobStore.recordNodeStep(tx, nodeKey(r, n), n.steps, progress);
    await event(r, tx, 'node_step', { nodeIp: n.row.nodeIp, fqdn: n.row.fqdn, step: record.step, phase: record.phase, status, message: record.message });
  });
}

/** A step's failure as recorded: an apply step cut short by a cancel or a strict stop says so. */
function failureMessage(r: RolloutRun, err: unknown, phase: StepRecord['phase']): string {
  if (phase === 'apply' && r.stop.signal.aborted) return r.stopReason === 'cancel' ? CANCELLED : STOPPED;
  return r.scrub(messageOf(err));
}

/** Runs one named SSH step of a node, recording it; a failure is rethrown for the node's outcome. */
async function step(r: RolloutRun, n: NodeState, name: StepName, phase: StepRecord['phase'], fn: () => Promise<string>): Promise<void> {
  const record = await stepStart(r, n, name, phase);
  try {
    const message = await fn();
    await stepEnd(r, n, record, message.startsWith('skipped:') ? 'skipped' : 'ok', message);
  } catch (err) {
    await stepEnd(r, n, record, 'failed', failureMessage(r, err, phase));
    throw err;
  }
}

/** The message of the node's last failed step (the real reason), if any. */
function lastFailure(n: NodeState): string | undefined {
  for (let i = n.steps.length - 1; i >= 0; i--) if (n.steps[i]!.status === 'failed') return n.steps[i]!.message;
  return undefined;
}

/**
 * false = the SSH dial failed before any step ran (the seed's `reachable`). A node the fan-out
 * never started (cancel, strict stop) or that failed later was reachable as far as we know.
 */
function reachable(n: NodeState, phase: StepRecord['phase']): boolean {
  const dial = n.steps.filter((s) => s.step === 'connect' && s.phase === phase).pop();
  if (!dial || dial.status !== 'failed') return true;
  return dial.message === CANCELLED || dial.message === STOPPED;
}

/** A phase of a node (re)starting: the records of an attempt a dead worker left of that phase are dropped. */
function restartPhase(n: NodeState, phase: StepRecord['phase']): void {
  if (!n.steps.some((s) => s.phase === phase)) return;
  n.steps = n.steps.filter((s) => s.phase !== phase);
  if (n.row.finished === false) n.done = 0;
}

/** The node's step of the run: its typed result, recorded with the node's outcome. */
function nodeResult(ok: boolean, reachableNow: boolean, aborted: boolean, error: string): StepResult {
  if (ok) return complete('the node is done');
  if (aborted) return failed('ABORTED', error || 'stopped before this node finished');
  return failed(reachableNow ? 'NODE_FAILED' : 'UNREACHABLE', error || 'failed');
}

/** A node's outcome with the job's counters, first failure and the run's step row, in one transaction. */
async function nodeDone(r: RolloutRun, n: NodeState, ok: boolean, error: string, reachableNow: boolean): Promise<void> {
  if (n.row.finished) return;
  const aborted = !ok && r.stop.signal.aborted;
  n.row.finished = true;
  n.row.ok = ok;
  n.row.reachable = reachableNow;
  n.row.error = r.scrub(error);
  if (ok) n.done = r.stepCount;
  const state = ok ? 'node_ok' : 'node_failed';
  const firstFail = !ok && !aborted;
  await write(r, async (tx) => {
    await jobStore.recordNodeOutcome(tx, nodeKey(r, n), {
      ok, reachable: reachableNow, error: n.row.error, firstFail, failNode: n.row.fqdn || n.row.nodeIp, progress: progressOf(r), state,
    });
    await r.lease.stepEnded(tx, n.row.position, nodeResult(ok, reachableNow, aborted, n.row.error));
    await event(r, tx, state, { nodeIp: n.row.nodeIp, fqdn: n.row.fqdn, reachable: reachableNow, ...(ok ? {} : { error: n.row.error }) });
  });
  if (firstFail && r.job.strict && r.stopReason === null) {
    r.stopReason = 'strict';
    r.stop.abort();
  }
}

/** The job's end, the rollout status, the last event and the run's end, in one transaction. */
async function finish(r: RolloutRun, status: Exclude<FabricJobStatus, 'running'>, state: string, rollout: RolloutStatus | 'coverage', error = ''): Promise<void> {
  const end: RunEnd = status === 'completed' || status === 'partial'
    ? { status: 'succeeded' }
    : state === 'apply_cancelled'
      ? { status: 'aborted', code: 'ABORTED', message: error }
      : { status: 'failed', code: r.jobType === 'fabric_apply' ? 'FABRIC_APPLY_FAILED' : 'FABRIC_TEARDOWN_FAILED', message: error };
  await write(r, async (tx) => {
    if (await jobStore.endJob(tx, r.job.id, { jobStatus: status, state, error })) {
      // A config saved while this job ran is not what the nodes received: not ready then.
      await jobStore.settleRolloutStatus(tx, r.job.configVersion, rollout);
      await publishJobEvent(tx, {
        jobId: r.job.id, jobType: r.jobType, state, progress: 100, job_status: status, error,
        completed_nodes: [...r.nodes.values()].filter((n) => n.row.finished && n.row.ok).length,
        failed_nodes: [...r.nodes.values()].filter((n) => n.row.finished && !n.row.ok).length,
      });
    }
    await r.lease.end(tx, end);
  });
}

function failJob(r: RolloutRun, error: string, rollout: RolloutStatus): Promise<void> {
  return finish(r, 'failed', r.jobType === 'fabric_apply' ? 'apply_failed' : 'teardown_failed', rollout, r.scrub(error));
}

/** The SSH session of a node's phase, recorded as its `connect` step; the host key is pinned at first contact. */
async function session(r: RolloutRun, n: NodeState, target: SshTarget, node: ComputeNode, signal: AbortSignal, deadline: number,
  phase: StepRecord['phase']): Promise<SshSession> {
  const record = await stepStart(r, n, 'connect', phase);
  try {
    const left = Math.max(1, deadline - Date.now());
    const opened = await connect({ ...target, connectTimeoutMs: Math.min(target.connectTimeoutMs ?? r.deps.connectTimeoutMs, left), signal });
    if (!node.sshHostKey) await pinHostKey(r.deps.prisma, node.nodeId, opened.hostKey.fingerprint);
    await stepEnd(r, n, record, 'ok', `${opened.where} (${opened.hostKey.fingerprint})`);
    return opened;
  } catch (err) {
    await stepEnd(r, n, record, 'failed', failureMessage(r, err, phase));
    throw err;
  }
}

/** The underlay's MTU becomes vxlan_mtu; the first value ever seen is kept as the baseline. */
async function syncMtu(r: RolloutRun, ssh: SshSession, plan: NodePlan): Promise<string> {
  const underlay = await steps.underlayOf(ssh, plan.underlayIface, plan.node.nodeIp);
  await jobStore.keepBaseline(r.deps.prisma, plan.node.nodeId, underlay.iface, underlay.mtu);
  if (underlay.mtu === plan.vxlanMtu) return `${underlay.iface} already has MTU ${plan.vxlanMtu}`;
  await steps.setMtu(ssh, underlay.iface, plan.vxlanMtu);
  return `${underlay.iface} MTU ${underlay.mtu} -> ${plan.vxlanMtu}`;
}

async function applyNode(r: RolloutRun, plan: NodePlan, signal: AbortSignal, deadline: number): Promise<void> {
  const n = r.nodes.get(plan.node.nodeId)!;
  // A node taken up again after its worker died starts over: the interrupted attempt's records go.
  restartPhase(n, 'apply');
  await write(r, async (tx) => {
    await jobStore.saveNodeSteps(tx, nodeKey(r, n), n.steps, { vtepIp: plan.vtepIp });
    await r.lease.stepStarted(tx, n.row.position);
  });
  n.row.vtepIp = plan.vtepIp;
  const ssh = await session(r, n, plan.target, plan.node, signal, deadline, 'apply');
  try {
    await step(r, n, 'install_frr', 'apply', () => steps.installFrr(ssh));
    await step(r, n, 'divert_config', 'apply', () => steps.divertConfig(ssh));
    await step(r, n, 'vtep_interface', 'apply', () => steps.ensureVtepInterface(ssh, plan.vtepIp));
    await step(r, n, 'write_config', 'apply', async () => {
      const written = await steps.writeConfig(ssh, plan.config);
      return `${written}; ${await steps.enableDaemons(ssh, plan.daemons)}`;
    });
    await step(r, n, 'mtu_sync', 'apply', () => syncMtu(r, ssh, plan));
    await step(r, n, 'restart_frr', 'apply', () => steps.restartFrr(ssh));
    const waitMs = Math.max(1, Math.min(r.deps.bgpWaitMs, deadline - Date.now() - 1000));
    await step(r, n, 'verify_bgp', 'apply', () => steps.verifyBgp(ssh, plan.expectedNeighbours, waitMs, signal));
  } finally {
    await ssh.close();
  }
}

/** Back to baseline: frr stopped, the distribution's config back, vtep0 gone, MTU restored, VTEP released. */
async function teardownNode(r: RolloutRun, n: NodeState, node: ComputeNode, target: SshTarget, signal: AbortSignal, deadline: number): Promise<void> {
  const ssh = await session(r, n, target, node, signal, deadline, 'teardown');
  try {
    await step(r, n, 'stop_frr', 'teardown', () => steps.stopFrr(ssh));
    await step(r, n, 'restore_config', 'teardown', () => steps.restoreConfig(ssh));
    await step(r, n, 'remove_vtep', 'teardown', () => steps.removeVtepInterface(ssh));
    await step(r, n, 'restore_mtu', 'teardown', async () => {
      const baseline = await jobStore.baselineOf(r.deps.prisma, node.nodeId);
      if (!baseline) return 'skipped: no baseline recorded (the MTU was never changed)';
      const current = await steps.underlayOf(ssh, baseline.underlayIface, node.nodeIp).catch(() => null);
      if (!current) return `skipped: ${baseline.underlayIface} is gone`;
      if (current.mtu !== baseline.underlayMtu) await steps.setMtu(ssh, baseline.underlayIface, baseline.underlayMtu);
      return `${baseline.underlayIface} MTU ${baseline.underlayMtu}`;
    });
    await step(r, n, 'release_vtep', 'teardown', async () => {
      const held = (await vtepsOf(r.deps.prisma, [node.nodeId])).get(node.nodeId);
      const released = await write(r, async (tx) => {
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
async function teardownAll(r: RolloutRun, list: NodeState[], rollback: boolean): Promise<number> {
  if (list.length === 0) return 0;
  const all = await listComputeNodes(r.deps.prisma);
  const byId = new Map(all.map((node) => [node.nodeId, node]));
  const present = list.filter((n) => byId.has(n.row.nodeId));
  const targets = await targetsOf({ prisma: r.deps.prisma, secrets: r.deps.secrets, connectTimeoutMs: r.deps.connectTimeoutMs }, present.map((n) => byId.get(n.row.nodeId)!));
  const cleanupIdx = (n: NodeState) => r.nodes.size + n.row.position;
  let failures = list.length - present.length;
  const results = await fanOut(present, async (n, ctx) => {
    const node = byId.get(n.row.nodeId)!;
    restartPhase(n, 'teardown');
    await write(r, async (tx) => {
      await jobStore.saveNodeSteps(tx, nodeKey(r, n), n.steps);
      await r.lease.stepStarted(tx, rollback ? cleanupIdx(n) : n.row.position);
    });
    await teardownNode(r, n, node, targets.get(node.nodeId)!, AbortSignal.any([ctx.signal, r.lease.lost]), ctx.deadline);
  }, { perNodeTimeoutMs: r.deps.nodeTimeoutMs, concurrency: r.deps.concurrency ?? DEFAULT_CONCURRENCY });
  for (const result of results) {
    const n = result.item;
    const ok = result.status === 'ok';
    if (!ok) failures += 1;
    const error = ok ? '' : r.scrub(result.reason);
    if (rollback) {
      n.row.rolledBack = ok;
      await write(r, async (tx) => {
        await jobStore.recordNodeRollback(tx, nodeKey(r, n), ok, ok ? null : n.row.error ? `${n.row.error}; rollback failed: ${error}` : `rollback failed: ${error}`);
        await r.lease.stepEnded(tx, cleanupIdx(n), ok ? complete('back to baseline') : failed('ROLLBACK_FAILED', error));
        await event(r, tx, ok ? 'node_rolled_back' : 'node_rollback_failed', { nodeIp: n.row.nodeIp, fqdn: n.row.fqdn, ...(ok ? {} : { error }) });
      });
    } else {
      await nodeDone(r, n, ok, ok ? '' : result.code === 'DEADLINE' ? error : lastFailure(n) ?? error, reachable(n, 'teardown'));
    }
  }
  return failures;
}

/** The run's cleanup: every touched node not rolled back yet gets a cleanup step, then a teardown. */
async function rollback(r: RolloutRun, touched: NodeState[]): Promise<number> {
  await write(r, async (tx) => {
    await r.lease.aborting(tx);
    await r.lease.layOut(tx, touched.map((n) => ({ idx: r.nodes.size + n.row.position, name: 'rollback-node', title: `Rolling ${n.row.fqdn || n.row.nodeIp} back to baseline`, cleanup: true })));
  });
  return teardownAll(r, touched, true);
}

async function cancelPhase(r: RolloutRun): Promise<void> {
  r.stopReason = 'cancel';
  const touched = [...r.nodes.values()].filter((n) => n.row.touched && !n.row.rolledBack);
  const left = await rollback(r, touched);
  await finish(r, 'failed', 'apply_cancelled', left ? 'failed' : 'pending',
    `cancelled: ${touched.length - left} of ${touched.length} touched node(s) back to baseline${left ? `, ${left} could not be` : ''}`);
}

async function apply(r: RolloutRun): Promise<void> {
  if (r.lease.abort.aborted || r.job.cancelRequestedAt) return cancelPhase(r);
  // Resume: only the nodes without an outcome are (re)run; a finished node is never contacted again.
  const pending = [...r.nodes.values()].filter((n) => !n.row.finished);
  let planned: Awaited<ReturnType<typeof planApply>>;
  try {
    planned = await planApply({ prisma: r.deps.prisma, secrets: r.deps.secrets, connectTimeoutMs: r.deps.connectTimeoutMs }, pending.map((n) => n.row.nodeId));
  } catch (err) {
    r.deps.log.warn({ jobId: r.job.id, err: { message: r.scrub(messageOf(err)) } }, 'fabric apply could not start');
    return failJob(r, messageOf(err), 'failed');
  }
  r.scrub = planned.scrub;
  for (const id of planned.gone) await nodeDone(r, r.nodes.get(id)!, false, 'no longer a deployed compute node', false);
  const onAbort = () => {
    if (r.stopReason === null) r.stopReason = 'cancel';
    r.stop.abort();
  };
  r.lease.abort.addEventListener('abort', onAbort, { once: true });
  try {
    const list = [...planned.plans.values()];
    const results = await fanOut(list, async (plan, ctx) => {
      const n = r.nodes.get(plan.node.nodeId)!;
      if (r.stop.signal.aborted) throw new Error('stopped before this node started');
      try {
        await applyNode(r, plan, AbortSignal.any([ctx.signal, r.stop.signal]), ctx.deadline);
      } catch (err) {
        if (r.lease.lost.aborted) throw err;
        // Recorded here, not after the fan-out: strict mode must stop the others at once.
        const pastDeadline = ctx.signal.aborted && !r.stop.signal.aborted && Date.now() >= ctx.deadline;
        const error = pastDeadline ? `no result within the per-node deadline of ${r.deps.nodeTimeoutMs} ms` : lastFailure(n) ?? messageOf(err);
        await nodeDone(r, n, false, error, reachable(n, 'apply'));
        throw err;
      }
      await nodeDone(r, n, true, '', true);
    }, { perNodeTimeoutMs: r.deps.nodeTimeoutMs, concurrency: r.deps.concurrency ?? DEFAULT_CONCURRENCY, signal: r.stop.signal });
    if (r.lease.lost.aborted) return;
    for (const result of results) {
      const n = r.nodes.get(result.item.node.nodeId)!;
      if (result.status === 'ok') await nodeDone(r, n, true, '', true);
      else await nodeDone(r, n, false, result.code === 'DEADLINE' ? result.reason : lastFailure(n) ?? result.reason, reachable(n, 'apply'));
    }
  } finally {
    r.lease.abort.removeEventListener('abort', onAbort);
  }
  if (r.stopReason === 'cancel' || r.lease.abort.aborted) return cancelPhase(r);
  const rows = [...r.nodes.values()];
  const failedCount = rows.filter((n) => !n.row.ok).length;
  if (r.job.strict && failedCount > 0) {
    await write(r, (tx) => event(r, tx, 'apply_rolling_back', {}));
    const touched = rows.filter((n) => n.row.touched && !n.row.rolledBack);
    const left = await rollback(r, touched);
    const first = await jobStore.jobNow(r.deps.prisma, r.job.id);
    return failJob(r, `strict mode: ${first.firstFailNode} failed (${first.firstFailError}); ${touched.length - left} of ${touched.length} touched node(s) rolled back to baseline${left ? `, ${left} could not be` : ''}`, 'failed');
  }
  if (failedCount === 0) return finish(r, 'completed', 'apply_completed', 'coverage');
  if (failedCount === rows.length) {
    const first = await jobStore.jobNow(r.deps.prisma, r.job.id);
    return failJob(r, `every node failed; first: ${first.firstFailNode}: ${first.firstFailError}`, r.job.scope === 'all' ? 'failed' : 'degraded');
  }
  return finish(r, 'partial', 'apply_partial', 'degraded', `${failedCount} of ${rows.length} nodes failed`);
}

async function teardown(r: RolloutRun): Promise<void> {
  const pending = [...r.nodes.values()].filter((n) => !n.row.finished);
  let failures: number;
  try {
    failures = await teardownAll(r, pending, false);
  } catch (err) {
    if (r.lease.lost.aborted) throw err;
    return failJob(r, messageOf(err), 'degraded');
  }
  const failedCount = [...r.nodes.values()].filter((n) => !n.row.ok).length;
  if (failures === 0 && failedCount === 0) return finish(r, 'completed', 'teardown_completed', 'coverage');
  const first = await jobStore.jobNow(r.deps.prisma, r.job.id);
  return failJob(r, `teardown failed on ${first.firstFailNode}: ${first.firstFailError}`, 'degraded');
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
  const r: RolloutRun = { deps, lease, job, jobType, mainPhase, stepCount, nodes, scrub: (t) => t, stop, stopReason: null };
  const verb = jobType === 'fabric_apply' ? 'Applying the fabric on' : 'Tearing the fabric down on';
  await write(r, (tx) => lease.layOut(tx, job.nodes.map((n) => ({ idx: n.position, name: jobType === 'fabric_apply' ? 'apply-node' : 'teardown-node', title: `${verb} ${n.fqdn || n.nodeIp}` }))));
  return r;
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
        const r = await startRun(deps, lease, 'fabric_apply');
        if (r) await apply(r);
      },
      lost: failLostJob,
    },
    {
      kind: 'fabric-teardown',
      run: async (lease) => {
        const r = await startRun(deps, lease, 'fabric_teardown');
        if (r) await teardown(r);
      },
      lost: failLostJob,
    },
  ];
}
