import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { decide } from '../../auth/decide';
import { AppError, invalidInput, notFound } from '../../errors';
import { newId } from '../../ids';
import { isModuleRegistered } from '../../config';
import { publish } from '../../events/outbox';
import { prismaExecutor } from '../../../jobs/registry';
import { nodeResource } from '../tenancy/resources';
import { decideMove, RECOVER_TO, type ProvisionState, type Verb } from './states';
import type { Prisma } from '../../generated/prisma/client';

/** The single-node verbs whose whole effect is a state move (enroll, power, bulk... live elsewhere). */
export type MoveVerb = Extract<Verb, 'manage' | 'inspect' | 'provide' | 'abort' | 'recover' | 'retire' | 'undeploy' | 'deploy' | 'rescue'>;

export const WIPE_MODES = ['none', 'quick', 'secure-erase', 'crypto-erase'] as const;
export type WipeMode = (typeof WIPE_MODES)[number];

export interface VerbOptions {
  reason?: string | null;
  wipe?: WipeMode | null;
  profile?: { profileId: string; profileVersion: number };
}

/** The steps every single-node verb starts with: load, decide on the node, ask the state table. */
async function loadForVerb(ctx: Context, verb: Exclude<Verb, 'enroll'>, nodeId: string) {
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
  return { node, decision };
}

/**
 * The one transaction every single-node verb commits: a compare-and-set on the node's version
 * (CONFLICT when it changed since it was read), the workflow run it starts if any, its outbox event
 * and its reconciler job. All of it or nothing.
 */
async function commitVerb(
  ctx: Context,
  node: { id: string; version: number; tenantId: string; siteId: string; poolId: string },
  change: {
    data: Prisma.NodeUpdateManyMutationInput;
    run: { id: string; kind: string } | null;
    event: string;
    payload: Record<string, unknown>;
    job: { reason: string; wipe?: string };
  },
): Promise<void> {
  await ctx.prisma.$transaction(async (tx) => {
    const updated = await tx.node.updateMany({ where: { id: node.id, version: node.version }, data: change.data });
    if (updated.count !== 1) throw new AppError('CONFLICT', `node ${node.id} changed concurrently; read it again and retry`);
    if (change.run) await tx.workflowRun.create({ data: { id: change.run.id, nodeId: node.id, kind: change.run.kind, status: 'queued' } });
    await publish(tx, {
      type: change.event,
      tenantId: node.tenantId,
      siteId: node.siteId,
      poolId: node.poolId,
      nodeId: node.id,
      subject: node.id,
      payload: { nodeId: node.id, ...change.payload, requestId: ctx.requestId },
    });
    await ctx.queues!.send('metal.reconcile', { nodeId: node.id, ...change.job }, { db: prismaExecutor(tx) });
  });
}

/**
 * How every single-node verb runs: authenticate; decide compute:nodes:provision on the node
 * (another tenant's node is NOT_FOUND); ask the state table; then, in one transaction, a
 * compare-and-set on the node's version, the outbox event and the reconciler job. No verb touches
 * the machine.
 */
export async function runMoveVerb(ctx: Context, verb: MoveVerb, nodeId: string, opts: VerbOptions = {}): Promise<string> {
  const { node, decision } = await loadForVerb(ctx, verb, nodeId);
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
  // The rescue workflow's run exists from the call on: unrescue reads it to know whether the
  // rescue ramdisk is still booting.
  const rescueRun = verb === 'rescue' ? newId('WorkflowRun') : null;
  if (rescueRun) data.workflowId = rescueRun;
  const wipe = verb === 'undeploy' ? (opts.wipe ?? 'quick') : undefined;
  await commitVerb(ctx, node, {
    data,
    run: rescueRun ? { id: rescueRun, kind: 'metal-rescue' } : null,
    event: decision.event,
    payload: {
      verb,
      from,
      to,
      ...(verb === 'abort' ? { reason: opts.reason ?? null } : {}),
      ...(verb === 'recover' ? { failedFrom: node.failedFrom, stablePoint: RECOVER_TO[node.failedFrom as ProvisionState] } : {}),
      ...(wipe ? { wipe } : {}),
      ...(verb === 'deploy' ? opts.profile : {}),
      ...(rescueRun ? { workflowId: rescueRun } : {}),
    },
    job: { reason: verb, ...(wipe ? { wipe } : {}) },
  });
  return node.id;
}

const RUNNING = ['queued', 'running'];

/**
 * unrescue: starts the metal-unrescue workflow; the node stays in rescue until it succeeds.
 * A second call while that workflow runs returns the node unchanged; CONFLICT while the rescue
 * ramdisk is still booting (the rescue run has not succeeded); INVALID_CONFIG without the
 * provision module. Publishes node.provision.unrescuing with the workflowId.
 */
export async function unrescue(ctx: Context, nodeId: string): Promise<string> {
  const { node, decision } = await loadForVerb(ctx, 'unrescue', nodeId);
  if (!isModuleRegistered(ctx.config, 'provision')) {
    throw new AppError('INVALID_CONFIG', 'unrescue needs the provision module, which is not registered (MODULES)');
  }
  const current = node.workflowId ? await ctx.prisma.workflowRun.findUnique({ where: { id: node.workflowId } }) : null;
  if (current?.kind === 'metal-unrescue' && RUNNING.includes(current.status)) return node.id;
  if (current?.kind === 'metal-rescue' && current.status !== 'succeeded') {
    throw new AppError('CONFLICT', `node ${node.id}: the rescue ramdisk is still booting (workflow ${current.id} is ${current.status}); retry when it is up`);
  }
  const workflowId = newId('WorkflowRun');
  await commitVerb(ctx, node, {
    data: { workflowId, version: { increment: 1 } },
    run: { id: workflowId, kind: 'metal-unrescue' },
    event: decision.event,
    payload: { verb: 'unrescue', from: 'rescue', to: 'rescue', workflowId },
    job: { reason: 'unrescue' },
  });
  return node.id;
}
