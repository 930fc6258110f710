import type { Logger } from 'pino';
import { connect, fanOut, DEFAULT_CONCURRENCY, SshError, type SshSession, type SshTarget } from '../clients/ssh';
import type { SecretBroker } from '../clients/secrets/broker';
import type { FabricJob, FabricJobNode, PrismaClient } from '../src/generated/prisma/client';
import type { Tx } from '../src/db/client';
import { listComputeNodes, pinHostKey, serviceSshIdentity, sshTargetOf, type ComputeNode } from '../src/modules/fabric/compute-nodes';
import { settingsOf } from '../src/modules/fabric/config';
import { findGateway, renderHostFrr } from '../src/modules/fabric/render/host-frr';
import { nodeIntentsOf, renderIntentOf } from '../src/modules/fabric/render-intent';
import { allocateVteps, releaseVtep, vtepsOf } from '../src/modules/fabric/vtep';
import type { FabricIntent, FabricNodeIntent, FabricSecrets } from '../src/modules/fabric/intent';
import {
  APPLY_STEPS, FABRIC_ID, TEARDOWN_STEPS, publishJobEvent, setRolloutStatus,
  type FabricJobStatus, type FabricJobType, type StepName, type StepRecord,
} from '../src/modules/fabric/rollout';
import type { RolloutStatus } from '../src/modules/fabric/validate';
import * as steps from './fabric-steps';

/**
 * The fabric.rollout worker: runs one fabric_job (apply or teardown) from its rows. Level-triggered
 * like the metal reconciler: a retry after a crash reads the rows again, skips the nodes already
 * finished and re-runs the rest (every step is idempotent), and a job already terminal is left
 * alone. Every change is written with its `fabric.*` event in one transaction.
 */

export interface RolloutDeps {
  prisma: PrismaClient;
  secrets: SecretBroker | null;
  log: Logger;
  bgpWaitMs: number;
  connectTimeoutMs: number;
  nodeTimeoutMs: number;
  concurrency?: number;
  /** How often a running job looks for a cancel request. */
  cancelPollMs?: number;
}

interface NodeState {
  row: FabricJobNode;
  steps: StepRecord[];
  /** Steps of the apply finished (for progress). */
  done: number;
}

interface NodePlan {
  node: ComputeNode;
  target: SshTarget;
  config: string;
  vtepIp: string;
  expectedNeighbours: string[];
  underlayIface: string;
  vxlanMtu: number;
  /** The FRR daemons the config needs (bgpd; ospfd under the OSPF underlay; bfdd with BFD). */
  daemons: string[];
}

const now = () => new Date();
const CANCELLED = 'cancelled before this node finished';
const STOPPED = 'stopped: strict mode rolls back after the first failure';

/** A message as it may be recorded: no fabric secret in it, whatever a command printed. */
function scrubber(secrets: string[]): (text: string) => string {
  const values = secrets.filter((s) => s.length >= 4);
  return (text) => values.reduce((out, s) => out.split(s).join('[redacted]'), text);
}

function messageOf(err: unknown): string {
  if (err instanceof SshError || err instanceof steps.StepFailure) return err.message;
  if (err instanceof Error) return err.message.slice(0, 500);
  return String(err).slice(0, 500);
}

class JobRunner {
  private readonly nodes = new Map<string, NodeState>();
  private scrub: (text: string) => string = (t) => t;
  private readonly jobType: FabricJobType;
  private readonly stop = new AbortController();
  private stopReason: 'cancel' | 'strict' | null = null;
  private writes: Promise<unknown> = Promise.resolve();
  /** The job's own phase (what progress counts): apply steps for an apply, teardown steps for a teardown. */
  private readonly mainPhase: StepRecord['phase'];
  private readonly stepCount: number;

  constructor(private readonly deps: RolloutDeps, private job: FabricJob, rows: FabricJobNode[]) {
    this.jobType = job.jobType as FabricJobType;
    this.mainPhase = this.jobType === 'fabric_apply' ? 'apply' : 'teardown';
    this.stepCount = this.jobType === 'fabric_apply' ? APPLY_STEPS.length : TEARDOWN_STEPS.length;
    for (const row of [...rows].sort((a, b) => a.position - b.position)) {
      const recorded = (row.steps ?? []) as unknown as StepRecord[];
      const done = row.finished ? this.stepCount : recorded.filter((s) => s.phase === this.mainPhase && s.status !== 'failed' && s.status !== 'running').length;
      this.nodes.set(row.nodeId, { row, steps: recorded, done });
    }
  }

