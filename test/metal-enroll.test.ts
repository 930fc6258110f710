import pg from 'pg';
import { capturingLogger, startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { looksLikeCredential } from '../src/modules/metal/enroll';

const PASSWORD = 'Sup3r-s3cret-BMC-pa55';

describe('enroll', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let other: Awaited<ReturnType<typeof makeTenantTree>>;
  let token: string;
  let sql: pg.Client;
  const logLines: string[] = [];

  beforeAll(async () => {
    // No workers: these tests read the rows a call writes (and counts of them), which the workflows
    // of nodes enrolled earlier in the file would otherwise change in the background.
    t = await startTestApp({ role: 'api' }, { log: capturingLogger(logLines) });
    tree = await makeTenantTree(t.app.database.prisma, 'enroll', { pools: 2, nodesPerPool: 0 });
    other = await makeTenantTree(t.app.database.prisma, 'enroll-other', { pools: 1, nodesPerPool: 0 });
    token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    await gql(t.url, t.adminToken, 'mutation { createHardwareProfile(input: {name: "r750", driverBindings: {power: "idrac", management: "idrac", virtualMedia: "idrac"}}) { id } }');
    sql = new pg.Client({ connectionString: t.app.databaseUrl });
    await sql.connect();
  });
  afterAll(async () => {
    await sql.end();
    await t.stop();
  });

  const body = (over: Record<string, unknown> = {}, bmc: Record<string, unknown> = {}) => ({
    poolId: tree.pools[0]!.id,
    siteId: tree.site.id,
    bmc: { address: '127.20.0.5', driver: 'redfish', credentials: { username: 'root', password: PASSWORD }, ...bmc },
    ...over,
  });

  it('creates a node in enrolling, with its event, run and job, and never returns, logs or publishes the credentials', async () => {
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ addresses: ['10.30.0.5', 'fd00::5'] }), { 'x-request-id': 'enroll-1' });
    expect(response.status).toBe(200);
    const node = response.body.node;
    expect(node).toMatchObject({
      provisionState: 'enrolling', poolId: tree.pools[0]!.id, siteId: tree.site.id, addresses: ['10.30.0.5', 'fd00::5'],
      bmc: { address: '127.20.0.5', driver: 'redfish', credentialsSet: true },
      driverBindings: { power: 'redfish', management: 'redfish', virtualMedia: 'redfish' },
    });
    const events = (await sql.query('SELECT type, payload FROM event WHERE node_id = $1', [node.id])).rows;
    expect(events.map((e) => e.type)).toEqual(['node.enrolled']);
    // The intent is the node's metal-enroll run, due at once.
    const runs = (await sql.query('SELECT id, kind, params FROM workflow_run WHERE node_id = $1', [node.id])).rows;
    expect(runs).toEqual([{ id: node.workflowId, kind: 'metal-enroll', params: { verb: 'enroll', requestId: 'enroll-1' } }]);
    expect(events[0].payload.workflowId).toBe(node.workflowId);
    const due = (await sql.query(`SELECT id FROM workflow_run WHERE id = $1 AND due_at <= now()`, [node.workflowId])).rows;
    expect(due.map((j) => j.id)).toEqual([node.workflowId]);
    const row = (await sql.query('SELECT * FROM node WHERE id = $1', [node.id])).rows[0];
    expect(row.bmc_credentials_ref).toMatch(/^secret:\/\/sec_/);
    // Everything a caller or an operator can read: responses, the node row, events, job data, logs.
    const gqlView = await gql(t.url, token, '{ nodes(first: 50) { edges { node { id bmc { address driver driverOptions credentialsSet } } } } }');
    const everything = [JSON.stringify(response.body), JSON.stringify(gqlView), JSON.stringify(row), JSON.stringify(events), JSON.stringify(runs), JSON.stringify(due), ...logLines].join('\n');
    expect(everything).not.toContain(PASSWORD);
    expect(logLines.length).toBeGreaterThan(0);
    // ...while the broker can give them back to the drivers.
    expect(await t.app.services.secrets!.get(row.bmc_credentials_ref, tree.tenant.id)).toEqual({ username: 'root', password: PASSWORD });
  });

  it('when the node cannot be written, the inline credentials stored first are removed again', async () => {
    // A real failure inside the node transaction, after the broker was written.
    await sql.query(`CREATE FUNCTION test_refuse_node() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.bmc_address = '127.66.66.66' THEN RAISE EXCEPTION 'refused by test'; END IF; RETURN NEW; END $$`);
    await sql.query('CREATE TRIGGER test_refuse_node BEFORE INSERT ON node FOR EACH ROW EXECUTE FUNCTION test_refuse_node()');
    try {
      const secrets = async () => Number((await sql.query('SELECT count(*) FROM secret')).rows[0].count);
      const before = await secrets();
      const response = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({}, { address: '127.66.66.66' }));
      expect(response.status).toBe(500);
      expect(response.body.error.code).toBe('INTERNAL');
      expect(await secrets()).toBe(before);
      expect((await sql.query(`SELECT count(*) FROM node WHERE bmc_address = '127.66.66.66'`)).rows[0].count).toBe('0');
      // A secret:// reference is the caller's: it is never removed.
      const ref = await t.app.services.secrets!.put(tree.tenant.id, { username: 'u', password: 'p' });
      await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({}, { address: '127.66.66.66', credentials: ref }));
      expect(await t.app.services.secrets!.get(ref, tree.tenant.id)).toEqual({ username: 'u', password: 'p' });
    } finally {
      await sql.query('DROP TRIGGER test_refuse_node ON node');
      await sql.query('DROP FUNCTION test_refuse_node()');
    }
  });

  it('every call creates a new node', async () => {
    const a = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body());
    const b = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body());
    expect(a.body.node.id).not.toBe(b.body.node.id);
  });

  it('takes a secret:// reference as it is, and the hardware profile (given, else the pool\'s) over the BMC\'s bindings', async () => {
    const ref = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ hardwareProfile: 'r750' }, { credentials: 'secret://vault/bmc/r1' }));
    expect(ref.status).toBe(200);
    expect(ref.body.node.driverBindings).toEqual({ power: 'idrac', management: 'idrac', virtualMedia: 'idrac' });
    expect((await sql.query('SELECT bmc_credentials_ref FROM node WHERE id = $1', [ref.body.node.id])).rows[0].bmc_credentials_ref).toBe('secret://vault/bmc/r1');
    await t.app.database.prisma.pool.update({ where: { id: tree.pools[1]!.id }, data: { policy: { hardwareProfile: 'r750' } } });
    const viaPool = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ poolId: tree.pools[1]!.id }, { driver: 'ipmi', driverOptions: { cipherSuite: 3 } }), );
    expect(viaPool.status).toBe(400); // ipmi without macs or productUuid
    const ipmi = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ poolId: tree.pools[1]!.id, macs: ['AA-BB-CC-00-11-22'] }, { driver: 'ipmi', driverOptions: { cipherSuite: 3 } }));
    expect(ipmi.body.node).toMatchObject({ macs: ['aa:bb:cc:00:11:22'], bmc: { driverOptions: { cipherSuite: 3 } }, driverBindings: { power: 'idrac' } });
  });

  const refusals: [string, () => Record<string, unknown>, number, RegExp][] = [
    ['an unknown hardware profile', () => body({ hardwareProfile: 'nope' }), 400, /hardwareProfile/],
    ['a pool not in siteId', () => body({ siteId: other.site.id }), 400, /siteId/],
    ['another tenant\'s pool', () => body({ poolId: other.pools[0]!.id, siteId: undefined }), 404, /pool/],
    ['a pool that does not exist', () => body({ poolId: 'pool_00000000-0000-7000-8000-000000000000', siteId: undefined }), 404, /pool/],
    ['driverOptions over 1 KiB', () => body({}, { driverOptions: { blob: 'x'.repeat(1100) } }), 400, /driverOptions/],
    ['a credential-like driverOptions key', () => body({}, { driverOptions: { cipherSuite: 3, password: 'x' } }), 400, /bmc\.driverOptions\.password/],
    ['a nested credential-like key', () => body({}, { driverOptions: { tls: { apiKey: 'x' } } }), 400, /bmc\.driverOptions\.tls\.apiKey/],
    ['driverOptions that is not an object', () => body({}, { driverOptions: [1] }), 400, /driverOptions/],
    ['a non-IP address', () => body({ addresses: ['10.0.0.1', 'host.example'] }), 400, /addresses\[1\]/],
    ['17 addresses', () => body({ addresses: Array.from({ length: 17 }, (_, i) => `10.0.0.${i + 1}`) }), 400, /addresses/],
    ['ipmi with neither macs nor productUuid', () => body({}, { driver: 'ipmi' }), 400, /macs or productUuid/],
    ['ipmi with an all-zero UUID only', () => body({ productUuid: '00000000-0000-0000-0000-000000000000' }, { driver: 'ipmi' }), 400, /placeholder/],
    ['ipmi with an all-ones UUID only', () => body({ productUuid: 'FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF' }, { driver: 'ipmi' }), 400, /placeholder/],
    ['ipmi with the 03000200 placeholder only', () => body({ productUuid: '03000200-0400-0500-0006-000700080009' }, { driver: 'ipmi' }), 400, /placeholder/],
    ['a malformed MAC', () => body({ macs: ['aa:bb:cc:dd:ee'] }), 400, /macs\[0\]/],
    ['an unknown driver', () => body({}, { driver: 'telnet' }), 400, /bmc\.driver/],
    ['a bad BMC address', () => body({}, { address: 'not a host!' }), 400, /bmc\.address/],
    ['credentials that are neither', () => body({}, { credentials: 'vault:abc' }), 400, /credentials/],
  ];
  it.each(refusals)('refuses %s, and writes nothing', async (_label, make, status, message) => {
    const before = (await sql.query('SELECT (SELECT count(*) FROM node) AS nodes, (SELECT count(*) FROM event) AS events, (SELECT count(*) FROM secret) AS secrets')).rows[0];
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', make());
    expect(response.status).toBe(status);
    expect(response.body.error.message).toMatch(message);
    const after = (await sql.query('SELECT (SELECT count(*) FROM node) AS nodes, (SELECT count(*) FROM event) AS events, (SELECT count(*) FROM secret) AS secrets')).rows[0];
    expect(after).toEqual(before);
  });

  /** driverOptions keys: credential-looking ones refused (normalised: case, `_` and `-` ignored), harmless ones kept. */
  const CREDENTIAL_KEYS = [
    'kg', 'kgKey', 'k_g', 'K-G', 'ipmiKg', 'kg_hex', 'bmcKey', 'BMC_Key', 'key', 'sshKey', 'community', 'snmpCommunity', 'snmp-community',
    'password', 'PASSWD', 'pass', 'bmcPw', 'secret', 'clientSecret', 'authToken', 'token', 'apiKey', 'api_key', 'privateKey', 'username', 'user',
    'login', 'credentials', 'psk',
  ];
  const HARMLESS_KEYS = ['keepAlive', 'timeoutMs', 'port', 'verifyTls', 'cipherSuite', 'retries', 'privilegeLevel', 'bootDevice', 'interface', 'lanplus', 'hostKeyFingerprint'];
  it.each(CREDENTIAL_KEYS)('driverOptions key %s looks like a credential', (key) => expect(looksLikeCredential(key)).toBe(true));
  it.each(HARMLESS_KEYS)('driverOptions key %s does not', (key) => expect(looksLikeCredential(key)).toBe(false));

  const VALUE = 'k-g-0123456789abcdef-not-to-be-echoed';
  it.each(CREDENTIAL_KEYS)('enroll refuses driverOptions.%s (REST and GraphQL, nested too), names the key, never the value, writes nothing', async (key) => {
    const before = (await sql.query('SELECT (SELECT count(*) FROM node) AS nodes, (SELECT count(*) FROM secret) AS secrets')).rows[0];
    const viaRest = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({}, { driverOptions: { cipherSuite: 3, [key]: VALUE } }));
    expect(viaRest.status).toBe(400);
    expect(viaRest.body.error).toMatchObject({ code: 'INVALID_INPUT', message: expect.stringContaining(`bmc.driverOptions.${key}: looks like a credential`) });
    const viaGraphql = await gql(t.url, token, 'mutation ($i: MetalEnrollInput!) { enrollNode(input: $i) { node { id } } }', {
      i: { poolId: tree.pools[0]!.id, bmc: { address: '127.1.1.1', driver: 'redfish', credentials: { ref: 'secret://x' }, driverOptions: { tls: { [key]: VALUE } } } },
    });
    expect(viaGraphql.errors?.[0]).toMatchObject({ message: expect.stringContaining(`bmc.driverOptions.tls.${key}`), extensions: { code: 'INVALID_INPUT' } });
    expect(JSON.stringify([viaRest.body, viaGraphql])).not.toContain(VALUE);
    expect((await sql.query('SELECT (SELECT count(*) FROM node) AS nodes, (SELECT count(*) FROM secret) AS secrets')).rows[0]).toEqual(before);
  });

  it('keeps harmless driverOptions keys as given', async () => {
    const driverOptions = Object.fromEntries(HARMLESS_KEYS.map((k, i) => [k, i]));
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({}, { driverOptions }));
    expect(response.status).toBe(200);
    expect(response.body.node.bmc.driverOptions).toEqual(driverOptions);
  });

  it('an ipmi machine known by a real productUuid alone is accepted', async () => {
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ productUuid: '4C4C4544-0035-3510-8052-B4C04F4E4B32' }, { driver: 'ipmi' }));
    expect(response.status).toBe(200);
    expect(response.body.node).toMatchObject({ productUuid: '4c4c4544-0035-3510-8052-b4c04f4e4b32', macs: [], driverBindings: { virtualMedia: 'none' } });
  });

  it('decided as compute:nodes:provision on the pool: a token on the other pool is PERMISSION_DENIED', async () => {
    const pool1 = tree.pools[1]!;
    const narrow = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'pool', scopeId: pool1.id, siteId: pool1.siteId, poolId: pool1.id }]);
    expect((await rest(t.url, narrow, 'POST', '/api/compute/metal/enroll', body())).status).toBe(403);
    const result = await gql(t.url, narrow, 'mutation ($i: MetalEnrollInput!) { enrollNode(input: $i) { node { id } } }', {
      i: { poolId: pool1.id, bmc: { address: '127.1.1.1', driver: 'redfish', credentials: { ref: 'secret://x' } } },
    });
    expect(result.errors).toBeUndefined();
  });

  it('without a secret broker, inline credentials are INVALID_CONFIG (references still work)', async () => {
    const bare = await startTestApp({ role: 'api', databaseUrl: t.app.databaseUrl, secretKey: undefined, adminToken: t.adminToken });
    try {
      expect(bare.app.services.secrets).toBeNull();
      const inline = await rest(bare.url, token, 'POST', '/api/compute/metal/enroll', body());
      expect(inline.status).toBe(422);
      expect(inline.body.error.code).toBe('INVALID_CONFIG');
      expect((await rest(bare.url, token, 'POST', '/api/compute/metal/enroll', body({}, { credentials: 'secret://vault/x' }))).status).toBe(200);
    } finally {
      await bare.stop();
    }
  });

  it('at most 64 MACs per machine: 65 is INVALID_INPUT naming macs on both faces, before anything is written; 64 is enrolled', async () => {
    // Each MAC takes a lock in the enrolling transaction: tens of thousands ran the lock table out.
    const macs = (n: number, base: number) => Array.from({ length: n }, (_, i) => `02:00:${base.toString(16).padStart(2, '0')}:00:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 0xff).toString(16).padStart(2, '0')}`);
    const before = await t.app.database.prisma.node.count();
    const viaRest = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ name: 'many-macs', macs: macs(65, 0xa1) }));
    expect(viaRest.status).toBe(400);
    expect(viaRest.body.error).toMatchObject({ code: 'INVALID_INPUT', message: expect.stringMatching(/^(body\.)?macs: at most 64 MACs/) });
    const viaGraphql = await gql(t.url, token, 'mutation ($i: MetalEnrollInput!) { enrollNode(input: $i) { node { id } } }', { i: body({ macs: macs(65, 0xa2) }) });
    expect(viaGraphql.errors?.[0]).toMatchObject({ message: expect.stringContaining('macs: at most 64 MACs'), extensions: { code: 'INVALID_INPUT' } });
    expect(await t.app.database.prisma.node.count()).toBe(before);
    const ok = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ name: 'sixty-four', macs: macs(64, 0xa3) }));
    expect(ok.status).toBe(200);
    expect(ok.body.node.macs).toHaveLength(64);
  });

  it('GraphQL needs exactly one kind of credentials', async () => {
    const result = await gql(t.url, token, 'mutation ($i: MetalEnrollInput!) { enrollNode(input: $i) { node { id } } }', {
      i: { poolId: tree.pools[0]!.id, bmc: { address: '127.1.1.1', driver: 'redfish', credentials: { ref: 'secret://x', password: 'p' } } },
    });
    expect(codeOf(result)).toBe('INVALID_INPUT');
  });
});
