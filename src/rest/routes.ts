import { notFound } from '../errors';
import { PERMISSIONS, SCOPE_TYPES } from '../auth/permissions';
import { PROVISION_STATES, ref, schemaTypes, type JsonSchema } from './schemas';

const { str, int, bool } = schemaTypes;

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** What the router hands a route: path parameters, query string and JSON body, all validated. */
export interface RouteInput {
  params: Record<string, string>;
  query: Record<string, unknown>;
  body: Record<string, unknown> | undefined;
}

/**
 * One REST route: `METHOD /path` executes a named GraphQL operation from schema/operations/ and
 * shapes its data into the documented JSON. No rule lives here: the resolvers own them all.
 */
export interface Route {
  method: Method;
  /** OpenAPI style: /api/compute/metal/nodes/{id} */
  path: string;
  operation: string;
  summary: string;
  description?: string;
  tag: string;
  params?: Record<string, JsonSchema>;
  query?: JsonSchema & { properties: Record<string, JsonSchema> };
  body?: JsonSchema;
  variables(input: RouteInput): Record<string, unknown>;
  respond(data: Record<string, unknown>, input: RouteInput): unknown;
  response: JsonSchema;
  successStatus?: number;
}

/** `node(id)` with a type condition gives `{}` for an id of another type: that is NOT_FOUND too. */
function one(value: unknown, what: string, id: string): unknown {
  if (!value || typeof value !== 'object' || !('id' in value)) throw notFound(what, id);
  return value;
}

const POOL_POLICY_INPUT: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    hardwareProfile: { anyOf: [str, { type: 'null' }] },
    agent: { type: 'string', enum: ['none', 'bcd'] },
    trustProvisioningNetwork: bool,
    approverKeys: {
      type: 'array',
      items: { type: 'object', additionalProperties: false, required: ['id', 'publicKey'], properties: { id: str, publicKey: str } },
    },
    quorum: { anyOf: [{ ...int, minimum: 1 }, { type: 'null' }] },
  },
};

const idParam = { id: { ...str, description: 'The entity id (the same string GraphQL uses)' } };

const edgesToList = (connection: { edges: { node: unknown }[]; pageInfo: unknown }) => ({
  list: connection.edges.map((e) => e.node),
  pageInfo: connection.pageInfo,
});

