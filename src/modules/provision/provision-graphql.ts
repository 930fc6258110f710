import { builder } from '../../graphql/builder';
import { provisionControlNode, PROVISION_VENDORS, unprovisionControlNode, type ProvisionResult } from './provision';
import { cancelControlNodeJob, controlNodeJob, isoQueue, provisionProgress, type ControlNodeJob, type IsoQueueEntry, type ProgressRecord } from './jobs';

/** The seed's POST /controlnode/provision (and its vendor variants) in GraphQL: provisionControlNode. */

const ProvisionInput = builder.inputType('ProvisionControlNodeInput', {
  description: 'The seed\'s provision request (POST /controlnode/provision), camelCased (bmc_IP is bmcIp)',
  fields: (t) => ({
    bmcIp: t.string({ required: true, description: 'The BMC address of the node to install (a metal node with that BMC)' }),
    vendor: t.string({ required: false, description: `${PROVISION_VENDORS.join(', ')}: the Redfish flavour the BMC is driven with` }),
    hostname: t.string({ required: false, description: 'The installed system\'s host name. Optional: without it, the NetBox device\'s name for the BMC, else node-<serial> from the serial the BMC reports (for a new BMC, once its enrollment read it); the job\'s metadata says which (hostnameSource: request, netbox or bmc-serial)' }),
    osUsername: t.string({ required: false, description: 'The OS user (default debian; root\'s login is disabled, the user gets sudo)' }),
    osPassword: t.string({ required: false, description: 'Kept in the secret broker; the ISO holds only its SHA-512 crypt hash. Absent: a random one, kept in the broker' }),
    rootPass: t.string({ required: false, description: 'Not used: root\'s login is disabled' }),
    selectedDisks: t.stringList({ required: false, description: 'The disks the root goes on (nvme0n1, sda, or /dev/disk/by-id paths)' }),
    poolType: t.string({ required: false, description: 'mirror (2+ disks), raidz1 (3+), raidz2 (4+), stripe, single (exactly 1): see docs/controlnode.md for how each is realised' }),
    selectedNic: t.string({ required: false, description: 'e.g. enp0s3' }),
    selectedNicLegacy: t.string({ required: false, description: 'e.g. eth0' }),
    selectedNicMac: t.string({ required: false, description: 'The NIC by MAC (preferred over its name)' }),
    macAddress: t.string({ required: false }),
    gpuPassthrough: t.field({ type: 'JSON', required: false, description: 'true, or { iommu: intel|amd, pci_ids: [vendor:device] }: IOMMU and vfio-pci on the installed system' }),
    controlnodeHost: t.string({ required: false, description: 'Where the installer reports (else PUBLIC_URL)' }),
    controlnodePort: t.string({ required: false }),
    cacheDir: t.string({ required: false, description: 'Must lie inside ISO_DIR' }),
    outputIso: t.string({ required: false, description: 'Must lie inside ISO_DIR' }),
    pxePath: t.string({ required: false, description: 'Must lie inside ISO_DIR' }),
    deviceId: t.int({ required: false, description: 'NetBox Device ID for tracking' }),
    prefixId: t.int({ required: false, description: 'The NetBox prefix the OS\'s static IPv4 address is allocated from (NetBox\'s available-ips; gateway: its gateway custom field, else its first host); absent, DHCP on the chosen NIC' }),
    networkRole: t.string({ required: false }),
    kubernetesClusterName: t.string({ required: false }),
    kubernetesClusterType: t.string({ required: false }),
    location: t.string({ required: false }),
    zone: t.string({ required: false }),
    rackNumber: t.string({ required: false }),
    vmSlot: t.string({ required: false }),
    arch: t.string({ required: false }),
    branch: t.string({ required: false }),
    debianVersion: t.string({ required: false }),
    pxeServer: t.string({ required: false }),
    sysIuri: t.string({ required: false }),
  }),
});

const ProvisionPayload = builder.objectRef<ProvisionResult>('ProvisionControlNodePayload').implement({
  fields: (t) => ({
    jobId: t.exposeString('jobId', { description: 'The job: the node\'s metal-install workflow run (workflowProgress, the timeline); for a BMC no node had, the enrollment run whose chain ends in the install' }),
    message: t.exposeString('message'),
    node: t.prismaField({ type: 'Node', resolve: (query, p, _a, ctx) => ctx.prisma.node.findUniqueOrThrow({ ...query, where: { id: p.nodeId } }) }),
  }),
});

