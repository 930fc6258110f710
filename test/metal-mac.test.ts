import pg from 'pg';
import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { newId } from '../src/ids';
import { machineMac, normalizeMac } from '../src/modules/metal/mac';
import { waitForLockWaiters } from './helpers/locks';

/**
 * One MAC rule for enroll's macs and confirmMac's mac: a unicast address a NIC can have, bound to
 * at most one live machine of the site, even when two requests race for it.
 */

describe('the MAC rule (src/modules/metal/mac.ts)', () => {
  const shapes: [string, string][] = [
    ['AA:BB:CC:00:11:22', 'aa:bb:cc:00:11:22'],
    ['aa-bb-cc-00-11-22', 'aa:bb:cc:00:11:22'],
    ['aabbcc001122', 'aa:bb:cc:00:11:22'],
    [' 02:00:00:00:00:01 ', '02:00:00:00:00:01'], // locally administered unicast is a NIC's
  ];
  it.each(shapes)('%s is the machine MAC %s', (raw, mac) => expect(machineMac(raw, 'f')).toBe(mac));

  const notNics: [string, RegExp][] = [
    ['ff:ff:ff:ff:ff:ff', /broadcast/],
    ['FF-FF-FF-FF-FF-FF', /broadcast/],
    ['00:00:00:00:00:00', /all zeros/],
    ['000000000000', /all zeros/],
    ['01:00:5e:00:00:fb', /multicast/], // IPv4 mDNS group
    ['33:33:00:00:00:01', /multicast/], // IPv6 all-nodes
    ['01:80:c2:00:00:0e', /multicast/], // LLDP
    ['03:00:00:00:00:00', /multicast/],
  ];
  it.each(notNics)('%s is well formed but refused as a machine MAC', (raw, why) => {
    expect(() => normalizeMac(raw, 'f')).not.toThrow();
    expect(() => machineMac(raw, 'macs[2]')).toThrow(expect.objectContaining({ code: 'INVALID_INPUT', message: expect.stringMatching(why) }));
    expect(() => machineMac(raw, 'macs[2]')).toThrow(/^macs\[2\]: /);
  });
});

