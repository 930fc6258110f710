import type { Route } from '../../rest/routes';
import { notFound } from '../../errors';
import { schemaTypes, type JsonSchema } from '../../rest/schemas';
import { snakeBodyField, toCamel } from '../../rest/route-kit';
import { PROVISION_VENDORS } from './provision';

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
const device = (inventory: Row) => ({ bmc_ip: inventory.bmcIp, device_id: inventory.deviceId, device_name: inventory.deviceName, serial_number: inventory.serialNumber, fetched_at: inventory.fetchedAt });

const exampleDevice = { bmc_ip: '10.20.0.11', device_id: 1742, device_name: 'cn-r12-07', serial_number: 'J30X8K2', fetched_at: '2026-12-02T02:40:00.000Z' };

/**
 * What both inventory routes share: GET by the path's bmc_ip (the resolver checks it; the router names
 * a refusal of it path.bmc_ip, as every route names its path parameters), the same refusals.
 */
function inventoryRoute(route: Pick<Route, 'path' | 'operation' | 'summary' | 'description' | 'response' | 'example'> & { respond: (inventory: Row) => unknown }): Route {
  return {
    method: 'GET', tag: 'controlnode', params: BMC_IP,
    variables: ({ params }) => ({ bmcIp: params.bmc_ip }),
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND', 'INVALID_CONFIG', 'UPSTREAM_UNAVAILABLE'],
    ...route,
    respond: (data) => route.respond(data.controlNodeInventory as Row),
  };
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
    bmc_ip: { ...str, description: 'Required field - BMC IP is the primary key (the node\'s key when no serial_number is given). An IPv4 or IPv6 address (the BMC on 443), optionally with a port (127.0.0.1:8443, [fd00::1]:8443), or the BMC\'s http(s) URL (https://127.0.0.1:8443)' },
    bmc_password: { ...str, description: 'BMC password (kept in the secret broker, never returned)' },
    bmc_username: { ...str, description: 'Optional BMC credentials (with bmc_password)' },
    fqdn: { ...str, description: 'Fully qualified domain name' },
    os_hostname: { ...str, description: 'Hostname (e.g., mgmt-01)' },
    os_ip: { ...str, description: 'Optional OS info' },
    os_password: { ...str, description: 'SSH password (kept in the secret broker; the seed hex-encoded it in its table)' },
    os_username: { ...str, description: 'SSH username (default: root)' },
    primary_mac: { ...str, description: 'Primary NIC MAC address' },
    serial_number: { ...str, description: 'Used as UUID: the control node\'s identity' },
    system_id: { ...str, description: 'For a BMC with several systems: the Id of this machine\'s (a member of /redfish/v1/Systems), kept as the node\'s driverOptions.systemId; left out, a known node keeps its own. At most 255 characters, no /, ?, # or space' },
    vendor: { ...str, description: 'Optional hardware info: dell, hp, lenovo, cisco or supermicro, or the Manufacturer the BMC reports (Dell Inc., HPE, Hewlett Packard Enterprise, Lenovo, Supermicro, Cisco Systems Inc; any case) pick that Redfish flavour (idrac, ilo, xcc, cimc, supermicro); anything else is generic Redfish. Left out, a known node keeps its flavour' },
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
  restField: snakeBodyField,
  example: {
    body: { bmc_ip: '10.20.0.5', bmc_username: 'admin', bmc_password: 'calvin', serial_number: 'J30X8K1', vendor: 'dell', os_hostname: 'mgmt-01', os_ip: '10.30.0.5', fqdn: 'mgmt-01.dc1.example', primary_mac: '3C:FD:FE:00:10:01', atlas_device_id: 1741 },
    response: { created: true, hostname: 'mgmt-01', message: 'control node nd_01KB3Q9XK7F2M4N6P8R0T2V4X6 registered: adopting (its BMC is verified and read out of band; its OS is left as it is)', node_ip: '10.30.0.5', success: true, node_id: 'nd_01KB3Q9XK7F2M4N6P8R0T2V4X6' },
  },
};


