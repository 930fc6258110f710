/**
 * The NetBox API server fixture (test/sim/netbox) over real HTTP: the shapes the NetBox client
 * (clients/netbox) will be tested against, so each one the client relies on is pinned here: the list
 * envelope and both paginations, the ip -> interface -> device walk, module type profiles by version,
 * the token schemes and NetBox's refusals, and the faults.
 */
import http from 'node:http';
import { canConnect } from './helpers/client';
import { startNetboxSim, type NetboxDeviceFixture, type NetboxSim, type NetboxVersion } from './sim/netbox/server';

type Json = Record<string, any>;
interface Call { status: number; headers: http.IncomingHttpHeaders; body: any; text: string; ms: number }

/** GET through node:http, so the Host and X-Forwarded-* headers are the test's to set. */
function get(url: string, init: { auth?: string | null; headers?: Record<string, string>; method?: string; timeoutMs?: number } = {}): Promise<Call> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { Accept: 'application/json', ...init.headers };
    if (init.auth) headers.Authorization = init.auth;
    const req = http.request(url, { method: init.method ?? 'GET', headers, timeout: init.timeoutMs ?? 5000 }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => { text += d; });
      res.on('end', () => {
        const json = (res.headers['content-type'] ?? '').startsWith('application/json');
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, body: json && text ? JSON.parse(text) : null, ms: Date.now() - t0 });
      });
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}


const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Eight interfaces whose natural order (eth1, eth2, eth10, ...) is not their id order. */
const NODE: NetboxDeviceFixture = {
  name: 'node-a01',
  serial: 'CZ2345ABCD',
  bmcIp: '10.1.2.3/24',
  interfaces: [
    { name: 'eth10', type: '25gbase-x-sfp28', mac: 'b8:3f:d2:00:00:10', speedKbps: 25_000_000 },
    { name: 'eth2', type: '25gbase-x-sfp28', mac: 'b8-3f-d2-00-00-02', speedKbps: 25_000_000 },
    { name: 'eth1', type: '25gbase-x-sfp28', mac: 'b83f.d200.0001', speedKbps: 25_000_000, label: 'uplink' },
    { name: 'eno1', type: '1000base-t', mac: null },
    { name: 'eno2', type: '1000base-t', enabled: false },
    { name: 'ib0', type: 'infiniband-ndr' },
    { name: 'bond0', type: 'lag' },
  ],
  inventoryItems: [
    { name: 'Disk 1', role: 'Disk', manufacturer: 'Samsung', partId: 'MZ7L3960HCJR', serial: 'S6NNNE0T123456' },
    { name: 'Disk 0', role: 'Disk', manufacturer: 'Samsung', partId: 'MZ7L3960HCJR', serial: 'S6NNNE0T123455' },
    { name: 'DIMM A1' },
  ],
  modules: [
    { bay: 'NVMe 0', manufacturer: 'Intel', model: 'SSDPF2KX038T1', profile: 'Hard disk', attributes: { size: 3840, type: 'NVME' }, serial: 'PHAX1234000A3P8CGN' },
    { bay: 'PCIe 1', manufacturer: 'NVIDIA', model: 'H100 PCIe', profile: 'GPU', attributes: { memory: 80, interface: 'PCIe 5.0 x16', gpu: 'GH100' }, serial: '1650123456789' },
  ],
};

async function withSim<T>(opts: Parameters<typeof startNetboxSim>[0], fn: (sim: NetboxSim) => Promise<T>): Promise<T> {
  const sim = await startNetboxSim(opts);
  try { return await fn(sim); } finally { await sim.stop(); }
}

