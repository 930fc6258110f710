import type { ErrorCode } from '../../errors';
import { PROVISION_STATES, ref, schemaTypes, type JsonSchema } from '../../rest/schemas';
import { EXAMPLE_IDS as ID, exampleBatch, exampleDiscoveredMachine, exampleMetalNode, examplePageInfo } from '../../rest/examples';
import { NODE_VERB, READ_ONE, edgesToList, envelope, idParam, one, type Route } from '../../rest/route-kit';

/** The metal group's REST routes: node reads, then every verb of the seed (POST /api/compute/metal/<verb>). */

const { str, int, bool } = schemaTypes;

const NULLABLE_STR = { anyOf: [str, { type: 'null' }] };
const NULLABLE_TIME = { anyOf: [{ type: 'string', format: 'date-time' }, { type: 'null' }] };
const closed = (properties: Record<string, JsonSchema>): JsonSchema => ({ type: 'object', required: Object.keys(properties), properties });
const WORKFLOW_STEP = closed({
  idx: int, name: str, title: str, status: { type: 'string', enum: ['pending', 'running', 'waiting', 'succeeded', 'failed', 'skipped'] },
  destructive: bool, cleanup: bool, attempts: int, startedAt: NULLABLE_TIME, finishedAt: NULLABLE_TIME, message: NULLABLE_STR, errorCode: NULLABLE_STR,
});
const WORKFLOW_RUN = closed({
  id: str, nodeId: str, kind: str,
  status: { type: 'string', enum: ['queued', 'running', 'waiting', 'aborting', 'succeeded', 'failed', 'aborted', 'superseded'] },
  params: { type: 'object' }, createdAt: { type: 'string', format: 'date-time' }, startedAt: NULLABLE_TIME, finishedAt: NULLABLE_TIME,
  waitingFor: NULLABLE_STR, waitUntil: NULLABLE_TIME, attempt: int, resumes: int,
  lastError: { anyOf: [closed({ code: str, message: str }), { type: 'null' }] },
  steps: { type: 'array', items: WORKFLOW_STEP },
});

export const metalRoutes: Route[] = [
  {
    method: 'GET',
    path: '/api/compute/metal/nodes/{id}',
    operation: 'MetalNode',
    tag: 'metal',
    summary: 'Get a metal node',
    description: 'The metal view of one node. Another tenant\'s node is NOT_FOUND.',
    params: idParam,
    variables: ({ params }) => ({ id: params.id }),
    respond: (data, { params }) => ({ node: one(data.node, 'node', params.id!) }),
    response: envelope({ node: ref('MetalNode') }),
    refusals: READ_ONE,
    example: { params: { id: ID.node }, response: { node: exampleMetalNode() } },
  },
  {
    method: 'GET',
    path: '/api/compute/metal/nodes',
    operation: 'MetalNodes',
    tag: 'metal',
    summary: 'List metal nodes',
    description: 'Nodes the caller may read, oldest first, a page at a time (follow pageInfo.endCursor with `after`).',
    query: {
      type: 'object',
      additionalProperties: false,
      properties: {
        siteId: { ...str, description: 'Only the nodes of this site' },
        poolId: { ...str, description: 'Only the nodes of this pool' },
        provisionState: { type: 'string', enum: PROVISION_STATES },
        maintenance: bool,
        first: { ...int, minimum: 1, description: 'Page size (default 50, at most MAX_PAGE_SIZE)' },
        after: { ...str, description: 'pageInfo.endCursor of the previous page' },
      },
    },
    variables: ({ query }) => ({
      first: query.first ?? 50,
      after: query.after,
      filter: {
        siteId: query.siteId,
        poolId: query.poolId,
        provisionState: query.provisionState,
        maintenance: query.maintenance,
      },
    }),
    respond: (data) => {
      const { list, pageInfo } = edgesToList(data.nodes as never);
      return { nodes: list, pageInfo };
    },
    response: envelope({ nodes: { type: 'array', items: ref('MetalNode') }, pageInfo: ref('PageInfo') }),
    refusals: [],
    example: {
      query: { poolId: ID.pool, provisionState: 'ready', first: 20 },
      response: { nodes: [exampleMetalNode()], pageInfo: examplePageInfo },
    },
  },
  {
    method: 'GET',
    path: '/api/compute/metal/nodes/{id}/timeline',
    operation: 'MetalNodeTimeline',
    tag: 'metal',
    summary: "A metal node's timeline",
    description: 'Its workflow runs, newest first, each with every step: a human title, status, start and end, attempts and the last message (a retry clears the previous failure\'s). Never cached.',
    params: idParam,
    query: {
      type: 'object',
      additionalProperties: false,
      properties: { last: { ...int, minimum: 1, maximum: 50, description: 'How many runs (default 10)' } },
    },
    variables: ({ params, query }) => ({ id: params.id, last: query.last }),
    respond: (data, { params }) => {
      const node = one(data.node, 'node', params.id!) as { id: string; timeline: unknown[] };
      return { nodeId: node.id, runs: node.timeline };
    },
    response: envelope({ nodeId: str, runs: { type: 'array', items: WORKFLOW_RUN } }),
    refusals: READ_ONE,
    example: {
      params: { id: ID.node },
      response: { nodeId: ID.node, runs: [exampleRun()] },
    },
  },
  ...metalVerbRoutes(),
];

