import { builder } from '../../graphql/builder';
import { createHardwareProfile, type DriverBindings } from './tenancy';

/** The hardware profiles' GraphQL face; the rules are tenancy.ts's. */

const DriverBindingsRef = builder.objectRef<DriverBindings>('DriverBindings').implement({
  fields: (t) => ({
    power: t.exposeString('power'),
    management: t.exposeString('management'),
    virtualMedia: t.exposeString('virtualMedia'),
  }),
});
export { DriverBindingsRef };

export const HardwareProfileRef = builder.prismaNode('HardwareProfile', {
  id: { field: 'id' },
  nullable: true,
  fields: (t) => ({
    name: t.exposeString('name'),
    driverBindings: t.field({ type: DriverBindingsRef, resolve: (p) => p.driverBindings as unknown as DriverBindings }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
  }),
});

builder.queryField('hardwareProfiles', (t) =>
  t.prismaField({
    type: ['HardwareProfile'],
    description: 'The platform\'s hardware profiles (shared by all tenants).',
    resolve: (query, _root, _args, ctx) =>
      ctx.prisma.hardwareProfile.findMany({ ...query, orderBy: { name: 'asc' }, take: ctx.config.maxPageSize }),
  }),
);

const DriverBindingsInput = builder.inputType('DriverBindingsInput', {
  fields: (t) => ({
    power: t.string({ required: true }),
    management: t.string({ required: true }),
    virtualMedia: t.string({ required: true, description: 'A Redfish-family driver, or "none"' }),
  }),
});

const CreateHardwareProfileInput = builder.inputType('CreateHardwareProfileInput', {
  fields: (t) => ({
    name: t.string({ required: true }),
    driverBindings: t.field({ type: DriverBindingsInput, required: true }),
  }),
});

builder.mutationField('createHardwareProfile', (t) =>
  t.prismaField({
    type: 'HardwareProfile',
    description: 'Platform admin only.',
    authScopes: { platformAdmin: true },
    args: { input: t.arg({ type: CreateHardwareProfileInput, required: true }) },
    resolve: async (query, _root, { input }, ctx) => {
      const id = await createHardwareProfile(ctx, input);
      return ctx.prisma.hardwareProfile.findUniqueOrThrow({ ...query, where: { id } });
    },
  }),
);
