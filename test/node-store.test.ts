/**
 * The node store (src/modules/metal/node-store.ts): every node write is one statement with its
 * events, the run it starts (superseding the node's active one) and the job naming that run,
 * through a pg transaction or Prisma's alike; at most one active run per node; no event payload
 * or run params carry a credential, whichever writer tries.
 */
import pg from 'pg';
import { checkEventPayload } from '../src/events/outbox';
import { createNode, prismaRunner, updateNode, updateNodeStatement } from '../src/modules/metal/node-store';
import { newId } from '../src/ids';
import { makeTenantTree } from './helpers/fixtures';
import { startTestApp, type TestApp } from './helpers/app';
import { waitForLockWaiters } from './helpers/locks';

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
    expect(() => checkEventPayload({ bgpPasswordIsSet: true, password: null, verb: 'enroll', bmc: { address: '127.0.0.1', driver: 'redfish' } })).not.toThrow();
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
  // No workers: the runs stay as the store wrote them.
  beforeAll(async () => { t = await startTestApp({ role: 'api' }); });
  afterAll(async () => { await t?.stop(); });

  it('a credential in an event of any writer writes nothing at all', async () => {
    const { prisma, sql } = t.app.services;
    const tree = await makeTenantTree(prisma, `store-${newId('Tenant')}`, { pools: 1, nodesPerPool: 1 });
    const node = tree.nodes[0]!;
    const before = await prisma.node.findUniqueOrThrow({ where: { id: node.id } });
    const events = await prisma.event.count({ where: { nodeId: node.id } });
    const bad = { data: { maintenance: true }, run: null, events: [{ type: 'node.x', payload: { password: 'hunter2' } }] };
    await expect(sql.transaction((tx) => updateNode(tx, { id: node.id, version: before.version }, bad, 'req'))).rejects.toThrow('payload.password');
    await expect(prisma.$transaction((tx) => updateNode(prismaRunner(tx), { id: node.id, version: null }, bad, 'req'))).rejects.toThrow('payload.password');
    const id = newId('MetalNode');
    await expect(prisma.$transaction((tx) => createNode(prismaRunner(tx), {
      id, tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id, name: null, provisionState: 'enrolling',
      bmcAddress: '127.9.9.9', bmcDriver: 'redfish', bmcDriverOptions: {}, bmcCredentialsRef: 'secret://x', addresses: [], macs: [],
      productUuid: null, hardwareProfileId: null, driverBindings: {},
    }, { run: { id: newId('WorkflowRun'), kind: 'metal-enroll' }, events: [{ type: 'node.enrolled', payload: { bmc: { credentials: 'secret://x' } } }] }, 'req'))).rejects.toThrow('payload.bmc.credentials');
    expect(await prisma.node.findUnique({ where: { id } })).toBeNull();
    expect(await prisma.node.findUniqueOrThrow({ where: { id: node.id } })).toEqual(before);
    expect(await prisma.event.count({ where: { nodeId: node.id } })).toBe(events);
  });

  it('a write through either runner is the compare-and-set and the events together; no run, no job', async () => {
    const { prisma, sql } = t.app.services;
    const tree = await makeTenantTree(prisma, `store-${newId('Tenant')}`, { pools: 1, nodesPerPool: 1 });
    const node = await prisma.node.findUniqueOrThrow({ where: { id: tree.nodes[0]!.id } });
    const write = { data: { maintenance: true }, run: null, events: [{ type: 'node.maintenance.on', payload: { why: 'test' } }] };
    const row = await sql.transaction((tx) => updateNode(tx, node, write, 'req-1'));
    expect(row).toMatchObject({ id: node.id, maintenance: true, version: node.version + 1 });
    // The same version again: the compare-and-set refuses, and nothing more is written.
    expect(await prisma.$transaction((tx) => updateNode(prismaRunner(tx), node, write, 'req-2'))).toBeNull();
    const events = await prisma.event.findMany({ where: { nodeId: node.id, type: 'node.maintenance.on' } });
    expect(events.map((e) => e.payload)).toEqual([{ nodeId: node.id, why: 'test', requestId: 'req-1' }]);
    expect(await prisma.workflowRun.count({ where: { nodeId: node.id } })).toBe(0);
    expect(await advanceJobs(node.id)).toEqual([]);
  });

  /** A node's runs that are due (what the engine's fetch takes), oldest first, as { runId }. */
  async function advanceJobs(nodeId: string): Promise<unknown[]> {
    const { rows } = await t.app.services.sql.query(
      `SELECT jsonb_build_object('runId', r.id) AS data FROM workflow_run r
        WHERE r.due_at <= now() AND r.node_id = $1 ORDER BY r.created_at, r.id`, [nodeId]);
    return rows.map((r) => r.data);
  }
  async function freshNode() {
    const { prisma } = t.app.services;
    const tree = await makeTenantTree(prisma, `store-${newId('Tenant')}`, { pools: 1, nodesPerPool: 1 });
    return prisma.node.findUniqueOrThrow({ where: { id: tree.nodes[0]!.id } });
  }
  const runOf = (id: string) => t.app.services.prisma.workflowRun.findUniqueOrThrow({ where: { id } });

  it('a write that starts a run: the run with its params and batch, the node\'s workflow_id, events naming it, one job naming only it', async () => {
    const { prisma, sql } = t.app.services;
    const node = await freshNode();
    const runId = newId('WorkflowRun');
    const batchId = newId('CommandBatch');
    const row = await sql.transaction((tx) => updateNode(tx, node, {
      data: { provisionState: 'releasing' },
      run: { id: runId, kind: 'metal-release', params: { verb: 'undeploy', wipe: 'secure-erase', reason: 'lease over', batchId }, batchId },
      events: [{ type: 'node.provision.releasing', payload: { verb: 'undeploy' } }],
    }, 'req-run'));
    expect(row).toMatchObject({ provisionState: 'releasing', workflowId: runId, version: node.version + 1 });
    expect(await runOf(runId)).toMatchObject({
      nodeId: node.id, kind: 'metal-release', status: 'queued', batchId, finishedAt: null,
      params: { verb: 'undeploy', wipe: 'secure-erase', reason: 'lease over', batchId, requestId: 'req-run' },
    });
    const events = await prisma.event.findMany({ where: { nodeId: node.id } });
    expect(events.map((e) => e.payload)).toEqual([{ nodeId: node.id, verb: 'undeploy', workflowId: runId, requestId: 'req-run' }]);
    expect(await advanceJobs(node.id)).toEqual([{ runId }]);
  });

  it('the same write sent with the COMMIT (updateNodeStatement): written as updateNode writes it; a node changed since raises and nothing commits', async () => {
    const { prisma, sql } = t.app.services;
    const node = await freshNode();
    const runId = newId('WorkflowRun');
    const write = {
      data: { provisionState: 'releasing' as const, inventory: { note: "it's quoted" }, macs: ['52:54:00:00:00:01', 'a"b'] },
      run: { id: runId, kind: 'metal-release' as const, params: { verb: 'undeploy', reason: "o'clock" } },
      events: [{ type: 'node.provision.releasing', payload: { verb: 'undeploy' } }],
    };
    // A version another writer moved past: the check raises at the COMMIT, and nothing of the transaction stays.
    const marker = newId('Tenant');
    await expect(sql.transaction(async (tx) => {
      await tx.query(`UPDATE node SET name = $2 WHERE id = $1`, [node.id, marker]);
      tx.commitWith(updateNodeStatement({ id: node.id, version: node.version - 1 }, write, 'req-stale'));
    })).rejects.toThrow(`node ${node.id} changed under its run's lock`);
    expect(await prisma.node.findUniqueOrThrow({ where: { id: node.id } })).toMatchObject({ name: node.name, version: node.version, provisionState: node.provisionState });
    expect(await prisma.workflowRun.count({ where: { id: runId } })).toBe(0);
    // The current version: one round trip with the COMMIT, the same rows as updateNode's.
    let answer: Promise<unknown> | null = null;
    await sql.transaction(async (tx) => { answer = tx.commitWith(updateNodeStatement(node, write, 'req-commit')); });
    expect(await answer).toMatchObject({ rows: [{ ok: true, started: 1 }] });
    expect(await prisma.node.findUniqueOrThrow({ where: { id: node.id } })).toMatchObject({
      provisionState: 'releasing', workflowId: runId, version: node.version + 1, inventory: { note: "it's quoted" }, macs: ['52:54:00:00:00:01', 'a"b'],
    });
    expect(await runOf(runId)).toMatchObject({ nodeId: node.id, kind: 'metal-release', status: 'queued', params: { verb: 'undeploy', reason: "o'clock", requestId: 'req-commit' } });
    const events = await prisma.event.findMany({ where: { nodeId: node.id } });
    expect(events.map((e) => e.payload)).toEqual([{ nodeId: node.id, verb: 'undeploy', workflowId: runId, requestId: 'req-commit' }]);
  });

  it('a new run supersedes the node\'s active one in the same statement (finished_at set); finished runs are left as they are', async () => {
    const { prisma, sql } = t.app.services;
    const node = await freshNode();
    const done = newId('WorkflowRun');
    await prisma.workflowRun.create({ data: { id: done, nodeId: node.id, kind: 'metal-commission', status: 'succeeded', finishedAt: new Date('2026-01-01T00:00:00Z') } });
    let version = node.version;
    const start = async () => {
      const runId = newId('WorkflowRun');
      const row = await sql.transaction((tx) => updateNode(tx, { id: node.id, version }, {
        data: {}, run: { id: runId, kind: 'metal-enroll', params: { verb: 'manage' } }, events: [],
      }, null));
      version = row!.version;
      expect(row!.workflowId).toBe(runId);
      expect(await runOf(runId)).toMatchObject({ status: 'queued', params: { verb: 'manage' }, finishedAt: null });
      return runId;
    };
    let previous = await start();
    for (const status of ['queued', 'running', 'waiting']) {
      // The run the last write started, moved on by "the engine" to the status under test (a
      // worker holding its lease while it runs).
      await prisma.workflowRun.update({ where: { id: previous }, data: { status, leaseUntil: new Date(Date.now() + 60000) } });
      const next = await start();
      // Over, and its lease given up: no worker may take it again; its version moved on (the
      // engine's fence).
      expect(await runOf(previous)).toMatchObject({ status: 'superseded', finishedAt: expect.any(Date), leaseUntil: null, version: 2 });
      previous = next;
    }
    expect(await runOf(done)).toMatchObject({ status: 'succeeded', finishedAt: new Date('2026-01-01T00:00:00Z') });
    expect(await prisma.workflowRun.count({ where: { nodeId: node.id, status: { in: ['queued', 'running', 'waiting', 'aborting'] } } })).toBe(1);
  });

  it("abort: the active run becomes aborting with abort_requested_at, and is woken; no run starts", async () => {
    const { prisma, sql } = t.app.services;
    const node = await freshNode();
    const runId = newId('WorkflowRun');
    await sql.transaction((tx) => updateNode(tx, node, { data: {}, run: { id: runId, kind: 'metal-enroll' }, events: [] }, null));
    // Waiting with nothing due, as a step's commit leaves it.
    await prisma.workflowRun.update({ where: { id: runId }, data: { status: 'waiting', waitingFor: 'a command', dueAt: null } });
    expect(await advanceJobs(node.id)).toEqual([]);
    const row = await sql.transaction((tx) => updateNode(tx, { id: node.id, version: node.version + 1 }, {
      data: { provisionState: 'failed', failedFrom: 'enrolling' }, run: null, events: [], activeRun: 'abort',
    }, null));
    expect(row).toMatchObject({ provisionState: 'failed', workflowId: runId });
    expect(await runOf(runId)).toMatchObject({ status: 'aborting', abortRequestedAt: expect.any(Date), finishedAt: null });
    expect(await advanceJobs(node.id)).toEqual([{ runId }]);
    expect(await prisma.workflowRun.count({ where: { nodeId: node.id } })).toBe(1);
  });

  it('a run started while the node\'s aborted run still cleans up is CONFLICT, and writes nothing', async () => {
    const { prisma, sql } = t.app.services;
    const node = await freshNode();
    const aborting = newId('WorkflowRun');
    await prisma.workflowRun.create({ data: { id: aborting, nodeId: node.id, kind: 'metal-deploy', status: 'aborting', abortRequestedAt: new Date(), dueAt: null } });
    const before = await prisma.node.findUniqueOrThrow({ where: { id: node.id } });
    const retire = { data: { provisionState: 'retiring' }, run: { id: newId('WorkflowRun'), kind: 'metal-retire' as const }, events: [{ type: 'node.provision.retiring', payload: {} }] };
    for (const version of [before.version, null]) {
      await expect(sql.transaction((tx) => updateNode(tx, { id: node.id, version }, retire, null)))
        .rejects.toMatchObject({ code: 'CONFLICT', message: expect.stringMatching(/aborted run .* is still cleaning up; retry when it ends/) });
    }
    expect(await prisma.node.findUniqueOrThrow({ where: { id: node.id } })).toEqual(before);
    expect(await runOf(aborting)).toMatchObject({ status: 'aborting' });
    expect(await prisma.workflowRun.count({ where: { nodeId: node.id } })).toBe(1);
    expect(await prisma.event.count({ where: { nodeId: node.id } })).toBe(0);
    expect(await advanceJobs(node.id)).toEqual([]);
    // A write that starts no run (a maintenance flag, discovery) is not held up by the cleanup.
    expect(await sql.transaction((tx) => updateNode(tx, before, { data: { maintenance: true }, run: null, events: [] }, null))).not.toBeNull();
  });

  it("wake: the node's active run is made due, nothing when it has no active run", async () => {
    const { prisma, sql } = t.app.services;
    const node = await freshNode();
    const wake = { data: {}, run: null, events: [], activeRun: 'wake' as const };
    await prisma.$transaction((tx) => updateNode(prismaRunner(tx), { id: node.id, version: null }, wake, null));
    expect(await advanceJobs(node.id)).toEqual([]);
    const runId = newId('WorkflowRun');
    await prisma.workflowRun.create({ data: { id: runId, nodeId: node.id, kind: 'metal-enroll', status: 'waiting', waitingFor: 'its MAC', dueAt: null } });
    expect(await advanceJobs(node.id)).toEqual([]);
    await prisma.$transaction((tx) => updateNode(prismaRunner(tx), { id: node.id, version: null }, wake, null));
    expect(await advanceJobs(node.id)).toEqual([{ runId }]);
  });

  it('a credential in a run\'s params writes nothing', async () => {
    const { prisma, sql } = t.app.services;
    const node = await freshNode();
    await expect(sql.transaction((tx) => updateNode(tx, node, {
      data: {}, run: { id: newId('WorkflowRun'), kind: 'metal-enroll', params: { verb: 'enroll', password: 'hunter2' } }, events: [],
    }, null))).rejects.toThrow('params.password');
    expect(await prisma.workflowRun.count({ where: { nodeId: node.id } })).toBe(0);
    expect((await prisma.node.findUniqueOrThrow({ where: { id: node.id } })).version).toBe(node.version);
  });

  describe('at most one active run per node (workflow_run_one_active)', () => {
    it.each(['queued', 'running', 'waiting', 'aborting'])('a second %s run of a node cannot be inserted beside an active one', async (status) => {
      const { prisma } = t.app.services;
      const node = await freshNode();
      await prisma.workflowRun.create({ data: { id: newId('WorkflowRun'), nodeId: node.id, kind: 'metal-enroll', status: 'running' } });
      await expect(prisma.workflowRun.create({ data: { id: newId('WorkflowRun'), nodeId: node.id, kind: 'metal-retire', status } })).rejects.toThrow(/workflow_run_one_active|Unique constraint/);
      // Runs that are over are not counted.
      for (const over of ['succeeded', 'failed', 'aborted', 'superseded']) {
        await prisma.workflowRun.create({ data: { id: newId('WorkflowRun'), nodeId: node.id, kind: 'metal-retire', status: over } });
      }
    });

    it('two writers without a compare-and-set that race to start a run: one run, the other CONFLICT', async () => {
      const { prisma, sql } = t.app.services;
      const node = await freshNode();
      const holder = new pg.Client({ connectionString: t.app.databaseUrl });
      await holder.connect();
      try {
        // Both statements start (their snapshots taken) before either can write the node.
        await holder.query('BEGIN');
        await holder.query('SELECT 1 FROM node WHERE id = $1 FOR UPDATE', [node.id]);
        const start = (kind: 'metal-enroll' | 'metal-retire') => sql.transaction((tx) =>
          updateNode(tx, { id: node.id, version: null }, { data: {}, run: { id: newId('WorkflowRun'), kind }, events: [] }, null))
          .then(() => 'ok', (e: { code?: string }) => e.code ?? String(e));
        const racing = [start('metal-enroll'), start('metal-retire')];
        await waitForLockWaiters(holder, 2);
        await holder.query('COMMIT');
        expect((await Promise.all(racing)).sort()).toEqual(['CONFLICT', 'ok']);
      } finally {
        await holder.end();
      }
      const runs = await prisma.workflowRun.findMany({ where: { nodeId: node.id } });
      expect(runs).toHaveLength(1);
      const row = await prisma.node.findUniqueOrThrow({ where: { id: node.id } });
      expect(row.workflowId).toBe(runs[0]!.id);
      expect(await advanceJobs(node.id)).toEqual([{ runId: runs[0]!.id }]);
    });
  });
});
