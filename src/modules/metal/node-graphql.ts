import { builder } from '../../graphql/builder';
import { readFilter } from '../../auth/decide';
import { requirePrincipal } from '../../context';
import { checkPageArgs } from '../../graphql/pagination';
import { DriverBindingsRef, HardwareProfileRef } from '../tenancy/hardware-profile-graphql';
import type { DriverBindings } from '../tenancy/tenancy';
import { PoolRef } from '../tenancy/pool-graphql';
import { SiteRef } from '../tenancy/site-graphql';
import { hardwareProfileById, poolById, related, siteById } from '../../graphql/loaders';
import type { NodePageRow } from './node-rows';
import type { Pool, Site } from '../../generated/prisma/client';
import { ProvisionState as ProvisionStates } from '../../generated/prisma/enums';
import { connectionQuery, nodeListWhere, nodePageStatement, pageShape, readNodePage, wrapConnection } from './node-page';

export const ProvisionStateEnum = builder.enumType('ProvisionState', {
  values: Object.values(ProvisionStates),
});

interface BmcView {
  address: string;
  driver: string;
  driverOptions: unknown;
  credentialsSet: boolean;
}

const Bmc = builder.objectRef<BmcView>('Bmc').implement({
  description: 'How the node\'s BMC is reached. Credentials are never returned, only whether they are set.',
  fields: (t) => ({
    address: t.exposeString('address'),
    driver: t.exposeString('driver'),
    driverOptions: t.expose('driverOptions', { type: 'JSON' }),
    credentialsSet: t.exposeBoolean('credentialsSet'),
  }),
});

const LastError = builder.objectRef<{ code: string; message: string }>('NodeError').implement({
  fields: (t) => ({ code: t.exposeString('code'), message: t.exposeString('message') }),
});

/** The metal view of a node. */
const MetalNodeRef = builder.prismaNode('Node', {
  name: 'MetalNode',
  id: { field: 'id' },
  nullable: true,
  fields: (t) => ({
    name: t.exposeString('name', { nullable: true }),
    tenantId: t.exposeID('tenantId'),
    siteId: t.exposeID('siteId'),
    poolId: t.exposeID('poolId'),
    // Relations from the joined row when the read brought them (a page of nodes), else by id
    // through the request's loaders: one statement per relation, however many nodes ask.
    site: t.field({ type: SiteRef, resolve: (n, _a, ctx) => related((n as NodePageRow).site, n.siteId, (id) => siteById(ctx, id)) as Promise<Site> }),
    pool: t.field({ type: PoolRef, resolve: (n, _a, ctx) => related((n as NodePageRow).pool, n.poolId, (id) => poolById(ctx, id)) as Promise<Pool> }),
    provisionState: t.expose('provisionState', { type: ProvisionStateEnum }),
    failedFrom: t.expose('failedFrom', { type: ProvisionStateEnum, nullable: true }),
    lastError: t.field({
      type: LastError,
      nullable: true,
      resolve: (n) => (n.lastErrorCode ? { code: n.lastErrorCode, message: n.lastErrorMessage ?? '' } : null),
    }),
    maintenance: t.exposeBoolean('maintenance'),
    bmc: t.field({
      type: Bmc,
      resolve: (n) => ({
        address: n.bmcAddress,
        driver: n.bmcDriver,
        driverOptions: n.bmcDriverOptions,
        credentialsSet: n.bmcCredentialsRef !== null,
      }),
    }),
    addresses: t.exposeStringList('addresses'),
    macs: t.exposeStringList('macs'),
    productUuid: t.exposeString('productUuid', { nullable: true }),
    hardwareProfile: t.field({
      type: HardwareProfileRef,
      nullable: true,
      resolve: (n, _a, ctx) => related((n as NodePageRow).hardwareProfile, n.hardwareProfileId, (id) => hardwareProfileById(ctx, id)),
    }),
    driverBindings: t.field({ type: DriverBindingsRef, nullable: true, resolve: (n) => {
        // Bindings are resolved at enrollment; until then the column holds {}.
        const bindings = n.driverBindings as Partial<DriverBindings> | null;
        return bindings?.power && bindings.management && bindings.virtualMedia ? (bindings as DriverBindings) : null;
      } }),
    inventory: t.expose('inventory', { type: 'JSON', nullable: true }),
    profileId: t.exposeString('profileId', { nullable: true }),
    profileVersion: t.exposeInt('profileVersion', { nullable: true }),
    role: t.exposeString('role', { nullable: true }),
    workflowId: t.exposeString('workflowId', { nullable: true }),
    version: t.exposeInt('version'),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
    updatedAt: t.expose('updatedAt', { type: 'DateTime' }),
  }),
});

