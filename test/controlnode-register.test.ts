/**
 * POST /controlnode/register and GraphQL registerControlNode (issue 11 item 1): the control node is
 * a metal node by its BMC with a bmc_info record (serial, vendor, OS facts, NetBox ids). A new one
 * is adopted against a Redfish BMC simulator reached at its bare IP on 443, as a real BMC is, over
 * TLS verified with CONTROLNODE_BMC_CA_FILE: its BMC verified and read out of band, and no power,
 * boot or media call sent. Passwords go to the broker: none is in a response, a row, an event or a
 * log line, plain or hex-encoded (the seed hex-encoded the OS password).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTestApp, capturingLogger, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { bmcCertificates } from './helpers/tls';
import { startRedfishSim, type RedfishSim } from './sim/redfish/server';
import { loadConfig } from '../src/config';
import { controlnodeBmcOptions, driverOfVendor } from '../src/modules/provision/register';

jest.setTimeout(60_000);

const BMC_PASSWORD = 'Bmc-Regist3r-Pa55';
const OS_PASSWORD = 'Os-Regist3r-Pa55';
const NEW_OS_PASSWORD = 'Os-Rotat3d-Pa55';
const SECRETS = [BMC_PASSWORD, OS_PASSWORD, NEW_OS_PASSWORD];
const hex = (s: string) => Buffer.from(s, 'utf8').toString('hex');
// Loopback addresses of their own, each BMC on 443 as the control-node API's bare bmc_ip implies.
const IP = { cn: '127.77.0.1', nocred: '127.77.0.2', moved: '127.77.0.3', other: '127.77.0.4' };

let t: TestApp;
let sim: RedfishSim;
let dir: string;
let poolId: string;
let tenantId: string;
let token: string;
const lines: string[] = [];

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cn-register-'));
  const certs = bmcCertificates(dir, Object.values(IP));
  sim = await startRedfishSim({
    machines: [
      { id: 'cn', flavour: 'idrac', listen: { host: IP.cn, port: 443 }, password: BMC_PASSWORD, serial: 'J30X8K1' },
      { id: 'nocred', listen: { host: IP.nocred, port: 443 }, password: BMC_PASSWORD },
    ],
    tls: { key: certs.key, cert: certs.cert },
  });
  t = await startTestApp({ agentPollMs: 200, controlnodeBmcCaFile: path.join(dir, 'ca.pem') }, { log: capturingLogger(lines) });
  const tree = await makeTenantTree(t.app.services.prisma, 'cn', { pools: 1, nodesPerPool: 0 });
  poolId = tree.pools[0]!.id;
  tenantId = tree.tenant.id;
  token = await makeToken(t.app.services.prisma, tenantId, [{ permission: 'compute:nodes:provision', scopeType: 'pool', scopeId: poolId }]);
});
afterAll(async () => {
  await t?.stop();
  await sim?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const register = (body: unknown, as: string | null = token) => rest(t.url, as, 'POST', '/controlnode/register', body);
const count = async (sql: string) => Number((await t.app.services.sql.query(sql)).rows[0]!.n);
const secrets = () => count('SELECT count(*)::int AS n FROM secret');
const nodes = () => count('SELECT count(*)::int AS n FROM node');

async function settled(nodeId: string): Promise<Record<string, unknown>> {
  for (let i = 0; i < 300; i += 1) {
    const row = (await t.app.services.sql.query('SELECT provision_state, failed_from, last_error_code, last_error_message, inventory, bmc_driver, bmc_driver_options FROM node WHERE id = $1', [nodeId])).rows[0]!;
    if (row.provision_state !== 'adopting') return row;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`node ${nodeId} still adopting`);
}

const FULL = {
  bmc_ip: IP.cn, bmc_username: 'admin', bmc_password: BMC_PASSWORD, serial_number: 'J30X8K1', vendor: 'Dell',
  os_hostname: 'mgmt-01', os_ip: '10.30.0.5', os_password: OS_PASSWORD, fqdn: 'mgmt-01.dc1.example',
  primary_mac: '3C:FD:FE:00:10:01', atlas_device_id: 1741, atlas_location_id: 12, atlas_rack_id: 7, atlas_site_id: 3,
};
let cnId = '';

describe('register', () => {
  it('INVALID_CONFIG naming CONTROLNODE_POOL_ID while it is not set, with nothing written', async () => {
    const [s, n] = [await secrets(), await nodes()];
    const r = await register(FULL);
    expect([r.status, r.body.error.code]).toEqual([422, 'INVALID_CONFIG']);
    expect(r.body.error.message).toMatch(/CONTROLNODE_POOL_ID/);
    expect([await secrets(), await nodes()]).toEqual([s, n]);
    // The configuration the rest of this file runs with (read per request).
    t.app.services.config.controlnodePoolId = poolId;
  });

  it('records a new control node in adopting; its BMC is verified over TLS and read out of band, and nothing is sent to it', async () => {
    const r = await register(FULL);
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ created: true, success: true, hostname: 'mgmt-01', node_ip: '10.30.0.5', node_id: expect.any(String), message: expect.stringMatching(/registered: adopting/) });
    cnId = r.body.node_id;
    const node = await settled(cnId);
    expect(node).toMatchObject({ provision_state: 'adopted', bmc_driver: 'idrac' });
    expect(node.bmc_driver_options).toEqual({ caCert: fs.readFileSync(path.join(dir, 'ca.pem'), 'utf8') });
    expect((node.inventory as { outOfBand: { serial: string } }).outOfBand.serial).toBe('J30X8K1');
    // Adoption touches the running machine in no way: no Reset, boot override or media call.
    expect(sim.counts('cn').total).toBe(0);
    const runs = (await t.app.services.sql.query('SELECT kind, status FROM workflow_run WHERE node_id = $1', [cnId])).rows;
    expect(runs).toEqual([{ kind: 'metal-adopt', status: 'succeeded' }]);
    const info = (await t.app.services.sql.query('SELECT * FROM bmc_info WHERE node_id = $1', [cnId])).rows[0]!;
    expect(info).toMatchObject({
      tenant_id: tenantId, is_control_node: true, serial_number: 'J30X8K1', vendor: 'Dell', os_hostname: 'mgmt-01', fqdn: 'mgmt-01.dc1.example',
      os_ip: '10.30.0.5', os_username: 'root', primary_mac: '3c:fd:fe:00:10:01', atlas_device_id: 1741, atlas_location_id: 12, atlas_rack_id: 7, atlas_site_id: 3,
      os_credentials_ref: expect.stringMatching(/^secret:\/\//),
    });
    const event = (await t.app.services.sql.query(`SELECT payload FROM event WHERE node_id = $1 AND type = 'node.registered'`, [cnId])).rows;
    expect(event).toHaveLength(1);
    expect(event[0]!.payload).toMatchObject({ created: true, controlNode: true, to: 'adopting', bmc: { address: IP.cn, driver: 'idrac' } });
  });

  it('GraphQL shows the same record, with whether the OS password is held and never the password', async () => {
    const q = await gql(t.url, token, `query($id: ID!) { node(id: $id) { ... on MetalNode { provisionState name bmc { address driver credentialsSet }
      bmcInfo { isControlNode serialNumber vendor osHostname fqdn osIp osUsername osPasswordSet primaryMac atlasDeviceId atlasLocationId atlasRackId atlasSiteId } } } }`, { id: cnId });
    expect(q.errors).toBeUndefined();
    expect(q.data!.node).toEqual({
      provisionState: 'adopted', name: 'mgmt-01', bmc: { address: IP.cn, driver: 'idrac', credentialsSet: true },
      bmcInfo: { isControlNode: true, serialNumber: 'J30X8K1', vendor: 'Dell', osHostname: 'mgmt-01', fqdn: 'mgmt-01.dc1.example', osIp: '10.30.0.5', osUsername: 'root', osPasswordSet: true, primaryMac: '3c:fd:fe:00:10:01', atlasDeviceId: 1741, atlasLocationId: 12, atlasRackId: 7, atlasSiteId: 3 },
    });
    const m = await gql(t.url, token, `mutation($i: RegisterControlNodeInput!) { registerControlNode(input: $i) { created hostname nodeIp message node { id provisionState } } }`,
      { i: { bmcIp: IP.cn, serialNumber: 'J30X8K1' } });
    expect(m.errors).toBeUndefined();
    expect(m.data!.registerControlNode).toMatchObject({ created: false, hostname: '', nodeIp: '', node: { id: cnId, provisionState: 'adopted' } });
  });

  it('the serial is the identity: a second register updates the same node, keeps what it does not give, and replaces the OS password in the broker', async () => {
    const before = await secrets();
    const r = await register({ bmc_ip: IP.cn, serial_number: 'J30X8K1', os_hostname: 'mgmt-01b', os_ip: '10.30.0.6', os_password: NEW_OS_PASSWORD });
    expect(r.body).toMatchObject({ created: false, node_id: cnId, hostname: 'mgmt-01b', node_ip: '10.30.0.6', success: true });
    const info = (await t.app.services.sql.query('SELECT os_hostname, os_ip, fqdn, atlas_device_id, version FROM bmc_info WHERE node_id = $1', [cnId])).rows[0]!;
    expect(info).toMatchObject({ os_hostname: 'mgmt-01b', os_ip: '10.30.0.6', fqdn: 'mgmt-01.dc1.example', atlas_device_id: 1741 });
    // The new OS password in, the replaced one out; the node keeps its state.
    expect(await secrets()).toBe(before);
    expect((await settled(cnId)).provision_state).toBe('adopted');
    // A re-addressed BMC (same serial) moves the node's BMC; back again.
    expect((await register({ bmc_ip: IP.moved, serial_number: 'J30X8K1' })).body).toMatchObject({ created: false, node_id: cnId });
    expect((await t.app.services.sql.query('SELECT bmc_address FROM node WHERE id = $1', [cnId])).rows[0]!.bmc_address).toBe(IP.moved);
    expect((await register({ bmc_ip: IP.cn, serial_number: 'J30X8K1' })).status).toBe(200);
    // Without a serial, the BMC address finds it.
    expect((await register({ bmc_ip: IP.cn, os_hostname: 'mgmt-01' })).body).toMatchObject({ created: false, node_id: cnId });
  });

  it('CONFLICT when the serial and the BMC address name two machines, or the address is a machine with another serial', async () => {
    const other = await register({ bmc_ip: IP.other, serial_number: 'OTHER-1' });
    expect(other.body.created).toBe(true);
    const [s, n] = [await secrets(), await nodes()];
    for (const body of [{ bmc_ip: IP.other, serial_number: 'J30X8K1' }, { bmc_ip: IP.cn, serial_number: 'NEW-SERIAL', bmc_username: 'admin', bmc_password: BMC_PASSWORD }]) {
      const r = await register(body);
      expect([r.status, r.body.error.code]).toEqual([409, 'CONFLICT']);
      expect(JSON.stringify(r.body)).not.toContain(BMC_PASSWORD);
    }
    expect([await secrets(), await nodes()]).toEqual([s, n]);
  });

  it('a control node registered without BMC credentials fails its adoption, saying why; registering them later is recorded', async () => {
    const r = await register({ bmc_ip: IP.nocred, os_hostname: 'mgmt-02' });
    expect(r.body).toMatchObject({ created: true, message: expect.stringMatching(/no BMC credentials were given/) });
    const node = await settled(r.body.node_id);
    expect(node).toMatchObject({ provision_state: 'failed', failed_from: 'adopting' });
    expect(node.last_error_message).toMatch(/no BMC credentials/);
    expect(sim.counts('nocred').total).toBe(0);
    const again = await register({ bmc_ip: IP.nocred, bmc_username: 'admin', bmc_password: BMC_PASSWORD });
    expect(again.body).toMatchObject({ created: false, node_id: r.body.node_id });
    expect((await t.app.services.sql.query('SELECT bmc_credentials_ref FROM node WHERE id = $1', [r.body.node_id])).rows[0]!.bmc_credentials_ref).toMatch(/^secret:\/\//);
  });

  const REFUSED: [string, Record<string, unknown>, string][] = [
    ['no bmc_ip', { serial_number: 'X1' }, 'body.bmc_ip'],
    ['a bmc_ip that is no address', { bmc_ip: 'bmc-07.example' }, 'body.bmc_ip'],
    ['a bmc_ip with a port', { bmc_ip: '127.0.0.1:443' }, 'body.bmc_ip'],
    ['a user name without its password', { bmc_ip: '127.9.0.1', bmc_username: 'admin' }, 'body.bmc_password'],
    ['a password without its user name', { bmc_ip: '127.9.0.1', bmc_password: BMC_PASSWORD }, 'body.bmc_username'],
    ['an os_ip that is no address', { bmc_ip: '127.9.0.1', os_ip: '10.30.0' }, 'body.os_ip'],
    ['a broadcast primary_mac', { bmc_ip: '127.9.0.1', primary_mac: 'ff:ff:ff:ff:ff:ff' }, 'body.primary_mac'],
    ['a malformed primary_mac', { bmc_ip: '127.9.0.1', primary_mac: '3C:FD:FE' }, 'body.primary_mac'],
    ['a serial with a space', { bmc_ip: '127.9.0.1', serial_number: 'J30 X8K1' }, 'body.serial_number'],
    ['a host name with an underscore', { bmc_ip: '127.9.0.1', os_hostname: 'mgmt_01' }, 'body.os_hostname'],
    ['an fqdn with a space', { bmc_ip: '127.9.0.1', fqdn: 'a b.example' }, 'body.fqdn'],
    ['an OS user name with a capital', { bmc_ip: '127.9.0.1', os_username: 'Root' }, 'body.os_username'],
    ['a NetBox id of 0', { bmc_ip: '127.9.0.1', atlas_device_id: 0 }, 'body.atlas_device_id'],
    ['a NetBox id that is a string', { bmc_ip: '127.9.0.1', atlas_rack_id: '7' }, 'body.atlas_rack_id'],
    ['a NetBox id past int32', { bmc_ip: '127.9.0.1', atlas_site_id: 2 ** 31 }, 'body.atlas_site_id'],
    ['a NUL in the host name', { bmc_ip: '127.9.0.1', os_hostname: 'mgmt\u000001' }, 'body.os_hostname'],
    ['a lone surrogate in the vendor', { bmc_ip: '127.9.0.1', vendor: 'Dell\ud800' }, 'body.vendor'],
    ['a 5,000-character serial', { bmc_ip: '127.9.0.1', serial_number: 'A'.repeat(5000) }, 'body.serial_number'],
    ['an unknown field', { bmc_ip: '127.9.0.1', is_control_node: false }, 'body.is_control_node'],
    ['a number for bmc_ip', { bmc_ip: 1 }, 'body.bmc_ip'],
  ];

  it.each(REFUSED)('%s: 400 INVALID_INPUT naming the field, nothing written, no password repeated', async (_name, body, field) => {
    const [s, n] = [await secrets(), await nodes()];
    const r = await register({ ...body, os_password: OS_PASSWORD });
    expect([r.status, r.body.error.code, r.body.error.details?.field]).toEqual([400, 'INVALID_INPUT', field]);
    expect(JSON.stringify(r.body)).not.toContain(OS_PASSWORD);
    expect(JSON.stringify(r.body)).not.toContain(BMC_PASSWORD);
    expect([await secrets(), await nodes()]).toEqual([s, n]);
  });

  it('a token without compute:nodes:provision on the pool is refused; another tenant\'s sees no pool', async () => {
    const reader = await makeToken(t.app.services.prisma, tenantId, [{ permission: 'compute:nodes:power', scopeType: 'pool', scopeId: poolId }]);
    expect((await register({ bmc_ip: '127.9.0.2' }, reader)).body.error.code).toBe('PERMISSION_DENIED');
    const elsewhere = await makeTenantTree(t.app.services.prisma, 'cn-other', { pools: 1, nodesPerPool: 0 });
    const stranger = await makeToken(t.app.services.prisma, elsewhere.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: elsewhere.tenant.id }]);
    const r = await register({ bmc_ip: '127.9.0.2' }, stranger);
    expect([r.status, r.body.error.code]).toEqual([404, 'NOT_FOUND']);
    expect((await register({ bmc_ip: '127.9.0.2' }, null)).status).toBe(401);
  });

  it('no password is in any row, event or log line, plain or hex-encoded', async () => {
    const dump = JSON.stringify([
      ...(await t.app.services.sql.query('SELECT * FROM node')).rows,
      ...(await t.app.services.sql.query('SELECT * FROM bmc_info')).rows,
      ...(await t.app.services.sql.query('SELECT * FROM event')).rows,
      ...(await t.app.services.sql.query('SELECT * FROM workflow_run')).rows,
      ...(await t.app.services.sql.query('SELECT * FROM workflow_step')).rows,
      ...(await t.app.services.sql.query('SELECT * FROM command')).rows,
    ]);
    const logs = lines.join('');
    for (const secret of SECRETS) {
      for (const form of [secret, hex(secret)]) {
        expect(dump).not.toContain(form);
        expect(logs).not.toContain(form);
      }
    }
    expect(logs).toContain('request');
  });
});

describe('the control-node BMC settings', () => {
  it('CONTROLNODE_POOL_ID, CONTROLNODE_BMC_CA_FILE and CONTROLNODE_BMC_INSECURE are read and checked at start', () => {
    expect(loadConfig({ CONTROLNODE_POOL_ID: ' pl_1 ' }).controlnodePoolId).toBe('pl_1');
    expect(loadConfig({}).controlnodePoolId).toBeUndefined();
    expect(loadConfig({ CONTROLNODE_BMC_INSECURE: 'true' }).controlnodeBmcInsecure).toBe(true);
    expect(loadConfig({}).controlnodeBmcInsecure).toBe(false);
    expect(loadConfig({ CONTROLNODE_BMC_CA_FILE: 'ca.pem' }).controlnodeBmcCaFile).toBe(path.resolve('ca.pem'));
    expect(() => loadConfig({ CONTROLNODE_BMC_INSECURE: 'yes please' })).toThrow(/CONTROLNODE_BMC_INSECURE must be true or false/);
    expect(() => loadConfig({ CONTROLNODE_BMC_INSECURE: 'true', CONTROLNODE_BMC_CA_FILE: 'ca.pem' })).toThrow(/not both/);
  });

  it('the options a new node gets: the CA, insecure, or none; an unreadable or non-PEM CA file is INVALID_CONFIG', async () => {
    const ca = path.join(dir, 'ca.pem');
    expect(await controlnodeBmcOptions({ controlnodeBmcCaFile: ca, controlnodeBmcInsecure: false })).toEqual({ caCert: fs.readFileSync(ca, 'utf8') });
    expect(await controlnodeBmcOptions({ controlnodeBmcCaFile: undefined, controlnodeBmcInsecure: true })).toEqual({ insecure: true });
    expect(await controlnodeBmcOptions({ controlnodeBmcCaFile: undefined, controlnodeBmcInsecure: false })).toEqual({});
    for (const file of [path.join(dir, 'missing.pem'), path.join(dir, 'ext.cnf')]) {
      await expect(controlnodeBmcOptions({ controlnodeBmcCaFile: file, controlnodeBmcInsecure: false })).rejects.toMatchObject({ code: 'INVALID_CONFIG', message: expect.stringMatching(/CONTROLNODE_BMC_CA_FILE/) });
    }
  });

  it('vendors pick their Redfish flavour, case-insensitively; others are generic Redfish', () => {
    expect(['Dell', 'hp', 'HPE', 'lenovo', 'Cisco', 'supermicro', 'Acme', '', null].map(driverOfVendor))
      .toEqual(['idrac', 'ilo', 'ilo', 'xcc', 'cimc', 'supermicro', 'redfish', 'redfish', 'redfish']);
  });
});
