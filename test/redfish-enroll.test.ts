/**
 * enroll refuses what a Redfish driver could never use, as INVALID_INPUT naming the field, before
 * the broker or the node is written: clients/bmc/redfish/check.ts, on the driver's own address and
 * TLS rules (client.ts bmcOrigin, tlsOf), so an operator learns at enroll, not from a workflow that
 * fails with BMC_TLS or BMC_UNREACHABLE on its first step.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { checkRedfishNode, REDFISH_DRIVER_NAMES, RedfishNodeError } from '../clients/bmc/redfish/check';
import { REDFISH_FLAVOURS, RedfishTransport } from '../clients/bmc/redfish';
import { BmcError } from '../clients/bmc/driver';

const PASSWORD = 'Redfish-Enroll-Pa55';
let pem: string;
let dir: string;

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redfish-enroll-'));
  // RSA 2048, as most BMCs' self-signed certificates are: its PEM alone is over 1 KiB.
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=enroll test CA'], { cwd: dir, stdio: 'pipe' });
  pem = fs.readFileSync(path.join(dir, 'ca.pem'), 'utf8');
  expect(Buffer.byteLength(pem)).toBeGreaterThan(1024);
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** The message of an INVALID_INPUT, which REST prefixes with `body.` and GraphQL may with the argument. */
const names = (field: string) => new RegExp(`^(body\\.|input\\.)?${field.replace(/\./g, '\\.')}: `);

/** [name, address, driverOptions, field named, text the message must not contain (a secret) or null] */
const REFUSED: [string, string, Record<string, unknown>, string, string | null][] = [
  ['a path', 'https://127.50.0.5/redfish/v1', {}, 'bmc.address', null],
  ['a path holding a token', 'https://127.50.0.5/t0ken-in-path', {}, 'bmc.address', 't0ken-in-path'],
  ['a query', 'https://127.50.0.5/?session=qu3ry-secret', {}, 'bmc.address', 'qu3ry-secret'],
  ['a fragment', 'https://127.50.0.5#frag', {}, 'bmc.address', null],
  ['a bad scheme', 'ftp://127.50.0.5', {}, 'bmc.address', null],
  ['a bad scheme with user:password@', 'ftp://root:Sch3me-Pa55@127.50.0.5', {}, 'bmc.address', 'Sch3me-Pa55'],
  ['user:password@', 'https://root:Addr3ss-Pa55@127.50.0.5', {}, 'bmc.address', 'Addr3ss-Pa55'],
  ['user:password@ on http', 'http://root:Addr3ss-Pa55@127.50.0.5:8000', {}, 'bmc.address', 'Addr3ss-Pa55'],
  ['caCert not a string', '127.50.0.5', { caCert: 42 }, 'bmc.driverOptions.caCert', null],
  ['caCert not a PEM', '127.50.0.5', { caCert: 'not a certificate' }, 'bmc.driverOptions.caCert', null],
  ['caCert empty', '127.50.0.5', { caCert: '' }, 'bmc.driverOptions.caCert', null],
  ['insecure the string "true"', '127.50.0.5', { insecure: 'true' }, 'bmc.driverOptions.insecure', null],
  ['insecure 1', '127.50.0.5', { insecure: 1 }, 'bmc.driverOptions.insecure', null],
  ['systemId a number', '127.50.0.5', { systemId: 1 }, 'bmc.driverOptions.systemId', null],
  ['systemId empty', '127.50.0.5', { systemId: '' }, 'bmc.driverOptions.systemId', null],
  ['systemId a path', '127.50.0.5', { systemId: '/redfish/v1/Systems/1' }, 'bmc.driverOptions.systemId', null],
];

/** [name, address, driverOptions]: everything the driver takes. */
const ACCEPTED: [string, string, () => Record<string, unknown>][] = [
  ['a host', 'bmc-07.example.net', () => ({})],
  ['host:port', '127.50.0.5:8443', () => ({})],
  ['https origin', 'https://127.50.0.5', () => ({})],
  ['https origin with a trailing slash', 'https://127.50.0.5:8443/', () => ({})],
  ['plain http spelled out', 'http://127.0.0.1:8000', () => ({})],
  ['[v6]:port', '[fd00::5]:443', () => ({})],
  ['a bare IPv6 address', 'fd00::5', () => ({})],
  ['a CA certificate', '127.50.0.5', () => ({ caCert: pem })],
  ['insecure true', '127.50.0.5', () => ({ insecure: true })],
  ['insecure false with a CA', '127.50.0.5', () => ({ insecure: false, caCert: pem })],
  ['a systemId', '127.50.0.5', () => ({ systemId: 'Blade-3' })],
];

