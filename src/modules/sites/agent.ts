import { newId } from '../../ids';
import { decide } from '../../auth/decide';
import { requirePrincipal, type Context } from '../../context';
import { generateToken, hashToken } from '../../auth/tokens';
import { AppError, notFound } from '../../errors';
import { checkName } from '../tenancy/validate';
import { siteResource } from '../tenancy/resources';
import type { Principal } from '../../auth/permissions';
import { checkSightings, proposeCandidates, type SightingInput } from '../metal/discovery';

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

/** Registers an agent for a site and returns its token, shown once (site:agent on the site). Needs admin on the site. */
export async function registerSiteAgent(ctx: Context, siteId: string, rawName: string): Promise<{ agentId: string; token: string }> {
  const principal = requirePrincipal(ctx);
  const site = await ctx.prisma.site.findUnique({ where: { id: siteId } });
  if (!site) throw notFound('site', siteId);
  decide(principal, 'admin', siteResource(site));
  const name = checkName('name', rawName);
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
}

/** A site agent's heartbeat (its own token only), with the machines it saw PXE-booting: at most 256, replacing its previous list. Returns the agent's id. */
export async function reportAgentStatus(ctx: Context, machines: SightingInput[] | null | undefined): Promise<string> {
  const agent = await callingAgent(ctx, requirePrincipal(ctx));
  const checked = machines ? checkSightings(machines) : null;
  await ctx.prisma.$transaction(async (tx) => {
    await tx.siteAgent.update({ where: { id: agent.id }, data: { lastHeartbeatAt: new Date() } });
    if (!checked) return;
    await tx.sighting.deleteMany({ where: { agentId: agent.id } });
    await tx.sighting.createMany({
      data: checked.map((m) => ({
        agentId: agent.id, siteId: agent.siteId, tenantId: agent.tenantId, mac: m.mac, productUuid: m.productUuid ?? null,
        arch: m.arch ?? null, firstSeen: m.firstSeen, lastSeen: m.lastSeen, requestCount: m.requestCount, relays: m.relays ?? [],
      })),
    });
    await proposeCandidates(tx, agent.siteId, ctx.requestId);
  });
  return agent.id;
}

/** Claims up to `max` queued, unexpired commands of the agent's site, oldest first (its own token only). Returns their ids. */
export async function claimCommands(ctx: Context, max: number | null | undefined): Promise<string[]> {
  const agent = await callingAgent(ctx, requirePrincipal(ctx));
  const limit = Math.min(Math.max(max ?? 10, 1), 100);
  await ctx.prisma.command.updateMany({ where: { siteId: agent.siteId, status: 'queued', expiresAt: { lte: new Date() } }, data: { status: 'expired' } });
  // SKIP LOCKED: two agents of one site never claim the same command.
  const claimed = await ctx.prisma.$queryRawUnsafe<{ id: string }[]>(
    `UPDATE command SET status = 'claimed', claimed_by = $1, claimed_at = now(), updated_at = now()
     WHERE id IN (SELECT id FROM command WHERE site_id = $2 AND status = 'queued' AND expires_at > now()
                  ORDER BY created_at LIMIT $3 FOR UPDATE SKIP LOCKED)
     RETURNING id`,
    agent.id, agent.siteId, limit,
  );
  return claimed.map((c) => c.id);
}

/** Reports how a claimed command ended (its claiming agent only). */
export async function reportCommandResult(ctx: Context, commandId: string, ok: boolean, message: string | null | undefined): Promise<void> {
  const agent = await callingAgent(ctx, requirePrincipal(ctx));
  const updated = await ctx.prisma.command.updateMany({
    where: { id: commandId, claimedBy: agent.id, status: 'claimed' },
    data: { status: ok ? 'succeeded' : 'failed', result: { ok, message: message ?? null } },
  });
  if (updated.count !== 1) throw new AppError('CONFLICT', `command ${commandId} is not claimed by this agent`);
}
