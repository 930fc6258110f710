import { builder } from '../../graphql/builder';
import { readFilter } from '../../auth/decide';
import { requirePrincipal } from '../../context';
import { SiteRef } from './site-graphql';
import { related, siteById } from '../../graphql/loaders';
import type { Site } from '../../generated/prisma/client';
import { createPool, readPolicy, updatePoolPolicy, type PoolPolicy } from './pool';

/** The pools' GraphQL face; the rules are pool.ts's. */

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
      const id = await createPool(ctx, input);
      return ctx.prisma.pool.findUniqueOrThrow({ ...query, where: { id } });
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
      const id = await updatePoolPolicy(ctx, input);
      return ctx.prisma.pool.findUniqueOrThrow({ ...query, where: { id } });
    },
  }),
);
