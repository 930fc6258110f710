import pg from 'pg';
import { createTestDatabase, startTestApp, type TestApp } from './helpers/app';
import { gql } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { getSchema } from '../src/graphql/schema';
import { cacheDependencies, COMPUTED_TYPE_TABLES, modelTables, NEVER_CACHED_FIELDS, selectedTypes, TABLES_NO_CACHED_QUERY_READS } from '../src/graphql/cache-dependencies';
import { newId } from '../src/ids';

/** Long enough that only an invalidation can explain a fresh answer. */
const TTL_MS = 60000;
/**
 * A notification's round trip takes milliseconds, but under the full suite's load it can take
 * seconds; this bounds the wait (in time, not in polls, each a GraphQL read of variable cost) far
 * below the TTL.
 */
const WAIT_MS = 10_000;
const POLL_MS = 20;

const dependencies = cacheDependencies(getSchema());

const typesIn = (query: string) => new Set(selectedTypes(getSchema(), query));

interface World {
  t: TestApp;
  sql: pg.Client;
  tree: Awaited<ReturnType<typeof makeTenantTree>>;
  token: string;
  agentToken: string;
  agentId: string;
  /** A node of pool 0 (pool 1 stays empty for the empty-page probe). */
  nodeId: string;
}

/**
 * One probe: a query computed from `table`, a committed change to that table (through the API, or
 * plain SQL as any other writer), and what the next read must show. `prepare` writes what the
 * query reads first and returns its variables.
 */
interface Probe {
  table: string;
  name: string;
  query: string;
  prepare(w: World): Promise<Record<string, unknown>>;
  change(w: World, vars: Record<string, unknown>): Promise<void>;
  shows(data: any, vars: Record<string, unknown>): boolean;
  /** Who reads (default: the tenant admin); cluster-wide rows need a platform token. */
  token?(w: World): string;
}

const now = () => new Date().toISOString();
let macs = 0;
const nextMac = () => `52:54:00:aa:00:${(macs++).toString(16).padStart(2, '0')}`;

async function profileWithOneVersion(w: World, name: string): Promise<string> {
  const id = newId('DeployProfile');
  await w.sql.query(`INSERT INTO deploy_profile (id, tenant_id, name) VALUES ($1, $2, $3)`, [id, w.tree.tenant.id, name]);
  await w.sql.query(`INSERT INTO deploy_profile_version (profile_id, version, role, steps) VALUES ($1, 1, 'compute', '[]')`, [id]);
  return id;
}

/** A metal node in `state` with compute access recorded (the fabric's compute node). */
async function computeNode(w: World, name: string, state: 'ready' | 'deployed', osIp: string, bmc: string): Promise<string> {
  const id = newId('MetalNode');
  await w.t.app.database.prisma.node.create({
    data: { id, tenantId: w.tree.tenant.id, siteId: w.tree.site.id, poolId: w.tree.pools[0]!.id, name, provisionState: state, bmcAddress: bmc, bmcDriver: 'redfish', bmcCredentialsRef: 'secret://probe' },
  });
  await w.sql.query(`INSERT INTO compute_node (node_id, os_ip) VALUES ($1, $2)`, [id, osIp]);
  return id;
}

const VTEP_POOL_24 = `INSERT INTO fabric_config (id, "as", expected_nodes, expected_vms, router_id_base, router_id_prefix_len) VALUES (1, 65000, 1, 1, '10.255.0.1', 24)
  ON CONFLICT (id) DO UPDATE SET router_id_base = '10.255.0.1', router_id_prefix_len = 24`;

