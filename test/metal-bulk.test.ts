import { generateKeyPairSync, sign } from 'node:crypto';
import pg from 'pg';
import { startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { newId } from '../src/ids';
import type { ProvisionState } from '../src/modules/metal/states';
import { releaseBatch } from '../src/modules/metal/bulk';

describe('bulk', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let other: Awaited<ReturnType<typeof makeTenantTree>>;
  let token: string;
  let sql: pg.Client;
  const keys = [generateKeyPairSync('ed25519'), generateKeyPairSync('ed25519')];
  const publicKey = (i: number) => Buffer.from(keys[i]!.publicKey.export({ format: 'jwk' }).x!, 'base64url').toString('base64');

  beforeAll(async () => {
    // A long token cache: the statement-count test must not see a token lookup mid-measurement.
    t = await startTestApp({ tokenCacheMs: 600000 });
    tree = await makeTenantTree(t.app.database.prisma, 'bulk', { pools: 2, nodesPerPool: 0 });
    other = await makeTenantTree(t.app.database.prisma, 'bulk-other', { pools: 1, nodesPerPool: 0 });
    token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    await t.app.database.prisma.pool.update({
      where: { id: tree.pools[1]!.id },
      data: { policy: { approverKeys: [{ id: 'alice', publicKey: publicKey(0) }, { id: 'bob', publicKey: publicKey(1) }], quorum: 2 } },
    });
    sql = new pg.Client({ connectionString: t.app.databaseUrl });
    await sql.connect();
  });
  afterAll(async () => {
    await sql.end();
    await t.stop();
  });

  async function nodes(count: number, state: ProvisionState = 'ready', pool = 0, owner = tree): Promise<string[]> {
    const data = Array.from({ length: count }, () => ({
      id: newId('MetalNode'), tenantId: owner.tenant.id, siteId: owner.site.id, poolId: owner.pools[pool]!.id,
      provisionState: state, bmcAddress: '10.3.3.3', bmcDriver: 'redfish',
    }));
    await t.app.database.prisma.node.createMany({ data });
    return data.map((d) => d.id);
  }
  const snapshot = async (ids: string[]) =>
    (await sql.query(`SELECT (SELECT json_agg(json_build_array(id, provision_state, version) ORDER BY id) FROM node WHERE id = ANY($1)) AS nodes,
       (SELECT count(*) FROM event WHERE node_id = ANY($1)) AS events,
       (SELECT count(*) FROM pgboss.job WHERE name = 'metal.reconcile' AND data->>'nodeId' = ANY($1)) AS jobs,
       (SELECT count(*) FROM command_batch) AS batches`, [ids])).rows[0];

  const jobsOf = async (ids: string[]) =>
    Number((await sql.query(`SELECT count(*) FROM pgboss.job WHERE name = 'metal.reconcile' AND data->>'nodeId' = ANY($1)`, [ids])).rows[0].count);
  /** Waits (at most 10 s) until the batch's release job has queued the nodes' jobs (the worker polls). */
  async function releasedJobs(ids: string[], expected: number): Promise<number> {
    const deadline = Date.now() + 10000;
    let count = await jobsOf(ids);
    while (count < expected && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      count = await jobsOf(ids);
    }
    return count;
  }

  /** The batch as its row reads now, in the answer's shape: the answer must not differ from it. */
  const storedBatch = async (id: string) =>
    (await sql.query(`SELECT id, pool_id AS "poolId", verb, reason, wipe, cardinality(node_ids) AS "nodeCount", digest, quorum, approvals, status,
                             to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS "createdAt"
                        FROM command_batch WHERE id = $1`, [id])).rows[0];

  it('retires every node in one batch: state, one event and one job per node (through the batch), and an audit batch with the reason', async () => {
    const ids = await nodes(50);
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[0]!.id, verb: 'retire', nodeIds: ids, reason: 'end of lease' });
    expect(response.status).toBe(200);
    expect(response.body.nodes.map((n: any) => n.id)).toEqual(ids);
    expect(new Set(response.body.nodes.map((n: any) => n.provisionState))).toEqual(new Set(['retiring']));
    expect(response.body.batch).toMatchObject({ verb: 'retire', reason: 'end of lease', nodeCount: 50, status: 'recorded', quorum: 0 });
    expect(response.body.batch).toEqual(await storedBatch(response.body.batch.id));
    // The events commit with the change; the nodes' jobs come from the batch's one release job,
    // queued in the same transaction (the batch needs no approval) and run by the worker.
    expect(Number((await snapshot(ids)).events)).toBe(50);
    const release = await sql.query(`SELECT data FROM pgboss.job WHERE name = 'metal.batch' AND data->>'batchId' = $1`, [response.body.batch.id]);
    expect(release.rows.map((r) => r.data)).toEqual([{ batchId: response.body.batch.id }]);
    expect(await releasedJobs(ids, 50)).toBe(50);
    const job = (await sql.query(`SELECT data FROM pgboss.job WHERE name = 'metal.reconcile' AND data->>'nodeId' = $1`, [ids[0]])).rows[0].data;
    expect(job).toEqual({ nodeId: ids[0], reason: 'retire', batchId: response.body.batch.id });
    // A second release of the same batch (a retried or duplicated job) queues nothing more.
    expect(await releaseBatch(t.app.services.sql, response.body.batch.id)).toBe(0);
    expect(await jobsOf(ids)).toBe(50);
  });

  it('a non-destructive verb (inspect) makes no batch', async () => {
    const ids = await nodes(3);
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[0]!.id, verb: 'inspect', nodeIds: ids });
    expect(response.status).toBe(200);
    expect(response.body.batch).toBeNull();
  });

  const refusals: [string, () => Promise<Record<string, unknown>>, number, RegExp][] = [
    ['one node in the wrong state', async () => ({ verb: 'retire', reason: 'r', nodeIds: [...(await nodes(5)), ...(await nodes(1, 'deployed'))] }), 409, /refused for 1 of 6/],
    ['a node of another pool', async () => ({ verb: 'retire', reason: 'r', nodeIds: [...(await nodes(2)), ...(await nodes(1, 'ready', 1))] }), 400, /not a node of pool/],
    ['a node of another tenant', async () => ({ verb: 'retire', reason: 'r', nodeIds: [...(await nodes(2)), ...(await nodes(1, 'ready', 0, other))] }), 400, /not a node of pool/],
    ['a node listed twice', async () => { const ids = await nodes(2); return { verb: 'retire', reason: 'r', nodeIds: [...ids, ids[0]] }; }, 400, /listed once/],
    ['wipe with another verb than undeploy', async () => ({ verb: 'retire', reason: 'r', wipe: 'quick', nodeIds: await nodes(1) }), 400, /wipe: applies to undeploy only/],
    ['a destructive verb without a reason', async () => ({ verb: 'retire', nodeIds: await nodes(1) }), 400, /reason: is required/],
    ['no nodes', async () => ({ verb: 'retire', reason: 'r', nodeIds: [] }), 400, /nodeIds/],
    ['10,001 nodes', async () => ({ verb: 'retire', reason: 'r', nodeIds: Array.from({ length: 10001 }, (_, i) => `node_${i}`) }), 400, /nodeIds/],
    ['a verb bulk does not run', async () => ({ verb: 'deploy', reason: 'r', nodeIds: await nodes(1) }), 400, /verb/],
  ];
  it.each(refusals)('refuses %s, changing nothing', async (_label, make, status, message) => {
    const body: Record<string, unknown> = { poolId: tree.pools[0]!.id, ...(await make()) };
    const ids = (body.nodeIds as string[]).filter((id) => id.startsWith('node_0'));
    const before = await snapshot(ids);
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', body);
    expect(response.status).toBe(status);
    expect(response.body.error.message).toMatch(message);
    expect(await snapshot(ids)).toEqual(before);
  });

  it('lists every refused node and why', async () => {
    const bad = [...(await nodes(2, 'deployed')), ...(await nodes(1, 'retired'))];
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[0]!.id, verb: 'retire', reason: 'r', nodeIds: [...(await nodes(3)), ...bad] });
    expect(response.body.error.code).toBe('INVALID_STATE');
    expect(response.body.error.details.refused.map((r: any) => r.nodeId)).toEqual(bad);
    expect(response.body.error.details.refused[2].message).toMatch(/in state retired/);
  });

  it('another tenant\'s pool is NOT_FOUND; a token without provision on the pool is PERMISSION_DENIED', async () => {
    expect((await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: other.pools[0]!.id, verb: 'inspect', nodeIds: await nodes(1, 'ready', 0, other) })).status).toBe(404);
    const ids = await nodes(1);
    const nodeOnly = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'node', scopeId: ids[0]! }]);
    expect((await rest(t.url, nodeOnly, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[0]!.id, verb: 'inspect', nodeIds: ids })).status).toBe(403);
  });

  it('with approver keys, the batch waits for a quorum of verified Ed25519 signatures over its digest', async () => {
    const ids = await nodes(4, 'deployed', 1);
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[1]!.id, verb: 'undeploy', wipe: 'crypto-erase', reason: 'decommission', nodeIds: ids });
    expect(response.status).toBe(200);
    const batch = response.body.batch;
    expect(batch).toMatchObject({ status: 'awaiting-approval', quorum: 2, wipe: 'crypto-erase', nodeCount: 4 });
    expect(batch).toEqual(await storedBatch(batch.id));
    const APPROVE = 'mutation ($b: ID!, $k: String!, $s: String!) { approveCommandBatch(batchId: $b, keyId: $k, signature: $s) { status approvals } }';
    const signBy = (i: number, digest = batch.digest) => sign(null, Buffer.from(digest, 'hex'), keys[i]!.privateKey).toString('base64');
    // Another tenant learns nothing: the batch is NOT_FOUND by its own id, and no pool is named.
    const otherToken = await makeToken(t.app.database.prisma, other.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: other.tenant.id }]);
    const foreign = await gql(t.url, otherToken, APPROVE, { b: batch.id, k: 'alice', s: signBy(0) });
    expect(codeOf(foreign)).toBe('NOT_FOUND');
    expect(foreign.errors![0]!.message).toContain(batch.id);
    expect(foreign.errors![0]!.message).not.toContain('pool');
    expect(codeOf(await gql(t.url, token, APPROVE, { b: batch.id, k: 'alice', s: signBy(1) }))).toBe('INVALID_INPUT'); // bob's signature under alice's key
    expect(codeOf(await gql(t.url, token, APPROVE, { b: batch.id, k: 'alice', s: signBy(0, '00'.repeat(32)) }))).toBe('INVALID_INPUT');
    expect(codeOf(await gql(t.url, token, APPROVE, { b: batch.id, k: 'mallory', s: signBy(0) }))).toBe('INVALID_INPUT');
    const first = await gql(t.url, token, APPROVE, { b: batch.id, k: 'alice', s: signBy(0) });
    expect(first.data!.approveCommandBatch.status).toBe('awaiting-approval');
    // Seed: with approver keys the batch's commands wait for its approval. Nothing is queued
    // for its nodes before the quorum, and a release job run early queues nothing either.
    expect(await releaseBatch(t.app.services.sql, batch.id)).toBe(0);
    await new Promise((r) => setTimeout(r, 300));
    expect(await jobsOf(ids)).toBe(0);
    expect(codeOf(await gql(t.url, token, APPROVE, { b: batch.id, k: 'alice', s: signBy(0) }))).toBe('CONFLICT');
    const second = await gql(t.url, token, APPROVE, { b: batch.id, k: 'bob', s: signBy(1) });
    expect(second.data!.approveCommandBatch.status).toBe('approved');
    // The approval that reached the quorum released the batch: each node's job, with the wipe.
    expect(await releasedJobs(ids, 4)).toBe(4);
    const job = (await sql.query(`SELECT data FROM pgboss.job WHERE name = 'metal.reconcile' AND data->>'nodeId' = $1`, [ids[0]])).rows[0].data;
    expect(job).toEqual({ nodeId: ids[0], reason: 'undeploy', wipe: 'crypto-erase', batchId: batch.id });
    expect(codeOf(await gql(t.url, token, APPROVE, { b: batch.id, k: 'bob', s: signBy(1) }))).toBe('INVALID_STATE');
  });

  it('two bulk calls over the same nodes in opposite orders: one wins, the other is refused cleanly (never INTERNAL)', async () => {
    for (let round = 0; round < 5; round += 1) {
      const ids = await nodes(200);
      const [x, y] = await Promise.all([
        rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[0]!.id, verb: 'retire', reason: 'r', nodeIds: ids }),
        rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[0]!.id, verb: 'retire', reason: 'r', nodeIds: [...ids].reverse() }),
      ]);
      const statuses = [x.status, y.status].sort();
      expect(statuses).toEqual([200, 409]);
      const loser = x.status === 409 ? x : y;
      expect(['CONFLICT', 'INVALID_STATE']).toContain(loser.body.error.code);
      expect((await snapshot(ids)).events).toBe('200');
    }
  });

  it('is set-based: the same number of SQL statements for 10 and for 500 nodes', async () => {
    // The worker releasing earlier tests' batches counts its statements too: let it finish first.
    const deadline = Date.now() + 10000;
    const pendingReleases = async () => Number((await sql.query(`SELECT count(*) FROM pgboss.job WHERE name = 'metal.batch' AND state < 'completed'`)).rows[0].count);
    while ((await pendingReleases()) > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(await pendingReleases()).toBe(0);
    const count = async (n: number) => {
      const ids = await nodes(n);
      await gql(t.url, token, '{ viewer { tokenId } }');
      const before = t.app.database.statements.count;
      const response = await gql(t.url, token, 'mutation ($i: MetalBulkInput!) { bulkNodes(input: $i) { batch { id } } }', { i: { poolId: tree.pools[0]!.id, verb: 'inspect', nodeIds: ids } });
      expect(response.errors).toBeUndefined();
      return t.app.database.statements.count - before;
    };
    expect(await count(500)).toBe(await count(10));
  });
});
