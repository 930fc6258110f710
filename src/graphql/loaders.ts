import DataLoader from 'dataloader';
import type { Context } from '../context';
import type { BmcInfo, HardwareProfile, Pool, Site } from '../generated/prisma/client';

/**
 * Per-request loaders of rows by id, for relation fields whose parent did not bring the related row
 * with it: every pool (site, hardware profile) the request's rows point at is read in one
 * statement per tick, however many rows ask. They live as long as the request's context.
 */
const perRequest = new WeakMap<Context, Map<string, DataLoader<string, unknown>>>();

function loaderFor<T extends { id: string }>(ctx: Context, name: string, read: (ids: string[]) => Promise<T[]>): DataLoader<string, T | null> {
  let loaders = perRequest.get(ctx);
  if (!loaders) perRequest.set(ctx, (loaders = new Map()));
  let loader = loaders.get(name) as DataLoader<string, T | null> | undefined;
  if (!loader) {
    loader = new DataLoader<string, T | null>(async (ids) => {
      const byId = new Map((await read([...ids])).map((row) => [row.id, row]));
      return ids.map((id) => byId.get(id) ?? null);
    });
    loaders.set(name, loader as DataLoader<string, unknown>);
  }
  return loader;
}

export const poolById = (ctx: Context, id: string) => loaderFor<Pool>(ctx, 'pool', (ids) => ctx.prisma.pool.findMany({ where: { id: { in: ids } } })).load(id);
export const siteById = (ctx: Context, id: string) => loaderFor<Site>(ctx, 'site', (ids) => ctx.prisma.site.findMany({ where: { id: { in: ids } } })).load(id);
export const hardwareProfileById = (ctx: Context, id: string) =>
  loaderFor<HardwareProfile>(ctx, 'hardwareProfile', (ids) => ctx.prisma.hardwareProfile.findMany({ where: { id: { in: ids } } })).load(id);

/** A node's control-node record (bmc_info), by node id: null for a node the control-node API never recorded. */
export const bmcInfoOfNode = (ctx: Context, nodeId: string) =>
  loaderFor<BmcInfo & { id: string }>(ctx, 'bmcInfo', async (ids) =>
    (await ctx.prisma.bmcInfo.findMany({ where: { nodeId: { in: ids } } })).map((row) => ({ ...row, id: row.nodeId }))).load(nodeId);

/**
 * A relation of a row: the related row when the parent was read with it (a join), else loaded by
 * id; null when there is no id (an optional relation not set).
 */
export function related<T>(joined: T | null | undefined, id: string | null, load: (id: string) => Promise<T | null>): T | null | Promise<T | null> {
  if (joined !== undefined) return joined;
  return id === null ? null : load(id);
}
