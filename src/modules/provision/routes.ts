import type { Route } from '../../rest/routes';
import { schemaTypes, type JsonSchema } from '../../rest/schemas';

/**
 * The seed's control-node inventory routes, GET /controlnode/bmc/{bmc_ip}/disks and /gpus
 * ("Fetch disk and NIC information from NetBox database for UI selection", "Fetch GPU inventory
 * information from NetBox for UI selection"), over the ControlNodeDisks / ControlNodeGpus
 * operations (schema/operations/controlnode-inventory.graphql). The seed gives no response
 * fields: these are snake_case like the rest of /controlnode, named as provision's request names
 * the choices (device_id, selected_disks, selected_nic, selected_nic_mac).
 */

const { str, int, bool, nullable } = schemaTypes;
const num: JsonSchema = { type: 'number' };
const SOURCE: JsonSchema = { type: 'string', enum: ['inventory-item', 'module'], description: 'where in NetBox the entry is recorded' };
const BMC_IP: Record<string, JsonSchema> = { bmc_ip: { ...str, description: 'BMC IP Address (IPv4 or IPv6)' } };
const AUTH = 'Needs a platform-scoped grant (any permission).';
const ERRORS = 'NOT_FOUND when NetBox has no device with that BMC address (an IP address in ipam whose assigned object is an interface of a device); INVALID_CONFIG when NETBOX_URL / NETBOX_TOKEN are not set or NetBox refuses the token; UPSTREAM_UNAVAILABLE (502) when NetBox is unreachable, too slow or failing.';

const view = (properties: Record<string, JsonSchema>, title?: string): JsonSchema => ({ type: 'object', ...(title ? { title } : {}), required: Object.keys(properties), properties });

const DEVICE = {
  bmc_ip: str,
  device_id: { ...int, description: 'NetBox Device ID (provision\'s device_id)' },
  device_name: nullable(str),
  serial_number: { ...str, description: 'the device\'s serial in NetBox; empty when none' },
  fetched_at: { type: 'string', format: 'date-time', description: 'when NetBox answered (answers are reused for NETBOX_CACHE_MS)' },
};

const DISK = view({
  name: { ...str, description: 'the inventory item\'s name (e.g. nvme0n1) or the module\'s bay: a value for provision\'s selected_disks' },
  model: nullable(str), serial: nullable(str), manufacturer: nullable(str),
  size_gb: { ...nullable(num), description: 'from the module type\'s size attribute (NetBox 4.3+); null when NetBox does not say' },
  type: { ...nullable(str), description: 'HDD, SSD, NVME... (module type attribute)' },
  source: SOURCE, netbox_id: int,
});

const NIC = view({
  name: { ...str, description: 'e.g. enp65s0f0 (provision\'s selected_nic)' },
  label: { ...nullable(str), description: 'NetBox\'s label (a legacy name such as eth0, where a site keeps it)' },
  mac_address: { ...nullable(str), description: 'the primary MAC (provision\'s selected_nic_mac)' },
  type: nullable(str), speed_mbps: nullable(int),
  mgmt_only: { ...bool, description: 'management only (the BMC\'s own port, typically): not for the OS' },
  enabled: bool, netbox_id: int,
});

const GPU = view({
  name: str, model: nullable(str), serial: nullable(str), manufacturer: nullable(str), part_id: nullable(str),
  memory_gb: nullable(num), source: SOURCE, netbox_id: int,
});

const DISKS_VIEW = view({ ...DEVICE, bmc_interface: { ...nullable(str), description: 'the interface NetBox assigns the BMC address to' }, disks: { type: 'array', items: DISK }, nics: { type: 'array', items: NIC } }, 'ControlNodeDisks');
const GPUS_VIEW = view({ ...DEVICE, gpus: { type: 'array', items: GPU } }, 'ControlNodeGpus');

type Row = Record<string, unknown>;
const device = (i: Row) => ({ bmc_ip: i.bmcIp, device_id: i.deviceId, device_name: i.deviceName, serial_number: i.serialNumber, fetched_at: i.fetchedAt });

const exampleDevice = { bmc_ip: '10.20.0.11', device_id: 1742, device_name: 'cn-r12-07', serial_number: 'J30X8K2', fetched_at: '2026-12-02T02:40:00.000Z' };