export const routes: Route[] = [
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
    response: { type: 'object', properties: { node: ref('MetalNode') } },
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
        siteId: str,
        poolId: str,
        provisionState: { type: 'string', enum: PROVISION_STATES },
        maintenance: bool,
        first: { ...int, minimum: 1 },
        after: str,
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
    response: { type: 'object', properties: { nodes: { type: 'array', items: ref('MetalNode') }, pageInfo: ref('PageInfo') } },
  },
  {
    method: 'GET',
    path: '/api/compute/sites',
    operation: 'Sites',
    tag: 'tenancy',
    summary: 'List sites',
    variables: () => ({}),
    respond: (data) => ({ sites: data.sites }),
    response: { type: 'object', properties: { sites: { type: 'array', items: ref('Site') } } },
  },
  {
    method: 'GET',
    path: '/api/compute/sites/{id}',
    operation: 'Site',
    tag: 'tenancy',
    summary: 'Get a site',
    params: idParam,
    variables: ({ params }) => ({ id: params.id }),
    respond: (data, { params }) => ({ site: one(data.node, 'site', params.id!) }),
    response: { type: 'object', properties: { site: ref('Site') } },
  },
  {
    method: 'GET',
    path: '/api/compute/pools',
    operation: 'Pools',
    tag: 'tenancy',
    summary: 'List pools',
    query: { type: 'object', additionalProperties: false, properties: { siteId: str } },
    variables: ({ query }) => ({ siteId: query.siteId }),
    respond: (data) => ({ pools: data.pools }),
    response: { type: 'object', properties: { pools: { type: 'array', items: ref('Pool') } } },
  },
  {
    method: 'GET',
    path: '/api/compute/pools/{id}',
    operation: 'Pool',
    tag: 'tenancy',
    summary: 'Get a pool',
    params: idParam,
    variables: ({ params }) => ({ id: params.id }),
    respond: (data, { params }) => ({ pool: one(data.node, 'pool', params.id!) }),
    response: { type: 'object', properties: { pool: ref('Pool') } },
  },
  {
    method: 'GET',
    path: '/api/compute/hardware-profiles',
    operation: 'HardwareProfiles',
    tag: 'tenancy',
    summary: 'List hardware profiles',
    variables: () => ({}),
    respond: (data) => ({ hardwareProfiles: data.hardwareProfiles }),
    response: { type: 'object', properties: { hardwareProfiles: { type: 'array', items: ref('HardwareProfile') } } },
  },
  {
    method: 'GET',
    path: '/api/viewer',
    operation: 'Viewer',
    tag: 'tenancy',
    summary: 'Who the bearer token says the caller is',
    variables: () => ({}),
    respond: (data) => ({ viewer: data.viewer }),
    response: { type: 'object', properties: { viewer: ref('Viewer') } },
  },
  {
    method: 'POST',
    path: '/api/compute/sites',
    operation: 'CreateSite',
    tag: 'tenancy',
    summary: 'Create a site',
    description: 'Needs admin on the tenant. tenantId defaults to the caller\'s tenant.',
    body: { type: 'object', additionalProperties: false, required: ['name'], properties: { tenantId: str, name: str } },
    variables: ({ body }) => ({ input: body }),
    respond: (data) => ({ site: data.createSite }),
    response: { type: 'object', properties: { site: ref('Site') } },
    successStatus: 201,
  },
  {
    method: 'POST',
    path: '/api/compute/pools',
    operation: 'CreatePool',
    tag: 'tenancy',
    summary: 'Create a pool in a site',
    description: 'Needs admin on the site.',
    body: {
      type: 'object',
      additionalProperties: false,
      required: ['siteId', 'name'],
      properties: { siteId: str, name: str, policy: POOL_POLICY_INPUT },
    },
    variables: ({ body }) => ({ input: body }),
    respond: (data) => ({ pool: data.createPool }),
    response: { type: 'object', properties: { pool: ref('Pool') } },
    successStatus: 201,
  },
  {
    method: 'PATCH',
    path: '/api/compute/pools/{id}/policy',
    operation: 'UpdatePoolPolicy',
    tag: 'tenancy',
    summary: 'Change a pool\'s policy',
    description: 'Fields left out keep their value. expectedVersion makes it a compare-and-set (CONFLICT otherwise).',
    params: idParam,
    body: {
      type: 'object',
      additionalProperties: false,
      required: ['policy'],
      properties: { policy: POOL_POLICY_INPUT, expectedVersion: int },
    },
    variables: ({ params, body }) => ({ input: { poolId: params.id, ...body } }),
    respond: (data) => ({ pool: data.updatePoolPolicy }),
    response: { type: 'object', properties: { pool: ref('Pool') } },
  },
  {
    method: 'POST',
    path: '/api/tokens',
    operation: 'CreateApiToken',
    tag: 'tenancy',
    summary: 'Create an API token with grants',
    description: 'The token is in the response once; only its hash is stored.',
    body: {
      type: 'object',
      additionalProperties: false,
      required: ['name', 'grants'],
      properties: {
        name: str,
        tenantId: str,
        expiresAt: { type: 'string', format: 'date-time' },
        grants: {
          type: 'array',
          minItems: 1,
          maxItems: 100,
          items: {
            type: 'object',
            additionalProperties: false,
            required: ['permission', 'scopeType'],
            properties: {
              permission: { type: 'string', enum: [...PERMISSIONS] },
              scopeType: { type: 'string', enum: [...SCOPE_TYPES] },
              scopeId: str,
            },
          },
        },
      },
    },
    variables: ({ body }) => ({ input: body }),
    respond: (data) => data.createApiToken,
    response: {
      type: 'object',
      properties: { token: str, apiToken: { type: 'object', properties: { id: str, name: str, tenantId: { anyOf: [str, { type: 'null' }] } } } },
    },
    successStatus: 201,
  },
  {
    method: 'DELETE',
    path: '/api/tokens/{id}',
    operation: 'RevokeApiToken',
    tag: 'tenancy',
    summary: 'Revoke an API token',
    params: idParam,
    variables: ({ params }) => ({ id: params.id }),
    respond: (data) => ({ apiToken: data.revokeApiToken }),
    response: { type: 'object', properties: { apiToken: { type: 'object', properties: { id: str, revokedAt: str } } } },
  },
  ...metalVerbRoutes(),
];

