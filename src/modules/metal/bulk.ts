import { createHash, createPublicKey, verify } from 'node:crypto';
import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { can, decide } from '../../auth/decide';
import { AppError, invalidInput, notFound, type ErrorCode } from '../../errors';
import { newId } from '../../ids';
import { prismaExecutor } from '../../../jobs/registry';
import { nodeResource, poolResource } from '../tenancy/resources';
import { readPolicy } from '../tenancy/pool';
import { decideMove, isDestructive, VERBS, type ProvisionState, type Verb } from './states';
import type { WipeMode } from './verbs';

export const BULK_VERBS = (Object.keys(VERBS) as Verb[]).filter((v) => VERBS[v].bulk) as BulkVerb[];
export type BulkVerb = 'manage' | 'inspect' | 'provide' | 'undeploy' | 'rescue' | 'retire';
export const MAX_BULK = 10000;

export interface BulkInput {
  poolId: string;
  verb: BulkVerb;
  nodeIds: string[];
  reason?: string | null;
  wipe?: WipeMode | null;
}

export interface Refusal {
  nodeId: string;
  code: ErrorCode;
  message: string;
}

/** What approvers sign: the batch's canonical digest (sha256 of its sorted, fixed-order fields). */
export function batchDigest(batch: { id: string; poolId: string; verb: string; reason: string; nodeIds: string[]; wipe: string | null }): string {
  const canonical = JSON.stringify([batch.id, batch.poolId, batch.verb, batch.reason, [...batch.nodeIds].sort(), batch.wipe]);
  return createHash('sha256').update(canonical).digest('hex');
}

/**
 * bulk: one lifecycle verb on many nodes of a pool, all or nothing. Decided on the pool, then each
 * node exactly as its own verb; any refusal refuses the whole call before anything changes, listing
 * every refused node. Set-based: one read, one compare-and-set update, one event insert and one job
 * insert, whatever the number of nodes.
 */
export async function bulk(ctx: Context, input: BulkInput): Promise<{ nodeIds: string[]; batchId: string | null }> {
  const principal = requirePrincipal(ctx);
  const pool = await ctx.prisma.pool.findUnique({ where: { id: input.poolId } });
  if (!pool) throw notFound('pool', input.poolId);
  decide(principal, 'compute:nodes:provision', poolResource(pool));
  if (!BULK_VERBS.includes(input.verb)) throw invalidInput('verb', `must be one of ${BULK_VERBS.join(', ')}`);
  const ids = input.nodeIds;
  if (ids.length < 1 || ids.length > MAX_BULK) throw invalidInput('nodeIds', `must list 1 to ${MAX_BULK} nodes, got ${ids.length}`);
  const seen = new Set<string>();
  const duplicates = ids.filter((id) => (seen.has(id) ? true : (seen.add(id), false)));
  if (duplicates.length) throw invalidInput('nodeIds', `each node may be listed once; listed again: ${[...new Set(duplicates)].slice(0, 20).join(', ')}`);
  if (input.wipe && input.verb !== 'undeploy') throw invalidInput('wipe', 'applies to undeploy only');
  const destructive = isDestructive(input.verb);
  const reason = input.reason?.trim() ?? '';
  if (destructive && !reason) throw invalidInput('reason', `is required: ${input.verb} sends destructive commands, recorded in a batch`);

  const nodes = await ctx.prisma.node.findMany({
    where: { id: { in: ids } },
    select: { id: true, tenantId: true, siteId: true, poolId: true, provisionState: true, failedFrom: true, version: true },
  });
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const refused: Refusal[] = [];
  for (const id of ids) {
    const node = byId.get(id);
    if (!node || node.tenantId !== pool.tenantId || node.poolId !== pool.id) {
      refused.push({ nodeId: id, code: 'INVALID_INPUT', message: `not a node of pool ${pool.id}` });
      continue;
    }
    if (!can(principal, 'compute:nodes:provision', nodeResource(node))) {
      refused.push({ nodeId: id, code: 'PERMISSION_DENIED', message: 'missing compute:nodes:provision on this node' });
      continue;
    }
    const decision = decideMove(input.verb, node.provisionState as ProvisionState, node.failedFrom as ProvisionState | null);
    if (!decision.legal) {
      refused.push({ nodeId: id, code: 'INVALID_STATE', message: `in state ${decision.current}; legal from: ${decision.legalFrom.join(', ')}` });
    }
  }
  if (refused.length) {
    const code: ErrorCode = refused.some((r) => r.code === 'INVALID_INPUT') ? 'INVALID_INPUT'
      : refused.some((r) => r.code === 'PERMISSION_DENIED') ? 'PERMISSION_DENIED' : 'INVALID_STATE';
    throw new AppError(code, `bulk ${input.verb} refused for ${refused.length} of ${ids.length} nodes; nothing changed (first: ${refused[0]!.nodeId}: ${refused[0]!.message})`, { refused });
  }

  const to = VERBS[input.verb].to as ProvisionState;
  const event = VERBS[input.verb].event;
  const wipe = input.verb === 'undeploy' ? (input.wipe ?? 'quick') : null;
  const policy = readPolicy(pool.policy);
  let batchId: string | null = null;
  const versions = ids.map((id) => byId.get(id)!.version);
  const froms = ids.map((id) => byId.get(id)!.provisionState);

  await ctx.prisma.$transaction(async (tx) => {
    if (destructive) {
      batchId = newId('CommandBatch');
      const fields = { id: batchId, poolId: pool.id, verb: input.verb, reason, nodeIds: ids, wipe };
      await tx.commandBatch.create({
        data: {
          ...fields,
          tenantId: pool.tenantId,
          digest: batchDigest(fields),
          quorum: policy.approverKeys.length ? (policy.quorum ?? policy.approverKeys.length) : 0,
          status: policy.approverKeys.length ? 'awaiting-approval' : 'recorded',
          createdBy: principal.tokenId,
        },
      });
    }
    const updated = await tx.$executeRawUnsafe(
      `UPDATE node AS n SET provision_state = $1::"ProvisionState", version = n.version + 1, updated_at = now()
       FROM unnest($2::text[], $3::int[]) AS v(id, version)
       WHERE n.id = v.id AND n.version = v.version AND n.pool_id = $4`,
      to, ids, versions, pool.id,
    );
    if (updated !== ids.length) {
      throw new AppError('CONFLICT', `${ids.length - updated} of the nodes changed concurrently; nothing changed, read them again and retry`);
    }
    await tx.$executeRawUnsafe(
      `INSERT INTO event (type, tenant_id, site_id, pool_id, node_id, subject, payload)
       SELECT $1, $2, $3, $4, v.id, v.id,
              jsonb_build_object('nodeId', v.id, 'verb', $5::text, 'from', v.from_state, 'to', $6::text, 'bulk', true,
                                 'batchId', $7::text, 'wipe', $8::text, 'requestId', $9::text)
       FROM unnest($10::text[], $11::text[]) AS v(id, from_state)`,
      event, pool.tenantId, pool.siteId, pool.id, input.verb, to, batchId, wipe, ctx.requestId, ids, froms,
    );
    await ctx.queues!.boss.insert(
      ids.map((nodeId) => ({
        name: 'metal.reconcile',
        data: { nodeId, reason: input.verb, ...(wipe ? { wipe } : {}), ...(batchId ? { batchId } : {}) },
      })),
      { db: prismaExecutor(tx) as never },
    );
  }, { timeout: 60000 });
  return { nodeIds: ids, batchId };
}

