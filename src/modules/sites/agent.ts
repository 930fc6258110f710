import { builder } from '../../graphql/builder';
import { newId } from '../../ids';
import { decide } from '../../auth/decide';
import { requirePrincipal, type Context } from '../../context';
import { generateToken, hashToken } from '../../auth/tokens';
import { AppError, notFound } from '../../errors';
import { checkName } from '../tenancy/validate';
import { siteResource } from '../tenancy/resources';
import type { Principal } from '../../auth/permissions';
import { checkSightings, proposeCandidates } from '../metal/discovery';

/** An agent serves its site while its last heartbeat is at most AGENT_HEARTBEAT_MS old. */
export async function siteIsServed(ctx: Context, siteId: string): Promise<boolean> {
  const since = new Date(Date.now() - ctx.config.agentHeartbeatMs);
  return (await ctx.prisma.siteAgent.count({ where: { siteId, lastHeartbeatAt: { gte: since } } })) > 0;
}

/** The agent behind the calling token, or PERMISSION_DENIED for any other token. */
async function callingAgent(ctx: Context, principal: Principal) {
  const agent = await ctx.prisma.siteAgent.findUnique({ where: { tokenId: principal.tokenId } });
  if (!agent || !principal.grants.some((g) => g.permission === 'site:agent' && g.scopeId === agent.siteId)) {
    throw new AppError('PERMISSION_DENIED', 'only a site agent\'s own token can do this');
  }
  return agent;
}

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
    resolve: async (_root, args, ctx) => {
      const principal = requirePrincipal(ctx);
      const site = await ctx.prisma.site.findUnique({ where: { id: args.siteId } });
      if (!site) throw notFound('site', args.siteId);
      decide(principal, 'admin', siteResource(site));
      const name = checkName('name', args.name);
      if (await ctx.prisma.siteAgent.findUnique({ where: { siteId_name: { siteId: site.id, name } } })) {
        throw new AppError('CONFLICT', `site ${site.id} already has an agent named "${name}"`, { field: 'name' });
      }
      const token = generateToken();
      const tokenId = newId('ApiToken');
      const agentId = newId('SiteAgent');
      await ctx.prisma.$transaction(async (tx) => {
        await tx.apiToken.create({
          data: {
            id: tokenId, tenantId: site.tenantId, name: `agent ${name}`, hash: hashToken(token), createdBy: principal.tokenId,
            grants: { create: [{ id: newId('ApiGrant'), permission: 'site:agent', scopeType: 'site', scopeId: site.id, siteId: site.id }] },
          },
        });
        await tx.siteAgent.create({ data: { id: agentId, tenantId: site.tenantId, siteId: site.id, name, tokenId } });
      });
      return { agentId, token };
    },
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
      const agent = await callingAgent(ctx, requirePrincipal(ctx));
      const machines = args.machines ? checkSightings(args.machines) : null;
      await ctx.prisma.$transaction(async (tx) => {
        await tx.siteAgent.update({ where: { id: agent.id }, data: { lastHeartbeatAt: new Date() } });
        if (!machines) return;
        await tx.sighting.deleteMany({ where: { agentId: agent.id } });
        await tx.sighting.createMany({
          data: machines.map((m) => ({
            agentId: agent.id, siteId: agent.siteId, tenantId: agent.tenantId, mac: m.mac, productUuid: m.productUuid ?? null,
            arch: m.arch ?? null, firstSeen: m.firstSeen, lastSeen: m.lastSeen, requestCount: m.requestCount, relays: m.relays ?? [],
          })),
        });
        await proposeCandidates(tx, agent.siteId, ctx.requestId);
      });
      return ctx.prisma.siteAgent.findUniqueOrThrow({ ...query, where: { id: agent.id } });
    },
  }),
);

builder.mutationField('claimCommands', (t) =>
  t.prismaField({
    type: ['Command'],
    description: 'Claims up to `max` queued, unexpired commands of the agent\'s site, oldest first (its own token only).',
    args: { max: t.arg.int({ required: false, defaultValue: 10 }) },
    resolve: async (query, _root, args, ctx) => {
      const agent = await callingAgent(ctx, requirePrincipal(ctx));
      const max = Math.min(Math.max(args.max ?? 10, 1), 100);
      await ctx.prisma.command.updateMany({ where: { siteId: agent.siteId, status: 'queued', expiresAt: { lte: new Date() } }, data: { status: 'expired' } });
      // SKIP LOCKED: two agents of one site never claim the same command.
      const claimed = await ctx.prisma.$queryRawUnsafe<{ id: string }[]>(
        `UPDATE command SET status = 'claimed', claimed_by = $1, claimed_at = now(), updated_at = now()
         WHERE id IN (SELECT id FROM command WHERE site_id = $2 AND status = 'queued' AND expires_at > now()
                      ORDER BY created_at LIMIT $3 FOR UPDATE SKIP LOCKED)
         RETURNING id`,
        agent.id, agent.siteId, max,
      );
      return ctx.prisma.command.findMany({ ...query, where: { id: { in: claimed.map((c) => c.id) } }, orderBy: { createdAt: 'asc' } });
    },
  }),
);

builder.mutationField('reportCommandResult', (t) =>
  t.prismaField({
    type: 'Command',
    description: 'Reports how a claimed command ended (its claiming agent only).',
    args: { commandId: t.arg.id({ required: true }), ok: t.arg.boolean({ required: true }), message: t.arg.string({ required: false }) },
    resolve: async (query, _root, args, ctx) => {
      const agent = await callingAgent(ctx, requirePrincipal(ctx));
      const updated = await ctx.prisma.command.updateMany({
        where: { id: args.commandId, claimedBy: agent.id, status: 'claimed' },
        data: { status: args.ok ? 'succeeded' : 'failed', result: { ok: args.ok, message: args.message ?? null } },
      });
      if (updated.count !== 1) throw new AppError('CONFLICT', `command ${args.commandId} is not claimed by this agent`);
      return ctx.prisma.command.findUniqueOrThrow({ ...query, where: { id: args.commandId } });
    },
  }),
);
