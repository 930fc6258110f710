import { builder } from '../../graphql/builder';
import { confirmMac, discovered, type DiscoveredMachine } from './discovery';

const DiscoveredMachineRef = builder.objectRef<DiscoveredMachine>('DiscoveredMachine').implement({
  description: 'A machine the site\'s agents saw PXE-booting from a MAC with no boot entry. The list alone binds nothing.',
  fields: (t) => ({
    mac: t.exposeString('mac'),
    productUuid: t.exposeString('productUuid', { nullable: true, description: 'As sent: SMBIOS stores the first three fields byte-swapped' }),
    arch: t.exposeString('arch', { nullable: true }),
    firstSeen: t.expose('firstSeen', { type: 'DateTime' }),
    lastSeen: t.expose('lastSeen', { type: 'DateTime' }),
    requestCount: t.exposeInt('requestCount', { description: 'Summed over agents' }),
    relays: t.exposeStringList('relays'),
    agentNodeIds: t.exposeIDList('agentNodeIds'),
    nodeId: t.exposeID('nodeId', { nullable: true, description: 'The enrolled machine with this MAC' }),
    candidateFor: t.exposeID('candidateFor', { nullable: true, description: 'The machine enrolled without MACs whose candidate this is' }),
  }),
});

builder.queryField('discovered', (t) =>
  t.field({
    type: [DiscoveredMachineRef],
    description: 'The site\'s PXE sightings of the last 24 hours, newest first. Decided as compute:sites:read on the site; only the owning tenant sees it.',
    args: { siteId: t.arg.id({ required: true }) },
    resolve: (_root, args, ctx) => discovered(ctx, args.siteId),
  }),
);

const ConfirmMacInput = builder.inputType('MetalConfirmMacInput', {
  fields: (t) => ({ nodeId: t.id({ required: true }), mac: t.string({ required: true }) }),
});

const ConfirmPayload = builder.objectRef<{ nodeId: string }>('MetalConfirmMacPayload').implement({
  fields: (t) => ({
    node: t.prismaField({ type: 'Node', resolve: (query, p, _a, ctx) => ctx.prisma.node.findUniqueOrThrow({ ...query, where: { id: p.nodeId } }) }),
  }),
});

builder.mutationField('confirmMac', (t) =>
  t.field({
    type: ConfirmPayload,
    description: 'Binds the PXE MAC of a machine enrolled without MACs. Publishes node.pxe-mac.confirmed with the MAC and whether it was the discovered candidate.',
    args: { input: t.arg({ type: ConfirmMacInput, required: true }) },
    resolve: async (_root, { input }, ctx) => ({ nodeId: await confirmMac(ctx, input.nodeId, input.mac) }),
  }),
);
