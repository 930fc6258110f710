/**
 * The NetBox API server fixture (test/sim/netbox) over real HTTP: the shapes the NetBox client
 * (clients/netbox) will be tested against, so each one the client relies on is pinned here: the list
 * envelope and both paginations, the ip -> interface -> device walk, module type profiles by version,
 * the token schemes and NetBox's refusals, the faults, and IPAM: prefixes, unassigned addresses and
 * their filters, available-ips allocation (and its refusals, per version) and releasing an address.
 */
import http from 'node:http';
import { canConnect } from './helpers/client';
import { startNetboxSim, type NetboxDeviceFixture, type NetboxSim, type NetboxVersion } from './sim/netbox/server';

type Json = Record<string, any>;
interface Call { status: number; headers: http.IncomingHttpHeaders; body: any; text: string; ms: number }

/** GET (or another method, with a body) through node:http, so the Host and X-Forwarded-* headers are the test's to set. */
function get(url: string, init: { auth?: string | null; headers?: Record<string, string>; method?: string; timeoutMs?: number; body?: string } = {}): Promise<Call> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { Accept: 'application/json', ...init.headers };
    if (init.auth) headers.Authorization = init.auth;
    if (init.body !== undefined) headers['Content-Length'] = String(Buffer.byteLength(init.body));
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
    req.end(init.body);
  });
}


