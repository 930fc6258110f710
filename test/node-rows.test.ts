import { startTestApp, type TestApp } from './helpers/app';
import { gql } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { newId } from '../src/ids';
import { nodeArrayView, nodeViewColumns, nodeViewFrom, setClause, toNodeRow } from '../src/modules/metal/node-rows';

/**
 * The verbs and bulk read node views back with plain SQL (src/modules/metal/node-rows.ts) instead of
 * reloading them through Prisma. Those rows must be exactly what Prisma would have returned.
 */
describe('node rows read with plain SQL', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;

  beforeAll(async () => {
    t = await startTestApp();
    tree = await makeTenantTree(t.app.database.prisma, 'rows', { pools: 1, nodesPerPool: 0 });
  });
  afterAll(() => t.stop());

  async function compare(id: string) {
    const { rows } = await t.app.database.sql.query(`SELECT ${nodeViewColumns('n')} FROM ${nodeViewFrom('node', 'n')} WHERE n.id = $1`, [id]);
    const viaPrisma = await t.app.database.prisma.node.findUniqueOrThrow({ where: { id }, include: { hardwareProfile: true } });
    expect(toNodeRow(rows[0]!)).toStrictEqual(viaPrisma);
    // The same view read by position (bulk's RETURNING), and with pool and site joined (a page).
    const view = nodeArrayView('n');
    const [byPosition] = await t.app.database.sql.queryArrays(`SELECT ${view.columns} FROM ${nodeViewFrom('node', 'n')} WHERE n.id = $1`, [id]);
    expect(view.read(byPosition!)).toStrictEqual(viaPrisma);
    const joined = nodeArrayView('n', { pool: 'p', site: 's' });
    const [withRelations] = await t.app.database.sql.queryArrays(
      `SELECT ${joined.columns} FROM ${nodeViewFrom('node', 'n')} JOIN pool p ON p.id = n.pool_id JOIN site s ON s.id = n.site_id WHERE n.id = $1`, [id]);
    expect(joined.read(withRelations!)).toStrictEqual(
      await t.app.database.prisma.node.findUniqueOrThrow({ where: { id }, include: { hardwareProfile: true, pool: true, site: true } }));
    const bare = nodeArrayView('n', { profile: false });
    const [scalars] = await t.app.database.sql.queryArrays(`SELECT ${bare.columns} FROM node n WHERE n.id = $1`, [id]);
    expect(bare.read(scalars!)).toStrictEqual(await t.app.database.prisma.node.findUniqueOrThrow({ where: { id } }));
  }

  it('equal Prisma\'s findUnique for a node with every field set, and with every optional field empty', async () => {
    const prisma = t.app.database.prisma;
    const profile = await prisma.hardwareProfile.create({
      data: { id: newId('HardwareProfile'), name: 'rows-profile', driverBindings: { power: 'redfish', management: 'redfish', virtualMedia: 'redfish' } },
    });
    const full = await prisma.node.create({
      data: {
        id: newId('MetalNode'), tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id, name: 'full',
        provisionState: 'failed', failedFrom: 'deploying', lastErrorCode: 'ABORTED', lastErrorMessage: 'aborted: test',
        maintenance: true, bmcAddress: '127.0.0.9', bmcDriver: 'redfish', bmcDriverOptions: { verifyTls: false, port: 443 },
        bmcCredentialsRef: 'secret://x', addresses: ['10.0.0.9', 'fd00::9'], macs: ['52:54:00:00:00:09'],
        productUuid: '4c4c4544-0042-3510-8051-b7c04f4e3132', hardwareProfileId: profile.id,
        driverBindings: { power: 'redfish' }, inventory: { cpus: 2, disks: [{ size: 1 }] }, profileId: 'dpr_x', profileVersion: 3,
        role: 'k8s-worker', workflowId: 'wf_x', pxeCycledAt: new Date('2026-11-30T01:02:03.456Z'), discoveredMac: '52:54:00:00:00:0a', version: 7,
      },
    });
    const empty = await prisma.node.create({
      data: { id: newId('MetalNode'), tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id, provisionState: 'enrolling', bmcAddress: '127.0.0.10', bmcDriver: 'ipmi' },
    });
    await compare(full.id);
    await compare(empty.id);
  });

  it('a verb\'s payload still resolves the relations its row does not carry (site, pool)', async () => {
    const prisma = t.app.database.prisma;
    const node = await prisma.node.create({
      data: { id: newId('MetalNode'), tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id, provisionState: 'ready', bmcAddress: '127.0.0.11', bmcDriver: 'redfish' },
    });
    const token = await makeToken(prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const res = await gql(t.url, token, 'mutation ($i: MetalNodeVerbInput!) { inspectNode(input: $i) { node { id provisionState version site { id name } pool { id name } hardwareProfile { id } } } }', { i: { nodeId: node.id } });
    expect(res.errors).toBeUndefined();
    expect(res.data!.inspectNode.node).toEqual({
      id: node.id, provisionState: 'inspecting', version: 2,
      site: { id: tree.site.id, name: tree.site.name }, pool: { id: tree.pools[0]!.id, name: tree.pools[0]!.name }, hardwareProfile: null,
    });
  });

  it('setClause names only the columns a verb may change', () => {
    expect(setClause({ provisionState: 'ready', maintenance: true, lastErrorCode: null }, 3)).toEqual({
      sql: 'provision_state = $3::"ProvisionState", maintenance = $4::boolean, last_error_code = $5::text',
      values: ['ready', true, null],
      // Each value's type, for a statement PREPAREd with its types (updateNodeStatement).
      types: ['"ProvisionState"', 'boolean', 'text'],
    });
    // The control-node API's register changes a control node's BMC; the node's tenancy never changes.
    expect(setClause({ bmcCredentialsRef: 'secret://x', driverBindings: { power: 'idrac' } }, 1)).toEqual({
      sql: 'bmc_credentials_ref = $1::text, driver_bindings = $2::jsonb',
      values: ['secret://x', '{"power":"idrac"}'],
      types: ['text', 'jsonb'],
    });
    for (const column of ['tenantId', 'poolId', 'siteId', 'id', 'createdAt']) {
      expect(() => setClause({ [column]: 'x' } as never, 1)).toThrow(/not a column a verb may change/);
    }
  });
});
