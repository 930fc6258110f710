/**
 * Issue 21 items 8 and 13: what JSON.parse lets through that PostgreSQL or GraphQL cannot hold.
 * - 8: a JSON-escaped lone surrogate (or NUL) on the installer's raw callback route reached jsonb
 *   (22P02, a 500): refused with 400 naming the field, as everywhere else.
 * - 13: a number that overflows a double (1e309 is Infinity) became null on its way to GraphQL,
 *   and fabric-config answered 200 "updated" keeping the old value: 400 naming the field.
 * ROLE=api: nothing here connects anywhere.
 */
import { createHash, randomBytes } from 'node:crypto';
import { startTestApp, type TestApp } from './helpers/app';
import { makeTenantTree } from './helpers/fixtures';
import { newId } from '../src/ids';

let t: TestApp;

beforeAll(async () => {
  t = await startTestApp({ role: 'api' });
});
afterAll(async () => {
  await t?.stop();
});

const send = async (method: string, path: string, raw: string | undefined, bearer: string | null = t.adminToken) => {
  const r = await fetch(t.url + path, {
    method, body: raw,
    headers: { ...(bearer ? { authorization: `Bearer ${bearer}` } : {}), ...(raw !== undefined ? { 'content-type': 'application/json' } : {}) },
  });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
};

describe('item 8: the installer callback refuses what jsonb cannot store', () => {
  let runId: string;
  let token: string;
  let nodeId: string;
  beforeAll(async () => {
    const tree = await makeTenantTree(t.app.database.prisma, 'raw-json', { pools: 1, nodesPerPool: 1 });
    nodeId = tree.nodes[0]!.id;
    runId = newId('WorkflowRun');
    token = randomBytes(24).toString('base64url');
    const { prisma } = t.app.database;
    await prisma.workflowRun.create({ data: { id: runId, nodeId, kind: 'metal-install', status: 'waiting', params: { verb: 'provision' } } });
    await prisma.installerIso.create({
      data: {
        id: newId('InstallerIso'), nodeId, runId, tokenHash: createHash('sha256').update(randomBytes(16)).digest('hex'), fileName: 'x.iso', bytes: 1n,
        sha256: '0'.repeat(64), expiresAt: new Date(Date.now() + 3_600_000), callbackTokenHash: createHash('sha256').update(token).digest('hex'),
      },
    });
  });
  const reports = async () => Number((await t.app.services.sql.query('SELECT count(*)::int AS n FROM install_report WHERE run_id = $1', [runId])).rows[0]!.n);

  it('a step that is well-formed is stored (the route and token are right)', async () => {
    const ok = await send('POST', `/controlnode/job/${runId}/step`, '{"step":"partitioning","state":"active","percent":10}', token);
    expect(ok.status).toBe(200);
    expect(await reports()).toBe(1);
  });
  it.each([
    ['a lone high surrogate', '{"step":"\\ud800","state":"active"}', 'body.step'],
    ['a lone low surrogate', '{"step":"ok\\udc00x","state":"active"}', 'body.step'],
    ['a NUL', '{"step":"a\\u0000b","state":"active"}', 'body.step'],
    ['a lone surrogate in a key', '{"step":"ok","state":"active","\\ud800":1}', 'body'],
    ['an overflowing number', '{"step":"ok","state":"active","percent":1e309}', 'body.percent'],
  ])('%s: 400 INVALID_INPUT naming %s, nothing stored', async (_name, raw, field) => {
    const before = await reports();
    const r = await send('POST', `/controlnode/job/${runId}/step`, raw, token);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field } });
    expect(await reports()).toBe(before);
  });
  it('the complete callback too', async () => {
    const r = await send('POST', `/controlnode/job/${runId}/complete`, '{"os_password":"pa\\udfffss"}', token);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'body.os_password' } });
  });
});

describe('item 13: numbers that overflow are refused, naming the field', () => {
  const config = () => send('GET', '/controlnode/fabric-config', undefined);
  beforeAll(async () => {
    const created = await send('POST', '/controlnode/fabric-config', '{"as":65000,"management_cidr":"192.168.0.0/24","vxlan_mtu":9000,"expected_nodes":4,"expected_vms":4,"fabric_switch_nos":"eos"}');
    expect(created.status).toBe(200);
  });
  it.each([
    ['{"as":1e309}', 'body.as'],
    ['{"as":1e400}', 'body.as'],
    ['{"as":-1e309}', 'body.as'],
    ['{"vxlan_mtu":1e309}', 'body.vxlan_mtu'],
    ['{"expected_nodes":1e309}', 'body.expected_nodes'],
  ])('POST /controlnode/fabric-config %s: 400 naming %s, the stored config unchanged', async (raw, field) => {
    const before = (await config()).body;
    const r = await send('POST', '/controlnode/fabric-config', raw);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field } });
    expect((await config()).body).toEqual(before);
  });
  it('preflight\'s expected_nodes', async () => {
    const r = await send('POST', '/controlnode/fabric-config/preflight', '{"underlay_cidr":"10.60.0.0/16","expected_nodes":1e309}');
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'body.expected_nodes' } });
  });
  it('a query parameter: ?first=1e309', async () => {
    const r = await send('GET', '/api/compute/metal/nodes?first=1e309', undefined);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'query.first' } });
  });
  it('GraphQL variables are refused by their scalar', async () => {
    const r = await send('POST', '/graphql', '{"query":"query ($f: Int) { nodes(first: $f) { edges { node { id } } } }","variables":{"f":1e309}}');
    expect(JSON.stringify(r.body.errors?.[0] ?? null)).toMatch(/\$f|Int/);
    expect(r.body.data ?? null).toBeNull();
  });
});