describe('pagination', () => {
  let sim: NetboxSim;
  let device: number;
  beforeAll(async () => {
    sim = await startNetboxSim({ version: '4.6' });
    device = sim.addDevice(NODE);
    sim.addDevice({ name: 'node-a02', bmcIp: '10.1.2.4/24', interfaces: [{ name: 'eth0' }] });
  });
  afterAll(() => sim.stop());
  const auth = () => `Token ${sim.v1Token}`;

  it('offset pages: count set, absolute next/previous from the Host, every interface once, next null at the end', async () => {
    const seen: number[] = [];
    const names: string[] = [];
    let url: string | null = `${sim.url}/api/dcim/interfaces/?device_id=${device}&limit=3`;
    let pages = 0;
    while (url) {
      const r = await get(url, { auth: auth() });
      expect(r.status).toBe(200);
      expect(r.headers['api-version']).toBe('4.6');
      expect(Object.keys(r.body)).toEqual(['count', 'next', 'previous', 'results']);
      expect(r.body.count).toBe(8); // seven plus the bmc interface
      if (r.body.next) expect(r.body.next.startsWith(`${sim.url}/api/dcim/interfaces/?`)).toBe(true);
      if (pages === 0) expect(r.body.previous).toBeNull();
      else expect(r.body.previous).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/api\/dcim\/interfaces\/\?/);
      for (const i of r.body.results) { seen.push(i.id); names.push(i.name); }
      url = r.body.next;
      pages++;
    }
    expect(pages).toBe(3);
    expect(new Set(seen).size).toBe(8);
    expect(seen.length).toBe(8);
    // Meta.ordering (device, natural name), not id order.
    expect(names).toEqual(['bmc', 'bond0', 'eno1', 'eno2', 'eth1', 'eth2', 'eth10', 'ib0']);
  });

  it('next is rebuilt as DRF does: keys sorted, Python-encoded, and from X-Forwarded-Host/-Proto', async () => {
    const r = await get(`${sim.url}/api/dcim/interfaces/?limit=2&device_id=${device}&offset=2`, {
      auth: auth(), headers: { 'X-Forwarded-Host': 'netbox.example.com', 'X-Forwarded-Proto': 'https' },
    });
    expect(r.body.next).toBe(`https://netbox.example.com/api/dcim/interfaces/?device_id=${device}&limit=2&offset=4`);
    expect(r.body.previous).toBe(`https://netbox.example.com/api/dcim/interfaces/?device_id=${device}&limit=2`);
    expect(r.body.results[0].url).toMatch(/^https:\/\/netbox\.example\.com\/api\/dcim\/interfaces\/\d+\/$/);
    const ip = await get(`${sim.url}/api/ipam/ip-addresses/?address=10.1.2.3/24&limit=1`, { auth: auth() });
    expect(ip.body.next).toBeNull();
    const all = await get(`${sim.url}/api/dcim/interfaces/?limit=1&mgmt_only=false`, { auth: auth(), headers: { Host: 'nb.lab:8080' } });
    expect(all.body.next).toBe('http://nb.lab:8080/api/dcim/interfaces/?limit=1&mgmt_only=false&offset=1');
  });

  it('cursor pages (4.6 start=): count null, previous null, pk order, next carries start=, a full last page is followed by an empty one', async () => {
    const seen: number[] = [];
    const sizes: number[] = [];
    let url: string | null = `${sim.url}/api/dcim/interfaces/?device_id=${device}&start=0&limit=4`;
    while (url) {
      const r = await get(url, { auth: auth() });
      expect(r.status).toBe(200);
      expect(r.body.count).toBeNull();
      expect(r.body.previous).toBeNull();
      if (r.body.next) {
        const next = new URL(r.body.next);
        expect(next.searchParams.get('start')).toBe(String(r.body.results.at(-1).id + 1));
        expect(next.searchParams.has('offset')).toBe(false);
      }
      sizes.push(r.body.results.length);
      seen.push(...r.body.results.map((i: Json) => i.id));
      url = r.body.next;
    }
    expect(sizes).toEqual([4, 4, 0]);
    expect(seen).toEqual([...seen].sort((a, b) => a - b));
    expect(new Set(seen).size).toBe(8);
  });

  it('start with offset (or ordering), or a bad start, is the 400 NetBox gives; before 4.6 start is ignored', async () => {
    const both = await get(`${sim.url}/api/dcim/interfaces/?start=1&offset=0`, { auth: auth() });
    expect(both.status).toBe(400);
    expect(both.body).toEqual(["'start' and 'offset' are mutually exclusive."]);
    const ordered = await get(`${sim.url}/api/dcim/interfaces/?start=1&ordering=name`, { auth: auth() });
    expect(ordered.body).toEqual(['Ordering cannot be specified in conjunction with cursor-based pagination.']);
    const bad = await get(`${sim.url}/api/dcim/interfaces/?start=-1`, { auth: auth() });
    expect(bad.status).toBe(400);
    expect(bad.body).toEqual(["Invalid 'start' parameter: must be a non-negative integer."]);
    await withSim({ version: '4.5', devices: [NODE] }, async (old) => {
      const r = await get(`${old.url}/api/dcim/interfaces/?start=5&limit=3`, { auth: `Token ${old.v1Token}` });
      expect(r.status).toBe(200);
      expect(r.body.count).toBe(8);
      expect(r.body.next).toContain('offset=3');
    });
  });

  it('limit=0 is MAX_PAGE_SIZE, above it is capped, unknown parameters are ignored, a bad known filter is a 400', async () => {
    await withSim({ pageSize: 2, maxPageSize: 5, devices: [NODE] }, async (s) => {
      const a = `Token ${s.v1Token}`;
      expect((await get(`${s.url}/api/dcim/interfaces/`, { auth: a })).body.results).toHaveLength(2);
      expect((await get(`${s.url}/api/dcim/interfaces/?limit=0`, { auth: a })).body.results).toHaveLength(5);
      const capped = await get(`${s.url}/api/dcim/interfaces/?limit=100&no_such_filter=1`, { auth: a });
      expect(capped.body.results).toHaveLength(5);
      expect(capped.body.count).toBe(8);
      expect(capped.body.next).toBe(`${s.url}/api/dcim/interfaces/?limit=5&no_such_filter=1&offset=5`);
      const items = await get(`${s.url}/api/dcim/inventory-items/?device_id=999`, { auth: a });
      expect(items.status).toBe(400);
      expect(items.body).toEqual({ device_id: ['Select a valid choice. 999 is not one of the available choices.'] });
      const ifaces = await get(`${s.url}/api/dcim/interfaces/?device_id=999`, { auth: a });
      expect(ifaces.body).toMatchObject({ count: 0, results: [] });
      expect((await get(`${s.url}/api/dcim/interfaces/?device_id=abc`, { auth: a })).body).toEqual({ device_id: ['Enter a number.'] });
    });
  });
});