/**
 * Approves a batch with an Ed25519 signature over its digest by one of the pool's approver keys.
 * When the approvals reach the quorum, the batch is approved and its commands may run.
 */
export async function approveBatch(ctx: Context, batchId: string, keyId: string, signatureBase64: string): Promise<string> {
  const principal = requirePrincipal(ctx);
  const batch = await ctx.prisma.commandBatch.findUnique({ where: { id: batchId } });
  if (!batch) throw notFound('command batch', batchId);
  const pool = await ctx.prisma.pool.findUniqueOrThrow({ where: { id: batch.poolId } });
  decide(principal, 'compute:nodes:provision', poolResource(pool));
  if (batch.status !== 'awaiting-approval') throw new AppError('INVALID_STATE', `batch ${batch.id} is ${batch.status}, not awaiting approval`);
  const key = readPolicy(pool.policy).approverKeys.find((k) => k.id === keyId);
  if (!key) throw invalidInput('keyId', `no approver key "${keyId}" in pool ${pool.id}'s policy`);
  const approvals = batch.approvals as { keyId: string; at: string }[];
  if (approvals.some((a) => a.keyId === keyId)) throw new AppError('CONFLICT', `key "${keyId}" has already approved batch ${batch.id}`);
  const publicKey = key.publicKey.includes('BEGIN PUBLIC KEY')
    ? createPublicKey(key.publicKey)
    : createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(key.publicKey, 'base64').toString('base64url') }, format: 'jwk' });
  const signature = Buffer.from(signatureBase64, 'base64');
  if (signature.length !== 64 || !verify(null, Buffer.from(batch.digest, 'hex'), publicKey, signature)) {
    throw invalidInput('signature', `is not ${keyId}'s Ed25519 signature over the batch digest ${batch.digest}`);
  }
  const next = [...approvals, { keyId, at: new Date().toISOString() }];
  const status = next.length >= batch.quorum ? 'approved' : 'awaiting-approval';
  const updated = await ctx.prisma.commandBatch.updateMany({
    where: { id: batch.id, status: 'awaiting-approval', approvals: { equals: batch.approvals as object } },
    data: { approvals: next, status },
  });
  if (updated.count !== 1) throw new AppError('CONFLICT', `batch ${batch.id} changed concurrently; retry`);
  return batch.id;
}
