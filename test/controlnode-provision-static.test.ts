/**
 * provision with prefix_id (issue 11 item 3: "static addressing from the IPAM fields"): the OS's
 * static IPv4 address comes from that NetBox prefix, allocated by NetBox itself (POST
 * ipam/prefixes/{id}/available-ips/) against the NetBox API fixture, and the job's ISO carries it
 * in its preseed (address, netmask, gateway, nameservers). An address NetBox already holds for
 * the host name in that prefix is kept; a full prefix, an unknown one, an allocation on the
 * gateway and a NetBox that is unreachable or not configured are each refused, naming prefix_id,
 * with nothing written and nothing left allocated.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTestApp, capturingLogger, type TestApp } from './helpers/app';
import { rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { bmcCertificates } from './helpers/tls';
import { playInstall, readInstallerJob, readyNodes, type InstallerJob } from './helpers/installer';
import { startRedfishSim, type RedfishSim, type SimMachine } from './sim/redfish/server';
import { startNetboxSim, type NetboxSim } from './sim/netbox/server';
import { newId } from '../src/ids';

jest.setTimeout(120_000);

const BMC_PASSWORD = 'Bmc-St4tic-Pa55';
const OS_PASSWORD = 'Os-St4tic-Pa55';
const ipOf = (i: number) => `127.78.6.${i + 1}`;

let t: TestApp;
let sim: RedfishSim;
let nb: NetboxSim;
let dir: string;
let token: string;
const lines: string[] = [];
const nodeOf = new Map<string, string>();
const installs: Promise<void>[] = [];
const jobs = new Map<string, InstallerJob>();
let prefix: { id: number };

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cn-static-'));
  const certs = bmcCertificates(dir, [ipOf(0), ipOf(1), ipOf(2), ipOf(3)]);
  nb = await startNetboxSim({ version: '4.6' });
  prefix = nb.addPrefix({ prefix: '10.40.7.0/24', customFields: { gateway: '10.40.7.1/24', dns_servers: '10.40.0.53, 10.40.0.54' } });
  // The gateway's own address is recorded, as a site's IPAM does: NetBox hands out the next one.
  nb.addIpAddress({ address: '10.40.7.1/24', description: 'gateway' });
  // The machine NetBox names (issue 21 item 15: a provision without hostname takes the device's name).
  nb.addDevice({ name: 'cn-r14-02', serial: 'NB-SERIAL-1', bmcIp: `${ipOf(3)}/24` });
  sim = await startRedfishSim({
    machines: [
      { id: 'one', flavour: 'supermicro', listen: { host: ipOf(0), port: 443 }, password: BMC_PASSWORD },
      { id: 'two', flavour: 'supermicro', listen: { host: ipOf(1), port: 443 }, password: BMC_PASSWORD },
      { id: 'refused', flavour: 'supermicro', listen: { host: ipOf(2), port: 443 }, password: BMC_PASSWORD },
      { id: 'named', flavour: 'supermicro', listen: { host: ipOf(3), port: 443 }, password: BMC_PASSWORD },
    ],
    tls: { key: certs.key, cert: certs.cert },
    onBoot: (machine, boot) => {
      if (boot.target !== 'Cd' || !boot.image) return;
      installs.push((async () => {
        const job = await readInstallerJob(boot.image!, dir, [OS_PASSWORD, BMC_PASSWORD]);
        jobs.set(machine.id, job);
        const address = /netcfg\/get_ipaddress string (\S+)/.exec(job.preseed)?.[1] ?? '0.0.0.0';
        await playInstall(job, address, 'Os-Rep0rted-St4tic');
      })());
    },
  });
  t = await startTestApp({ agentPollMs: 200, isoDir: path.join(dir, 'iso'), netboxUrl: nb.url, netboxToken: nb.v2Token, netboxTimeoutMs: 1500, netboxCacheMs: 0 }, { log: capturingLogger(lines) });
  t.app.services.config.publicUrl = t.url;
  const tree = await makeTenantTree(t.app.services.prisma, 'cnst', { pools: 1, nodesPerPool: 0 });
  token = await makeToken(t.app.services.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  for (const [id, nodeId] of await readyNodes(t.app.services, { tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id }, sim.machines, { driver: 'supermicro', caCert: certs.ca })) nodeOf.set(id, nodeId);
});
afterAll(async () => {
  await Promise.allSettled(installs);
  await t?.stop();
  await sim?.stop();
  await nb?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const body = (m: SimMachine, over: Record<string, unknown> = {}) => ({
  bmc_IP: new URL(m.url).hostname, vendor: 'supermicro', hostname: `cn-${m.id}`, os_username: 'ops', os_password: OS_PASSWORD,
  selected_disks: ['nvme0n1'], pool_type: 'single', selected_nic_mac: m.state().macs[0], prefix_id: prefix.id, ...over,
});
const machine = (id: string) => sim.machines.find((x) => x.id === id)!;
const nbAddresses = async () => {
  const r = await fetch(`${nb.url}/api/ipam/ip-addresses/?parent=10.40.7.0/24&limit=1000`, { headers: { authorization: `Bearer ${nb.v2Token}`, accept: 'application/json' } });
  return ((await r.json()) as { results: { id: number; address: string; dns_name: string; status: { value: string }; description: string }[] }).results;
};
const allocateDirectly = async (prefixId: number, fields: Record<string, unknown>) => {
  const r = await fetch(`${nb.url}/api/ipam/prefixes/${prefixId}/available-ips/`, {
    method: 'POST', headers: { authorization: `Bearer ${nb.v2Token}`, 'content-type': 'application/json', accept: 'application/json' }, body: JSON.stringify(fields),
  });
  expect(r.status).toBe(201);
  return (await r.json()) as { id: number; address: string };
};
async function settled(nodeId: string): Promise<Record<string, unknown>> {
  for (let i = 0; i < 600; i += 1) {
    const row = (await t.app.services.sql.query('SELECT provision_state, addresses, last_error_code FROM node WHERE id = $1', [nodeId])).rows[0]!;
    if (row.provision_state !== 'deploying') return row;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`node ${nodeId} still deploying`);
}
const runsOf = async (id: string) => Number((await t.app.services.sql.query('SELECT count(*) FROM workflow_run WHERE node_id = $1', [nodeOf.get(id)])).rows[0]!.count);

describe('provision with prefix_id: a static address from NetBox', () => {
  it('allocates the next free address of the prefix in NetBox, puts it in the ISO\'s preseed with the prefix\'s gateway and nameservers, and the node ends deployed with it', async () => {
    const r = await rest(t.url, token, 'POST', '/controlnode/provision', body(machine('one')));
    expect(r.status).toBe(200);
    expect(r.body.message).toMatch(/OS address 10\.40\.7\.2\/24 from NetBox's prefix 10\.40\.7\.0\/24, gateway 10\.40\.7\.1/);
    const held = (await nbAddresses()).filter((a) => a.dns_name === 'cn-one');
    expect(held).toEqual([expect.objectContaining({ address: '10.40.7.2/24', status: expect.objectContaining({ value: 'active' }), description: `control node cn-one (metal job ${r.body.job_id})` })]);
    const post = nb.requests.filter((q) => q.method === 'POST');
    expect(post).toHaveLength(1);
    expect(post[0]!.path).toBe(`/api/ipam/prefixes/${prefix.id}/available-ips/`);
    expect(await settled(nodeOf.get('one')!)).toMatchObject({ provision_state: 'deployed', addresses: ['10.40.7.2'] });
    const preseed = jobs.get('one')!.preseed;
    for (const line of ['netcfg/disable_autoconfig boolean true', 'netcfg/get_ipaddress string 10.40.7.2', 'netcfg/get_netmask string 255.255.255.0', 'netcfg/get_gateway string 10.40.7.1', 'netcfg/get_nameservers string 10.40.0.53 10.40.0.54']) {
      expect(preseed).toContain(line);
    }
    const params = (await t.app.services.sql.query('SELECT params FROM workflow_run WHERE id = $1', [r.body.job_id])).rows[0]!.params;
    expect(params).toMatchObject({ prefixId: prefix.id, netboxIpId: held[0]!.id, network: { mode: 'static', address: '10.40.7.2', prefixLength: 24, gateway: '10.40.7.1' } });
  });

  it('keeps the address NetBox already holds for the host name in the prefix (a retried job): nothing is allocated', async () => {
    const earlier = await allocateDirectly(prefix.id, { dns_name: 'cn-two', status: 'active', description: 'an earlier attempt' });
    const posts = nb.requests.filter((q) => q.method === 'POST').length;
    const r = await rest(t.url, token, 'POST', '/controlnode/provision', body(machine('two')));
    expect(r.status).toBe(200);
    expect(r.body.message).toContain(`OS address ${earlier.address.split('/')[0]}/24`);
    expect(r.body.message).toMatch(/the one it already holds for this host name/);
    expect(nb.requests.filter((q) => q.method === 'POST').length).toBe(posts);
    expect(await settled(nodeOf.get('two')!)).toMatchObject({ provision_state: 'deployed', addresses: [earlier.address.split('/')[0]] });
  });

  it('refuses, naming prefix_id, writing nothing and leaving nothing allocated: an unknown prefix, a full one, an allocation on the gateway, NetBox unreachable or not configured', async () => {
    const m = machine('refused');
    const before = await runsOf('refused');
    const unknown = await rest(t.url, token, 'POST', '/controlnode/provision', body(m, { prefix_id: 987654 }));
    expect([unknown.status, unknown.body.error.code, unknown.body.error.details?.field]).toEqual([400, 'INVALID_INPUT', 'body.prefix_id']);

    const full = nb.addPrefix({ prefix: '10.40.8.0/30', customFields: { gateway: '10.40.8.1' } });
    await allocateDirectly(full.id, { dns_name: 'gw' });
    await allocateDirectly(full.id, { dns_name: 'other' });
    const exhausted = await rest(t.url, token, 'POST', '/controlnode/provision', body(m, { prefix_id: full.id }));
    expect([exhausted.status, exhausted.body.error.code]).toEqual([409, 'CONFLICT']);
    expect(exhausted.body.error.message).toMatch(/no address left/);

    // No gateway custom field, and its first host free: NetBox hands out the gateway's address.
    const bare = nb.addPrefix({ prefix: '10.40.9.0/24' });
    const deletes = nb.requests.filter((q) => q.method === 'DELETE').length;
    const onGateway = await rest(t.url, token, 'POST', '/controlnode/provision', body(m, { prefix_id: bare.id }));
    expect([onGateway.status, onGateway.body.error.code]).toEqual([422, 'INVALID_CONFIG']);
    expect(onGateway.body.error.message).toMatch(/gave out 10\.40\.9\.1, its gateway/);
    expect(nb.requests.filter((q) => q.method === 'DELETE').length).toBe(deletes + 1);
    const left = await fetch(`${nb.url}/api/ipam/ip-addresses/?parent=10.40.9.0/24`, { headers: { authorization: `Bearer ${nb.v2Token}`, accept: 'application/json' } });
    expect(((await left.json()) as { results: unknown[] }).results).toEqual([]);

    const config = t.app.services.config;
    const url = config.netboxUrl;
    config.netboxUrl = 'http://127.0.0.1:9';
    (t.app.services.inventory as unknown as { client: unknown }).client = null;
    try {
      const down = await rest(t.url, token, 'POST', '/controlnode/provision', body(m));
      expect([down.status, down.body.error.code]).toEqual([502, 'UPSTREAM_UNAVAILABLE']);
      config.netboxUrl = undefined;
      const none = await rest(t.url, token, 'POST', '/controlnode/provision', body(m));
      expect([none.status, none.body.error.code]).toEqual([422, 'INVALID_CONFIG']);
      expect(none.body.error.message).toMatch(/^body\.prefix_id: the static address comes from NetBox, which is not configured/);
    } finally {
      config.netboxUrl = url;
      (t.app.services.inventory as unknown as { client: unknown }).client = null;
    }
    // None of it wrote a run, changed the node or kept an OS password.
    expect(await runsOf('refused')).toBe(before);
    expect((await t.app.services.sql.query('SELECT provision_state FROM node WHERE id = $1', [nodeOf.get('refused')])).rows[0]!.provision_state).toBe('ready');
    expect(lines.join('\n')).not.toMatch(new RegExp(`${OS_PASSWORD}|${BMC_PASSWORD}|${nb.v2Token.split('.')[1]}`));
  });
});

describe('provision without hostname', () => {
  it('names the system as NetBox names the BMC\'s device: the address is allocated under that name, the ISO carries it, the job\'s metadata says it came from NetBox', async () => {
    const r = await rest(t.url, token, 'POST', '/controlnode/provision', body(machine('named'), { hostname: undefined }));
    expect(r.status).toBe(200);
    const held = (await nbAddresses()).filter((a) => a.dns_name === 'cn-r14-02');
    expect(held).toHaveLength(1);
    const view = (await rest(t.url, token, 'GET', `/controlnode/job/${r.body.job_id}`)).body;
    expect(view.resource_name).toBe('cn-r14-02');
    expect(JSON.parse(view.metadata)).toMatchObject({ hostname: 'cn-r14-02', hostnameSource: 'netbox' });
    expect(await settled(nodeOf.get('named')!)).toMatchObject({ provision_state: 'deployed', addresses: [held[0]!.address.split('/')[0]] });
    expect(jobs.get('named')!.preseed).toMatch(/netcfg\/get_hostname string cn-r14-02\n/);
  });
});
