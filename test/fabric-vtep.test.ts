import ipaddr from 'ipaddr.js';
import { createTestDatabase, startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { connectDatabase, type Database } from '../src/db/client';
import type { PrismaClient } from '../src/generated/prisma/client';
import { AppError } from '../src/errors';
import { allocateVteps, inPool, poolOf, releaseVtep, vtepPoolStatus, vtepsOf } from '../src/modules/fabric/vtep';
import { vtepPoolCapacity } from '../src/modules/fabric/intent';

/** Compute nodes straight in the database: deployed metal nodes with an OS address each. */
async function makeComputeNodes(prisma: PrismaClient, name: string, count: number): Promise<string[]> {
  const tree = await makeTenantTree(prisma, name, { pools: 1, nodesPerPool: count });
  const ids = tree.nodes.map((n) => n.id);
  await prisma.node.updateMany({ where: { id: { in: ids } }, data: { provisionState: 'deployed' } });
  await prisma.computeNode.createMany({
    data: ids.map((nodeId, i) => ({ nodeId, osIp: `192.168.${Math.floor(i / 250) + 10}.${(i % 250) + 1}`, fqdn: `${name}-${i}.example` })),
  });
  return ids;
}

async function setPool(prisma: PrismaClient, routerIdBase: string, routerIdPrefixLen: number): Promise<void> {
  await prisma.fabricConfig.upsert({
    where: { id: 1 },
    create: { id: 1, as: 65000, routerIdBase, routerIdPrefixLen, expectedNodes: 10, expectedVms: 10 },
    update: { routerIdBase, routerIdPrefixLen },
  });
}

const num = (ip: string) => ipaddr.IPv4.parse(ip).toByteArray().reduce((n, b) => n * 256 + b, 0);

async function refusal(promise: Promise<unknown>): Promise<{ code: string; message: string; details: unknown }> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof AppError) return { code: error.code, message: error.message, details: error.extensions.details };
    throw error;
  }
  throw new Error('expected a refusal, got none');
}

