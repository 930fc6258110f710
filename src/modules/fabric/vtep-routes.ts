import { notFound } from '../../errors';
import type { Route } from '../../rest/routes';
import { schemaTypes, type JsonSchema } from '../../rest/schemas';

/** GET /controlnode/fabric-config/vtep-pool over the FabricVtepPool operation (schema/operations/fabric-vtep.graphql). */

const { str, int, bool } = schemaTypes;

const POOL_VIEW: JsonSchema = {
  type: 'object',
  title: 'FabricVtepPool',
  required: ['allocated', 'exhausted', 'last_allocated_ip', 'prefix_length', 'remaining', 'router_id_base', 'start_ip', 'subnet_cidr', 'total_usable', 'outside_pool'],
  properties: {
    allocated: { ...int, description: 'Number of IPs already assigned (inside the current pool)' },
    exhausted: { ...bool, description: 'True if no IPs remain' },
    last_allocated_ip: { ...str, description: 'Most recently assigned IP; empty when none' },
    prefix_length: { ...int, description: 'Subnet prefix (e.g. 24)' },
    remaining: { ...int, description: 'IPs still available (the fabric switch\'s peering IP, when inside the pool, is reserved and not counted)' },
    router_id_base: { ...str, description: 'Base IP (e.g. "10.255.0.1")' },
    start_ip: { ...str, description: 'First usable IP in the pool' },
    subnet_cidr: { ...str, description: 'Network CIDR (e.g. "10.255.0.0/24"); empty when the config has no pool' },
    total_usable: { ...int, description: 'Total usable IPs (excluding .0 and .255 per /24 block)' },
    outside_pool: { ...int, description: 'IPs held that the current pool does not give out (from a former pool, or the switch\'s peering IP); the next rollout of each such node moves it into the current pool' },
  },
};

const example = {
  allocated: 3, exhausted: false, last_allocated_ip: '10.255.0.3', prefix_length: 24, remaining: 251, router_id_base: '10.255.0.1',
  start_ip: '10.255.0.1', subnet_cidr: '10.255.0.0/24', total_usable: 254, outside_pool: 0,
};

export const vtepRoutes: Route[] = [
  {
    method: 'GET',
    path: '/controlnode/fabric-config/vtep-pool',
    operation: 'FabricVtepPool',
    tag: 'fabric',
    summary: 'Get VTEP IP pool status',
    description: 'Returns the current capacity of the VTEP loopback IP pool: total, allocated, remaining, and whether the pool is exhausted. Reads from the fabric config. NOT_FOUND when no fabric config is stored. Authorization: a platform-scoped grant (any permission).',
    variables: () => ({}),
    respond: (data) => {
      const pool = data.fabricVtepPool as Record<string, unknown> | null;
      if (!pool) throw notFound('fabric config');
      return {
        allocated: pool.allocated, exhausted: pool.exhausted, last_allocated_ip: pool.lastAllocatedIp, prefix_length: pool.prefixLength,
        remaining: pool.remaining, router_id_base: pool.routerIdBase, start_ip: pool.startIp, subnet_cidr: pool.subnetCidr,
        total_usable: pool.totalUsable, outside_pool: pool.outsidePool,
      };
    },
    response: POOL_VIEW,
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND'],
    example: { response: example },
  },
];