  private get prisma() {
    return this.deps.prisma;
  }

  private progress(): number {
    if (this.nodes.size === 0) return 100;
    let sum = 0;
    for (const n of this.nodes.values()) sum += Math.min(n.done, this.stepCount);
    return Math.min(99, Math.floor((100 * sum) / (this.nodes.size * this.stepCount)));
  }

  /** One row change plus its event, in one transaction; writes of one job are serialised. */
  private write<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    const next = this.writes.then(() => this.prisma.$transaction(fn));
    this.writes = next.catch(() => undefined);
    return next;
  }

  private event(tx: Tx, state: string, extra: Record<string, unknown> & { nodeIp?: string; fqdn?: string } = {}): Promise<void> {
    return publishJobEvent(tx, { jobId: this.job.id, jobType: this.jobType, state, progress: this.progress(), ...extra });
  }

  private async stepStart(n: NodeState, step: StepName, phase: StepRecord['phase']): Promise<StepRecord> {
    const record: StepRecord = { step, phase, status: 'running', message: '', startedAt: now().toISOString(), finishedAt: null };
    n.steps.push(record);
    const touched = phase === 'apply' && step !== 'connect' && step !== 'verify_bgp' ? true : undefined;
    if (touched) n.row.touched = true;
    await this.write((tx) => tx.fabricJobNode.update({
      where: { jobId_nodeId: { jobId: this.job.id, nodeId: n.row.nodeId } },
      data: { steps: n.steps as unknown as object, ...(touched ? { touched } : {}), updatedAt: now() },
    }));
    return record;
  }

  private async stepEnd(n: NodeState, record: StepRecord, status: StepRecord['status'], message: string): Promise<void> {
    record.status = status;
    record.message = this.scrub(message);
    record.finishedAt = now().toISOString();
    if (record.phase === this.mainPhase && status !== 'failed') n.done += 1;
    const progress = this.progress();
    await this.write(async (tx) => {
      await tx.fabricJobNode.update({
        where: { jobId_nodeId: { jobId: this.job.id, nodeId: n.row.nodeId } },
        data: { steps: n.steps as unknown as object, updatedAt: now() },
      });
      await tx.fabricJob.update({ where: { id: this.job.id }, data: { progress, state: 'node_step', updatedAt: now() } });
      await this.event(tx, 'node_step', { nodeIp: n.row.nodeIp, fqdn: n.row.fqdn, step: record.step, phase: record.phase, status, message: record.message });
    });
  }

  /** Runs one named step, recording it; a failure is rethrown for the node's outcome. */
  private async step(n: NodeState, step: StepName, phase: StepRecord['phase'], fn: () => Promise<string>): Promise<void> {
    const record = await this.stepStart(n, step, phase);
    try {
      const message = await fn();
      await this.stepEnd(n, record, message.startsWith('skipped:') ? 'skipped' : 'ok', message);
    } catch (err) {
      await this.stepEnd(n, record, 'failed', this.failureMessage(err, phase));
      throw err;
    }
  }

  /** A step's failure as recorded: an apply step cut short by a cancel or a strict stop says so. */
  private failureMessage(err: unknown, phase: StepRecord['phase']): string {
    if (phase === 'apply' && this.stop.signal.aborted) {
      return this.stopReason === 'cancel' ? CANCELLED : STOPPED;
    }
    return this.scrub(messageOf(err));
  }

  /** A node's apply outcome with the job's counters and first failure, in one transaction. */
  private async nodeDone(n: NodeState, ok: boolean, error: string, reachable: boolean): Promise<void> {
    if (n.row.finished) return;
    const aborted = !ok && this.stop.signal.aborted;
    n.row.finished = true;
    n.row.ok = ok;
    n.row.reachable = reachable;
    n.row.error = this.scrub(error);
    if (ok) n.done = this.stepCount;
    const state = ok ? 'node_ok' : 'node_failed';
    const firstFail = !ok && !aborted;
    await this.write(async (tx) => {
      await tx.fabricJobNode.update({
        where: { jobId_nodeId: { jobId: this.job.id, nodeId: n.row.nodeId } },
        data: { finished: true, ok, reachable, error: n.row.error, updatedAt: now() },
      });
      await tx.$executeRawUnsafe(
        `UPDATE fabric_job SET completed_nodes = completed_nodes + $2, failed_nodes = failed_nodes + $3,
                first_fail_node = CASE WHEN $4 AND first_fail_node = '' THEN $5 ELSE first_fail_node END,
                first_fail_error = CASE WHEN $4 AND first_fail_node = '' THEN $6 ELSE first_fail_error END,
                progress = $7, state = $8, updated_at = now()
          WHERE id = $1::uuid`,
        this.job.id, ok ? 1 : 0, ok ? 0 : 1, firstFail, n.row.fqdn || n.row.nodeIp, n.row.error, this.progress(), state);
      await this.event(tx, state, { nodeIp: n.row.nodeIp, fqdn: n.row.fqdn, reachable, ...(ok ? {} : { error: n.row.error }) });
    });
    if (firstFail && this.job.strict && this.stopReason === null) {
      this.stopReason = 'strict';
      this.stop.abort();
    }
  }

  private async failJob(error: string, rollout: RolloutStatus): Promise<void> {
    const state = this.jobType === 'fabric_apply' ? 'apply_failed' : 'teardown_failed';
    await this.finish('failed', state, rollout, this.scrub(error));
  }

  private async finish(status: Exclude<FabricJobStatus, 'running'>, state: string, rollout: RolloutStatus | 'coverage', error = ''): Promise<void> {
    await this.write(async (tx) => {
      const updated = await tx.fabricJob.updateMany({
        where: { id: this.job.id, jobStatus: 'running' },
        data: { jobStatus: status, state, progress: 100, error, finishedAt: now(), updatedAt: now() },
      });
      if (updated.count === 0) return;
      const config = await tx.fabricConfig.findUnique({ where: { id: FABRIC_ID }, select: { version: true } });
      if (config) {
        let next: RolloutStatus = rollout === 'coverage' ? await coverageStatus(tx) : rollout;
        // A config saved while this job ran is not what the nodes received.
        if (next === 'ready' && config.version !== this.job.configVersion) next = 'pending';
        await setRolloutStatus(tx, next);
      }
      await publishJobEvent(tx, {
        jobId: this.job.id, jobType: this.jobType, state, progress: 100, job_status: status, error,
        completed_nodes: [...this.nodes.values()].filter((n) => n.row.finished && n.row.ok).length,
        failed_nodes: [...this.nodes.values()].filter((n) => n.row.finished && !n.row.ok).length,
      });
    });
  }

  private async cancelRequested(): Promise<boolean> {
    const row = await this.prisma.fabricJob.findUnique({ where: { id: this.job.id }, select: { cancelRequestedAt: true } });
    return row?.cancelRequestedAt != null;
  }

  /** Polls for a cancel request while the fan-out runs: the request is a row, so any process may make it. */
  private watchCancel(): () => void {
    const timer = setInterval(() => {
      void this.cancelRequested().then((yes) => {
        if (yes && this.stopReason === null) {
          this.stopReason = 'cancel';
          this.stop.abort();
        }
      }, () => undefined);
    }, this.deps.cancelPollMs ?? 300);
    return () => clearInterval(timer);
  }

  private async fabricSecrets(refs: { bgpPasswordRef: string | null; ospfAuthKeyRef: string | null }): Promise<FabricSecrets> {
    const read = async (ref: string | null, what: string): Promise<string | undefined> => {
      if (!ref) return undefined;
      if (!this.deps.secrets) throw new Error(`no secret broker is configured (SECRET_KEY): the ${what} cannot be read`);
      const value = await this.deps.secrets.get(ref, null);
      if (typeof value !== 'string') throw new Error(`the stored ${what} is not a string`);
      return value;
    };
    const out: FabricSecrets = {};
    const bgp = await read(refs.bgpPasswordRef, 'BGP password');
    const ospf = await read(refs.ospfAuthKeyRef, 'OSPF key');
    if (bgp) out.bgpPassword = bgp;
    if (ospf) out.ospfAuthKey = ospf;
    this.scrub = scrubber([bgp ?? '', ospf ?? '']);
    return out;
  }

  private async targetsOf(nodes: ComputeNode[]): Promise<Map<string, SshTarget>> {
    const identity = await serviceSshIdentity(this.prisma, this.deps.secrets);
    const out = new Map<string, SshTarget>();
    for (const node of nodes) {
      out.set(node.nodeId, await sshTargetOf(node, identity, this.deps.secrets, { connectTimeoutMs: this.deps.connectTimeoutMs }));
    }
    return out;
  }

  /** The per-node plans of an apply: rendered config, VTEP, neighbours to wait for, underlay. */
  private async planApply(): Promise<Map<string, NodePlan>> {
    const config = await this.prisma.fabricConfig.findUnique({ where: { id: FABRIC_ID } });
    if (!config) throw new Error('the fabric config was deleted before the rollout ran');
    const settings = settingsOf(config);
    const secrets = await this.fabricSecrets(config);
    const intent = renderIntentOf(settings);
    const all = await listComputeNodes(this.prisma);
    const byId = new Map(all.map((n) => [n.nodeId, n]));
    const wanted = [...this.nodes.values()].filter((n) => !n.row.finished);
    const present = wanted.map((n) => byId.get(n.row.nodeId)).filter((n): n is ComputeNode => n !== undefined);
    for (const n of wanted) {
      if (!byId.has(n.row.nodeId)) await this.nodeDone(n, false, 'no longer a deployed compute node', false);
    }
    const gatewayNode = intent.externalRouteReflector ? undefined : all.find((n) => n.isGateway);
    const renderSet = gatewayNode && !present.some((n) => n.nodeId === gatewayNode.nodeId) ? [...present, gatewayNode] : present;
    const vteps = await allocateVteps(this.prisma, renderSet.map((n) => n.nodeId));
    const intents = nodeIntentsOf(renderSet, vteps);
    const intentById = new Map(renderSet.map((n, i) => [n.nodeId, intents[i]!]));
    const gateway = intent.externalRouteReflector || renderSet.length === 0 ? undefined : findGateway(intents);
    const targets = await this.targetsOf(present);
    const plans = new Map<string, NodePlan>();
    for (const node of present) {
      const nodeIntent = intentById.get(node.nodeId)!;
      plans.set(node.nodeId, {
        node,
        target: targets.get(node.nodeId)!,
        config: renderHostFrr(intent, nodeIntent, secrets, gateway),
        vtepIp: nodeIntent.vtepIp,
        expectedNeighbours: expectedNeighbours(intent, nodeIntent, gateway),
        underlayIface: node.underlayIface || (settings.ospfEnabled ? settings.ospfFabricInterface : ''),
        vxlanMtu: settings.vxlanMtu,
        daemons: ['bgpd', ...(intent.underlay === 'ospf' ? ['ospfd'] : []), ...(intent.bfdEnabled ? ['bfdd'] : [])],
      });
    }
    return plans;
  }

  private async session(n: NodeState, target: SshTarget, node: ComputeNode, signal: AbortSignal, deadline: number,
    phase: StepRecord['phase']): Promise<SshSession> {
    const record = await this.stepStart(n, 'connect', phase);
    try {
      const left = Math.max(1, deadline - Date.now());
      const session = await connect({ ...target, connectTimeoutMs: Math.min(target.connectTimeoutMs ?? this.deps.connectTimeoutMs, left), signal });
      if (!node.sshHostKey) await pinHostKey(this.prisma, node.nodeId, session.hostKey.fingerprint);
      await this.stepEnd(n, record, 'ok', `${session.where} (${session.hostKey.fingerprint})`);
      return session;
    } catch (err) {
      await this.stepEnd(n, record, 'failed', this.failureMessage(err, phase));
      throw err;
    }
  }

  /**
   * false = the SSH dial failed before any step ran (the seed's `reachable`). A node the fan-out
   * never started (cancel, strict stop) or that failed later was reachable as far as we know.
   */
  private reachable(n: NodeState, phase: StepRecord['phase']): boolean {
    const dial = n.steps.filter((s) => s.step === 'connect' && s.phase === phase).pop();
    if (!dial || dial.status !== 'failed') return true;
    return dial.message === CANCELLED || dial.message === STOPPED;
  }

  private async applyNode(plan: NodePlan, signal: AbortSignal, deadline: number): Promise<void> {
    const n = this.nodes.get(plan.node.nodeId)!;
    await this.write((tx) => tx.fabricJobNode.update({
      where: { jobId_nodeId: { jobId: this.job.id, nodeId: n.row.nodeId } }, data: { vtepIp: plan.vtepIp, updatedAt: now() },
    }));
    n.row.vtepIp = plan.vtepIp;
    const session = await this.session(n, plan.target, plan.node, signal, deadline, 'apply');
    try {
      await this.step(n, 'install_frr', 'apply', () => steps.installFrr(session));
      await this.step(n, 'divert_config', 'apply', () => steps.divertConfig(session));
      await this.step(n, 'vtep_interface', 'apply', () => steps.ensureVtepInterface(session, plan.vtepIp));
      await this.step(n, 'write_config', 'apply', async () => {
        const written = await steps.writeConfig(session, plan.config);
        return `${written}; ${await steps.enableDaemons(session, plan.daemons)}`;
      });
      await this.step(n, 'mtu_sync', 'apply', () => this.syncMtu(session, plan));
      await this.step(n, 'restart_frr', 'apply', () => steps.restartFrr(session));
      const waitMs = Math.max(1, Math.min(this.deps.bgpWaitMs, deadline - Date.now() - 1000));
      await this.step(n, 'verify_bgp', 'apply', () => steps.verifyBgp(session, plan.expectedNeighbours, waitMs, signal));
    } finally {
      await session.close();
    }
  }

  /** The underlay's MTU becomes vxlan_mtu; the first value ever seen is kept as the baseline. */
  private async syncMtu(session: SshSession, plan: NodePlan): Promise<string> {
    const underlay = await steps.underlayOf(session, plan.underlayIface, plan.node.nodeIp);
    await this.prisma.fabricNodeBaseline.upsert({
      where: { nodeId: plan.node.nodeId },
      create: { nodeId: plan.node.nodeId, underlayIface: underlay.iface, underlayMtu: underlay.mtu },
      update: {},
    });
    if (underlay.mtu === plan.vxlanMtu) return `${underlay.iface} already has MTU ${plan.vxlanMtu}`;
    await steps.setMtu(session, underlay.iface, plan.vxlanMtu);
    return `${underlay.iface} MTU ${underlay.mtu} -> ${plan.vxlanMtu}`;
  }

  /** Back to baseline: frr stopped, the distribution's config back, vtep0 gone, MTU restored, VTEP released. */
  private async teardownNode(n: NodeState, node: ComputeNode, target: SshTarget, signal: AbortSignal, deadline: number): Promise<void> {
    const session = await this.session(n, target, node, signal, deadline, 'teardown');
    try {
      await this.step(n, 'stop_frr', 'teardown', () => steps.stopFrr(session));
      await this.step(n, 'restore_config', 'teardown', () => steps.restoreConfig(session));
      await this.step(n, 'remove_vtep', 'teardown', () => steps.removeVtepInterface(session));
      await this.step(n, 'restore_mtu', 'teardown', async () => {
        const baseline = await this.prisma.fabricNodeBaseline.findUnique({ where: { nodeId: node.nodeId } });
        if (!baseline) return 'skipped: no baseline recorded (the MTU was never changed)';
        const current = await steps.underlayOf(session, baseline.underlayIface, node.nodeIp).catch(() => null);
        if (!current) return `skipped: ${baseline.underlayIface} is gone`;
        if (current.mtu !== baseline.underlayMtu) await steps.setMtu(session, baseline.underlayIface, baseline.underlayMtu);
        return `${baseline.underlayIface} MTU ${baseline.underlayMtu}`;
      });
      await this.step(n, 'release_vtep', 'teardown', async () => {
        const held = (await vtepsOf(this.prisma, [node.nodeId])).get(node.nodeId);
        const released = await this.write(async (tx) => {
          await tx.fabricNodeBaseline.deleteMany({ where: { nodeId: node.nodeId } });
          return releaseVtep(tx, node.nodeId);
        });
        return released ? `VTEP ${held ?? ''} released`.replace('  ', ' ') : 'skipped: no VTEP was allocated';
      });
    } finally {
      await session.close();
    }
  }

  /** Tears the given nodes down side by side; returns how many could not be brought back. */
  private async teardownAll(list: NodeState[], rollback: boolean): Promise<number> {
    if (list.length === 0) return 0;
    const all = await listComputeNodes(this.prisma);
    const byId = new Map(all.map((n) => [n.nodeId, n]));
    const present = list.filter((n) => byId.has(n.row.nodeId));
    const targets = await this.targetsOf(present.map((n) => byId.get(n.row.nodeId)!));
    let failures = list.length - present.length;
    const results = await fanOut(present, async (n, ctx) => {
      const node = byId.get(n.row.nodeId)!;
      await this.teardownNode(n, node, targets.get(node.nodeId)!, ctx.signal, ctx.deadline);
    }, { perNodeTimeoutMs: this.deps.nodeTimeoutMs, concurrency: this.deps.concurrency ?? DEFAULT_CONCURRENCY });
    for (const r of results) {
      const n = r.item;
      const ok = r.status === 'ok';
      if (!ok) failures += 1;
      const error = ok ? '' : this.scrub(r.reason);
      if (rollback) {
        n.row.rolledBack = ok;
        await this.write(async (tx) => {
          await tx.fabricJobNode.update({
            where: { jobId_nodeId: { jobId: this.job.id, nodeId: n.row.nodeId } },
            data: { rolledBack: ok, ...(ok ? {} : { error: n.row.error ? `${n.row.error}; rollback failed: ${error}` : `rollback failed: ${error}` }), updatedAt: now() },
          });
          await this.event(tx, ok ? 'node_rolled_back' : 'node_rollback_failed', { nodeIp: n.row.nodeIp, fqdn: n.row.fqdn, ...(ok ? {} : { error }) });
        });
      } else {
        await this.nodeDone(n, ok, ok ? '' : r.code === 'DEADLINE' ? error : this.lastFailure(n) ?? error, this.reachable(n, 'teardown'));
      }
    }
    return failures;
  }

  async apply(): Promise<void> {
    if (await this.cancelRequested()) return this.cancelPhase();
    let plans: Map<string, NodePlan>;
    try {
      plans = await this.planApply();
    } catch (err) {
      this.deps.log.warn({ jobId: this.job.id, err: { message: this.scrub(messageOf(err)) } }, 'fabric apply could not start');
      return this.failJob(messageOf(err), 'failed');
    }
    const unwatch = this.watchCancel();
    try {
      const list = [...plans.values()];
      const results = await fanOut(list, async (plan, ctx) => {
        const n = this.nodes.get(plan.node.nodeId)!;
        if (this.stop.signal.aborted) throw new Error('stopped before this node started');
        try {
          await this.applyNode(plan, mergeSignals(ctx.signal, this.stop.signal), ctx.deadline);
        } catch (err) {
          // Recorded here, not after the fan-out: strict mode must stop the others at once.
          const pastDeadline = ctx.signal.aborted && !this.stop.signal.aborted && Date.now() >= ctx.deadline;
          const error = pastDeadline ? `no result within the per-node deadline of ${this.deps.nodeTimeoutMs} ms` : this.lastFailure(n) ?? messageOf(err);
          await this.nodeDone(n, false, error, this.reachable(n, 'apply'));
          throw err;
        }
        await this.nodeDone(n, true, '', true);
      }, { perNodeTimeoutMs: this.deps.nodeTimeoutMs, concurrency: this.deps.concurrency ?? DEFAULT_CONCURRENCY, signal: this.stop.signal });
      for (const r of results) {
        const n = this.nodes.get(r.item.node.nodeId)!;
        if (r.status === 'ok') await this.nodeDone(n, true, '', true);
        else await this.nodeDone(n, false, r.code === 'DEADLINE' ? r.reason : this.lastFailure(n) ?? r.reason, this.reachable(n, 'apply'));
      }
    } finally {
      unwatch();
    }
    if (this.stopReason === 'cancel' || (await this.cancelRequested())) return this.cancelPhase();
    const rows = [...this.nodes.values()];
    const failed = rows.filter((n) => !n.row.ok).length;
    if (this.job.strict && failed > 0) {
      await this.write((tx) => this.event(tx, 'apply_rolling_back', {}));
      const touched = rows.filter((n) => n.row.touched && !n.row.rolledBack);
      const left = await this.teardownAll(touched, true);
      const first = await this.prisma.fabricJob.findUniqueOrThrow({ where: { id: this.job.id } });
      return this.failJob(`strict mode: ${first.firstFailNode} failed (${first.firstFailError}); ${touched.length - left} of ${touched.length} touched node(s) rolled back to baseline${left ? `, ${left} could not be` : ''}`, 'failed');
    }
    if (failed === 0) return this.finish('completed', 'apply_completed', 'coverage');
    if (failed === rows.length) {
      const first = await this.prisma.fabricJob.findUniqueOrThrow({ where: { id: this.job.id } });
      return this.failJob(`every node failed; first: ${first.firstFailNode}: ${first.firstFailError}`, this.job.scope === 'all' ? 'failed' : 'degraded');
    }
    return this.finish('partial', 'apply_partial', 'degraded', `${failed} of ${rows.length} nodes failed`);
  }

  /** The message of the node's last failed step (the real reason), if any. */
  private lastFailure(n: NodeState): string | undefined {
    for (let i = n.steps.length - 1; i >= 0; i--) if (n.steps[i]!.status === 'failed') return n.steps[i]!.message;
    return undefined;
  }

  private async cancelPhase(): Promise<void> {
    this.stopReason = 'cancel';
    const touched = [...this.nodes.values()].filter((n) => n.row.touched && !n.row.rolledBack);
    const left = await this.teardownAll(touched, true);
    await this.finish('failed', 'apply_cancelled', left ? 'failed' : 'pending',
      `cancelled: ${touched.length - left} of ${touched.length} touched node(s) back to baseline${left ? `, ${left} could not be` : ''}`);
  }

  async teardown(): Promise<void> {
    const pending = [...this.nodes.values()].filter((n) => !n.row.finished);
    let failures: number;
    try {
      failures = await this.teardownAll(pending, false);
    } catch (err) {
      return this.failJob(messageOf(err), 'degraded');
    }
    const failed = [...this.nodes.values()].filter((n) => !n.row.ok).length;
    if (failures === 0 && failed === 0) return this.finish('completed', 'teardown_completed', 'coverage');
    const first = await this.prisma.fabricJob.findUniqueOrThrow({ where: { id: this.job.id } });
    return this.failJob(`teardown failed on ${first.firstFailNode}: ${first.firstFailError}`, 'degraded');
  }
}

