import { notFound } from '../../errors';
import type { Route } from '../../rest/routes';
import { snakeBodyField, toCamel, toSnake } from '../../rest/route-kit';
import { schemaTypes, type JsonSchema } from '../../rest/schemas';
import { EVPN_CAPABLE_NOS, OSPF_AUTH_TYPES, ROLLOUT_STATUSES } from './validate';
import { rolloutRoutes } from './rollout-routes';
import { preflightRoutes } from './preflight-routes';
import { vtepRoutes } from './vtep-routes';

/**
 * The seed's /controlnode/fabric-config routes: snake_case on the wire, the GraphQL operations of
 * schema/operations/fabric.graphql underneath (camelCase), so every rule is the resolver's.
 */

const { str, int, bool, nullable } = schemaTypes;

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
 * Read by the write, never stored (the ack's audit record aside): the switch re-config ack gate's
 * fields and the plan_hash the operator reviewed.
 */
const TRANSIENT: Record<string, JsonSchema> = {
  switch_acked: { ...bool, description: 'the switch was re-configured with the snippet of the 409 REQUIRES_SWITCH_RECONFIG_ACK answer' },
  switch_nos: { ...str, description: 'the NOS acked (sonic, cumulus, nxos, eos, other); empty = fabric_switch_nos, or other when unset' },
  switch_snippet_hash: { ...str, description: 'sha256 echoed from the 409 response (details.snippets[].sha256 of switch_nos)' },
  acked_by: { ...str, description: 'operator identity for the audit record (required with switch_acked)' },
  skip_switch_ack: { ...bool, description: 'lab/CI bypass of the ack gate; needs the fabric:admin permission' },
  plan_hash: { ...str, description: 'the plan_hash of the plan reviewed: 409 CONFLICT when the plan of what would be stored no longer has it' },
};

/**
 * Accepted and ignored, so a client may POST back what GET returned (the seed's request and
 * response objects are one shape): the read-only fields. frr_hmac_sha_capable is the preflight
 * probe's finding and only the probe writes it: input for it changes nothing.
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
  last_switch_ack_kind: nullable(str),
  last_switch_ack_by: nullable(str),
  last_switch_ack_at: nullable(str),
  last_switch_ack_nos: nullable(str),
  last_switch_ack_hash: nullable(str),
};

const CONFIG_VIEW: JsonSchema = {
  type: 'object',
  title: 'FabricConfig',
  required: [
    'as', 'fabric_switch_as', 'bgp_mode', 'advertise_all_vni', 'bfd_enabled', 'external_route_reflector', 'bgp_password_is_set',
    'fabric_switch_name', 'fabric_switch_nos', 'fabric_switch_peering_ip', 'fabric_switch_role', 'management_cidr', 'router_id_base',
    'router_id_prefix_len', 'router_id_cidr', 'ospf_enabled', 'ospf_area', 'ospf_fabric_interface', 'ospf_hello_interval',
    'ospf_dead_interval', 'ospf_auto_ref_bw', 'ospf_auth_type', 'ospf_auth_key_id', 'ospf_auth_key_is_set', 'expected_nodes',
    'expected_vms', 'vxlan_mtu', 'public_mtu', 'rollout_status', 'frr_hmac_sha_capable', 'physnet', 'last_job', 'last_switch_ack_kind',
    'last_switch_ack_by', 'last_switch_ack_at', 'last_switch_ack_nos', 'last_switch_ack_hash', 'version', 'created_at', 'updated_at',
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
    last_switch_ack_kind: { ...nullable(str), description: 'audit of the switch re-config ack gate: acked | skipped; null = never' },
    last_switch_ack_by: { ...nullable(str), description: 'acked: the acked_by given; skipped: the token\'s name' },
    last_switch_ack_at: { anyOf: [{ type: 'string', format: 'date-time' }, { type: 'null' }] },
    last_switch_ack_nos: { ...nullable(str), description: 'the NOS acked' },
    last_switch_ack_hash: { ...nullable(str), description: 'the sha256 of the snippet acked' },
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
  last_switch_ack_kind: 'acked',
  last_switch_ack_by: 'jdoe@example.com',
  last_switch_ack_at: '2026-12-01T09:58:00.000Z',
  last_switch_ack_nos: 'sonic',
  last_switch_ack_hash: '3f0c1e4b5a7d9c2e8f6a1b3d5c7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e',
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

const PLAN_BODY: Record<string, JsonSchema> = {
  expected_nodes: { ...int, description: 'sizing hint only: the planner auto-picks a /24 when unset; 1..1000' },
  expected_vms: { ...int, description: 'sizing hint for tenant subnets (notes only); 1..10000' },
  fabric_switch_as: { ...asNumber, description: '0 => planner suggests (the host AS: iBGP)' },
  fabric_switch_name: str,
  fabric_switch_nos: { ...str, description: 'sonic|cumulus|nxos|eos|other (required)' },
  fabric_switch_peering_ip: { ...str, description: 'empty => planner suggests' },
  fabric_switch_role: { ...str, description: 'spine|leaf|border-leaf' },
  local_as: { ...asNumber, description: '0 => auto-pick (65000)' },
  management_cidr: { ...str, description: 'e.g. "192.168.111.0/24" (required)' },
  public_mtu: { ...int, description: 'VR public-side MTU: required in DC mode, ignored in Cube (no VR)' },
  router_id_base: { ...str, description: 'empty => 10.255.0.0 default' },
  router_id_prefix_len: { ...int, description: '0 => auto-size; operator value honored verbatim' },
  underlay_mode: { ...str, description: '"" / "ospf" (default) | "bgp" (one iBGP session over the mgmt subnet carries the loopback /32s + EVPN)' },
  vxlan_mtu: { ...int, description: 'fabric/data-plane MTU (1500 default; 9216 max) (required)' },
};

const PLAN_CONFIG_FIELDS: Record<string, JsonSchema> = {
  advertise_all_vni: bool, as: int, bfd_enabled: bool, bgp_password: { ...str, description: 'always empty: a plan never carries a secret' },
  fabric_switch_as: int, fabric_switch_name: str, fabric_switch_nos: str, fabric_switch_peering_ip: str, fabric_switch_role: str,
  management_cidr: str, ospf_area: str, ospf_auto_ref_bw: int, ospf_dead_interval: int, ospf_enabled: bool, ospf_fabric_interface: str,
  ospf_hello_interval: int, public_mtu: int, rollout_status: str, router_id_base: str, router_id_prefix_len: int, vxlan_mtu: int,
};

const PLAN_VIEW: JsonSchema = {
  type: 'object',
  title: 'FabricPlan',
  required: ['config', 'deployment_mode', 'underlay_mode', 'notes', 'risks', 'plan_hash', 'switch_config', 'vtep_capacity'],
  properties: {
    config: { type: 'object', required: Object.keys(PLAN_CONFIG_FIELDS), properties: PLAN_CONFIG_FIELDS },
    deployment_mode: { type: 'string', enum: ['dc', 'cube'], description: 'dc when external_route_reflector is set (a VR: public_mtu required), cube otherwise' },
    underlay_mode: { type: 'string', enum: ['ospf', 'bgp'] },
    notes: { type: 'array', items: str },
    risks: { type: 'array', items: str, description: 'operator-actionable' },
    plan_hash: { ...str, description: 'sha256 (hex) of the planned config and switch_config; POST fabric-config takes it as plan_hash' },
    switch_config: { ...str, description: 'rendered for config.fabric_switch_nos only; "other" = vendor-neutral reference' },
    vtep_capacity: { ...int, description: 'usable VTEP addresses of the planned pool' },
  },
};

const examplePlanBody = {
  expected_nodes: 40,
  expected_vms: 800,
  fabric_switch_nos: 'sonic',
  fabric_switch_name: 'spine1',
  fabric_switch_role: 'spine',
  management_cidr: '192.168.111.0/24',
  vxlan_mtu: 9000,
};

const examplePlan = {
  config: {
    advertise_all_vni: true, as: 65000, bfd_enabled: false, bgp_password: '', fabric_switch_as: 65000, fabric_switch_name: 'spine1',
    fabric_switch_nos: 'sonic', fabric_switch_peering_ip: '10.255.0.62', fabric_switch_role: 'spine', management_cidr: '192.168.111.0/24',
    ospf_area: '0.0.0.0', ospf_auto_ref_bw: 0, ospf_dead_interval: 0, ospf_enabled: true, ospf_fabric_interface: '', ospf_hello_interval: 0,
    public_mtu: 0, rollout_status: 'pending', router_id_base: '10.255.0.0', router_id_prefix_len: 26, vxlan_mtu: 9000,
  },
  deployment_mode: 'cube',
  underlay_mode: 'ospf',
  notes: ['VTEP pool auto-sized to /26 (62 usable): expected_nodes 40 + 16 headroom + the switch loopback = 57'],
  risks: [],
  plan_hash: '9b2d4f6a8c0e1f3a5b7c9d1e3f5a7b9c1d3e5f7a9b1c3d5e7f9a1b3c5d7e9f1a',
  switch_config: '! fabric switch spine1 (sonic) ...\n',
  vtep_capacity: 62,
};

const AUTH = 'Authorization: reading needs a platform-scoped grant (any permission); writing needs fabric:write (fabric:admin and platform admin hold it); skip_switch_ack needs fabric:admin.';

export const fabricRoutes: Route[] = [
  ...vtepRoutes,
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
    description: `Creates the config on the first call, updates it afterwards; a field left out keeps its value, an empty secret keeps the stored one, clear_* removes it. created says which. Read-only fields (bgp_mode, *_is_set, rollout_status, frr_hmac_sha_capable, physnet, last_job, last_switch_ack_*) are accepted and ignored so a GET body can be sent back. Changing a set VTEP pool (router_id_base / router_id_prefix_len / router_id_cidr) answers 409 REQUIRES_SWITCH_RECONFIG_ACK with details.snippets[] ({nos, snippet, verify_command, sha256}) and details.default_nos, writing nothing; the re-POST with switch_acked, switch_snippet_hash (that NOS's sha256), switch_nos and acked_by goes through and is recorded (last_switch_ack_*). With plan_hash, 409 CONFLICT when the plan of the config this POST would store has another hash. ${AUTH}`,
    body: { type: 'object', additionalProperties: false, properties: { ...WRITABLE, ...TRANSIENT, ...IGNORED } },
    variables: ({ body }) => ({
      input: Object.fromEntries(Object.entries(body!).filter(([k]) => k in WRITABLE || k in TRANSIENT).map(([k, v]) => [toCamel(k), v])),
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
    refusals: ['PERMISSION_DENIED', 'INVALID_CONFIG', 'CONFLICT', 'REQUIRES_SWITCH_RECONFIG_ACK'],
    restField: snakeBodyField,
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
  {
    method: 'POST',
    path: '/controlnode/fabric-config/plan',
    operation: 'FabricPlan',
    tag: 'fabric',
    summary: 'Dry-run a fabric configuration',
    description: 'Returns a preview FabricConfig with an auto-sized VTEP pool, a suggested switch ASN and peering IP, the VNI range (notes), plan_hash and operator-actionable risks/notes. No DB write: commit with POST /controlnode/fabric-config: the config.* fields as returned, the expected_nodes / expected_vms sent here, and plan_hash (409 CONFLICT if the plan of what would be stored has changed since). fabric_switch_nos, management_cidr and vxlan_mtu are required; router_id_base empty means the 10.255.0.0 default and router_id_prefix_len 0 an auto-sized pool, whatever is stored (a risk says when that changes the stored pool); other 0 / empty fields mean the stored value, else the planner\'s pick. config.bgp_password is always empty. Authorization: any platform-scoped grant.',
    body: { type: 'object', additionalProperties: false, properties: PLAN_BODY },
    variables: ({ body }) => ({ input: Object.fromEntries(Object.entries(body!).map(([k, v]) => [toCamel(k), v])) }),
    respond: (data) => {
      const plan = data.fabricPlan as Record<string, unknown> & { config: Record<string, unknown> };
      return { ...snakeKeys(plan) as Record<string, unknown>, config: snakeKeys(plan.config) };
    },
    response: PLAN_VIEW,
    refusals: ['PERMISSION_DENIED'],
    restField: snakeBodyField,
    example: { body: examplePlanBody, response: examplePlan },
  },
  ...preflightRoutes,
];
