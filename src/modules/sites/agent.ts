import { newId } from '../../ids';
import { decide } from '../../auth/decide';
import { requirePrincipal, type Context } from '../../context';
import { generateToken, hashToken } from '../../auth/tokens';
import { AppError, notFound } from '../../errors';
import { checkName } from '../tenancy/validate';
import { siteResource } from '../tenancy/resources';
import type { Principal } from '../../auth/permissions';
import { checkSightings, proposeCandidates, type SightingInput } from '../metal/discovery';
import { invalidInput } from '../../errors';
import { checkCommandResult } from './commands';
import { claimQueued, heldCommand, lapseClaims, recordResult, renewLeases, sweepCommands } from './claims';
import { parsePublicKey, seal, type SealedBox } from './seal';

/**
 * An agent serves its site while its last heartbeat is at most AGENT_HEARTBEAT_MS old. With the
 * built-in agent on (BUILTIN_AGENT, the default), every site is served: a worker claims the
 * commands of each site no remote agent serves.
 */
export async function siteIsServed(ctx: Context, siteId: string): Promise<boolean> {
  if (ctx.config.builtinAgent) return true;
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
    throw new AppError('CONFLICT', `name: site ${site.id} already has an agent with this name`, { field: 'name' });
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
  // The heartbeat is also what keeps the agent's claims: a command it is still running stays its own.
  await renewLeases(ctx.sql, agent.id, ctx.config.agentLeaseMs);
  return agent.id;
}

/**
 * Registers (or replaces) the calling agent's X25519 public key, base64url of the raw 32 bytes:
 * the credentials of the commands it claims are sealed to it. An agent process makes a new key
 * pair when it starts and registers it before it claims anything.
 */
export async function registerAgentKey(ctx: Context, publicKey: string): Promise<string> {
  const agent = await callingAgent(ctx, requirePrincipal(ctx));
  if (typeof publicKey !== 'string' || !parsePublicKey(publicKey)) {
    throw invalidInput('publicKey', 'must be an X25519 public key: the raw 32 bytes as base64url (43 characters)');
  }
  await ctx.prisma.siteAgent.update({ where: { id: agent.id }, data: { publicKey, keyRegisteredAt: new Date() } });
  // A new key is a new agent process: the commands its predecessor still held are nobody's now (this
  // process never saw them), but its heartbeat would renew their leases forever. Their claims lapse
  // here and the sweep settles them as any lapsed claim (a destructive one fails AGENT_LOST and the
  // engine reads the state back; any other goes back to the queue), at once rather than never.
  const lapsed = await lapseClaims(ctx.sql, agent.id);
  if (lapsed > 0) {
    const swept = await sweepCommands(ctx.sql, agent.siteId, ctx.metrics);
    ctx.log.warn({ agentId: agent.id, lapsed, ...swept }, 'a site agent started again: the commands its previous process held were settled as lapsed');
  }
  return agent.id;
}

/**
 * Claims up to `max` queued, unexpired commands of the agent's site, oldest first (its own token
 * only, with a registered key: an agent that cannot open credentials must not take commands it
 * cannot run). Each is held for AGENT_LEASE_MS, renewed by the agent's heartbeat. The claim first
 * sweeps its site (lapsed claims, expired commands). Returns their ids.
 */
export async function claimCommands(ctx: Context, max: number | null | undefined): Promise<string[]> {
  const agent = await callingAgent(ctx, requirePrincipal(ctx));
  if (max !== null && max !== undefined && (!Number.isInteger(max) || max < 1 || max > 100)) throw invalidInput('max', 'must be an integer from 1 to 100');
  if (!agent.publicKey) throw new AppError('INVALID_STATE', 'this agent has no registered public key: call registerAgentKey before claiming commands');
  await sweepCommands(ctx.sql, agent.siteId, ctx.metrics);
  const claimed = await claimQueued(ctx.sql, agent.id, { siteId: agent.siteId }, max ?? 10, ctx.config.agentLeaseMs);
  if (claimed.length) ctx.log.info({ agentId: agent.id, commands: claimed.map((c) => c.id) }, 'commands claimed');
  return claimed.map((c) => c.id);
}

