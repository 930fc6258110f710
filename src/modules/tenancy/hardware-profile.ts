import { builder } from '../../graphql/builder';
import { newId } from '../../ids';
import { checkName } from './validate';
import { AppError, invalidInput } from '../../errors';

/** Which driver serves each hardware interface of a machine. */
export interface DriverBindings {
  power: string;
  management: string;
  virtualMedia: string;
}

/** The BMC drivers the service knows: Redfish, IPMI and the vendor flavours of Redfish. */
export const BMC_DRIVERS = ['redfish', 'ipmi', 'idrac', 'ilo', 'xcc', 'cimc', 'supermicro'] as const;
/** What a driver can drive on its own: IPMI has no virtual media. */
export const VIRTUAL_MEDIA_DRIVERS: readonly string[] = BMC_DRIVERS.filter((d) => d !== 'ipmi');

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
      const name = checkName('input.name', input.name);
      const bindings = input.driverBindings;
      for (const key of ['power', 'management'] as const) {
        if (!(BMC_DRIVERS as readonly string[]).includes(bindings[key])) {
          throw invalidInput(`input.driverBindings.${key}`, `must be one of ${BMC_DRIVERS.join(', ')}`);
        }
      }
      if (bindings.virtualMedia !== 'none' && !VIRTUAL_MEDIA_DRIVERS.includes(bindings.virtualMedia)) {
        throw invalidInput('input.driverBindings.virtualMedia', `must be none or one of ${VIRTUAL_MEDIA_DRIVERS.join(', ')}`);
      }
      const clash = await ctx.prisma.hardwareProfile.findUnique({ where: { name } });
      if (clash) throw new AppError('CONFLICT', `a hardware profile named "${name}" already exists`, { field: 'input.name' });
      return ctx.prisma.hardwareProfile.create({
        ...query,
        data: { id: newId('HardwareProfile'), name, driverBindings: { ...bindings } },
      });
    },
  }),
);