const VendorEnum = builder.enumType('ProvisionVendor', { values: PROVISION_VENDORS.map((v) => v.toUpperCase()) as unknown as readonly string[] });

builder.mutationField('provisionControlNode', (t) =>
  t.field({
    type: ProvisionPayload,
    description: 'Installs Debian on the node whose BMC has bmcIp: a metal deploy (legal from ready) whose installer is a per-job ISO (preseed, xorriso) booted over the BMC\'s virtual media in the vendor\'s Redfish flavour (vendor, or the route\'s). A BMC address no node has is enrolled first into CONTROLNODE_POOL_ID\'s pool with CONTROLNODE_BMC_CREDENTIALS_FILE\'s credentials (NOT_FOUND without them), and its job goes through verify, inspect and commission before the install. The job reports its steps (Building ISO, Mounting ISO, Installing OS...) in its run\'s timeline and through workflowProgress. Decided as compute:nodes:provision on the node.',
    args: { input: t.arg({ type: ProvisionInput, required: true }), vendor: t.arg({ type: VendorEnum, required: false, description: 'The vendor of the route (provision/<vendor>): it wins over input.vendor' }) },
    resolve: (_root, { input, vendor }, ctx) => provisionControlNode(ctx, input, vendor ? String(vendor).toLowerCase() : null),
  }),
);

const JobStatusEnum = builder.enumType('ControlNodeJobStatus', {
  values: { PENDING: { value: 'pending' }, RUNNING: { value: 'running' }, CANCELLING: { value: 'cancelling' }, COMPLETED: { value: 'completed' }, FAILED: { value: 'failed' }, CANCELLED: { value: 'cancelled' } } as const,
});

const JobRef = builder.objectRef<ControlNodeJob>('ControlNodeJob').implement({
  description: 'A control-node job (seed 004\'s job): the node\'s workflow run, with its stage and progress',
  fields: (t) => ({
    id: t.exposeString('id', { description: 'The job id: the workflow run\'s (workflowProgress, jobProgress, MetalNode.timeline)' }),
    jobType: t.exposeString('jobType', { description: 'provision' }),
    jobStatus: t.field({ type: JobStatusEnum, resolve: (j) => j.jobStatus }),
    status: t.exposeString('status', { description: 'The stage now (Building ISO, Mounting ISO, Installing OS...), or how the job ended' }),
    progress: t.exposeInt('progress', { description: '0-100: the steps done, and the installer\'s own percent within Installing OS' }),
    metadata: t.exposeString('metadata', { description: 'The job\'s request as recorded, as JSON text (no password)' }),
    nodeIp: t.exposeString('nodeIp', { description: 'The BMC address the job was asked for' }),
    parentId: t.exposeString('parentId', { description: 'The batch it belongs to, empty when none' }),
    resourceName: t.exposeString('resourceName', { description: 'The host name being installed' }),
    totalJobs: t.exposeInt('totalJobs'),
    lastError: t.exposeString('lastError', { nullable: true, description: 'CODE: message, once it failed or was cancelled' }),
    createdAt: t.field({ type: 'DateTime', resolve: (j) => j.createdAt }),
    updatedAt: t.field({ type: 'DateTime', resolve: (j) => j.updatedAt }),
    node: t.prismaField({ type: 'Node', resolve: (query, j, _a, ctx) => ctx.prisma.node.findUniqueOrThrow({ ...query, where: { id: j.nodeId } }) }),
  }),
});

builder.queryField('controlNodeJob', (t) =>
  t.field({
    type: JobRef,
    description: 'A control-node job by id (GET /controlnode/job/{id}). NOT_FOUND for an id that is no job the caller may read.',
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, { id }, ctx) => controlNodeJob(ctx, String(id)),
  }),
);

builder.mutationField('cancelControlNodeJob', (t) =>
  t.field({
    type: JobRef,
    description: 'Cancels a running job (POST /controlnode/job/{id}/cancel): its run is aborted, its cleanup ejects the ISO and ends its URL and callback token, and the node fails from deploying (ABORTED; recover takes it on). Idempotent; INVALID_STATE for a job that already completed or failed. Decided as compute:nodes:provision on the node.',
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, { id }, ctx) => cancelControlNodeJob(ctx, String(id)),
  }),
);