describe('the VTEP pool (real database)', () => {
  let db: Database;
  let other: Database;
  const prisma = () => db.prisma;
  beforeEach(async () => {
    const url = await createTestDatabase();
    db = connectDatabase(url);
    other = connectDatabase(url);
  });
  afterEach(async () => {
    await db.close();
    await other.close();
  });

  it('the pool arithmetic follows the seed\'s total_usable rule, per /24 block below /24 and network/broadcast from /24 on', () => {
    const p23 = poolOf({ routerIdBase: '10.255.1.7', routerIdPrefixLen: 23 })!;
    expect(p23.subnetCidr).toBe('10.255.0.0/23');
    expect(p23.totalUsable).toBe(508);
    for (const [ip, usable] of [['10.255.0.0', false], ['10.255.0.1', true], ['10.255.0.254', true], ['10.255.0.255', false],
      ['10.255.1.0', false], ['10.255.1.1', true], ['10.255.1.255', false], ['10.255.2.1', false], ['10.254.255.254', false]] as const) {
      expect([ip, inPool(p23, ip)]).toEqual([ip, usable]);
    }
    const p26 = poolOf({ routerIdBase: '10.9.9.200', routerIdPrefixLen: 26 })!;
    expect(p26.subnetCidr).toBe('10.9.9.192/26');
    expect([inPool(p26, '10.9.9.192'), inPool(p26, '10.9.9.193'), inPool(p26, '10.9.9.254'), inPool(p26, '10.9.9.255')]).toEqual([false, true, true, false]);
    expect(poolOf({ routerIdBase: '', routerIdPrefixLen: 0 })).toBeNull();
    // Not a quad the strict parser takes: never reported as inside.
    expect(inPool(p23, '10.255.1')).toBe(false);
  });

  it('takes the lowest free usable addresses, skipping .0 and .255 across /24 blocks, and a node keeps its address', async () => {
    await setPool(prisma(), '10.255.0.1', 23);
    const ids = await makeComputeNodes(prisma(), 'walk', 256);
    const first = await allocateVteps(prisma(), ids.slice(0, 255));
    const ips = ids.slice(0, 255).map((id) => first.get(id)!);
    expect(ips[0]).toBe('10.255.0.1');
    expect(ips[253]).toBe('10.255.0.254');
    expect(ips[254]).toBe('10.255.1.1');
    expect(new Set(ips).size).toBe(255);
    // Idempotent, and asking again with more nodes only adds the new one.
    const again = await allocateVteps(prisma(), [ids[255]!, ...ids.slice(0, 255)]);
    expect(again.get(ids[255]!)).toBe('10.255.1.2');
    for (const id of ids.slice(0, 255)) expect(again.get(id)).toBe(first.get(id));
    // A release frees its address; the next allocation fills the lowest hole first.
    expect(await releaseVtep(prisma(), ids[3]!)).toBe(true);
    expect(await releaseVtep(prisma(), ids[3]!)).toBe(false);
    expect(await releaseVtep(prisma(), ids[9]!)).toBe(true);
    expect([...(await allocateVteps(prisma(), [ids[9]!, ids[3]!]))]).toEqual([[ids[9], '10.255.0.4'], [ids[3], '10.255.0.10']]);
    expect((await vtepsOf(prisma(), [ids[0]!, ids[255]!]))).toEqual(new Map([[ids[0]!, '10.255.0.1'], [ids[255]!, '10.255.1.2']]));
    expect((await vtepsOf(prisma())).size).toBe(256);
  });

  it('parallel allocations on different connections never hand out one address twice and never fail while addresses remain', async () => {
    await setPool(prisma(), '10.77.0.0', 26); // 62 usable
    const ids = await makeComputeNodes(prisma(), 'race', 62);
    // One call per node, plus calls asking for overlapping sets, alternating between two pools of connections.
    const calls = [
      ...ids.map((id, i) => allocateVteps((i % 2 ? other : db).prisma, [id])),
      ...[0, 10, 20, 30].map((from, i) => allocateVteps((i % 2 ? db : other).prisma, ids.slice(from, from + 15))),
    ];
    const results = await Promise.all(calls);
    const stored = await vtepsOf(prisma());
    expect(stored.size).toBe(62);
    expect(new Set(stored.values()).size).toBe(62);
    const pool = poolOf({ routerIdBase: '10.77.0.0', routerIdPrefixLen: 26 })!;
    for (const ip of stored.values()) expect(inPool(pool, ip)).toBe(true);
    // Every caller saw what was stored: no call got an address another node holds.
    for (const result of results) for (const [id, ip] of result) expect(stored.get(id)).toBe(ip);
    // The pool is full now: exactly the usable range, .1 to .62.
    expect([...stored.values()].map(num).sort((a, b) => a - b)).toEqual(Array.from({ length: 62 }, (_, i) => num('10.77.0.1') + i));
  });

  it('an exhausted pool is INVALID_STATE naming the pool, and allocates nothing of the request', async () => {
    await setPool(prisma(), '10.88.0.0', 30); // 2 usable
    const ids = await makeComputeNodes(prisma(), 'full', 3);
    await allocateVteps(prisma(), [ids[0]!]);
    const refused = await refusal(allocateVteps(prisma(), [ids[1]!, ids[2]!]));
    expect(refused.code).toBe('INVALID_STATE');
    expect(refused.message).toContain('10.88.0.0/30');
    expect(refused.details).toMatchObject({ pool: '10.88.0.0/30', totalUsable: 2, allocated: 1, reserved: 0, needed: 2 });
    expect([...(await vtepsOf(prisma())).keys()]).toEqual([ids[0]]);
    // Parallel callers on a nearly full pool: exactly the free count succeed, the rest are refused as exhausted.
    const outcomes = await Promise.allSettled([allocateVteps(db.prisma, [ids[1]!]), allocateVteps(other.prisma, [ids[2]!])]);
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
    const failed = outcomes.find((o) => o.status === 'rejected') as PromiseRejectedResult;
    expect((failed.reason as AppError).code).toBe('INVALID_STATE');
    expect(new Set((await vtepsOf(prisma())).values())).toEqual(new Set(['10.88.0.1', '10.88.0.2']));
  });

  it('never gives out the fabric switch\'s peering IP when it lies in the pool, and moves a node that held it', async () => {
    await setPool(prisma(), '10.88.0.0', 29); // .1 to .6 usable
    const ids = await makeComputeNodes(prisma(), 'sw', 6);
    // Allocated before the switch address was configured: the node holds .6.
    await prisma().fabricVtep.create({ data: { ip: '10.88.0.6', nodeId: ids[5]! } });
    await prisma().fabricConfig.update({ where: { id: 1 }, data: { fabricSwitchPeeringIp: '10.88.0.6' } });
    expect(await vtepPoolStatus(prisma())).toMatchObject({ totalUsable: 6, allocated: 0, remaining: 5, outsidePool: 1 });
    const got = await allocateVteps(prisma(), ids.slice(0, 4));
    expect([...got.values()]).toEqual(['10.88.0.1', '10.88.0.2', '10.88.0.3', '10.88.0.4']);
    expect((await allocateVteps(prisma(), [ids[5]!])).get(ids[5]!)).toBe('10.88.0.5');
    expect(await vtepPoolStatus(prisma())).toMatchObject({ allocated: 5, remaining: 0, exhausted: true, outsidePool: 0 });
    const refused = await refusal(allocateVteps(prisma(), [ids[4]!]));
    expect(refused).toMatchObject({ code: 'INVALID_STATE', details: { pool: '10.88.0.0/29', allocated: 5, reserved: 1, needed: 1 } });
  });

  it('refuses without a fabric config, without a pool, and for a node that is not a compute node', async () => {
    const ids = await makeComputeNodes(prisma(), 'none', 1);
    expect(await refusal(allocateVteps(prisma(), ids))).toMatchObject({ code: 'INVALID_STATE', message: expect.stringContaining('no fabric config') });
    expect(await vtepPoolStatus(prisma())).toBeNull();
    await setPool(prisma(), '', 0);
    expect(await refusal(allocateVteps(prisma(), ids))).toMatchObject({ code: 'INVALID_STATE', message: expect.stringContaining('router_id_base') });
    expect(await vtepPoolStatus(prisma())).toEqual({
      routerIdBase: '', prefixLength: 0, subnetCidr: '', startIp: '', totalUsable: 0, allocated: 0, remaining: 0, exhausted: true, lastAllocatedIp: '', outsidePool: 0,
    });
    await setPool(prisma(), '10.5.0.0', 24);
    expect(await refusal(allocateVteps(prisma(), [ids[0]!, 'node_missing']))).toMatchObject({ code: 'NOT_FOUND', details: { nodeIds: ['node_missing'] } });
    expect((await vtepsOf(prisma())).size).toBe(0);
    expect(await allocateVteps(prisma(), [])).toEqual(new Map());
  });

  it('reports the seed\'s status fields, and after a pool change moves a node out of the old pool on its next allocation', async () => {
    await setPool(prisma(), '10.255.0.1', 24);
    const ids = await makeComputeNodes(prisma(), 'status', 3);
    await allocateVteps(prisma(), [ids[0]!, ids[1]!]);
    await allocateVteps(prisma(), [ids[2]!]);
    expect(await vtepPoolStatus(prisma())).toEqual({
      routerIdBase: '10.255.0.1', prefixLength: 24, subnetCidr: '10.255.0.0/24', startIp: '10.255.0.1', totalUsable: 254,
      allocated: 3, remaining: 251, exhausted: false, lastAllocatedIp: '10.255.0.3', outsidePool: 0,
    });
    expect(vtepPoolCapacity(24)).toBe(254);
    // The operator moves the pool (the switch ack gate lets it through): the old addresses no longer count.
    await setPool(prisma(), '10.66.4.0', 22);
    expect(await vtepPoolStatus(prisma())).toMatchObject({ subnetCidr: '10.66.4.0/22', startIp: '10.66.4.1', totalUsable: 1016, allocated: 0, remaining: 1016, lastAllocatedIp: '', outsidePool: 3 });
    const moved = await allocateVteps(prisma(), [ids[1]!]);
    expect(moved.get(ids[1]!)).toBe('10.66.4.1');
    expect(await vtepPoolStatus(prisma())).toMatchObject({ allocated: 1, outsidePool: 2, lastAllocatedIp: '10.66.4.1' });
    // The others still hold their old address until they are allocated again.
    expect(await vtepsOf(prisma(), [ids[0]!])).toEqual(new Map([[ids[0]!, '10.255.0.1']]));
  });

  it('inside a caller\'s transaction, the allocation commits or vanishes with the caller\'s work', async () => {
    await setPool(prisma(), '10.3.0.0', 24);
    const ids = await makeComputeNodes(prisma(), 'tx', 2);
    await expect(prisma().$transaction(async (tx) => {
      expect((await allocateVteps(tx, [ids[0]!])).get(ids[0]!)).toBe('10.3.0.1');
      throw new Error('the caller fails after allocating');
    })).rejects.toThrow('the caller fails');
    expect((await vtepsOf(prisma())).size).toBe(0);
    const kept = await prisma().$transaction((tx) => allocateVteps(tx, [ids[1]!]));
    expect(await vtepsOf(prisma())).toEqual(kept);
    expect(kept.get(ids[1]!)).toBe('10.3.0.1');
  });

  it('the database itself keeps addresses unique, canonical and tied to a compute node', async () => {
    await setPool(prisma(), '10.1.0.0', 24);
    const ids = await makeComputeNodes(prisma(), 'db', 2);
    await allocateVteps(prisma(), [ids[0]!]);
    await expect(prisma().fabricVtep.create({ data: { ip: '10.1.0.1', nodeId: ids[1]! } })).rejects.toThrow(/Unique constraint/);
    await expect(prisma().fabricVtep.create({ data: { ip: '10.1.0.9', nodeId: ids[0]! } })).rejects.toThrow(/Unique constraint/);
    await expect(prisma().fabricVtep.create({ data: { ip: '10.1.0.010', nodeId: ids[1]! } })).rejects.toThrow();
    await expect(prisma().fabricVtep.create({ data: { ip: '10.1.0.0/24', nodeId: ids[1]! } })).rejects.toThrow();
    // Removing the compute node releases its address.
    await prisma().computeNode.delete({ where: { nodeId: ids[0]! } });
    expect((await vtepsOf(prisma())).size).toBe(0);
  });
});

