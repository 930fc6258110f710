import { builder } from '../../graphql/builder';
import { requirePrincipal } from '../../context';
import { tenantResource } from './resources';
import { createTenant } from './tenancy';

/** The tenants' GraphQL face; the rules are tenancy.ts's. */

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
      const id = await createTenant(ctx, input.name);
      return ctx.prisma.tenant.findUniqueOrThrow({ ...query, where: { id } });
    },
  }),
);

export { tenantResource };