const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** POST a JSON body (JSON.stringify'd unless it is a string already). */
const post = (url: string, auth: string | null, body: unknown, headers: Record<string, string> = { 'Content-Type': 'application/json' }) =>
  get(url, { method: 'POST', auth, headers, body: typeof body === 'string' ? body : JSON.stringify(body) });

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

const VERSIONS: NetboxVersion[] = ['4.2', '4.3', '4.5', '4.6'];
/** IPAddressSerializer Meta.fields (owner from 4.5). */
const ipKeys = (v: NetboxVersion) => ['id', 'url', 'display_url', 'display', 'family', 'address', 'vrf', 'tenant', 'status', 'role',
  'assigned_object_type', 'assigned_object_id', 'assigned_object', 'nat_inside', 'nat_outside', 'dns_name', 'description',
  ...(v >= '4.5' ? ['owner'] : []), 'comments', 'tags', 'custom_fields', 'created', 'last_updated'];
const INSUFFICIENT = { detail: 'Insufficient resources are available to satisfy the request' };

describe('IPAM: prefixes', () => {
  it('PrefixSerializer fields per version (scope, owner from 4.5), every ipam.prefix custom field, children/_depth, brief, Meta.ordering', async () => {
    for (const version of VERSIONS) {
      await withSim({ version }, async (sim) => {
        const a = `Token ${sim.v1Token}`;
        const block = sim.addPrefix({ prefix: '10.40.0.0/16', status: 'container', description: 'Site block' });
        const lan = sim.addPrefix({ prefix: '10.40.7.0/24', customFields: { gateway: '10.40.7.1', dns_servers: '10.40.0.53, 10.40.0.54' } });
        const small = sim.addPrefix({ prefix: '10.40.8.5/30', isPool: true, customFields: { gateway: '10.40.8.5' } });
        const list = await get(`${sim.url}/api/ipam/prefixes/`, { auth: a });
        expect(list.status).toBe(200);
        expect(list.body.results.map((p: Json) => p.prefix)).toEqual(['10.40.0.0/16', '10.40.7.0/24', '10.40.8.4/30']); // host bits cleared
        const p = list.body.results[1];
        expect({ version, keys: Object.keys(p) }).toEqual({ version, keys: [
          'id', 'url', 'display_url', 'display', 'family', 'prefix', 'vrf', 'scope_type', 'scope_id', 'scope', 'tenant', 'vlan', 'status',
          'role', 'is_pool', 'mark_utilized', 'description', ...(version >= '4.5' ? ['owner'] : []), 'comments', 'tags', 'custom_fields',
          'created', 'last_updated', 'children', '_depth',
        ] });
        expect(p).toMatchObject({
          id: lan.id, url: `${sim.url}/api/ipam/prefixes/${lan.id}/`, display_url: `${sim.url}/ipam/prefixes/${lan.id}/`, display: '10.40.7.0/24',
          family: { value: 4, label: 'IPv4' }, vrf: null, scope_type: null, scope_id: null, scope: null, tenant: null, vlan: null,
          status: { value: 'active', label: 'Active' }, role: null, is_pool: false, mark_utilized: false, description: '', comments: '', tags: [],
          custom_fields: { dns_servers: '10.40.0.53, 10.40.0.54', gateway: '10.40.7.1' }, children: 0, _depth: 1,
        });
        expect(Object.keys(p.custom_fields)).toEqual(['dns_servers', 'gateway']);
        expect(list.body.results[0]).toMatchObject({ status: { value: 'container', label: 'Container' }, children: 2, _depth: 0, custom_fields: { dns_servers: null, gateway: null } });
        expect(list.body.results[2]).toMatchObject({ is_pool: true, custom_fields: { dns_servers: null, gateway: '10.40.8.5' } });
        if (version >= '4.5') expect(p.owner).toBeNull();
        const detail = await get(`${sim.url}/api/ipam/prefixes/${small.id}/`, { auth: a });
        expect(detail.body).toEqual(list.body.results[2]);
        const brief = await get(`${sim.url}/api/ipam/prefixes/?brief=1&id=${block.id}`, { auth: a });
        expect(brief.body.results).toEqual([{ id: block.id, url: `${sim.url}/api/ipam/prefixes/${block.id}/`, display: '10.40.0.0/16', family: { value: 4, label: 'IPv4' }, prefix: '10.40.0.0/16', description: 'Site block', _depth: 0 }]);
        expect(await get(`${sim.url}/api/ipam/prefixes/999/`, { auth: a })).toMatchObject({ status: 404, body: { detail: 'No Prefix matches the given query.' } });
      });
    }
  });

  it('filters: id, prefix (exact network; host bits set match nothing), q (description, text, containing), status, within, contains', async () => {
    await withSim({}, async (sim) => {
      const a = `Token ${sim.v1Token}`;
      const block = sim.addPrefix({ prefix: '10.40.0.0/16', status: 'container', description: 'Site block' });
      const lan = sim.addPrefix({ prefix: '10.40.7.0/24' });
      const small = sim.addPrefix({ prefix: '10.40.8.4/30' });
      const ids = async (query: string) => {
        const r = await get(`${sim.url}/api/ipam/prefixes/?${query}`, { auth: a });
        expect({ query, status: r.status }).toEqual({ query, status: 200 });
        return r.body.results.map((p: Json) => p.id);
      };
      expect(await ids(`id=${lan.id}&id=${small.id}`)).toEqual([lan.id, small.id]);
      expect(await ids('prefix=10.40.7.0/24')).toEqual([lan.id]);
      expect(await ids('prefix=10.40.7.0%2F24&prefix=10.40.8.4/30')).toEqual([lan.id, small.id]);
      expect(await ids('prefix=10.40.7.9/24')).toEqual([]);
      expect(await ids('prefix=nonsense')).toEqual([]);
      expect(await ids('q=10.40.7.9')).toEqual([block.id, lan.id]);
      expect(await ids('q=site')).toEqual([block.id]);
      expect(await ids('q=40.8')).toEqual([small.id]);
      expect(await ids('status=container')).toEqual([block.id]);
      expect(await ids('within=10.40.0.0/16')).toEqual([lan.id, small.id]);
      expect(await ids('within_include=10.40.7.0/24')).toEqual([lan.id]);
      expect(await ids('contains=10.40.8.5')).toEqual([block.id, small.id]);
      expect(await ids('mask_length=24')).toEqual([lan.id]);
      const bad = await get(`${sim.url}/api/ipam/prefixes/?status=nope`, { auth: a });
      expect(bad).toMatchObject({ status: 400, body: { status: ['Select a valid choice. nope is not one of the available choices.'] } });
      expect(() => sim.addPrefix({ prefix: '10.40.7.0/24' })).toThrow(/Duplicate prefix found in global table: 10\.40\.7\.0\/24/);
      expect(() => sim.addPrefix({ prefix: '2001:db8::/64' })).toThrow(/IPv6 prefixes are not simulated/);
    });
  });
});

describe('IPAM: IP addresses not assigned to an interface', () => {
  let sim: NetboxSim;
  let loose: number;
  let bmc: Json;
  beforeAll(async () => {
    sim = await startNetboxSim({ version: '4.6', devices: [{ ...NODE, bmcIp: '10.40.7.3/24' }] });
    loose = sim.addIpAddress({ address: '10.40.7.10/24', dnsName: 'CN-One.lab', description: 'control node cn-one', status: 'reserved' }).id;
    sim.addIpAddress({ address: '10.41.0.9/16', role: 'vip' });
    bmc = (await get(`${sim.url}/api/ipam/ip-addresses/?address=10.40.7.3`, { auth: `Token ${sim.v1Token}` })).body.results[0];
  });
  afterAll(() => sim.stop());
  const ids = async (query: string) => {
    const r = await get(`${sim.url}/api/ipam/ip-addresses/?${query}`, { auth: `Token ${sim.v1Token}` });
    expect({ query, status: r.status }).toEqual({ query, status: 200 });
    return r.body.results.map((ip: Json) => ip.address);
  };

  it('renders assigned_object_type/_id/assigned_object null and status, role, dns_name (lowercased), description from the row; assigned ones are unchanged', async () => {
    const r = await get(`${sim.url}/api/ipam/ip-addresses/${loose}/`, { auth: `Token ${sim.v1Token}` });
    expect(Object.keys(r.body)).toEqual(ipKeys('4.6'));
    expect(r.body).toMatchObject({
      address: '10.40.7.10/24', status: { value: 'reserved', label: 'Reserved' }, role: null, assigned_object_type: null,
      assigned_object_id: null, assigned_object: null, dns_name: 'cn-one.lab', description: 'control node cn-one', owner: null, comments: '',
    });
    expect((await get(`${sim.url}/api/ipam/ip-addresses/?address=10.41.0.9`, { auth: `Token ${sim.v1Token}` })).body.results[0].role).toEqual({ value: 'vip', label: 'VIP' });
    expect(bmc).toMatchObject({ assigned_object_type: 'dcim.interface', status: { value: 'active', label: 'Active' }, dns_name: '', description: '' });
    expect(bmc.assigned_object.name).toBe('bmc');
    expect(() => sim.addIpAddress({ address: '10.40.7.10/32' })).toThrow(/Duplicate IP address found in global table: 10\.40\.7\.10\/24/);
  });

  it('parent: addresses whose host is in the network (any mask, the value\'s host bits cleared); one unparseable value empties the result', async () => {
    expect(await ids('parent=10.40.7.0/24')).toEqual(['10.40.7.3/24', '10.40.7.10/24']);
    expect(await ids('parent=10.40.7.200/24')).toEqual(['10.40.7.3/24', '10.40.7.10/24']);
    expect(await ids('parent=10.40.7.8/29')).toEqual(['10.40.7.10/24']);
    expect(await ids('parent=10.41.0.0/24&parent=10.40.7.3')).toEqual(['10.40.7.3/24', '10.41.0.9/16']);
    expect(await ids('parent=10.40.7.0/255.255.255.0')).toEqual(['10.40.7.3/24', '10.40.7.10/24']);
    expect(await ids('parent=10.40.7.0/24&parent=bogus')).toEqual([]);
    expect(await ids('parent=2001:db8::/32')).toEqual([]);
  });

  it('dns_name and description: exact (case-sensitive) and NetBox\'s lookups; status, role, assigned, q', async () => {
    expect(await ids('dns_name=cn-one.lab')).toEqual(['10.40.7.10/24']);
    expect(await ids('dns_name=CN-One.lab')).toEqual([]);
    expect(await ids('dns_name__ie=CN-ONE.LAB')).toEqual(['10.40.7.10/24']);
    expect(await ids('dns_name__ic=ONE')).toEqual(['10.40.7.10/24']);
    expect(await ids('dns_name__isw=cn-')).toEqual(['10.40.7.10/24']);
    expect(await ids('dns_name__n=cn-one.lab')).toEqual(['10.40.7.3/24', '10.41.0.9/16']);
    expect(await ids('dns_name__empty=true')).toEqual(['10.40.7.3/24', '10.41.0.9/16']);
    expect(await ids('dns_name__empty=false')).toEqual(['10.40.7.10/24']);
    expect(await ids('parent=10.40.7.0/24&dns_name=cn-one.lab')).toEqual(['10.40.7.10/24']);
    expect(await ids('description=control node cn-one')).toEqual(['10.40.7.10/24']);
    expect(await ids('description__ic=NODE')).toEqual(['10.40.7.10/24']);
    expect(await ids('status=reserved')).toEqual(['10.40.7.10/24']);
    expect(await ids('status=active&status=reserved')).toEqual(['10.40.7.3/24', '10.40.7.10/24', '10.41.0.9/16']);
    expect(await ids('role=vip')).toEqual(['10.41.0.9/16']);
    expect(await ids('assigned=false')).toEqual(['10.40.7.10/24', '10.41.0.9/16']);
    expect(await ids('assigned=true')).toEqual(['10.40.7.3/24']);
    expect(await ids('q=cn-one')).toEqual(['10.40.7.10/24']);
    expect(await ids('q=10.41')).toEqual(['10.41.0.9/16']);
    expect(await ids(`device_id=${bmc.assigned_object.device.id}`)).toEqual(['10.40.7.3/24']);
    const bad = await get(`${sim.url}/api/ipam/ip-addresses/?status=up`, { auth: `Token ${sim.v1Token}` });
    expect(bad).toMatchObject({ status: 400, body: { status: ['Select a valid choice. up is not one of the available choices.'] } });
  });
});

describe('IPAM: available-ips', () => {
  it('GET: [{family, address, vrf}] with the prefix length, not paginated, limit as get_results_limit reads it; network/broadcast out unless /31, /32 or a pool', async () => {
    await withSim({ pageSize: 4, maxPageSize: 5 }, async (sim) => {
      const a = `Bearer ${sim.v2Token}`;
      const p = sim.addPrefix({ prefix: '10.40.5.0/29' });
      sim.addIpAddress({ address: '10.40.5.2/32' }); // another mask: its host is still taken
      const r = await get(`${sim.url}/api/ipam/prefixes/${p.id}/available-ips/`, { auth: a });
      expect(r.status).toBe(200);
      expect(r.headers.allow).toBe('GET, POST, HEAD, OPTIONS');
      expect(r.body).toEqual(['10.40.5.1', '10.40.5.3', '10.40.5.4', '10.40.5.5'].map((ip) => ({ family: 4, address: `${ip}/29`, vrf: null })));
      const avail = async (id: number, query = '') => (await get(`${sim.url}/api/ipam/prefixes/${id}/available-ips/${query}`, { auth: a })).body.map((x: Json) => x.address);
      expect(await avail(p.id, '?limit=2')).toEqual(['10.40.5.1/29', '10.40.5.3/29']);
      expect(await avail(p.id, '?limit=0')).toHaveLength(5); // 0 means MAX_PAGE_SIZE
      expect(await avail(p.id, '?limit=100')).toHaveLength(5); // capped at MAX_PAGE_SIZE
      expect(await avail(p.id, '?limit=abc')).toHaveLength(4); // PAGINATE_COUNT
      expect(await avail(p.id, '?limit=-1')).toEqual(['10.40.5.1/29', '10.40.5.3/29', '10.40.5.4/29', '10.40.5.5/29', '10.40.5.6/29']);
      expect(await avail(sim.addPrefix({ prefix: '10.40.6.0/31' }).id)).toEqual(['10.40.6.0/31', '10.40.6.1/31']);
      expect(await avail(sim.addPrefix({ prefix: '10.40.6.9/32' }).id)).toEqual(['10.40.6.9/32']);
      expect(await avail(sim.addPrefix({ prefix: '10.40.6.12/30', isPool: true }).id)).toEqual(['10.40.6.12/30', '10.40.6.13/30', '10.40.6.14/30', '10.40.6.15/30']);
      // A prefix is not an address: a /32 prefix inside the pool takes nothing.
      expect(await avail(sim.addPrefix({ prefix: '10.40.6.16/30', isPool: true }).id)).toHaveLength(4);
      sim.addPrefix({ prefix: '10.40.6.17/32' });
      expect(await avail((await get(`${sim.url}/api/ipam/prefixes/?prefix=10.40.6.16/30`, { auth: a })).body.results[0].id)).toHaveLength(4);
      expect(await get(`${sim.url}/api/ipam/prefixes/999/available-ips/`, { auth: a })).toMatchObject({ status: 404, body: { detail: 'No Prefix matches the given query.' } });
    });
  });

  it('POST: the first free addresses, skipping taken ones, with the prefix\'s length; 201 with IPAddressSerializer (an object for an object, a list for a list); the rows are listed; requests keep the body', async () => {
    await withSim({ version: '4.6' }, async (sim) => {
      const a = `Bearer ${sim.v2Token}`;
      const p = sim.addPrefix({ prefix: '10.40.7.0/24', customFields: { gateway: '10.40.7.1' } });
      sim.addIpAddress({ address: '10.40.7.1/24', description: 'gateway' }); // NetBox does not read the custom field: the gateway must be an address
      sim.addDevice({ name: 'bmc-host', bmcIp: '10.40.7.3/24' });
      const url = `${sim.url}/api/ipam/prefixes/${p.id}/available-ips/`;
      const sent = { status: 'active', dns_name: 'CN-One', description: 'control node cn-one', address: '192.0.2.1/8', vrf: 7, no_such_field: true };
      const one = await post(url, a, sent);
      expect(one.status).toBe(201);
      expect(Object.keys(one.body)).toEqual(ipKeys('4.6'));
      expect(one.body).toMatchObject({
        address: '10.40.7.2/24', display: '10.40.7.2/24', family: { value: 4, label: 'IPv4' }, vrf: null, status: { value: 'active', label: 'Active' },
        dns_name: 'cn-one', description: 'control node cn-one', assigned_object_type: null, assigned_object_id: null, assigned_object: null,
        url: `${sim.url}/api/ipam/ip-addresses/${one.body.id}/`, tags: [], custom_fields: {}, owner: null,
      });
      expect(one.body.created).toBe(one.body.last_updated);
      const sentRecord = sim.requests.find((r) => r.method === 'POST')!;
      expect(sentRecord).toMatchObject({ path: `/api/ipam/prefixes/${p.id}/available-ips/`, authorization: a });
      expect(JSON.parse(sentRecord.body!)).toEqual(sent);
      expect(sim.requests.find((r) => r.method === 'GET')?.body ?? null).toBeNull();

      const two = await post(url, a, [{}, { status: 'reserved', role: 'vip' }]);
      expect(two.status).toBe(201);
      expect(two.body.map((x: Json) => [x.address, x.status.value, x.role?.value ?? null])).toEqual([['10.40.7.4/24', 'active', null], ['10.40.7.5/24', 'reserved', 'vip']]);
      // No Content-Type (or no body): DRF's request.data is {}.
      const bare = await get(url, { method: 'POST', auth: a });
      expect([bare.status, bare.body.address]).toEqual([201, '10.40.7.6/24']);
      const listed = await get(`${sim.url}/api/ipam/ip-addresses/?parent=10.40.7.0/24`, { auth: a });
      expect(listed.body.results.map((x: Json) => x.address)).toEqual(['10.40.7.1/24', '10.40.7.2/24', '10.40.7.3/24', '10.40.7.4/24', '10.40.7.5/24', '10.40.7.6/24']);
      expect(listed.body.results[1]).toEqual(one.body);
      expect((await get(`${url}?limit=1`, { auth: a })).body).toEqual([{ family: 4, address: '10.40.7.7/24', vrf: null }]);
      // An empty list asks for nothing and gets nothing.
      expect(await post(url, a, [])).toMatchObject({ status: 201, body: [] });
    });
  });

  it('too few free addresses: 409 {"detail": "Insufficient resources are available to satisfy the request"} on every simulated line, and nothing is created', async () => {
    for (const version of VERSIONS) {
      await withSim({ version }, async (sim) => {
        const a = `Token ${sim.v1Token}`;
        const p = sim.addPrefix({ prefix: '10.40.8.0/30' }); // .1 and .2
        const url = `${sim.url}/api/ipam/prefixes/${p.id}/available-ips/`;
        const three = await post(url, a, [{}, {}, {}]);
        expect({ version, status: three.status, body: three.body }).toEqual({ version, status: 409, body: INSUFFICIENT });
        expect((await get(`${sim.url}/api/ipam/ip-addresses/`, { auth: a })).body.count).toBe(0);
        const two = await post(url, a, [{ description: 'a' }, { description: 'b' }]);
        expect({ version, status: two.status, addresses: two.body.map((x: Json) => x.address) }).toEqual({ version, status: 201, addresses: ['10.40.8.1/30', '10.40.8.2/30'] });
        const more = await post(url, a, {});
        expect({ version, status: more.status, body: more.body }).toEqual({ version, status: 409, body: INSUFFICIENT });
        // The write serializer runs first: a bad body on a full prefix is a 400, not the 409.
        expect((await post(url, a, 'x')).status).toBe(400);
      });
    }
  });

  it('refusals before the allocation: read-only tokens 403, anonymous 403 even without LOGIN_REQUIRED, unknown prefix 404, a non-numeric one is no route, 415', async () => {
    await withSim({ version: '4.6', loginRequired: false }, async (sim) => {
      const p = sim.addPrefix({ prefix: '10.40.7.0/24' });
      const url = `${sim.url}/api/ipam/prefixes/${p.id}/available-ips/`;
      const denied = { status: 403, body: { detail: 'You do not have permission to perform this action.' } };
      expect(await post(url, `Token ${sim.readOnlyToken}`, {})).toMatchObject(denied);
      expect(await post(url, `Bearer ${sim.readOnlyV2Token}`, {})).toMatchObject(denied);
      expect((await get(url, { auth: `Token ${sim.readOnlyToken}` })).status).toBe(200);
      expect((await get(`${sim.url}/api/ipam/prefixes/`, { auth: `Bearer ${sim.readOnlyV2Token}` })).status).toBe(200);
      // Permissions come before the handler: a read-only token gets the 403 where a write token gets the 405.
      expect(await post(`${sim.url}/api/dcim/devices/`, `Token ${sim.readOnlyToken}`, {})).toMatchObject(denied);
      expect(await post(`${sim.url}/api/dcim/devices/`, `Token ${sim.v1Token}`, {})).toMatchObject({ status: 405, body: { detail: 'Method "POST" not allowed.' } });
      expect(await post(url, null, {})).toMatchObject({ status: 403, body: { detail: 'Authentication credentials were not provided.' } });
      expect((await get(url)).status).toBe(200); // anonymous reads pass without LOGIN_REQUIRED
      expect(await post(`${sim.url}/api/ipam/prefixes/98765/available-ips/`, `Token ${sim.v1Token}`, {})).toMatchObject({ status: 404, body: { detail: 'No Prefix matches the given query.' } });
      const noRoute = await post(`${sim.url}/api/ipam/prefixes/abc/available-ips/`, `Token ${sim.v1Token}`, {});
      expect([noRoute.status, noRoute.headers['content-type']]).toEqual([404, 'text/html; charset=utf-8']);
      expect(await post(url, `Token ${sim.v1Token}`, 'status=active', { 'Content-Type': 'text/plain' })).toMatchObject({ status: 415, body: { detail: 'Unsupported media type "text/plain" in request.' } });
      // JSONParser: 'JSON parse error - ' and Python's json message (these are CPython 3.12's).
      const parseErrors: [string, string][] = [
        ['{"status": ', 'Expecting value: line 1 column 12 (char 11)'],
        ['{"a": x}', 'Expecting value: line 1 column 7 (char 6)'],
        ['{', 'Expecting property name enclosed in double quotes: line 1 column 2 (char 1)'],
        ['  ', 'Expecting value: line 1 column 3 (char 2)'],
        ['[1,]', 'Expecting value: line 1 column 4 (char 3)'],
        ['{"a":1,}', 'Expecting property name enclosed in double quotes: line 1 column 8 (char 7)'],
        ['"\\x"', 'Invalid \\escape: line 1 column 2 (char 1)'],
        ['[1] 2', 'Extra data: line 1 column 5 (char 4)'],
        ['{"a" 1}', "Expecting ':' delimiter: line 1 column 6 (char 5)"],
        ['[NaN]', "Out of range float values are not JSON compliant: 'NaN'"],
        ['"abc', 'Unterminated string starting at: line 1 column 1 (char 0)'],
        ['{"a":1\n,"b": }', 'Expecting value: line 2 column 7 (char 13)'],
      ];
      for (const [text, message] of parseErrors) {
        const broken = await post(url, `Token ${sim.v1Token}`, text);
        expect({ text, status: broken.status, body: broken.body }).toEqual({ text, status: 400, body: { detail: `JSON parse error - ${message}` } });
      }
      expect(await post(`${sim.url}/api/ipam/prefixes/${p.id}/available-ips/`, `Token ${sim.v1Token}`, { status: 'bogus' }, { 'Content-Type': 'application/json; charset=utf-8' }))
        .toMatchObject({ status: 400, body: { status: ['bogus is not a valid choice.'] } });
      expect((await get(`${sim.url}/api/ipam/ip-addresses/`, { auth: `Token ${sim.v1Token}` })).body.count).toBe(0);
    });
  });

  it('bad bodies: DRF\'s 400 shapes (the write serializer\'s positional list, then IPAddressSerializer\'s dict or list), per version', async () => {
    for (const version of VERSIONS) {
      await withSim({ version }, async (sim) => {
        const a = `Token ${sim.v1Token}`;
        const p = sim.addPrefix({ prefix: '10.40.7.0/24' });
        const url = `${sim.url}/api/ipam/prefixes/${p.id}/available-ips/`;
        const expect400 = async (body: unknown, want: unknown) => {
          const r = await post(url, a, body);
          expect({ version, sent: body, status: r.status, body: r.body }).toEqual({ version, sent: body, status: 400, body: want });
        };
        await expect400('"abc"', [{ non_field_errors: ['Invalid data. Expected a dictionary, but got str.'] }]);
        await expect400([5, {}], [{ non_field_errors: ['Invalid data. Expected a dictionary, but got int.'] }, {}]);
        await expect400('null', [['This field may not be null.']]);
        await expect400({ status: 'bogus' }, { status: ['bogus is not a valid choice.'] });
        await expect400([{}, { status: 'Active' }], [{}, { status: ['Active is not a valid choice.'] }]);
        await expect400({ status: { value: 'active' } }, { status: ['Value must be passed directly (e.g. "foo": 123); do not use a dictionary or list.'] });
        await expect400({ status: null }, { status: ['This field may not be blank.'] });
        await expect400({ status: 'slaac' }, { status: ['Only IPv6 addresses can be assigned SLAAC status'] });
        await expect400({ dns_name: 'cn one' }, { dns_name: ['Only alphanumeric characters, asterisks, hyphens, periods, and underscores are allowed in DNS names'] });
        await expect400({ dns_name: true, description: 'x'.repeat(201) }, { dns_name: ['Not a valid string.'], description: ['Ensure this field has no more than 200 characters.'] });
        await expect400({ tenant: 5 }, { tenant: ['Related object not found using the provided numeric ID: 5'] });
        await expect400({ tenant: { name: 'Ops' } }, { tenant: ["Related object not found using the provided attributes: {'name': 'Ops'}"] });
        await expect400({ tags: 'a' }, { tags: { non_field_errors: ['Expected a list of items but got type "str".'] } });
        await expect400({ custom_fields: 'x' }, { custom_fields: ['Invalid data format. Custom field data must be passed as a dictionary mapping field names to their values.'] });
        await expect400({ assigned_object_type: 'dcim.device', assigned_object_id: -1 }, { assigned_object_type: ['Invalid content type: dcim.device'], assigned_object_id: ['Ensure this value is greater than or equal to 0.'] });
        const cf = await post(url, a, { custom_fields: { rack_unit: 3 } });
        if (version >= '4.5') {
          expect({ version, status: cf.status, body: cf.body }).toEqual({ version, status: 400, body: { custom_fields: { rack_unit: "Custom field 'rack_unit' does not exist for this object type." } } });
        } else {
          expect({ version, status: cf.status, custom_fields: cf.body.custom_fields }).toEqual({ version, status: 201, custom_fields: {} });
        }
        if (version >= '4.5') {
          await expect400({ prefix_length: 16 }, [{ prefix_length: 'Prefix length must be greater than or equal to the parent mask length (24)' }]);
          await expect400({ prefix_length: 33 }, [{ prefix_length: 'Invalid prefix length (33) for IPv6' }]);
          await expect400([{}, { prefix_length: 'x' }], [{}, { prefix_length: ['A valid integer is required.'] }]);
          expect((await post(url, a, { prefix_length: 32 })).body.address).toMatch(/^10\.40\.7\.\d+\/32$/);
        } else {
          await expect400({ description: '' }, [{ description: ['This field may not be blank.'] }]);
          await expect400([{}, { description: [] }], [{}, { description: ['Not a valid string.'] }]);
          expect((await post(url, a, { prefix_length: 32 })).body.address).toMatch(/^10\.40\.7\.\d+\/24$/); // unknown before 4.5.1: ignored
        }
      });
    }
  });

  it('assigned_object_type/_id assign the new address to an interface; a pool\'s network address cannot be', async () => {
    await withSim({}, async (sim) => {
      const a = `Token ${sim.v1Token}`;
      sim.addDevice(NODE);
      const eth1 = (await get(`${sim.url}/api/dcim/interfaces/?name=eth1`, { auth: a })).body.results[0];
      const p = sim.addPrefix({ prefix: '10.40.7.0/24' });
      const r = await post(`${sim.url}/api/ipam/prefixes/${p.id}/available-ips/`, a, { assigned_object_type: 'dcim.interface', assigned_object_id: eth1.id });
      expect(r.status).toBe(201);
      expect(r.body).toMatchObject({ address: '10.40.7.1/24', assigned_object_type: 'dcim.interface', assigned_object_id: eth1.id, assigned_object: { id: eth1.id, name: 'eth1' } });
      expect((await get(eth1.url, { auth: a })).body.count_ipaddresses).toBe(1);
      const pool = sim.addPrefix({ prefix: '10.40.9.0/24', isPool: true });
      const net = await post(`${sim.url}/api/ipam/prefixes/${pool.id}/available-ips/`, a, { assigned_object_type: 'dcim.interface', assigned_object_id: eth1.id });
      expect(net).toMatchObject({ status: 400, body: { non_field_errors: ['10.40.9.0 is a network ID, which may not be assigned to an interface.'] } });
    });
  });
});

describe('IPAM: DELETE /api/ipam/ip-addresses/{id}/', () => {
  it('204 without a body, then 404; the address is free again; a device\'s oob_ip is cleared; read-only 403; other writes still 405', async () => {
    await withSim({ version: '4.6' }, async (sim) => {
      const a = `Bearer ${sim.v2Token}`;
      const device = sim.addDevice({ name: 'node-x', bmcIp: '10.40.7.9/24' });
      const p = sim.addPrefix({ prefix: '10.40.7.0/29' });
      const url = `${sim.url}/api/ipam/prefixes/${p.id}/available-ips/`;
      const ip = (await post(url, a, { dns_name: 'cn-x' })).body;
      expect(ip.address).toBe('10.40.7.1/29');
      expect(await get(ip.url, { method: 'DELETE', auth: `Bearer ${sim.readOnlyV2Token}` })).toMatchObject({ status: 403, body: { detail: 'You do not have permission to perform this action.' } });
      const del = await get(ip.url, { method: 'DELETE', auth: a });
      expect([del.status, del.text, del.headers['content-length']]).toEqual([204, '', '0']);
      expect(sim.requests.at(-1)).toMatchObject({ method: 'DELETE', path: `/api/ipam/ip-addresses/${ip.id}/`, body: null });
      expect(await get(ip.url, { auth: a })).toMatchObject({ status: 404, body: { detail: 'No IPAddress matches the given query.' } });
      expect(await get(ip.url, { method: 'DELETE', auth: a })).toMatchObject({ status: 404, body: { detail: 'No IPAddress matches the given query.' } });
      expect(await get(`${sim.url}/api/ipam/ip-addresses/abc/`, { method: 'DELETE', auth: a })).toMatchObject({ status: 404, body: { detail: 'Not found.' } });
      expect((await post(url, a, {})).body.address).toBe('10.40.7.1/29');
      const oob = (await get(`${sim.url}/api/dcim/devices/${device}/`, { auth: a })).body.oob_ip;
      expect((await get(oob.url, { method: 'DELETE', auth: a })).status).toBe(204);
      expect((await get(`${sim.url}/api/dcim/devices/${device}/`, { auth: a })).body.oob_ip).toBeNull();
      expect(await get(`${sim.url}/api/dcim/devices/${device}/`, { method: 'DELETE', auth: a })).toMatchObject({ status: 405, body: { detail: 'Method "DELETE" not allowed.' } });
      expect(await get(`${sim.url}/api/ipam/ip-addresses/`, { method: 'PUT', auth: a })).toMatchObject({ status: 405, body: { detail: 'Method "PUT" not allowed.' } });
      expect(await get(`${sim.url}/api/ipam/prefixes/${p.id}/`, { method: 'DELETE', auth: a })).toMatchObject({ status: 405 });
    });
  });
});
