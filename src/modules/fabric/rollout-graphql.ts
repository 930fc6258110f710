import { builder } from '../../graphql/builder';
import { requirePrincipal } from '../../context';
import { decide } from '../../auth/decide';
import { AppError } from '../../errors';
import { openStream } from '../../events/graphql';
import { isStreamEnd, type StreamEvent, type StreamItem } from '../../events/hub';
import {
  getJob, getLatestJob, isUuid, loadJobView, requestApply, requestCancel, requestTeardown,
  type ApplyResult, type CancelResult, type FabricJobNodeView, type FabricJobView, type StepRecord, type TeardownResult,
} from './rollout';
import { batchPostdeploy, nodePostdeploy, type BatchPostdeploy, type NodeChecklist, type PostdeployStep } from './postdeploy';

const FabricStepRef = builder.objectRef<StepRecord>('FabricNodeStep').implement({
  description: 'One named step a fabric job ran on a node.',
  fields: (t) => ({
    step: t.exposeString('step', { description: 'connect, install_frr, divert_config, vtep_interface, write_config, mtu_sync, restart_frr, verify_bgp; teardown: connect, stop_frr, restore_config, remove_vtep, restore_mtu, release_vtep' }),
    phase: t.exposeString('phase', { description: 'apply | teardown (a strict rollback or a cancel runs teardown steps inside an apply job)' }),
    status: t.exposeString('status', { description: 'running | ok | failed | skipped' }),
    message: t.exposeString('message'),
    startedAt: t.exposeString('startedAt'),
    finishedAt: t.exposeString('finishedAt', { nullable: true }),
  }),
});

const FabricJobNodeRef = builder.objectRef<FabricJobNodeView>('FabricJobNode').implement({
  description: 'One node of a fabric job: its outcome and steps.',
  fields: (t) => ({
    nodeId: t.exposeID('nodeId'),
    nodeIp: t.exposeString('nodeIp'),
    fqdn: t.exposeString('fqdn'),
    vtepIp: t.exposeString('vtepIp'),
    finished: t.exposeBoolean('finished'),
    ok: t.exposeBoolean('ok'),
    reachable: t.exposeBoolean('reachable', { description: 'false = the SSH dial failed before any step ran' }),
    rolledBack: t.exposeBoolean('rolledBack', { description: 'a strict rollback or a cancel put this node back to baseline' }),
    error: t.exposeString('error'),
    steps: t.field({ type: [FabricStepRef], resolve: (n) => n.steps }),
  }),
});