const PROBES: Probe[] = [
  {
    table: 'bmc_info', name: 'a node\'s control-node record (MetalNode.bmcInfo), after register records one and after it changes',
    query: 'query ($id: ID!) { node(id: $id) { id ... on MetalNode { bmcInfo { isControlNode serialNumber osHostname osPasswordSet } } } }',
    prepare: async (w) => ({ id: w.nodeId }),
    change: async (w, v) => {
      await w.sql.query(`INSERT INTO bmc_info (node_id, tenant_id, is_control_node, serial_number, os_hostname) VALUES ($1, $2, true, 'PROBE-1', 'probe-01')
                         ON CONFLICT (node_id) DO UPDATE SET os_hostname = 'probe-01'`, [v.id, w.tree.tenant.id]);
    },
    shows: (d) => d.node.bmcInfo?.isControlNode === true && d.node.bmcInfo.serialNumber === 'PROBE-1' && d.node.bmcInfo.osHostname === 'probe-01' && d.node.bmcInfo.osPasswordSet === false,
  },
  {
    table: 'fabric_config', name: 'fabricConfig after an update',
    query: '{ fabricConfig { as bfdEnabled routerIdCidr } }',
    token: (w) => w.t.adminToken,
    prepare: async (w) => {
      await w.sql.query(`INSERT INTO fabric_config (id, "as", expected_nodes, expected_vms) VALUES (1, 65000, 1, 1)`);
      return {};
    },
    change: async (w) => void (await w.sql.query(`UPDATE fabric_config SET bfd_enabled = true, router_id_base = '10.255.0.1', router_id_prefix_len = 24`)),
    shows: (d) => d.fabricConfig.bfdEnabled === true && d.fabricConfig.routerIdCidr === '10.255.0.1/24',
  },
  {
    table: 'tenant', name: 'tenants and node(id) after a rename',
    query: 'query ($id: ID!) { tenants { id name } node(id: $id) { id ... on Tenant { name } } }',
    prepare: async (w) => ({ id: w.tree.tenant.id }),
    change: async (w) => void (await w.sql.query(`UPDATE tenant SET name = 'tenant-renamed' WHERE id = $1`, [w.tree.tenant.id])),
    shows: (d) => d.tenants.some((x: any) => x.name === 'tenant-renamed') && d.node.name === 'tenant-renamed',
  },
  {
    table: 'site', name: 'sites and node(id) after a rename',
    query: 'query ($id: ID!) { sites { id name } node(id: $id) { id ... on Site { name } } }',
    prepare: async (w) => ({ id: w.tree.site.id }),
    change: async (w) => void (await w.sql.query(`UPDATE site SET name = 'site-renamed' WHERE id = $1`, [w.tree.site.id])),
    shows: (d) => d.sites.some((x: any) => x.name === 'site-renamed') && d.node.name === 'site-renamed',
  },
  {
    table: 'pool', name: 'pools with their policy and approver keys, and node(id), after a policy change',
    query: 'query ($id: ID!, $s: ID) { pools(siteId: $s) { id name policy { agent quorum approverKeys { id publicKey } } } node(id: $id) { id ... on Pool { name } } }',
    prepare: async (w) => ({ id: w.tree.pools[0]!.id, s: w.tree.site.id }),
    change: async (w) => void (await w.sql.query(
      `UPDATE pool SET name = 'pool-renamed', policy = policy || '{"quorum": 1, "approverKeys": [{"id": "probe-key", "publicKey": "probe"}]}'::jsonb WHERE id = $1`,
      [w.tree.pools[0]!.id],
    )),
    shows: (d, v) => {
      const pool = d.pools.find((p: any) => p.id === v.id);
      return pool.name === 'pool-renamed' && pool.policy.quorum === 1 && pool.policy.approverKeys[0]?.id === 'probe-key' && d.node.name === 'pool-renamed';
    },
  },
  {
    table: 'hardware_profile', name: 'hardwareProfiles with bindings, and node(id), after an update',
    query: 'query ($id: ID!) { hardwareProfiles { id name driverBindings { power management virtualMedia } } node(id: $id) { id ... on HardwareProfile { name } } }',
    prepare: async (w) => {
      const id = newId('HardwareProfile');
      await w.sql.query(`INSERT INTO hardware_profile (id, name, driver_bindings) VALUES ($1, 'probe-hwp', '{"power": "ipmi", "management": "ipmi", "virtualMedia": "none"}')`, [id]);
      return { id };
    },
    change: async (w, v) => void (await w.sql.query(
      `UPDATE hardware_profile SET name = 'probe-hwp-2', driver_bindings = '{"power": "redfish", "management": "redfish", "virtualMedia": "redfish"}' WHERE id = $1`,
      [v.id],
    )),
    shows: (d, v) => d.hardwareProfiles.some((p: any) => p.id === v.id && p.name === 'probe-hwp-2' && p.driverBindings.power === 'redfish') && d.node.name === 'probe-hwp-2',
  },
  {
    table: 'node', name: 'an empty page of a pool, after a node is added to it',
    query: 'query ($p: ID!) { nodes(first: 5, filter: { poolId: $p }) { edges { cursor node { id name bmc { address } lastError { code } driverBindings { power } } } pageInfo { hasNextPage endCursor } } }',
    prepare: async (w) => ({ p: w.tree.pools[1]!.id }),
    change: async (w) => {
      await w.t.app.database.prisma.node.create({
        data: {
          id: newId('MetalNode'), tenantId: w.tree.tenant.id, siteId: w.tree.site.id, poolId: w.tree.pools[1]!.id, name: 'probe-added',
          provisionState: 'failed', bmcAddress: '127.9.9.9', bmcDriver: 'redfish', bmcCredentialsRef: 'secret://probe',
          lastErrorCode: 'PROBE', driverBindings: { power: 'redfish', management: 'redfish', virtualMedia: 'redfish' },
        },
      });
    },
    shows: (d) => d.nodes.edges[0]?.node.name === 'probe-added' && d.nodes.edges[0].node.lastError.code === 'PROBE' && d.nodes.edges[0].node.driverBindings.power === 'redfish',
  },
  {
    // A GROUP BY over node rows: a node moving to another state moves a count.
    table: 'node', name: 'nodeCounts after a node changes state',
    query: 'query ($p: ID!) { nodeCounts(filter: { poolId: $p }) { siteId poolId provisionState count } }',
    prepare: async (w) => ({ p: w.tree.pools[0]!.id, id: w.nodeId }),
    change: async (w, v) => void (await w.sql.query(`UPDATE node SET provision_state = 'retired' WHERE id = $1`, [v.id])),
    shows: (d) => d.nodeCounts.some((c: any) => c.provisionState === 'retired' && c.count >= 1),
  },
  {
    table: 'node', name: 'node(id) after a rename',
    query: 'query ($id: ID!) { node(id: $id) { id ... on MetalNode { name maintenance } } }',
    prepare: async (w) => ({ id: w.nodeId }),
    change: async (w, v) => void (await w.sql.query(`UPDATE node SET name = 'node-renamed', maintenance = true WHERE id = $1`, [v.id])),
    shows: (d) => d.node.name === 'node-renamed' && d.node.maintenance === true,
  },
  {
    // The list reads nodes too: which machine holds the MAC.
    table: 'node', name: 'discovered after confirmMac binds a discovered MAC',
    query: 'query ($s: ID!) { discovered(siteId: $s) { mac nodeId } }',
    prepare: async (w) => {
      const mac = nextMac();
      const nodeId = newId('MetalNode');
      await w.t.app.database.prisma.node.create({
        data: { id: nodeId, tenantId: w.tree.tenant.id, siteId: w.tree.site.id, poolId: w.tree.pools[0]!.id, provisionState: 'enrolling', bmcAddress: '127.9.9.10', bmcDriver: 'ipmi', bmcCredentialsRef: 'secret://probe' },
      });
      const report = await gql(w.t.url, w.agentToken, 'mutation ($m: [SightingInput!]) { agentReportStatus(machines: $m) { id } }', {
        m: [{ mac, firstSeen: now(), lastSeen: now(), requestCount: 1 }],
      });
      expect(report.errors).toBeUndefined();
      return { s: w.tree.site.id, mac, nodeId };
    },
    change: async (w, v) => {
      const confirmed = await gql(w.t.url, w.token, 'mutation ($i: MetalConfirmMacInput!) { confirmMac(input: $i) { node { id } } }', { i: { nodeId: v.nodeId, mac: v.mac } });
      expect(confirmed.errors).toBeUndefined();
    },
    shows: (d, v) => d.discovered.some((m: any) => m.mac === v.mac && m.nodeId === v.nodeId),
  },
  {
    // What the issue saw: an agent's committed report, then the old list.
    table: 'sighting', name: 'discovered after an agent reports a new machine',
    query: 'query ($s: ID!) { discovered(siteId: $s) { mac requestCount agentNodeIds } }',
    prepare: async (w) => ({ s: w.tree.site.id, mac: nextMac() }),
    change: async (w, v) => {
      const report = await gql(w.t.url, w.agentToken, 'mutation ($m: [SightingInput!]) { agentReportStatus(machines: $m) { id } }', {
        m: [{ mac: v.mac, firstSeen: now(), lastSeen: now(), requestCount: 4 }],
      });
      expect(report.errors).toBeUndefined();
    },
    shows: (d, v) => d.discovered.some((m: any) => m.mac === v.mac && m.requestCount === 4),
  },
  {
    table: 'api_token', name: 'node(id) of a token after a rename',
    query: 'query ($id: ID!) { node(id: $id) { id ... on ApiToken { name revokedAt } } }',
    prepare: async (w) => ({ id: (await w.sql.query(`SELECT token_id FROM site_agent WHERE id = $1`, [w.agentId])).rows[0].token_id }),
    change: async (w, v) => void (await w.sql.query(`UPDATE api_token SET name = 'token-renamed' WHERE id = $1`, [v.id])),
    shows: (d) => d.node.name === 'token-renamed',
  },
  {
    table: 'api_grant', name: 'a token\'s grants after one is added',
    query: 'query ($id: ID!) { node(id: $id) { id ... on ApiToken { grants { permission scopeType scopeId } } } }',
    prepare: async (w) => ({ id: (await w.sql.query(`SELECT token_id FROM site_agent WHERE id = $1`, [w.agentId])).rows[0].token_id }),
    change: async (w, v) => void (await w.sql.query(
      `INSERT INTO api_grant (id, token_id, permission, scope_type, scope_id, site_id) VALUES ($1, $2, 'compute:sites:read', 'site', $3, $3)`,
      [newId('ApiGrant'), v.id, w.tree.site.id],
    )),
    shows: (d) => d.node.grants.some((g: any) => g.permission === 'compute:sites:read'),
  },
  {
    table: 'deploy_profile', name: 'node(id) of a deploy profile after a rename',
    query: 'query ($id: ID!) { node(id: $id) { id ... on DeployProfile { name versions { version role } } } }',
    prepare: async (w) => ({ id: await profileWithOneVersion(w, 'probe-profile') }),
    change: async (w, v) => void (await w.sql.query(`UPDATE deploy_profile SET name = 'probe-profile-2' WHERE id = $1`, [v.id])),
    shows: (d) => d.node.name === 'probe-profile-2',
  },
  {
    table: 'deploy_profile_version', name: 'validateProfile after the version it names is added',
    query: 'query ($id: ID!, $v: Int!) { validateProfile(profileId: $id, profileVersion: $v) { valid problems } }',
    prepare: async (w) => ({ id: await profileWithOneVersion(w, 'probe-validate'), v: 2 }),
    change: async (w, v) => void (await w.sql.query(`INSERT INTO deploy_profile_version (profile_id, version, role, steps) VALUES ($1, 2, 'compute', '[]')`, [v.id])),
    shows: (d) => !d.validateProfile.problems.some((p: string) => p.includes('has no such version')),
  },
  {
    table: 'deploy_profile_version', name: 'a profile\'s versions after one is added',
    query: 'query ($id: ID!) { node(id: $id) { id ... on DeployProfile { versions { version role } } } }',
    prepare: async (w) => ({ id: await profileWithOneVersion(w, 'probe-versions') }),
    change: async (w, v) => void (await w.sql.query(`INSERT INTO deploy_profile_version (profile_id, version, role, steps) VALUES ($1, 2, 'storage', '[]')`, [v.id])),
    shows: (d) => d.node.versions.length === 2 && d.node.versions[1].role === 'storage',
  },
  {
    table: 'site_agent', name: 'node(id) of an agent after its heartbeat (through the API)',
    query: 'query ($id: ID!) { node(id: $id) { id ... on SiteAgent { name lastHeartbeatAt } } }',
    prepare: async (w) => {
      await w.sql.query(`UPDATE site_agent SET last_heartbeat_at = NULL WHERE id = $1`, [w.agentId]);
      return { id: w.agentId };
    },
    change: async (w) => {
      const beat = await gql(w.t.url, w.agentToken, 'mutation { agentReportStatus { id } }');
      expect(beat.errors).toBeUndefined();
    },
    shows: (d) => d.node.lastHeartbeatAt !== null,
  },
  {
    table: 'command', name: 'node(id) of a command after it succeeded',
    query: 'query ($id: ID!) { node(id: $id) { id ... on Command { status result } } }',
    prepare: async (w) => {
      const id = newId('Command');
      await w.sql.query(
        `INSERT INTO command (id, tenant_id, site_id, kind, status, expires_at) VALUES ($1, $2, $3, 'bmc.power', 'queued', now() + interval '5 minutes')`,
        [id, w.tree.tenant.id, w.tree.site.id],
      );
      return { id };
    },
    change: async (w, v) => void (await w.sql.query(`UPDATE command SET status = 'succeeded', result = '{"ok": true}' WHERE id = $1`, [v.id])),
    shows: (d) => d.node.status === 'succeeded' && d.node.result.ok === true,
  },
  {
    table: 'command_batch', name: 'node(id) of a batch after an approval',
    query: 'query ($id: ID!) { node(id: $id) { id ... on CommandBatch { status approvals } } }',
    prepare: async (w) => {
      const id = newId('CommandBatch');
      await w.sql.query(
        `INSERT INTO command_batch (id, tenant_id, pool_id, verb, reason, digest, quorum, status, created_by) VALUES ($1, $2, $3, 'retire', 'probe', 'd', 1, 'awaiting-approval', 'probe')`,
        [id, w.tree.tenant.id, w.tree.pools[0]!.id],
      );
      return { id };
    },
    change: async (w, v) => void (await w.sql.query(`UPDATE command_batch SET status = 'approved', approvals = '[{"keyId": "k"}]' WHERE id = $1`, [v.id])),
    shows: (d) => d.node.status === 'approved' && d.node.approvals.length === 1,
  },
  // The fabric's admin surface (after the fabricConfig probe, which creates the config row).
  {
    table: 'fabric_config', name: 'fabricVtepPool after the pool is widened',
    query: '{ fabricVtepPool { subnetCidr totalUsable } }',
    token: (w) => w.t.adminToken,
    prepare: async (w) => {
      await w.sql.query(VTEP_POOL_24);
      return {};
    },
    change: async (w) => void (await w.sql.query(`UPDATE fabric_config SET router_id_prefix_len = 22`)),
    shows: (d) => d.fabricVtepPool.subnetCidr === '10.255.0.0/22' && d.fabricVtepPool.totalUsable === 1016,
  },
  {
    table: 'fabric_vtep', name: 'computeNodes and fabricVtepPool after an allocation',
    query: '{ computeNodes { nodeId vtepIp } fabricVtepPool { allocated lastAllocatedIp } }',
    token: (w) => w.t.adminToken,
    prepare: async (w) => {
      await w.sql.query(VTEP_POOL_24);
      return { id: await computeNode(w, 'probe-vtep', 'deployed', '192.168.77.1', '127.9.7.1') };
    },
    change: async (w, v) => void (await w.sql.query(`INSERT INTO fabric_vtep (ip, node_id) VALUES ('10.255.0.9', $1)`, [v.id])),
    shows: (d, v) => d.fabricVtepPool.allocated === 1 && d.fabricVtepPool.lastAllocatedIp === '10.255.0.9'
      && d.computeNodes.some((n: any) => n.nodeId === v.id && n.vtepIp === '10.255.0.9'),
  },
  {
    table: 'compute_node', name: 'computeNodes after an SSH port change',
    query: '{ computeNodes { nodeId sshPort } }',
    token: (w) => w.t.adminToken,
    prepare: async (w) => ({ id: await computeNode(w, 'probe-port', 'deployed', '192.168.77.2', '127.9.7.2') }),
    change: async (w, v) => void (await w.sql.query(`UPDATE compute_node SET ssh_port = 2222 WHERE node_id = $1`, [v.id])),
    shows: (d, v) => d.computeNodes.some((n: any) => n.nodeId === v.id && n.sshPort === 2222),
  },
  {
    table: 'node', name: 'computeNodes after a node becomes deployed',
    query: '{ computeNodes { nodeId fqdn } }',
    token: (w) => w.t.adminToken,
    prepare: async (w) => ({ id: await computeNode(w, 'probe-deploy', 'ready', '192.168.77.3', '127.9.7.3') }),
    change: async (w, v) => void (await w.sql.query(`UPDATE node SET provision_state = 'deployed' WHERE id = $1`, [v.id])),
    shows: (d, v) => d.computeNodes.some((n: any) => n.nodeId === v.id && n.fqdn === 'probe-deploy'),
  },
];