describe('enroll and confirmMac share the MAC rule', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let other: Awaited<ReturnType<typeof makeTenantTree>>;
  let secondSite: { siteId: string; poolId: string };
  let token: string;
  let sql: pg.Client;
  let counter = 0;
  const freshMac = () => `52:54:01:00:${(Math.floor(counter / 256) % 256).toString(16).padStart(2, '0')}:${(counter++ % 256).toString(16).padStart(2, '0')}`;

  beforeAll(async () => {
    t = await startTestApp();
    const prisma = t.app.database.prisma;
    tree = await makeTenantTree(prisma, 'mac', { pools: 2, nodesPerPool: 0 });
    other = await makeTenantTree(prisma, 'mac-other', { pools: 1, nodesPerPool: 0 });
    const site = await prisma.site.create({ data: { id: newId('Site'), tenantId: tree.tenant.id, name: 'mac-site-2' } });
    const pool = await prisma.pool.create({ data: { id: newId('Pool'), tenantId: tree.tenant.id, siteId: site.id, name: 'mac-pool-2', policy: {} } });
    secondSite = { siteId: site.id, poolId: pool.id };
    token = await makeToken(prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    sql = new pg.Client({ connectionString: t.app.databaseUrl });
    await sql.connect();
  });
  afterAll(async () => {
    await sql.end();
    await t.stop();
  });

  // Events of nodes with a workflow run are left out: the machines earlier cases enrolled run their
  // enroll workflow in the background (the service runs its engine and agent) and publish as they
  // move. A refusal writes no node, secret or event; the machines it is refused for have no run.
  const counts = async () =>
    (await sql.query(`SELECT (SELECT count(*) FROM node) AS nodes, (SELECT count(*) FROM secret) AS secrets,
      (SELECT count(*) FROM event e WHERE e.node_id IS NULL OR NOT EXISTS (SELECT 1 FROM workflow_run w WHERE w.node_id = e.node_id)) AS events`)).rows[0] as Record<string, string>;

  /** A machine of the site with the given MACs (none: one waiting for confirmMac). */
  async function machine(macs: string[], opts: { state?: 'enrolling' | 'retired'; pool?: string; site?: string; tenant?: string } = {}) {
    const id = newId('MetalNode');
    await t.app.database.prisma.node.create({
      data: {
        id, tenantId: opts.tenant ?? tree.tenant.id, siteId: opts.site ?? tree.site.id, poolId: opts.pool ?? tree.pools[0]!.id,
        provisionState: opts.state ?? 'enrolling', bmcAddress: '127.8.8.8', bmcDriver: 'ipmi', bmcCredentialsRef: 'secret://x',
        productUuid: '4c4c4544-0035-3510-8052-b4c04f4e4b32', macs,
      },
    });
    return id;
  }

  const ENROLL_GQL = 'mutation ($i: MetalEnrollInput!) { enrollNode(input: $i) { node { id macs } } }';
  const CONFIRM_GQL = 'mutation ($i: MetalConfirmMacInput!) { confirmMac(input: $i) { node { id macs } } }';
  type Reply = { status: number; code: string | undefined; message: string | undefined; macs: string[] | undefined };

  type Bind = (mac: string) => Promise<Reply>;
  const sitePool = (pool?: string) => ({ pool: pool ?? tree.pools[1]!.id, site: pool === secondSite.poolId ? secondSite.siteId : tree.site.id });

  /**
   * The two verbs, over REST and GraphQL: `prepare` writes what the call needs (confirmMac's
   * waiting machine in `pool`), then the bind binds `mac` to a machine of that pool's site.
   */
  const preparers: { name: string; field: string; prepare: (pool?: string) => Promise<Bind> }[] = [
    {
      name: 'enroll (REST)', field: 'body.macs[1]',
      prepare: async (pool) => async (mac) => {
        const r = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', {
          poolId: sitePool(pool).pool, macs: [freshMac(), mac],
          bmc: { address: '127.9.0.1', driver: 'ipmi', credentials: { username: 'root', password: 'calvin-secret' } },
        });
        return { status: r.status, code: r.body.error?.code, message: r.body.error?.message, macs: r.body.node?.macs };
      },
    },
    {
      name: 'enroll (GraphQL)', field: 'macs[1]',
      prepare: async (pool) => async (mac) => {
        const r = await gql(t.url, token, ENROLL_GQL, {
          i: { poolId: sitePool(pool).pool, macs: [freshMac(), mac], bmc: { address: '127.9.0.2', driver: 'ipmi', credentials: { username: 'root', password: 'calvin-secret' } } },
        });
        return { status: r.errors ? 400 : 200, code: r.errors?.[0]?.extensions?.code, message: r.errors?.[0]?.message, macs: r.data?.enrollNode?.node.macs };
      },
    },
    {
      name: 'confirmMac (REST)', field: 'body.mac',
      prepare: async (pool) => {
        const nodeId = await machine([], sitePool(pool));
        return async (mac) => {
          const r = await rest(t.url, token, 'POST', '/api/compute/metal/confirmMac', { nodeId, mac });
          return { status: r.status, code: r.body.error?.code, message: r.body.error?.message, macs: r.body.node?.macs };
        };
      },
    },
    {
      name: 'confirmMac (GraphQL)', field: 'mac',
      prepare: async (pool) => {
        const nodeId = await machine([], sitePool(pool));
        return async (mac) => {
          const r = await gql(t.url, token, CONFIRM_GQL, { i: { nodeId, mac } });
          return { status: r.errors ? 400 : 200, code: r.errors?.[0]?.extensions?.code, message: r.errors?.[0]?.message, macs: r.data?.confirmMac?.node.macs };
        };
      },
    },
  ];
  const verbs = preparers.map((v) => ({ ...v, bind: async (mac: string, pool?: string) => (await v.prepare(pool))(mac) }));

  const notNics = ['ff:ff:ff:ff:ff:ff', '00:00:00:00:00:00', '01:00:5e:00:00:fb', '33-33-00-00-00-01', 'AB:CD:EF:00:00:01'];
  const refusals = verbs.flatMap((v) => notNics.map((mac) => [v.name, mac, v] as const));
  it.each(refusals)('%s refuses %s with INVALID_INPUT naming the field, and writes nothing', async (_name, mac, verb) => {
    const bind = await verb.prepare();
    const before = await counts();
    const reply = await bind(mac);
    expect(reply).toMatchObject({ code: 'INVALID_INPUT', message: expect.stringMatching(new RegExp(`^${verb.field.replace(/[[\]]/g, '\\$&')}: `)) });
    expect(await counts()).toEqual(before);
  });

  const holders: [string, () => Promise<string>, string | null][] = [
    ['a live machine of another pool of the same site', async () => { const m = freshMac(); await machine([m], { pool: tree.pools[0]!.id }); return m; }, 'CONFLICT'],
    ['a live machine of the same pool', async () => { const m = freshMac(); await machine([freshMac(), m], { pool: tree.pools[1]!.id }); return m; }, 'CONFLICT'],
    ['a retired machine of the same site (its identity was revoked)', async () => { const m = freshMac(); await machine([m], { state: 'retired' }); return m; }, null],
    ['a machine of another site of the tenant', async () => { const m = freshMac(); await machine([m], { pool: secondSite.poolId, site: secondSite.siteId }); return m; }, null],
    ['a machine of another tenant\'s site', async () => { const m = freshMac(); await machine([m], { pool: other.pools[0]!.id, site: other.site.id, tenant: other.tenant.id }); return m; }, null],
  ];
  const uniqueness = verbs.flatMap((v) => holders.map(([label, hold, code]) => [v.name, label, v, hold, code] as const));
  it.each(uniqueness)('%s of a MAC held by %s', async (_name, _label, verb, hold, code) => {
    const mac = await hold();
    const reply = await verb.bind(mac.toUpperCase());
    if (code) {
      expect(reply).toMatchObject({ code, message: expect.stringMatching(/^the MAC address belongs to node node_/) });
    } else {
      expect(reply.code).toBeUndefined();
      expect(reply.macs).toContain(mac);
    }
  });

  it('a refused enroll leaves no inline credentials behind in the broker', async () => {
    const mac = freshMac();
    await machine([mac]);
    const before = await counts();
    expect((await verbs[0]!.bind(mac)).code).toBe('CONFLICT');
    expect(await counts()).toEqual(before);
  });

  /**
   * Runs `calls` while this test holds a SHARE lock on the node table, so each of them stops at its
   * first write of a node, and lets go once `parties` of them wait (for that lock or for each
   * other): every check they make before writing has then run against the same state, unless the
   * code serialises them.
   */
  async function racing<T>(parties: number, calls: () => Promise<T>[]): Promise<T[]> {
    const holder = new pg.Client({ connectionString: t.app.databaseUrl });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE node IN SHARE MODE');
      let settled = false;
      const all = Promise.all(calls()).finally(() => { settled = true; });
      await waitForLockWaiters(holder, parties, () => settled);
      await holder.query('COMMIT');
      return await all;
    } finally {
      await holder.end();
    }
  }

  const races: [string, number[]][] = [['four enrolls', [0, 0, 0, 0]], ['two confirmMacs', [2, 2]], ['an enroll and a confirmMac', [0, 2]]];
  it.each(races)('%s racing for one MAC: exactly one wins, the others are CONFLICT', async (_label, parties) => {
    const mac = freshMac();
    const before = await counts();
    const binds = await Promise.all(parties.map((i) => verbs[i]!.prepare()));
    const replies = await racing(parties.length, () => binds.map((bind) => bind(mac)));
    expect(replies.map((r) => r.code ?? 'ok').sort()).toEqual([...parties.slice(1).map(() => 'CONFLICT'), 'ok']);
    const { rows } = await sql.query('SELECT id FROM node WHERE site_id = $1 AND $2 = ANY(macs)', [tree.site.id, mac]);
    expect(rows).toHaveLength(1);
    // Each enroll stored its inline credentials before its transaction; the losers' were removed.
    const enrollsWon = replies.filter((r, i) => r.code === undefined && parties[i]! < 2).length;
    expect(Number((await counts()).secrets) - Number(before.secrets)).toBe(enrollsWon);
  });
});
