import { builder } from '../../graphql/builder';
import { claimCommands, registerSiteAgent, reportAgentStatus, reportCommandResult } from './agent';

/** The site agents' GraphQL face; the protocol's rules are agent.ts's. */

builder.prismaNode('SiteAgent', {
  id: { field: 'id' },
  nullable: true,
  fields: (t) => ({
    name: t.exposeString('name'),
    siteId: t.exposeID('siteId'),
    lastHeartbeatAt: t.expose('lastHeartbeatAt', { type: 'DateTime', nullable: true }),
    serving: t.boolean({
      description: 'Whether its last heartbeat is recent enough for it to serve its site.',
      resolve: (agent, _args, ctx) => agent.lastHeartbeatAt !== null && agent.lastHeartbeatAt.getTime() >= Date.now() - ctx.config.agentHeartbeatMs,
    }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
  }),
});

builder.prismaNode('Command', {
  id: { field: 'id' },
  nullable: true,
  fields: (t) => ({
    kind: t.exposeString('kind'),
    siteId: t.exposeID('siteId'),
    nodeId: t.exposeID('nodeId', { nullable: true }),
    params: t.expose('params', { type: 'JSON' }),
    status: t.exposeString('status'),
    expiresAt: t.expose('expiresAt', { type: 'DateTime' }),
    claimedAt: t.expose('claimedAt', { type: 'DateTime', nullable: true }),
    result: t.expose('result', { type: 'JSON', nullable: true }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
  }),
});

const RegisteredAgent = builder.objectRef<{ agentId: string; token: string }>('RegisteredSiteAgent').implement({
  fields: (t) => ({
    token: t.exposeString('token', { description: 'The agent\'s bearer token. Shown once.' }),
    agent: t.prismaField({ type: 'SiteAgent', resolve: (query, p, _a, ctx) => ctx.prisma.siteAgent.findUniqueOrThrow({ ...query, where: { id: p.agentId } }) }),
  }),
});

builder.mutationField('registerSiteAgent', (t) =>
  t.field({
    type: RegisteredAgent,
    description: 'Registers an agent for a site and returns its token (site:agent on the site). Needs admin on the site.',
    args: { siteId: t.arg.id({ required: true }), name: t.arg.string({ required: true }) },
    resolve: (_root, args, ctx) => registerSiteAgent(ctx, args.siteId, args.name),
  }),
);

const SightingInputRef = builder.inputType('SightingInput', {
  fields: (t) => ({
    mac: t.string({ required: true }),
    productUuid: t.string({ required: false, description: 'As the DHCP request carried it (SMBIOS byte order)' }),
    arch: t.string({ required: false }),
    firstSeen: t.field({ type: 'DateTime', required: true }),
    lastSeen: t.field({ type: 'DateTime', required: true }),
    requestCount: t.int({ required: true }),
    relays: t.stringList({ required: false }),
  }),
});

builder.mutationField('agentReportStatus', (t) =>
  t.prismaField({
    type: 'SiteAgent',
    description: 'A site agent\'s heartbeat (its own token only), with the machines it saw PXE-booting from a MAC with no boot entry: at most 256, replacing its previous list.',
    args: { machines: t.arg({ type: [SightingInputRef], required: false }) },
    resolve: async (query, _root, args, ctx) => {
      const id = await reportAgentStatus(ctx, args.machines);
      return ctx.prisma.siteAgent.findUniqueOrThrow({ ...query, where: { id } });
    },
  }),
);

builder.mutationField('claimCommands', (t) =>
  t.prismaField({
    type: ['Command'],
    description: 'Claims up to `max` queued, unexpired commands of the agent\'s site, oldest first (its own token only).',
    args: { max: t.arg.int({ required: false, defaultValue: 10 }) },
    resolve: async (query, _root, args, ctx) => {
      const ids = await claimCommands(ctx, args.max);
      return ctx.prisma.command.findMany({ ...query, where: { id: { in: ids } }, orderBy: { createdAt: 'asc' } });
    },
  }),
);

builder.mutationField('reportCommandResult', (t) =>
  t.prismaField({
    type: 'Command',
    description: 'Reports how a claimed command ended (its claiming agent only).',
    args: { commandId: t.arg.id({ required: true }), ok: t.arg.boolean({ required: true }), message: t.arg.string({ required: false }) },
    resolve: async (query, _root, args, ctx) => {
      await reportCommandResult(ctx, args.commandId, args.ok, args.message);
      return ctx.prisma.command.findUniqueOrThrow({ ...query, where: { id: args.commandId } });
    },
  }),
);
