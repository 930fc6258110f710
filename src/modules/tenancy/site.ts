import { builder } from '../../graphql/builder';
import { newId } from '../../ids';
import { checkName } from './validate';
import { absent, decide, readFilter } from '../../auth/decide';
import { requirePrincipal } from '../../context';
import { siteResource, tenantResource } from './resources';
import { AppError, invalidInput } from '../../errors';

export const SiteRef = builder.prismaNode('Site', {
  id: { field: 'id' },
  nullable: true,
  fields: (t) => ({
    name: t.exposeString('name'),
    tenantId: t.exposeID('tenantId'),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
  }),
});

builder.queryField('sites', (t) =>
  t.prismaField({
    type: ['Site'],
    description: 'Sites the caller may read, by name.',
    resolve: (query, _root, _args, ctx) => {
      const filter = readFilter(requirePrincipal(ctx), 'site');
      return ctx.prisma.site.findMany({ ...query, where: filter ?? undefined, orderBy: { name: 'asc' }, take: ctx.config.maxPageSize });
    },
  }),
);

const CreateSiteInput = builder.inputType('CreateSiteInput', {
  fields: (t) => ({
    tenantId: t.id({ required: false, description: 'Defaults to the caller\'s tenant.' }),
    name: t.string({ required: true }),
  }),
});

builder.mutationField('createSite', (t) =>
  t.prismaField({
    type: 'Site',
    description: 'Needs admin on the tenant.',
    args: { input: t.arg({ type: CreateSiteInput, required: true }) },
    resolve: async (query, _root, { input }, ctx) => {
      const principal = requirePrincipal(ctx);
      const tenantId = input.tenantId ?? principal.tenantId;
      if (!tenantId) throw invalidInput('input.tenantId', 'is required for a platform token');
      const tenant = await ctx.prisma.tenant.findUnique({ where: { id: tenantId } });
      if (!tenant) throw absent('Tenant', tenantId);
      decide(principal, 'admin', tenantResource(tenant));
      const name = checkName('input.name', input.name);
      const clash = await ctx.prisma.site.findUnique({ where: { tenantId_name: { tenantId, name } } });
      if (clash) throw new AppError('CONFLICT', `the tenant already has a site named "${name}"`, { field: 'input.name' });
      return ctx.prisma.site.create({ ...query, data: { id: newId('Site'), tenantId, name } });
    },
  }),
);

export { siteResource };