/**
 * What both inventory routes share: GET by the path's bmc_ip (the resolver checks it; the router names
 * a refusal of it path.bmc_ip, as every route names its path parameters), the same refusals.
 */
function inventoryRoute(r: Pick<Route, 'path' | 'operation' | 'summary' | 'description' | 'response' | 'example'> & { respond: (inventory: Row) => unknown }): Route {
  return {
    method: 'GET', tag: 'controlnode', params: BMC_IP,
    variables: ({ params }) => ({ bmcIp: params.bmc_ip }),
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND', 'INVALID_CONFIG', 'UPSTREAM_UNAVAILABLE'],
    ...r,
    respond: (data) => r.respond(data.controlNodeInventory as Row),
  };
}

const toSnake = (name: string) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
const toCamel = (name: string) => name.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());

/** `input.atlasDeviceId` (the GraphQL input's name) as the body's `body.atlas_device_id`. */
export function controlnodeRestField(field: string): string | null {
  const match = /^\$?input\.([A-Za-z0-9]+)(.*)$/.exec(field);
  return match ? `body.${toSnake(match[1]!)}${match[2]}` : null;
}

const REGISTER_BODY: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['bmc_ip'],
  properties: {
    atlas_device_id: { ...int, description: 'NetBox Device ID' },
    atlas_location_id: { ...int, description: 'NetBox Location ID' },
    atlas_rack_id: { ...int, description: 'NetBox Rack ID' },
    atlas_site_id: { ...int, description: 'Optional Atlas/NetBox IDs (populated from NetBox sync result during bootstrap)' },
    bmc_ip: { ...str, description: 'Required field - BMC IP is the primary key (the node\'s key when no serial_number is given)' },
    bmc_password: { ...str, description: 'BMC password (kept in the secret broker, never returned)' },
    bmc_username: { ...str, description: 'Optional BMC credentials (with bmc_password)' },
    fqdn: { ...str, description: 'Fully qualified domain name' },
    os_hostname: { ...str, description: 'Hostname (e.g., mgmt-01)' },
    os_ip: { ...str, description: 'Optional OS info' },
    os_password: { ...str, description: 'SSH password (kept in the secret broker; the seed hex-encoded it in its table)' },
    os_username: { ...str, description: 'SSH username (default: root)' },
    primary_mac: { ...str, description: 'Primary NIC MAC address' },
    serial_number: { ...str, description: 'Used as UUID: the control node\'s identity' },
    vendor: { ...str, description: 'Optional hardware info: dell, hp, lenovo, cisco or supermicro pick that Redfish flavour' },
  },
};

const REGISTER_VIEW = view({
  created: { ...bool, description: 'true if new record, false if updated existing' },
  hostname: str,
  message: str,
  node_ip: { ...str, description: 'the OS address registered (empty when none)' },
  success: bool,
  node_id: { ...str, description: 'the metal node (GraphQL MetalNode id) the control node is' },
}, 'ControlNodeRegistered');

const registerRoute: Route = {
  method: 'POST',
  path: '/controlnode/register',
  operation: 'ControlNodeRegister',
  tag: 'controlnode',
  summary: 'Register the control node (1st node) in bmc_infos',
  description: 'Registers the management/control node with is_control_node=true: a metal node by its BMC, with its serial, vendor, OS facts and NetBox ids (GraphQL: registerControlNode, MetalNode.bmcInfo). A machine not known yet (by serial_number, else by bmc_ip) is created in CONTROLNODE_POOL_ID\'s pool in adopting: its workflow verifies the BMC with the given credentials and reads it out of band, and touches neither power nor boot (the control node is running). A known one keeps its state and gets its facts updated; its BMC too, unless a workflow is running (CONFLICT). Passwords go to the secret broker and no response returns them. Authorization: compute:nodes:provision on that pool. INVALID_CONFIG when CONTROLNODE_POOL_ID is not set. Publishes node.registered.',
  body: REGISTER_BODY,
  variables: ({ body }) => ({ input: Object.fromEntries(Object.entries(body ?? {}).map(([k, v]) => [toCamel(k), v])) }),
  respond: (data) => {
    const r = data.registerControlNode as Row;
    return { created: r.created, hostname: r.hostname, message: r.message, node_ip: r.nodeIp, success: true, node_id: (r.node as Row).id };
  },
  response: REGISTER_VIEW,
  refusals: ['PERMISSION_DENIED', 'INVALID_CONFIG', 'CONFLICT'],
  restField: controlnodeRestField,
  example: {
    body: { bmc_ip: '10.20.0.5', bmc_username: 'admin', bmc_password: 'calvin', serial_number: 'J30X8K1', vendor: 'dell', os_hostname: 'mgmt-01', os_ip: '10.30.0.5', fqdn: 'mgmt-01.dc1.example', primary_mac: '3C:FD:FE:00:10:01', atlas_device_id: 1741 },
    response: { created: true, hostname: 'mgmt-01', message: 'control node nd_01KB3Q9XK7F2M4N6P8R0T2V4X6 registered: adopting (its BMC is verified and read out of band; its OS is left as it is)', node_ip: '10.30.0.5', success: true, node_id: 'nd_01KB3Q9XK7F2M4N6P8R0T2V4X6' },
  },
};

