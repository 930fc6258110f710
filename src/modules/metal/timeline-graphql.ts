import { builder } from '../../graphql/builder';
import { nodeTimeline, workflowRun, type TimelineRun, type TimelineStep } from './timeline';

const WorkflowStepRef = builder.objectRef<TimelineStep>('WorkflowStep').implement({
  description: 'One step of a workflow run, as the engine recorded it. A retry clears the previous failure\'s message.',
  fields: (t) => ({
    idx: t.exposeInt('idx'),
    name: t.exposeString('name', { description: 'Machine name, e.g. wipe-disks.' }),
    title: t.exposeString('title', { description: 'What an operator reads, e.g. "Securely erasing disks".' }),
    status: t.exposeString('status', { description: 'pending, running, waiting, succeeded, unverified (done, but a BMC action it sent cannot be proven on this BMC: the message says why, and the next wait is the proof), failed or skipped.' }),
    destructive: t.exposeBoolean('destructive'),
    cleanup: t.exposeBoolean('cleanup', { description: 'A cleanup the run ran on abort or failure.' }),
    attempts: t.exposeInt('attempts'),
    startedAt: t.expose('startedAt', { type: 'DateTime', nullable: true }),
    finishedAt: t.expose('finishedAt', { type: 'DateTime', nullable: true }),
    message: t.exposeString('message', { nullable: true, description: 'The last message: progress, a wait, or the failure.' }),
    errorCode: t.exposeString('errorCode', { nullable: true }),
  }),
});

const RunError = builder.objectRef<{ code: string; message: string }>('WorkflowRunError').implement({
  fields: (t) => ({ code: t.exposeString('code'), message: t.exposeString('message') }),
});

const WorkflowRunRef = builder.objectRef<TimelineRun>('WorkflowRun').implement({
  description: 'A run of a node\'s workflow (metal-enroll, metal-release, ...) with its steps: the node\'s timeline.',
  fields: (t) => ({
    id: t.exposeID('id'),
    nodeId: t.exposeID('nodeId'),
    kind: t.exposeString('kind'),
    status: t.exposeString('status', { description: 'queued, running, waiting, aborting, succeeded, failed, aborted or superseded.' }),
    params: t.expose('params', { type: 'JSON', description: 'The intent the run carries out (verb, wipe, profile version, batch).' }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
    startedAt: t.expose('startedAt', { type: 'DateTime', nullable: true }),
    finishedAt: t.expose('finishedAt', { type: 'DateTime', nullable: true }),
    waitingFor: t.exposeString('waitingFor', { nullable: true }),
    waitUntil: t.expose('waitUntil', { type: 'DateTime', nullable: true }),
    attempt: t.exposeInt('attempt'),
    resumes: t.exposeInt('resumes', { description: 'How many times the run was taken up again after its worker died.' }),
    lastError: t.field({ type: RunError, nullable: true, resolve: (r) => r.lastError }),
    steps: t.field({ type: [WorkflowStepRef], resolve: (r) => r.steps }),
  }),
});

builder.prismaObjectField('Node', 'timeline', (t) =>
  t.field({
    type: [WorkflowRunRef],
    description: 'The node\'s workflow runs, newest first, each with its steps. Never cached: steps change while a run runs.',
    args: { last: t.arg.int({ required: false, description: 'How many runs (default 10, at most 50).' }) },
    resolve: (node, args, ctx) => nodeTimeline(ctx, node.id, args.last),
  }),
);

builder.queryField('workflowRun', (t) =>
  t.field({
    type: WorkflowRunRef,
    description: 'One workflow run with its steps. Another tenant\'s run is NOT_FOUND.',
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, args, ctx) => workflowRun(ctx, args.id),
  }),
);
