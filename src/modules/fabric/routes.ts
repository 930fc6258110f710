import { notFound } from '../../errors';
import type { Route } from '../../rest/routes';
import { schemaTypes, type JsonSchema } from '../../rest/schemas';
import { EVPN_CAPABLE_NOS, OSPF_AUTH_TYPES, ROLLOUT_STATUSES } from './validate';
import { rolloutRoutes } from './rollout-routes';
import { preflightRoutes } from './preflight-routes';

/**
 * The seed's /controlnode/fabric-config routes: snake_case on the wire, the GraphQL operations of
 * schema/operations/fabric.graphql underneath (camelCase), so every rule is the resolver's.
 */

const { str, int, bool, nullable } = schemaTypes;

const toCamel = (name: string) => name.replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase());
const toSnake = (name: string) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** `input.fabricSwitchAs` (a GraphQL error's field) -> `body.fabric_switch_as`. */
export function fabricRestField(field: string): string | null {
  const match = /^\$?input\.([A-Za-z0-9]+)(.*)$/.exec(field);
  return match ? `body.${toSnake(match[1]!)}${match[2]}` : null;
}

function snakeKeys(value: unknown): unknown {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return value;
  return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [toSnake(k), v]));
}

const asNumber = { ...int, description: 'an AS number, 1..4294967295' };

/** What POST writes, by its wire name (the GraphQL input field is its camelCase). */
const WRITABLE: Record<string, JsonSchema> = {
  as: { ...asNumber, description: 'BGP core AS, 1..4294967295 (required on create)' },
  fabric_switch_as: { ...asNumber, description: '0 = none; when it differs from `as` the fabric is eBGP' },
  advertise_all_vni: bool,
  bfd_enabled: bool,
  external_route_reflector: { ...bool, description: 'true: the route reflector lives on the fabric switch; needs fabric_switch_peering_ip, fabric_switch_as and a BGP-EVPN-capable fabric_switch_nos' },
  bgp_password: { ...str, description: 'write-only; empty = unchanged; never returned' },
  clear_bgp_password: { ...bool, description: 'removes the BGP password' },
  fabric_switch_name: str,
  fabric_switch_nos: { ...str, description: `${EVPN_CAPABLE_NOS.join(', ')}, other, or empty` },
  fabric_switch_peering_ip: { ...str, description: 'Loopback IP = BGP peer address (IPv4)' },
  fabric_switch_role: { ...str, description: 'spine, leaf, border-leaf, or empty' },
  management_cidr: { ...str, description: 'IPv4 CIDR, e.g. 192.168.111.0/24' },
  router_id_base: { ...str, description: 'VTEP loopback start IP, e.g. 10.255.0.1' },
  router_id_prefix_len: { ...int, description: 'VTEP pool prefix length, 8..30 (0 = unset)' },
  router_id_cidr: { ...str, description: 'A.B.C.D/N instead of router_id_base + router_id_prefix_len; never stored' },
  ospf_enabled: bool,
  ospf_area: str,
  ospf_fabric_interface: { ...str, description: 'interface facing the fabric switch, e.g. eth1' },
  ospf_hello_interval: int,
  ospf_dead_interval: int,
  ospf_auto_ref_bw: int,
  ospf_auth_type: { ...str, description: `${OSPF_AUTH_TYPES.filter(Boolean).join(', ')} or empty; hmac-sha-256 only once the preflight probe proved FRR can` },
  ospf_auth_key: { ...str, description: 'write-only; empty = unchanged; never returned' },
  ospf_auth_key_id: { ...int, description: '1..255' },
  clear_ospf_auth_key: bool,
  expected_nodes: { ...int, description: '1..1000 (0 = unset, accepted only on a row that predates sizing hints)' },
  expected_vms: { ...int, description: '1..10000 (same rule as expected_nodes)' },
  vxlan_mtu: { ...int, description: '1280..9216' },
  public_mtu: { ...int, description: '1280..9216, 0 = unset' },
};

/**
 * Accepted and ignored, so a client may POST back what GET returned (the seed's request and
 * response objects are one shape): the read-only fields. frr_hmac_sha_capable is the preflight
 * probe's finding and only the probe writes it: input for it changes nothing.
 * The switch re-config ack fields are accepted for the same reason; the ack gate that reads them
 * is a later session's (it needs the per-NOS snippet renderer).
 */