describe('shapes', () => {
  let sim: NetboxSim;
  let device: number;
  beforeAll(async () => {
    sim = await startNetboxSim({ version: '4.6' });
    device = sim.addDevice({ ...NODE, id: 4242 });
  });
  afterAll(() => sim.stop());
  const auth = () => `Bearer ${sim.v2Token}`;

  it('ip-address lookup by host (with or without /len) -> assigned interface -> device with the ip as oob_ip', async () => {
    const host = await get(`${sim.url}/api/ipam/ip-addresses/?address=10.1.2.3`, { auth: auth() });
    expect(host.body.count).toBe(1);
    const withLen = await get(`${sim.url}/api/ipam/ip-addresses/?address=10.1.2.3%2F24`, { auth: auth() });
    expect(withLen.body.results.map((x: Json) => x.id)).toEqual(host.body.results.map((x: Json) => x.id));
    expect((await get(`${sim.url}/api/ipam/ip-addresses/?address=10.1.2.3/32`, { auth: auth() })).body.count).toBe(0);
    const ip = host.body.results[0];
    expect(ip).toMatchObject({
      address: '10.1.2.3/24', display: '10.1.2.3/24', family: { value: 4, label: 'IPv4' }, status: { value: 'active', label: 'Active' },
      assigned_object_type: 'dcim.interface', tags: [], custom_fields: {}, owner: null,
    });
    expect(ip.display_url).toBe(`${sim.url}/ipam/ip-addresses/${ip.id}/`);
    expect(ip.created).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    expect(Object.keys(ip.assigned_object)).toEqual(['id', 'url', 'display', 'device', 'name', 'description', 'cable', '_occupied']);
    expect(ip.assigned_object.id).toBe(ip.assigned_object_id);
    expect(ip.assigned_object.device).toEqual({ id: device, url: `${sim.url}/api/dcim/devices/${device}/`, display: 'node-a01', name: 'node-a01', description: '' });

    const iface = await get(ip.assigned_object.url, { auth: auth() });
    expect(iface.body).toMatchObject({ name: 'bmc', mgmt_only: true, type: { value: '1000base-t', label: '1000BASE-T (1GE)' }, count_ipaddresses: 1 });
    expect(iface.headers.etag).toBe(`"${iface.body.last_updated.replace('Z', '+00:00')}"`);
    const dev = await get(ip.assigned_object.device.url, { auth: auth() });
    expect(dev.status).toBe(200);
    expect(dev.body).toMatchObject({ id: device, name: 'node-a01', serial: 'CZ2345ABCD', status: { value: 'active', label: 'Active' }, asset_tag: null, interface_count: 8, inventory_item_count: 3, module_bay_count: 2 });
    expect(dev.body.oob_ip).toEqual({
      id: ip.id, url: ip.url, display: '10.1.2.3/24', family: { value: 4, label: 'IPv4' }, address: '10.1.2.3/24',
      nat_inside: null, nat_outside: [], dns_name: '', description: '',
    });
    expect(dev.body.device_type).toMatchObject({ model: 'PowerEdge R760', manufacturer: { name: 'Dell', slug: 'dell' } });
    expect(dev.body.site).toMatchObject({ name: 'DC1', slug: 'dc1' });

    const missing = await get(`${sim.url}/api/dcim/devices/99999/`, { auth: auth() });
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ detail: 'No Device matches the given query.' });
  });

  it('interfaces: MACs as objects (upper case), primary_mac_address and mac_addresses, display with the label', async () => {
    const r = await get(`${sim.url}/api/dcim/interfaces/?device_id=${device}&name=eth1`, { auth: auth() });
    const eth1 = r.body.results[0];
    expect(eth1).toMatchObject({
      name: 'eth1', label: 'uplink', display: 'eth1 (uplink)', enabled: true, mgmt_only: false, speed: 25_000_000, mtu: null,
      type: { value: '25gbase-x-sfp28', label: 'SFP28 (25GE)' }, mac_address: 'B8:3F:D2:00:00:01',
    });
    expect(eth1.primary_mac_address).toEqual({ id: eth1.primary_mac_address.id, url: `${sim.url}/api/dcim/mac-addresses/${eth1.primary_mac_address.id}/`, display: 'B8:3F:D2:00:00:01', mac_address: 'B8:3F:D2:00:00:01', description: '' });
    expect(eth1.mac_addresses).toEqual([eth1.primary_mac_address]);
    const eno1 = (await get(`${sim.url}/api/dcim/interfaces/?device_id=${device}&name=eno1`, { auth: auth() })).body.results[0];
    expect(eno1).toMatchObject({ mac_address: null, primary_mac_address: null, mac_addresses: [] });
  });

  it('inventory items: role and manufacturer nested, status, component fields, _depth', async () => {
    const r = await get(`${sim.url}/api/dcim/inventory-items/?device_id=${device}`, { auth: auth() });
    expect(r.body.results.map((i: Json) => i.name)).toEqual(['DIMM A1', 'Disk 0', 'Disk 1']);
    const disk = r.body.results[1];
    expect(disk).toMatchObject({
      name: 'Disk 0', status: { value: 'active', label: 'Active' }, part_id: 'MZ7L3960HCJR', serial: 'S6NNNE0T123455', asset_tag: null,
      discovered: false, component_type: null, component_id: null, component: null, parent: null, _depth: 0,
    });
    expect(Object.keys(disk.role)).toEqual(['id', 'url', 'display', 'name', 'slug', 'description']);
    expect(disk.role).toMatchObject({ name: 'Disk', slug: 'disk' });
    expect(disk.manufacturer).toMatchObject({ name: 'Samsung', slug: 'samsung' });
    expect(r.body.results[0]).toMatchObject({ role: null, manufacturer: null });
  });
});