/** POST /api/compute/metal/<verb>: the seed's metal group, each running its GraphQL mutation. */
function metalVerbRoutes(): Route[] {
  const nodeId = { ...str, description: 'The metal node' };
  const verbs: { verb: string; operation: string; field: string; summary: string; extra?: Record<string, JsonSchema>; required?: string[]; map?: (body: Record<string, unknown>) => Record<string, unknown> }[] = [
    { verb: 'manage', operation: 'Manage', field: 'manageNode', summary: 'Move a ready node back to enrolling to re-verify BMC access' },
    { verb: 'inspect', operation: 'Inspect', field: 'inspectNode', summary: 'Move a ready node to inspecting' },
    { verb: 'provide', operation: 'Provide', field: 'provideNode', summary: 'Move a ready node to commissioning' },
    { verb: 'recover', operation: 'Recover', field: 'recoverNode', summary: 'Move a failed node to the last stable point for the state it failed in' },
    { verb: 'rescue', operation: 'Rescue', field: 'rescueNode', summary: 'Move a deployed node to rescue (boots the rescue ramdisk)' },
    { verb: 'unrescue', operation: 'Unrescue', field: 'unrescueNode', summary: 'Boot a rescued node back into its installed OS (metal-unrescue workflow)' },
    { verb: 'retire', operation: 'Retire', field: 'retireNode', summary: 'Move a node to retiring' },
    {
      verb: 'deploy',
      operation: 'Deploy',
      field: 'deployNode',
      summary: 'Move a ready node to deploying with the given profile version recorded on it',
      extra: { profileId: str, profileVersion: { ...int, minimum: 1 } },
      required: ['profileId', 'profileVersion'],
    },
    { verb: 'abort', operation: 'Abort', field: 'abortNode', summary: 'Stop the node\'s workflow and move it to failed', extra: { reason: str } },
    {
      verb: 'undeploy',
      operation: 'Undeploy',
      field: 'undeployNode',
      summary: 'Move a deployed or rescue node to releasing (wipe: none, quick (default), secure-erase or crypto-erase)',
      extra: { wipe: { type: 'string', enum: ['none', 'quick', 'secure-erase', 'crypto-erase'] } },
      // GraphQL enum values cannot hold "-": secure-erase is secure_erase there.
      map: (body) => ({ ...body, ...(typeof body.wipe === 'string' ? { wipe: body.wipe.replace('-', '_') } : {}) }),
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
    response: { type: 'object', properties: { node: ref('MetalNode') } },
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
    response: { type: 'object', properties: { node: ref('MetalNode'), commandId: str } },
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
    response: { type: 'object', properties: { nodes: { type: 'array', items: ref('MetalNode') }, batch: { anyOf: [{ type: 'object' }, { type: 'null' }] } } },
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
    response: { type: 'object', properties: { machines: { type: 'array', items: { type: 'object' } } } },
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
    response: { type: 'object', properties: { node: ref('MetalNode') } },
  };
  return [enrollRoute, powerRoute, bulkRoute, discoveredRoute, confirmRoute, ...verbs.map(({ verb, operation, field, summary, extra, required, map }): Route => ({
    method: 'POST',
    path: `/api/compute/metal/${verb}`,
    operation,
    tag: 'metal',
    summary,
    description: 'Authorization: compute:nodes:provision on the node. INVALID_STATE names the current and the legal states; CONFLICT when the node changed concurrently.',
    body: { type: 'object', additionalProperties: false, required: ['nodeId', ...(required ?? [])], properties: { nodeId, ...extra } },
    variables: ({ body }) => ({ input: map ? map(body!) : body }),
    respond: (data) => ({ node: (data[field] as { node: unknown }).node }),
    response: { type: 'object', properties: { node: ref('MetalNode') } },
  }))];
}
