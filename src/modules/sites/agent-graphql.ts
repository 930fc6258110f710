import { builder } from '../../graphql/builder';
import { claimCommands, commandCredentials, registerAgentKey, registerSiteAgent, reportAgentStatus, reportCommandResult, type CommandCredentials } from './agent';
import type { SealedBox } from './seal';

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
    hasPublicKey: t.boolean({ description: 'Whether it registered the public key its commands\' credentials are sealed to.', resolve: (agent) => agent.publicKey !== null }),
    keyRegisteredAt: t.expose('keyRegisteredAt', { type: 'DateTime', nullable: true }),
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
    status: t.exposeString('status', { description: 'queued, claimed, succeeded, unverified (sent and accepted by the BMC, but nothing it shows proves the effect: see result.unverified), failed or expired.' }),
    expiresAt: t.expose('expiresAt', { type: 'DateTime' }),
    claimedAt: t.expose('claimedAt', { type: 'DateTime', nullable: true }),
    leaseExpiresAt: t.expose('leaseExpiresAt', {
      type: 'DateTime', nullable: true,
      description: 'While claimed: the claim holds until then; the agent\'s heartbeat renews it. A lapsed claim of a destructive command fails as AGENT_LOST, of any other goes back to queued.',
    }),
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

builder.mutationField('registerAgentKey', (t) =>
  t.prismaField({
    type: 'SiteAgent',
    description: 'Registers (or replaces) the calling agent\'s X25519 public key, base64url of the raw 32 bytes (its own token only). Claimed commands\' credentials are sealed to it.',
    args: { publicKey: t.arg.string({ required: true }) },
    resolve: async (query, _root, args, ctx) => {
      const id = await registerAgentKey(ctx, args.publicKey);
      return ctx.prisma.siteAgent.findUniqueOrThrow({ ...query, where: { id } });
    },
  }),
);

const SealedCredentialsRef = builder.objectRef<SealedBox>('SealedCredentials').implement({
  description: 'JSON { username, password } sealed to the agent\'s key: ephemeral X25519 ECDH, HKDF-SHA256 (salt: ephemeral then agent public key), AES-256-GCM with associated data scheme NUL commandId NUL agentId NUL claimDeadline. Fields are base64url.',
  fields: (t) => ({
    scheme: t.exposeString('scheme'),
    epk: t.exposeString('epk', { description: 'The ephemeral public key (raw 32 bytes).' }),
    iv: t.exposeString('iv'),
    ciphertext: t.exposeString('ciphertext'),
    tag: t.exposeString('tag'),
  }),
});

const AgentBmcEndpointRef = builder.objectRef<CommandCredentials['endpoint']>('AgentBmcEndpoint').implement({
  fields: (t) => ({
    address: t.exposeString('address'),
    driver: t.exposeString('driver'),
    driverOptions: t.field({ type: 'JSON', resolve: (e) => e.driverOptions }),
    driverBindings: t.field({ type: 'JSON', resolve: (e) => e.driverBindings }),
  }),
});

const CommandCredentialsRef = builder.objectRef<CommandCredentials>('CommandCredentials').implement({
  fields: (t) => ({
    commandId: t.exposeID('commandId'),
    agentId: t.exposeID('agentId'),
    claimDeadline: t.exposeString('claimDeadline', { description: 'The claim\'s deadline exactly as bound into the seal (ISO 8601 with milliseconds).' }),
    kind: t.exposeString('kind'),
    params: t.field({ type: 'JSON', resolve: (c) => c.params }),
    nodeId: t.exposeID('nodeId'),
    endpoint: t.field({ type: AgentBmcEndpointRef, resolve: (c) => c.endpoint }),
    sealed: t.field({ type: SealedCredentialsRef, resolve: (c) => c.sealed }),
  }),
});

builder.mutationField('commandCredentials', (t) =>
  t.field({
    type: CommandCredentialsRef,
    description: 'The BMC endpoint and sealed credentials of a command the calling agent holds (its own site, while its claim holds). A mutation: read from the broker and sealed at each call, never cached.',
    args: { commandId: t.arg.id({ required: true }) },
    resolve: (_root, args, ctx) => commandCredentials(ctx, args.commandId),
  }),
);

const CommandResultInputRef = builder.inputType('CommandResultInput', {
  description: 'What a command ended with: { ok: true, value, notes, unverified } or { ok: false, code, message, retryable }.',
  fields: (t) => ({
    ok: t.boolean({ required: true }),
    value: t.field({ type: 'JSON', required: false, description: 'The driver\'s value: the power state read back (bmc.power, bmc.power-state), the out-of-band inventory (bmc.inventory).' }),
    notes: t.stringList({ required: false, description: 'For the step\'s timeline (at most 32, 1000 characters each).' }),
    unverified: t.string({ required: false, description: 'When ok is true: the action was sent and accepted but nothing the BMC shows proves its effect, and why. The command then ends unverified, not succeeded.' }),
    code: t.string({ required: false, description: 'When ok is false: a BmcErrorCode, AGENT_ERROR or AGENT_LOST.' }),
    message: t.string({ required: false }),
    retryable: t.boolean({ required: false }),
  }),
});

builder.mutationField('reportCommandResult', (t) =>
  t.prismaField({
    type: 'Command',
    description: 'Reports how a claimed command ended (its claiming agent only); wakes the workflow run that queued it.',
    args: { commandId: t.arg.id({ required: true }), result: t.arg({ type: CommandResultInputRef, required: true }) },
    resolve: async (query, _root, args, ctx) => {
      // An explicit null is an absent field: GraphQL clients send them for unset optionals.
      const result = Object.fromEntries(Object.entries(args.result).filter(([, v]) => v !== null && v !== undefined));
      await reportCommandResult(ctx, args.commandId, result);
      return ctx.prisma.command.findUniqueOrThrow({ ...query, where: { id: args.commandId } });
    },
  }),
);
