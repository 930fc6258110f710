import { newId } from '../../ids';
import { checkEd25519PublicKey, checkName } from './validate';
import { absent, decide } from '../../auth/decide';
import { requirePrincipal, type Context } from '../../context';
import { poolResource, siteResource } from './resources';
import { AppError, invalidInput } from '../../errors';

/** What a pool's policy holds (stored as JSON on the pool). */
export interface PoolPolicy {
  hardwareProfile: string | null;
  agent: 'none' | 'bcd';
  trustProvisioningNetwork: boolean;
  approverKeys: { id: string; publicKey: string }[];
  /** Approvals a quorum batch needs; defaults to every approver key. */
  quorum: number | null;
}

export const DEFAULT_POLICY: PoolPolicy = {
  hardwareProfile: null,
  agent: 'none',
  trustProvisioningNetwork: false,
  approverKeys: [],
  quorum: null,
};

export function readPolicy(json: unknown): PoolPolicy {
  return { ...DEFAULT_POLICY, ...(json && typeof json === 'object' ? (json as Partial<PoolPolicy>) : {}) };
}

/** A policy change as given: fields left out keep their value. */
export interface PolicyInput {
  hardwareProfile?: string | null;
  agent?: 'none' | 'bcd' | null;
  trustProvisioningNetwork?: boolean | null;
  approverKeys?: { id: string; publicKey: string }[] | null;
  quorum?: number | null;
}

/** Merges a policy change onto the current policy and checks the result as a whole. */
async function checkPolicy(ctx: Context, current: PoolPolicy, input: PolicyInput | null | undefined, field: string): Promise<PoolPolicy> {
  const next: PoolPolicy = { ...current };
  if (input) {
    if (input.hardwareProfile !== undefined) next.hardwareProfile = input.hardwareProfile;
    if (input.agent != null) next.agent = input.agent;
    if (input.trustProvisioningNetwork != null) next.trustProvisioningNetwork = input.trustProvisioningNetwork;
    if (input.approverKeys != null) next.approverKeys = input.approverKeys.map((k) => ({ id: k.id, publicKey: k.publicKey }));
    if (input.quorum !== undefined) next.quorum = input.quorum;
  }
  if (next.hardwareProfile !== null) {
    const profile = await ctx.prisma.hardwareProfile.findUnique({ where: { name: next.hardwareProfile } });
    if (!profile) throw invalidInput(`${field}.hardwareProfile`, 'no hardware profile has this name');
  }
  const seen = new Set<string>();
  next.approverKeys.forEach((key, i) => {
    if (!key.id.trim()) throw invalidInput(`${field}.approverKeys[${i}].id`, 'must not be empty');
    if (seen.has(key.id)) throw invalidInput(`${field}.approverKeys[${i}].id`, 'is listed twice');
    seen.add(key.id);
    checkEd25519PublicKey(`${field}.approverKeys[${i}].publicKey`, key.publicKey);
  });
  if (next.quorum !== null && (next.quorum < 1 || next.quorum > next.approverKeys.length)) {
    throw invalidInput(`${field}.quorum`, `must be between 1 and the number of approver keys (${next.approverKeys.length})`);
  }
  return next;
}

/** createPool: needs admin on the site (or its tenant); names are unique per site. Returns the pool's id. */
export async function createPool(ctx: Context, input: { siteId: string; name: string; policy?: PolicyInput | null }): Promise<string> {
  const principal = requirePrincipal(ctx);
  const site = await ctx.prisma.site.findUnique({ where: { id: input.siteId } });
  if (!site) throw absent('Site', input.siteId);
  decide(principal, 'admin', siteResource(site));
  const name = checkName('input.name', input.name);
  const policy = await checkPolicy(ctx, DEFAULT_POLICY, input.policy, 'input.policy');
  const clash = await ctx.prisma.pool.findUnique({ where: { siteId_name: { siteId: site.id, name } } });
  if (clash) throw new AppError('CONFLICT', 'input.name: the site already has a pool with this name', { field: 'input.name' });
  const id = newId('Pool');
  await ctx.prisma.pool.create({ data: { id, tenantId: site.tenantId, siteId: site.id, name, policy: { ...policy } } });
  return id;
}

/** updatePoolPolicy: admin on the pool; a compare-and-set on its version. Returns the pool's id. */
export async function updatePoolPolicy(ctx: Context, input: { poolId: string; policy: PolicyInput; expectedVersion?: number | null }): Promise<string> {
  const principal = requirePrincipal(ctx);
  const pool = await ctx.prisma.pool.findUnique({ where: { id: input.poolId } });
  if (!pool) throw absent('Pool', input.poolId);
  decide(principal, 'admin', poolResource(pool));
  if (input.expectedVersion != null && input.expectedVersion !== pool.version) {
    throw new AppError('CONFLICT', `pool ${pool.id} is at version ${pool.version}, not ${input.expectedVersion}`);
  }
  const policy = await checkPolicy(ctx, readPolicy(pool.policy), input.policy, 'input.policy');
  // Compare-and-set on the version read above: a concurrent change makes this a CONFLICT.
  const updated = await ctx.prisma.pool.updateMany({
    where: { id: pool.id, version: pool.version },
    data: { policy: { ...policy }, version: { increment: 1 } },
  });
  if (updated.count !== 1) throw new AppError('CONFLICT', `pool ${pool.id} changed concurrently; read it again and retry`);
  return pool.id;
}
