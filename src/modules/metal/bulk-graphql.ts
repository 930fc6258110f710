import { builder } from '../../graphql/builder';
import { AppError, invalidInput } from '../../errors';
import { approveBatch, bulk, BULK_VERBS, type BulkResult, type BulkVerb, type Refusal } from './bulk';
import { WIPE_MODES, type WipeMode } from './verbs';

builder.prismaNode('CommandBatch', {
  id: { field: 'id' },
  nullable: true,
  fields: (t) => ({
    poolId: t.exposeID('poolId'),
    verb: t.exposeString('verb'),
    reason: t.exposeString('reason'),
    wipe: t.exposeString('wipe', { nullable: true }),
    nodeCount: t.int({ select: { nodeIds: true }, resolve: (b) => b.nodeIds.length }),
    digest: t.exposeString('digest', { description: 'sha256 (hex) that approvers sign with Ed25519' }),
    quorum: t.exposeInt('quorum'),
    approvals: t.expose('approvals', { type: 'JSON' }),
    status: t.exposeString('status', { description: 'awaiting-approval, approved, or recorded (no approver keys: audit only)' }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
    releasedAt: t.expose('releasedAt', {
      type: 'DateTime',
      nullable: true,
      description: 'When the batch was released: its nodes\' workflow runs started (each node still in the verb\'s target state with no newer run), soon after a recorded batch is created, after the approval that reaches the quorum otherwise; null until then',
    }),
  }),
});

const BulkVerbEnum = builder.enumType('BulkVerb', { values: BULK_VERBS });
const BulkWipe = builder.enumType('BulkWipeMode', {
  values: Object.fromEntries(WIPE_MODES.map((m) => [m.replace('-', '_'), { value: m }])) as Record<string, { value: WipeMode }>,
});

const BulkInput = builder.inputType('MetalBulkInput', {
  fields: (t) => ({
    poolId: t.id({ required: true }),
    verb: t.field({ type: BulkVerbEnum, required: true }),
    nodeIds: t.idList({ required: true }),
    reason: t.string({ required: false, description: 'Required when the verb sends destructive commands (recorded on the batch).' }),
    wipe: t.field({ type: BulkWipe, required: false, description: 'undeploy only' }),
  }),
});

const BulkPayload = builder.objectRef<BulkResult>('MetalBulkPayload').implement({
  fields: (t) => ({
    nodes: t.prismaField({
      type: ['Node'],
      description: 'The nodes\' views after the call, in the order given, as the statement that changed them returned them.',
      resolve: (_query, p) => p.rows,
    }),
    batch: t.prismaField({
      type: 'CommandBatch',
      nullable: true,
      resolve: (_query, p) => p.batch,
    }),
  }),
});

builder.mutationField('bulkNodes', (t) =>
  t.field({
    type: BulkPayload,
    description: 'Runs one lifecycle verb on 1 to 10,000 nodes of a pool as one batch, all or nothing. Decided as compute:nodes:provision on the pool, then per node.',
    args: { input: t.arg({ type: BulkInput, required: true }) },
    resolve: async (_root, { input }, ctx) => {
      namedDuplicate(input.nodeIds);
      try {
        return await bulk(ctx, { ...input, verb: input.verb as BulkVerb });
      } catch (error) {
        throw namedRefusals(error, input.nodeIds);
      }
    },
  }),
);

builder.mutationField('approveCommandBatch', (t) =>
  t.prismaField({
    type: 'CommandBatch',
    description: 'Adds an approval: an Ed25519 signature (base64) by one of the pool\'s approver keys over the batch digest.',
    args: { batchId: t.arg.id({ required: true }), keyId: t.arg.string({ required: true }), signature: t.arg.string({ required: true }) },
    resolve: async (query, _root, args, ctx) => {
      const id = await approveBatch(ctx, args.batchId, args.keyId, args.signature);
      return ctx.prisma.commandBatch.findUniqueOrThrow({ ...query, where: { id } });
    },
  }),
);

/** A node listed twice, named by the element that repeats it (`input.nodeIds[3]`). */
function namedDuplicate(ids: readonly string[]): void {
  const first = new Map<string, number>();
  ids.forEach((id, i) => {
    const earlier = first.get(id);
    if (earlier !== undefined) throw invalidInput(`input.nodeIds[${i}]`, `each node may be listed once; the same node is input.nodeIds[${earlier}]`);
    first.set(id, i);
  });
}

/**
 * Per-node refusals, each named by its element: `details.refused[k].field` is `input.nodeIds[i]`,
 * `details.field` and the message name the first.
 */
function namedRefusals(error: unknown, ids: readonly string[]): unknown {
  if (!(error instanceof AppError)) return error;
  const details = error.extensions.details as { refused?: Refusal[] } | undefined;
  if (!details?.refused?.length) return error;
  const index = new Map<string, number>();
  ids.forEach((id, i) => index.has(id) || index.set(id, i));
  const refused = details.refused.map((r) => ({ ...r, field: `input.nodeIds[${index.get(r.nodeId) ?? 0}]` }));
  const first = refused[0]!;
  const message = error.message.replace(/\(first: [^]*\)$/, `(first: ${first.field} ${first.nodeId}: ${first.message})`);
  return new AppError(error.code, message, { ...details, refused, field: first.field });
}
