import { newId } from '../../ids';
import { checkName } from './validate';
import { absent, decide } from '../../auth/decide';
import { requirePrincipal, type Context } from '../../context';
import { generateToken, hashToken } from '../../auth/tokens';
import { PERMISSIONS, type Grant } from '../../auth/permissions';
import { AppError, invalidInput } from '../../errors';

/** A grant as given: a permission on a scope (scopeId empty for the platform). */
export interface GrantIn {
  permission: string;
  scopeType: Grant['scopeType'];
  scopeId?: string | null;
}

/** Resolves a grant's scope and its lineage; the scope must belong to the token's tenant. */
export async function resolveGrant(ctx: Pick<Context, 'prisma'>, tenantId: string | null, grant: GrantIn, field: string): Promise<Omit<Grant, 'permission'> & { permission: string }> {
  if (!(PERMISSIONS as readonly string[]).includes(grant.permission)) {
    throw invalidInput(`${field}.permission`, `must be one of ${PERMISSIONS.join(', ')}`);
  }
  // The fabric is the platform's: a fabric permission on a tenant's scope would grant nothing.
  if (grant.permission.startsWith('fabric:') && grant.scopeType !== 'platform') {
    throw invalidInput(`${field}.scopeType`, 'this permission is held on the platform scope only');
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
  if (!found || found.tenantId !== tenantId) throw invalidInput(`${field}.scopeId`, `no such ${grant.scopeType} in the tenant`);
  return { ...base, siteId: found.siteId, poolId: found.poolId };
}

export interface CreateApiTokenInput {
  name: string;
  tenantId?: string | null;
  grants: GrantIn[];
  expiresAt?: Date | null;
}

/** createApiToken: needs admin on the token's tenant (platform admin for platform tokens). The token is returned once. */
export async function createApiToken(ctx: Context, input: CreateApiTokenInput): Promise<{ token: string; id: string }> {
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
}

/** revokeApiToken: needs admin on the token's tenant; revoking twice is harmless, revoking oneself is refused. */
export async function revokeApiToken(ctx: Context, id: string): Promise<void> {
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
}