const IGNORED: Record<string, JsonSchema> = {
  bgp_mode: str,
  bgp_password_is_set: bool,
  ospf_auth_key_is_set: bool,
  rollout_status: str,
  frr_hmac_sha_capable: nullable(bool),
  physnet: {},
  last_job: {},
  version: int,
  created_at: str,
  updated_at: str,
  switch_acked: bool,
  switch_nos: str,
  switch_snippet_hash: str,
  acked_by: str,
  skip_switch_ack: bool,
};

const CONFIG_VIEW: JsonSchema = {
  type: 'object',
  title: 'FabricConfig',
  required: [
    'as', 'fabric_switch_as', 'bgp_mode', 'advertise_all_vni', 'bfd_enabled', 'external_route_reflector', 'bgp_password_is_set',
    'fabric_switch_name', 'fabric_switch_nos', 'fabric_switch_peering_ip', 'fabric_switch_role', 'management_cidr', 'router_id_base',
    'router_id_prefix_len', 'router_id_cidr', 'ospf_enabled', 'ospf_area', 'ospf_fabric_interface', 'ospf_hello_interval',
    'ospf_dead_interval', 'ospf_auto_ref_bw', 'ospf_auth_type', 'ospf_auth_key_id', 'ospf_auth_key_is_set', 'expected_nodes',
    'expected_vms', 'vxlan_mtu', 'public_mtu', 'rollout_status', 'frr_hmac_sha_capable', 'physnet', 'last_job', 'version',
    'created_at', 'updated_at',
  ],
  properties: {
    as: int,
    fabric_switch_as: int,
    bgp_mode: { type: 'string', enum: ['ibgp', 'ebgp'], description: 'read-only derived' },
    advertise_all_vni: bool,
    bfd_enabled: bool,
    external_route_reflector: bool,
    bgp_password_is_set: bool,
    fabric_switch_name: str,
    fabric_switch_nos: str,
    fabric_switch_peering_ip: str,
    fabric_switch_role: str,
    management_cidr: str,
    router_id_base: str,
    router_id_prefix_len: int,
    router_id_cidr: { ...str, description: 'read-only derived: router_id_base/router_id_prefix_len, empty when unset' },
    ospf_enabled: bool,
    ospf_area: str,
    ospf_fabric_interface: str,
    ospf_hello_interval: int,
    ospf_dead_interval: int,
    ospf_auto_ref_bw: int,
    ospf_auth_type: str,
    ospf_auth_key_id: int,
    ospf_auth_key_is_set: bool,
    expected_nodes: int,
    expected_vms: int,
    vxlan_mtu: int,
    public_mtu: int,
    rollout_status: { type: 'string', enum: [...ROLLOUT_STATUSES], description: 'an empty stored value reads as ready' },
    frr_hmac_sha_capable: { ...nullable(bool), description: 'null = never probed; read-only' },
    physnet: { description: 'null until a network module exists' },
    last_job: { description: 'the latest apply/teardown job when rollout_status is failed or degraded; null until rollouts exist' },
    version: int,
    created_at: { type: 'string', format: 'date-time' },
    updated_at: { type: 'string', format: 'date-time' },
  },
};

const exampleConfig = {
  as: 65000,
  fabric_switch_as: 65000,
  bgp_mode: 'ibgp',
  advertise_all_vni: true,
  bfd_enabled: true,
  external_route_reflector: true,
  bgp_password_is_set: true,
  fabric_switch_name: 'spine1',
  fabric_switch_nos: 'sonic',
  fabric_switch_peering_ip: '10.255.0.254',
  fabric_switch_role: 'spine',
  management_cidr: '192.168.111.0/24',
  router_id_base: '10.255.0.1',
  router_id_prefix_len: 24,
  router_id_cidr: '10.255.0.1/24',
  ospf_enabled: true,
  ospf_area: '0.0.0.0',
  ospf_fabric_interface: 'eth1',
  ospf_hello_interval: 1,
  ospf_dead_interval: 3,
  ospf_auto_ref_bw: 100000,
  ospf_auth_type: 'message-digest',
  ospf_auth_key_id: 1,
  ospf_auth_key_is_set: true,
  expected_nodes: 40,
  expected_vms: 800,
  vxlan_mtu: 9000,
  public_mtu: 1500,
  rollout_status: 'ready',
  frr_hmac_sha_capable: null,
  physnet: null,
  last_job: null,
  version: 1,
  created_at: '2026-12-01T10:00:00.000Z',
  updated_at: '2026-12-01T10:00:00.000Z',
};

