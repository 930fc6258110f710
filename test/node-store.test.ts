/**
 * The node store (src/modules/metal/node-store.ts): every node write is one statement with its
 * events and job, through a pg transaction or Prisma's alike, and no event payload carries a
 * credential, whichever writer tries.
 */
import { checkEventPayload } from '../src/events/outbox';
import { createNode, prismaRunner, updateNode } from '../src/modules/metal/node-store';
import { newId } from '../src/ids';
import { makeTenantTree } from './helpers/fixtures';
import { startTestApp, type TestApp } from './helpers/app';

describe('checkEventPayload', () => {
  it.each([
    [{ password: 'hunter2' }, 'payload.password'],
    [{ bmc: { credentials: { username: 'root', password: 'x' } } }, 'payload.bmc.credentials'],
    [{ list: [{ ok: 1 }, { secret: 's' }] }, 'payload.list[1].secret'],
    [{ ref: 'secret://abc' }, 'payload.ref'],
    [{ note: '-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl' }, 'payload.note'],
    [{ bgp_password: 'p' }, 'payload.bgp_password'],
  ])('refuses %j naming %s, never the value', (payload, path) => {
    let error: Error | undefined;
    try { checkEventPayload(payload); } catch (e) { error = e as Error; }
    expect(error?.message).toContain(path);
    expect(error?.message).not.toMatch(/hunter2|secret:\/\/abc|b3Bl/);
  });
  it('accepts flags saying a secret is set, and plain payloads', () => {
    expect(() => checkEventPayload({ bgpPasswordIsSet: true, password: null, verb: 'enroll', bmc: { address: '10.0.0.1', driver: 'redfish' } })).not.toThrow();
  });
  it('refuses a payload nested without end', () => {
    let deep: Record<string, unknown> = {};
    const root = deep;
    for (let i = 0; i < 40; i++) { deep.x = {}; deep = deep.x as Record<string, unknown>; }
    expect(() => checkEventPayload(root)).toThrow('nested deeper');
  });
});

describe('node writes', () => {
  let t: TestApp;
  beforeAll(async () => { t = await startTestApp(); });
  afterAll(async () => { await t?.stop(); });

  it('a credential in an event of any writer writes nothing at all', async () => {
    const { prisma, sql } = t.app.services;
    const tree = await makeTenantTree(prisma, `store-${newId('Tenant')}`, { pools: 1, nodesPerPool: 1 });
    const node = tree.nodes[0]!;
    const before = await prisma.node.findUniqueOrThrow({ where: { id: node.id } });
    const events = await prisma.event.count({ where: { nodeId: node.id } });
    const bad = { data: { maintenance: true }, run: null, events: [{ type: 'node.x', payload: { password: 'hunter2' } }], job: null };
    await expect(sql.transaction((tx) => updateNode(tx, { id: node.id, version: before.version }, bad, 'req'))).rejects.toThrow('payload.password');
    await expect(prisma.$transaction((tx) => updateNode(prismaRunner(tx), { id: node.id, version: null }, bad, 'req'))).rejects.toThrow('payload.password');
    const id = newId('MetalNode');
    await expect(prisma.$transaction((tx) => createNode(prismaRunner(tx), {
      id, tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id, name: null, provisionState: 'enrolling',
      bmcAddress: '10.9.9.9', bmcDriver: 'redfish', bmcDriverOptions: {}, bmcCredentialsRef: 'secret://x', addresses: [], macs: [],
      productUuid: null, hardwareProfileId: null, driverBindings: {},
    }, { run: null, events: [{ type: 'node.enrolled', payload: { bmc: { credentials: 'secret://x' } } }], job: { reason: 'enroll' } }, 'req'))).rejects.toThrow('payload.bmc.credentials');
    expect(await prisma.node.findUnique({ where: { id } })).toBeNull();
    expect(await prisma.node.findUniqueOrThrow({ where: { id: node.id } })).toEqual(before);
    expect(await prisma.event.count({ where: { nodeId: node.id } })).toBe(events);
  });

  it('a write through either runner is the compare-and-set, the events and the job together', async () => {
    const { prisma, sql } = t.app.services;
    const tree = await makeTenantTree(prisma, `store-${newId('Tenant')}`, { pools: 1, nodesPerPool: 1 });
    const node = await prisma.node.findUniqueOrThrow({ where: { id: tree.nodes[0]!.id } });
    const write = { data: { maintenance: true }, run: null, events: [{ type: 'node.maintenance.on', payload: { why: 'test' } }], job: { reason: 'test' } };
    const row = await sql.transaction((tx) => updateNode(tx, node, write, 'req-1'));
    expect(row).toMatchObject({ id: node.id, maintenance: true, version: node.version + 1 });
    // The same version again: the compare-and-set refuses, and nothing more is written.
    expect(await prisma.$transaction((tx) => updateNode(prismaRunner(tx), node, write, 'req-2'))).toBeNull();
    const events = await prisma.event.findMany({ where: { nodeId: node.id, type: 'node.maintenance.on' } });
    expect(events.map((e) => e.payload)).toEqual([{ nodeId: node.id, why: 'test', requestId: 'req-1' }]);
    const { rows } = await sql.query(`SELECT data FROM pgboss.job WHERE name = 'metal.reconcile' AND data->>'nodeId' = $1`, [node.id]);
    expect(rows.map((r) => r.data)).toEqual([{ nodeId: node.id, reason: 'test' }]);
  });
});
