/**
 * Issue 21 item 6: a BMC address is no way into the control plane's network. A site's bmcNetworks
 * (else BMC_NETWORKS) bound where its BMCs may be; with nothing configured loopback, link-local,
 * unspecified, multicast and broadcast addresses are refused, in every spelling the agent's URL
 * parser reads. enroll, register and provision refuse such an address with 400 INVALID_INPUT naming
 * the field, before anything is written. The service runs as ROLE=api (no agent), and no address
 * here is ever connected to; host names are checked without DNS (refused with networks configured,
 * an injected resolver otherwise).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { checkBmcNetwork, parseBmcNetworks } from '../src/modules/metal/bmc-networks';
import { loadConfig } from '../src/config';
import { AppError } from '../src/errors';
import { newId } from '../src/ids';

const fieldOf = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(AppError);
    return { code: (e as AppError).code, field: ((e as AppError).extensions.details as { field?: string }).field, message: (e as AppError).message };
  }
  return null;
};

describe('checkBmcNetwork', () => {
  const noDns = async () => {
    throw new Error('no DNS in this test');
  };
  it.each([
    '127.0.0.1', '127.1', '2130706433', '0x7f.1', '127.0.0.1:8443', 'https://127.0.0.1/', 'http://0177.0.0.1:80/',
    '::1', '[::1]:443', '::ffff:127.0.0.1', '[::ffff:7f00:1]', 'https://[::1]/',
    '169.254.169.254', 'fe80::1', 'fe80::1%eth0', '[fe80::1%25eth0]:443', '0.0.0.0', '0', '::', '224.0.0.1', 'ff02::1', '255.255.255.255', 'localhost', 'bmc.localhost:443',
    'https://[fe80::1%25eth0]/',
  ])('with nothing configured, refuses %s', async (address) => {
    expect(await fieldOf(checkBmcNetwork(address, [], [], 'bmc.address', noDns))).toMatchObject({ code: 'INVALID_INPUT', field: 'bmc.address' });
  });
  it.each(['192.0.2.10', '192.0.2.10:623', 'https://[2001:db8::5]:8443/redfish/v1'])('with nothing configured, allows %s', async (address) => {
    expect(await fieldOf(checkBmcNetwork(address, [], [], 'bmc.address', noDns))).toBeNull();
  });
  it('resolves a host name when nothing is configured, and refuses one that resolves to a refused range or not at all', async () => {
    const dns = (answers: Record<string, string[]>) => async (name: string) => answers[name] ?? [];
    const resolver = dns({ 'bmc1.example': ['192.0.2.1'], 'sneaky.example': ['192.0.2.1', '127.0.0.1'], 'meta.example': ['169.254.169.254'] });
    expect(await fieldOf(checkBmcNetwork('bmc1.example', [], [], 'f', resolver))).toBeNull();
    expect(await fieldOf(checkBmcNetwork('sneaky.example:443', [], [], 'f', resolver))).toMatchObject({ field: 'f' });
    expect(await fieldOf(checkBmcNetwork('https://meta.example/', [], [], 'f', resolver))).toMatchObject({ field: 'f' });
    expect(await fieldOf(checkBmcNetwork('gone.example', [], [], 'f', resolver))).toMatchObject({ field: 'f' });
  });
  it('with networks, allows only addresses inside them (the site\'s over the service\'s), and refuses host names', async () => {
    const check = (a: string, site: string[], service: string[]) => fieldOf(checkBmcNetwork(a, site, service, 'input.bmcIp', noDns));
    expect(await check('127.0.0.9', [], ['127.0.0.0/8'])).toBeNull();
    expect(await check('::ffff:127.0.0.9', [], ['127.0.0.0/8'])).toBeNull();
    expect(await check('10.0.0.1', [], ['127.0.0.0/8'])).toMatchObject({ code: 'INVALID_INPUT', field: 'input.bmcIp' });
    expect(await check('10.20.3.4', ['10.20.0.0/16'], ['127.0.0.0/8'])).toBeNull();
    expect(await check('127.0.0.1', ['10.20.0.0/16'], ['127.0.0.0/8'])).toMatchObject({ field: 'input.bmcIp' });
    expect(await check('[fd00:20::7]:443', ['fd00:20::/48'], [])).toBeNull();
    expect(await check('bmc1.example', ['10.20.0.0/16'], [])).toMatchObject({ field: 'input.bmcIp' });
    expect(await check('localhost', [], ['127.0.0.0/8'])).toMatchObject({ field: 'input.bmcIp' });
  });
  it('parses CIDRs to their canonical network, naming the entry it refuses', () => {
    expect(parseBmcNetworks([' 10.20.1.7/16', 'FD00:20::1/48'], 'x')).toEqual(['10.20.0.0/16', 'fd00:20::/48']);
    for (const bad of ['10.0.0.0', '10.0.0.0/33', 'fd00::/129', 'bmc/24', '']) {
      expect(() => parseBmcNetworks(['10.0.0.0/8', bad], 'input.bmcNetworks')).toThrow(expect.objectContaining({ code: 'INVALID_INPUT', extensions: expect.objectContaining({ details: { field: 'input.bmcNetworks[1]' } }) }));
    }
    expect(loadConfig({ BMC_NETWORKS: '127.0.0.0/8, 10.1.0.0/16' }).bmcNetworks).toEqual(['127.0.0.0/8', '10.1.0.0/16']);
    expect(loadConfig({}).bmcNetworks).toEqual([]);
    expect(() => loadConfig({ BMC_NETWORKS: '127.0.0.0/8,nope' })).toThrow(/BMC_NETWORKS/);
  });
});

describe('enroll, register and provision refuse a BMC outside its site\'s networks, before anything is written', () => {
  let t: TestApp;
  let dir: string;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let token: string;
  let admin: string;
  const PASSWORD = 'Bmc-N3tworks-Pa55';

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bmc-networks-'));
    const credentialsFile = path.join(dir, 'bmc-credentials');
    fs.writeFileSync(credentialsFile, `root:${PASSWORD}\n`);
    // Nothing service-wide: the built-in refusals, and each site's own networks.
    t = await startTestApp({ role: 'api', bmcNetworks: [] });
    tree = await makeTenantTree(t.app.database.prisma, 'bmcnet', { pools: 1, nodesPerPool: 0 });
    Object.assign(t.app.services.config, { controlnodePoolId: tree.pools[0]!.id, controlnodeBmcCredentialsFile: credentialsFile, controlnodeBmcInsecure: true });
    token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    admin = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  });
  afterAll(async () => {
    await t?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  const count = async (table: string) => Number((await t.app.services.sql.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0]!.n);
  const written = async () => ({ nodes: await count('node'), secrets: await count('secret'), runs: await count('workflow_run'), events: await count('event') });
  const enroll = (address: string) => rest(t.url, token, 'POST', '/api/compute/metal/enroll', {
    poolId: tree.pools[0]!.id, bmc: { address, driver: 'redfish', credentials: { username: 'root', password: PASSWORD } },
  });
  const setNetworks = (bmcNetworks: string[], as = admin) =>
    gql(t.url, as, 'mutation ($i: UpdateSiteInput!) { updateSite(input: $i) { id bmcNetworks } }', { i: { id: tree.site.id, bmcNetworks } });

  it('with nothing configured, refuses loopback, link-local and the service\'s own host on every route, writing nothing', async () => {
    const before = await written();
    for (const address of ['127.0.0.1:4000', 'http://127.1/', '[::1]', '169.254.169.254']) {
      const r = await enroll(address);
      expect(r.status).toBe(400);
      expect(r.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'body.bmc.address' } });
    }
    const g = await gql(t.url, token, 'mutation ($i: MetalEnrollInput!) { enrollNode(input: $i) { node { id } } }', {
      i: { poolId: tree.pools[0]!.id, bmc: { address: '0.0.0.0', driver: 'redfish', credentials: { username: 'root', password: PASSWORD } } },
    });
    expect(g.errors?.[0]?.extensions).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'bmc.address' } });
    const reg = await rest(t.url, token, 'POST', '/controlnode/register', { bmc_ip: '127.0.0.1', bmc_username: 'root', bmc_password: PASSWORD, os_password: 'Os-pa55-word' });
    expect(reg.status).toBe(400);
    expect(reg.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'body.bmc_ip' } });
    const prov = await rest(t.url, token, 'POST', '/controlnode/provision/dell', {
      bmc_IP: '169.254.0.7', hostname: 'cn-x', os_password: 'Os-pa55-word', selected_disks: ['sda'], pool_type: 'single',
    });
    expect(prov.status).toBe(400);
    expect(prov.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'body.bmc_IP' } });
    expect(await written()).toEqual(before);
  });

  it('a site\'s bmcNetworks are set by admins, checked as CIDRs, and bound enroll, register and provision', async () => {
    const bad = await setNetworks(['192.0.2.0/24', '192.0.2.0/40']);
    expect(bad.errors?.[0]?.extensions).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'input.bmcNetworks[1]' } });
    expect((await setNetworks(['192.0.2.0/24'], token)).errors?.[0]?.extensions?.code).toBe('PERMISSION_DENIED');
    const set = await setNetworks(['192.0.2.1/24']);
    expect(set.data?.updateSite).toEqual({ id: tree.site.id, bmcNetworks: ['192.0.2.0/24'] });

    const inside = await enroll('192.0.2.10');
    expect(inside.status).toBe(200);
    const before = await written();
    for (const address of ['198.51.100.10', 'https://10.0.0.1/redfish/v1', 'bmc1.example', '127.0.0.1']) {
      const r = await enroll(address);
      expect(r.status).toBe(400);
      expect(r.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'body.bmc.address' } });
      expect(r.body.error.message).not.toContain(address);
    }
    const reg = await rest(t.url, token, 'POST', '/controlnode/register', { bmc_ip: '198.51.100.11', bmc_username: 'root', bmc_password: PASSWORD });
    expect(reg.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'body.bmc_ip' } });
    // A new BMC address (provision enrolls it first) and a known node whose address its site no longer allows.
    const provBody = (ip: string) => ({ bmc_IP: ip, hostname: 'cn-x', os_password: 'Os-pa55-word', selected_disks: ['sda'], pool_type: 'single' });
    expect((await rest(t.url, token, 'POST', '/controlnode/provision/dell', provBody('198.51.100.12'))).body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'body.bmc_IP' } });
    await t.app.database.prisma.node.create({
      data: { id: newId('MetalNode'), tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id, provisionState: 'ready', bmcAddress: '198.51.100.13', bmcDriver: 'idrac', bmcCredentialsRef: 'secret://x' },
    });
    const known = await rest(t.url, token, 'POST', '/controlnode/provision/dell', provBody('198.51.100.13'));
    expect(known.status).toBe(400);
    expect(known.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'body.bmc_IP' } });
    const after = await written();
    expect(after).toEqual({ ...before, nodes: before.nodes + 1 });

    // Back to nothing: the service-wide default (none here) and the built-in refusals.
    expect((await setNetworks([])).data?.updateSite?.bmcNetworks).toEqual([]);
    expect((await enroll('198.51.100.10')).status).toBe(200);
  });

  it('REST: PATCH /api/compute/sites/{id} sets them, POST /api/compute/sites takes them, GET shows them; a bad entry is named', async () => {
    const patched = await rest(t.url, admin, 'PATCH', `/api/compute/sites/${tree.site.id}`, { bmcNetworks: ['198.51.100.0/24'] });
    expect(patched.status).toBe(200);
    expect(patched.body.site).toMatchObject({ id: tree.site.id, bmcNetworks: ['198.51.100.0/24'] });
    expect((await rest(t.url, admin, 'GET', `/api/compute/sites/${tree.site.id}`)).body.site.bmcNetworks).toEqual(['198.51.100.0/24']);
    const bad = await rest(t.url, admin, 'PATCH', `/api/compute/sites/${tree.site.id}`, { bmcNetworks: ['198.51.100.0/24', 'nope'] });
    expect([bad.status, bad.body.error.details.field]).toEqual([400, 'body.bmcNetworks[1]']);
    expect((await rest(t.url, token, 'PATCH', `/api/compute/sites/${tree.site.id}`, { bmcNetworks: [] })).status).toBe(403);
    const created = await rest(t.url, admin, 'POST', '/api/compute/sites', { name: 'bmcnet-rest', bmcNetworks: ['10.8.0.0/16'] });
    expect([created.status, created.body.site.bmcNetworks]).toEqual([201, ['10.8.0.0/16']]);
    expect((await rest(t.url, admin, 'PATCH', `/api/compute/sites/${tree.site.id}`, { bmcNetworks: [] })).body.site.bmcNetworks).toEqual([]);
  });

  it('createSite takes bmcNetworks, checked and stored canonically', async () => {
    const ok = await gql(t.url, admin, 'mutation { createSite(input: {name: "bmcnet-2", bmcNetworks: ["10.9.1.1/16"]}) { bmcNetworks } }');
    expect(ok.data?.createSite).toEqual({ bmcNetworks: ['10.9.0.0/16'] });
    const bad = await gql(t.url, admin, 'mutation { createSite(input: {name: "bmcnet-3", bmcNetworks: ["10.9.0.0"]}) { id } }');
    expect(bad.errors?.[0]?.extensions).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'input.bmcNetworks[0]' } });
    expect(await t.app.database.prisma.site.count({ where: { name: 'bmcnet-3' } })).toBe(0);
  });
});

describe('issue 21 item 7: the test suite itself reaches only loopback', () => {
  it('every service a test starts (in process or spawned with this environment) refuses a BMC outside 127.0.0.0/8 at enroll', async () => {
    expect(process.env.BMC_NETWORKS).toBe('127.0.0.0/8');
    expect(loadConfig().bmcNetworks).toEqual(['127.0.0.0/8']);
    const t = await startTestApp({ role: 'api' });
    try {
      expect(t.app.config.bmcNetworks).toEqual(['127.0.0.0/8']);
      const tree = await makeTenantTree(t.app.database.prisma, 'loopback-only', { pools: 1, nodesPerPool: 0 });
      const enroll = (address: string) => rest(t.url, t.adminToken, 'POST', '/api/compute/metal/enroll', {
        poolId: tree.pools[0]!.id, bmc: { address, driver: 'redfish', credentials: 'secret://x' },
      });
      for (const stray of ['10.20.0.5', '192.168.1.10', 'https://172.16.0.1/', '[fd00::5]:443', 'bmc.example.net']) {
        expect([stray, (await enroll(stray)).status]).toEqual([stray, 400]);
      }
      expect((await enroll('127.3.0.1')).status).toBe(200);
    } finally {
      await t.stop();
    }
  });
});