describe('module type profiles by version', () => {
  async function modules(version: NetboxVersion) {
    return withSim({ version, devices: [NODE] }, async (sim) => {
      const a = `Token ${sim.v1Token}`;
      const list = await get(`${sim.url}/api/dcim/modules/?device_id=1`, { auth: a });
      const types = await Promise.all(list.body.results.map((m: Json) => get(m.module_type.url, { auth: a })));
      const profiles = await get(`${sim.url}/api/dcim/module-type-profiles/`, { auth: a });
      return { list: list.body, types: types.map((t) => t.body), profiles };
    });
  }

  it('4.6: the nested module type carries its profile; the module type its profile and attributes', async () => {
    const { list, types, profiles } = await modules('4.6');
    const disk = list.results[0];
    expect(disk).toMatchObject({ display: `NVMe 0: SSDPF2KX038T1 (${disk.id})`, status: { value: 'active', label: 'Active' }, serial: 'PHAX1234000A3P8CGN', asset_tag: null });
    expect(Object.keys(disk.module_bay)).toEqual(['id', 'url', 'display_url', 'display', 'name']);
    expect(Object.keys(disk.module_type)).toEqual(['id', 'url', 'display', 'profile', 'manufacturer', 'model', 'description', 'module_count']);
    expect(disk.module_type.profile).toEqual({ id: 4, url: expect.stringMatching(/\/api\/dcim\/module-type-profiles\/4\/$/), display: 'Hard disk', name: 'Hard disk', description: '' });
    expect(disk.module_type.manufacturer).toMatchObject({ name: 'Intel', slug: 'intel' });
    expect(types[0]).toMatchObject({ model: 'SSDPF2KX038T1', attributes: { size: 3840, type: 'NVME' }, profile: { name: 'Hard disk' }, module_count: 1 });
    expect(types[1]).toMatchObject({ model: 'H100 PCIe', attributes: { memory: 80, interface: 'PCIe 5.0 x16', gpu: 'GH100' }, profile: { id: 3, name: 'GPU' } });
    const hd = profiles.body.results.find((p: Json) => p.name === 'Hard disk');
    expect(Object.keys(hd.schema.properties).sort()).toEqual(['size', 'speed', 'type']);
    expect(hd.schema.required).toEqual(['size']);
  });

  it('4.3 has profiles without the 4.5 counters; 4.2 has neither profile nor attributes nor the profiles endpoint', async () => {
    const v43 = await modules('4.3');
    expect(Object.keys(v43.list.results[0].module_type)).toEqual(['id', 'url', 'display', 'profile', 'manufacturer', 'model', 'description']);
    expect(v43.types[0].attributes).toEqual({ size: 3840, type: 'NVME' });
    expect(v43.types[0]).not.toHaveProperty('owner');
    const v42 = await modules('4.2');
    expect(Object.keys(v42.list.results[0].module_type)).toEqual(['id', 'url', 'display', 'manufacturer', 'model', 'description']);
    expect(v42.types[0]).not.toHaveProperty('profile');
    expect(v42.types[0]).not.toHaveProperty('attributes');
    expect(v42.profiles.status).toBe(404);
    expect(v42.profiles.headers['content-type']).toMatch(/^text\/html/);
  });

  it('a fixture whose attributes break the shipped schema is refused, as ModuleType.clean() would', async () => {
    await withSim({}, async (sim) => {
      expect(() => sim.addDevice({ name: 'x', bmcIp: '10.9.9.9/24', modules: [{ bay: 'd0', manufacturer: 'Intel', model: 'D7', profile: 'Hard disk', attributes: { type: 'SSD' } }] }))
        .toThrow(/size is required/);
    });
  });
});

