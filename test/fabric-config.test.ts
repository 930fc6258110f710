import { capturingLogger, startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { DEFAULT_SETTINGS, mergeFabricInput, type FabricConfigInput, type FabricSettings } from '../src/modules/fabric/validate';
import { fabricReady, requireFabricReady } from '../src/modules/fabric/config';
import { AppError } from '../src/errors';
import { createHash } from 'node:crypto';
import { renderIntentOf } from '../src/modules/fabric/render-intent';
import { renderAllListenRangeSnippets } from '../src/modules/fabric/render/switch';
import { settingsOf } from '../src/modules/fabric/config';

const PATH = '/controlnode/fabric-config';
const BGP_PASSWORD = 'bgp-S3cret-zq81';
const OSPF_KEY = 'ospfK3y-77';
const OSPF_KEY_2 = 'ospfK3y-88';

/** A complete, valid REST body (every rule satisfied). */
const BASE_BODY = {
  as: 65000,
  fabric_switch_as: 65000,
  external_route_reflector: true,
  fabric_switch_name: 'spine1',
  fabric_switch_nos: 'sonic',
  fabric_switch_peering_ip: '10.255.0.254',
  fabric_switch_role: 'spine',
  management_cidr: '192.168.111.0/24',
  router_id_cidr: '10.255.0.1/24',
  ospf_enabled: true,
  ospf_fabric_interface: 'eth1',
  ospf_auth_type: 'message-digest',
  ospf_auth_key: OSPF_KEY,
  expected_nodes: 40,
  expected_vms: 800,
  vxlan_mtu: 9000,
};

const FULL = `fragment F on FabricConfig { as fabricSwitchAs bgpMode advertiseAllVni bfdEnabled externalRouteReflector bgpPasswordIsSet
  fabricSwitchName fabricSwitchNos fabricSwitchPeeringIp fabricSwitchRole managementCidr routerIdBase routerIdPrefixLen routerIdCidr
  ospfEnabled ospfArea ospfFabricInterface ospfHelloInterval ospfDeadInterval ospfAutoRefBw ospfAuthType ospfAuthKeyId ospfAuthKeyIsSet
  expectedNodes expectedVms vxlanMtu publicMtu rolloutStatus frrHmacShaCapable physnet lastJob
  lastSwitchAckKind lastSwitchAckBy lastSwitchAckAt lastSwitchAckNos lastSwitchAckHash version createdAt updatedAt }`;
const GET = `query { fabricConfig { ...F } } ${FULL}`;
const UPSERT = `mutation ($i: FabricConfigInput!) { upsertFabricConfig(input: $i) { created config { ...F } } } ${FULL}`;
const DELETE = 'mutation { deleteFabricConfig { deleted } }';

/** A stored intent the table's cases start from (valid as it is). */
const STORED: FabricSettings = {
  ...DEFAULT_SETTINGS,
  as: 65000,
  routerIdBase: '10.255.0.1',
  routerIdPrefixLen: 24,
  expectedNodes: 10,
  expectedVms: 100,
};

/**
 * The seed's sentences, one row each: the input on top of STORED and the field its refusal must
 * name (the GraphQL path; REST renames it, see the REST table below).
 */
const REFUSED: [string, FabricConfigInput, string, Partial<FabricSettings>?][] = [
  ['external RR without fabric_switch_peering_ip', { externalRouteReflector: true, fabricSwitchAs: 65001, fabricSwitchNos: 'eos' }, 'fabricSwitchPeeringIp'],
  ['external RR without fabric_switch_as', { externalRouteReflector: true, fabricSwitchPeeringIp: '10.0.0.1', fabricSwitchNos: 'eos' }, 'fabricSwitchAs'],
  ['external RR without a NOS', { externalRouteReflector: true, fabricSwitchPeeringIp: '10.0.0.1', fabricSwitchAs: 65001 }, 'fabricSwitchNos'],
  ['external RR on a NOS without BGP-EVPN rendering (other)', { externalRouteReflector: true, fabricSwitchPeeringIp: '10.0.0.1', fabricSwitchAs: 65001, fabricSwitchNos: 'other' }, 'fabricSwitchNos'],
  ['an unknown NOS', { fabricSwitchNos: 'junos' }, 'fabricSwitchNos'],
  ['an unknown switch role', { fabricSwitchRole: 'core' }, 'fabricSwitchRole'],
  ['an unknown ospf_auth_type', { ospfAuthType: 'md5' }, 'ospfAuthType'],
  ['message-digest without ospf_fabric_interface', { ospfAuthType: 'message-digest', ospfAuthKey: 'k' }, 'ospfFabricInterface'],
  ['hmac-sha-256 without ospf_fabric_interface', { ospfAuthType: 'hmac-sha-256', ospfAuthKey: 'k' }, 'ospfFabricInterface'],
  ['message-digest without a key', { ospfAuthType: 'message-digest', ospfFabricInterface: 'eth1' }, 'ospfAuthKey'],
  ['hmac-sha-256 never probed', { ospfAuthType: 'hmac-sha-256', ospfFabricInterface: 'eth1', ospfAuthKey: 'k' }, 'ospfAuthType'],
  ['hmac-sha-256 probed unsupported', { ospfAuthType: 'hmac-sha-256', ospfFabricInterface: 'eth1', ospfAuthKey: 'k' }, 'ospfAuthType', { frrHmacShaCapable: false }],
  ['an MD5 key longer than 16', { ospfAuthType: 'message-digest', ospfFabricInterface: 'eth1', ospfAuthKey: 'x'.repeat(17) }, 'ospfAuthKey'],
  ['a key with a space', { ospfAuthType: 'message-digest', ospfFabricInterface: 'eth1', ospfAuthKey: 'a b' }, 'ospfAuthKey'],
  ['a BGP password longer than 80', { bgpPassword: 'p'.repeat(81) }, 'bgpPassword'],
  ['a BGP password with a newline', { bgpPassword: 'line\nbreak' }, 'bgpPassword'],
  ['clear and set the BGP password at once', { bgpPassword: 'fresh-pass-1', clearBgpPassword: true }, 'clearBgpPassword'],
  ['clear and set the OSPF key at once', { ospfAuthKey: 'fresh-key-1', clearOspfAuthKey: true }, 'clearOspfAuthKey'],
  ['ospf_auth_key_id 0', { ospfAuthKeyId: 0 }, 'ospfAuthKeyId'],
  ['ospf_auth_key_id 256', { ospfAuthKeyId: 256 }, 'ospfAuthKeyId'],
  ['expected_nodes 0 on a sized row', { expectedNodes: 0 }, 'expectedNodes'],
  ['expected_nodes 1001', { expectedNodes: 1001 }, 'expectedNodes'],
  ['expected_vms 0 on a sized row', { expectedVms: 0 }, 'expectedVms'],
  ['expected_vms 10001', { expectedVms: 10001 }, 'expectedVms'],
  ['expected_nodes a fraction', { expectedNodes: 1.5 }, 'expectedNodes'],
  ['vxlan_mtu 9217', { vxlanMtu: 9217 }, 'vxlanMtu'],
  ['vxlan_mtu 0', { vxlanMtu: 0 }, 'vxlanMtu'],
  ['public_mtu 9217', { publicMtu: 9217 }, 'publicMtu'],
  ['as 0', { as: 0 }, 'as'],
  ['as 4294967296', { as: 4294967296 }, 'as'],
  ['as a fraction', { as: 65000.5 }, 'as'],
  ['as negative', { as: -1 }, 'as'],
  ['fabric_switch_as 4294967296', { fabricSwitchAs: 4294967296 }, 'fabricSwitchAs'],
  ['a peering IP with a short form', { fabricSwitchPeeringIp: '10.1' }, 'fabricSwitchPeeringIp'],
  ['a peering IP in hex', { fabricSwitchPeeringIp: '0x0a.0.0.1' }, 'fabricSwitchPeeringIp'],
  ['a peering IP with an octet past 255', { fabricSwitchPeeringIp: '10.0.0.256' }, 'fabricSwitchPeeringIp'],
  ['a peering IP that is IPv6', { fabricSwitchPeeringIp: 'fd00::1' }, 'fabricSwitchPeeringIp'],
  ['a router id base that is a hostname', { routerIdBase: 'spine1' }, 'routerIdBase'],
  ['router_id_prefix_len 31', { routerIdPrefixLen: 31 }, 'routerIdPrefixLen'],
  ['router_id_prefix_len 7', { routerIdPrefixLen: 7 }, 'routerIdPrefixLen'],
  ['a router_id_cidr without a prefix', { routerIdCidr: '10.255.0.1' }, 'routerIdCidr'],
  ['a router_id_cidr /33', { routerIdCidr: '10.255.0.1/33' }, 'routerIdCidr'],
  ['a router_id_cidr /31', { routerIdCidr: '10.255.0.1/31' }, 'routerIdCidr'],
  ['a router_id_cidr disagreeing with router_id_base', { routerIdCidr: '10.255.0.1/24', routerIdBase: '10.254.0.1' }, 'routerIdCidr'],
  ['a router id base with no prefix length', { routerIdPrefixLen: 0 }, 'routerIdPrefixLen'],
  ['a management CIDR that is an address', { managementCidr: '192.168.111.0' }, 'managementCidr'],
  ['a management CIDR with a bad prefix', { managementCidr: '192.168.111.0/40' }, 'managementCidr'],
  ['an OSPF area that is neither dotted nor decimal', { ospfArea: 'backbone' }, 'ospfArea'],
  ['an OSPF area past 32 bits', { ospfArea: '4294967296' }, 'ospfArea'],
  ['an interface name longer than 15', { ospfFabricInterface: 'e'.repeat(16) }, 'ospfFabricInterface'],
  ['an interface name with a slash', { ospfFabricInterface: 'eth/1' }, 'ospfFabricInterface'],
  ['a switch name with a space', { fabricSwitchName: 'spine 1' }, 'fabricSwitchName'],
  ['a dead interval not longer than hello', { ospfHelloInterval: 10, ospfDeadInterval: 10 }, 'ospfDeadInterval'],
  ['an hello interval past 65535', { ospfHelloInterval: 65536 }, 'ospfHelloInterval'],
  ['an auto reference bandwidth past FRR\'s range', { ospfAutoRefBw: 4294968 }, 'ospfAutoRefBw'],
];

describe('fabric config validation (pure rules)', () => {
  // Plain it() per row: it.each over these tables hung jest here before any test ran (cause not found; the same rows pass in a loop).
  for (const [label, input, field, stored] of REFUSED) it(`refuses ${label}, naming the field`, () => {
    let caught: { code: string; details: unknown; message: string } | string = 'nothing thrown';
    try {
      mergeFabricInput({ ...STORED, ...stored }, input);
    } catch (error) {
      // Plain values only: jest's diff of a GraphQLError is slow to print.
      caught = error instanceof AppError ? { code: error.code, details: error.extensions.details, message: error.message } : String(error);
    }
    expect(typeof caught).toBe('object');
    const refusal = caught as { code: string; details: unknown; message: string };
    expect(refusal.code).toBe('INVALID_INPUT');
    expect(refusal.details).toEqual({ field: `input.${field}` });
    expect(refusal.message.startsWith(`input.${field}: `)).toBe(true);
    // Secrets are never repeated.
    for (const secret of [input.bgpPassword, input.ospfAuthKey]) if (secret && secret.length > 2) expect(refusal.message).not.toContain(secret);
  });

  const ACCEPTED: [string, FabricConfigInput, Partial<FabricSettings>, Partial<FabricSettings>?][] = [
    ['external RR with peering IP, AS and an EVPN NOS', { externalRouteReflector: true, fabricSwitchPeeringIp: '10.0.0.1', fabricSwitchAs: 65001, fabricSwitchNos: 'nxos' }, { externalRouteReflector: true }],
    ['each BGP-EVPN NOS', { externalRouteReflector: true, fabricSwitchPeeringIp: '10.0.0.1', fabricSwitchAs: 65001, fabricSwitchNos: 'cumulus' }, { fabricSwitchNos: 'cumulus' }],
    ['ospf_auth_type empty', { ospfAuthType: '' }, { ospfAuthType: '' }],
    ['ospf_auth_type none without an interface', { ospfAuthType: 'none' }, { ospfAuthType: 'none' }],
    ['message-digest with interface and a 16-character key', { ospfAuthType: 'message-digest', ospfFabricInterface: 'eth1', ospfAuthKey: 'k'.repeat(16) }, { ospfAuthKeySet: true }],
    ['hmac-sha-256 once probed capable', { ospfAuthType: 'hmac-sha-256', ospfFabricInterface: 'eth1', ospfAuthKey: 'k'.repeat(40) }, { ospfAuthType: 'hmac-sha-256' }, { frrHmacShaCapable: true }],
    ['the bounds of the sizing hints', { expectedNodes: 1000, expectedVms: 10000 }, { expectedNodes: 1000, expectedVms: 10000 }],
    ['vxlan_mtu 9216', { vxlanMtu: 9216 }, { vxlanMtu: 9216 }],
    ['the largest AS', { as: 4294967295 }, { as: 4294967295 }],
    ['router_id_cidr decoded', { routerIdCidr: '10.254.8.1/22' }, { routerIdBase: '10.254.8.1', routerIdPrefixLen: 22 }],
    ['router_id_cidr agreeing with base and prefix', { routerIdCidr: '10.254.8.1/22', routerIdBase: '10.254.8.1', routerIdPrefixLen: 22 }, { routerIdPrefixLen: 22 }],
    ['an OSPF area in decimal', { ospfArea: '10' }, { ospfArea: '10' }],
    ['an empty secret (unchanged)', { bgpPassword: '' }, { bgpPasswordSet: true }, { bgpPasswordSet: true }],
    ['a clear', { clearBgpPassword: true }, { bgpPasswordSet: false }, { bgpPasswordSet: true }],
  ];
  for (const [label, input, expected, stored] of ACCEPTED) it(`accepts ${label}`, () => {
    expect(mergeFabricInput({ ...STORED, ...stored }, input)).toMatchObject(expected);
  });

  it('frr_hmac_sha_capable cannot be set through the input: it keeps the stored finding', () => {
    const input = { frrHmacShaCapable: true } as unknown as FabricConfigInput;
    expect(mergeFabricInput(STORED, input).frrHmacShaCapable).toBeNull();
  });

  it('a new row needs as and both sizing hints; a legacy row (both hints 0) skips the sizing check', () => {
    expect(() => mergeFabricInput(null, { expectedNodes: 5, expectedVms: 5 })).toThrow(/^input\.as: is required/);
    expect(() => mergeFabricInput(null, { as: 65000, expectedVms: 5 })).toThrow(/^input\.expectedNodes: must be between 1 and 1000/);
    expect(() => mergeFabricInput(null, { as: 65000, expectedNodes: 5 })).toThrow(/^input\.expectedVms: must be between 1 and 10000/);
    const legacy = { ...STORED, expectedNodes: 0, expectedVms: 0 };
    expect(mergeFabricInput(legacy, { bfdEnabled: true })).toMatchObject({ bfdEnabled: true, expectedNodes: 0 });
    expect(() => mergeFabricInput(legacy, { expectedNodes: 1001 })).toThrow(/^input\.expectedNodes/);
  });
});

describe('fabric config over REST and GraphQL (real service and database)', () => {
  let t: TestApp;
  const lines: string[] = [];
  let admin: string;
  let platformReader: string;
  let tenantAdmin: string;
  const seen: string[] = [];
  /** Every response text is kept, to prove that no secret ever comes back. */
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
  const prisma = () => t.app.database.prisma;
  const row = () => prisma().fabricConfig.findUnique({ where: { id: 1 } });
  const reset = async () => {
    await prisma().fabricConfig.deleteMany({});
    await prisma().secret.deleteMany({ where: { tenantId: null } });
  };

  beforeAll(async () => {
    t = await startTestApp({}, { log: capturingLogger(lines) });
    admin = t.adminToken;
    const tree = await makeTenantTree(prisma(), 'fabric', { pools: 1, nodesPerPool: 0 });
    platformReader = await makeToken(prisma(), null, [{ permission: 'compute:sites:read', scopeType: 'platform', scopeId: null }]);
    tenantAdmin = await makeToken(prisma(), tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  });
  afterAll(() => t.stop());

  it('REST: GET 404 before any config, POST creates (created true), updates (created false), GET shows the derived fields, DELETE hard-deletes', async () => {
    await reset();
    const missing = await call(admin, 'GET', PATH);
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('NOT_FOUND');

    const created = await call(admin, 'POST', PATH, { ...BASE_BODY, bgp_password: BGP_PASSWORD });
    expect(created.status).toBe(200);
    expect(created.body.created).toBe(true);
    expect(created.body.config).toMatchObject({
      as: 65000, fabric_switch_as: 65000, bgp_mode: 'ibgp', router_id_base: '10.255.0.1', router_id_prefix_len: 24,
      router_id_cidr: '10.255.0.1/24', bgp_password_is_set: true, ospf_auth_key_is_set: true, rollout_status: 'pending',
      physnet: null, last_job: null, frr_hmac_sha_capable: null, expected_nodes: 40, version: 1,
    });
    expect(created.body.config).not.toHaveProperty('bgp_password');
    expect(created.body.config).not.toHaveProperty('ospf_auth_key');

    // eBGP once the switch has an AS of its own; fields left out keep their value.
    const updated = await call(admin, 'POST', PATH, { fabric_switch_as: 65100 });
    expect(updated.status).toBe(200);
    expect(updated.body.created).toBe(false);
    expect(updated.body.config).toMatchObject({ fabric_switch_as: 65100, bgp_mode: 'ebgp', expected_nodes: 40, bgp_password_is_set: true, version: 2 });

    const got = await call(platformReader, 'GET', PATH);
    expect(got.status).toBe(200);
    expect(got.body).toEqual(updated.body.config);

    // A GET body posted back as it is: read-only fields are accepted and change nothing.
    const roundTrip = await call(admin, 'POST', PATH, { ...got.body, frr_hmac_sha_capable: true, rollout_status: 'failed', bgp_mode: 'ibgp' });
    expect(roundTrip.status).toBe(200);
    expect(roundTrip.body.config).toMatchObject({ frr_hmac_sha_capable: null, rollout_status: 'pending', bgp_mode: 'ebgp', bgp_password_is_set: true, version: 3 });

    const deleted = await call(admin, 'DELETE', PATH);
    expect(deleted.status).toBe(200);
    expect(deleted.body).toEqual({ deleted: true, message: 'fabric config deleted' });
    expect(await row()).toBeNull();
    expect(await prisma().secret.count({ where: { tenantId: null } })).toBe(0);
    expect((await call(admin, 'GET', PATH)).status).toBe(404);
    expect((await call(admin, 'DELETE', PATH)).status).toBe(404);
  });

  it('GraphQL: null before any config, upsert created true then false, query, delete, NOT_FOUND on a second delete', async () => {
    await reset();
    expect((await query(admin, GET)).data!.fabricConfig).toBeNull();
    const input = { as: 65010, routerIdCidr: '10.250.0.1/23', expectedNodes: 3, expectedVms: 30, bgpPassword: BGP_PASSWORD };
    const first = await query(admin, UPSERT, { i: input });
    expect(first.errors).toBeUndefined();
    expect(first.data!.upsertFabricConfig).toMatchObject({ created: true, config: { as: 65010, bgpMode: 'ibgp', routerIdBase: '10.250.0.1', routerIdPrefixLen: 23, routerIdCidr: '10.250.0.1/23', bgpPasswordIsSet: true, rolloutStatus: 'pending', physnet: null, lastJob: null } });
    const second = await query(admin, UPSERT, { i: { bfdEnabled: true, fabricSwitchAs: 4294967295 } });
    expect(second.data!.upsertFabricConfig).toMatchObject({ created: false, config: { bfdEnabled: true, fabricSwitchAs: 4294967295, bgpMode: 'ebgp', version: 2 } });
    const read = await query(platformReader, GET);
    expect(read.data!.fabricConfig).toEqual(second.data!.upsertFabricConfig.config);
    // frrHmacShaCapable is not an input field at all.
    const sneaky = await query(admin, UPSERT, { i: { frrHmacShaCapable: true } });
    expect(codeOf(sneaky)).toBe('INVALID_INPUT');
    expect(sneaky.errors![0]!.message).toMatch(/frrHmacShaCapable: is not a known field/);
    expect((await query(admin, DELETE)).data!.deleteFabricConfig).toEqual({ deleted: true });
    expect(codeOf(await query(admin, DELETE))).toBe('NOT_FOUND');
  });

  it('concurrent first upserts: exactly one creates, the other updates', async () => {
    await reset();
    const answers = await Promise.all([0, 1, 2].map((i) => call(admin, 'POST', PATH, { ...BASE_BODY, expected_nodes: 10 + i })));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    expect(answers.filter((a) => a.body.created === true)).toHaveLength(1);
    expect((await row())!.version).toBe(3);
  });

  it('every validation rule over REST: 400 naming the snake_case body field, nothing written', async () => {
    await reset();
    expect((await call(admin, 'POST', PATH, { ...BASE_BODY, bgp_password: BGP_PASSWORD })).status).toBe(200);
    const before = await row();
    const events = await prisma().event.count();
    const snake = (name: string) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
    for (const [label, input, field, stored] of REFUSED) {
      if (stored) continue; // set by the probe only: covered below
      // A fresh key for each case, on a config where ERR and OSPF auth are off unless the case turns them on.
      const body: Record<string, unknown> = { external_route_reflector: false, ospf_auth_type: '', fabric_switch_nos: 'sonic' };
      for (const [k, v] of Object.entries(input)) body[snake(k)] = v;
      if (input.externalRouteReflector) { body.fabric_switch_as = input.fabricSwitchAs ?? 0; body.fabric_switch_peering_ip = input.fabricSwitchPeeringIp ?? ''; body.fabric_switch_nos = input.fabricSwitchNos ?? ''; }
      if (input.ospfAuthType && input.ospfAuthType !== 'md5') { body.ospf_fabric_interface = input.ospfFabricInterface ?? ''; body.clear_ospf_auth_key = input.ospfAuthKey === undefined; }
      // as 4294967296 and fractions are refused before GraphQL: by the route's JSON Schema or GraphQL's Int.
      const answer = await call(admin, 'POST', PATH, body);
      expect([label, answer.status]).toEqual([label, 400]);
      expect([label, answer.body.error.code]).toEqual([label, 'INVALID_INPUT']);
      expect([label, answer.body.error.details.field]).toEqual([label, `body.${snake(field)}`]);
      expect(answer.body.error.message).not.toMatch(/input\./);
    }
    const after = await row();
    expect(after).toEqual(before);
    expect(await prisma().event.count()).toBe(events);
  });

  it('hmac-sha-256 is refused until the probe proved it (input cannot prove it), accepted after', async () => {
    await reset();
    expect((await call(admin, 'POST', PATH, BASE_BODY)).status).toBe(200);
    const hmac = { ospf_auth_type: 'hmac-sha-256', ospf_auth_key: 'k'.repeat(32), frr_hmac_sha_capable: true };
    const refused = await call(admin, 'POST', PATH, hmac);
    expect(refused.status).toBe(400);
    expect(refused.body.error.details.field).toBe('body.ospf_auth_type');
    expect(refused.body.error.message).toMatch(/never probed/);
    await prisma().fabricConfig.update({ where: { id: 1 }, data: { frrHmacShaCapable: false } });
    expect((await call(admin, 'POST', PATH, hmac)).body.error.message).toMatch(/FRR 9\.1/);
    // What the preflight probe writes when the nodes' FRR can do it.
    await prisma().fabricConfig.update({ where: { id: 1 }, data: { frrHmacShaCapable: true } });
    const accepted = await call(admin, 'POST', PATH, hmac);
    expect(accepted.status).toBe(200);
    expect(accepted.body.config).toMatchObject({ ospf_auth_type: 'hmac-sha-256', frr_hmac_sha_capable: true });
  });

  it('a config created after a preflight starts from the preflight\'s FRR finding (the probe ran before any config existed)', async () => {
    await reset();
    const hmac = { ...BASE_BODY, ospf_auth_type: 'hmac-sha-256', ospf_auth_key: 'k'.repeat(32) };
    // What the preflight writes when there is no config row yet: its finding in fabric_preflight only.
    const finding = (capable: boolean | null) => prisma().fabricPreflight.upsert({
      where: { id: 1 },
      create: { id: 1, underlayCidr: '10.60.200.0/24', underlayMtu: 9000, ready: true, nodeCount: 1, frrHmacShaCapable: capable },
      update: { frrHmacShaCapable: capable },
    });
    try {
      await finding(false);
      const refused = await call(admin, 'POST', PATH, hmac);
      expect(refused.status).toBe(400);
      expect(refused.body.error.details.field).toBe('body.ospf_auth_type');
      expect(await row()).toBeNull();
      await finding(true);
      const created = await call(admin, 'POST', PATH, hmac);
      expect(created.status).toBe(200);
      expect(created.body).toMatchObject({ created: true, config: { ospf_auth_type: 'hmac-sha-256', frr_hmac_sha_capable: true } });
      await reset();
      await finding(null);
      expect((await call(admin, 'POST', PATH, BASE_BODY)).body.config.frr_hmac_sha_capable).toBeNull();
    } finally {
      await prisma().fabricPreflight.deleteMany({});
    }
  });

  it('a legacy row (sizing hints both 0) updates without them; a value it is given is checked', async () => {
    await reset();
    await prisma().fabricConfig.create({ data: { id: 1, as: 64512n } });
    const ok = await call(admin, 'POST', PATH, { bfd_enabled: true });
    expect(ok.status).toBe(200);
    expect(ok.body.config).toMatchObject({ expected_nodes: 0, expected_vms: 0, bfd_enabled: true, as: 64512 });
    const bad = await call(admin, 'POST', PATH, { expected_nodes: 1001 });
    expect(bad.status).toBe(400);
    expect(bad.body.error.details.field).toBe('body.expected_nodes');
    // A new row has no such exemption.
    await reset();
    const fresh = await call(admin, 'POST', PATH, { as: 65000 });
    expect(fresh.status).toBe(400);
    expect(fresh.body.error.details.field).toBe('body.expected_nodes');
  });

  const BAD_REST: [string, unknown, string][] = [
    ['a NUL in a string', { ...BASE_BODY, fabric_switch_name: 'spine\u00001' }, 'body.fabric_switch_name'],
    ['a string for an integer', { ...BASE_BODY, as: '65000' }, 'body.as'],
    ['a number for a string', { ...BASE_BODY, management_cidr: 10 }, 'body.management_cidr'],
    ['an object for a boolean', { ...BASE_BODY, bfd_enabled: { yes: true } }, 'body.bfd_enabled'],
    ['an array for a string', { ...BASE_BODY, bgp_password: ['a'] }, 'body.bgp_password'],
    ['a 300-character string', { ...BASE_BODY, fabric_switch_name: 'a'.repeat(300) }, 'body.fabric_switch_name'],
    ['an integer past 32 bits for an Int field', { ...BASE_BODY, vxlan_mtu: 2 ** 40 }, 'body.vxlan_mtu'],
    ['an AS past 32 bits', { ...BASE_BODY, as: 2 ** 53 }, 'body.as'],
    ['an unknown field', { ...BASE_BODY, colour: 'blue' }, 'body.colour'],
  ];
  for (const [label, body, field] of BAD_REST) it(`REST refuses ${label} with a 400 naming the field`, async () => {
    const answer = await call(admin, 'POST', PATH, body);
    expect(answer.status).toBe(400);
    expect(answer.body.error.code).toBe('INVALID_INPUT');
    expect(answer.body.error.details.field).toBe(field);
  });

  it('REST refuses a number too large for JSON doubles and a non-object body', async () => {
    const huge = await call(admin, 'POST', PATH, '{"as": 1e400}');
    expect(huge.status).toBe(400);
    expect(huge.body.error.details.field).toBe('body.as');
    const list = await call(admin, 'POST', PATH, '[1]');
    expect(list.status).toBe(400);
    expect(list.body.error.details.field).toBe('body');
  });

  // Coercion refusals name the variable ($i), the domain's the input argument.
  const BAD_GQL: [string, Record<string, unknown>, string][] = [
    ['a string for as', { as: 'x' }, '$i.as'],
    ['a fraction for an Int', { vxlanMtu: 1500.5 }, '$i.vxlanMtu'],
    ['an Int past 32 bits', { expectedNodes: 2 ** 40 }, '$i.expectedNodes'],
    ['a NUL', { ospfArea: '0.0.0.0\u0000' }, '$i.ospfArea'],
    ['an AS past 4294967295', { as: 1e20 }, 'input.as'],
  ];
  for (const [label, input, field] of BAD_GQL) it(`GraphQL refuses ${label} naming the field`, async () => {
    const answer = await query(admin, UPSERT, { i: input });
    expect(codeOf(answer)).toBe('INVALID_INPUT');
    expect(answer.errors![0]!.message.startsWith(`${field}: `)).toBe(true);
  });

  it('authorization: no token 401; a tenant admin 403 everywhere; a platform reader reads but cannot write; platform admin writes', async () => {
    await reset();
    expect((await call(admin, 'POST', PATH, BASE_BODY)).status).toBe(200);
    for (const [method, body] of [['GET', undefined], ['POST', BASE_BODY], ['DELETE', undefined]] as const) {
      expect((await call(null, method, PATH, body)).status).toBe(401);
      const tenant = await call(tenantAdmin, method, PATH, body);
      expect([method, tenant.status, tenant.body.error.code]).toEqual([method, 403, 'PERMISSION_DENIED']);
    }
    expect((await call(platformReader, 'GET', PATH)).status).toBe(200);
    expect((await call(platformReader, 'POST', PATH, { bfd_enabled: true })).status).toBe(403);
    expect((await call(platformReader, 'DELETE', PATH)).status).toBe(403);
    expect(codeOf(await query(tenantAdmin, GET))).toBe('PERMISSION_DENIED');
    expect(codeOf(await query(platformReader, UPSERT, { i: { bfdEnabled: true } }))).toBe('PERMISSION_DENIED');
    expect(codeOf(await query(platformReader, DELETE))).toBe('PERMISSION_DENIED');
    expect(await row()).not.toBeNull();
  });

  it('secrets: stored in the broker, never in the row, a response, an event or a log line; empty = unchanged, a new one replaces, clear removes', async () => {
    await reset();
    await call(admin, 'POST', PATH, { ...BASE_BODY, bgp_password: BGP_PASSWORD, ospf_auth_key: OSPF_KEY });
    const first = (await row())!;
    expect(first.bgpPasswordRef).toMatch(/^secret:\/\//);
    expect(first.ospfAuthKeyRef).toMatch(/^secret:\/\//);
    expect(await t.app.services.secrets!.get(first.bgpPasswordRef!, null)).toBe(BGP_PASSWORD);
    expect(await t.app.services.secrets!.get(first.ospfAuthKeyRef!, null)).toBe(OSPF_KEY);

    // Empty input = unchanged: same references.
    await call(admin, 'POST', PATH, { bgp_password: '', ospf_auth_key: '' });
    expect(await row()).toMatchObject({ bgpPasswordRef: first.bgpPasswordRef, ospfAuthKeyRef: first.ospfAuthKeyRef });

    // A new key replaces the old one, whose secret is removed.
    await call(admin, 'POST', PATH, { ospf_auth_key: OSPF_KEY_2 });
    const second = (await row())!;
    expect(second.ospfAuthKeyRef).not.toBe(first.ospfAuthKeyRef);
    expect(await t.app.services.secrets!.get(second.ospfAuthKeyRef!, null)).toBe(OSPF_KEY_2);
    expect(await prisma().secret.count({ where: { id: first.ospfAuthKeyRef!.slice('secret://'.length) } })).toBe(0);

    // Clear removes it (and its secret row); the other stays.
    const cleared = await call(admin, 'POST', PATH, { clear_bgp_password: true });
    expect(cleared.body.config).toMatchObject({ bgp_password_is_set: false, ospf_auth_key_is_set: true });
    expect((await row())!.bgpPasswordRef).toBeNull();
    expect(await prisma().secret.count({ where: { id: first.bgpPasswordRef!.slice('secret://'.length) } })).toBe(0);

    // A refused input with a secret in it does not repeat it.
    const refused = await call(admin, 'POST', PATH, { bgp_password: `${BGP_PASSWORD} with space` });
    expect(refused.status).toBe(400);

    const fabricEvents = await prisma().event.findMany({ where: { type: { startsWith: 'fabric.' } } });
    const everything = [...seen, ...lines, JSON.stringify(fabricEvents.map((e) => e.payload))].join('\n');
    for (const secret of [BGP_PASSWORD, OSPF_KEY, OSPF_KEY_2]) expect(everything).not.toContain(secret);
    // The row's text holds references only.
    expect(JSON.stringify(await row(), (_k, v) => (typeof v === 'bigint' ? String(v) : v))).not.toMatch(new RegExp(`${BGP_PASSWORD}|${OSPF_KEY}`));
    // The scan above can see secrets: the event of a password change names the field, not the value.
    expect(fabricEvents.some((e) => (e.payload as { changed: string[] }).changed.includes('ospfAuthKey'))).toBe(true);
  });

  it('publishes fabric.config.created / updated / deleted in the same transaction, naming what changed', async () => {
    await reset();
    const start = await prisma().event.aggregate({ _max: { id: true } });
    const since = start._max.id ?? 0n;
    await call(admin, 'POST', PATH, BASE_BODY);
    await call(admin, 'POST', PATH, { bfd_enabled: true, vxlan_mtu: 9000 });
    await call(admin, 'POST', PATH, { bfd_enabled: 'yes' }); // refused: no event
    await call(admin, 'DELETE', PATH);
    const events = await prisma().event.findMany({ where: { id: { gt: since }, type: { startsWith: 'fabric.' } }, orderBy: { id: 'asc' } });
    expect(events.map((e) => e.type)).toEqual(['fabric.config.created', 'fabric.config.updated', 'fabric.config.deleted']);
    expect(events.every((e) => e.tenantId === null && e.subject === 'fabric-config')).toBe(true);
    expect((events[1]!.payload as { changed: string[] }).changed).toEqual(['bfdEnabled']); // vxlan_mtu did not change
    expect((events[0]!.payload as { version: number }).version).toBe(1);
  });

  it('fabricReady: false without a config, true for an empty (legacy) or ready status, false for every other status', async () => {
    await reset();
    const ctx = { prisma: prisma() };
    expect(await fabricReady(ctx)).toBe(false);
    await expect(requireFabricReady(ctx)).rejects.toMatchObject({ code: 'INVALID_STATE' });
    await call(admin, 'POST', PATH, BASE_BODY);
    // Saved, not rolled out (rollout.ts); a legacy row's empty status reads as ready.
    expect((await row())!.rolloutStatus).toBe('pending');
    expect(await fabricReady(ctx)).toBe(false);
    await prisma().fabricConfig.update({ where: { id: 1 }, data: { rolloutStatus: '' } });
    expect(await fabricReady(ctx)).toBe(true);
    for (const status of ['pending', 'rolling_out', 'failed', 'degraded']) {
      await prisma().fabricConfig.update({ where: { id: 1 }, data: { rolloutStatus: status } });
      expect([status, await fabricReady(ctx)]).toEqual([status, false]);
      await expect(requireFabricReady(ctx)).rejects.toMatchObject({ code: 'INVALID_STATE' });
      expect((await call(admin, 'GET', PATH)).body.rollout_status).toBe(status);
    }
    await prisma().fabricConfig.update({ where: { id: 1 }, data: { rolloutStatus: 'ready' } });
    expect(await fabricReady(ctx)).toBe(true);
    await expect(requireFabricReady(ctx)).resolves.toBeUndefined();
  });

  it('the table allows one row only and only known rollout statuses, whoever writes it', async () => {
    await reset();
    await expect(prisma().$executeRawUnsafe(`INSERT INTO fabric_config (id, "as") VALUES (2, 65000)`)).rejects.toThrow(/fabric_config_singleton/);
    await prisma().fabricConfig.create({ data: { id: 1, as: 65000n } });
    await expect(prisma().$executeRawUnsafe(`UPDATE fabric_config SET rollout_status = 'unknown'`)).rejects.toThrow(/fabric_config_rollout_status/);
    await expect(prisma().$executeRawUnsafe(`UPDATE fabric_config SET bgp_password_ref = 'plaintext'`)).rejects.toThrow(/fabric_config_secret_refs/);
  });
  // ---- the switch re-config ack gate (issue 10 item 3) ----

  const sha = (text: string) => createHash('sha256').update(text).digest('hex');
  const maxEvent = async () => (await prisma().event.aggregate({ _max: { id: true } }))._max.id ?? 0n;
  const fabricEventsSince = (since: bigint) =>
    prisma().event.findMany({ where: { id: { gt: since }, type: { startsWith: 'fabric.' } }, orderBy: { id: 'asc' } });
  /** The snippets the module renders for this exact before/after (what the 409 must carry). */
  const expectedSnippets = (before: FabricSettings, after: FabricSettings) =>
    renderAllListenRangeSnippets(renderIntentOf(before), renderIntentOf(after))
      .map((x) => ({ nos: x.nos, snippet: x.snippet, verify_command: x.verifyCommand, sha256: x.sha256 }));

  it('ack gate: a VTEP pool change answers 409 REQUIRES_SWITCH_RECONFIG_ACK with every NOS\'s snippet and nothing is written; the acked re-POST goes through and is audited', async () => {
    await reset();
    expect((await call(admin, 'POST', PATH, { ...BASE_BODY, bgp_password: BGP_PASSWORD })).status).toBe(200);
    const before = (await row())!;
    const since = await maxEvent();

    const gated = await call(admin, 'POST', PATH, { router_id_cidr: '10.255.0.1/23' });
    expect(gated.status).toBe(409);
    expect(gated.body.error.code).toBe('REQUIRES_SWITCH_RECONFIG_ACK');
    const details = gated.body.error.details;
    expect(details.default_nos).toBe('sonic');
    expect(details.pool_before).toBe('10.255.0.1/24');
    expect(details.pool_after).toBe('10.255.0.1/23');
    expect(details.snippets.map((x: { nos: string }) => x.nos)).toEqual(['sonic', 'cumulus', 'nxos', 'eos', 'other']);
    for (const x of details.snippets) expect([x.nos, x.sha256]).toEqual([x.nos, sha(x.snippet)]);
    const after = { ...settingsOf(before), routerIdPrefixLen: 23 };
    expect(details.snippets).toEqual(expectedSnippets(settingsOf(before), after));
    const sonic = details.snippets[0];
    expect(sonic.snippet).toContain('no bgp listen range 10.255.0.0/24 peer-group HOSTS');
    expect(sonic.snippet).toContain('bgp listen range 10.255.0.0/23 peer-group HOSTS');
    expect(sonic.verify_command).toMatch(/show bgp peer-group HOSTS/);
    // The same change through the one-field form and the two-field form is the same gate.
    const twoFields = await call(admin, 'POST', PATH, { router_id_base: '10.255.0.1', router_id_prefix_len: 23 });
    expect(twoFields.status).toBe(409);
    expect(twoFields.body.error.details.snippets).toEqual(details.snippets);
    const moved = await call(admin, 'POST', PATH, { router_id_base: '10.254.0.1' });
    expect([moved.status, moved.body.error.code]).toEqual([409, 'REQUIRES_SWITCH_RECONFIG_ACK']);

    // Incomplete or wrong acks: 400 naming the field, or the same 409 (with fresh snippets) for a hash that does not match.
    const eos = details.snippets.find((x: { nos: string }) => x.nos === 'eos');
    const incomplete: [Record<string, unknown>, string][] = [
      [{ switch_acked: true, switch_snippet_hash: sonic.sha256 }, 'body.acked_by'],
      [{ switch_acked: true, acked_by: 'jdoe' }, 'body.switch_snippet_hash'],
      [{ switch_acked: true, acked_by: 'jdoe', switch_snippet_hash: 'abc' }, 'body.switch_snippet_hash'],
      [{ switch_acked: true, acked_by: 'jdoe', switch_snippet_hash: sonic.sha256.toUpperCase() }, 'body.switch_snippet_hash'],
      [{ switch_acked: true, acked_by: 'jdoe', switch_snippet_hash: sonic.sha256, switch_nos: 'junos' }, 'body.switch_nos'],
      [{ switch_acked: true, acked_by: 'jd\u0007oe', switch_snippet_hash: sonic.sha256 }, 'body.acked_by'],
      [{ switch_acked: true, acked_by: 'jd\u0000oe', switch_snippet_hash: sonic.sha256 }, 'body.acked_by'],
      [{ switch_acked: true, acked_by: 'jd\ud800oe', switch_snippet_hash: sonic.sha256 }, 'body.acked_by'],
      [{ switch_acked: true, acked_by: 'jdoe', switch_snippet_hash: sonic.sha256, switch_nos: 's'.repeat(5000) }, 'body.switch_nos'],
      [{ switch_acked: true, acked_by: ['jdoe'], switch_snippet_hash: sonic.sha256 }, 'body.acked_by'],
      [{ switch_acked: true, acked_by: '   ', switch_snippet_hash: sonic.sha256 }, 'body.acked_by'],
      [{ switch_acked: true, acked_by: 'j'.repeat(129), switch_snippet_hash: sonic.sha256 }, 'body.acked_by'],
      [{ switch_acked: 'yes', acked_by: 'jdoe', switch_snippet_hash: sonic.sha256 }, 'body.switch_acked'],
      [{ switch_acked: true, skip_switch_ack: true, acked_by: 'jdoe', switch_snippet_hash: sonic.sha256 }, 'body.skip_switch_ack'],
    ];
    for (const [extra, field] of incomplete) {
      const answer = await call(admin, 'POST', PATH, { router_id_cidr: '10.255.0.1/23', ...extra });
      expect([field, answer.status, answer.body.error.details?.field]).toEqual([field, 400, field]);
    }
    for (const [extra, nos] of [[{ switch_snippet_hash: eos.sha256 }, 'sonic'], [{ switch_snippet_hash: sonic.sha256, switch_nos: 'eos' }, 'eos']] as const) {
      const mismatch = await call(admin, 'POST', PATH, { router_id_cidr: '10.255.0.1/23', switch_acked: true, acked_by: 'jdoe', ...extra });
      expect([nos, mismatch.status, mismatch.body.error.code]).toEqual([nos, 409, 'REQUIRES_SWITCH_RECONFIG_ACK']);
      expect(mismatch.body.error.details.field).toBe('body.switch_snippet_hash');
      expect(mismatch.body.error.message).toContain(`${nos} snippet`);
      expect(mismatch.body.error.details.snippets).toEqual(details.snippets);
    }
    // A hash for another change (the /22 one) does not ack this one.
    const other22 = expectedSnippets(settingsOf(before), { ...settingsOf(before), routerIdPrefixLen: 22 })[0]!;
    const stale = await call(admin, 'POST', PATH, { router_id_cidr: '10.255.0.1/23', switch_acked: true, acked_by: 'jdoe', switch_snippet_hash: other22.sha256 });
    expect([stale.status, stale.body.error.code]).toEqual([409, 'REQUIRES_SWITCH_RECONFIG_ACK']);
    // None of the refusals wrote anything.
    expect(await row()).toEqual(before);
    expect(await fabricEventsSince(since)).toEqual([]);

    // The ack for the NOS the operator configured (eos here, not the default) goes through.
    const acked = await call(admin, 'POST', PATH, {
      router_id_cidr: '10.255.0.1/23', switch_acked: true, switch_nos: 'eos', switch_snippet_hash: eos.sha256, acked_by: 'jdoe@example.com',
    });
    expect(acked.status).toBe(200);
    expect(acked.body.config).toMatchObject({
      router_id_cidr: '10.255.0.1/23', version: before.version + 1, last_switch_ack_kind: 'acked', last_switch_ack_by: 'jdoe@example.com',
      last_switch_ack_nos: 'eos', last_switch_ack_hash: eos.sha256,
    });
    const ackedAt = Date.parse(acked.body.config.last_switch_ack_at);
    expect(ackedAt).toBeGreaterThanOrEqual(before.updatedAt.getTime());
    // The transient fields are not part of the view, and GET shows the audit record read-only.
    for (const key of ['switch_acked', 'switch_nos', 'switch_snippet_hash', 'acked_by', 'skip_switch_ack', 'plan_hash']) expect(acked.body.config).not.toHaveProperty(key);
    const got = await call(platformReader, 'GET', PATH);
    expect(got.body).toMatchObject({ last_switch_ack_by: 'jdoe@example.com', last_switch_ack_nos: 'eos', last_switch_ack_at: acked.body.config.last_switch_ack_at });
    // Posting the audit fields back changes nothing (read-only).
    const roundTrip = await call(admin, 'POST', PATH, { ...got.body, last_switch_ack_by: 'mallory', last_switch_ack_kind: 'skipped' });
    expect(roundTrip.status).toBe(200);
    expect(roundTrip.body.config).toMatchObject({ last_switch_ack_by: 'jdoe@example.com', last_switch_ack_kind: 'acked' });
    // No pool change: no gate, ack fields ignored, the audit record kept.
    const same = await call(admin, 'POST', PATH, { router_id_cidr: '10.255.0.1/23', bfd_enabled: true, switch_acked: true, acked_by: 'someone-else', switch_snippet_hash: eos.sha256 });
    expect(same.status).toBe(200);
    expect(same.body.config).toMatchObject({ bfd_enabled: true, last_switch_ack_by: 'jdoe@example.com' });

    const events = await fabricEventsSince(since);
    expect(events.map((e) => e.type)).toEqual(['fabric.config.updated', 'fabric.config.updated', 'fabric.config.updated']);
    const payload = events[0]!.payload as { changed: string[]; switchAck: Record<string, unknown> };
    expect(payload.changed).toEqual(['routerIdPrefixLen']);
    expect(payload.switchAck).toEqual({ kind: 'acked', by: 'jdoe@example.com', principal: expect.any(String), nos: 'eos', hash: eos.sha256 });
    expect(events[2]!.payload).not.toHaveProperty('switchAck');
    // The gate's answers carry no secret.
    expect([JSON.stringify(gated.body), JSON.stringify(events.map((e) => e.payload))].join('')).not.toContain(BGP_PASSWORD);
  });

  it('ack gate: a first pool needs no ack (new row, or a row without a pool); a set pool cannot be unset', async () => {
    await reset();
    expect((await call(admin, 'POST', PATH, BASE_BODY)).status).toBe(200); // a new row with a pool
    await reset();
    await prisma().fabricConfig.create({ data: { id: 1, as: 64512n } }); // a row without a pool
    const first = await call(admin, 'POST', PATH, { router_id_cidr: '10.250.0.1/24' });
    expect(first.status).toBe(200);
    expect(first.body.config).toMatchObject({ router_id_cidr: '10.250.0.1/24', last_switch_ack_kind: null, last_switch_ack_by: null, last_switch_ack_at: null });
    const version = (await row())!.version;
    const unset = await call(admin, 'POST', PATH, { router_id_base: '', router_id_prefix_len: 0 });
    expect([unset.status, unset.body.error.details.field]).toEqual([400, 'body.router_id_base']);
    expect((await row())!.version).toBe(version);
  });

  it('ack gate: skip_switch_ack needs fabric:admin (PERMISSION_DENIED otherwise, nothing written); fabric:write writes and acks; the skip is audited with who', async () => {
    await reset();
    expect((await call(admin, 'POST', PATH, BASE_BODY)).status).toBe(200);
    const writer = await makeToken(prisma(), null, [{ permission: 'fabric:write', scopeType: 'platform', scopeId: null }]);
    const fabricAdmin = await makeToken(prisma(), null, [{ permission: 'fabric:admin', scopeType: 'platform', scopeId: null }]);
    const since = await maxEvent();
    const version = (await row())!.version;
    for (const body of [{ router_id_cidr: '10.255.0.1/22', skip_switch_ack: true }, { bfd_enabled: true, skip_switch_ack: true }]) {
      const denied = await call(writer, 'POST', PATH, body);
      expect([denied.status, denied.body.error.code, denied.body.error.details.permission]).toEqual([403, 'PERMISSION_DENIED', 'fabric:admin']);
    }
    expect(codeOf(await query(writer, UPSERT, { i: { routerIdCidr: '10.255.0.1/22', skipSwitchAck: true } }))).toBe('PERMISSION_DENIED');
    expect(codeOf(await query(platformReader, UPSERT, { i: { bfdEnabled: true, skipSwitchAck: true } }))).toBe('PERMISSION_DENIED');
    expect((await row())!.version).toBe(version);
    expect(await fabricEventsSince(since)).toEqual([]);

    // fabric:write may write, through the gate.
    const gated = await call(writer, 'POST', PATH, { router_id_cidr: '10.255.0.1/22' });
    expect(gated.status).toBe(409);
    const sonic = gated.body.error.details.snippets[0];
    const acked = await call(writer, 'POST', PATH, { router_id_cidr: '10.255.0.1/22', switch_acked: true, switch_snippet_hash: sonic.sha256, acked_by: 'writer' });
    expect(acked.status).toBe(200);
    expect(acked.body.config).toMatchObject({ last_switch_ack_kind: 'acked', last_switch_ack_nos: 'sonic' });

    // fabric:admin and platform admin skip; the record says skipped and names the token.
    const skipped = await call(fabricAdmin, 'POST', PATH, { router_id_cidr: '10.255.0.1/21', skip_switch_ack: true });
    expect(skipped.status).toBe(200);
    expect(skipped.body.config).toMatchObject({ router_id_cidr: '10.255.0.1/21', last_switch_ack_kind: 'skipped', last_switch_ack_by: 'fixture', last_switch_ack_nos: null, last_switch_ack_hash: null });
    const viaGql = await query(admin, UPSERT, { i: { routerIdCidr: '10.255.0.1/20', skipSwitchAck: true } });
    expect(viaGql.errors).toBeUndefined();
    expect(viaGql.data!.upsertFabricConfig.config).toMatchObject({ routerIdCidr: '10.255.0.1/20', lastSwitchAckKind: 'skipped' });
    const events = await fabricEventsSince(since);
    expect(events.map((e) => (e.payload as { switchAck?: { kind: string; principal: string } }).switchAck)).toEqual([
      { kind: 'acked', by: 'writer', principal: 'fixture', nos: 'sonic', hash: sonic.sha256 },
      { kind: 'skipped', by: 'fixture', principal: 'fixture', nos: null, hash: null },
      { kind: 'skipped', by: expect.any(String), principal: expect.any(String), nos: null, hash: null },
    ]);
  });

  it('ack gate over GraphQL: the refusal\'s extensions carry the snippets; the acked mutation goes through', async () => {
    await reset();
    expect((await call(admin, 'POST', PATH, { ...BASE_BODY, fabric_switch_nos: '', external_route_reflector: false })).status).toBe(200);
    const before = (await row())!;
    const gated = await query(admin, UPSERT, { i: { routerIdPrefixLen: 25 } });
    expect(codeOf(gated)).toBe('REQUIRES_SWITCH_RECONFIG_ACK');
    const details = gated.errors![0]!.extensions!.details as { default_nos: string; snippets: { nos: string; sha256: string; snippet: string }[] };
    expect(details.default_nos).toBe('other'); // no fabric_switch_nos stored
    expect(details.snippets).toEqual(expectedSnippets(settingsOf(before), { ...settingsOf(before), routerIdPrefixLen: 25 }));
    expect((await row())!.version).toBe(before.version);
    const other = details.snippets.find((x) => x.nos === 'other')!;
    const wrong = await query(admin, UPSERT, { i: { routerIdPrefixLen: 25, switchAcked: true, ackedBy: 'ops', switchSnippetHash: details.snippets[0]!.sha256 } });
    expect(codeOf(wrong)).toBe('REQUIRES_SWITCH_RECONFIG_ACK');
    expect((wrong.errors![0]!.extensions!.details as { field: string }).field).toBe('input.switchSnippetHash');
    const badNul = await query(admin, UPSERT, { i: { routerIdPrefixLen: 25, switchAcked: true, ackedBy: 'o\u0000ps', switchSnippetHash: other.sha256 } });
    expect(codeOf(badNul)).toBe('INVALID_INPUT');
    expect(badNul.errors![0]!.message).toMatch(/^\$i\.ackedBy: /);
    const lone = await query(admin, UPSERT, { i: { routerIdPrefixLen: 25, switchAcked: true, ackedBy: 'o\ud800ps', switchSnippetHash: other.sha256 } });
    expect(codeOf(lone)).toBe('INVALID_INPUT');
    expect((await row())!.version).toBe(before.version);
    const ok = await query(admin, UPSERT, { i: { routerIdPrefixLen: 25, switchAcked: true, ackedBy: 'ops', switchSnippetHash: other.sha256 } });
    expect(ok.errors).toBeUndefined();
    expect(ok.data!.upsertFabricConfig.config).toMatchObject({ routerIdPrefixLen: 25, lastSwitchAckKind: 'acked', lastSwitchAckBy: 'ops', lastSwitchAckNos: 'other', lastSwitchAckHash: other.sha256 });
  });

  it('the audit columns hold together whoever writes them', async () => {
    await reset();
    await prisma().fabricConfig.create({ data: { id: 1, as: 65000n } });
    await expect(prisma().$executeRawUnsafe(`UPDATE fabric_config SET last_switch_ack_kind = 'acked', last_switch_ack_by = 'x', last_switch_ack_at = now()`)).rejects.toThrow(/fabric_config_switch_ack/);
    await expect(prisma().$executeRawUnsafe(`UPDATE fabric_config SET last_switch_ack_kind = 'maybe', last_switch_ack_by = 'x', last_switch_ack_at = now()`)).rejects.toThrow(/fabric_config_switch_ack/);
  });
});
