import pg from 'pg';
import { startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { newId } from '../src/ids';
import { PROVISION_STATES, decideMove, runKindOf, type ProvisionState } from '../src/modules/metal/states';
import { releaseBatch } from '../src/modules/metal/bulk';
import { waitForLockWaiters } from './helpers/locks';

type Verb = 'manage' | 'inspect' | 'provide' | 'recover' | 'retire' | 'abort' | 'undeploy' | 'deploy' | 'rescue';
const FIELD: Record<Verb, string> = {
  manage: 'manageNode', inspect: 'inspectNode', provide: 'provideNode', recover: 'recoverNode',
  retire: 'retireNode', abort: 'abortNode', undeploy: 'undeployNode', deploy: 'deployNode', rescue: 'rescueNode',
};
const INPUT: Record<Verb, string> = {
  manage: 'MetalNodeVerbInput', inspect: 'MetalNodeVerbInput', provide: 'MetalNodeVerbInput', recover: 'MetalNodeVerbInput',
  retire: 'MetalNodeVerbInput', abort: 'MetalAbortInput', undeploy: 'MetalUndeployInput', deploy: 'MetalDeployInput', rescue: 'MetalNodeVerbInput',
};
const mutation = (verb: Verb) =>
  `mutation ($input: ${INPUT[verb]}!) { ${FIELD[verb]}(input: $input) { node { id provisionState failedFrom lastError { code message } maintenance version } } }`;

describe('metal verbs that move a node (manage, inspect, provide, recover, retire, abort, undeploy)', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let other: Awaited<ReturnType<typeof makeTenantTree>>;
  let token: string;
  let sql: pg.Client;

  beforeAll(async () => {
    // No workers: the runs the verbs start stay as written (no engine advances them), and the
    // batch's release is played by the test.
    t = await startTestApp({ role: 'api' });
    tree = await makeTenantTree(t.app.database.prisma, 'verbs', { pools: 1, nodesPerPool: 0 });
    other = await makeTenantTree(t.app.database.prisma, 'others', { pools: 1, nodesPerPool: 0 });
    token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    sql = new pg.Client({ connectionString: t.app.databaseUrl });
    await sql.connect();
    const admin = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const saved = await gql(t.url, admin, 'mutation ($i: DeployProfileVersionInput!) { saveDeployProfileVersion(input: $i) { id versions { version } } }', {
      i: { name: 'k8s-worker', role: 'k8s-worker', steps: [{ name: 'disk', kind: 'partition' }, { name: 'os', kind: 'image', params: { image: 'debian-12' } }] },
    });
    profileId = saved.data!.saveDeployProfileVersion.id;
  });
  afterAll(async () => {
    await sql.end();
    await t.stop();
  });

  async function nodeIn(state: ProvisionState, failedFrom: ProvisionState | null = null, owner = tree) {
    const id = newId('MetalNode');
    await t.app.database.prisma.node.create({
      data: {
        id, tenantId: owner.tenant.id, siteId: owner.site.id, poolId: owner.pools[0]!.id, provisionState: state,
        failedFrom, lastErrorCode: failedFrom ? 'WORKFLOW_FAILED' : null, lastErrorMessage: failedFrom ? 'boom' : null,
        maintenance: failedFrom !== null, bmcAddress: '127.1.1.1', bmcDriver: 'redfish', bmcCredentialsRef: 'secret://x',
      },
    });
    return id;
  }
  const eventsOf = async (nodeId: string) => (await sql.query('SELECT type, payload FROM event WHERE node_id = $1 ORDER BY id', [nodeId])).rows;
  /** The node's runs that are due (what the engine's fetch takes), oldest first, as { data: { runId } }. */
  const jobsOf = async (nodeId: string) =>
    (await sql.query(`SELECT jsonb_build_object('runId', r.id) AS data FROM workflow_run r
                       WHERE r.due_at <= now() AND r.node_id = $1 ORDER BY r.created_at, r.id`, [nodeId])).rows;
  const runsOf = async (nodeId: string) => t.app.database.prisma.workflowRun.findMany({ where: { nodeId }, orderBy: { createdAt: 'asc' } });

  const verbs: Verb[] = ['manage', 'inspect', 'provide', 'recover', 'retire', 'abort', 'undeploy', 'deploy', 'rescue'];
  let profileId: string;
  const extraInput = (verb: Verb) =>
    verb === 'abort' ? { reason: 'operator stop' } : verb === 'deploy' ? { profileId, profileVersion: 1 } : {};
  const rows = verbs.flatMap((verb) => PROVISION_STATES.map((state) => [verb, state] as const));

  it.each(rows)('%s on a node in %s: the table decides, and a legal move commits state, event, run and job together', async (verb, state) => {
    const failedFrom: ProvisionState | null = state === 'failed' ? 'deploying' : null;
    const nodeId = await nodeIn(state, failedFrom);
    const expected = decideMove(verb, state, failedFrom);
    const result = await gql(t.url, token, mutation(verb), { input: { nodeId, ...extraInput(verb) } });
    const row = await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: nodeId } });
    if (!expected.legal) {
      expect(codeOf(result)).toBe('INVALID_STATE');
      expect(result.errors![0]!.message).toContain(`in state ${state}`);
      expect(row.provisionState).toBe(state);
      expect(row.version).toBe(1);
      expect(await eventsOf(nodeId)).toEqual([]);
      expect(await jobsOf(nodeId)).toEqual([]);
      return;
    }
    expect(result.errors).toBeUndefined();
    const to = expected.to ?? state;
    expect(result.data![FIELD[verb]].node).toMatchObject({ id: nodeId, provisionState: to, version: 2 });
    expect(row.provisionState).toBe(to);
    const events = await eventsOf(nodeId);
    expect(events.map((e) => e.type)).toEqual([expected.event]);
    expect(events[0].payload).toMatchObject({ nodeId, verb, from: state, to });
    // The verb's intent is a workflow run; its job names only the run. abort starts none (the
    // node here has no run to abort), nor does recover to deployed.
    const kind = runKindOf(verb, to);
    const runs = await runsOf(nodeId);
    if (kind) {
      expect(runs).toHaveLength(1);
      expect(runs[0]).toMatchObject({ id: row.workflowId, kind, params: { verb, ...(verb === 'undeploy' ? { wipe: 'quick' } : {}) } });
      expect(events[0].payload.workflowId).toBe(runs[0]!.id);
      expect((await jobsOf(nodeId)).map((j) => j.data)).toEqual([{ runId: runs[0]!.id }]);
    } else {
      expect(runs).toEqual([]);
      expect(await jobsOf(nodeId)).toEqual([]);
    }
    if (verb === 'abort') {
      expect(row).toMatchObject({ failedFrom: state, lastErrorCode: 'ABORTED', lastErrorMessage: 'aborted: operator stop', maintenance: true });
    }
    if (verb === 'recover') {
      expect(row).toMatchObject({ failedFrom: null, lastErrorCode: null, lastErrorMessage: null, maintenance: true });
    }
    if (verb === 'retire') {
      // Out of failed as out of any other state: no stale failure rides along; maintenance stays.
      expect(row).toMatchObject({ failedFrom: null, lastErrorCode: null, lastErrorMessage: null, maintenance: failedFrom !== null });
      expect(result.data![FIELD[verb]].node).toMatchObject({ failedFrom: null, lastError: null });
    }
    if (verb === 'deploy') {
      expect(row).toMatchObject({ profileId, profileVersion: 1, role: null });
      expect(runs[0]!.params).toMatchObject({ profileId, profileVersion: 1 });
    }
    if (verb === 'rescue') {
      const run = await t.app.database.prisma.workflowRun.findUniqueOrThrow({ where: { id: row.workflowId! } });
      expect(run).toMatchObject({ nodeId, kind: 'metal-rescue' });
      expect(events[0].payload.workflowId).toBe(run.id);
    }
  });

  describe("rescue on a pool with agent: 'none'", () => {
    // "On a pool with agent: 'none' the node fails with UNSUPPORTED, since such a machine cannot
    // boot the ramdisk. Publishes node.provision.rescue."
    let agentless: Awaited<ReturnType<typeof makeTenantTree>>;
    beforeAll(async () => {
      agentless = await makeTenantTree(t.app.database.prisma, 'agentless', { pools: 1, nodesPerPool: 0, agent: 'none' });
    });
    async function deployedAgentless() {
      const id = newId('MetalNode');
      await t.app.database.prisma.node.create({
        data: { id, tenantId: tree.tenant.id, siteId: agentless.site.id, poolId: agentless.pools[0]!.id, provisionState: 'deployed', bmcAddress: '127.1.1.2', bmcDriver: 'ipmi' },
      });
      return id;
    }
    beforeAll(async () => {
      // The agentless tree belongs to its own tenant; the verbs' token is tree's: move the pool over.
      await t.app.database.prisma.site.update({ where: { id: agentless.site.id }, data: { tenantId: tree.tenant.id } });
      await t.app.database.prisma.pool.update({ where: { id: agentless.pools[0]!.id }, data: { tenantId: tree.tenant.id } });
    });

    it.each(['graphql', 'rest'] as const)('over %s: the node fails with UNSUPPORTED from rescue; both events, no workflow, no job', async (via) => {
      const nodeId = await deployedAgentless();
      const node = via === 'graphql'
        ? (await gql(t.url, token, 'mutation ($input: MetalNodeVerbInput!) { rescueNode(input: $input) { node { provisionState failedFrom lastError { code message } workflowId version } } }', { input: { nodeId } })).data!.rescueNode.node
        : (await rest(t.url, token, 'POST', '/api/compute/metal/rescue', { nodeId })).body.node;
      expect(node).toMatchObject({ provisionState: 'failed', failedFrom: 'rescue', lastError: { code: 'UNSUPPORTED' }, workflowId: null, version: 2 });
      expect((await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: nodeId } })).maintenance).toBe(true);
      expect(node.lastError.message).toMatch(/agentless.*cannot boot the rescue ramdisk/);
      const events = await eventsOf(nodeId);
      expect(events.map((e) => e.type)).toEqual(['node.provision.rescue', 'node.provision.failed']);
      expect(events[1].payload).toMatchObject({ nodeId, verb: 'rescue', from: 'rescue', to: 'failed', error: { code: 'UNSUPPORTED' } });
      expect(await jobsOf(nodeId)).toEqual([]);
      expect(await t.app.database.prisma.workflowRun.count({ where: { nodeId } })).toBe(0);
      // recover returns it to the stable point of rescue: deployed, untouched.
      const recovered = await gql(t.url, token, mutation('recover'), { input: { nodeId } });
      expect(recovered.data!.recoverNode.node).toMatchObject({ provisionState: 'deployed', failedFrom: null, lastError: null });
    });

    it('bulk rescue fails every node the same way, with no batch and no job (and needs no reason: nothing destructive runs)', async () => {
      const ids = [await deployedAgentless(), await deployedAgentless()];
      const res = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: agentless.pools[0]!.id, verb: 'rescue', nodeIds: ids, reason: 'disk repair' });
      expect(res.status).toBe(200);
      expect(res.body.batch).toBeNull();
      for (const n of res.body.nodes) expect(n).toMatchObject({ provisionState: 'failed', failedFrom: 'rescue', lastError: { code: 'UNSUPPORTED' }, workflowId: null, maintenance: true });
      for (const id of ids) {
        const events = await eventsOf(id);
        expect(events.map((e) => e.type)).toEqual(['node.provision.rescue', 'node.provision.failed']);
        expect(events[0].payload.reason).toBe('disk repair');
        expect(await jobsOf(id)).toEqual([]);
      }
      const unexplained = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: agentless.pools[0]!.id, verb: 'rescue', nodeIds: [await deployedAgentless()] });
      expect(unexplained.status).toBe(200);
    });

    it('bulk rescue on an agent pool starts one rescue workflow per node at the batch\'s release, as the single verb does', async () => {
      const ids = [await nodeIn('deployed'), await nodeIn('deployed')];
      const res = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[0]!.id, verb: 'rescue', nodeIds: ids, reason: 'disk repair' });
      expect(res.status).toBe(200);
      const batchId = res.body.batch.id;
      // Rebooting a deployed machine is destructive: nothing runs before the batch is released
      // (this app runs no workers: the test plays the metal.batch job, whose one job was queued).
      for (const id of ids) expect(await runsOf(id)).toEqual([]);
      const release = await sql.query(`SELECT data FROM pgboss.job WHERE name = 'metal.batch' AND data->>'batchId' = $1`, [batchId]);
      expect(release.rows.map((r) => r.data)).toEqual([{ batchId }]);
      // unrescue before the rescue even started: the ramdisk has not begun to boot.
      const early = await gql(t.url, token, 'mutation ($input: MetalNodeVerbInput!) { unrescueNode(input: $input) { node { id } } }', { input: { nodeId: ids[0] } });
      expect(codeOf(early)).toBe('CONFLICT');
      expect(early.errors![0]!.message).toMatch(/has not started booting/);
      expect(await releaseBatch(t.app.services.sql, batchId)).toBe(2);
      for (const id of ids) {
        const row = await t.app.database.prisma.node.findUniqueOrThrow({ where: { id } });
        expect(row.provisionState).toBe('rescue');
        const run = await t.app.database.prisma.workflowRun.findUniqueOrThrow({ where: { id: row.workflowId! } });
        expect(run).toMatchObject({ nodeId: id, kind: 'metal-rescue', status: 'queued', batchId, params: { verb: 'rescue', reason: 'disk repair', batchId } });
        const events = await eventsOf(id);
        expect(events.map((e) => e.type)).toEqual(['node.provision.rescue']);
        expect(events[0].payload).toMatchObject({ nodeId: id, from: 'deployed', to: 'rescue', bulk: true, batchId });
        expect((await jobsOf(id)).map((j) => j.data)).toEqual([{ runId: run.id }]);
      }
      // unrescue reads that run: CONFLICT while the ramdisk boots.
      const booting = await gql(t.url, token, 'mutation ($input: MetalNodeVerbInput!) { unrescueNode(input: $input) { node { id } } }', { input: { nodeId: ids[0] } });
      expect(codeOf(booting)).toBe('CONFLICT');
      expect(booting.errors![0]!.message).toMatch(/still booting/);
    });
  });

  describe('retire out of failed clears failedFrom and lastError, as recover does', () => {
    const FAILED_FROM: ProvisionState[] = ['enrolling', 'inspecting', 'commissioning', 'deploying', 'releasing', 'rescue', 'retiring'];

    it.each(FAILED_FROM)('over REST, a node that failed from %s', async (failedFrom) => {
      const nodeId = await nodeIn('failed', failedFrom);
      const response = await rest(t.url, token, 'POST', '/api/compute/metal/retire', { nodeId });
      expect(response.status).toBe(200);
      expect(response.body.node).toMatchObject({ provisionState: 'retiring', failedFrom: null, lastError: null, maintenance: true });
    });

    it('bulk retire clears them on every node, exactly as the single verb', async () => {
      const ids = [await nodeIn('failed', 'deploying'), await nodeIn('failed', 'retiring'), await nodeIn('ready')];
      const res = await rest(t.url, token, 'POST', '/api/compute/metal/bulk', { poolId: tree.pools[0]!.id, verb: 'retire', nodeIds: ids, reason: 'decommission' });
      expect(res.status).toBe(200);
      expect(res.body.nodes.map((n: any) => [n.provisionState, n.failedFrom, n.lastError, n.maintenance])).toEqual([
        ['retiring', null, null, true], ['retiring', null, null, true], ['retiring', null, null, false],
      ]);
      const rows = await t.app.database.prisma.node.findMany({ where: { id: { in: ids } } });
      for (const row of rows) expect(row).toMatchObject({ provisionState: 'retiring', failedFrom: null, lastErrorCode: null, lastErrorMessage: null });
    });

    it('a failure recorded while retire waits to write is not wiped: CONFLICT, and the new failure stays', async () => {
      const nodeId = await nodeIn('failed', 'deploying');
      const holder = new pg.Client({ connectionString: t.app.databaseUrl });
      await holder.connect();
      try {
        // retire reads the node, then stops at its write behind this lock; meanwhile the node's
        // failure changes (a concurrent writer), so retire's compare-and-set must lose.
        await holder.query('BEGIN');
        await holder.query('LOCK TABLE node IN SHARE MODE');
        const pending = rest(t.url, token, 'POST', '/api/compute/metal/retire', { nodeId });
        await waitForLockWaiters(holder, 1);
        await holder.query(`UPDATE node SET failed_from = 'inspecting', last_error_message = 'newer', version = version + 1 WHERE id = $1`, [nodeId]);
        await holder.query('COMMIT');
        const response = await pending;
        expect(response.status).toBe(409);
        expect(response.body.error.code).toBe('CONFLICT');
      } finally {
        await holder.end();
      }
      const row = await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: nodeId } });
      expect(row).toMatchObject({ provisionState: 'failed', failedFrom: 'inspecting', lastErrorMessage: 'newer', version: 2 });
      expect(await eventsOf(nodeId)).toEqual([]);
    });

    it('another tenant\'s failed node is NOT_FOUND and keeps its failure', async () => {
      const foreign = await nodeIn('failed', 'deploying', other);
      expect((await rest(t.url, token, 'POST', '/api/compute/metal/retire', { nodeId: foreign })).status).toBe(404);
      expect(await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: foreign } })).toMatchObject({ failedFrom: 'deploying', lastErrorCode: 'WORKFLOW_FAILED' });
    });
  });

  describe('unrescue', () => {
    const UNRESCUE = 'mutation ($input: MetalNodeVerbInput!) { unrescueNode(input: $input) { node { id provisionState workflowId version } } }';
    async function rescued() {
      const nodeId = await nodeIn('deployed');
      await gql(t.url, token, mutation('rescue'), { input: { nodeId } });
      return nodeId;
    }
    it.each(PROVISION_STATES.filter((s) => s !== 'rescue'))('is INVALID_STATE from %s', async (state) => {
      const nodeId = await nodeIn(state);
      expect(codeOf(await gql(t.url, token, UNRESCUE, { input: { nodeId } }))).toBe('INVALID_STATE');
    });
    it('is CONFLICT while the rescue ramdisk is still booting, then starts the workflow once, idempotently', async () => {
      const nodeId = await rescued();
      const early = await gql(t.url, token, UNRESCUE, { input: { nodeId } });
      expect(codeOf(early)).toBe('CONFLICT');
      expect(early.errors![0]!.message).toMatch(/still booting/);
      const rescueRun = (await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: nodeId } })).workflowId!;
      await t.app.database.prisma.workflowRun.update({ where: { id: rescueRun }, data: { status: 'succeeded' } });
      const first = await rest(t.url, token, 'POST', '/api/compute/metal/unrescue', { nodeId });
      expect(first.status).toBe(200);
      expect(first.body.node.provisionState).toBe('rescue');
      const workflowId = first.body.node.workflowId;
      expect(workflowId).not.toBe(rescueRun);
      const events = (await eventsOf(nodeId)).filter((e) => e.type === 'node.provision.unrescuing');
      expect(events).toHaveLength(1);
      expect(events[0].payload.workflowId).toBe(workflowId);
      const again = await gql(t.url, token, UNRESCUE, { input: { nodeId } });
      expect(again.data!.unrescueNode.node).toMatchObject({ workflowId, version: first.body.node.version });
      expect((await eventsOf(nodeId)).filter((e) => e.type === 'node.provision.unrescuing')).toHaveLength(1);
      expect((await jobsOf(nodeId)).map((j) => j.data)).toEqual([{ runId: rescueRun }, { runId: workflowId }]);
    });
    it('is INVALID_CONFIG when the provision module is not registered', async () => {
      const nodeId = await rescued();
      const metalOnly = await startTestApp({ databaseUrl: t.app.databaseUrl, modules: ['metal'], adminToken: t.adminToken, role: 'api' });
      try {
        const response = await rest(metalOnly.url, token, 'POST', '/api/compute/metal/unrescue', { nodeId });
        expect(response.status).toBe(422);
        expect(response.body.error.code).toBe('INVALID_CONFIG');
      } finally {
        await metalOnly.stop();
      }
    });
  });

  it('deploy records only a profile version that exists in the node\'s tenant', async () => {
    const nodeId = await nodeIn('ready');
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ profileId, profileVersion: 2 }, /profileVersion: .* has no such version/],
      [{ profileId: 'dpr_00000000-0000-7000-8000-000000000000', profileVersion: 1 }, /profileId: no such deploy profile/],
    ];
    for (const [extra, message] of cases) {
      const response = await rest(t.url, token, 'POST', '/api/compute/metal/deploy', { nodeId, ...extra });
      expect(response.status).toBe(400);
      expect(response.body.error.message).toMatch(message);
    }
    const missing = await rest(t.url, token, 'POST', '/api/compute/metal/deploy', { nodeId });
    expect(missing.body.error.message).toMatch(/body\.profileId: is required/);
    expect((await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: nodeId } })).version).toBe(1);
    const valid = await gql(t.url, token, 'query ($p: ID!, $v: Int!) { validateProfile(profileId: $p, profileVersion: $v) { valid problems } }', { p: profileId, v: 1 });
    expect(valid.data!.validateProfile).toEqual({ valid: true, problems: [] });
    const none = await gql(t.url, token, 'query ($p: ID!, $v: Int!) { validateProfile(profileId: $p, profileVersion: $v) { valid problems } }', { p: profileId, v: 9 });
    expect(none.data!.validateProfile.valid).toBe(false);
  });

  it('REST and GraphQL give the same view (undeploy with secure-erase through REST)', async () => {
    const viaRest = await nodeIn('deployed');
    const viaGraphql = await nodeIn('deployed');
    const response = await rest(t.url, token, 'POST', '/api/compute/metal/undeploy', { nodeId: viaRest, wipe: 'secure-erase' });
    expect(response.status).toBe(200);
    const result = await gql(t.url, token, 'mutation ($i: MetalUndeployInput!) { undeployNode(input: $i) { node { id provisionState version maintenance } } }', { i: { nodeId: viaGraphql, wipe: 'secure_erase' } });
    const strip = (n: any) => ({ provisionState: n.provisionState, version: n.version, maintenance: n.maintenance });
    expect(strip(response.body.node)).toEqual(strip(result.data!.undeployNode.node));
    expect(response.body.node).toMatchObject({ id: viaRest, bmc: { credentialsSet: true } });
    expect((await runsOf(viaRest))[0]!.params).toEqual({ verb: 'undeploy', wipe: 'secure-erase', requestId: expect.any(String) });
    const bad = await rest(t.url, token, 'POST', '/api/compute/metal/undeploy', { nodeId: viaRest, wipe: 'shred' });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toMatch(/body\.wipe/);
  });

  it('a node\'s history under concurrent verbs is a legal path', async () => {
    const nodeId = await nodeIn('ready');
    const racers: Verb[] = ['manage', 'retire', 'abort', 'recover', 'inspect', 'provide', 'retire', 'abort'];
    await Promise.all(racers.flatMap((verb) => [0, 1].map(() => gql(t.url, token, mutation(verb), { input: { nodeId } }))));
    const events = await eventsOf(nodeId);
    let state: ProvisionState = 'ready';
    let failedFrom: ProvisionState | null = null;
    for (const event of events) {
      expect(event.payload.from).toBe(state);
      const decision = decideMove(event.payload.verb, state, failedFrom);
      expect(decision).toMatchObject({ legal: true, event: event.type });
      failedFrom = event.payload.verb === 'abort' ? state : ['recover', 'retire'].includes(event.payload.verb) ? null : failedFrom;
      state = event.payload.to;
    }
    expect((await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: nodeId } })).provisionState).toBe(state);
  });

  it('another tenant\'s node is NOT_FOUND; without compute:nodes:provision on the right scope, PERMISSION_DENIED', async () => {
    const foreign = await nodeIn('ready', null, other);
    expect(codeOf(await gql(t.url, token, mutation('inspect'), { input: { nodeId: foreign } }))).toBe('NOT_FOUND');
    expect((await rest(t.url, token, 'POST', '/api/compute/metal/inspect', { nodeId: foreign })).status).toBe(404);
    const mine = await nodeIn('ready');
    const powerOnly = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:power', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    expect(codeOf(await gql(t.url, powerOnly, mutation('inspect'), { input: { nodeId: mine } }))).toBe('PERMISSION_DENIED');
    const otherPool = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'node', scopeId: await nodeIn('ready') }]);
    expect((await rest(t.url, otherPool, 'POST', '/api/compute/metal/retire', { nodeId: mine })).status).toBe(403);
  });

  it('20 concurrent verbs on one node: exactly one wins, the others get CONFLICT or INVALID_STATE', async () => {
    const nodeId = await nodeIn('ready');
    // Each is legal only from ready, and none is legal after another: one must win.
    const verbsToRace: Verb[] = ['manage', 'inspect', 'provide'];
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => gql(t.url, token, mutation(verbsToRace[i % 3]!), { input: { nodeId } })),
    );
    const winners = results.filter((r) => !r.errors);
    expect(winners).toHaveLength(1);
    for (const loser of results.filter((r) => r.errors)) expect(['CONFLICT', 'INVALID_STATE']).toContain(codeOf(loser));
    const events = await eventsOf(nodeId);
    expect(events).toHaveLength(1);
    expect(await jobsOf(nodeId)).toHaveLength(1);
    const row = await t.app.database.prisma.node.findUniqueOrThrow({ where: { id: nodeId } });
    expect(row.version).toBe(2);
    expect(decideMove(events[0].payload.verb, 'ready')).toMatchObject({ legal: true, to: row.provisionState });
  });
});