const ProgressStatusEnum = builder.enumType('ProvisionProgressStatus', {
  values: { RUNNING: { value: 'running' }, COMPLETED: { value: 'completed' }, FAILED: { value: 'failed' }, CANCELLED: { value: 'cancelled' } } as const,
});

const ProgressRef = builder.objectRef<ProgressRecord>('ProvisionProgress').implement({
  description: 'One provision progress record (seed 004\'s provision_progresses): a step of a provisioning job',
  fields: (t) => ({
    id: t.field({ type: 'Float', resolve: (p) => p.id, description: 'Stable per step (an integer): the job\'s creation time in ms and the step\'s place' }),
    bmcIp: t.exposeString('bmcIp'),
    jobId: t.exposeString('jobId', { description: 'The job this step belongs to' }),
    activeJobId: t.exposeString('activeJobId', { description: 'The job\'s id while it is active (for a UI\'s cancel button), else empty' }),
    stage: t.exposeString('stage', { description: 'e.g. Building ISO, Mounting ISO, Installing OS' }),
    status: t.field({ type: ProgressStatusEnum, resolve: (p) => p.status }),
    percentComplete: t.exposeInt('percentComplete', { description: '0-100, of the whole job' }),
    message: t.exposeString('message', { description: 'The step\'s timeline message' }),
    createdAt: t.field({ type: 'DateTime', resolve: (p) => p.createdAt }),
    updatedAt: t.field({ type: 'DateTime', resolve: (p) => p.updatedAt }),
  }),
});

builder.queryField('provisionProgress', (t) =>
  t.field({
    type: [ProgressRef],
    description: 'The provision progress of the node whose BMC has this address: every step of its provisioning jobs, oldest first, or (latest: true) the one changed last. POST /controlnode/provision/progress and /progress/all.',
    args: { bmcIp: t.arg.string({ required: true }), latest: t.arg.boolean({ required: false, defaultValue: false }) },
    resolve: (_root, { bmcIp, latest }, ctx) => provisionProgress(ctx, bmcIp, latest ?? false),
  }),
);

const IsoQueueRef = builder.objectRef<IsoQueueEntry>('ProvisionIsoBuild').implement({
  description: 'An installer ISO build waiting or running in the ISO-build queue',
  fields: (t) => ({
    queueId: t.exposeString('queueId', { description: 'The queue entry (pg-boss job id)' }),
    jobId: t.exposeString('jobId', { description: 'The provisioning job it builds for' }),
    state: t.exposeString('state', { description: 'pending or active' }),
    bmcIp: t.exposeString('bmcIp'),
    hostname: t.exposeString('hostname'),
    createdAt: t.field({ type: 'DateTime', resolve: (e) => e.createdAt }),
    startedAt: t.field({ type: 'DateTime', nullable: true, resolve: (e) => e.startedAt }),
  }),
});

builder.queryField('provisionIsoQueue', (t) =>
  t.field({
    type: [IsoQueueRef],
    description: 'The ISO builds waiting and running (GET /controlnode/provision/queue), of nodes the caller may read, oldest first.',
    resolve: (_root, _args, ctx) => isoQueue(ctx),
  }),
);

const UnprovisionInput = builder.inputType('UnprovisionControlNodeInput', {
  description: 'The seed\'s unprovision request (POST /controlnode/unprovision), camelCased',
  fields: (t) => ({
    bmcIp: t.string({ required: true, description: 'The BMC address of the node to unprovision' }),
    bmcUser: t.string({ required: false, description: 'With bmcPass: replaces the node\'s BMC credentials (kept in the secret broker)' }),
    bmcPass: t.string({ required: false }),
    vendor: t.string({ required: false, description: 'cisco, dell, hp, lenovo or supermicro: the Redfish flavour from now on' }),
  }),
});

builder.mutationField('unprovisionControlNode', (t) =>
  t.field({
    type: ProvisionPayload,
    description: 'The metal undeploy of the node whose BMC has bmcIp (legal from deployed): its release workflow wipes the disks (quick, attested per disk; unattested ends UNVERIFIED_WIPE) and powers off, then ready. The job is that run (controlNodeJob: jobType unprovision). Decided as compute:nodes:provision on the node.',
    args: { input: t.arg({ type: UnprovisionInput, required: true }) },
    resolve: (_root, { input }, ctx) => unprovisionControlNode(ctx, input),
  }),
);
