import { builder } from '../../graphql/builder';
import { decide } from '../../auth/decide';
import { requirePrincipal } from '../../context';
import { vtepPoolStatus, type VtepPoolStatus } from './vtep';

/** The seed's GET /controlnode/fabric-config/vtep-pool, in GraphQL. */
export const FabricVtepPoolRef = builder.objectRef<VtepPoolStatus>('FabricVtepPool').implement({
  description: 'Capacity and use of the VTEP loopback pool (router_id_base / router_id_prefix_len of the fabric config).',
  fields: (t) => ({
    routerIdBase: t.exposeString('routerIdBase', { description: 'Base IP, e.g. 10.255.0.1' }),
    prefixLength: t.exposeInt('prefixLength', { description: 'The pool\'s prefix length, e.g. 24' }),
    subnetCidr: t.exposeString('subnetCidr', { description: 'The pool\'s network, e.g. 10.255.0.0/24; empty when the config has no pool' }),
    startIp: t.exposeString('startIp', { description: 'First usable address of the pool' }),
    totalUsable: t.exposeInt('totalUsable', { description: 'Usable addresses: every /24 block loses its .0 and .255 (below /24); network and broadcast (from /24 on)' }),
    allocated: t.exposeInt('allocated', { description: 'Addresses held by compute nodes inside the current pool' }),
    remaining: t.exposeInt('remaining', { description: 'totalUsable - allocated, less the fabric switch\'s peering IP when it lies in the pool (reserved: no node gets it)' }),
    exhausted: t.exposeBoolean('exhausted', { description: 'True when no address remains' }),
    lastAllocatedIp: t.exposeString('lastAllocatedIp', { description: 'The most recently allocated address inside the pool; empty when none' }),
    outsidePool: t.exposeInt('outsidePool', {
      description: 'Addresses held that the current pool does not give out: from a former pool (after router_id_base / router_id_prefix_len changed) or the switch\'s peering IP. Not counted above; the next rollout of each such node moves it into the current pool',
    }),
  }),
});

builder.queryField('fabricVtepPool', (t) =>
  t.field({
    type: FabricVtepPoolRef,
    nullable: true,
    description: 'The VTEP pool\'s status; null when no fabric config is stored. Needs a platform-scoped grant.',
    resolve: (_root, _args, ctx) => {
      decide(requirePrincipal(ctx), 'read', { type: 'platform' });
      return vtepPoolStatus(ctx.prisma);
    },
  }),
);
