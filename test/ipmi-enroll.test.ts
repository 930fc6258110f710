/**
 * enroll refuses what the IPMI driver could never use, as INVALID_INPUT naming the field, before
 * the broker or the node is written: the same check (clients/bmc/ipmi/options.ts checkIpmiNode) the driver
 * runs again before any packet, so an operator learns at enroll, not from a failed workflow.
 */
import pg from 'pg';
import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';

describe('enroll of an IPMI node', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let token: string;
  let sql: pg.Client;

  beforeAll(async () => {
    t = await startTestApp({});
    tree = await makeTenantTree(t.app.database.prisma, 'ipmi-enroll', { pools: 1, nodesPerPool: 0 });
    token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    // A Redfish BMC whose power is driven over IPMI (a hardware profile can bind it so).
    const profile = await gql(t.url, t.adminToken, 'mutation { createHardwareProfile(input: {name: "ipmi-power", driverBindings: {power: "ipmi", management: "redfish", virtualMedia: "redfish"}}) { id } }');
    expect(profile.errors).toBeUndefined();
    sql = new pg.Client({ connectionString: t.app.databaseUrl });
    await sql.connect();
  });
  afterAll(async () => {
    await sql.end();
    await t.stop();
  });

  let n = 0;
  const body = (bmc: Record<string, unknown>, over: Record<string, unknown> = {}) => ({
    poolId: tree.pools[0]!.id,
    macs: [`52:54:00:10:00:${(n++).toString(16).padStart(2, '0')}`],
    bmc: { address: '127.40.0.5', driver: 'ipmi', credentials: { username: 'admin', password: 'Ipmi-Enroll-Pa55' }, ...bmc },
    ...over,
  });
  const counts = async () => (await sql.query('SELECT (SELECT count(*) FROM node) AS nodes, (SELECT count(*) FROM secret) AS secrets')).rows[0];

  it.each([
    ['cipher suite 0', { driverOptions: { cipherSuite: 0 } }, 'bmc.driverOptions.cipherSuite: cipher suite 0 is refused'],
    ['a cipher suite out of range', { driverOptions: { cipherSuite: 40 } }, 'bmc.driverOptions.cipherSuite: must be an integer'],
    ['a privilege level that cannot power a machine', { driverOptions: { privilegeLevel: 'USER' } }, 'bmc.driverOptions.privilegeLevel'],
    ['a URL for an address', { address: 'https://127.40.0.5' }, 'bmc.address: the ipmi driver takes host[:port]'],
  ])('%s: 400 naming the field, nothing written', async (_name, bmc, message) => {
    const before = await counts();
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body(bmc));
    expect(response.status).toBe(400);
    expect(response.body.error).toMatchObject({ code: 'INVALID_INPUT', message: expect.stringContaining(message) });
    expect(JSON.stringify(response.body)).not.toContain('Ipmi-Enroll-Pa55');
    expect(await counts()).toEqual(before);
  });

  it('a Redfish BMC with power bound to ipmi by its hardware profile is checked too', async () => {
    const refused = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ driver: 'redfish', address: 'https://127.40.0.6' }, { hardwareProfile: 'ipmi-power' }));
    expect(refused.status).toBe(400);
    expect(refused.body.error.message).toContain('bmc.address');
    // Without the IPMI binding, the same URL is a Redfish address like any other.
    const redfish = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ driver: 'redfish', address: 'https://127.40.0.6' }));
    expect(redfish.status).toBe(200);
  });

  it('host:port, a supported cipher suite and the other options are kept as given', async () => {
    const driverOptions = { cipherSuite: 17, privilegeLevel: 'OPERATOR', guidEncoding: 'smbios' };
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ address: '127.40.0.7:9623', driverOptions }));
    expect(response.status).toBe(200);
    expect(response.body.node.bmc).toMatchObject({ address: '127.40.0.7:9623', driver: 'ipmi', driverOptions });
  });
});
