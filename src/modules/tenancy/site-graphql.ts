import { builder } from '../../graphql/builder';
import { readFilter } from '../../auth/decide';
import { requirePrincipal } from '../../context';
import { siteResource } from './resources';
import { createSite } from './tenancy';

/** The sites' GraphQL face; the rules are tenancy.ts's. */

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
      const id = await createSite(ctx, input);
      return ctx.prisma.site.findUniqueOrThrow({ ...query, where: { id } });
    },
  }),
);

export { siteResource };
