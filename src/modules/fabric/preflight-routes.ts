import type { Route } from '../../rest/routes';
import { schemaTypes, type JsonSchema } from '../../rest/schemas';

/**
 * POST /controlnode/fabric-config/preflight over the FabricPreflight operation
 * (schema/operations/fabric-preflight.graphql): the seed's snake_case fields, nested ones too.
 * The response has exactly the seed's fields; the capability the probe found is not one of them
 * (GET /controlnode/fabric-config reports it as frr_hmac_sha_capable).
 */

const { str, int, bool, strings } = schemaTypes;

const toCamel = (name: string) => name.replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase());
const toSnake = (name: string) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

function deepKeys(value: unknown, rename: (key: string) => string): unknown {
  if (Array.isArray(value)) return value.map((v) => deepKeys(v, rename));
  if (!value || typeof value !== 'object') return value;
  return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [rename(k), deepKeys(v, rename)]));
}

/** `input.nodeOverrides[3].underlayIp` -> `body.node_overrides[3].underlay_ip`. */
export function preflightRestField(field: string): string | null {
  const match = /^\$?input\.(.+)$/.exec(field);
  return match ? `body.${match[1]!.split('.').map(toSnake).join('.')}` : null;
}

const OVERRIDE: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['node_ip', 'underlay_iface_hint', 'underlay_ip'],
  properties: {
    node_ip: { ...str, description: 'a compute node\'s OS address' },
    underlay_bridge_name: { ...str, description: 'optional, derived from the CIDR when empty' },
    underlay_iface_hint: { ...str, description: 'the node\'s interface facing the underlay, e.g. eth1' },
    underlay_ip: { ...str, description: 'host/CIDR, e.g. "10.60.200.5/24"' },
  },
};

const BODY: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['underlay_cidr'],
  properties: {
    expected_nodes: { ...int, description: 'overrides the stored sizing hint for the capacity warning (0 = stored)' },
    node_overrides: { type: 'array', items: OVERRIDE },
    router_id_base: { ...str, description: 'VTEP pool base, falls back to the stored FabricConfig' },
    router_id_prefix_len: { ...int, description: 'VTEP pool prefix, falls back to the stored FabricConfig' },
    underlay_cidr: { ...str, description: 'IPv4 CIDR, e.g. "10.60.200.0/24"' },
  },
};

const NODE: JsonSchema = {
  type: 'object',
  required: ['node_ip', 'fqdn', 'mode', 'needs_override', 'bridge', 'bridge_mtu', 'underlay_ip', 'reason'],
  properties: {
    node_ip: str,
    fqdn: str,
    mode: { type: 'string', enum: ['reuse', 'needs_override', 'override', 'unreachable'] },
    needs_override: bool,
    bridge: { ...str, description: 'populated when mode=reuse (the matched bridge) or override (the bridge the rollout builds)' },
    bridge_mtu: { ...int, description: 'live kernel MTU of the matched bridge (mode=reuse only); 0 otherwise' },
    underlay_ip: { ...str, description: 'existing IP/CIDR on the bridge (reuse), or the override\'s' },
    reason: { ...str, description: 'human-readable explanation when mode is needs_override, override or unreachable' },
  },
};

const DRIFT: JsonSchema = {
  type: 'object',
  required: ['node_ip', 'fqdn', 'bridge', 'bridge_mtu'],
  properties: { node_ip: str, fqdn: str, bridge: str, bridge_mtu: int },
};

const POOL: JsonSchema = {
  type: 'object',
  required: ['router_id_base', 'router_id_prefix_len', 'capacity', 'expected_nodes', 'headroom', 'overalloc_warn'],
  properties: {
    router_id_base: str,
    router_id_prefix_len: int,
    capacity: { ...int, description: 'usable host count in the pool' },
    expected_nodes: { ...int, description: 'operator-declared sizing hint (the request\'s, else FabricConfig.expected_nodes)' },
    headroom: { ...int, description: 'capacity - expected_nodes' },
    overalloc_warn: { ...bool, description: 'true when headroom < 0' },
  },
};

const RESPONSE: JsonSchema = {
  type: 'object',
  required: ['underlay_cidr', 'ready', 'underlay_mtu', 'matched_bridges', 'mtu_drift', 'nodes', 'vtep_pool'],
  properties: {
    underlay_cidr: str,
    ready: { ...bool, description: 'true ⟺ every node ∈ {reuse} (also with no compute node: apply refuses that); needs_override or unreachable flips this to false' },
    underlay_mtu: {
      ...int,
      description: 'consensus MTU of the reuse nodes\' bridges: N when all agree; 0 with mtu_drift listing every (node, mtu) when they disagree; 0 with no drift when no node is reuse. A fabric-config vxlan_mtu other than it is refused.',
    },
    matched_bridges: strings,
    mtu_drift: { type: 'array', items: DRIFT },
    nodes: { type: 'array', items: NODE },
    vtep_pool: POOL,
  },
};

export const preflightRoutes: Route[] = [
  {
    method: 'POST',
    path: '/controlnode/fabric-config/preflight',
    operation: 'FabricPreflight',
    tag: 'fabric',
    summary: 'Preflight underlay resolution per compute node',
    description: 'Read-only: over SSH (host keys pinned on first contact, a per-node deadline) reads every compute node\'s addresses and links and returns whether it has a bridge with an IPv4 address inside underlay_cidr (mode reuse), needs an override (needs_override), is resolved by a node_overrides entry (override), or could not be reached (unreachable), each with a reason. Also probes FRR for OSPF hmac-sha-256 (FabricConfig.frr_hmac_sha_capable) and records the MTU consensus a fabric-config write is checked against. No kernel mutation occurs. Authorization: platform admin.',
    body: BODY,
    variables: ({ body }) => ({ input: deepKeys(body ?? {}, toCamel) }),
    respond: (data) => deepKeys(data.fabricPreflight, toSnake),
    response: RESPONSE,
    refusals: ['PERMISSION_DENIED', 'INVALID_CONFIG'],
    restField: preflightRestField,
    example: {
      body: {
        underlay_cidr: '10.60.200.0/24',
        expected_nodes: 40,
        node_overrides: [{ node_ip: '192.168.111.12', underlay_iface_hint: 'eth1', underlay_ip: '10.60.200.12/24' }],
      },
      response: {
        underlay_cidr: '10.60.200.0/24',
        ready: false,
        underlay_mtu: 9000,
        matched_bridges: ['br0'],
        mtu_drift: [],
        nodes: [
          { node_ip: '192.168.111.11', fqdn: 'node11.example', mode: 'reuse', needs_override: false, bridge: 'br0', bridge_mtu: 9000, underlay_ip: '10.60.200.11/24', reason: '' },
          { node_ip: '192.168.111.12', fqdn: 'node12.example', mode: 'override', needs_override: false, bridge: 'br-0a3cc800-24', bridge_mtu: 0, underlay_ip: '10.60.200.12/24', reason: 'operator override: bridge br-0a3cc800-24 on eth1 with 10.60.200.12/24, built by the rollout' },
        ],
        vtep_pool: { router_id_base: '10.255.0.1', router_id_prefix_len: 24, capacity: 254, expected_nodes: 40, headroom: 214, overalloc_warn: false },
      },
    },
  },
];
