import { builder } from '../../graphql/builder';
import { readFilter } from '../../auth/decide';
import { requirePrincipal } from '../../context';
import { siteResource } from './resources';
import { createSite, updateSite } from './tenancy';

/** The sites' GraphQL face; the rules are tenancy.ts's. */

export const SiteRef = builder.prismaNode('Site', {
  id: { field: 'id' },
  nullable: true,
  fields: (t) => ({
    name: t.exposeString('name'),
    tenantId: t.exposeID('tenantId'),
    bmcNetworks: t.exposeStringList('bmcNetworks', { description: 'The CIDRs its BMCs may be at; empty: the service\'s BMC_NETWORKS, else any address but loopback, link-local, unspecified, multicast and broadcast.' }),
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
    bmcNetworks: t.stringList({ required: false, description: 'CIDRs its BMCs may be at (enroll, register and provision refuse an address outside them).' }),
  }),
});

const UpdateSiteInput = builder.inputType('UpdateSiteInput', {
  fields: (t) => ({
    id: t.id({ required: true }),
    bmcNetworks: t.stringList({ required: false, description: 'Replaces the site\'s BMC networks (CIDRs); [] falls back to BMC_NETWORKS.' }),
  }),
});

builder.mutationField('updateSite', (t) =>
  t.prismaField({
    type: 'Site',
    description: 'Needs admin on the site.',
    args: { input: t.arg({ type: UpdateSiteInput, required: true }) },
    resolve: async (query, _root, { input }, ctx) => {
      await updateSite(ctx, { id: String(input.id), bmcNetworks: input.bmcNetworks });
      return ctx.prisma.site.findUniqueOrThrow({ ...query, where: { id: String(input.id) } });
    },
  }),
);

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