describe('the read cache\'s dependencies match the schema and the database', () => {
  let sql: pg.Client;
  beforeAll(async () => {
    // A database migrated like every other: its tables and triggers are what the migrations made.
    sql = new pg.Client({ connectionString: await createTestDatabase() });
    await sql.connect();
  });
  afterAll(() => sql.end());

  it('every table of the database is either read by a cached type (and has the cache trigger) or listed as read by none (and has none)', async () => {
    const tables = (await sql.query<{ name: string }>(
      `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname <> '_prisma_migrations' ORDER BY 1`,
    )).rows.map((r) => r.name);
    // A trigger counts only if it fires after every kind of write, once per statement.
    const triggered = (await sql.query<{ name: string }>(
      `SELECT c.relname AS name FROM pg_trigger tg
         JOIN pg_class c ON c.oid = tg.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_proc p ON p.oid = tg.tgfoid
        WHERE n.nspname = 'public' AND NOT tg.tgisinternal AND p.proname = 'metal_cache_invalidate'
          AND tg.tgenabled <> 'D' AND (tg.tgtype & 1) = 0 AND (tg.tgtype & 2) = 0 AND (tg.tgtype & 60) = 60
        ORDER BY 1`,
    )).rows.map((r) => r.name);
    const read = [...dependencies.typesByTable.keys()].sort();
    const unread = Object.keys(TABLES_NO_CACHED_QUERY_READS).sort();
    expect(read.filter((x) => unread.includes(x))).toEqual([]);
    expect([...read, ...unread].sort()).toEqual(tables);
    expect(triggered).toEqual(read);
  });

  it('the data model names the same tables as the database, and every listed dependency is one of them', async () => {
    const fromModels = [...new Set(modelTables().values())].sort();
    const tables = (await sql.query<{ name: string }>(`SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public' AND tablename <> '_prisma_migrations' ORDER BY 1`)).rows.map((r) => r.name);
    expect(fromModels).toEqual(tables);
    for (const listed of Object.values(COMPUTED_TYPE_TABLES)) for (const table of listed) expect(tables).toContain(table);
  });

  it('every type a cached query can hold is classified; a new computed type is refused until it is', () => {
    const schema = getSchema();
    for (const name of dependencies.tablesByType.keys()) expect(schema.getType(name)).toBeDefined();
    // Types reached only through never-cached fields are left out: Viewer is one.
    expect(dependencies.tablesByType.has('Viewer')).toBe(false);
    expect(Object.keys(NEVER_CACHED_FIELDS)).toContain('Query.viewer');
    const withoutDiscovered = { ...COMPUTED_TYPE_TABLES } as Record<string, readonly string[]>;
    delete withoutDiscovered.DiscoveredMachine;
    expect(() => cacheDependencies(schema, modelTables(), withoutDiscovered)).toThrow(/^GraphQL type DiscoveredMachine .* COMPUTED_TYPE_TABLES/);
    // A model type whose model the data model lacks is refused as well.
    const models = modelTables();
    models.delete('Sighting');
    expect(() => cacheDependencies(schema, models)).not.toThrow(); // Sighting backs no GraphQL type
    models.delete('Node');
    expect(() => cacheDependencies(schema, models)).toThrow(/MetalNode is backed by Prisma model Node/);
  });

  it('every (table, type) pair the cache drops on is exercised by a probe below', () => {
    const missing: string[] = [];
    for (const [table, types] of dependencies.typesByTable) {
      const probes = PROBES.filter((p) => p.table === table);
      for (const type of types) if (!probes.some((p) => typesIn(p.query).has(type))) missing.push(`${table} -> ${type}`);
    }
    expect(missing).toEqual([]);
    expect(PROBES.filter((p) => !dependencies.typesByTable.has(p.table)).map((p) => p.table)).toEqual([]);
  });
});