describe('apiMethods', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t.stop());

  it('lists the 15 metal methods with path, kind, authorization, module and phase, and serves exactly those with routes', async () => {
    const result = await gql(t.url, t.adminToken, '{ apiMethods { name path kind authorization module phase served } }');
    const methods = result.data!.apiMethods as { name: string; path: string; kind: string; authorization: string; module: string; phase: string; served: boolean }[];
    expect(methods).toHaveLength(15);
    expect(methods.find((m) => m.name === 'enroll')).toEqual({
      name: 'enroll', path: '/api/compute/metal/enroll', kind: 'mutation', authorization: 'compute:nodes:provision @ compute-pool', module: 'metal', phase: 'v0.2', served: true,
    });
    expect(methods.find((m) => m.name === 'power')!.authorization).toBe('compute:nodes:power @ compute-node');
    expect(methods.find((m) => m.name === 'discovered')).toMatchObject({ kind: 'read', authorization: 'compute:sites:read @ compute-site', phase: 'v1.0' });
    for (const m of methods) {
      const response = await rest(t.url, t.adminToken, 'POST', m.path, {});
      // A served method answers (here: 400 for the missing body fields); an unserved one is 404.
      expect([m.name, response.status === 404]).toEqual([m.name, !m.served]);
    }
  });
});