function exampleRun(): Record<string, unknown> {
  const step = (idx: number, name: string, title: string, status: string, extra: Record<string, unknown> = {}) => ({
    idx, name, title, status, destructive: name !== 'await-inventory', cleanup: false, attempts: status === 'pending' ? 0 : 1,
    startedAt: status === 'pending' ? null : '2026-11-30T09:13:02.118Z', finishedAt: status === 'succeeded' ? '2026-11-30T09:13:40.502Z' : null,
    message: null, errorCode: null, ...extra,
  });
  return {
    id: ID.workflow, nodeId: ID.node, kind: 'metal-inspect', status: 'waiting', params: { verb: 'inspect' },
    createdAt: '2026-11-30T09:13:01.940Z', startedAt: '2026-11-30T09:13:02.101Z', finishedAt: null,
    waitingFor: 'the inspection ramdisk to report its inventory', waitUntil: '2026-11-30T09:43:02.118Z', attempt: 1, resumes: 0, lastError: null,
    steps: [
      step(0, 'boot-inspection-ramdisk', 'Booting the inspection ramdisk', 'succeeded', { message: 'PXE once, powered on' }),
      step(1, 'await-inventory', 'Waiting for the inspection ramdisk to report its inventory', 'waiting', { message: 'waiting for the inspection ramdisk to report its inventory' }),
      step(2, 'power-off', 'Powering off', 'pending'),
    ],
  };
}