function mergeSignals(a: AbortSignal, b: AbortSignal): AbortSignal {
  return AbortSignal.any([a, b]);
}

/**
 * The neighbours a node must see Established: its route reflector (the switch, or the gateway's
 * BGP source); on the software reflector itself only the switch, when it peers with one (its
 * clients arrive through the listen range and are not known in advance).
 */
export function expectedNeighbours(intent: FabricIntent, node: FabricNodeIntent, gateway: FabricNodeIntent | undefined): string[] {
  const source = (n: FabricNodeIntent) => (intent.underlay === 'bgp' ? n.underlayIp : n.vtepIp);
  if (intent.externalRouteReflector) return intent.switch.peeringIp ? [intent.switch.peeringIp] : [];
  if (node.isGateway) return intent.switch.peeringIp ? [intent.switch.peeringIp] : [];
  return gateway ? [source(gateway)] : [];
}

/**
 * The rollout status the nodes' latest results add up to: ready when every compute node's latest
 * fabric result is an applied node, degraded when some latest result is a failure, else pending
 * (some node was never rolled out, or was torn down).
 */
export async function coverageStatus(tx: Tx): Promise<RolloutStatus> {
  const nodes = await listComputeNodes(tx);
  if (nodes.length === 0) return 'ready';
  const rows = await tx.$queryRawUnsafe<{ node_id: string; job_type: string; ok: boolean; rolled_back: boolean; finished: boolean }[]>(
    `SELECT DISTINCT ON (n.node_id) n.node_id, j.job_type, n.ok, n.rolled_back, n.finished
       FROM fabric_job_node n JOIN fabric_job j ON j.id = n.job_id
      WHERE n.node_id = ANY($1::text[]) AND n.finished
      ORDER BY n.node_id, n.created_at DESC, j.created_at DESC`, nodes.map((n) => n.nodeId));
  const latest = new Map(rows.map((r) => [r.node_id, r]));
  let pending = false;
  for (const node of nodes) {
    const r = latest.get(node.nodeId);
    if (!r || r.rolled_back || r.job_type !== 'fabric_apply') pending = true;
    else if (!r.ok) return 'degraded';
  }
  return pending ? 'pending' : 'ready';
}