describe('authentication', () => {
  it('4.6: v1 and v2 tokens accepted; missing, unknown and expired ones refused with NetBox\'s 403 bodies', async () => {
    await withSim({ version: '4.6', devices: [NODE] }, async (sim) => {
      const path = `${sim.url}/api/dcim/devices/`;
      expect((await get(path, { auth: `Token ${sim.v1Token}` })).status).toBe(200);
      expect((await get(path, { auth: `Bearer ${sim.v2Token}` })).status).toBe(200);
      // Either keyword takes either version: NetBox looks at the nbt_ prefix only.
      expect((await get(path, { auth: `Bearer ${sim.v1Token}` })).status).toBe(200);
      expect((await get(path, { auth: `token ${sim.v2Token}` })).status).toBe(200);
      const cases: [string | null, string][] = [
        [null, 'Authentication credentials were not provided.'],
        [`Token ${'0'.repeat(40)}`, 'Invalid v1 token'],
        [`Bearer ${sim.v2Token}x`, 'Invalid v2 token'],
        [`Bearer ${'f'.repeat(40)}`, 'Invalid v1 token'], // the version is told by the nbt_ prefix, not by the keyword
        ['Bearer nbt_nodot', "Invalid authorization header: Could not parse key from v2 token. Did you mean to use 'Token' instead of 'Bearer'?"],
        [`Token ${sim.v1Token} extra`, 'Invalid authorization header: Must be in the form "Bearer <key>.<token>" or "Token <token>"'],
        [`Token ${sim.expiredV1Token}`, 'Token expired'],
        [`Bearer ${sim.expiredV2Token}`, 'Token expired'],
      ];
      for (const [header, detail] of cases) {
        const r = await get(path, { auth: header });
        expect({ header, status: r.status, body: r.body }).toEqual({ header, status: 403, body: { detail } });
        expect(r.headers['api-version']).toBe('4.6');
      }
      const status = await get(`${sim.url}/api/status/`, { auth: `Bearer ${sim.v2Token}` });
      expect(status.body).toMatchObject({ 'netbox-version': '4.6.9', 'rq-workers-running': 1, installed_apps: expect.any(Object) });
      const post = await get(path, { auth: `Bearer ${sim.v2Token}`, method: 'POST' });
      expect(post).toMatchObject({ status: 405, body: { detail: 'Method "POST" not allowed.' } });
    });
  });

  it('4.3: a v2 Bearer token is not a scheme NetBox knows (anonymous), v1 failures say "Invalid token"', async () => {
    await withSim({ version: '4.3', devices: [NODE] }, async (sim) => {
      const path = `${sim.url}/api/dcim/devices/`;
      const ok = await get(path, { auth: `Token ${sim.v1Token}` });
      expect(ok.status).toBe(200);
      expect(ok.headers['api-version']).toBe('4.3');
      expect(await get(path, { auth: `Bearer ${sim.v2Token}` })).toMatchObject({ status: 403, body: { detail: 'Authentication credentials were not provided.' } });
      expect(await get(path, { auth: `Token ${sim.v2Token}` })).toMatchObject({ status: 403, body: { detail: 'Invalid token' } });
      expect(await get(path, { auth: `Token ${sim.expiredV1Token}` })).toMatchObject({ status: 403, body: { detail: 'Token expired' } });
      expect(await get(path, { auth: 'Token' })).toMatchObject({ status: 403, body: { detail: 'Invalid token header. No credentials provided.' } });
      expect((await get(`${sim.url}/api/status/`, { auth: `Token ${sim.v1Token}` })).body).toHaveProperty('installed-apps');
    });
  });

  it('LOGIN_REQUIRED=False: anonymous reads pass, a bad token is still refused', async () => {
    await withSim({ loginRequired: false, devices: [NODE] }, async (sim) => {
      expect((await get(`${sim.url}/api/dcim/devices/`)).status).toBe(200);
      expect(await get(`${sim.url}/api/dcim/devices/`, { auth: 'Token nope' })).toMatchObject({ status: 403, body: { detail: 'Invalid v1 token' } });
    });
  });
});

