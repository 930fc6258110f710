import { builder } from '../graphql/builder';
import { requirePrincipal, type Context } from '../context';
import { AppError, notFound } from '../errors';
import { decide } from '../auth/decide';
import { nodeResource, poolResource, siteResource } from '../modules/tenancy/resources';
import { isStreamEnd, type EventFilter, type StreamEvent, type StreamItem } from './hub';

const EventRef = builder.objectRef<StreamEvent>('Event').implement({
  description: 'A committed change, as the outbox recorded it. `cursor` grows with every event; pass the last one you received as `after` to resume.',
  fields: (t) => ({
    cursor: t.exposeString('cursor'),
    type: t.exposeString('type', { description: 'e.g. node.enrolled, node.provision.retiring, node.provision.failed, node.pxe-mac.discovered' }),
    tenantId: t.exposeID('tenantId', { nullable: true }),
    siteId: t.exposeID('siteId', { nullable: true }),
    poolId: t.exposeID('poolId', { nullable: true }),
    nodeId: t.exposeID('nodeId', { nullable: true }),
    subject: t.exposeString('subject', { description: 'What the event is about: a node, a workflow run, a job.' }),
    payload: t.expose('payload', { type: 'JSON' }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
  }),
});

const EventFilterInput = builder.inputType('EventFilter', {
  fields: (t) => ({
    types: t.stringList({ required: false, description: 'Only these event types.' }),
    siteId: t.id({ required: false }),
    poolId: t.id({ required: false }),
    nodeId: t.id({ required: false }),
  }),
});

/** Decides read on the filter's own site/pool/node, so another tenant's id is NOT_FOUND at once. */
async function checkFilter(ctx: Context, filter: EventFilter): Promise<void> {
  const principal = requirePrincipal(ctx);
  if (filter.nodeId) {
    const node = await ctx.prisma.node.findUnique({ where: { id: filter.nodeId }, select: { id: true, tenantId: true, siteId: true, poolId: true } });
    if (!node) throw notFound('node', filter.nodeId);
    decide(principal, 'read', nodeResource(node));
  }
  if (filter.poolId) {
    const pool = await ctx.prisma.pool.findUnique({ where: { id: filter.poolId } });
    if (!pool) throw notFound('pool', filter.poolId);
    decide(principal, 'read', poolResource(pool));
  }
  if (filter.siteId) {
    const site = await ctx.prisma.site.findUnique({ where: { id: filter.siteId } });
    if (!site) throw notFound('site', filter.siteId);
    decide(principal, 'read', siteResource(site));
  }
}

/** Opens the stream for a subscription field: authenticated, with its token, on this process's hub. */
export async function openStream(
  ctx: Context,
  filter: EventFilter,
  after: string | null | undefined,
  fromOldest = false,
): Promise<AsyncIterableIterator<StreamItem>> {
  const principal = requirePrincipal(ctx);
  if (!ctx.events || !ctx.token) throw new AppError('INVALID_CONFIG', 'this process serves no event streams (ROLE=worker)');
  return ctx.events.subscribe({ principal, token: ctx.token, filter, after, fromOldest, backlog: ctx.transport?.backlog });
}

/**
 * `first`, then the stream's items. Hand-written rather than an async generator: a generator's
 * return() waits for the pending next() (a quiet node's next event) and never reaches the stream
 * when it had not started, so a closed subscription would stay registered on the hub.
 */
function prepend<T>(first: T, stream: AsyncIterableIterator<T>): AsyncIterableIterator<T> {
  let sentFirst = false;
  const iterator: AsyncIterableIterator<T> = {
    next: () => {
      if (sentFirst) return stream.next();
      sentFirst = true;
      return Promise.resolve({ value: first, done: false });
    },
    return: async () => {
      await stream.return?.();
      return { value: undefined, done: true };
    },
    [Symbol.asyncIterator]: () => iterator,
  };
  return iterator;
}

/** A stream's last item is the reason the server closed it: raise it as the subscription's error. */
const unwrap = (item: StreamItem): StreamEvent => {
  if (isStreamEnd(item)) throw item.error;
  return item;
};

builder.subscriptionType({
  description: 'Live streams over graphql-ws (WebSocket at /graphql) or GraphQL over SSE (Accept: text/event-stream).',
});

builder.subscriptionField('events', (t) =>
  t.field({
    type: EventRef,
    description:
      'Every event the token may read that matches the filter: first the ones after `after` (a cursor), then live, with no gap and no duplicate. ' +
      'A cursor older than the retention is INVALID_INPUT. A subscriber that falls too far behind is closed with ABORTED and details.lastCursor ' +
      '(details.reason slow-consumer); so is every subscription when the server stops (details.reason server-stopping: subscribe again with after: details.lastCursor).',
    args: { filter: t.arg({ type: EventFilterInput, required: false }), after: t.arg.string({ required: false }) },
    subscribe: async (_root, args, ctx) => {
      const filter: EventFilter = { types: args.filter?.types, siteId: args.filter?.siteId, poolId: args.filter?.poolId, nodeId: args.filter?.nodeId };
      await checkFilter(ctx, filter);
      return openStream(ctx, filter, args.after);
    },
    resolve: (item: StreamItem) => unwrap(item),
  }),
);

builder.subscriptionField('nodeUpdated', (t) =>
  t.prismaField({
    type: 'Node',
    description: 'The node\'s metal view now, then again after every change to it.',
    args: { id: t.arg.id({ required: true }) },
    subscribe: async (_root, args, ctx) => {
      await checkFilter(ctx, { nodeId: args.id });
      // The current view first (null: "read it now"), then one per change.
      return prepend<StreamItem | null>(null, await openStream(ctx, { nodeId: args.id }, null));
    },
    resolve: (query, item: StreamItem | null, args, ctx) => {
      if (item) unwrap(item);
      return ctx.prisma.node.findUniqueOrThrow({ ...query, where: { id: args.id } });
    },
  }),
);

builder.subscriptionField('workflowProgress', (t) =>
  t.field({
    type: EventRef,
    description: 'The events of one workflow run (its subject, or events that name it as workflowId): from `after`, else from the oldest retained, then live.',
    args: { runId: t.arg.id({ required: true }), after: t.arg.string({ required: false }) },
    subscribe: async (_root, args, ctx) => {
      const principal = requirePrincipal(ctx);
      const run = await ctx.prisma.workflowRun.findUnique({ where: { id: args.runId } });
      const node = run ? await ctx.prisma.node.findUnique({ where: { id: run.nodeId }, select: { id: true, tenantId: true, siteId: true, poolId: true } }) : null;
      if (!run || !node) throw notFound('workflow run', args.runId);
      decide(principal, 'read', nodeResource(node), { type: 'WorkflowRun', id: args.runId });
      // A run's events are its node's: the node filter keeps the replay on the (node_id, seq) index.
      return openStream(ctx, { nodeId: node.id, workflowId: run.id }, args.after, args.after == null);
    },
    resolve: (item: StreamItem) => unwrap(item),
  }),
);

builder.subscriptionField('jobProgress', (t) =>
  t.field({
    type: EventRef,
    description: 'The events whose subject is this job (fabric apply/teardown, provisioning): from `after`, else from the oldest retained, then live. What a UI uses after a page refresh.',
    args: { jobId: t.arg.id({ required: true }), after: t.arg.string({ required: false }) },
    subscribe: (_root, args, ctx) => openStream(ctx, { subject: args.jobId }, args.after, args.after == null),
    resolve: (item: StreamItem) => unwrap(item),
  }),
);