/** How often a running job's worker says it is alive, and when silence means it is gone. */
export const HEARTBEAT_MS = 10_000;
export const HEARTBEAT_STALE_MS = 60_000;

/** Thrown (so pg-boss retries later) when another worker is visibly running the job. */
export class JobBusy extends Error {
  override readonly name = 'JobBusy';
}

/**
 * Claims the running job for this worker: only when no other worker's heartbeat is fresh. A job
 * outliving its pg-boss expiry is delivered again while the first worker still runs it; the
 * heartbeat keeps the two from driving the same nodes at once.
 */
async function claim(prisma: PrismaClient, jobId: string): Promise<boolean> {
  const claimed = await prisma.$executeRawUnsafe(
    `UPDATE fabric_job SET runner_heartbeat_at = now()
      WHERE id = $1::uuid AND job_status = 'running'
        AND (runner_heartbeat_at IS NULL OR runner_heartbeat_at < now() - $2 * interval '1 millisecond')`, jobId, HEARTBEAT_STALE_MS);
  return claimed === 1;
}

/** The fabric.rollout handler: one job at a time, from its rows. */
export async function runFabricJob(deps: RolloutDeps, jobId: string): Promise<void> {
  const job = await deps.prisma.fabricJob.findUnique({ where: { id: jobId }, include: { nodes: true } });
  if (!job || job.jobStatus !== 'running') return;
  if (!(await claim(deps.prisma, jobId))) {
    const now = await deps.prisma.fabricJob.findUnique({ where: { id: jobId }, select: { jobStatus: true } });
    if (now?.jobStatus !== 'running') return;
    throw new JobBusy(`fabric job ${jobId} is being run by another worker (its heartbeat is fresh): retry later`);
  }
  const beat = setInterval(() => {
    void deps.prisma.fabricJob.updateMany({ where: { id: jobId, jobStatus: 'running' }, data: { runnerHeartbeatAt: new Date() } }).catch(() => undefined);
  }, HEARTBEAT_MS);
  try {
    const runner = new JobRunner(deps, job, job.nodes);
    if (job.jobType === 'fabric_apply') await runner.apply();
    else await runner.teardown();
  } finally {
    clearInterval(beat);
  }
}

