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
    // No workers: the runs stay as written, and the test plays each metal.batch job it checks.
    t = await startTestApp({ tokenCacheMs: 600000, role: 'api' });
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
      provisionState: state, bmcAddress: '127.3.3.3', bmcDriver: 'redfish',
    }));
    await t.app.database.prisma.node.createMany({ data });
    return data.map((d) => d.id);
  }
  const snapshot = async (ids: string[]) =>
    (await sql.query(`SELECT (SELECT json_agg(json_build_array(id, provision_state, version) ORDER BY id) FROM node WHERE id = ANY($1)) AS nodes,
       (SELECT count(*) FROM event WHERE node_id = ANY($1)) AS events,
       (SELECT count(*) FROM workflow_run WHERE node_id = ANY($1)) AS runs,
       (SELECT count(*) FROM workflow_run r WHERE r.due_at <= now() AND r.node_id = ANY($1)) AS jobs,
       (SELECT count(*) FROM command_batch) AS batches`, [ids])).rows[0];

  /** The nodes' runs that are due (what the engine's fetch takes), as { runId }. */
  const jobsOf = async (ids: string[]) =>
    (await sql.query(`SELECT jsonb_build_object('runId', r.id) AS data FROM workflow_run r
                       WHERE r.due_at <= now() AND r.node_id = ANY($1)`, [ids])).rows.map((r) => r.data as { runId: string });
  const runsOf = (ids: string[]) => t.app.database.prisma.workflowRun.findMany({ where: { nodeId: { in: ids } } });
  /** The batch's metal.batch jobs, each played as the worker does (releaseBatch): the runs started. */
  async function playRelease(batchId: string): Promise<number> {
    const { rows } = await sql.query(`SELECT data FROM pgboss.job WHERE name = 'metal.batch' AND data->>'batchId' = $1`, [batchId]);
    expect(rows.map((r) => r.data)).toEqual([{ batchId }]);
    return releaseBatch(t.app.services.sql, rows[0].data.batchId);
  }
  /** Each node has exactly one run, of `kind` with `params` (and its batch), and one job naming it. */
  async function expectOneRunEach(ids: string[], kind: string, params: Record<string, unknown>, batchId: string | null) {
    const runs = await runsOf(ids);
    expect(runs.map((r) => r.nodeId).sort()).toEqual([...ids].sort());
    for (const run of runs) expect(run).toMatchObject({ kind, status: 'queued', params, batchId });
    expect((await jobsOf(ids)).sort((a, b) => a.runId.localeCompare(b.runId))).toEqual(runs.map((r) => ({ runId: r.id })).sort((a, b) => a.runId.localeCompare(b.runId)));
    const nodesNow = await t.app.database.prisma.node.findMany({ where: { id: { in: ids } } });
    for (const n of nodesNow) expect(n.workflowId).toBe(runs.find((r) => r.nodeId === n.id)!.id);
  }

  /** The batch as its row reads now, in the answer's shape: the answer must not differ from it. */
  const storedBatch = async (id: string) =>
    (await sql.query(`SELECT id, pool_id AS "poolId", verb, reason, wipe, cardinality(node_ids) AS "nodeCount", digest, quorum, approvals, status,
                             to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS "createdAt"
                        FROM command_batch WHERE id = $1`, [id])).rows[0];

  it('retires every node in one batch: state, one event per node, an audit batch with the reason; one run and one job per node at the release', async () => {
    const ids = await nodes(50);
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[0]!.id, verb: 'retire', nodeIds: ids, reason: 'end of lease' });
    expect(response.status).toBe(200);
    expect(response.body.nodes.map((n: any) => n.id)).toEqual(ids);
    expect(new Set(response.body.nodes.map((n: any) => n.provisionState))).toEqual(new Set(['retiring']));
    expect(response.body.batch).toMatchObject({ verb: 'retire', reason: 'end of lease', nodeCount: 50, status: 'recorded', quorum: 0 });
    expect(response.body.batch).toEqual(await storedBatch(response.body.batch.id));
    // The events commit with the change; the runs (retire is destructive) come from the batch's
    // one release job, queued in the same transaction (the batch needs no approval).
    expect(await snapshot(ids)).toMatchObject({ events: '50', runs: '0', jobs: '0' });
    const batchId = response.body.batch.id;
    expect(await playRelease(batchId)).toBe(50);
    await expectOneRunEach(ids, 'metal-retire', { verb: 'retire', reason: 'end of lease', batchId }, batchId);
    // A second release of the same batch (a retried or duplicated job) starts nothing more.
    expect(await releaseBatch(t.app.services.sql, batchId)).toBe(0);
    expect(await snapshot(ids)).toMatchObject({ runs: '50', jobs: '50' });
  });

  /**
   * Issue 21 item 20: inspect boots the inspection ramdisk and provide powers off and wipes: their
   * workflows send destructive commands (jobs/workflows), so each bulk call records a quorum batch,
   * needs a reason, and on a pool with approver keys starts nothing before the quorum.
   */
  it.each([['inspect', 'metal-inspect'], ['provide', 'metal-commission']])('bulk %s sends destructive commands: a batch with its reason, and with approver keys no run before the quorum', async (verb, kind) => {
    const ids = await nodes(3, 'ready', 1);
    const unreasoned = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[1]!.id, verb, nodeIds: ids });
    expect([unreasoned.status, unreasoned.body.error.message]).toEqual([400, expect.stringMatching(/reason: is required/)]);
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[1]!.id, verb, nodeIds: ids, reason: `bulk ${verb}` }, { 'x-request-id': `bulk-${verb}-1` });
    expect(response.status).toBe(200);
    const batch = response.body.batch;
    expect(batch).toMatchObject({ verb, reason: `bulk ${verb}`, status: 'awaiting-approval', quorum: 2, nodeCount: 3 });
    expect(batch).toEqual(await storedBatch(batch.id));
    // The nodes moved (their events are there), but no run, no job and no release job before the quorum.
    expect(await snapshot(ids)).toMatchObject({ events: '3', runs: '0', jobs: '0' });
    expect((await sql.query(`SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'metal.batch' AND data->>'batchId' = $1`, [batch.id])).rows[0].n).toBe(0);
    expect(await releaseBatch(t.app.services.sql, batch.id)).toBe(0);
    expect(await snapshot(ids)).toMatchObject({ runs: '0', jobs: '0' });
    const APPROVE = 'mutation ($b: ID!, $k: String!, $s: String!) { approveCommandBatch(batchId: $b, keyId: $k, signature: $s) { status } }';
    for (const [i, k] of ['alice', 'bob'].entries()) {
      const signature = sign(null, Buffer.from(batch.digest, 'hex'), keys[i]!.privateKey).toString('base64');
      expect((await gql(t.url, token, APPROVE, { b: batch.id, k, s: signature })).errors).toBeUndefined();
    }
    // The quorum reached: the release starts each node's run, with the batch.
    expect(await playRelease(batch.id)).toBe(3);
    await expectOneRunEach(ids, kind, { verb, reason: `bulk ${verb}`, batchId: batch.id }, batch.id);
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
    // Seed: with approver keys the batch's commands wait for its approval. No run, no job and no
    // release job exist for its nodes before the quorum, and a release run early starts nothing.
    const nothingYet = { runs: '0', jobs: '0' };
    expect(await snapshot(ids)).toMatchObject(nothingYet);
    expect((await sql.query(`SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'metal.batch' AND data->>'batchId' = $1`, [batch.id])).rows[0].n).toBe(0);
    expect(await releaseBatch(t.app.services.sql, batch.id)).toBe(0);
    expect(await snapshot(ids)).toMatchObject(nothingYet);
    expect(codeOf(await gql(t.url, token, APPROVE, { b: batch.id, k: 'alice', s: signBy(0) }))).toBe('CONFLICT');
    const second = await gql(t.url, token, APPROVE, { b: batch.id, k: 'bob', s: signBy(1) });
    expect(second.data!.approveCommandBatch.status).toBe('approved');
    // The approval that reached the quorum queued the batch's release: each node's run, with the
    // wipe and the reason, and exactly one job each.
    expect(await snapshot(ids)).toMatchObject(nothingYet);
    expect(await playRelease(batch.id)).toBe(4);
    await expectOneRunEach(ids, 'metal-release', { verb: 'undeploy', wipe: 'crypto-erase', reason: 'decommission', batchId: batch.id }, batch.id);
    expect(await releaseBatch(t.app.services.sql, batch.id)).toBe(0);
    expect(codeOf(await gql(t.url, token, APPROVE, { b: batch.id, k: 'bob', s: signBy(1) }))).toBe('INVALID_STATE');
  });

  it('the release starts runs only for nodes still in the verb\'s target state whose intent has not moved on since the batch', async () => {
    const ids = await nodes(4, 'deployed', 1);
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[1]!.id, verb: 'undeploy', reason: 'refresh', nodeIds: ids });
    const batch = response.body.batch;
    expect(batch.status).toBe('awaiting-approval');
    const [left, recovered, finished, waiting] = ids as [string, string, string, string];
    const verb = (v: string, nodeId: string) => rest(t.url, token, 'POST', `/api/compute/metal/${v}`, { nodeId });
    // Aborted while the batch waited: failed, no longer releasing.
    expect((await verb('abort', left)).status).toBe(200);
    // Aborted then recovered: back in releasing, with recover's own metal-release run (active).
    expect((await verb('abort', recovered)).status).toBe(200);
    expect((await verb('recover', recovered)).body.node.provisionState).toBe('releasing');
    // The same, and recover's run is over: a newer intent than the batch's still stands.
    expect((await verb('abort', finished)).status).toBe(200);
    expect((await verb('recover', finished)).status).toBe(200);
    await t.app.database.prisma.workflowRun.updateMany({ where: { nodeId: finished }, data: { status: 'failed', finishedAt: new Date() } });
    const before = await runsOf(ids);
    expect(before.map((r) => r.nodeId).sort()).toEqual([recovered, finished].sort());
    const APPROVE = 'mutation ($b: ID!, $k: String!, $s: String!) { approveCommandBatch(batchId: $b, keyId: $k, signature: $s) { status } }';
    for (const [i, k] of ['alice', 'bob'].entries()) {
      const s = sign(null, Buffer.from(batch.digest, 'hex'), keys[i]!.privateKey).toString('base64');
      expect((await gql(t.url, token, APPROVE, { b: batch.id, k, s })).errors).toBeUndefined();
    }
    expect(await playRelease(batch.id)).toBe(1);
    const after = await runsOf(ids);
    const started = after.filter((r) => !before.some((b) => b.id === r.id));
    expect(started).toEqual([expect.objectContaining({ nodeId: waiting, kind: 'metal-release', batchId: batch.id })]);
    expect((await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: waiting } })).workflowId).toBe(started[0]!.id);
    expect(await jobsOf([waiting])).toEqual([{ runId: started[0]!.id }]);
    // The others' runs are as they were.
    expect(after.filter((r) => r.nodeId !== waiting).map((r) => [r.id, r.status]).sort()).toEqual(before.map((r) => [r.id, r.status]).sort());
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
    const count = async (n: number) => {
      const ids = await nodes(n);
      await gql(t.url, token, '{ viewer { tokenId } }');
      const before = t.app.database.statements.count;
      const response = await gql(t.url, token, 'mutation ($i: MetalBulkInput!) { bulkNodes(input: $i) { batch { id } } }', { i: { poolId: tree.pools[0]!.id, verb: 'inspect', reason: 'r', nodeIds: ids } });
      expect(response.errors).toBeUndefined();
      return t.app.database.statements.count - before;
    };
    expect(await count(500)).toBe(await count(10));
  });
});
