import { createHash } from 'node:crypto';
import { requirePrincipal, type Context } from '../../context';
import { absent, decide } from '../../auth/decide';
import { AppError } from '../../errors';
import { newId } from '../../ids';
import { nodeResource } from '../tenancy/resources';
import { siteIsServed } from '../sites/agent';
import { decidePower, POWER_REFUSED, PROVISION_STATES, type ProvisionState } from './states';

export const POWER_REFUSED_STATES = PROVISION_STATES.filter((s) => POWER_REFUSED[s] !== null);

export const POWER_ACTIONS = ['on', 'off', 'graceful-off', 'reset', 'graceful-restart', 'cycle', 'nmi'] as const;
export type PowerAction = (typeof POWER_ACTIONS)[number];
/** Commands expire five minutes after they are queued. */
export const COMMAND_TTL_MS = 5 * 60 * 1000;

/**
 * power: queues a bmc.power command for the site agent of the node's site and returns its id; the
 * provision state does not change. Decided as compute:nodes:power on the node. The idempotency key
 * derives from the request id (X-Request-Id), so a retry returns the same command.
 */
export async function power(ctx: Context, nodeId: string, action: PowerAction): Promise<{ nodeId: string; commandId: string }> {
  const principal = requirePrincipal(ctx);
  const node = await ctx.prisma.node.findUnique({ where: { id: nodeId } });
  if (!node) throw absent('MetalNode', nodeId);
  decide(principal, 'compute:nodes:power', nodeResource(node));
  const key = createHash('sha256').update(`${principal.tokenId}\u0000${ctx.requestId}`).digest('hex');
  const existing = await ctx.prisma.command.findUnique({ where: { idempotencyKey: key } });
  if (existing) return sameCommand(existing, nodeId, action);
  if (!node.bmcCredentialsRef) throw new AppError('INVALID_STATE', `node ${node.id} has no BMC credentials`, { state: node.provisionState });
  const allowed = decidePower(node.provisionState as ProvisionState);
  if (!allowed.legal) {
    throw new AppError('INVALID_STATE', `node ${node.id} is ${node.provisionState}: ${allowed.why}`, { state: node.provisionState });
  }
  // An aborted or failed run's cleanup powers the machine off: a power command of the verb beside
  // it would be a second, contradictory one in flight on the same machine (issue 20).
  const cleaning = await ctx.prisma.workflowRun.findFirst({ where: { nodeId: node.id, status: 'aborting' }, select: { id: true, kind: true }, orderBy: { createdAt: 'desc' } });
  if (cleaning) {
    throw new AppError('INVALID_STATE', `node ${node.id}: workflow run ${cleaning.id} (${cleaning.kind}) is still cleaning up and sends its own power commands; power it when that run has ended`, { state: node.provisionState, runId: cleaning.id });
  }
  if (!(await siteIsServed(ctx, node.siteId))) {
    throw new AppError('INVALID_STATE', `no site agent serves site ${node.siteId} (no heartbeat within ${ctx.config.agentHeartbeatMs / 1000} s)`, { state: node.provisionState });
  }
  const id = newId('Command');
  try {
    await ctx.prisma.command.create({
      data: {
        id, tenantId: node.tenantId, siteId: node.siteId, nodeId: node.id, kind: 'bmc.power', params: { action }, status: 'queued',
        idempotencyKey: key, expiresAt: new Date(Date.now() + COMMAND_TTL_MS),
      },
    });
  } catch (error) {
    // The same request id arriving twice at once: the other insert won; answer with its command.
    if ((error as { code?: string }).code !== 'P2002') throw error;
    return sameCommand(await ctx.prisma.command.findUniqueOrThrow({ where: { idempotencyKey: key } }), nodeId, action);
  }
  return { nodeId: node.id, commandId: id };
}

function sameCommand(command: { id: string; nodeId: string | null; params: unknown }, nodeId: string, action: PowerAction) {
  if (command.nodeId !== nodeId || (command.params as { action?: string }).action !== action) {
    throw new AppError('CONFLICT', 'this X-Request-Id was already used for another command; use a new request id');
  }
  return { nodeId, commandId: command.id };
}