/** The body's names as the seed writes them (bmc_IP, not bmc_ip) and their GraphQL input names. */
const PROVISION_FIELDS: Record<string, string> = {
  arch: 'arch', bmc_IP: 'bmcIp', branch: 'branch', cache_dir: 'cacheDir', controlnode_host: 'controlnodeHost', controlnode_port: 'controlnodePort',
  debian_version: 'debianVersion', device_id: 'deviceId', gpu_passthrough: 'gpuPassthrough', hostname: 'hostname',
  kubernetes_cluster_name: 'kubernetesClusterName', kubernetes_cluster_type: 'kubernetesClusterType', location: 'location', mac_address: 'macAddress',
  network_role: 'networkRole', os_password: 'osPassword', os_username: 'osUsername', output_iso: 'outputIso', pool_type: 'poolType', prefix_id: 'prefixId',
  pxe_path: 'pxePath', pxe_server: 'pxeServer', rack_number: 'rackNumber', root_pass: 'rootPass', selected_disks: 'selectedDisks', selected_nic: 'selectedNic',
  selected_nic_legacy: 'selectedNicLegacy', selected_nic_mac: 'selectedNicMac', sys_iuri: 'sysIuri', vendor: 'vendor', vm_slot: 'vmSlot', zone: 'zone',
};
const PROVISION_REST = Object.fromEntries(Object.entries(PROVISION_FIELDS).map(([rest, input]) => [input, rest]));

/** `input.selectedDisks[1]` -> `body.selected_disks[1]`; the vendor argument is the path's. */
export function provisionRestField(field: string): string | null {
  if (field === 'vendor' || field === '$vendor') return 'path.vendor';
  const match = /^\$?input\.([A-Za-z0-9]+)(.*)$/.exec(field);
  return match ? `body.${PROVISION_REST[match[1]!] ?? match[1]}${match[2]}` : null;
}

const PROVISION_BODY: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['bmc_IP'],
  properties: {
    arch: str, bmc_IP: { ...str, description: 'the BMC address of the node to install (required)' }, branch: str,
    cache_dir: { ...str, description: 'must lie inside ISO_DIR' }, controlnode_host: { ...str, description: 'where the installer reports (else PUBLIC_URL)' }, controlnode_port: str,
    debian_version: str, device_id: { ...int, description: 'NetBox Device ID for tracking' },
    gpu_passthrough: { description: 'GPU passthrough config for IOMMU/vfio-pci: true, or { iommu: intel|amd, pci_ids: ["10de:2330"] }' },
    hostname: { ...str, description: 'the installed system\'s host name; optional: without it, the NetBox device\'s name for the BMC, else node-<serial> from the serial the BMC reports (a new BMC\'s, once its enrollment read it). The job\'s metadata says which (hostnameSource: request, netbox or bmc-serial)' }, kubernetes_cluster_name: str, kubernetes_cluster_type: str, location: str,
    mac_address: str, network_role: { ...str, description: 'IPAM fields for static IP allocation' },
    os_password: { ...str, description: 'OS password, kept in the secret broker (the ISO holds its SHA-512 crypt hash only); absent: a random one (the seed\'s adminadmin default is not kept)' },
    os_username: { ...str, description: 'OS credentials for provisioned system (default debian; root\'s login is disabled)' },
    output_iso: { ...str, description: 'must lie inside ISO_DIR' }, pool_type: { type: 'string', enum: ['mirror', 'raidz1', 'raidz2', 'stripe', 'single'] },
    prefix_id: { ...int, description: 'Prefix ID from VLAN query response: the NetBox prefix the OS\'s static IPv4 address is allocated from (gateway: its gateway custom field, else its first host); absent, DHCP' }, pxe_path: { ...str, description: 'must lie inside ISO_DIR' }, pxe_server: str,
    rack_number: str, root_pass: { ...str, description: 'not used: root\'s login is disabled' }, selected_disks: { type: 'array', items: str },
    selected_nic: { ...str, description: 'e.g., "enp0s3" - DHCP enabled on this interface' }, selected_nic_legacy: { ...str, description: 'Legacy kernel name for the NIC (e.g., "eth0")' },
    selected_nic_mac: { ...str, description: 'MAC address of the selected NIC' }, sys_iuri: str, vendor: { ...str, description: 'cisco, dell, hp, lenovo or supermicro (required on plain provision)' },
    vm_slot: str, zone: str,
  },
};

const PROVISION_VIEW = view({
  success: bool,
  job_id: { ...str, description: 'the job (GET /controlnode/job/{id}; GraphQL workflowProgress(runId))' },
  node_id: str,
  status: { ...str, description: 'the node\'s provision state: deploying' },
  message: str,
}, 'ControlNodeProvisionStarted');