const NodeFilter = builder.inputType('NodeFilter', {
  fields: (t) => ({
    siteId: t.id({ required: false }),
    poolId: t.id({ required: false }),
    provisionState: t.field({ type: ProvisionStateEnum, required: false }),
    maintenance: t.boolean({ required: false }),
  }),
});

/** How many nodes of one site and pool are in one provision state. */
interface NodeStateCount {
  siteId: string;
  poolId: string;
  provisionState: string;
  count: number;
}

const NodeStateCountRef = builder.objectRef<NodeStateCount>('NodeStateCount').implement({
  description: 'How many of the nodes the caller may read are in one provision state, in one site and pool.',
  fields: (t) => ({
    siteId: t.exposeID('siteId'),
    poolId: t.exposeID('poolId'),
    provisionState: t.field({ type: ProvisionStateEnum, resolve: (c) => c.provisionState as keyof typeof ProvisionStates }),
    count: t.exposeInt('count'),
  }),
});

builder.queryField('nodeCounts', (t) =>
  t.field({
    type: [NodeStateCountRef],
    description: 'The nodes the caller may read, counted by site, pool and provision state (one GROUP BY, however many nodes): what a status page or a dashboard polls instead of listing every node. Only non-zero counts are listed, ordered by site, pool and state.',
    args: { filter: t.arg({ type: NodeFilter, required: false }) },
    resolve: async (_root, args, ctx) => {
      const access = readFilter(requirePrincipal(ctx), 'node');
      const groups = await ctx.prisma.node.groupBy({
        by: ['siteId', 'poolId', 'provisionState'],
        where: nodeListWhere(access, args.filter ?? {}),
        _count: { _all: true },
        orderBy: [{ siteId: 'asc' }, { poolId: 'asc' }, { provisionState: 'asc' }],
      });
      return groups.map((g) => ({ siteId: g.siteId, poolId: g.poolId, provisionState: g.provisionState, count: g._count._all }));
    },
  }),
);

builder.queryField('nodes', (t) =>
  t.connection({
    type: MetalNodeRef,
    description: 'Metal nodes the caller may read, oldest first (ids are time-ordered).',
    args: { filter: t.arg({ type: NodeFilter, required: false }) },
    resolve: async (_root, args, ctx, info) => {
      checkPageArgs(ctx, args);
      const access = readFilter(requirePrincipal(ctx), 'node');
      const where = nodeListWhere(access, args.filter ?? {});
      // checkPageArgs refuses larger pages with an error; the default page is 50.
      const page = connectionQuery(args, ctx.config.maxPageSize, 50);
      // One statement, with the relations and the columns the selection reads (node-page.ts),
      // for every read scope whereSql translates; Prisma otherwise.
      const { include, only } = pageShape(info);
      const statement = nodePageStatement({ ...page, include }, where, only);
      const rows = statement
        ? await readNodePage(ctx, statement)
        : await ctx.prisma.node.findMany({ ...page, include: { pool: include.pool, site: include.site, hardwareProfile: include.hardwareProfile }, where, orderBy: { id: 'asc' } });
      return wrapConnection(rows, args, page.take);
    },
  }),
);
