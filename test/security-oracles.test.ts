/**
 * Issue 21 items 9 and 10: what another tenant's caller learns from a 404.
 * - 9: a control-node job of another tenant answers exactly as a made-up id does (GET, PATCH,
 *   cancel, GraphQL controlNodeJob): same status, code and message but for the id asked.
 * - 10: provision and register by a tenant that cannot see CONTROLNODE_POOL_ID's pool never read
 *   that pool's id.
 * ROLE=api: nothing runs the rows written here, and no address is connected to.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { newId } from '../src/ids';

let t: TestApp;
let dir: string;
let owner: Awaited<ReturnType<typeof makeTenantTree>>;
let other: Awaited<ReturnType<typeof makeTenantTree>>;
let stranger: string;
let jobId: string;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'security-oracles-'));
  const credentialsFile = path.join(dir, 'bmc-credentials');
  fs.writeFileSync(credentialsFile, 'root:Oracle-Bmc-Pa55\n');
  t = await startTestApp({ role: 'api' });
  owner = await makeTenantTree(t.app.database.prisma, 'oracle-owner', { pools: 1, nodesPerPool: 1 });
  other = await makeTenantTree(t.app.database.prisma, 'oracle-other', { pools: 1, nodesPerPool: 0 });
  Object.assign(t.app.services.config, { controlnodePoolId: owner.pools[0]!.id, controlnodeBmcCredentialsFile: credentialsFile, controlnodeBmcInsecure: true });
  stranger = await makeToken(t.app.database.prisma, other.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: other.tenant.id }]);
  jobId = newId('WorkflowRun');
  await t.app.database.prisma.workflowRun.create({
    data: { id: jobId, nodeId: owner.nodes[0]!.id, kind: 'metal-install', status: 'running', params: { verb: 'provision', hostname: 'cn-1' } },
  });
});
afterAll(async () => {
  await t?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/** The refusal with the id asked for replaced, and without what differs per request. */
const shape = (body: any, id: string) => {
  const error = body.error ?? body.errors?.[0];
  const { requestId: _r, ...rest } = error;
  return JSON.parse(JSON.stringify(rest).split(id).join('<id>'));
};

describe('item 9: another tenant\'s control-node job is answered as a made-up id', () => {
  const madeUp = () => newId('WorkflowRun');
  it.each([
    ['GET', (id: string) => `/controlnode/job/${id}`, undefined],
    ['PATCH', (id: string) => `/controlnode/job/${id}`, { job_status: 'cancelled' }],
    ['POST', (id: string) => `/controlnode/job/${id}/cancel`, undefined],
  ] as const)('%s %s', async (method, url, body) => {
    const fake = madeUp();
    const theirs = await rest(t.url, stranger, method, url(jobId), body);
    const none = await rest(t.url, stranger, method, url(fake), body);
    expect(theirs.status).toBe(404);
    expect([none.status, shape(none.body, fake)]).toEqual([theirs.status, shape(theirs.body, jobId)]);
    expect(JSON.stringify(theirs.body)).not.toMatch(/workflow run/);
  });
  it('GraphQL controlNodeJob', async () => {
    const fake = madeUp();
    const q = 'query ($id: ID!) { controlNodeJob(id: $id) { id } }';
    const theirs = await gql(t.url, stranger, q, { id: jobId });
    const none = await gql(t.url, stranger, q, { id: fake });
    expect(theirs.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    expect(shape(none, fake)).toEqual(shape(theirs, jobId));
  });
});

describe('item 10: register and provision never read the control-node pool\'s id to another tenant', () => {
  it('register: 404 without the pool id', async () => {
    const r = await rest(t.url, stranger, 'POST', '/controlnode/register', { bmc_ip: '127.61.0.1' });
    expect([r.status, r.body.error.code]).toEqual([404, 'NOT_FOUND']);
    expect(JSON.stringify(r.body)).not.toContain(owner.pools[0]!.id);
    const g = await gql(t.url, stranger, 'mutation { registerControlNode(input: {bmcIp: "127.61.0.1"}) { created } }');
    expect(g.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    expect(JSON.stringify(g)).not.toContain(owner.pools[0]!.id);
  });
  it('provision of a new BMC address: 404 without the pool id', async () => {
    const r = await rest(t.url, stranger, 'POST', '/controlnode/provision/dell', {
      bmc_IP: '127.61.0.2', hostname: 'cn-x', os_password: 'Os-pa55-word', selected_disks: ['sda'], pool_type: 'single',
    });
    expect([r.status, r.body.error.code]).toEqual([404, 'NOT_FOUND']);
    expect(JSON.stringify(r.body)).not.toContain(owner.pools[0]!.id);
  });
});
