/**
 * Intent lives in rows (issue 9, the seams; runs.md): every verb persists the workflow run that
 * carries its intent (kind and params), the job it queues names only that run, a node has at most
 * one active run, abort hands its run to the engine's cleanup, and nothing starts a run while an
 * aborted run still cleans up. Table-driven from the metal seed's sentences. The app runs no
 * workers, so every run stays as the verb wrote it.
 */
import pg from 'pg';
import { startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { newId } from '../src/ids';
import { releaseBatch } from '../src/modules/metal/bulk';
import type { ProvisionState, WorkflowKind } from '../src/modules/metal/states';
import { waitForLockWaiters } from './helpers/locks';

describe('every verb persists its intent as a workflow run; the job names only the run', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let other: Awaited<ReturnType<typeof makeTenantTree>>;
  let token: string;
  let sql: pg.Client;
  let profileId: string;

  beforeAll(async () => {
    t = await startTestApp({ role: 'api' });
    const prisma = t.app.database.prisma;
    tree = await makeTenantTree(prisma, 'intent', { pools: 1, nodesPerPool: 0 });
    other = await makeTenantTree(prisma, 'intent-other', { pools: 1, nodesPerPool: 0 });
    token = await makeToken(prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const saved = await gql(t.url, token, 'mutation ($i: DeployProfileVersionInput!) { saveDeployProfileVersion(input: $i) { id } }', {
      i: { name: 'intent-worker', role: 'k8s-worker', steps: [{ name: 'os', kind: 'image', params: { image: 'debian-12' } }] },
    });
    profileId = saved.data!.saveDeployProfileVersion.id;
    const second = await gql(t.url, token, 'mutation ($i: DeployProfileVersionInput!) { saveDeployProfileVersion(input: $i) { versions { version } } }', {
      i: { profileId, role: 'k8s-worker', steps: [{ name: 'os', kind: 'image', params: { image: 'debian-13' } }] },
    });
    expect(second.data!.saveDeployProfileVersion.versions.map((v: { version: number }) => v.version)).toContain(2);
    sql = new pg.Client({ connectionString: t.app.databaseUrl });
    await sql.connect();
  });
  afterAll(async () => {
    await sql.end();
    await t.stop();
  });

  async function nodeIn(state: ProvisionState, opts: { failedFrom?: ProvisionState; owner?: typeof tree; run?: { kind: WorkflowKind; status: string } } = {}) {
    const owner = opts.owner ?? tree;
    const id = newId('MetalNode');
    const runId = opts.run ? newId('WorkflowRun') : null;
    await t.app.database.prisma.node.create({
      data: {
        id, tenantId: owner.tenant.id, siteId: owner.site.id, poolId: owner.pools[0]!.id, provisionState: state,
        failedFrom: opts.failedFrom ?? null, lastErrorCode: opts.failedFrom ? 'WORKFLOW_FAILED' : null, maintenance: Boolean(opts.failedFrom),
        bmcAddress: '127.4.4.4', bmcDriver: 'redfish', bmcCredentialsRef: 'secret://x', workflowId: runId,
      },
    });
    if (opts.run) {
      await t.app.database.prisma.workflowRun.create({
        // Nothing due: as the engine leaves a run between its steps (a woken one is due again).
        data: { id: runId!, nodeId: id, kind: opts.run.kind, status: opts.run.status, params: {}, dueAt: null, ...(opts.run.status === 'aborting' ? { abortRequestedAt: new Date() } : {}) },
      });
    }
    return { id, runId };
  }
  const runsOf = (nodeId: string) => t.app.database.prisma.workflowRun.findMany({ where: { nodeId }, orderBy: [{ createdAt: 'asc' }, { id: 'asc' }] });
  /** The node's runs that are due (what the engine's fetch takes), oldest first, as { runId }. */
  const jobsOf = async (nodeId: string) =>
    (await sql.query(`SELECT jsonb_build_object('runId', r.id) AS data FROM workflow_run r
                       WHERE r.due_at <= now() AND r.node_id = $1 ORDER BY r.created_at, r.id`, [nodeId])).rows.map((r) => r.data);
  const eventsOf = async (nodeId: string) => (await sql.query('SELECT type, payload FROM event WHERE node_id = $1 ORDER BY id', [nodeId])).rows;
  const call = (verb: string, body: Record<string, unknown>, requestId?: string) =>
    rest(t.url, token, 'POST', `/api/compute/metal/${verb}`, body, requestId ? { 'x-request-id': requestId } : {});

  interface Case {
    sentence: string;
    verb: string;
    from: ProvisionState;
    failedFrom?: ProvisionState;
    body?: () => Record<string, unknown>;
    to: ProvisionState;
    kind: WorkflowKind;
    params: () => Record<string, unknown>;
  }
  const CASES: Case[] = [
    { sentence: 'manage: "Moves a ready node back to enrolling to re-verify BMC access; the reconciler then chains re-inspection and re-commissioning"',
      verb: 'manage', from: 'ready', to: 'enrolling', kind: 'metal-enroll', params: () => ({ verb: 'manage' }) },
    { sentence: 'inspect: "Moves a ready node to inspecting, where the machine boots the ramdisk and reports its inventory"',
      verb: 'inspect', from: 'ready', to: 'inspecting', kind: 'metal-inspect', params: () => ({ verb: 'inspect' }) },
    { sentence: 'provide: "Moves a ready node to commissioning, which runs DCGM diagnostics, a quick wipe and a power-off"',
      verb: 'provide', from: 'ready', to: 'commissioning', kind: 'metal-commission', params: () => ({ verb: 'provide' }) },
    { sentence: 'deploy: "with the given profile version recorded on it; the metal reconciler then starts a workflow of that profile"',
      verb: 'deploy', from: 'ready', body: () => ({ profileId, profileVersion: 2 }), to: 'deploying', kind: 'metal-deploy',
      params: () => ({ verb: 'deploy', profileId, profileVersion: 2 }) },
    { sentence: 'undeploy: "wipes its disks with the chosen mode" (quick, the default)',
      verb: 'undeploy', from: 'deployed', to: 'releasing', kind: 'metal-release', params: () => ({ verb: 'undeploy', wipe: 'quick' }) },
    { sentence: 'undeploy: "wipe is none, quick (the default), secure-erase or crypto-erase" (from rescue, crypto-erase)',
      verb: 'undeploy', from: 'rescue', body: () => ({ wipe: 'crypto-erase' }), to: 'releasing', kind: 'metal-release',
      params: () => ({ verb: 'undeploy', wipe: 'crypto-erase' }) },
    { sentence: 'rescue: "Moves a deployed node to rescue, whose workflow boots the rescue ramdisk"',
      verb: 'rescue', from: 'deployed', to: 'rescue', kind: 'metal-rescue', params: () => ({ verb: 'rescue' }) },
    { sentence: 'retire: "whose workflow crypto-erases the disks ..., powers the machine off and revokes its identity"',
      verb: 'retire', from: 'ready', to: 'retiring', kind: 'metal-retire', params: () => ({ verb: 'retire' }) },
    ...(['enrolling', 'inspecting', 'commissioning'] as const).map((failedFrom): Case => ({
      sentence: `recover: "enrolling after enrolling, inspecting or commissioning" (failed from ${failedFrom})`,
      verb: 'recover', from: 'failed', failedFrom, to: 'enrolling', kind: 'metal-enroll', params: () => ({ verb: 'recover' }),
    })),
    ...(['deploying', 'releasing'] as const).map((failedFrom): Case => ({
      sentence: `recover: "releasing after deploying or releasing" (failed from ${failedFrom})`,
      verb: 'recover', from: 'failed', failedFrom, to: 'releasing', kind: 'metal-release', params: () => ({ verb: 'recover' }),
    })),
    { sentence: 'recover: "retiring after retiring"',
      verb: 'recover', from: 'failed', failedFrom: 'retiring', to: 'retiring', kind: 'metal-retire', params: () => ({ verb: 'recover' }) },
  ];

  it.each(CASES.map((c) => [c.sentence, c] as const))('%s', async (_sentence, c) => {
    const { id: nodeId } = await nodeIn(c.from, { failedFrom: c.failedFrom });
    const requestId = `intent-${newId('Tenant')}`;
    const response = await call(c.verb, { nodeId, ...(c.body?.() ?? {}) }, requestId);
    expect(response.status).toBe(200);
    expect(response.body.node.provisionState).toBe(c.to);
    const runs = await runsOf(nodeId);
    expect(runs).toHaveLength(1);
    const run = runs[0]!;
    expect(run).toMatchObject({ kind: c.kind, status: 'queued', batchId: null, finishedAt: null });
    expect(run.params).toEqual({ ...c.params(), requestId });
    expect(response.body.node.workflowId).toBe(run.id);
    expect((await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: nodeId } })).workflowId).toBe(run.id);
    expect(await jobsOf(nodeId)).toEqual([{ runId: run.id }]);
    const events = await eventsOf(nodeId);
    expect(events).toHaveLength(1);
    expect(events[0].payload.workflowId).toBe(run.id);
  });

  it('enroll: "queues the reconciler to verify BMC access and inspect the machine out of band": a metal-enroll run', async () => {
    const response = await call('enroll', {
      poolId: tree.pools[0]!.id, bmc: { address: '127.4.4.5', driver: 'redfish', credentials: { username: 'root', password: 'Enr0ll-secret' } },
    }, 'intent-enroll');
    expect(response.status).toBe(200);
    const nodeId = response.body.node.id;
    const runs = await runsOf(nodeId);
    expect(runs.map((r) => [r.kind, r.status, r.params])).toEqual([['metal-enroll', 'queued', { verb: 'enroll', requestId: 'intent-enroll' }]]);
    expect(response.body.node.workflowId).toBe(runs[0]!.id);
    expect(await jobsOf(nodeId)).toEqual([{ runId: runs[0]!.id }]);
    expect(JSON.stringify(runs)).not.toContain('Enr0ll-secret');
  });

  it('recover: "deployed after rescue": the machine runs its OS again, so no run and no job', async () => {
    const { id: nodeId } = await nodeIn('failed', { failedFrom: 'rescue' });
    const response = await call('recover', { nodeId });
    expect(response.body.node.provisionState).toBe('deployed');
    expect(await runsOf(nodeId)).toEqual([]);
    expect(await jobsOf(nodeId)).toEqual([]);
  });

  describe('unrescue: "Starts the metal-unrescue workflow ...; the node stays in rescue until that workflow succeeds"', () => {
    it('starts a metal-unrescue run once the rescue run succeeded; a second call while it runs returns the node unchanged', async () => {
      const { id: nodeId, runId: rescueRun } = await nodeIn('rescue', { run: { kind: 'metal-rescue', status: 'succeeded' } });
      const first = await call('unrescue', { nodeId });
      expect(first.body.node).toMatchObject({ provisionState: 'rescue' });
      const runs = await runsOf(nodeId);
      const unrescue = runs.find((r) => r.id !== rescueRun)!;
      expect(unrescue).toMatchObject({ kind: 'metal-unrescue', status: 'queued', params: { verb: 'unrescue', requestId: expect.any(String) } });
      expect(first.body.node.workflowId).toBe(unrescue.id);
      for (const status of ['running', 'waiting']) {
        await t.app.database.prisma.workflowRun.update({ where: { id: unrescue.id }, data: { status } });
        const again = await call('unrescue', { nodeId });
        expect(again.body.node).toMatchObject({ workflowId: unrescue.id, version: first.body.node.version });
      }
      expect(await runsOf(nodeId)).toHaveLength(2);
      expect(await jobsOf(nodeId)).toEqual([{ runId: unrescue.id }]);
    });

    it.each(['queued', 'running', 'waiting'])('"CONFLICT while the rescue ramdisk is still booting": the rescue run is %s', async (status) => {
      const { id: nodeId } = await nodeIn('rescue', { run: { kind: 'metal-rescue', status } });
      const response = await call('unrescue', { nodeId });
      expect(response.status).toBe(409);
      expect(response.body.error.message).toMatch(/still booting/);
      expect(await runsOf(nodeId)).toHaveLength(1);
    });
  });

  describe('one active run per node: a newer intent supersedes the active run', () => {
    it.each(['queued', 'running', 'waiting'])('retire of an enrolling node whose metal-enroll run is %s: that run is superseded (finished_at), the retire run is the one active', async (status) => {
      const { id: nodeId, runId: enrollRun } = await nodeIn('enrolling', { run: { kind: 'metal-enroll', status } });
      const response = await call('retire', { nodeId });
      expect(response.status).toBe(200);
      const runs = await runsOf(nodeId);
      expect(runs.find((r) => r.id === enrollRun)).toMatchObject({ status: 'superseded', finishedAt: expect.any(Date) });
      const retire = runs.find((r) => r.id !== enrollRun)!;
      expect(retire).toMatchObject({ kind: 'metal-retire', status: 'queued' });
      expect(response.body.node.workflowId).toBe(retire.id);
      expect(await jobsOf(nodeId)).toEqual([{ runId: retire.id }]);
    });

    it('two parallel verbs on one node that both read it first: one run, the other CONFLICT with nothing written', async () => {
      const { id: nodeId } = await nodeIn('ready');
      const holder = new pg.Client({ connectionString: t.app.databaseUrl });
      await holder.connect();
      let results: { status: number; body: any }[];
      try {
        // Both calls read the node (SHARE lets reads through), then wait to write it.
        await holder.query('BEGIN');
        await holder.query('LOCK TABLE node IN SHARE MODE');
        const racing = [call('manage', { nodeId }), call('retire', { nodeId })];
        await waitForLockWaiters(holder, 2);
        await holder.query('COMMIT');
        results = await Promise.all(racing);
      } finally {
        await holder.end();
      }
      expect(results.map((r) => r.status).sort()).toEqual([200, 409]);
      expect(results.find((r) => r.status === 409)!.body.error.code).toBe('CONFLICT');
      const winner = results.find((r) => r.status === 200)!.body.node;
      const runs = await runsOf(nodeId);
      expect(runs).toHaveLength(1);
      expect(runs[0]).toMatchObject({ id: winner.workflowId, status: 'queued' });
      expect(await jobsOf(nodeId)).toEqual([{ runId: runs[0]!.id }]);
      expect(await eventsOf(nodeId)).toHaveLength(1);
    });
  });

  describe('abort: "Stops the node\'s running workflow ... The aborted workflow still runs its cleanup steps"', () => {
    const LEGAL: [ProvisionState, WorkflowKind][] = [
      ['enrolling', 'metal-enroll'], ['inspecting', 'metal-inspect'], ['commissioning', 'metal-commission'],
      ['deploying', 'metal-deploy'], ['releasing', 'metal-release'],
    ];
    it.each(LEGAL)('from %s: the node fails as before, its %s run becomes aborting (abort_requested_at) and is woken; no run starts', async (state, kind) => {
      const { id: nodeId, runId } = await nodeIn(state, { run: { kind, status: 'waiting' } });
      const response = await call('abort', { nodeId, reason: 'wrong rack' });
      expect(response.status).toBe(200);
      expect(response.body.node).toMatchObject({ provisionState: 'failed', failedFrom: state, lastError: { code: 'ABORTED', message: 'aborted: wrong rack' }, maintenance: true, workflowId: runId });
      const runs = await runsOf(nodeId);
      expect(runs).toHaveLength(1);
      expect(runs[0]).toMatchObject({ id: runId, status: 'aborting', abortRequestedAt: expect.any(Date), finishedAt: null });
      expect(await jobsOf(nodeId)).toEqual([{ runId }]);
      const events = await eventsOf(nodeId);
      expect(events.map((e) => [e.type, e.payload.verb, e.payload.reason])).toEqual([['node.provision.failed', 'abort', 'wrong rack']]);
    });

    it.each(['recover', 'retire'])('%s while the aborted run is still cleaning up: CONFLICT, nothing written; once it ended, the verb goes through', async (verb) => {
      const { id: nodeId } = await nodeIn('deploying', { run: { kind: 'metal-deploy', status: 'running' } });
      await call('abort', { nodeId });
      const before = await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: nodeId } });
      const eventsBefore = await eventsOf(nodeId);
      const jobsBefore = await jobsOf(nodeId);
      const refused = await call(verb, { nodeId });
      expect(refused.status).toBe(409);
      expect(refused.body.error).toMatchObject({ code: 'CONFLICT', message: expect.stringMatching(/its aborted run .* is still cleaning up; retry when it ends/) });
      expect(await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: nodeId } })).toEqual(before);
      expect((await runsOf(nodeId)).map((r) => r.status)).toEqual(['aborting']);
      expect(await eventsOf(nodeId)).toEqual(eventsBefore);
      expect(await jobsOf(nodeId)).toEqual(jobsBefore);
      // The engine ends the run when its cleanup is done.
      await t.app.database.prisma.workflowRun.updateMany({ where: { nodeId }, data: { status: 'aborted', finishedAt: new Date() } });
      const after = await call(verb, { nodeId });
      expect(after.status).toBe(200);
      expect(after.body.node.provisionState).toBe(verb === 'recover' ? 'releasing' : 'retiring');
      const runs = await runsOf(nodeId);
      expect(runs.map((r) => [r.kind, r.status])).toEqual([['metal-deploy', 'aborted'], [verb === 'recover' ? 'metal-release' : 'metal-retire', 'queued']]);
    });

    it('of a node with no run (its batch not yet released): the node fails, and nothing is queued', async () => {
      const { id: nodeId } = await nodeIn('releasing');
      expect((await call('abort', { nodeId })).body.node.provisionState).toBe('failed');
      expect(await runsOf(nodeId)).toEqual([]);
      expect(await jobsOf(nodeId)).toEqual([]);
    });
  });

  it('another tenant\'s node is NOT_FOUND, and gets no run and no job', async () => {
    const verbs: [string, ProvisionState, Record<string, unknown>][] = [
      ['manage', 'ready', {}], ['retire', 'ready', {}], ['undeploy', 'deployed', {}], ['abort', 'enrolling', {}],
    ];
    for (const [verb, state, extra] of verbs) {
      const { id: nodeId } = await nodeIn(state, { owner: other, ...(verb === 'abort' ? { run: { kind: 'metal-enroll', status: 'running' } } : {}) });
      const response = await call(verb, { nodeId, ...extra });
      expect([verb, response.status]).toEqual([verb, 404]);
      const runs = await runsOf(nodeId);
      expect(runs.map((r) => r.status)).toEqual(verb === 'abort' ? ['running'] : []);
      expect(await jobsOf(nodeId)).toEqual([]);
    }
  });

  /**
   * bulk: "Each node is decided on its own, exactly as if the verb were called for it"; "When the
   * verb's steps send destructive commands, a quorum batch ... is created over them": the run each
   * node gets is its single verb's, started only by the batch's release.
   */
  const BULK: [string, ProvisionState, WorkflowKind, Record<string, unknown>][] = [
    ['manage', 'ready', 'metal-enroll', {}],
    ['provide', 'ready', 'metal-commission', {}],
    ['undeploy', 'deployed', 'metal-release', { wipe: 'secure-erase' }],
    ['rescue', 'deployed', 'metal-rescue', {}],
    ['retire', 'failed', 'metal-retire', {}],
  ];
  it.each(BULK)('bulk %s (destructive): no run until the release, then each node\'s %s run with the batch', async (verb, state, kind, extra) => {
    const ids = [(await nodeIn(state, { failedFrom: state === 'failed' ? 'deploying' : undefined })).id, (await nodeIn(state, { failedFrom: state === 'failed' ? 'deploying' : undefined })).id];
    const response = await call('bulk', { poolId: tree.pools[0]!.id, verb, nodeIds: ids, reason: `bulk ${verb}`, ...extra });
    expect(response.status).toBe(200);
    const batchId = response.body.batch.id;
    for (const id of ids) {
      expect(await runsOf(id)).toEqual([]);
      expect(await jobsOf(id)).toEqual([]);
    }
    const { rows } = await sql.query(`SELECT data FROM pgboss.job WHERE name = 'metal.batch' AND data->>'batchId' = $1`, [batchId]);
    expect(rows.map((r) => r.data)).toEqual([{ batchId }]);
    expect(await releaseBatch(t.app.services.sql, batchId)).toBe(2);
    for (const id of ids) {
      const runs = await runsOf(id);
      expect(runs.map((r) => [r.kind, r.status, r.batchId, r.params])).toEqual([[kind, 'queued', batchId, { verb, reason: `bulk ${verb}`, batchId, ...extra }]]);
      expect(await jobsOf(id)).toEqual([{ runId: runs[0]!.id }]);
    }
  });

  it('a GraphQL verb writes the same run as its REST route', async () => {
    const { id: nodeId } = await nodeIn('deployed');
    const result = await gql(t.url, token, 'mutation ($i: MetalUndeployInput!) { undeployNode(input: $i) { node { workflowId } } }', { i: { nodeId, wipe: 'secure_erase' } });
    expect(codeOf(result)).toBeUndefined();
    const runs = await runsOf(nodeId);
    expect(runs.map((r) => [r.id, r.kind, r.params])).toEqual([[result.data!.undeployNode.node.workflowId, 'metal-release', { verb: 'undeploy', wipe: 'secure-erase', requestId: expect.any(String) }]]);
  });
});

