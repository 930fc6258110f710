import { builder } from '../../graphql/builder';
import { newId } from '../../ids';
import { checkName } from './validate';
import { decide } from '../../auth/decide';
import { requirePrincipal } from '../../context';
import { tenantResource } from './resources';
import { AppError } from '../../errors';

export const TenantRef = builder.prismaNode('Tenant', {
  id: { field: 'id' },
  nullable: true,
  fields: (t) => ({
    name: t.exposeString('name'),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
  }),
});

builder.queryField('tenants', (t) =>
  t.prismaField({
    type: ['Tenant'],
    description: 'Tenants the caller can see: all for a platform admin, else its own.',
    resolve: (query, _root, _args, ctx) => {
      const principal = requirePrincipal(ctx);
      return ctx.prisma.tenant.findMany({
        ...query,
        where: principal.tenantId ? { id: principal.tenantId } : undefined,
        orderBy: { name: 'asc' },
        take: ctx.config.maxPageSize,
      });
    },
  }),
);

const CreateTenantInput = builder.inputType('CreateTenantInput', {
  fields: (t) => ({ name: t.string({ required: true }) }),
});

builder.mutationField('createTenant', (t) =>
  t.prismaField({
    type: 'Tenant',
    description: 'Platform admin only.',
    authScopes: { platformAdmin: true },
    args: { input: t.arg({ type: CreateTenantInput, required: true }) },
    resolve: async (query, _root, { input }, ctx) => {
      decide(requirePrincipal(ctx), 'admin', { type: 'platform' });
      const name = checkName('input.name', input.name);
      const clash = await ctx.prisma.tenant.findUnique({ where: { name } });
      if (clash) throw new AppError('CONFLICT', `a tenant named "${name}" already exists`, { field: 'input.name' });
      return ctx.prisma.tenant.create({ ...query, data: { id: newId('Tenant'), name } });
    },
  }),
);

export { tenantResource };
