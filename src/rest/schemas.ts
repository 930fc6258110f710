/** JSON Schemas of the REST views, shared by the route table, the validator and the OpenAPI document. */
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

export const components: Record<string, JsonSchema> = {
  Error: {
    type: 'object',
    required: ['error'],
    properties: {
      error: {
        type: 'object',
        required: ['code', 'message', 'requestId'],
        properties: {
          code: {
            type: 'string',
            enum: ['INVALID_INPUT', 'UNAUTHENTICATED', 'PERMISSION_DENIED', 'NOT_FOUND', 'CONFLICT', 'INVALID_STATE',
              'INVALID_CONFIG', 'UNSUPPORTED', 'UNVERIFIED_WIPE', 'ABORTED', 'INTERNAL'],
          },
          message: str,
          requestId: str,
          details: { type: 'object' },
        },
      },
    },
  },
  MetalNode: {
    type: 'object',
    description: 'The metal view of a node. BMC credentials are never returned, only whether they are set.',
    properties: {
      id: str,
      name: nullable(str),
      tenantId: str,
      siteId: str,
      poolId: str,
      provisionState: { type: 'string', enum: PROVISION_STATES },
      failedFrom: nullable({ type: 'string', enum: PROVISION_STATES }),
      lastError: nullable({ type: 'object', properties: { code: str, message: str } }),
      maintenance: bool,
      bmc: {
        type: 'object',
        properties: { address: str, driver: str, driverOptions: { type: 'object' }, credentialsSet: bool },
      },
      addresses: strings,
      macs: strings,
      productUuid: nullable(str),
      hardwareProfile: nullable({ type: 'object', properties: { id: str, name: str } }),
      driverBindings: nullable({ type: 'object', properties: { power: str, management: str, virtualMedia: str } }),
      profileId: nullable(str),
      profileVersion: nullable(int),
      role: nullable(str),
      workflowId: nullable(str),
      version: int,
      createdAt: dateTime,
      updatedAt: dateTime,
    },
  },
  Site: { type: 'object', properties: { id: str, tenantId: str, name: str, createdAt: dateTime } },
  Pool: {
    type: 'object',
    properties: {
      id: str,
      tenantId: str,
      siteId: str,
      name: str,
      policy: {
        type: 'object',
        properties: {
          hardwareProfile: nullable(str),
          agent: { type: 'string', enum: ['none', 'bcd'] },
          trustProvisioningNetwork: bool,
          approverKeys: { type: 'array', items: { type: 'object', properties: { id: str, publicKey: str } } },
          quorum: nullable(int),
        },
      },
      version: int,
      createdAt: dateTime,
      updatedAt: dateTime,
    },
  },
  HardwareProfile: {
    type: 'object',
    properties: {
      id: str,
      name: str,
      driverBindings: { type: 'object', properties: { power: str, management: str, virtualMedia: str } },
      createdAt: dateTime,
    },
  },
  Viewer: {
    type: 'object',
    properties: {
      tokenId: str,
      name: str,
      tenantId: nullable(str),
      platformAdmin: bool,
      grants: {
        type: 'array',
        items: { type: 'object', properties: { permission: str, scopeType: str, scopeId: nullable(str) } },
      },
    },
  },
  PageInfo: { type: 'object', properties: { hasNextPage: bool, endCursor: nullable(str) } },
};

export const ref = (name: keyof typeof components & string): JsonSchema => ({ $ref: `#/components/schemas/${name}` });
export const schemaTypes = { str, int, bool, strings, nullable };