describe('faults', () => {
  it('slow delays only the matched page', async () => {
    await withSim({ devices: [NODE] }, async (sim) => {
      const a = `Token ${sim.v1Token}`;
      sim.setFaults({ slow: [{ match: /offset=3(&|$)/, delayMs: 1500 }] });
      const first = await get(`${sim.url}/api/dcim/interfaces/?limit=3`, { auth: a });
      const slow = await get(first.body.next, { auth: a });
      const last = await get(slow.body.next, { auth: a });
      expect(slow.ms).toBeGreaterThanOrEqual(1450);
      expect(first.ms).toBeLessThan(1000); // a second of slack for a loaded machine
      expect(last.ms).toBeLessThan(1000);
      expect(sim.requests.map((r) => r.path)).toEqual(['/api/dcim/interfaces/?limit=3', '/api/dcim/interfaces/?limit=3&offset=3', '/api/dcim/interfaces/?limit=3&offset=6']);
      expect(sim.requests[0]!.authorization).toBe(a);
    });
  });

  it('fail500 answers the next matching requests with NetBox\'s REST error body, then recovers', async () => {
    await withSim({ devices: [NODE] }, async (sim) => {
      const a = `Token ${sim.v1Token}`;
      sim.setFaults({ fail500: { count: 1, match: '/api/dcim/modules/' } });
      expect((await get(`${sim.url}/api/dcim/devices/`, { auth: a })).status).toBe(200);
      const failed = await get(`${sim.url}/api/dcim/modules/`, { auth: a });
      expect(failed.status).toBe(500);
      expect(failed.body).toMatchObject({ exception: 'OperationalError', netbox_version: '4.6.9', error: expect.any(String), python_version: expect.any(String) });
      expect((await get(`${sim.url}/api/dcim/modules/`, { auth: a })).status).toBe(200);
    });
  });

  it('hang: a request is never answered, and stop() still leaves nothing listening', async () => {
    const sim = await startNetboxSim({});
    let stopped = false;
    try {
      sim.setFaults({ hang: true });
      await expect(get(`${sim.url}/api/status/`, { timeoutMs: 300 })).rejects.toThrow(/timeout/);
      const pending = get(`${sim.url}/api/status/`, { timeoutMs: 10_000 }).then(() => 'answered', () => 'failed');
      await sleep(50);
      await sim.stop();
      stopped = true;
      expect(await pending).toBe('failed');
    } finally {
      if (!stopped) await sim.stop();
    }
    expect(await canConnect(sim.url)).toBe(false);
  });
});