describe('a committed change to any table a cached query reads is visible to the next read through the cache', () => {
  const w = {} as World;
  beforeAll(async () => {
    // No workers: nothing but these requests sends statements, so a cache hit is exactly zero.
    w.t = await startTestApp({ role: 'api', responseCacheTtlMs: TTL_MS });
    w.sql = new pg.Client({ connectionString: w.t.app.databaseUrl });
    await w.sql.connect();
    w.tree = await makeTenantTree(w.t.app.database.prisma, 'staleness', { pools: 2, nodesPerPool: 0 });
    w.nodeId = newId('MetalNode');
    await w.t.app.database.prisma.node.create({
      data: { id: w.nodeId, tenantId: w.tree.tenant.id, siteId: w.tree.site.id, poolId: w.tree.pools[0]!.id, name: 'n0', provisionState: 'ready', bmcAddress: '127.9.0.1', bmcDriver: 'redfish', bmcCredentialsRef: 'secret://probe' },
    });
    w.token = await makeToken(w.t.app.database.prisma, w.tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: w.tree.tenant.id }]);
    const registered = await gql(w.t.url, w.token, 'mutation ($s: ID!) { registerSiteAgent(siteId: $s, name: "probe-agent") { token agent { id } } }', { s: w.tree.site.id });
    expect(registered.errors).toBeUndefined();
    w.agentToken = registered.data!.registerSiteAgent.token;
    w.agentId = registered.data!.registerSiteAgent.agent.id;
  });
  afterAll(async () => {
    await w.sql.end();
    await w.t.stop();
  });

  it.each(PROBES.map((p) => [`${p.table}: ${p.name}`, p] as const))('%s', async (_name, probe) => {
    const vars = await probe.prepare(w);
    // Read until a read costs no SQL at all: that one came from the cache. (A read that started
    // before prepare's own notifications arrived is rightly not stored.)
    let cached: Awaited<ReturnType<typeof gql>> | undefined;
    const storedBy = Date.now() + WAIT_MS;
    while (!cached && Date.now() < storedBy) {
      const before = w.t.app.database.statements.count;
      const read = await gql(w.t.url, probe.token?.(w) ?? w.token, probe.query, vars);
      expect(read.errors).toBeUndefined();
      if (w.t.app.database.statements.count === before) cached = read;
      else await new Promise((r) => setTimeout(r, POLL_MS));
    }
    expect(cached).toBeDefined();
    expect(probe.shows(cached!.data, vars)).toBe(false);

    await probe.change(w, vars);

    const shownBy = Date.now() + WAIT_MS;
    let latest = await gql(w.t.url, probe.token?.(w) ?? w.token, probe.query, vars);
    while (!probe.shows(latest.data, vars) && Date.now() < shownBy) {
      await new Promise((r) => setTimeout(r, POLL_MS));
      latest = await gql(w.t.url, probe.token?.(w) ?? w.token, probe.query, vars);
    }
    expect(latest.errors).toBeUndefined();
    expect(probe.shows(latest.data, vars)).toBe(true);
  });

  it('viewer is never stored: it is the principal of the token store, as fresh as that store is', async () => {
    const tokenId = (await gql(w.t.url, w.token, '{ viewer { tokenId } }')).data!.viewer.tokenId as string;
    // A fresh lookup now: the store keeps this principal for TOKEN_CACHE_MS.
    w.t.app.services.tokens.forget(tokenId);
    const first = await gql(w.t.url, w.token, '{ viewer { name } }');
    expect(first.data!.viewer.name).not.toBe('viewer-renamed');
    await w.sql.query(`UPDATE api_token SET name = 'viewer-renamed' WHERE id = $1`, [tokenId]);
    // Once this process has seen the change (a cached read of the row shows it), the token store
    // may still hold the old principal: a viewer read now must not be kept by the read cache.
    const row = 'query ($id: ID!) { node(id: $id) { id ... on ApiToken { name } } }';
    let seen = false;
    const seenBy = Date.now() + WAIT_MS;
    while (!seen && Date.now() < seenBy) {
      seen = (await gql(w.t.url, w.token, row, { id: tokenId })).data!.node.name === 'viewer-renamed';
      if (!seen) await new Promise((r) => setTimeout(r, POLL_MS));
    }
    expect(seen).toBe(true);
    await gql(w.t.url, w.token, '{ viewer { name } }');
    // What a revoke through this process does: the store reads the row again.
    w.t.app.services.tokens.forget(tokenId);
    expect((await gql(w.t.url, w.token, '{ viewer { name } }')).data!.viewer.name).toBe('viewer-renamed');
  });

  it('a result that selects SiteAgent.serving (it depends on the clock) is never stored', async () => {
    const query = 'query ($id: ID!) { node(id: $id) { id ... on SiteAgent { serving } } }';
    await gql(w.t.url, w.token, query, { id: w.agentId });
    for (let i = 0; i < 3; i += 1) {
      const before = w.t.app.database.statements.count;
      const read = await gql(w.t.url, w.token, query, { id: w.agentId });
      expect(read.errors).toBeUndefined();
      expect(w.t.app.database.statements.count - before).toBeGreaterThan(0);
    }
    // Without the field, the same object is stored.
    const plain = 'query ($id: ID!) { node(id: $id) { id ... on SiteAgent { name } } }';
    await gql(w.t.url, w.token, plain, { id: w.agentId });
    const before = w.t.app.database.statements.count;
    await gql(w.t.url, w.token, plain, { id: w.agentId });
    expect(w.t.app.database.statements.count - before).toBe(0);
  });
});