/** fabric.rollout.lost: the worker died on every attempt; the job must not stay running forever. */
export async function failLostJob(deps: Pick<RolloutDeps, 'prisma'>, jobId: string): Promise<void> {
  await deps.prisma.$transaction(async (tx) => {
    const job = await tx.fabricJob.findUnique({ where: { id: jobId } });
    if (!job || job.jobStatus !== 'running') return;
    // A live worker still runs it (a redelivery exhausted its retries meanwhile): not lost.
    if (job.runnerHeartbeatAt && Date.now() - job.runnerHeartbeatAt.getTime() < HEARTBEAT_STALE_MS) {
      throw new JobBusy(`fabric job ${jobId} still has a live worker: not failing it`);
    }
    const state = job.jobType === 'fabric_apply' ? 'apply_failed' : 'teardown_failed';
    const error = 'the rollout worker was lost on every attempt (pg-boss retries ran out); nodes may be half-applied: re-run apply or tear them down';
    await tx.fabricJob.update({ where: { id: jobId }, data: { jobStatus: 'failed', state, error, progress: 100, finishedAt: now(), updatedAt: now() } });
    await setRolloutStatus(tx, 'failed');
    await publishJobEvent(tx, { jobId, jobType: job.jobType as FabricJobType, state, progress: 100, job_status: 'failed', error });
  });
}