/** POST /api/compute/metal/<verb>: the seed's metal group, each running its GraphQL mutation. */
function metalVerbRoutes(): Route[] {
  const nodeId = { ...str, description: 'The metal node' };
  const verbs: {
    verb: string;
    operation: string;
    field: string;
    summary: string;
    extra?: Record<string, JsonSchema>;
    required?: string[];
    map?: (body: Record<string, unknown>) => Record<string, unknown>;
    /** The node as the verb leaves it, for the example (and the body beyond nodeId). */
    example: { body?: Record<string, unknown>; node: Record<string, unknown> };
    refusals?: ErrorCode[];
  }[] = [
    { verb: 'manage', operation: 'Manage', field: 'manageNode', summary: 'Move a ready node back to enrolling to re-verify BMC access', example: { node: { provisionState: 'enrolling', version: 5 } } },
    { verb: 'inspect', operation: 'Inspect', field: 'inspectNode', summary: 'Move a ready node to inspecting', example: { node: { provisionState: 'inspecting', version: 5 } } },
    { verb: 'provide', operation: 'Provide', field: 'provideNode', summary: 'Move a ready node to commissioning', example: { node: { provisionState: 'commissioning', version: 5 } } },
    {
      verb: 'recover',
      operation: 'Recover',
      field: 'recoverNode',
      summary: 'Move a failed node to the last stable point for the state it failed in',
      example: { node: { provisionState: 'releasing', version: 7 } },
    },
    {
      verb: 'rescue',
      operation: 'Rescue',
      field: 'rescueNode',
      summary: 'Move a deployed node to rescue (boots the rescue ramdisk)',
      example: { node: { provisionState: 'rescue', role: 'gpu-worker', profileId: ID.deployProfile, profileVersion: 3, workflowId: ID.workflow, version: 9 } },
    },
    {
      verb: 'unrescue',
      operation: 'Unrescue',
      field: 'unrescueNode',
      summary: 'Boot a rescued node back into its installed OS (metal-unrescue workflow)',
      example: { node: { provisionState: 'rescue', role: 'gpu-worker', profileId: ID.deployProfile, profileVersion: 3, workflowId: ID.workflow, version: 10 } },
      refusals: [...NODE_VERB, 'INVALID_CONFIG'],
    },
    { verb: 'retire', operation: 'Retire', field: 'retireNode', summary: 'Move a node to retiring', example: { node: { provisionState: 'retiring', version: 5 } } },
    {
      verb: 'deploy',
      operation: 'Deploy',
      field: 'deployNode',
      summary: 'Move a ready node to deploying with the given profile version recorded on it',
      extra: { profileId: str, profileVersion: { ...int, minimum: 1 } },
      required: ['profileId', 'profileVersion'],
      example: {
        body: { profileId: ID.deployProfile, profileVersion: 3 },
        node: { provisionState: 'deploying', profileId: ID.deployProfile, profileVersion: 3, workflowId: ID.workflow, version: 5 },
      },
    },
    {
      verb: 'abort',
      operation: 'Abort',
      field: 'abortNode',
      summary: 'Stop the node\'s workflow and move it to failed',
      extra: { reason: str },
      example: {
        body: { reason: 'wrong profile' },
        node: {
          provisionState: 'failed', failedFrom: 'deploying', maintenance: true,
          lastError: { code: 'ABORTED', message: 'aborted: wrong profile' }, profileId: ID.deployProfile, profileVersion: 3, version: 6,
        },
      },
    },
    {
      verb: 'undeploy',
      operation: 'Undeploy',
      field: 'undeployNode',
      summary: 'Move a deployed or rescue node to releasing (wipe: none, quick (default), secure-erase or crypto-erase)',
      extra: { wipe: { type: 'string', enum: ['none', 'quick', 'secure-erase', 'crypto-erase'] } },
      // GraphQL enum values cannot hold "-": secure-erase is secure_erase there.
      map: (body) => ({ ...body, ...(typeof body.wipe === 'string' ? { wipe: body.wipe.replace('-', '_') } : {}) }),
      example: { body: { wipe: 'secure-erase' }, node: { provisionState: 'releasing', workflowId: ID.workflow, version: 11 } },
    },
  ];
  const enrollRoute: Route = {
    method: 'POST',
    path: '/api/compute/metal/enroll',
    operation: 'Enroll',
    tag: 'metal',
    summary: 'Create a metal node from a BMC address, driver and credentials in the given pool',
    description: 'Authorization: compute:nodes:provision on the pool. bmc.credentials is a secret:// reference or { username, password } (stored in the secret broker, never returned). Each call creates a new node. Publishes node.enrolled.',
    body: {
      type: 'object',
      additionalProperties: false,
      required: ['poolId', 'bmc'],
      properties: {
        poolId: str,
        siteId: str,
        name: str,
        bmc: {
          type: 'object',
          additionalProperties: false,
          required: ['address', 'driver', 'credentials'],
          properties: {
            address: str,
            driver: { type: 'string', enum: ['redfish', 'ipmi', 'idrac', 'ilo', 'xcc', 'cimc', 'supermicro'] },
            credentials: {
              anyOf: [
                { type: 'string', pattern: '^secret://' },
                { type: 'object', additionalProperties: false, required: ['username', 'password'], properties: { username: str, password: str } },
              ],
            },
            driverOptions: { type: 'object' },
          },
        },
        hardwareProfile: str,
        addresses: { type: 'array', maxItems: 16, items: str },
        macs: { type: 'array', items: str },
        productUuid: str,
      },
    },
    variables: ({ body }) => {
      const bmc = body!.bmc as Record<string, unknown>;
      const credentials = typeof bmc.credentials === 'string' ? { ref: bmc.credentials } : bmc.credentials;
      return { input: { ...body, bmc: { ...bmc, credentials } } };
    },
    respond: (data) => ({ node: (data.enrollNode as { node: unknown }).node }),
    response: envelope({ node: ref('MetalNode') }),
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND', 'CONFLICT', 'INVALID_CONFIG'],
    example: {
      body: {
        poolId: ID.pool,
        name: 'rack1-u12',
        bmc: { address: '10.0.0.5', driver: 'redfish', credentials: 'secret://bmc/rack1-u12' },
        macs: ['52:54:00:12:34:56'],
      },
      response: {
        node: exampleMetalNode({ provisionState: 'enrolling', addresses: [], productUuid: null, version: 1, updatedAt: '2026-11-30T09:12:44.301Z' }),
      },
    },
  };
  const powerRoute: Route = {
    method: 'POST',
    path: '/api/compute/metal/power',
    operation: 'Power',
    tag: 'metal',
    summary: 'Queue a bmc.power command to the site agent of the node\'s site',
    description: 'Authorization: compute:nodes:power on the node. The command expires five minutes after it is queued; a retry with the same X-Request-Id returns the same command.',
    body: {
      type: 'object',
      additionalProperties: false,
      required: ['nodeId', 'action'],
      properties: { nodeId, action: { type: 'string', enum: ['on', 'off', 'graceful-off', 'reset', 'graceful-restart', 'cycle', 'nmi'] } },
    },
    variables: ({ body }) => ({ input: { ...body, action: String(body!.action).replace('-', '_') } }),
    respond: (data) => {
      const payload = data.powerNode as { node: unknown; commandId: string };
      return { node: payload.node, commandId: payload.commandId };
    },
    response: envelope({ node: ref('MetalNode'), commandId: { ...str, description: 'The queued bmc.power command' } }),
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND', 'INVALID_STATE', 'CONFLICT'],
    example: { body: { nodeId: ID.node, action: 'cycle' }, response: { node: exampleMetalNode(), commandId: ID.command } },
  };
  const bulkRoute: Route = {
    method: 'POST',
    path: '/api/compute/metal/bulk',
    operation: 'Bulk',
    tag: 'metal',
    summary: 'Run one lifecycle verb on many nodes of a pool at once, as one batch',
    description: 'Authorization: compute:nodes:provision on the pool, then per node. All or nothing: one refusal refuses the whole call, listing every refused node (error.details.refused).',
    body: {
      type: 'object',
      additionalProperties: false,
      required: ['poolId', 'verb', 'nodeIds'],
      properties: {
        poolId: str,
        verb: { type: 'string', enum: ['manage', 'inspect', 'provide', 'undeploy', 'rescue', 'retire'] },
        nodeIds: { type: 'array', minItems: 1, maxItems: 10000, items: str },
        reason: str,
        wipe: { type: 'string', enum: ['none', 'quick', 'secure-erase', 'crypto-erase'] },
      },
    },
    variables: ({ body }) => ({ input: { ...body, ...(typeof body!.wipe === 'string' ? { wipe: body!.wipe.replace('-', '_') } : {}) } }),
    respond: (data) => {
      const payload = data.bulkNodes as { nodes: unknown[]; batch: unknown };
      return { nodes: payload.nodes, batch: payload.batch };
    },
    response: envelope({
      nodes: { type: 'array', items: ref('MetalNode') },
      batch: { anyOf: [ref('CommandBatch'), { type: 'null' }], description: 'null for verbs that send nothing destructive' },
    }),
    refusals: NODE_VERB,
    example: {
      body: { poolId: ID.pool, verb: 'retire', nodeIds: [ID.node, ID.otherNode], reason: 'decommission rack 1' },
      response: {
        nodes: [
          exampleMetalNode({ provisionState: 'retiring', version: 5 }),
          exampleMetalNode({ id: ID.otherNode, name: 'rack1-u13', macs: ['52:54:00:12:34:57'], productUuid: null, provisionState: 'retiring', version: 3 }),
        ],
        batch: exampleBatch,
      },
    },
  };
  const discoveredRoute: Route = {
    method: 'POST',
    path: '/api/compute/metal/discovered',
    operation: 'Discovered',
    tag: 'metal',
    summary: 'List the machines the site\'s agents saw PXE-booting with no boot entry in the last 24 hours, newest first',
    description: 'Authorization: compute:sites:read on the site; only the tenant that owns the site sees it (NOT_FOUND otherwise).',
    body: { type: 'object', additionalProperties: false, required: ['siteId'], properties: { siteId: str } },
    variables: ({ body }) => ({ siteId: body!.siteId }),
    respond: (data) => ({ machines: data.discovered }),
    response: envelope({ machines: { type: 'array', items: ref('DiscoveredMachine') } }),
    refusals: READ_ONE,
    example: { body: { siteId: ID.site }, response: { machines: [exampleDiscoveredMachine] } },
  };
  const confirmRoute: Route = {
    method: 'POST',
    path: '/api/compute/metal/confirmMac',
    operation: 'ConfirmMac',
    tag: 'metal',
    summary: 'Bind the PXE MAC of a machine enrolled without MACs',
    description: 'Authorization: compute:nodes:provision on the node. INVALID_STATE when the node already has MACs or is retired; CONFLICT when another machine of the site has the MAC.',
    body: { type: 'object', additionalProperties: false, required: ['nodeId', 'mac'], properties: { nodeId, mac: str } },
    variables: ({ body }) => ({ input: body }),
    respond: (data) => ({ node: (data.confirmMac as { node: unknown }).node }),
    response: envelope({ node: ref('MetalNode') }),
    refusals: NODE_VERB,
    example: {
      body: { nodeId: ID.node, mac: '52:54:00:ab:cd:ef' },
      response: { node: exampleMetalNode({ provisionState: 'enrolling', macs: ['52:54:00:ab:cd:ef'], version: 2 }) },
    },
  };
  return [enrollRoute, powerRoute, bulkRoute, discoveredRoute, confirmRoute, ...verbs.map(({ verb, operation, field, summary, extra, required, map, example, refusals }): Route => ({
    method: 'POST',
    path: `/api/compute/metal/${verb}`,
    operation,
    tag: 'metal',
    summary,
    description: 'Authorization: compute:nodes:provision on the node. INVALID_STATE names the current and the legal states; CONFLICT when the node changed concurrently.',
    body: { type: 'object', additionalProperties: false, required: ['nodeId', ...(required ?? [])], properties: { nodeId, ...extra } },
    variables: ({ body }) => ({ input: map ? map(body!) : body }),
    respond: (data) => ({ node: (data[field] as { node: unknown }).node }),
    response: envelope({ node: ref('MetalNode') }),
    refusals: refusals ?? NODE_VERB,
    example: { body: { nodeId: ID.node, ...example.body }, response: { node: exampleMetalNode(example.node) } },
  }))];
}