const PROVISION_DESCRIPTION = (vendor: string | null) => `Build custom Debian ISO with preseed and provision via ${vendor ? `${vendor}'s ` : ''}Redfish: a metal deploy (legal from ready; INVALID_STATE otherwise) of the node whose BMC has the address bmc_IP, whose installer is a per-job ISO booted over the BMC's virtual media${vendor ? '' : ' with the flavour of vendor'}. The job is the node's metal-install workflow run: Building ISO, Mounting ISO, Setting a one-time boot from the virtual CD, Booting the installer, Installing OS (failed as stuck after CONTROLNODE_INSTALL_STUCK_S without a step report), Waiting for the first boot, Ejecting the ISO; then deployed. A BMC address no node has is enrolled first (with CONTROLNODE_POOL_ID and CONTROLNODE_BMC_CREDENTIALS_FILE set; NOT_FOUND otherwise) into that pool with the vendor's driver, selected_nic_mac as its MAC, and the job is that enrollment (verified, inspected, commissioned) and then the install. Every field is checked before anything is written. Authorization: compute:nodes:provision on the node.`;

const provisionExample = { body: { bmc_IP: '10.20.0.11', vendor: 'dell', hostname: 'cn-r12-07', os_username: 'ops', os_password: 'correct-horse-battery', selected_disks: ['nvme0n1', 'nvme1n1'], pool_type: 'mirror', selected_nic_mac: '3C:FD:FE:A1:B2:C3' }, response: { success: true, job_id: 'wr_01KB3Q9XK7F2M4N6P8R0T2V4X7', node_id: 'nd_01KB3Q9XK7F2M4N6P8R0T2V4X6', status: 'deploying', message: 'provisioning node nd_01KB3Q9XK7F2M4N6P8R0T2V4X6 (job wr_01KB3Q9XK7F2M4N6P8R0T2V4X7): Building ISO' } };

function provisionRoute(vendor: (typeof PROVISION_VENDORS)[number] | null): Route {
  const label: Record<string, string> = { cisco: 'Cisco CIMC', dell: 'Dell iDRAC', hp: 'HPE iLO', lenovo: 'Lenovo XCC', supermicro: 'Supermicro' };
  return {
    method: 'POST',
    path: vendor ? `/controlnode/provision/${vendor}` : '/controlnode/provision',
    operation: 'ControlNodeProvision',
    operationId: vendor ? `ControlNodeProvision${vendor[0]!.toUpperCase()}${vendor.slice(1)}` : 'ControlNodeProvision',
    tag: 'controlnode',
    summary: vendor ? `Provision a ${label[vendor]!.split(' ')[0]} node with Debian OS` : 'Provision a node with Debian OS',
    description: PROVISION_DESCRIPTION(vendor ? label[vendor]! : null),
    body: PROVISION_BODY,
    variables: ({ body }) => ({
      input: Object.fromEntries(Object.entries(body ?? {}).map(([k, v]) => [PROVISION_FIELDS[k] ?? k, v])),
      ...(vendor ? { vendor: vendor.toUpperCase() } : {}),
    }),
    respond: (data) => {
      const r = data.provisionControlNode as Row;
      const node = r.node as Row;
      return { success: true, job_id: r.jobId, node_id: node.id, status: node.provisionState, message: r.message };
    },
    response: PROVISION_VIEW,
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND', 'INVALID_STATE', 'INVALID_CONFIG', 'CONFLICT'],
    restField: provisionRestField,
    example: vendor ? { body: Object.fromEntries(Object.entries(provisionExample.body).filter(([k]) => k !== 'vendor')), response: provisionExample.response } : provisionExample,
  };
}


const JOB_VIEW = view({
  created_at: { type: 'string', format: 'date-time' },
  id: str,
  job_status: { type: 'string', enum: ['pending', 'running', 'cancelling', 'completed', 'failed', 'cancelled'] },
  job_type: { ...str, description: 'provision' },
  metadata: { ...str, description: 'the job\'s request as recorded, as JSON text (no password)' },
  node_ip: { ...str, description: 'the BMC address the job was asked for' },
  parent_id: { ...str, description: 'the batch it belongs to, empty when none' },
  progress: { ...int, description: '0-100: the steps done, and the installer\'s own percent within Installing OS' },
  resource_name: { ...str, description: 'the host name being installed' },
  status: { ...str, description: 'the stage now (Building ISO, Mounting ISO, Installing OS...), or how it ended' },
  total_jobs: int,
  updated_at: { type: 'string', format: 'date-time' },
  last_error: { ...nullable(str), description: 'CODE: message once it failed or was cancelled' },
}, 'ControlNodeJob');

const jobOf = (job: Row) => ({
  created_at: job.createdAt, id: job.id, job_status: String(job.jobStatus).toLowerCase(), job_type: job.jobType, metadata: job.metadata, node_ip: job.nodeIp,
  parent_id: job.parentId, progress: job.progress, resource_name: job.resourceName, status: job.status, total_jobs: job.totalJobs, updated_at: job.updatedAt, last_error: job.lastError,
});
const exampleJob = {
  created_at: '2026-12-02T04:30:00.000Z', id: 'wr_01KB3Q9XK7F2M4N6P8R0T2V4X7', job_status: 'running', job_type: 'provision',
  metadata: '{"vendor":"dell","hostname":"cn-r12-07","osUsername":"ops","disks":["nvme0n1","nvme1n1"],"poolType":"mirror"}',
  node_ip: '10.20.0.11', parent_id: '', progress: 62, resource_name: 'cn-r12-07', status: 'Installing OS', total_jobs: 1, updated_at: '2026-12-02T04:41:12.000Z', last_error: null,
};
const JOB_PARAM = { id: { ...str, description: 'Job ID' } };

const jobRoutes: Route[] = [
  {
    method: 'PATCH', path: '/controlnode/job/{id}', operation: 'ControlNodeJobCancel', operationId: 'ControlNodeJobPatch', tag: 'controlnode', params: JOB_PARAM,
    summary: 'Patch Job Status',
    description: 'Patch job related status with given id. A job\'s status, stage and progress follow its workflow run\'s steps, so the one change a client may make is {"job_status": "cancelled"}: the same as POST /controlnode/job/{id}/cancel (idempotent; INVALID_STATE for a job that completed or failed). Any other field or value is INVALID_INPUT naming it. Authorization: compute:nodes:provision on the node.',
    body: { type: 'object', additionalProperties: false, required: ['job_status'], properties: { job_status: { type: 'string', enum: ['cancelled'], description: 'cancelled: cancel the job' } } },
    variables: ({ params }) => ({ id: params.id }),
    respond: (data) => jobOf(data.cancelControlNodeJob as Row),
    response: JOB_VIEW,
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND', 'INVALID_STATE', 'CONFLICT'],
    example: { params: { id: exampleJob.id }, body: { job_status: 'cancelled' }, response: { ...exampleJob, job_status: 'cancelling', status: 'Cancelling: ejecting the ISO' } },
  },
  {
    method: 'GET', path: '/controlnode/job/{id}', operation: 'ControlNodeJob', tag: 'controlnode', params: JOB_PARAM,
    summary: 'Get Job Status',
    description: 'Retrieve job status and details by job ID: the job is the node\'s workflow run (GraphQL controlNodeJob; its steps in MetalNode.timeline; live in jobProgress / workflowProgress). Authorization: read on the node; another tenant\'s job is NOT_FOUND.',
    variables: ({ params }) => ({ id: params.id }),
    respond: (data) => jobOf(data.controlNodeJob as Row),
    response: JOB_VIEW,
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND'],
    example: { params: { id: exampleJob.id }, response: exampleJob },
  },
  {
    method: 'POST', path: '/controlnode/job/{id}/cancel', operation: 'ControlNodeJobCancel', tag: 'controlnode', params: JOB_PARAM,
    summary: 'Cancel a running provision job',
    description: 'Cancels a running provision job by job ID: its run is aborted, its cleanup ejects the ISO and ends the ISO\'s URL and the job\'s callback token, and the node fails from deploying (ABORTED; recover takes it on). Idempotent: a job already cancelling or cancelled answers as it is; INVALID_STATE for one that completed or failed. Authorization: compute:nodes:provision on the node.',
    variables: ({ params }) => ({ id: params.id }),
    respond: (data) => jobOf(data.cancelControlNodeJob as Row),
    response: JOB_VIEW,
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND', 'INVALID_STATE', 'CONFLICT'],
    example: { params: { id: exampleJob.id }, response: { ...exampleJob, job_status: 'cancelling', status: 'Cancelling: ejecting the ISO' } },
  },
];


const PROGRESS_RECORD = view({
  bmc_ip: str, created_at: { type: 'string', format: 'date-time' },
  id: { ...int, description: 'stable per step: the job\'s creation time in ms and the step\'s place' },
  job_id: { ...str, description: 'active queue job id for UI cancel recovery (empty once the job ended)' },
  message: { ...str, description: 'detailed status message' },
  percent_complete: { ...int, description: '0-100' },
  stage: { ...str, description: 'e.g., "Building ISO", "Mounting ISO", "Installing OS"' },
  status: { type: 'string', enum: ['running', 'completed', 'failed', 'cancelled'] },
  updated_at: { type: 'string', format: 'date-time' },
}, 'ProvisionProgress');
const progressOf = (progress: Row) => ({
  bmc_ip: progress.bmcIp, created_at: progress.createdAt, id: progress.id, job_id: progress.activeJobId, message: progress.message, percent_complete: progress.percentComplete,
  stage: progress.stage, status: String(progress.status).toLowerCase(), updated_at: progress.updatedAt,
});
const PROGRESS_BODY: JsonSchema = { type: 'object', additionalProperties: false, required: ['bmc_ip'], properties: { bmc_ip: { ...str, description: 'the BMC address provisioned' } } };
const exampleProgress = { bmc_ip: '10.20.0.11', created_at: '2026-12-02T04:31:05.000Z', id: 176465220000004, job_id: 'wr_01KB3Q9XK7F2M4N6P8R0T2V4X7', message: 'waiting for the installer (the last step was "installing-base" (50%), at 2026-12-02T04:36:40.120Z)', percent_complete: 64, stage: 'Installing OS', status: 'running', updated_at: '2026-12-02T04:36:40.130Z' };
const QUEUE_ENTRY = view({
  queue_id: { ...str, description: 'the ISO-build queue entry' }, job_id: { ...str, description: 'the provisioning job it builds for' },
  state: { type: 'string', enum: ['pending', 'active'] }, bmc_ip: str, hostname: str,
  created_at: { type: 'string', format: 'date-time' }, started_at: nullable({ type: 'string', format: 'date-time' }),
}, 'ProvisionIsoBuild');

/** The progress routes' one variable, $bmcIp, is the body's bmc_ip. */
const bmcIpBodyField = (field: string) => (field === '$bmcIp' || field === 'bmcIp' ? 'body.bmc_ip' : null);

const progressRoutes: Route[] = [
  {
    method: 'POST', path: '/controlnode/provision/progress', operation: 'ProvisionProgress', tag: 'controlnode', body: PROGRESS_BODY,
    summary: 'Get latest provision progress for a BMC IP',
    description: 'Fetches the most recent provisioning state for a BMC IP: the step of its provisioning jobs that changed last (the steps of a job are its progress records; GraphQL provisionProgress(bmcIp, latest: true)). Useful for UI recovery after timeout/logout. NOT_FOUND when that BMC has no provisioning job the caller may read. Authorization: read on the node.',
    variables: ({ body }) => ({ bmcIp: body!.bmc_ip, latest: true }),
    respond: (data, { body }) => {
      const list = data.provisionProgress as Row[];
      if (!list[0]) throw notFound('provision progress', String(body!.bmc_ip));
      return progressOf(list[0]);
    },
    response: PROGRESS_RECORD,
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND'],
    restField: bmcIpBodyField,
    example: { body: { bmc_ip: '10.20.0.11' }, response: exampleProgress },
  },
  {
    method: 'POST', path: '/controlnode/provision/progress/all', operation: 'ProvisionProgress', operationId: 'ProvisionProgressAll', tag: 'controlnode', body: PROGRESS_BODY,
    summary: 'Get all provision progress records for a BMC IP',
    description: 'Fetches all provisioning states for a specific BMC IP, ordered by timestamp: every step of its provisioning jobs, oldest first (an empty list when none). Authorization: read on the node.',
    variables: ({ body }) => ({ bmcIp: body!.bmc_ip, latest: false }),
    respond: (data) => (data.provisionProgress as Row[]).map(progressOf),
    response: { type: 'array', items: PROGRESS_RECORD },
    refusals: ['PERMISSION_DENIED'],
    restField: bmcIpBodyField,
    example: { body: { bmc_ip: '10.20.0.11' }, response: [exampleProgress] },
  },
  {
    method: 'GET', path: '/controlnode/provision/queue', operation: 'ProvisionIsoQueue', tag: 'controlnode',
    summary: 'Get provision queue status',
    description: 'Returns all pending and active ISO-build queue entries (of nodes the caller may read), oldest first.',
    variables: () => ({}),
    respond: (data) => (data.provisionIsoQueue as Row[]).map((e) => ({ queue_id: e.queueId, job_id: e.jobId, state: e.state, bmc_ip: e.bmcIp, hostname: e.hostname, created_at: e.createdAt, started_at: e.startedAt })),
    response: { type: 'array', items: QUEUE_ENTRY },
    refusals: ['PERMISSION_DENIED'],
    example: { response: [{ queue_id: '0b2f4e1c-5d6a-4b7c-8e9f-1a2b3c4d5e6f', job_id: 'wr_01KB3Q9XK7F2M4N6P8R0T2V4X7', state: 'active', bmc_ip: '10.20.0.11', hostname: 'cn-r12-07', created_at: '2026-12-02T04:31:00.000Z', started_at: '2026-12-02T04:31:00.400Z' }] },
  },
];


const UNPROVISION_FIELDS: Record<string, string> = { bmc_ip: 'bmcIp', bmc_pass: 'bmcPass', bmc_user: 'bmcUser', vendor: 'vendor' };
const unprovisionRoute: Route = {
  method: 'POST', path: '/controlnode/unprovision', operation: 'ControlNodeUnprovision', tag: 'controlnode',
  summary: 'Unprovision a node',
  description: 'Unprovision a node by wiping storage: the metal undeploy of the node whose BMC has the address bmc_ip (legal from deployed; INVALID_STATE otherwise, NOT_FOUND when no node has it). Its release workflow wipes every disk (a quick wipe, attested per disk by the ramdisk; an unattested wipe ends UNVERIFIED_WIPE) and powers off, then ready. bmc_user and bmc_pass, when given, replace the node\'s BMC credentials first (secret broker); vendor its Redfish flavour. The job is that run (GET /controlnode/job/{id}: job_type unprovision). Authorization: compute:nodes:provision on the node.',
  body: { type: 'object', additionalProperties: false, required: ['bmc_ip'], properties: { bmc_ip: str, bmc_pass: { ...str, description: 'kept in the secret broker, never returned' }, bmc_user: str, vendor: str } },
  variables: ({ body }) => ({ input: Object.fromEntries(Object.entries(body ?? {}).map(([k, v]) => [UNPROVISION_FIELDS[k] ?? k, v])) }),
  respond: (data) => {
    const r = data.unprovisionControlNode as Row;
    const node = r.node as Row;
    return { success: true, job_id: r.jobId, node_id: node.id, status: node.provisionState, message: r.message };
  },
  response: view({ success: bool, job_id: str, node_id: str, status: { ...str, description: 'the node\'s provision state: releasing' }, message: str }, 'ControlNodeUnprovisionStarted'),
  refusals: ['PERMISSION_DENIED', 'NOT_FOUND', 'INVALID_STATE', 'INVALID_CONFIG', 'CONFLICT'],
  restField: (field) => {
    const m = /^\$?input\.([A-Za-z]+)$/.exec(field);
    const rest = m ? Object.entries(UNPROVISION_FIELDS).find(([, v]) => v === m[1])?.[0] : undefined;
    return rest ? `body.${rest}` : null;
  },
  example: { body: { bmc_ip: '10.20.0.11', vendor: 'dell' }, response: { success: true, job_id: 'wr_01KB3Q9XK7F2M4N6P8R0T2V4X8', node_id: 'nd_01KB3Q9XK7F2M4N6P8R0T2V4X6', status: 'releasing', message: 'unprovisioning node nd_01KB3Q9XK7F2M4N6P8R0T2V4X6 (job wr_01KB3Q9XK7F2M4N6P8R0T2V4X8): wiping its disks (quick, attested per disk), then powering off' } },
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
  provisionRoute(null),
  ...PROVISION_VENDORS.map(provisionRoute),
  ...jobRoutes,
  ...progressRoutes,
  unprovisionRoute,
];

/** GraphQL's enum value (INVENTORY_ITEM) as the wire's word (inventory-item). */
function wireSource(v: unknown): string {
  return v === 'MODULE' ? 'module' : 'inventory-item';
}