const exampleBody = {
  as: 65000,
  fabric_switch_as: 65000,
  external_route_reflector: true,
  fabric_switch_name: 'spine1',
  fabric_switch_nos: 'sonic',
  fabric_switch_peering_ip: '10.255.0.254',
  fabric_switch_role: 'spine',
  management_cidr: '192.168.111.0/24',
  router_id_cidr: '10.255.0.1/24',
  bfd_enabled: true,
  bgp_password: 'example-only',
  ospf_enabled: true,
  ospf_fabric_interface: 'eth1',
  ospf_hello_interval: 1,
  ospf_dead_interval: 3,
  ospf_auto_ref_bw: 100000,
  ospf_auth_type: 'message-digest',
  ospf_auth_key: 'example',
  expected_nodes: 40,
  expected_vms: 800,
  vxlan_mtu: 9000,
  public_mtu: 1500,
};

const AUTH = 'Authorization: reading needs a platform-scoped grant (any permission); writing needs platform admin.';

export const fabricRoutes: Route[] = [
  {
    method: 'GET',
    path: '/controlnode/fabric-config',
    operation: 'FabricConfig',
    tag: 'fabric',
    summary: 'Get the current network fabric config',
    description: `Returns the cluster-wide FabricConfig row with its derived fields; secrets only as *_is_set. NOT_FOUND when none is stored. ${AUTH}`,
    variables: () => ({}),
    respond: (data) => {
      if (!data.fabricConfig) throw notFound('fabric config');
      return snakeKeys(data.fabricConfig);
    },
    response: CONFIG_VIEW,
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND'],
    example: { response: exampleConfig },
  },
  {
    method: 'POST',
    path: '/controlnode/fabric-config',
    operation: 'UpsertFabricConfig',
    tag: 'fabric',
    summary: 'Store network fabric configuration (upsert)',
    description: `Creates the config on the first call, updates it afterwards; a field left out keeps its value, an empty secret keeps the stored one, clear_* removes it. created says which. Read-only fields (bgp_mode, *_is_set, rollout_status, frr_hmac_sha_capable, physnet, last_job) are accepted and ignored so a GET body can be sent back. ${AUTH}`,
    body: { type: 'object', additionalProperties: false, properties: { ...WRITABLE, ...IGNORED } },
    variables: ({ body }) => ({
      input: Object.fromEntries(Object.entries(body!).filter(([k]) => k in WRITABLE).map(([k, v]) => [toCamel(k), v])),
    }),
    respond: (data) => {
      const payload = data.upsertFabricConfig as { created: boolean; config: unknown };
      return {
        created: payload.created,
        message: payload.created ? 'fabric config created' : 'fabric config updated',
        config: snakeKeys(payload.config),
      };
    },
    response: {
      type: 'object',
      required: ['created', 'message', 'config'],
      properties: { created: { ...bool, description: 'true if new record, false if updated' }, message: str, config: CONFIG_VIEW },
    },
    refusals: ['PERMISSION_DENIED', 'INVALID_CONFIG'],
    restField: fabricRestField,
    example: { body: exampleBody, response: { created: true, message: 'fabric config created', config: exampleConfig } },
  },
  {
    method: 'DELETE',
    path: '/controlnode/fabric-config',
    operation: 'DeleteFabricConfig',
    tag: 'fabric',
    summary: 'Delete network fabric configuration',
    description: `Hard delete of the cluster-wide config and its stored secrets. NOT_FOUND when there is none. ${AUTH}`,
    variables: () => ({}),
    respond: () => ({ deleted: true, message: 'fabric config deleted' }),
    response: { type: 'object', required: ['deleted', 'message'], properties: { deleted: bool, message: str } },
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND'],
    example: { response: { deleted: true, message: 'fabric config deleted' } },
  },
  ...rolloutRoutes,
  ...preflightRoutes,
];
