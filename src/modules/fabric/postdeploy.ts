import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { decide } from '../../auth/decide';
import { notFound } from '../../errors';
import { computeNodeByIp } from './compute-nodes';
import { APPLY_STEPS, checkNodeIp, type StepRecord } from './rollout';

/**
 * Post-deploy checklists (seed: GET .../node/{node_ip}/postdeploy and .../batches/{id}/postdeploy):
 * the fabric steps of a node's latest apply, one entry per step, each with the node's two
 * identities (OS address and BMC address: the web batch surface keys by bmc_ip) and the metal
 * batch that provisioned it. A step the latest apply has not reached is `pending` at 0 %; a node
 * never rolled out shows every step pending. created_at / updated_at are always set (the seed types
 * them as strings): a step not reached yet carries its checklist's making. Reading needs a platform-scoped grant, like the rest
 * of the fabric.
 */

export interface PostdeployStep {
  /** `<job id>:<step>`, or `pending:<step>` before any apply. */
  stepId: string;
  step: string;
  nodeIp: string;
  bmcIp: string;
  /** The newest command batch that named this node, or empty. */
  batchId: string;
  jobId: string;
  status: 'pending' | 'running' | 'completed' | 'failed' | 'skipped';
  progress: number;
  message: string;
  /** When the step's record was made: its start, else (not reached yet) when its checklist was made (the latest apply, or the node's joining). */
  createdAt: Date;
  updatedAt: Date;
}

export interface NodeChecklist {
  nodeId: string;
  nodeIp: string;
  bmcIp: string;
  steps: PostdeployStep[];
}

export interface BatchPostdeploy {
  batchId: string;
  nodes: NodeChecklist[];
}

const STATUS: Record<StepRecord['status'], PostdeployStep['status']> = { running: 'running', ok: 'completed', failed: 'failed', skipped: 'skipped' };

async function checklistOf(ctx: Context, node: { nodeId: string; nodeIp: string; bmcIp: string }): Promise<PostdeployStep[]> {
  const latest = await ctx.prisma.fabricJobNode.findFirst({
    where: { nodeId: node.nodeId, job: { jobType: 'fabric_apply' } },
    orderBy: [{ createdAt: 'desc' }, { jobId: 'desc' }],
  });
  const batch = await ctx.prisma.commandBatch.findFirst({ where: { nodeIds: { has: node.nodeId } }, orderBy: { createdAt: 'desc' }, select: { id: true } });
  const recorded = ((latest?.steps ?? []) as unknown as StepRecord[]).filter((s) => s.phase === 'apply');
  // A step not reached yet is as old as its checklist: the latest apply's row for the node, or,
  // never rolled out, the node's joining the fabric (its compute_node row).
  const made = latest?.createdAt
    ?? (await ctx.prisma.computeNode.findUnique({ where: { nodeId: node.nodeId }, select: { createdAt: true } }))?.createdAt
    ?? new Date();
  return APPLY_STEPS.map((step) => {
    // A retried job records a step again: the last record is the step's state.
    const record = recorded.filter((s) => s.step === step).pop();
    const status = record ? STATUS[record.status] : 'pending';
    return {
      stepId: `${latest?.jobId ?? 'pending'}:${step}`,
      step,
      nodeIp: node.nodeIp,
      bmcIp: node.bmcIp,
      batchId: batch?.id ?? '',
      jobId: latest?.jobId ?? '',
      status,
      progress: status === 'completed' || status === 'skipped' ? 100 : 0,
      message: record?.message ?? '',
      createdAt: record ? new Date(record.startedAt) : made,
      updatedAt: record ? new Date(record.finishedAt ?? record.startedAt) : made,
    };
  });
}

/** One compute node's checklist; NOT_FOUND for an address that is not a compute node. */
export async function nodePostdeploy(ctx: Context, nodeIpInput: string): Promise<PostdeployStep[]> {
  decide(requirePrincipal(ctx), 'read', { type: 'platform' });
  const nodeIp = checkNodeIp(nodeIpInput);
  const node = await computeNodeByIp(ctx.prisma, nodeIp);
  if (!node) throw notFound('compute node', nodeIp);
  const metal = await ctx.prisma.node.findUnique({ where: { id: node.nodeId }, select: { bmcAddress: true } });
  return checklistOf(ctx, { nodeId: node.nodeId, nodeIp, bmcIp: metal?.bmcAddress ?? '' });
}

/**
 * A provisioning batch's nodes with their checklists (a node of the batch that is not a compute
 * node has an empty node_ip and no steps). NOT_FOUND for an unknown batch.
 */
export async function batchPostdeploy(ctx: Context, batchId: string): Promise<BatchPostdeploy> {
  decide(requirePrincipal(ctx), 'read', { type: 'platform' });
  const batch = await ctx.prisma.commandBatch.findUnique({ where: { id: batchId }, select: { id: true, nodeIds: true } });
  if (!batch) throw notFound('provision batch', batchId);
  const metal = await ctx.prisma.node.findMany({ where: { id: { in: batch.nodeIds } }, select: { id: true, bmcAddress: true, computeNode: { select: { osIp: true } } } });
  const byId = new Map(metal.map((m) => [m.id, m]));
  const nodes: NodeChecklist[] = [];
  for (const nodeId of batch.nodeIds) {
    const m = byId.get(nodeId);
    const nodeIp = m?.computeNode?.osIp ?? '';
    const bmcIp = m?.bmcAddress ?? '';
    nodes.push({ nodeId, nodeIp, bmcIp, steps: nodeIp ? await checklistOf(ctx, { nodeId, nodeIp, bmcIp }) : [] });
  }
  return { batchId: batch.id, nodes };
}
