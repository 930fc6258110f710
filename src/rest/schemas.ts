/** JSON Schemas of the REST views, shared by the route table, the validator and the OpenAPI document. */
import { ERROR_CODES } from '../errors';
export type JsonSchema = Record<string, unknown>;

const nullable = (schema: JsonSchema): JsonSchema => ({ anyOf: [schema, { type: 'null' }] });
const str = { type: 'string' } as const;
const int = { type: 'integer' } as const;
const bool = { type: 'boolean' } as const;
const dateTime = { type: 'string', format: 'date-time' } as const;
const strings = { type: 'array', items: str } as const;

export const PROVISION_STATES = [
  'adopting', 'adopted', 'enrolling', 'inspecting', 'ready', 'commissioning', 'deploying',
  'deployed', 'releasing', 'rescue', 'failed', 'retiring', 'retired',
];

/**
 * A response object: every property listed is always present (a nullable one as null), so the
 * documented `required` is what a client may rely on. New properties may appear: not closed.
 */
const view = (properties: Record<string, JsonSchema>, extra: JsonSchema = {}): JsonSchema => ({
  type: 'object',
  ...extra,
  required: Object.keys(properties),
  properties,
});

const ERROR_CODE_ENUM: string[] = [...ERROR_CODES];

const driverBindings = view({ power: str, management: str, virtualMedia: str });
const grant = view({ permission: str, scopeType: { type: 'string', enum: ['platform', 'tenant', 'site', 'pool', 'node'] }, scopeId: nullable(str) });

const views: Record<string, JsonSchema> = {
  Error: {
    type: 'object',
    description: 'Every refusal, on every route. The HTTP status follows the code (docs/api.md: errors and limits).',
    required: ['error'],
    properties: {
      error: {
        type: 'object',
        required: ['code', 'message', 'requestId'],
        properties: {
          code: { type: 'string', enum: ERROR_CODE_ENUM },
          message: { ...str, description: 'For people; INVALID_INPUT names the field first (`body.bmc.address: ...`)' },
          requestId: { ...str, description: 'The X-Request-Id of the request (given or generated): quote it' },
          details: { type: 'object', description: 'Machine-readable context: field, state, legalFrom, refused, ...' },
        },
      },
    },
  },
  MetalNode: view({
    id: str,
    name: nullable(str),
    tenantId: str,
    siteId: str,
    poolId: str,
    provisionState: { type: 'string', enum: PROVISION_STATES },
    failedFrom: nullable({ type: 'string', enum: PROVISION_STATES }),
    lastError: nullable(view({ code: str, message: str })),
    maintenance: bool,
    bmc: view({ address: str, driver: str, driverOptions: { type: 'object' }, credentialsSet: bool }),
    addresses: strings,
    macs: strings,
    productUuid: nullable(str),
    hardwareProfile: nullable(view({ id: str, name: str })),
    driverBindings: nullable(driverBindings),
    profileId: nullable(str),
    profileVersion: nullable(int),
    role: nullable(str),
    workflowId: nullable(str),
    version: int,
    createdAt: dateTime,
    updatedAt: dateTime,
  }, { description: 'The metal view of a node. BMC credentials are never returned, only whether they are set.' }),
  Site: view({ id: str, tenantId: str, name: str, bmcNetworks: { type: 'array', items: str, description: 'CIDRs its BMCs may be at; empty: BMC_NETWORKS, else any address but loopback, link-local, unspecified, multicast and broadcast' }, createdAt: dateTime }),
  Pool: view({
    id: str,
    tenantId: str,
    siteId: str,
    name: str,
    policy: view({
      hardwareProfile: nullable(str),
      agent: { type: 'string', enum: ['none', 'bcd'] },
      trustProvisioningNetwork: bool,
      approverKeys: { type: 'array', items: view({ id: str, publicKey: str }) },
      quorum: nullable(int),
    }),
    version: int,
    createdAt: dateTime,
    updatedAt: dateTime,
  }),
  HardwareProfile: view({ id: str, name: str, driverBindings, createdAt: dateTime }),
  Viewer: view({
    tokenId: str,
    name: str,
    tenantId: nullable(str),
    platformAdmin: bool,
    grants: { type: 'array', items: grant },
  }),
  PageInfo: view({ hasNextPage: bool, endCursor: nullable(str) }),
  ApiToken: view({
    id: str,
    name: str,
    tenantId: nullable(str),
    grants: { type: 'array', items: grant },
    createdAt: dateTime,
    expiresAt: nullable(dateTime),
  }),
  CommandBatch: view({
    id: str,
    poolId: str,
    verb: str,
    reason: str,
    wipe: nullable(str),
    nodeCount: int,
    digest: { ...str, description: 'sha256 (hex) of the batch: what approvers sign' },
    quorum: int,
    approvals: { type: 'array', items: { type: 'object', properties: { keyId: str, at: dateTime } } },
    status: { type: 'string', enum: ['awaiting-approval', 'approved', 'recorded'] },
    createdAt: dateTime,
  }, { description: 'The record of a destructive bulk call; it waits for the pool\'s approver quorum when the pool has approver keys.' }),
  DiscoveredMachine: view({
    mac: str,
    productUuid: nullable(str),
    arch: nullable(str),
    firstSeen: dateTime,
    lastSeen: dateTime,
    requestCount: int,
    relays: strings,
    agentNodeIds: strings,
    nodeId: nullable(str),
    candidateFor: nullable(str),
  }, { description: 'A machine the site\'s agents saw PXE-booting from a MAC with no boot entry. The list alone binds nothing.' }),
};

/** Each named, so /docs shows which entity a property holds. */
export const components: Record<string, JsonSchema> = Object.fromEntries(Object.entries(views).map(([name, schema]) => [name, { title: name, ...schema }]));

export const ref = (name: keyof typeof components & string): JsonSchema => ({ $ref: `#/components/schemas/${name}` });
export const schemaTypes = { str, int, bool, strings, nullable };
