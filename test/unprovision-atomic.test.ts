/**
 * Unprovision is one transaction (issue 23 item 3): the new BMC credentials and driver it records
 * and the undeploy's run are written together or not at all. A failure injected at the run's
 * insert (a trigger that raises) must leave the node as it was, and the secret it stored gone.
 */
import { startTestApp, type TestApp } from './helpers/app';
import { rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';

let t: TestApp;
let token: string;
let nodeId: string;
let tenantId: string;
const bmcIp = '127.10.0.1';

beforeAll(async () => {
  t = await startTestApp();
  const tree = await makeTenantTree(t.app.services.prisma, 'unprov', { pools: 1, nodesPerPool: 1 });
  tenantId = tree.tenant.id;
  nodeId = tree.nodes[0]!.id;
  expect(tree.nodes[0]!.bmcAddress).toBe(bmcIp);
  await t.app.services.sql.query(`UPDATE node SET provision_state = 'deployed' WHERE id = $1`, [nodeId]);
  token = await makeToken(t.app.services.prisma, tenantId, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tenantId }]);
});
afterAll(async () => {
  await t?.stop();
});

async function nodeNow(): Promise<Record<string, unknown>> {
  const { rows } = await t.app.services.sql.query('SELECT provision_state, bmc_driver, bmc_credentials_ref, version, workflow_id FROM node WHERE id = $1', [nodeId]);
  return rows[0]!;
}

const secretCount = async () => (await t.app.services.sql.query('SELECT count(*)::int AS n FROM secret')).rows[0]!.n as number;

it('a failure at the undeploy run\'s insert leaves neither the new credentials nor the driver on the node, nor the stored secret', async () => {
  const before = await nodeNow();
  const secretsBefore = await secretCount();
  await t.app.services.sql.query(`CREATE FUNCTION test_refuse_run() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected: no run may start'; END $$`);
  await t.app.services.sql.query('CREATE TRIGGER test_refuse_run BEFORE INSERT ON workflow_run FOR EACH ROW EXECUTE FUNCTION test_refuse_run()');
  try {
    const refused = await rest(t.url, token, 'POST', '/controlnode/unprovision', { bmc_ip: bmcIp, bmc_user: 'newadmin', bmc_pass: 'new-pass-123', vendor: 'supermicro' });
    expect(refused.status).toBeGreaterThanOrEqual(500);
    expect(await nodeNow()).toEqual(before);
    expect(await secretCount()).toBe(secretsBefore);
  } finally {
    await t.app.services.sql.query('DROP TRIGGER test_refuse_run ON workflow_run');
    await t.app.services.sql.query('DROP FUNCTION test_refuse_run()');
  }

  // Without the injected failure the same request writes all of it.
  const done = await rest(t.url, token, 'POST', '/controlnode/unprovision', { bmc_ip: bmcIp, bmc_user: 'newadmin', bmc_pass: 'new-pass-123', vendor: 'supermicro' });
  expect(done.status).toBe(200);
  const after = await nodeNow();
  expect(after).toMatchObject({ provision_state: 'releasing', bmc_driver: 'supermicro', workflow_id: done.body.job_id });
  expect(after.bmc_credentials_ref).not.toBe(before.bmc_credentials_ref);
  expect(await secretCount()).toBe(secretsBefore + 1);
});