export const provisionRoutes: Route[] = [
  inventoryRoute({
    path: '/controlnode/bmc/{bmc_ip}/disks',
    operation: 'ControlNodeDisks',
    summary: 'Get available disks and NICs for a BMC',
    description: `Fetch disk and NIC information from NetBox database for UI selection: the device whose BMC has this address, its disks (inventory items and, since NetBox 4.3, modules whose type's profile is a disk) and its interfaces. ${ERRORS} ${AUTH}`,
    respond: (i) => ({
      ...device(i), bmc_interface: i.bmcInterface,
      disks: (i.disks as Row[]).map((d) => ({ name: d.name, model: d.model, serial: d.serial, manufacturer: d.manufacturer, size_gb: d.sizeGb, type: d.type, source: wireSource(d.source), netbox_id: d.netboxId })),
      nics: (i.nics as Row[]).map((n) => ({ name: n.name, label: n.label, mac_address: n.macAddress, type: n.type, speed_mbps: n.speedMbps, mgmt_only: n.mgmtOnly, enabled: n.enabled, netbox_id: n.netboxId })),
    }),
    response: DISKS_VIEW,
    example: {
      params: { bmc_ip: '10.20.0.11' },
      response: {
        ...exampleDevice, bmc_interface: 'bmc',
        disks: [{ name: 'nvme0n1', model: 'MZQL23T8HCLS', serial: 'S64HNE0T901234', manufacturer: 'Samsung', size_gb: 3840, type: 'NVME', source: 'module', netbox_id: 88 }],
        nics: [{ name: 'enp65s0f0', label: 'eth0', mac_address: '3C:FD:FE:A1:B2:C3', type: '25gbase-x-sfp28', speed_mbps: 25000, mgmt_only: false, enabled: true, netbox_id: 9012 }],
      },
    },
  }),
  inventoryRoute({
    path: '/controlnode/bmc/{bmc_ip}/gpus',
    operation: 'ControlNodeGpus',
    summary: 'Get available GPUs for a BMC',
    description: `Fetch GPU inventory information from NetBox for UI selection: the device whose BMC has this address, and its GPUs (inventory items with a GPU role and, since NetBox 4.3, modules whose type's profile is GPU). ${ERRORS} ${AUTH}`,
    respond: (i) => ({
      ...device(i),
      gpus: (i.gpus as Row[]).map((g) => ({ name: g.name, model: g.model, serial: g.serial, manufacturer: g.manufacturer, part_id: g.partId, memory_gb: g.memoryGb, source: wireSource(g.source), netbox_id: g.netboxId })),
    }),
    response: GPUS_VIEW,
    example: {
      params: { bmc_ip: '10.20.0.11' },
      response: { ...exampleDevice, gpus: [{ name: 'GPU0', model: 'H100 SXM5 80GB', serial: '1654922001234', manufacturer: 'NVIDIA', part_id: '699-2G520-0200-000', memory_gb: 80, source: 'module', netbox_id: 91 }] },
    },
  }),
  registerRoute,
];

/** GraphQL's enum value (INVENTORY_ITEM) as the wire's word (inventory-item). */
function wireSource(v: unknown): string {
  return v === 'MODULE' ? 'module' : 'inventory-item';
}
