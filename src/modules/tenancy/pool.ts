import { builder } from '../../graphql/builder';
import { newId } from '../../ids';
import { checkEd25519PublicKey, checkName } from './validate';
import { absent, decide, readFilter } from '../../auth/decide';
import { requirePrincipal, type Context } from '../../context';
import { poolResource, siteResource } from './resources';
import { AppError, invalidInput } from '../../errors';
import { SiteRef } from './site';
import { related, siteById } from '../../graphql/loaders';
import type { Site } from '../../generated/prisma/client';

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

const PoolAgent = builder.enumType('PoolAgent', {
  description: 'What runs on the pool\'s machines: `none` (agentless) or `bcd`.',
  values: ['none', 'bcd'] as const,
});

const ApproverKey = builder.objectRef<PoolPolicy['approverKeys'][number]>('ApproverKey').implement({
  fields: (t) => ({ id: t.exposeString('id'), publicKey: t.exposeString('publicKey') }),
});

const PoolPolicyRef = builder.objectRef<PoolPolicy>('PoolPolicy').implement({
  fields: (t) => ({
    hardwareProfile: t.exposeString('hardwareProfile', { nullable: true }),
    agent: t.expose('agent', { type: PoolAgent }),
    trustProvisioningNetwork: t.exposeBoolean('trustProvisioningNetwork'),
    approverKeys: t.expose('approverKeys', { type: [ApproverKey] }),
    quorum: t.exposeInt('quorum', { nullable: true }),
  }),
});

export const PoolRef = builder.prismaNode('Pool', {
  id: { field: 'id' },
  nullable: true,
  fields: (t) => ({
    name: t.exposeString('name'),
    tenantId: t.exposeID('tenantId'),
    siteId: t.exposeID('siteId'),
    site: t.field({ type: SiteRef, resolve: (pool, _a, ctx) => related((pool as { site?: Site }).site, pool.siteId, (id) => siteById(ctx, id)) as Promise<Site> }),
    policy: t.field({ type: PoolPolicyRef, resolve: (pool) => readPolicy(pool.policy) }),
    version: t.exposeInt('version'),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
    updatedAt: t.expose('updatedAt', { type: 'DateTime' }),
  }),
});

builder.queryField('pools', (t) =>
  t.prismaField({
    type: ['Pool'],
    args: { siteId: t.arg.id({ required: false }) },
    description: 'Pools the caller may read, optionally of one site.',
    resolve: (query, _root, args, ctx) => {
      const filter = readFilter(requirePrincipal(ctx), 'pool');
      const where = { AND: [filter ?? {}, args.siteId ? { siteId: args.siteId } : {}] };
      return ctx.prisma.pool.findMany({ ...query, where, orderBy: [{ siteId: 'asc' }, { name: 'asc' }], take: ctx.config.maxPageSize });
    },
  }),
);

const ApproverKeyInput = builder.inputType('ApproverKeyInput', {
  fields: (t) => ({
    id: t.string({ required: true }),
    publicKey: t.string({ required: true, description: 'Ed25519 public key: base64 of the 32 raw bytes, or PEM' }),
  }),
});

const PoolPolicyInput = builder.inputType('PoolPolicyInput', {
  fields: (t) => ({
    hardwareProfile: t.string({ required: false }),
    agent: t.field({ type: PoolAgent, required: false }),
    trustProvisioningNetwork: t.boolean({ required: false }),
    approverKeys: t.field({ type: [ApproverKeyInput], required: false }),
    quorum: t.int({ required: false }),
  }),
});

type PolicyInput = typeof PoolPolicyInput.$inferInput;

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
    if (!profile) throw invalidInput(`${field}.hardwareProfile`, `no hardware profile named "${next.hardwareProfile}"`);
  }
  const seen = new Set<string>();
  next.approverKeys.forEach((key, i) => {
    if (!key.id.trim()) throw invalidInput(`${field}.approverKeys[${i}].id`, 'must not be empty');
    if (seen.has(key.id)) throw invalidInput(`${field}.approverKeys[${i}].id`, `"${key.id}" is listed twice`);
    seen.add(key.id);
    checkEd25519PublicKey(`${field}.approverKeys[${i}].publicKey`, key.publicKey);
  });
  if (next.quorum !== null && (next.quorum < 1 || next.quorum > next.approverKeys.length)) {
    throw invalidInput(`${field}.quorum`, `must be between 1 and the number of approver keys (${next.approverKeys.length})`);
  }
  return next;
}

const CreatePoolInput = builder.inputType('CreatePoolInput', {
  fields: (t) => ({
    siteId: t.id({ required: true }),
    name: t.string({ required: true }),
    policy: t.field({ type: PoolPolicyInput, required: false }),
  }),
});

builder.mutationField('createPool', (t) =>
  t.prismaField({
    type: 'Pool',
    description: 'Needs admin on the site (or its tenant).',
    args: { input: t.arg({ type: CreatePoolInput, required: true }) },
    resolve: async (query, _root, { input }, ctx) => {
      const principal = requirePrincipal(ctx);
      const site = await ctx.prisma.site.findUnique({ where: { id: input.siteId } });
      if (!site) throw absent('Site', input.siteId);
      decide(principal, 'admin', siteResource(site));
      const name = checkName('input.name', input.name);
      const policy = await checkPolicy(ctx, DEFAULT_POLICY, input.policy, 'input.policy');
      const clash = await ctx.prisma.pool.findUnique({ where: { siteId_name: { siteId: site.id, name } } });
      if (clash) throw new AppError('CONFLICT', `the site already has a pool named "${name}"`, { field: 'input.name' });
      return ctx.prisma.pool.create({
        ...query,
        data: { id: newId('Pool'), tenantId: site.tenantId, siteId: site.id, name, policy: { ...policy } },
      });
    },
  }),
);

const UpdatePoolPolicyInput = builder.inputType('UpdatePoolPolicyInput', {
  fields: (t) => ({
    poolId: t.id({ required: true }),
    policy: t.field({ type: PoolPolicyInput, required: true, description: 'Fields left out keep their value.' }),
    expectedVersion: t.int({ required: false, description: 'Refuse with CONFLICT unless the pool is at this version.' }),
  }),
});

builder.mutationField('updatePoolPolicy', (t) =>
  t.prismaField({
    type: 'Pool',
    description: 'Needs admin on the pool (or its site or tenant).',
    args: { input: t.arg({ type: UpdatePoolPolicyInput, required: true }) },
    resolve: async (query, _root, { input }, ctx) => {
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
      return ctx.prisma.pool.findUniqueOrThrow({ ...query, where: { id: pool.id } });
    },
  }),
);
