/**
 * Example values for /openapi.json and /docs: what a caller sends and gets back, with ids in the
 * service's own format (type prefix + UUIDv7). test/openapi.test.ts checks every example against
 * the schema it illustrates, so an example cannot drift from the schema unnoticed.
 */

const uuid = (n: number) => `01938a6e-5b2c-7a10-8c3e-2f5d7b9a${n.toString(16).padStart(4, '0')}`;

export const EXAMPLE_IDS = {
  tenant: `ten_${uuid(1)}`,
  site: `site_${uuid(2)}`,
  pool: `pool_${uuid(3)}`,
  node: `node_${uuid(4)}`,
  token: `tok_${uuid(5)}`,
  hardwareProfile: `hwp_${uuid(6)}`,
  deployProfile: `dpr_${uuid(7)}`,
  batch: `bat_${uuid(8)}`,
  command: `cmd_${uuid(9)}`,
  workflow: `wf_${uuid(10)}`,
  otherNode: `node_${uuid(11)}`,
  agent: `agt_${uuid(12)}`,
} as const;

const CREATED = '2026-11-30T09:12:44.301Z';
const UPDATED = '2026-11-30T09:20:03.118Z';

export const exampleMetalNode = (changes: Record<string, unknown> = {}): Record<string, unknown> => ({
  id: EXAMPLE_IDS.node,
  name: 'rack1-u12',
  tenantId: EXAMPLE_IDS.tenant,
  siteId: EXAMPLE_IDS.site,
  poolId: EXAMPLE_IDS.pool,
  provisionState: 'ready',
  failedFrom: null,
  lastError: null,
  maintenance: false,
  bmc: { address: '10.0.0.5', driver: 'redfish', driverOptions: {}, credentialsSet: true },
  addresses: ['192.0.2.15'],
  macs: ['52:54:00:12:34:56'],
  productUuid: '4c4c4544-0042-3510-8052-b4c04f4e3732',
  hardwareProfile: { id: EXAMPLE_IDS.hardwareProfile, name: 'r650' },
  driverBindings: { power: 'redfish', management: 'redfish', virtualMedia: 'idrac' },
  profileId: null,
  profileVersion: null,
  role: null,
  workflowId: null,
  version: 4,
  createdAt: CREATED,
  updatedAt: UPDATED,
  ...changes,
});

export const exampleSite = { id: EXAMPLE_IDS.site, tenantId: EXAMPLE_IDS.tenant, name: 'fra1', bmcNetworks: ['10.20.0.0/16'], createdAt: CREATED };

export const examplePolicy = {
  hardwareProfile: 'r650',
  agent: 'bcd',
  trustProvisioningNetwork: false,
  approverKeys: [{ id: 'ops-1', publicKey: 'YzD6wnOqopXG+xR9jo0L+bhvxwyi3aXO3RJNQOW0x5M=' }],
  quorum: 1,
};

export const examplePool = (changes: Record<string, unknown> = {}): Record<string, unknown> => ({
  id: EXAMPLE_IDS.pool,
  tenantId: EXAMPLE_IDS.tenant,
  siteId: EXAMPLE_IDS.site,
  name: 'gpu-a',
  policy: examplePolicy,
  version: 2,
  createdAt: CREATED,
  updatedAt: UPDATED,
  ...changes,
});

export const exampleHardwareProfile = {
  id: EXAMPLE_IDS.hardwareProfile,
  name: 'r650',
  driverBindings: { power: 'redfish', management: 'redfish', virtualMedia: 'idrac' },
  createdAt: CREATED,
};

export const exampleGrant = { permission: 'compute:nodes:provision', scopeType: 'pool', scopeId: EXAMPLE_IDS.pool };

export const exampleViewer = {
  tokenId: EXAMPLE_IDS.token,
  name: 'ci-deployer',
  tenantId: EXAMPLE_IDS.tenant,
  platformAdmin: false,
  grants: [exampleGrant],
};

export const examplePageInfo = { hasNextPage: true, endCursor: 'eyJpZCI6Im5vZGVfMDE5MzhhNmUifQ' };

export const exampleBatch = {
  id: EXAMPLE_IDS.batch,
  poolId: EXAMPLE_IDS.pool,
  verb: 'retire',
  reason: 'decommission rack 1',
  wipe: null,
  nodeCount: 2,
  digest: '9f2c6d0b8e7a41f3c5d2b1a0e9f8c7d6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0',
  quorum: 1,
  approvals: [],
  status: 'awaiting-approval',
  createdAt: CREATED,
};

export const exampleDiscoveredMachine = {
  mac: '52:54:00:ab:cd:ef',
  productUuid: '4c4c4544-0042-3510-8052-b4c04f4e3732',
  arch: 'x86_64-efi',
  firstSeen: '2026-11-30T08:01:10.000Z',
  lastSeen: '2026-11-30T08:03:55.000Z',
  requestCount: 4,
  relays: ['10.20.0.1'],
  agentNodeIds: [EXAMPLE_IDS.agent],
  nodeId: null,
  candidateFor: EXAMPLE_IDS.node,
};
