import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { decide } from '../../auth/decide';
import { AppError, invalidInput, notFound } from '../../errors';
import { publish } from '../../events/outbox';
import { prismaExecutor } from '../../../jobs/registry';
import { nodeResource } from '../tenancy/resources';
import { decideMove, RECOVER_TO, type ProvisionState, type Verb } from './states';
import type { Prisma } from '../../generated/prisma/client';

/** The single-node verbs whose whole effect is a state move (enroll, power, bulk... live elsewhere). */
export type MoveVerb = Extract<Verb, 'manage' | 'inspect' | 'provide' | 'abort' | 'recover' | 'retire' | 'undeploy' | 'deploy'>;

export const WIPE_MODES = ['none', 'quick', 'secure-erase', 'crypto-erase'] as const;
export type WipeMode = (typeof WIPE_MODES)[number];

export interface VerbOptions {
  reason?: string | null;
  wipe?: WipeMode | null;
  profile?: { profileId: string; profileVersion: number };
}

/**
 * How every single-node verb runs: authenticate; decide compute:nodes:provision on the node
 * (another tenant's node is NOT_FOUND); ask the state table; then, in one transaction, a
 * compare-and-set on the node's version, the outbox event and the reconciler job. No verb touches
 * the machine.
 */
export async function runMoveVerb(ctx: Context, verb: MoveVerb, nodeId: string, opts: VerbOptions = {}): Promise<string> {
  const principal = requirePrincipal(ctx);
  const node = await ctx.prisma.node.findUnique({ where: { id: nodeId } });
  if (!node) throw notFound('node', nodeId);
  decide(principal, 'compute:nodes:provision', nodeResource(node));
  const decision = decideMove(verb, node.provisionState as ProvisionState, node.failedFrom as ProvisionState | null);
  if (!decision.legal) {
    throw new AppError(
      'INVALID_STATE',
      `${verb} is not legal for node ${node.id} in state ${decision.current}; legal from: ${decision.legalFrom.join(', ') || 'none'}`,
      { state: decision.current, legalFrom: decision.legalFrom },
    );
  }
  if (verb === 'deploy') {
    // Records a profile version that exists, in the node's tenant, without running it.
    const profile = opts.profile;
    if (!profile) throw invalidInput('profileId', 'is required');
    const owner = await ctx.prisma.deployProfile.findUnique({ where: { id: profile.profileId } });
    if (!owner || owner.tenantId !== node.tenantId) throw invalidInput('profileId', `no deploy profile ${profile.profileId}`);
    const version = await ctx.prisma.deployProfileVersion.findUnique({
      where: { profileId_version: { profileId: owner.id, version: profile.profileVersion } },
    });
    if (!version) throw invalidInput('profileVersion', `deploy profile ${owner.id} has no version ${profile.profileVersion}`);
  }
  const from = node.provisionState as ProvisionState;
  const to = decision.to ?? from;
  const data: Prisma.NodeUpdateManyMutationInput = { provisionState: to, version: { increment: 1 } };
  if (verb === 'abort') {
    data.failedFrom = from;
    data.lastErrorCode = 'ABORTED';
    data.lastErrorMessage = opts.reason?.trim() ? `aborted: ${opts.reason.trim()}` : 'aborted';
    data.maintenance = true;
  }
  if (verb === 'recover') {
    data.failedFrom = null;
    data.lastErrorCode = null;
    data.lastErrorMessage = null;
  }
  if (verb === 'deploy' && opts.profile) {
    data.profileId = opts.profile.profileId;
    data.profileVersion = opts.profile.profileVersion;
  }
  const wipe = verb === 'undeploy' ? (opts.wipe ?? 'quick') : undefined;
  await ctx.prisma.$transaction(async (tx) => {
    const updated = await tx.node.updateMany({ where: { id: node.id, version: node.version }, data });
    if (updated.count !== 1) throw new AppError('CONFLICT', `node ${node.id} changed concurrently; read it again and retry`);
    await publish(tx, {
      type: decision.event,
      tenantId: node.tenantId,
      siteId: node.siteId,
      poolId: node.poolId,
      nodeId: node.id,
      subject: node.id,
      payload: {
        nodeId: node.id,
        verb,
        from,
        to,
        ...(verb === 'abort' ? { reason: opts.reason ?? null } : {}),
        ...(verb === 'recover' ? { failedFrom: node.failedFrom, stablePoint: RECOVER_TO[node.failedFrom as ProvisionState] } : {}),
        ...(wipe ? { wipe } : {}),
        ...(verb === 'deploy' ? opts.profile : {}),
        requestId: ctx.requestId,
      },
    });
    await ctx.queues!.send('metal.reconcile', { nodeId: node.id, reason: verb, ...(wipe ? { wipe } : {}) }, { db: prismaExecutor(tx) });
  });
  return node.id;
}
