import { newId } from '../../ids';
import { checkName } from './validate';
import { absent, decide } from '../../auth/decide';
import { requirePrincipal, type Context } from '../../context';
import { siteResource, tenantResource } from './resources';
import { parseBmcNetworks } from '../metal/bmc-networks';
import { AppError, invalidInput } from '../../errors';

/**
 * The tenancy tree's own rules (tenants, sites, hardware profiles), as plain functions of a
 * context; pools and API tokens have their own files. The GraphQL faces are the *-graphql.ts files.
 */

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

/** createTenant: platform admin only; tenant names are unique. Returns the tenant's id. */
export async function createTenant(ctx: Context, rawName: string): Promise<string> {
  decide(requirePrincipal(ctx), 'admin', { type: 'platform' });
  const name = checkName('input.name', rawName);
  const clash = await ctx.prisma.tenant.findUnique({ where: { name } });
  if (clash) throw new AppError('CONFLICT', `a tenant named "${name}" already exists`, { field: 'input.name' });
  const id = newId('Tenant');
  await ctx.prisma.tenant.create({ data: { id, name } });
  return id;
}

/** createSite: admin on the tenant (the caller's by default); names are unique per tenant. Returns the site's id. */
export async function createSite(ctx: Context, input: { tenantId?: string | null; name: string; bmcNetworks?: readonly string[] | null }): Promise<string> {
  const principal = requirePrincipal(ctx);
  const tenantId = input.tenantId ?? principal.tenantId;
  if (!tenantId) throw invalidInput('input.tenantId', 'is required for a platform token');
  const tenant = await ctx.prisma.tenant.findUnique({ where: { id: tenantId } });
  if (!tenant) throw absent('Tenant', tenantId);
  decide(principal, 'admin', tenantResource(tenant));
  const name = checkName('input.name', input.name);
  const bmcNetworks = parseBmcNetworks(input.bmcNetworks ?? [], 'input.bmcNetworks');
  const clash = await ctx.prisma.site.findUnique({ where: { tenantId_name: { tenantId, name } } });
  if (clash) throw new AppError('CONFLICT', `the tenant already has a site named "${name}"`, { field: 'input.name' });
  const id = newId('Site');
  await ctx.prisma.site.create({ data: { id, tenantId, name, bmcNetworks } });
  return id;
}

/**
 * updateSite: admin on the site. bmcNetworks (CIDRs) replace the site's: the networks its BMCs may
 * be at (an empty list: BMC_NETWORKS, else the built-in refusals). Nodes already enrolled keep
 * their addresses; provision and register check them again.
 */
export async function updateSite(ctx: Context, input: { id: string; bmcNetworks?: readonly string[] | null }): Promise<void> {
  const principal = requirePrincipal(ctx);
  const site = await ctx.prisma.site.findUnique({ where: { id: input.id } });
  if (!site) throw absent('Site', input.id);
  decide(principal, 'admin', siteResource(site));
  if (input.bmcNetworks === undefined || input.bmcNetworks === null) return;
  const bmcNetworks = parseBmcNetworks(input.bmcNetworks, 'input.bmcNetworks');
  await ctx.prisma.site.update({ where: { id: site.id }, data: { bmcNetworks } });
}

/** createHardwareProfile: platform admin only; each interface bound to a driver that can serve it. Returns the profile's id. */
export async function createHardwareProfile(ctx: Context, input: { name: string; driverBindings: DriverBindings }): Promise<string> {
  decide(requirePrincipal(ctx), 'admin', { type: 'platform' });
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
  const id = newId('HardwareProfile');
  await ctx.prisma.hardwareProfile.create({ data: { id, name, driverBindings: { ...bindings } } });
  return id;
}