describe('the metal.batch worker releases a batch once, into one run per node', () => {
  let t: TestApp;
  // The release's jobs are counted: the metal.batch worker runs, the engine does not (it would
  // advance the released runs at once and queue their timers and retries beside those jobs).
  beforeAll(async () => { t = await startTestApp({ workflowEngine: false }); });
  afterAll(async () => { await t.stop(); });

  it('a recorded batch: the worker starts every node\'s run with its {runId} job, once', async () => {
    const prisma = t.app.database.prisma;
    const tree = await makeTenantTree(prisma, 'intent-worker', { pools: 1, nodesPerPool: 0 });
    const token = await makeToken(prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const ids = Array.from({ length: 5 }, () => newId('MetalNode'));
    await prisma.node.createMany({ data: ids.map((id) => ({ id, tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id, provisionState: 'ready' as const, bmcAddress: '127.4.5.6', bmcDriver: 'redfish' })) });
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[0]!.id, verb: 'retire', nodeIds: ids, reason: 'worker release' });
    expect(response.body.batch.status).toBe('recorded');
    const batchId = response.body.batch.id;
    // The worker polls its queue: wait for the release, which sets released_at with the runs.
    const deadline = Date.now() + 15000;
    let batch = await prisma.commandBatch.findUniqueOrThrow({ where: { id: batchId } });
    while (!batch.releasedAt && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      batch = await prisma.commandBatch.findUniqueOrThrow({ where: { id: batchId } });
    }
    expect(batch.releasedAt).not.toBeNull();
    // The engine, where it runs, may have moved the runs on since: kind, batch and params stay.
    const runs = await prisma.workflowRun.findMany({ where: { nodeId: { in: ids } } });
    expect(runs.map((r) => r.nodeId).sort()).toEqual([...ids].sort());
    for (const run of runs) expect(run).toMatchObject({ kind: 'metal-retire', batchId, params: { verb: 'retire', reason: 'worker release', batchId } });
    // Each is due (no engine runs here: WORKFLOW_ENGINE=off).
    const { rows } = await t.app.services.sql.query(`SELECT id FROM workflow_run WHERE due_at <= now() AND id = ANY($1)`, [runs.map((r) => r.id)]);
    expect(rows.map((r) => r.id).sort()).toEqual(runs.map((r) => r.id).sort());
  });
});
