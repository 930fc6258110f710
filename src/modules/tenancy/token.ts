import { builder } from '../../graphql/builder';
import { newId } from '../../ids';
import { checkName } from './validate';
import { absent, decide, isPlatformAdmin } from '../../auth/decide';
import { requirePrincipal, type Context } from '../../context';
import { generateToken, hashToken } from '../../auth/tokens';
import { PERMISSIONS, SCOPE_TYPES, type Grant, type Principal } from '../../auth/permissions';
import { AppError, invalidInput } from '../../errors';

const ScopeTypeEnum = builder.enumType('ScopeType', { values: SCOPE_TYPES });

const GrantRef = builder.objectRef<Grant>('Grant').implement({
  description: 'A permission on a scope (and everything under it).',
  fields: (t) => ({
    permission: t.exposeString('permission', { description: `One of: ${PERMISSIONS.join(', ')}` }),
    scopeType: t.expose('scopeType', { type: ScopeTypeEnum }),
    scopeId: t.exposeID('scopeId', { nullable: true }),
  }),
});

builder.prismaNode('ApiToken', {
  id: { field: 'id' },
  nullable: true,
  fields: (t) => ({
    name: t.exposeString('name'),
    tenantId: t.exposeID('tenantId', { nullable: true }),
    grants: t.field({
      type: [GrantRef],
      select: { grants: true },
      resolve: (token) => token.grants.map((g) => ({ ...g, permission: g.permission as Grant['permission'] })),
    }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
    expiresAt: t.expose('expiresAt', { type: 'DateTime', nullable: true }),
    revokedAt: t.expose('revokedAt', { type: 'DateTime', nullable: true }),
  }),
});

const Viewer = builder.objectRef<Principal>('Viewer').implement({
  description: 'Who the bearer token says the caller is.',
  fields: (t) => ({
    tokenId: t.exposeID('tokenId'),
    name: t.exposeString('name'),
    tenantId: t.exposeID('tenantId', { nullable: true }),
    platformAdmin: t.boolean({ resolve: (p) => isPlatformAdmin(p) }),
    grants: t.expose('grants', { type: [GrantRef] }),
  }),
});

builder.queryField('viewer', (t) => t.field({ type: Viewer, resolve: (_root, _args, ctx) => requirePrincipal(ctx) }));

const GrantInput = builder.inputType('GrantInput', {
  fields: (t) => ({
    permission: t.string({ required: true, description: `One of: ${PERMISSIONS.join(', ')}` }),
    scopeType: t.field({ type: ScopeTypeEnum, required: true }),
    scopeId: t.id({ required: false, description: 'Required for every scope but platform.' }),
  }),
});

const CreateApiTokenInput = builder.inputType('CreateApiTokenInput', {
  fields: (t) => ({
    name: t.string({ required: true }),
    tenantId: t.id({ required: false, description: 'Defaults to the caller\'s tenant; omit for a platform token.' }),
    grants: t.field({ type: [GrantInput], required: true }),
    expiresAt: t.field({ type: 'DateTime', required: false }),
  }),
});

const CreatedApiToken = builder.objectRef<{ token: string; id: string }>('CreatedApiToken').implement({
  fields: (t) => ({
    token: t.exposeString('token', { description: 'The bearer token. Shown once: only its hash is stored.' }),
    apiToken: t.prismaField({
      type: 'ApiToken',
      resolve: (query, parent, _args, ctx) => ctx.prisma.apiToken.findUniqueOrThrow({ ...query, where: { id: parent.id } }),
    }),
  }),
});

type GrantIn = typeof GrantInput.$inferInput;

/** Resolves a grant's scope and its lineage; the scope must belong to the token's tenant. */
export async function resolveGrant(ctx: Pick<Context, 'prisma'>, tenantId: string | null, grant: GrantIn, field: string): Promise<Omit<Grant, 'permission'> & { permission: string }> {
  if (!(PERMISSIONS as readonly string[]).includes(grant.permission)) {
    throw invalidInput(`${field}.permission`, `must be one of ${PERMISSIONS.join(', ')}`);
  }
  const base = { permission: grant.permission, scopeType: grant.scopeType, scopeId: grant.scopeId ?? null, siteId: null, poolId: null };
  if (grant.scopeType === 'platform') {
    if (tenantId !== null) throw invalidInput(`${field}.scopeType`, 'a tenant token cannot hold a platform grant');
    if (grant.scopeId) throw invalidInput(`${field}.scopeId`, 'must be empty for the platform scope');
    return base;
  }
  if (!grant.scopeId) throw invalidInput(`${field}.scopeId`, `is required for a ${grant.scopeType} scope`);
  if (tenantId === null) throw invalidInput(`${field}.scopeType`, 'a platform token holds platform grants only; give tenantId');
  const id = grant.scopeId;
  const owner = async (): Promise<{ tenantId: string; siteId: string | null; poolId: string | null } | null> => {
    switch (grant.scopeType) {
      case 'tenant':
        return (await ctx.prisma.tenant.findUnique({ where: { id } })) ? { tenantId: id, siteId: null, poolId: null } : null;
      case 'site': {
        const site = await ctx.prisma.site.findUnique({ where: { id } });
        return site && { tenantId: site.tenantId, siteId: site.id, poolId: null };
      }
      case 'pool': {
        const pool = await ctx.prisma.pool.findUnique({ where: { id } });
        return pool && { tenantId: pool.tenantId, siteId: pool.siteId, poolId: pool.id };
      }
      default: {
        const node = await ctx.prisma.node.findUnique({ where: { id } });
        return node && { tenantId: node.tenantId, siteId: node.siteId, poolId: node.poolId };
      }
    }
  };
  const found = await owner();
  if (!found || found.tenantId !== tenantId) throw invalidInput(`${field}.scopeId`, `no ${grant.scopeType} ${id} in tenant ${tenantId}`);
  return { ...base, siteId: found.siteId, poolId: found.poolId };
}

builder.mutationField('createApiToken', (t) =>
  t.field({
    type: CreatedApiToken,
    description: 'Needs admin on the token\'s tenant (platform admin for platform tokens).',
    args: { input: t.arg({ type: CreateApiTokenInput, required: true }) },
    resolve: async (_root, { input }, ctx) => {
      const principal = requirePrincipal(ctx);
      const name = checkName('input.name', input.name);
      const tenantId = input.tenantId ?? principal.tenantId;
      if (tenantId === null) {
        decide(principal, 'admin', { type: 'platform' });
      } else {
        const tenant = await ctx.prisma.tenant.findUnique({ where: { id: tenantId } });
        if (!tenant) throw absent('Tenant', tenantId);
        decide(principal, 'admin', { type: 'tenant', id: tenant.id, tenantId: tenant.id });
      }
      if (input.grants.length === 0 || input.grants.length > 100) throw invalidInput('input.grants', 'must hold 1 to 100 grants');
      if (input.expiresAt && input.expiresAt.getTime() <= Date.now()) throw invalidInput('input.expiresAt', 'must be in the future');
      const grants = [];
      for (const [i, grant] of input.grants.entries()) grants.push(await resolveGrant(ctx, tenantId, grant, `input.grants[${i}]`));
      const token = generateToken();
      const id = newId('ApiToken');
      await ctx.prisma.apiToken.create({
        data: {
          id,
          name,
          tenantId,
          hash: hashToken(token),
          expiresAt: input.expiresAt ?? null,
          createdBy: principal.tokenId,
          grants: { create: grants.map((g) => ({ id: newId('ApiGrant'), ...g, scopeType: g.scopeType as Grant['scopeType'] })) },
        },
      });
      ctx.log.info({ tokenId: id, tenantId, by: principal.tokenId }, 'api token created');
      return { token, id };
    },
  }),
);

builder.mutationField('revokeApiToken', (t) =>
  t.prismaField({
    type: 'ApiToken',
    description: 'Needs admin on the token\'s tenant. Revoking twice is harmless.',
    args: { id: t.arg.id({ required: true }) },
    resolve: async (query, _root, { id }, ctx) => {
      const principal = requirePrincipal(ctx);
      const token = await ctx.prisma.apiToken.findUnique({ where: { id } });
      if (!token) throw absent('ApiToken', id);
      // Decided on the token's tenant, but refused in the token's name: never the owner's.
      const subject = { type: 'ApiToken' as const, id };
      if (token.tenantId === null) decide(principal, 'admin', { type: 'platform' }, subject);
      else decide(principal, 'admin', { type: 'tenant', id: token.tenantId, tenantId: token.tenantId }, subject);
      if (token.id === principal.tokenId) throw new AppError('INVALID_INPUT', 'id: a token cannot revoke itself', { field: 'id' });
      await ctx.prisma.apiToken.updateMany({ where: { id, revokedAt: null }, data: { revokedAt: new Date() } });
      ctx.tokens.forget(id);
      ctx.log.info({ tokenId: id, by: principal.tokenId }, 'api token revoked');
      return ctx.prisma.apiToken.findUniqueOrThrow({ ...query, where: { id } });
    },
  }),
);