describe('checkRedfishNode (pure)', () => {
  it('names every Redfish flavour the drivers register', () => {
    expect([...REDFISH_DRIVER_NAMES].sort()).toEqual(REDFISH_FLAVOURS.map((f) => f.name).sort());
  });

  it.each(REFUSED)('%s: RedfishNodeError naming the field', (_name, address, options, field, secret) => {
    let caught: unknown;
    try {
      checkRedfishNode(address, options);
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(RedfishNodeError);
    expect((caught as RedfishNodeError).field).toBe(field);
    if (secret) expect((caught as Error).message).not.toContain(secret);
  });

  it('caCert with insecure: true is refused: verification is never silently off', () => {
    expect(() => checkRedfishNode('127.50.0.5', { caCert: pem, insecure: true })).toThrow(expect.objectContaining({ field: 'bmc.driverOptions.insecure' }));
  });

  it.each(ACCEPTED)('%s: accepted', (_name, address, options) => {
    expect(() => checkRedfishNode(address, options())).not.toThrow();
  });

  it('the driver refuses what enroll refuses, with the same words (one set of rules)', async () => {
    const transport = new RedfishTransport({ connectTimeoutMs: 200, headersTimeoutMs: 200, bodyTimeoutMs: 200 });
    try {
      for (const [, address, options, field] of REFUSED.filter(([, , , f]) => f !== 'bmc.driverOptions.systemId')) {
        let enrollMessage = '';
        try {
          checkRedfishNode(address, options);
        } catch (e) {
          enrollMessage = (e as RedfishNodeError).reason;
        }
        let driverError: unknown;
        try {
          transport.client({ address, username: 'u', password: 'p', options }, undefined);
        } catch (e) {
          driverError = e;
        }
        expect(driverError).toBeInstanceOf(BmcError);
        expect((driverError as BmcError).code).toBe(field === 'bmc.address' ? 'BMC_UNREACHABLE' : 'BMC_TLS');
        expect((driverError as BmcError).message).toBe(enrollMessage);
      }
    } finally {
      await transport.close();
    }
  });
});

describe('enroll of a Redfish node', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let token: string;
  let sql: pg.Client;

  beforeAll(async () => {
    t = await startTestApp({});
    tree = await makeTenantTree(t.app.database.prisma, 'redfish-enroll', { pools: 1, nodesPerPool: 0 });
    token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    // An IPMI BMC whose virtual media is a Redfish service on the same address (a profile can bind it so).
    const profile = await gql(t.url, t.adminToken, 'mutation { createHardwareProfile(input: {name: "redfish-media", driverBindings: {power: "ipmi", management: "ipmi", virtualMedia: "idrac"}}) { id } }');
    expect(profile.errors).toBeUndefined();
    sql = new pg.Client({ connectionString: t.app.databaseUrl });
    await sql.connect();
  });
  afterAll(async () => {
    await sql?.end();
    await t?.stop();
  });

  let n = 0;
  const body = (bmc: Record<string, unknown>, over: Record<string, unknown> = {}) => ({
    poolId: tree.pools[0]!.id,
    macs: [`52:54:00:20:00:${(n++).toString(16).padStart(2, '0')}`],
    bmc: { address: '127.50.0.5', driver: 'redfish', credentials: { username: 'root', password: PASSWORD }, ...bmc },
    ...over,
  });
  // What a refused enroll must not write: a node, a secret, or an event about no node there was
  // before (the nodes earlier cases enrolled keep moving in the background, and their events are
  // theirs: counting every event made a case fail when one of them moved meanwhile).
  const counts = async () => (await sql.query(`SELECT (SELECT count(*) FROM node) AS nodes, (SELECT count(*) FROM secret) AS secrets,
    (SELECT count(*) FROM event e WHERE e.node_id IS NULL OR NOT EXISTS (SELECT 1 FROM node n WHERE n.id = e.node_id)) AS events`)).rows[0];

  const refusedWithDrivers = REFUSED.flatMap(([name, address, options, field, secret]) =>
    (['redfish', 'supermicro'] as const).map((driver) => [`${driver}: ${name}`, driver, address, options, field, secret] as const));
  it.each(refusedWithDrivers)('%s: 400 INVALID_INPUT naming the field, nothing written', async (_name, driver, address, driverOptions, field, secret) => {
    const before = await counts();
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ driver, address, driverOptions }));
    expect(response.status).toBe(400);
    expect(response.body.error).toMatchObject({ code: 'INVALID_INPUT', message: expect.stringMatching(names(field)) });
    const text = JSON.stringify(response.body);
    expect(text).not.toContain(PASSWORD);
    if (secret) expect(text).not.toContain(secret);
    expect(await counts()).toEqual(before);
  });

  it('caCert and insecure: true together: 400 naming bmc.driverOptions.insecure, nothing written', async () => {
    const before = await counts();
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ driver: 'idrac', driverOptions: { caCert: pem, insecure: true } }));
    expect(response.status).toBe(400);
    expect(response.body.error.message).toMatch(/^(body\.)?bmc\.driverOptions\.insecure: .*both set/);
    expect(await counts()).toEqual(before);
  });

  it('a caCert has a limit of its own (16 KiB); the other options stay within 1 KiB beside it', async () => {
    const before = await counts();
    const huge = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ driverOptions: { caCert: pem.repeat(Math.ceil(16385 / Buffer.byteLength(pem))) } }));
    expect(huge.status).toBe(400);
    expect(huge.body.error.message).toMatch(names('bmc.driverOptions.caCert'));
    const beside = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ driverOptions: { caCert: pem, note: 'x'.repeat(1100) } }));
    expect(beside.status).toBe(400);
    expect(beside.body.error.message).toMatch(names('bmc.driverOptions'));
    expect(await counts()).toEqual(before);
  });

  it('the same refusal through GraphQL', async () => {
    const before = await counts();
    const r = await gql(t.url, token, 'mutation ($i: MetalEnrollInput!) { enrollNode(input: $i) { node { id } } }', { i: body({ address: 'https://127.50.0.5/redfish/v1' }) });
    expect(r.errors?.[0]?.extensions?.code).toBe('INVALID_INPUT');
    expect(r.errors?.[0]?.message).toMatch(names('bmc.address'));
    expect(await counts()).toEqual(before);
  });

  it('a profile binding virtual media to a Redfish flavour checks the Redfish rules on an IPMI node', async () => {
    const before = await counts();
    const refused = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ driver: 'ipmi', address: '127.50.0.9', driverOptions: { caCert: 'nope' } }, { hardwareProfile: 'redfish-media' }));
    expect(refused.status).toBe(400);
    expect(refused.body.error.message).toMatch(names('bmc.driverOptions.caCert'));
    expect(await counts()).toEqual(before);
    // Without that binding an IPMI node's options are the IPMI driver's alone.
    const ipmi = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ driver: 'ipmi', address: '127.50.0.9', driverOptions: { caCert: 'nope' } }));
    expect(ipmi.status).toBe(200);
  });

  // The service runs with BMC_NETWORKS=127.0.0.0/8 (issue 21 items 6 and 7): the forms are enrolled
  // on loopback (IPv6 as an IPv4-mapped address), and a host name, which networks cannot hold, is refused.
  const onLoopback = ACCEPTED.filter(([name]) => name !== 'a host').map(([name, address, options]) =>
    [name, address.replace('fd00::5', '::ffff:127.50.0.5'), options] as const);
  it('a host name: refused while BMC networks are configured (400 naming bmc.address), nothing written', async () => {
    const before = await counts();
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ driver: 'xcc', address: 'bmc-07.example.net' }));
    expect(response.status).toBe(400);
    expect(response.body.error.message).toMatch(names('bmc.address'));
    expect(await counts()).toEqual(before);
  });

  it.each(onLoopback)('%s: enrolled, address and options kept as given', async (_name, address, options) => {
    const driverOptions = options();
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', body({ driver: 'xcc', address, driverOptions }));
    expect(response.status).toBe(200);
    expect(response.body.node.bmc).toMatchObject({ driver: 'xcc', driverOptions });
  });
});
