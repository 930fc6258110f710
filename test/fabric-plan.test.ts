import { capturingLogger, startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { AppError } from '../src/errors';
import { planFabric, planHashOf, planIntentOf, type FabricPlanInput } from '../src/modules/fabric/plan';
import { DEFAULT_SETTINGS, type FabricSettings } from '../src/modules/fabric/validate';
import { renderIntentOf } from '../src/modules/fabric/render-intent';
import { renderSwitchConfig } from '../src/modules/fabric/render/switch';

const PLAN = '/controlnode/fabric-config/plan';
const CONFIG = '/controlnode/fabric-config';
const BGP_PASSWORD = 'plan-S3cret-qq71';

/** The seed's three required fields, and sizing. */
const REQ = { fabric_switch_nos: 'sonic', management_cidr: '192.168.111.0/24', vxlan_mtu: 9000, expected_nodes: 40, expected_vms: 800 };
const GQL_REQ: FabricPlanInput = { fabricSwitchNos: 'sonic', managementCidr: '192.168.111.0/24', vxlanMtu: 9000, expectedNodes: 40, expectedVms: 800 };

const PLAN_DOC = `query ($i: FabricPlanInput!) { fabricPlan(input: $i) {
  config { advertiseAllVni as bfdEnabled bgpPassword fabricSwitchAs fabricSwitchName fabricSwitchNos fabricSwitchPeeringIp fabricSwitchRole
    managementCidr ospfArea ospfAutoRefBw ospfDeadInterval ospfEnabled ospfFabricInterface ospfHelloInterval publicMtu rolloutStatus
    routerIdBase routerIdPrefixLen vxlanMtu }
  deploymentMode underlayMode notes risks planHash switchConfig vtepCapacity } }`;
const UPSERT = 'mutation ($i: FabricConfigInput!) { upsertFabricConfig(input: $i) { created config { version routerIdCidr } } }';

const snakeCase = (name: string) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** The planner alone (no database): the request on top of `stored`. */
const plan = (request: FabricPlanInput, stored: FabricSettings | null = null) => planFabric(planIntentOf(stored, request), stored);

describe('fabric plan (pure): the seed\'s sentences', () => {
  // [label, request (over the required fields), what the plan must hold]
  const SIZING: [string, FabricPlanInput, number, number][] = [
    // expected_nodes + max(16, ceil(n/4)) headroom + 1 switch loopback under OSPF; vtepPoolCapacity: /24 = 254, /23 = 508, per /24 254 below.
    ['40 nodes under OSPF: 40+16+1 = 57 fit a /26 (62)', { expectedNodes: 40 }, 26, 62],
    ['46 nodes under OSPF: 46+16+1 = 63 need a /25 (126)', { expectedNodes: 46 }, 25, 126],
    ['46 nodes under the bgp underlay: 46+16 = 62 fit a /26 (no switch loopback in the pool)', { expectedNodes: 46, underlayMode: 'bgp' }, 26, 62],
    ['202 nodes: 202+51+1 = 254 fit a /24', { expectedNodes: 202 }, 24, 254],
    ['203 nodes: 203+51+1 = 255 need a /23', { expectedNodes: 203 }, 23, 508],
    ['1000 nodes: 1000+250+1 = 1251 need a /21 (2032)', { expectedNodes: 1000 }, 21, 2032],
    ['1 node: 1+16+1 = 18 fit a /27 (30)', { expectedNodes: 1 }, 27, 30],
    ['expected_nodes unset: the default /24', { expectedNodes: 0 }, 24, 254],
    ['an operator prefix is kept verbatim, even too small', { expectedNodes: 40, routerIdPrefixLen: 28 }, 28, 14],
    ['an operator prefix is kept verbatim, even larger than needed', { expectedNodes: 40, routerIdPrefixLen: 16 }, 16, 65024],
  ];
  for (const [label, request, prefix, capacity] of SIZING) it(`auto-sizes the VTEP pool: ${label}`, () => {
    const result = plan({ ...GQL_REQ, ...request });
    expect([result.config.routerIdPrefixLen, result.vtepCapacity]).toEqual([prefix, capacity]);
  });

  it('a pool too small for expected_nodes + headroom is a risk naming the prefix that fits', () => {
    const result = plan({ ...GQL_REQ, routerIdPrefixLen: 28 });
    expect(result.risks.some((r) => /VTEP pool 10\.255\.0\.0\/28 holds 14 addresses, fewer than the 57 needed.*router_id_prefix_len 26/.test(r))).toBe(true);
    expect(plan(GQL_REQ).risks.some((r) => /VTEP pool/.test(r))).toBe(false);
  });

  it('router_id_base empty => 10.255.0.0; a given base is kept', () => {
    expect(plan(GQL_REQ).config.routerIdBase).toBe('10.255.0.0');
    expect(plan({ ...GQL_REQ, routerIdBase: '10.200.4.0' }).config).toMatchObject({ routerIdBase: '10.200.4.0', routerIdPrefixLen: 26 });
  });

  it('local_as 0 => 65000 (private); a given local_as is kept', () => {
    expect(plan(GQL_REQ).config.as).toBe(65000);
    expect(plan({ ...GQL_REQ, localAs: 0 }).config.as).toBe(65000);
    expect(plan({ ...GQL_REQ, localAs: 4200000001 }).config.as).toBe(4200000001);
  });

  it('fabric_switch_as 0 => the host AS (iBGP), saying why; a given one is kept, and eBGP without a password is a risk', () => {
    const ibgp = plan({ ...GQL_REQ, localAs: 64600 });
    expect(ibgp.config.fabricSwitchAs).toBe(64600);
    expect(ibgp.notes.some((n) => /fabric_switch_as suggested: 64600, the host AS: iBGP/.test(n))).toBe(true);
    expect(ibgp.risks.some((r) => /eBGP/.test(r))).toBe(false);
    const ebgp = plan({ ...GQL_REQ, localAs: 64600, fabricSwitchAs: 65100 });
    expect(ebgp.config.fabricSwitchAs).toBe(65100);
    expect(ebgp.risks.some((r) => /eBGP .*without a BGP password: set bgp_password/.test(r))).toBe(true);
    // With a password stored, no such risk.
    expect(plan({ ...GQL_REQ, localAs: 64600, fabricSwitchAs: 65100 }, { ...DEFAULT_SETTINGS, bgpPasswordSet: true }).risks.some((r) => /eBGP/.test(r))).toBe(false);
  });

  it('peering IP empty => the pool\'s last usable under OSPF, management_cidr\'s first usable under the bgp underlay; a given one is kept', () => {
    expect(plan(GQL_REQ).config.fabricSwitchPeeringIp).toBe('10.255.0.62');
    expect(plan({ ...GQL_REQ, expectedNodes: 1000 }).config.fabricSwitchPeeringIp).toBe('10.255.7.254'); // /21: the last /24's .254
    expect(plan({ ...GQL_REQ, underlayMode: 'bgp' }).config.fabricSwitchPeeringIp).toBe('192.168.111.1');
    expect(plan({ ...GQL_REQ, fabricSwitchPeeringIp: '10.9.9.9' }).config.fabricSwitchPeeringIp).toBe('10.9.9.9');
    // Under the bgp underlay a peer outside the management subnet cannot be reached over it.
    expect(plan({ ...GQL_REQ, underlayMode: 'bgp', fabricSwitchPeeringIp: '10.9.9.9' }).risks.some((r) => /outside management_cidr/.test(r))).toBe(true);
  });

  it('underlay_mode "" and ospf => OSPF (ospf_enabled true), bgp => no OSPF', () => {
    for (const mode of [undefined, '', 'ospf']) expect([mode, plan({ ...GQL_REQ, underlayMode: mode }).underlayMode, plan({ ...GQL_REQ, underlayMode: mode }).config.ospfEnabled]).toEqual([mode, 'ospf', true]);
    const bgp = plan({ ...GQL_REQ, underlayMode: 'bgp' });
    expect([bgp.underlayMode, bgp.config.ospfEnabled]).toEqual(['bgp', false]);
    expect(bgp.notes.some((n) => /one iBGP session per node over 192\.168\.111\.0\/24/.test(n))).toBe(true);
  });

  it('a VNI range note sized from expected_vms', () => {
    expect(plan(GQL_REQ).notes).toContain('VNI range 10000-10999 for tenant L2 networks (1000 VNIs, for expected_vms 800)');
    expect(plan({ ...GQL_REQ, expectedVms: 4500 }).notes).toContain('VNI range 10000-14999 for tenant L2 networks (5000 VNIs, for expected_vms 4500)');
  });

  it('MTU below 1550 is a risk (VXLAN overhead over a 1500 underlay); 1550 and jumbo are not', () => {
    for (const [mtu, risky] of [[1500, true], [1549, true], [1550, false], [9216, false]] as const) {
      expect([mtu, plan({ ...GQL_REQ, vxlanMtu: mtu }).risks.some((r) => /below 1550/.test(r))]).toEqual([mtu, risky]);
    }
  });

  it('deployment_mode: cube without an external route reflector, dc with one (public_mtu then required)', () => {
    const cube = plan(GQL_REQ);
    expect(cube.deploymentMode).toBe('cube');
    const dcRow: FabricSettings = { ...DEFAULT_SETTINGS, as: 65000, externalRouteReflector: true, fabricSwitchAs: 65000, fabricSwitchPeeringIp: '10.255.0.254', fabricSwitchNos: 'eos', expectedNodes: 10, expectedVms: 10 };
    let refusal: unknown = null;
    try { plan(GQL_REQ, dcRow); } catch (error) { refusal = error instanceof AppError ? error.extensions.details : error; }
    expect(refusal).toEqual({ field: 'input.publicMtu' });
    const dc = plan({ ...GQL_REQ, publicMtu: 1500 }, dcRow);
    expect(dc.deploymentMode).toBe('dc');
    expect(dc.config.fabricSwitchPeeringIp).toBe('10.255.0.254'); // the stored one: 0 / empty = stored
    // A public MTU the overlay cannot carry.
    expect(plan({ ...GQL_REQ, publicMtu: 9000, vxlanMtu: 9000 }, dcRow).risks.some((r) => /public_mtu 9000 exceeds/.test(r))).toBe(true);
    // An external RR on a NOS without EVPN rendering: a risk, and POST would refuse it (the same rule).
    const other = plan({ ...GQL_REQ, fabricSwitchNos: 'other', publicMtu: 1500 }, dcRow);
    expect(other.risks.some((r) => /needs a BGP-EVPN-capable switch/.test(r))).toBe(true);
    expect(other.risks.some((r) => /^POST fabric-config would refuse this plan: fabric_switch_nos: must be a BGP-EVPN-capable NOS/.test(r))).toBe(true);
  });

  it('a VTEP pool overlapping the management subnet, or a management subnet too small for the nodes, is a risk', () => {
    expect(plan({ ...GQL_REQ, managementCidr: '10.255.0.0/16' }).risks.some((r) => /overlaps management_cidr 10\.255\.0\.0\/16/.test(r))).toBe(true);
    expect(plan({ ...GQL_REQ, managementCidr: '192.168.1.0/27' }).risks.some((r) => /30 host addresses, fewer than expected_nodes 40/.test(r))).toBe(true);
    expect(plan(GQL_REQ).risks).toEqual([]);
  });

  it('the VTEP pool is what the body asks, stored config or not (seed: "empty => 10.255.0.0 default", "0 => auto-size"); a plan that changes the stored pool says POST will need the switch ack', () => {
    const stored: FabricSettings = { ...DEFAULT_SETTINGS, as: 65001, routerIdBase: '10.254.0.1', routerIdPrefixLen: 24, expectedNodes: 10, expectedVms: 10 };
    // Empty base, prefix 0: the default base, auto-sized for expected_nodes 40 (a /26), not the stored /24 at 10.254.0.1.
    const asked = plan(GQL_REQ, stored);
    expect(asked.config).toMatchObject({ as: 65001, routerIdBase: '10.255.0.0', routerIdPrefixLen: 26 });
    expect(asked.risks.some((r) => /changes the stored VTEP pool 10\.254\.0\.1\/24 to 10\.255\.0\.0\/26: POST answers 409 REQUIRES_SWITCH_RECONFIG_ACK/.test(r))).toBe(true);
    // Only the prefix given: the default base with it; only the base: auto-sized at that base.
    expect(plan({ ...GQL_REQ, routerIdPrefixLen: 23 }, stored).config).toMatchObject({ routerIdBase: '10.255.0.0', routerIdPrefixLen: 23 });
    expect(plan({ ...GQL_REQ, routerIdBase: '10.254.0.1' }, stored).config).toMatchObject({ routerIdBase: '10.254.0.1', routerIdPrefixLen: 26 });
    // The stored pool asked for: kept, no risk.
    const kept = plan({ ...GQL_REQ, routerIdBase: '10.254.0.1', routerIdPrefixLen: 24 }, stored);
    expect(kept.config).toMatchObject({ routerIdBase: '10.254.0.1', routerIdPrefixLen: 24 });
    expect(kept.risks.some((r) => /REQUIRES_SWITCH_RECONFIG_ACK/.test(r))).toBe(false);
    const changed = plan({ ...GQL_REQ, routerIdBase: '10.254.0.1', routerIdPrefixLen: 23 }, stored);
    expect(changed.risks.some((r) => /changes the stored VTEP pool 10\.254\.0\.1\/24 to 10\.254\.0\.1\/23: POST answers 409 REQUIRES_SWITCH_RECONFIG_ACK/.test(r))).toBe(true);
  });

  it('switch_config is renderSwitchConfig(renderIntentOf(planned), nos) for each NOS', () => {
    for (const nos of ['sonic', 'cumulus', 'nxos', 'eos', 'other']) {
      const result = plan({ ...GQL_REQ, fabricSwitchNos: nos });
      expect(result.switchConfig).toBe(renderSwitchConfig(renderIntentOf(result.settings), nos as 'sonic'));
      expect(result.switchConfig).toContain('10.255.0.0/26');
    }
  });

  it('plan_hash: same input, same hash (key order too); planning a plan changes nothing; any change of input, another hash', () => {
    const base = plan(GQL_REQ);
    const reversed = Object.fromEntries(Object.entries(GQL_REQ).reverse()) as FabricPlanInput;
    expect(plan(reversed).planHash).toBe(base.planHash);
    expect(plan({ ...GQL_REQ }).planHash).toBe(base.planHash);
    expect(base.planHash).toMatch(/^[0-9a-f]{64}$/);
    // Idempotent: the plan of the planned intent is the same plan (what POST's plan_hash check relies on).
    const again = planFabric(base.settings, null);
    expect(again.settings).toEqual(base.settings);
    expect(again.planHash).toBe(base.planHash);
    const changes: FabricPlanInput[] = [
      { vxlanMtu: 9001 }, { expectedNodes: 41 }, { expectedNodes: 47 }, { expectedVms: 801 }, { fabricSwitchNos: 'eos' }, { fabricSwitchName: 'spine2' },
      { fabricSwitchRole: 'leaf' }, { localAs: 65001 }, { fabricSwitchAs: 65002 }, { fabricSwitchPeeringIp: '10.255.0.61' },
      { managementCidr: '192.168.112.0/24' }, { routerIdBase: '10.255.1.0' }, { routerIdPrefixLen: 25 }, { underlayMode: 'bgp' }, { publicMtu: 1500 },
    ];
    const hashes = new Set([base.planHash]);
    for (const change of changes) {
      const changed = plan({ ...GQL_REQ, ...change }).planHash;
      expect([change, hashes.has(changed)]).toEqual([change, false]);
      hashes.add(changed);
    }
    // The switch config is part of it: the same settings with another rendering hash differently.
    expect(planHashOf(base.settings, `${base.switchConfig}!`)).not.toBe(base.planHash);
  });

  const REFUSED: [string, FabricPlanInput, string][] = [
    ['no fabric_switch_nos', { fabricSwitchNos: undefined }, 'fabricSwitchNos'],
    ['an empty fabric_switch_nos', { fabricSwitchNos: '' }, 'fabricSwitchNos'],
    ['an unknown NOS', { fabricSwitchNos: 'junos' }, 'fabricSwitchNos'],
    ['no management_cidr', { managementCidr: undefined }, 'managementCidr'],
    ['a management_cidr that is an address', { managementCidr: '192.168.111.0' }, 'managementCidr'],
    ['no vxlan_mtu', { vxlanMtu: undefined }, 'vxlanMtu'],
    ['vxlan_mtu 9217', { vxlanMtu: 9217 }, 'vxlanMtu'],
    ['expected_nodes 1001', { expectedNodes: 1001 }, 'expectedNodes'],
    ['expected_nodes negative', { expectedNodes: -1 }, 'expectedNodes'],
    ['expected_vms 10001', { expectedVms: 10001 }, 'expectedVms'],
    ['local_as past 32 bits', { localAs: 4294967296 }, 'localAs'],
    ['local_as a fraction', { localAs: 65000.5 }, 'localAs'],
    ['an unknown underlay_mode', { underlayMode: 'isis' }, 'underlayMode'],
    ['router_id_prefix_len 31', { routerIdPrefixLen: 31 }, 'routerIdPrefixLen'],
    ['a router_id_base in short form', { routerIdBase: '10.255' }, 'routerIdBase'],
    ['a peering IP in hex', { fabricSwitchPeeringIp: '0x0a.0.0.1' }, 'fabricSwitchPeeringIp'],
    ['an unknown role', { fabricSwitchRole: 'core' }, 'fabricSwitchRole'],
    ['a switch name with a space', { fabricSwitchName: 'spine 1' }, 'fabricSwitchName'],
  ];
  for (const [label, change, field] of REFUSED) it(`refuses ${label}, naming input.${field}`, () => {
    let refusal: unknown = 'nothing thrown';
    try { plan({ ...GQL_REQ, ...change }); } catch (error) { refusal = error instanceof AppError ? { code: error.code, details: error.extensions.details } : String(error); }
    expect(refusal).toEqual({ code: 'INVALID_INPUT', details: { field: `input.${field}` } });
  });
});

describe('fabric plan over REST and GraphQL (real service and database)', () => {
  let t: TestApp;
  const lines: string[] = [];
  const seen: string[] = [];
  let admin: string;
  let reader: string;
  let tenantAdmin: string;
  const prisma = () => t.app.database.prisma;
  const row = () => prisma().fabricConfig.findUnique({ where: { id: 1 } });
  const call = async (token: string | null, method: string, path: string, body?: unknown) => {
    const answer = await rest(t.url, token, method, path, body);
    seen.push(JSON.stringify(answer.body));
    return answer;
  };
  const query = async (token: string | null, doc: string, variables?: Record<string, unknown>) => {
    const answer = await gql(t.url, token, doc, variables);
    seen.push(JSON.stringify(answer));
    return answer;
  };
  const reset = async () => {
    await prisma().fabricConfig.deleteMany({});
    await prisma().secret.deleteMany({ where: { tenantId: null } });
  };
  const eventCount = () => prisma().event.count({ where: { type: { startsWith: 'fabric.' } } });

  beforeAll(async () => {
    t = await startTestApp({}, { log: capturingLogger(lines) });
    admin = t.adminToken;
    const tree = await makeTenantTree(prisma(), 'fabric-plan', { pools: 1, nodesPerPool: 0 });
    reader = await makeToken(prisma(), null, [{ permission: 'compute:sites:read', scopeType: 'platform', scopeId: null }]);
    tenantAdmin = await makeToken(prisma(), tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  });
  afterAll(() => t.stop());

  it('REST: the seed\'s response fields, snake_case with config.* nested; GraphQL gives the same plan; nothing is written', async () => {
    await reset();
    const events = await eventCount();
    const answer = await call(reader, 'POST', PLAN, REQ);
    expect(answer.status).toBe(200);
    expect(Object.keys(answer.body).sort()).toEqual(['config', 'deployment_mode', 'notes', 'plan_hash', 'risks', 'switch_config', 'underlay_mode', 'vtep_capacity']);
    expect(Object.keys(answer.body.config).sort()).toEqual([
      'advertise_all_vni', 'as', 'bfd_enabled', 'bgp_password', 'fabric_switch_as', 'fabric_switch_name', 'fabric_switch_nos', 'fabric_switch_peering_ip',
      'fabric_switch_role', 'management_cidr', 'ospf_area', 'ospf_auto_ref_bw', 'ospf_dead_interval', 'ospf_enabled', 'ospf_fabric_interface',
      'ospf_hello_interval', 'public_mtu', 'rollout_status', 'router_id_base', 'router_id_prefix_len', 'vxlan_mtu',
    ]);
    expect(answer.body).toMatchObject({
      config: { as: 65000, fabric_switch_as: 65000, router_id_base: '10.255.0.0', router_id_prefix_len: 26, fabric_switch_peering_ip: '10.255.0.62', bgp_password: '', ospf_enabled: true, vxlan_mtu: 9000 },
      deployment_mode: 'cube', underlay_mode: 'ospf', vtep_capacity: 62, risks: [],
    });
    expect(answer.body.plan_hash).toBe(plan(GQL_REQ).planHash);
    expect(answer.body.switch_config).toContain('bgp listen range 10.255.0.0/26 peer-group HOSTS');
    const viaGql = await query(reader, PLAN_DOC, { i: GQL_REQ });
    expect(viaGql.errors).toBeUndefined();
    const p = viaGql.data!.fabricPlan;
    expect(p.planHash).toBe(answer.body.plan_hash);
    expect(p.switchConfig).toBe(answer.body.switch_config);
    expect(Object.fromEntries(Object.entries(p.config).map(([k, v]) => [snakeCase(k), v]))).toEqual(answer.body.config);
    // Same input, same hash; key order of the body does not matter; a change does.
    const reversed = JSON.stringify(Object.fromEntries(Object.entries(REQ).reverse()));
    expect((await call(reader, 'POST', PLAN, reversed)).body.plan_hash).toBe(answer.body.plan_hash);
    expect((await call(reader, 'POST', PLAN, REQ)).body.plan_hash).toBe(answer.body.plan_hash);
    expect((await call(reader, 'POST', PLAN, { ...REQ, vxlan_mtu: 9001 })).body.plan_hash).not.toBe(answer.body.plan_hash);
    expect(await row()).toBeNull();
    expect(await eventCount()).toBe(events);
  });

  it('the plan reads the stored config (0 / empty = stored, but for the VTEP pool), never returns a secret, and writes nothing', async () => {
    await reset();
    const created = await call(admin, 'POST', CONFIG, {
      as: 64700, management_cidr: '192.168.111.0/24', router_id_cidr: '10.254.0.1/24', bgp_password: BGP_PASSWORD, expected_nodes: 10, expected_vms: 10, bfd_enabled: true,
    });
    expect(created.status).toBe(200);
    const before = await row();
    const events = await eventCount();
    const answer = await call(reader, 'POST', PLAN, { ...REQ, fabric_switch_as: 65100 });
    expect(answer.status).toBe(200);
    expect(answer.body.config).toMatchObject({ as: 64700, router_id_base: '10.255.0.0', router_id_prefix_len: 26, bfd_enabled: true, bgp_password: '', fabric_switch_as: 65100 });
    // The stored pool, asked for, is the plan's.
    const same = await call(reader, 'POST', PLAN, { ...REQ, fabric_switch_as: 65100, router_id_base: '10.254.0.1', router_id_prefix_len: 24 });
    expect(same.body.config).toMatchObject({ router_id_base: '10.254.0.1', router_id_prefix_len: 24 });
    // eBGP, but a password is stored: no risk about it.
    expect(answer.body.risks.some((r: string) => /eBGP/.test(r))).toBe(false);
    expect(await row()).toEqual(before);
    expect(await eventCount()).toBe(events);
    expect([...seen, ...lines].join('\n')).not.toContain(BGP_PASSWORD);
  });

  it('POST fabric-config with the plan_hash reviewed: stored when the plan still matches, CONFLICT naming body.plan_hash (nothing written) when it does not', async () => {
    await reset();
    const planned = await call(admin, 'POST', PLAN, REQ);
    const body = { ...planned.body.config, expected_nodes: REQ.expected_nodes, expected_vms: REQ.expected_vms, plan_hash: planned.body.plan_hash };
    // What was reviewed, changed before the POST: refused, nothing created.
    const moved = await call(admin, 'POST', CONFIG, { ...body, vxlan_mtu: 9100 });
    expect([moved.status, moved.body.error.code, moved.body.error.details.field]).toEqual([409, 'CONFLICT', 'body.plan_hash']);
    expect(moved.body.error.message).toMatch(/^body\.plan_hash: /);
    expect(await row()).toBeNull();
    // Exactly what was reviewed: stored (bgp_password '' and rollout_status of the plan are "unchanged" / read-only).
    const stored = await call(admin, 'POST', CONFIG, body);
    expect(stored.status).toBe(200);
    expect(stored.body.config).toMatchObject({ as: 65000, router_id_cidr: '10.255.0.0/26', fabric_switch_peering_ip: '10.255.0.62', bgp_password_is_set: false, version: 1 });
    const event = await prisma().event.findFirst({ where: { type: 'fabric.config.created' }, orderBy: { id: 'desc' } });
    expect((event!.payload as { planHash: string }).planHash).toBe(planned.body.plan_hash);
    // The stored config plans to the same hash (the plan of what is stored is what was reviewed).
    expect((await call(admin, 'POST', PLAN, REQ)).body.plan_hash).toBe(planned.body.plan_hash);
    // Someone else changes the config: the old hash no longer applies.
    expect((await call(admin, 'POST', CONFIG, { bfd_enabled: true })).status).toBe(200);
    const version = (await row())!.version;
    const events = await eventCount();
    const stale = await call(admin, 'POST', CONFIG, { vxlan_mtu: 9000, plan_hash: planned.body.plan_hash });
    expect([stale.status, stale.body.error.code, stale.body.error.details.field]).toEqual([409, 'CONFLICT', 'body.plan_hash']);
    expect((await row())!.version).toBe(version);
    expect(await eventCount()).toBe(events);
    // A fresh plan of the new state goes through.
    const fresh = await call(admin, 'POST', PLAN, REQ);
    expect(fresh.body.config.bfd_enabled).toBe(true);
    expect((await call(admin, 'POST', CONFIG, { vxlan_mtu: 9000, plan_hash: fresh.body.plan_hash })).status).toBe(200);
    // A malformed hash is a 400 naming it.
    for (const bad of ['abc', 'G'.repeat(64), 42]) {
      const answer = await call(admin, 'POST', CONFIG, { plan_hash: bad });
      expect([bad, answer.status, answer.body.error.details.field]).toEqual([bad, 400, 'body.plan_hash']);
    }
    // GraphQL: the same CONFLICT, naming input.planHash.
    const viaGql = await query(admin, UPSERT, { i: { vxlanMtu: 9200, planHash: fresh.body.plan_hash } });
    expect(codeOf(viaGql)).toBe('CONFLICT');
    expect((viaGql.errors![0]!.extensions!.details as { field: string }).field).toBe('input.planHash');
    expect((await row())!.vxlanMtu).toBe(9000);
  });

  it('plan_hash is checked before the ack gate: a stale plan is CONFLICT, not a switch snippet', async () => {
    await reset();
    expect((await call(admin, 'POST', CONFIG, { as: 65000, management_cidr: '192.168.111.0/24', router_id_cidr: '10.255.0.0/24', expected_nodes: 10, expected_vms: 10, ospf_enabled: true })).status).toBe(200);
    const planned = await call(admin, 'POST', PLAN, { ...REQ, router_id_prefix_len: 23 });
    expect(planned.body.risks.some((r: string) => /REQUIRES_SWITCH_RECONFIG_ACK/.test(r))).toBe(true);
    const body = { ...planned.body.config, expected_nodes: 40, expected_vms: 800, plan_hash: planned.body.plan_hash };
    expect((await call(admin, 'POST', CONFIG, { ...body, vxlan_mtu: 9100 })).body.error.code).toBe('CONFLICT');
    // The reviewed plan, then the gate, then the ack.
    const gated = await call(admin, 'POST', CONFIG, body);
    expect(gated.body.error.code).toBe('REQUIRES_SWITCH_RECONFIG_ACK');
    const sonic = gated.body.error.details.snippets[0];
    const done = await call(admin, 'POST', CONFIG, { ...body, switch_acked: true, switch_snippet_hash: sonic.sha256, acked_by: 'ops' });
    expect(done.status).toBe(200);
    expect(done.body.config).toMatchObject({ router_id_cidr: '10.255.0.0/23', last_switch_ack_kind: 'acked' });
  });

  it('a vxlan_mtu the preflight\'s MTU consensus would refuse is a risk of the plan (and POST refuses it)', async () => {
    await reset();
    await prisma().fabricPreflight.deleteMany({});
    expect((await call(reader, 'POST', PLAN, { ...REQ, vxlan_mtu: 1500 })).body.risks.some((r: string) => /preflight/.test(r))).toBe(false);
    // What the preflight records when every node's underlay bridge has MTU 9000.
    await prisma().fabricPreflight.create({ data: { id: 1, underlayCidr: '192.168.111.0/24', underlayMtu: 9000, ready: true, nodeCount: 2 } });
    try {
      const risky = await call(reader, 'POST', PLAN, { ...REQ, vxlan_mtu: 1500 });
      expect(risky.body.risks).toContain('POST fabric-config would refuse this plan: vxlan_mtu: must be 9000, the underlay MTU the latest preflight found on every node\'s bridge');
      expect((await call(reader, 'POST', PLAN, { ...REQ, vxlan_mtu: 9000 })).body.risks.some((r: string) => /preflight/.test(r))).toBe(false);
    } finally {
      await prisma().fabricPreflight.deleteMany({});
    }
  });

  const BAD_REST: [string, unknown, string][] = [
    ['a missing fabric_switch_nos', { ...REQ, fabric_switch_nos: undefined }, 'body.fabric_switch_nos'],
    ['a missing management_cidr', { ...REQ, management_cidr: undefined }, 'body.management_cidr'],
    ['a missing vxlan_mtu', { ...REQ, vxlan_mtu: undefined }, 'body.vxlan_mtu'],
    ['a NUL in a string', { ...REQ, fabric_switch_name: 'spine\u00001' }, 'body.fabric_switch_name'],
    ['a lone surrogate', '{"fabric_switch_nos":"sonic","management_cidr":"192.168.111.0/24","vxlan_mtu":9000,"fabric_switch_name":"sp\\ud800ine"}', 'body.fabric_switch_name'],
    ['a 300-character string', { ...REQ, management_cidr: '1'.repeat(300) }, 'body.management_cidr'],
    ['a string for an integer', { ...REQ, vxlan_mtu: '9000' }, 'body.vxlan_mtu'],
    ['a number for a string', { ...REQ, underlay_mode: 1 }, 'body.underlay_mode'],
    ['a fraction', { ...REQ, expected_nodes: 1.5 }, 'body.expected_nodes'],
    ['an unknown field', { ...REQ, colour: 'blue' }, 'body.colour'],
    ['local_as past 32 bits', { ...REQ, local_as: 4294967296 }, 'body.local_as'],
    ['expected_nodes 1001', { ...REQ, expected_nodes: 1001 }, 'body.expected_nodes'],
    ['an unknown underlay_mode', { ...REQ, underlay_mode: 'isis' }, 'body.underlay_mode'],
    ['a bad peering IP', { ...REQ, fabric_switch_peering_ip: '10.0.0.256' }, 'body.fabric_switch_peering_ip'],
    ['vxlan_mtu past 9216', { ...REQ, vxlan_mtu: 9217 }, 'body.vxlan_mtu'],
    ['a huge number', '{"fabric_switch_nos":"sonic","management_cidr":"192.168.111.0/24","vxlan_mtu":1e400}', 'body.vxlan_mtu'],
  ];
  for (const [label, body, field] of BAD_REST) it(`REST refuses ${label} with a 400 naming ${field}`, async () => {
    const answer = await call(reader, 'POST', PLAN, body);
    expect([answer.status, answer.body.error.code, answer.body.error.details.field]).toEqual([400, 'INVALID_INPUT', field]);
    expect(answer.body.error.message.startsWith(`${field}: `)).toBe(true);
  });

  const BAD_GQL: [string, Record<string, unknown>, string][] = [
    ['a missing fabricSwitchNos', { fabricSwitchNos: null }, 'input.fabricSwitchNos'],
    ['a missing vxlanMtu', { vxlanMtu: null }, 'input.vxlanMtu'],
    ['a string for an Int', { vxlanMtu: 'x' }, '$i.vxlanMtu'],
    ['a NUL', { managementCidr: '192.168.111.0/24\u0000' }, '$i.managementCidr'],
    ['a lone surrogate', { fabricSwitchName: 'a\udc00' }, '$i.fabricSwitchName'],
    ['localAs past 4294967295', { localAs: 1e20 }, 'input.localAs'],
    ['an unknown underlayMode', { underlayMode: 'rip' }, 'input.underlayMode'],
  ];
  for (const [label, change, field] of BAD_GQL) it(`GraphQL refuses ${label} naming ${field}`, async () => {
    const answer = await query(reader, PLAN_DOC, { i: { ...GQL_REQ, ...change } });
    expect(codeOf(answer)).toBe('INVALID_INPUT');
    expect(answer.errors![0]!.message.startsWith(`${field}: `)).toBe(true);
  });

  it('authorization: no token 401, a tenant token 403, any platform grant plans', async () => {
    expect((await call(null, 'POST', PLAN, REQ)).status).toBe(401);
    const tenant = await call(tenantAdmin, 'POST', PLAN, REQ);
    expect([tenant.status, tenant.body.error.code]).toEqual([403, 'PERMISSION_DENIED']);
    expect(codeOf(await query(tenantAdmin, PLAN_DOC, { i: GQL_REQ }))).toBe('PERMISSION_DENIED');
    expect((await call(reader, 'POST', PLAN, REQ)).status).toBe(200);
  });

  it('no secret in any response, event or log line of this suite', async () => {
    const events = await prisma().event.findMany({ where: { type: { startsWith: 'fabric.' } } });
    const everything = [...seen, ...lines, JSON.stringify(events.map((e) => e.payload))].join('\n');
    // The suite did store one (so the scan could have found it).
    expect(seen.some((text) => text.includes('"bgp_password_is_set":true'))).toBe(true);
    expect(everything).not.toContain(BGP_PASSWORD);
  });
});