/** The answer to "credentials for claimed command X": the BMC endpoint in clear, the credentials sealed to the agent's key. */
export interface CommandCredentials {
  commandId: string;
  agentId: string;
  /** The claim's deadline as bound into the seal (ISO 8601, milliseconds): the agent rebuilds the associated data from it. */
  claimDeadline: string;
  kind: string;
  params: Record<string, unknown>;
  nodeId: string;
  endpoint: { address: string; driver: string; driverOptions: Record<string, unknown>; driverBindings: Record<string, string> };
  /** JSON `{ username, password }`, sealed to the agent's registered key (see seal.ts). */
  sealed: SealedBox;
}

/**
 * The BMC credentials of a command the calling agent holds, read from the secret broker now and
 * sealed to the agent's registered key, bound to the command, the agent and the claim's deadline.
 * Only for a command of its own site (another site's is NOT_FOUND), only while its claim holds (a
 * lapsed claim is CONFLICT: the sweep has made it AGENT_LOST or queued again). A separate call
 * from the claim, so an agent asks just before it runs the command and the credentials never sit
 * in a queue of claimed work. Never logged, never in an event, never stored unsealed.
 */
export async function commandCredentials(ctx: Context, commandId: string): Promise<CommandCredentials> {
  const agent = await callingAgent(ctx, requirePrincipal(ctx));
  if (typeof commandId !== 'string' || !commandId) throw invalidInput('commandId', 'is required');
  const key = agent.publicKey ? parsePublicKey(agent.publicKey) : null;
  if (!key) throw new AppError('INVALID_STATE', 'this agent has no registered public key: call registerAgentKey first');
  await sweepCommands(ctx.sql, agent.siteId, ctx.metrics);
  const command = await heldCommand(ctx.sql, commandId);
  if (!command || command.siteId !== agent.siteId || !command.node || command.node.siteId !== agent.siteId) throw notFound('command', commandId);
  if (command.claimedBy !== agent.id || !command.held || !command.leaseExpiresAt) {
    throw new AppError('CONFLICT', `command ${commandId} is not held by this agent (never claimed by it, or its claim lapsed): no credentials`);
  }
  const node = command.node;
  if (!node.credentialsRef) throw new AppError('INVALID_STATE', `node ${node.id} has no BMC credentials`);
  if (!ctx.secrets) throw new AppError('INVALID_CONFIG', 'no secret broker is configured: BMC credentials cannot be read');
  const secret = await ctx.secrets.get(node.credentialsRef, node.tenantId);
  const credentials = secret as { username?: unknown; password?: unknown } | null;
  if (!credentials || typeof credentials.username !== 'string' || typeof credentials.password !== 'string') {
    throw new AppError('INVALID_CONFIG', `the secret ${node.credentialsRef} of node ${node.id} is not { username, password }`);
  }
  const claimDeadline = command.leaseExpiresAt.toISOString();
  const sealed = seal(key, JSON.stringify({ username: credentials.username, password: credentials.password }), { commandId, agentId: agent.id, claimDeadline });
  ctx.log.info({ agentId: agent.id, commandId, nodeId: node.id }, 'sealed BMC credentials handed to the agent holding the command');
  return {
    commandId, agentId: agent.id, claimDeadline, kind: command.kind, params: command.params, nodeId: node.id,
    endpoint: { address: node.address, driver: node.driver, driverOptions: node.driverOptions, driverBindings: node.driverBindings },
    sealed,
  };
}

/**
 * Reports how a claimed command ended (its claiming agent only): a CommandResult (commands.ts),
 * checked field by field before anything is written. The result and the wake-up (due_at) of the
 * run that queued the command commit together, so the waiting run wakes.
 */
export async function reportCommandResult(ctx: Context, commandId: string, rawResult: unknown): Promise<void> {
  const agent = await callingAgent(ctx, requirePrincipal(ctx));
  const command = await ctx.prisma.command.findUnique({ where: { id: commandId }, select: { id: true, siteId: true, kind: true } });
  if (!command || command.siteId !== agent.siteId) throw notFound('command', commandId);
  const result = checkCommandResult(command.kind, rawResult);
  const recorded = await recordResult(ctx.sql, commandId, agent.id, result, null, ctx.metrics);
  if (!recorded) throw new AppError('CONFLICT', `command ${commandId} is not claimed by this agent`);
  ctx.log.info({ agentId: agent.id, commandId, ok: result.ok, code: result.ok ? undefined : result.code }, 'command result recorded');
}