const POOL = '{ fabricVtepPool { routerIdBase prefixLength subnetCidr startIp totalUsable allocated remaining exhausted lastAllocatedIp outsidePool } }';
const PATH = '/controlnode/fabric-config/vtep-pool';

describe('GET /controlnode/fabric-config/vtep-pool and Query.fabricVtepPool (real service)', () => {
  let t: TestApp;
  let reader: string;
  let tenantAdmin: string;
  const prisma = () => t.app.database.prisma;
  beforeAll(async () => {
    t = await startTestApp({ role: 'api' });
    reader = await makeToken(prisma(), null, [{ permission: 'compute:sites:read', scopeType: 'platform', scopeId: null }]);
    const tree = await makeTenantTree(prisma(), 'vtep-auth', { pools: 1, nodesPerPool: 0 });
    tenantAdmin = await makeToken(prisma(), tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  });
  afterAll(() => t.stop());

  it('is 404 (and null) without a fabric config, then answers every field of the seed, in REST and GraphQL alike', async () => {
    const none = await rest(t.url, reader, 'GET', PATH);
    expect(none.status).toBe(404);
    expect((await gql(t.url, reader, POOL)).data).toEqual({ fabricVtepPool: null });

    // Configured through the API, so the pool is what the config's own rules accept.
    const configured = await rest(t.url, t.adminToken, 'POST', '/controlnode/fabric-config', { as: 65000, router_id_cidr: '10.255.0.1/23', expected_nodes: 4, expected_vms: 4 });
    expect(configured.status).toBeLessThan(300);
    const ids = await makeComputeNodes(prisma(), 'vtep-api', 3);
    await allocateVteps(prisma(), ids);
    const storedAt = Date.now();
    const answer = await rest(t.url, reader, 'GET', PATH);
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({
      allocated: 3, exhausted: false, last_allocated_ip: '10.255.0.3', prefix_length: 23, remaining: 505, router_id_base: '10.255.0.1',
      start_ip: '10.255.0.1', subnet_cidr: '10.255.0.0/23', total_usable: 508, outside_pool: 0,
    });
    const viaGraphql = await gql(t.url, reader, POOL);
    expect(viaGraphql.data!.fabricVtepPool).toEqual({
      routerIdBase: '10.255.0.1', prefixLength: 23, subnetCidr: '10.255.0.0/23', startIp: '10.255.0.1', totalUsable: 508,
      allocated: 3, remaining: 505, exhausted: false, lastAllocatedIp: '10.255.0.3', outsidePool: 0,
    });
    // A release (teardown) shows as soon as the service hears of it. It is written here straight
    // to the database, as a worker would, so the service's read cache learns of it through the
    // metal_cache notification, which arrives after the commit (under the full suite's load, a GET
    // sent at once could still be answered from the cache).
    await releaseVtep(prisma(), ids[2]!);
    // It is waited for up to 5 s from the read that stored the answer (50 polls, a second or two,
    // was less than the notification can take there): half the read cache's 10 s TTL, so only the
    // notification explains the fresh answer, never the entry's expiry.
    let released: unknown = null;
    const deadline = storedAt + 5000;
    for (;;) {
      released = (await rest(t.url, reader, 'GET', PATH)).body;
      if ((released as { allocated?: number }).allocated === 2 || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(released).toMatchObject({ allocated: 2, remaining: 506, last_allocated_ip: '10.255.0.2' });
  });

  it('needs a platform-scoped grant', async () => {
    const denied = await rest(t.url, tenantAdmin, 'GET', PATH);
    expect(denied.status).toBe(403);
    expect(codeOf(await gql(t.url, tenantAdmin, POOL))).toBe('PERMISSION_DENIED');
    expect((await rest(t.url, null, 'GET', PATH)).status).toBe(401);
  });
});