export const FabricJobRef = builder.objectRef<FabricJobView>('FabricJob').implement({
  description: 'A fabric apply or teardown job (seed: GET /controlnode/fabric-config/latest).',
  fields: (t) => ({
    jobId: t.exposeID('jobId'),
    jobType: t.exposeString('jobType', { description: 'fabric_apply | fabric_teardown' }),
    scope: t.exposeString('scope', { description: 'all | node' }),
    targetNodeIp: t.exposeString('targetNodeIp', { nullable: true }),
    strict: t.exposeBoolean('strict'),
    jobStatus: t.exposeString('jobStatus', { description: 'running | completed | failed | partial (a cancelled apply is failed with state apply_cancelled)' }),
    state: t.exposeString('state', { description: 'the last event state: apply_* / teardown_* / node_*' }),
    progress: t.exposeInt('progress', { description: '0..100' }),
    totalNodes: t.exposeInt('totalNodes'),
    completedNodes: t.exposeInt('completedNodes'),
    failedNodes: t.exposeInt('failedNodes'),
    firstFailNode: t.exposeString('firstFailNode'),
    firstFailError: t.exposeString('firstFailError', { description: 'the first per-node failure verbatim, e.g. "BGP neighbor 172.30.10.254 not Established"' }),
    error: t.exposeString('error'),
    fabricId: t.exposeString('fabricId'),
    cancelRequestedAt: t.expose('cancelRequestedAt', { type: 'DateTime', nullable: true }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
    updatedAt: t.expose('updatedAt', { type: 'DateTime' }),
    finishedAt: t.expose('finishedAt', { type: 'DateTime', nullable: true }),
    nodes: t.field({ type: [FabricJobNodeRef], resolve: (j) => j.nodes }),
  }),
});

const ApplyPayload = builder.objectRef<ApplyResult>('FabricApplyPayload').implement({
  fields: (t) => ({
    applyJobId: t.exposeID('applyJobId'),
    created: t.exposeBoolean('created', { description: 'true: a new job; false: the identical request already running' }),
    id: t.exposeInt('id', { description: 'the fabric config id' }),
    message: t.exposeString('message'),
    job: t.field({ type: FabricJobRef, resolve: (r) => r.job }),
  }),
});

const TeardownPayload = builder.objectRef<TeardownResult>('FabricTeardownPayload').implement({
  fields: (t) => ({
    jobId: t.exposeID('jobId'),
    removed: t.exposeBoolean('removed', { description: 'whether the node had fabric state to remove' }),
    steps: t.exposeStringList('steps', { description: 'the teardown steps the job runs, in order' }),
    message: t.exposeString('message'),
    job: t.field({ type: FabricJobRef, resolve: (r) => r.job }),
  }),
});

const CancelPayload = builder.objectRef<CancelResult>('FabricCancelPayload').implement({
  fields: (t) => ({
    jobId: t.exposeID('jobId'),
    state: t.exposeString('state'),
    message: t.exposeString('message'),
  }),
});

const PostdeployStepRef = builder.objectRef<PostdeployStep>('FabricPostdeployStep').implement({
  description: 'One fabric step of a node\'s post-deploy checklist.',
  fields: (t) => ({
    stepId: t.exposeString('stepId'),
    step: t.exposeString('step'),
    nodeIp: t.exposeString('nodeIp'),
    bmcIp: t.exposeString('bmcIp', { description: 'the node\'s BMC address: the batch surface keys by it' }),
    batchId: t.exposeString('batchId'),
    jobId: t.exposeString('jobId'),
    status: t.exposeString('status', { description: 'pending | running | completed | failed | skipped' }),
    progress: t.exposeInt('progress'),
    message: t.exposeString('message'),
    createdAt: t.expose('createdAt', { type: 'DateTime', description: 'When the step started; for a step not reached yet, when its checklist was made (the latest apply, or the node joining the fabric)' }),
    updatedAt: t.expose('updatedAt', { type: 'DateTime', description: 'When the step last changed; for a step not reached yet, as createdAt' }),
  }),
});

const NodeChecklistRef = builder.objectRef<NodeChecklist>('FabricNodeChecklist').implement({
  fields: (t) => ({
    nodeId: t.exposeID('nodeId'),
    nodeIp: t.exposeString('nodeIp', { description: 'empty when the node is not a compute node' }),
    bmcIp: t.exposeString('bmcIp'),
    steps: t.field({ type: [PostdeployStepRef], resolve: (n) => n.steps }),
  }),
});

const BatchPostdeployRef = builder.objectRef<BatchPostdeploy>('FabricBatchPostdeploy').implement({
  fields: (t) => ({
    batchId: t.exposeID('batchId'),
    nodes: t.field({ type: [NodeChecklistRef], resolve: (b) => b.nodes }),
  }),
});

builder.queryField('fabricLatestJob', (t) =>
  t.field({
    type: FabricJobRef,
    nullable: true,
    description: 'The newest fabric apply or teardown job, null when there is none. Needs a platform-scoped grant.',
    resolve: (_root, _args, ctx) => getLatestJob(ctx),
  }),
);

builder.queryField('fabricJob', (t) =>
  t.field({
    type: FabricJobRef,
    description: 'A fabric job with its nodes; NOT_FOUND for an unknown id.',
    args: { jobId: t.arg.id({ required: true }) },
    resolve: (_root, { jobId }, ctx) => getJob(ctx, String(jobId)),
  }),
);

builder.queryField('fabricNodePostdeploy', (t) =>
  t.field({
    type: [PostdeployStepRef],
    description: 'The post-deploy checklist of one compute node (its fabric steps); NOT_FOUND when the address is not a compute node.',
    args: { nodeIp: t.arg.string({ required: true }) },
    resolve: (_root, { nodeIp }, ctx) => nodePostdeploy(ctx, nodeIp),
  }),
);

builder.queryField('fabricBatchPostdeploy', (t) =>
  t.field({
    type: BatchPostdeployRef,
    description: 'The post-deploy checklists of a provisioning batch\'s nodes; NOT_FOUND for an unknown batch.',
    args: { batchId: t.arg.id({ required: true }) },
    resolve: (_root, { batchId }, ctx) => batchPostdeploy(ctx, String(batchId)),
  }),
);

builder.mutationField('applyFabric', (t) =>
  t.field({
    type: ApplyPayload,
    description: 'Rolls the fabric out to every compute node (a queued job; follow it with fabricRollout). strict: on the first node failure every touched node goes back to baseline. INVALID_STATE without a fabric config, or with no compute node to roll out to. Needs fabric:admin (platform admin holds it).',
    args: { strict: t.arg.boolean({ required: false }) },
    resolve: (_root, { strict }, ctx) => requestApply(ctx, { strict }),
  }),
);

builder.mutationField('applyFabricNode', (t) =>
  t.field({
    type: ApplyPayload,
    description: 'Rolls the fabric out to one compute node, by OS address. Needs fabric:admin (platform admin holds it).',
    args: { nodeIp: t.arg.string({ required: true }), strict: t.arg.boolean({ required: false }) },
    resolve: (_root, { nodeIp, strict }, ctx) => requestApply(ctx, { nodeIp, strict }),
  }),
);

builder.mutationField('teardownFabricNode', (t) =>
  t.field({
    type: TeardownPayload,
    description: 'Tears EVPN/FRR down on one compute node back to its baseline (a queued job). Needs fabric:admin (platform admin holds it).',
    args: { nodeIp: t.arg.string({ required: true }) },
    resolve: (_root, { nodeIp }, ctx) => requestTeardown(ctx, nodeIp),
  }),
);

builder.mutationField('cancelFabricApply', (t) =>
  t.field({
    type: CancelPayload,
    description: 'Cancels the in-flight fabric apply: asynchronous (apply_cancelling, then apply_cancelled once every touched node is back to baseline), idempotent. NOT_FOUND when the id is not the in-flight apply.',
    args: { jobId: t.arg.id({ required: true }) },
    resolve: (_root, { jobId }, ctx) => requestCancel(ctx, String(jobId)),
  }),
);

/** One event of a fabric job, with the payload's common fields lifted out. */
interface RolloutEvent {
  cursor: string;
  type: string;
  payload: Record<string, unknown>;
  createdAt: Date;
}

const str = (v: unknown): string => (typeof v === 'string' ? v : '');

const FabricRolloutEventRef = builder.objectRef<RolloutEvent>('FabricRolloutEvent').implement({
  description: 'A state change of a fabric job (the same event the REST SSE channel `fabric` streams as fabric_switch).',
  fields: (t) => ({
    cursor: t.exposeString('cursor'),
    type: t.exposeString('type', { description: 'fabric.<state>' }),
    jobId: t.id({ resolve: (e) => str(e.payload.job_id) }),
    state: t.string({ resolve: (e) => str(e.payload.state) }),
    progress: t.int({ resolve: (e) => (typeof e.payload.progress === 'number' ? e.payload.progress : 0) }),
    nodeIp: t.string({ resolve: (e) => str(e.payload.node_ip) }),
    fqdn: t.string({ resolve: (e) => str(e.payload.fqdn) }),
    payload: t.expose('payload', { type: 'JSON' }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
  }),
});

builder.subscriptionField('fabricRollout', (t) =>
  t.field({
    type: FabricRolloutEventRef,
    description: 'The events of one fabric job: from `after` (a cursor), else from its first retained event, then live. NOT_FOUND for an unknown job. Needs a platform-scoped grant.',
    args: { jobId: t.arg.id({ required: true }), after: t.arg.string({ required: false }) },
    subscribe: async (_root, args, ctx) => {
      decide(requirePrincipal(ctx), 'read', { type: 'platform' });
      const jobId = String(args.jobId);
      if (!isUuid(jobId) || !(await loadJobView(ctx.prisma, jobId))) throw new AppError('NOT_FOUND', 'fabric job not found');
      return openStream(ctx, { subject: jobId, typePrefixes: ['fabric.'] }, args.after, args.after == null);
    },
    resolve: (item: StreamItem): RolloutEvent => {
      if (isStreamEnd(item)) throw item.error;
      const e: StreamEvent = item;
      return { cursor: e.cursor, type: e.type, payload: e.payload, createdAt: e.createdAt };
    },
  }),
);
