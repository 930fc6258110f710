import { builder } from '../../graphql/builder';
import { power, POWER_ACTIONS, POWER_REFUSED_STATES, type PowerAction } from './power';

/** The power verb's GraphQL face; the rules are power.ts's. */

const PowerActionEnum = builder.enumType('PowerAction', {
  values: Object.fromEntries(POWER_ACTIONS.map((a) => [a.replace('-', '_'), { value: a }])) as Record<string, { value: PowerAction }>,
});

const PowerPayload = builder.objectRef<{ nodeId: string; commandId: string }>('MetalPowerPayload').implement({
  fields: (t) => ({
    commandId: t.exposeID('commandId'),
    node: t.prismaField({ type: 'Node', resolve: (query, p, _a, ctx) => ctx.prisma.node.findUniqueOrThrow({ ...query, where: { id: p.nodeId } }) }),
  }),
});

const PowerInput = builder.inputType('MetalPowerInput', {
  fields: (t) => ({ nodeId: t.id({ required: true }), action: t.field({ type: PowerActionEnum, required: true }) }),
});

builder.mutationField('powerNode', (t) =>
  t.field({
    type: PowerPayload,
    description: `Queues a bmc.power command to the site agent of the node's site (expires in 5 minutes); a retry with the same X-Request-Id returns the same command. INVALID_STATE in ${POWER_REFUSED_STATES.join(', ')}, without BMC credentials, or when no site agent serves the site.`,
    args: { input: t.arg({ type: PowerInput, required: true }) },
    resolve: (_root, { input }, ctx) => power(ctx, input.nodeId, input.action),
  }),
);
