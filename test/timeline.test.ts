/**
 * The timeline an operator reads: MetalNode.timeline and Query.workflowRun over GraphQL, GET
 * /api/compute/metal/nodes/{id}/timeline over REST (the same operation), and workflowProgress
 * streaming every step's start and end. Runs are advanced by the real engine; the agent's results
 * are written as its module writes them.
 */
import { startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { sseSubscribe, until } from './helpers/streams';
import { makeToken } from './helpers/fixtures';
import { expireTimers, makeNode, makeWorld, playAgent, startRun, type World } from './helpers/engine';
import { advanceRun, type EngineDeps } from '../jobs/engine';

let t: TestApp;
let world: World;
let deps: EngineDeps;
beforeAll(async () => {
  t = await startTestApp({ role: 'api' });
  world = await makeWorld(t.app.services.prisma);
  deps = { sql: t.app.services.sql, random: () => 0.5 };
});
afterAll(async () => { await t?.stop(); });

const TIMELINE = `query ($id: ID!) { node(id: $id) { ... on MetalNode { id timeline { id kind status lastError { code } steps { name title status attempts startedAt finishedAt message errorCode } } } } }`;

describe('timeline', () => {
  it('shows every step with its human title, times, attempts and last message; a retry clears the old failure; REST shows the same', async () => {
    const node = await makeNode(t.app.services.prisma, world, { state: 'enrolling' });
    const runId = await startRun(t.app.services.sql, node.id, 'metal-enroll', { verb: 'enroll' });
    const progress = sseSubscribe(t.url, t.adminToken, `subscription ($id: ID!) { workflowProgress(runId: $id) { type payload } }`, { id: runId });
    try {
      await advanceRun(deps, runId);
      await playAgent(t.app.services.sql, runId, () => ({ ok: false, code: 'BMC_TIMEOUT', message: 'no answer within 15 s', retryable: true }));
      await advanceRun(deps, runId);
      let res = await gql(t.url, t.adminToken, TIMELINE, { id: node.id });
      let [run] = res.data!.node.timeline;
      expect(run).toMatchObject({ id: runId, kind: 'metal-enroll', status: 'waiting', lastError: null });
      expect(run.steps[0]).toMatchObject({ name: 'verify-bmc', title: 'Verifying BMC access', status: 'waiting', attempts: 1, errorCode: 'BMC_TIMEOUT', finishedAt: null });
      expect(run.steps[0].message).toContain('BMC_TIMEOUT: bmc.power-state: no answer within 15 s (attempt 1 of 3');
      expect(run.steps[0].startedAt).toEqual(expect.any(String));
      expect(run.steps.slice(1).map((s: { status: string }) => s.status)).toEqual(['pending', 'pending', 'pending']);

      // The retry is running: no stale error shows.
      await expireTimers(t.app.services.sql, runId);
      await advanceRun(deps, runId);
      res = await gql(t.url, t.adminToken, TIMELINE, { id: node.id });
      [run] = res.data!.node.timeline;
      expect(run.steps[0]).toMatchObject({ attempts: 2, errorCode: null, message: 'waiting for the site agent to run bmc.power-state' });

      await playAgent(t.app.services.sql, runId, () => ({ ok: true, value: 'off' }));
      await advanceRun(deps, runId);
      res = await gql(t.url, t.adminToken, TIMELINE, { id: node.id });
      [run] = res.data!.node.timeline;
      expect(run.steps[0]).toMatchObject({ status: 'succeeded', attempts: 2, message: 'the BMC answers with the stored credentials; power is off' });
      expect(run.steps[0].finishedAt).toEqual(expect.any(String));
      expect(run.steps[1]).toMatchObject({ name: 'inspect-out-of-band', title: 'Reading the inventory from the BMC', status: 'waiting' });

      const viaRest = await rest(t.url, t.adminToken, 'GET', `/api/compute/metal/nodes/${node.id}/timeline`);
      expect(viaRest.status).toBe(200);
      expect(viaRest.body.nodeId).toBe(node.id);
      expect(viaRest.body.runs[0]).toMatchObject({ id: runId, kind: 'metal-enroll', status: 'waiting', resumes: 0, params: { verb: 'enroll' } });
      expect(viaRest.body.runs[0].steps.map((s: { title: string; status: string }) => [s.title, s.status])).toEqual([
        ['Verifying BMC access', 'succeeded'], ['Reading the inventory from the BMC', 'waiting'],
        ['PXE-booting once so discovery can see its MAC', 'pending'], ['Waiting for its MAC address to be confirmed', 'pending'],
      ]);
      const one = await gql(t.url, t.adminToken, `query ($id: ID!) { workflowRun(id: $id) { id nodeId steps { name status } } }`, { id: runId });
      expect(one.data!.workflowRun).toMatchObject({ id: runId, nodeId: node.id });

      // workflowProgress streamed every step change of the run, with the human title.
      await until(() => progress.events.filter((e) => e.type === 'workflow.step').length >= 6, 10000, 'the step events');
      const steps = progress.events.filter((e) => e.type === 'workflow.step').map((e) => [e.payload.step, e.payload.status, e.payload.attempt]);
      expect(steps.slice(0, 6)).toEqual([
        ['verify-bmc', 'running', 1], ['verify-bmc', 'waiting', 1], ['verify-bmc', 'retrying', 1],
        ['verify-bmc', 'running', 2], ['verify-bmc', 'waiting', 2], ['verify-bmc', 'succeeded', 2],
      ]);
      expect(progress.events.find((e) => e.type === 'workflow.step').payload.title).toBe('Verifying BMC access');
    } finally {
      progress.stop();
    }
  });

  it('another tenant\'s run and node are NOT_FOUND; a bad `last` is INVALID_INPUT naming it', async () => {
    const node = await makeNode(t.app.services.prisma, world, { state: 'enrolling' });
    const runId = await startRun(t.app.services.sql, node.id, 'metal-enroll', {});
    const other = await makeWorld(t.app.services.prisma);
    const stranger = await makeToken(t.app.services.prisma, other.tenantId, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: other.tenantId }]);
    expect(codeOf(await gql(t.url, stranger, `query ($id: ID!) { workflowRun(id: $id) { id } }`, { id: runId }))).toBe('NOT_FOUND');
    expect((await rest(t.url, stranger, 'GET', `/api/compute/metal/nodes/${node.id}/timeline`)).status).toBe(404);
    const own = await makeToken(t.app.services.prisma, world.tenantId, [{ permission: 'compute:sites:read', scopeType: 'tenant', scopeId: world.tenantId }]);
    expect((await gql(t.url, own, `query ($id: ID!) { workflowRun(id: $id) { id } }`, { id: runId })).data!.workflowRun.id).toBe(runId);
    const bad = await gql(t.url, t.adminToken, `query ($id: ID!) { node(id: $id) { ... on MetalNode { timeline(last: 0) { id } } } }`, { id: node.id });
    expect(codeOf(bad)).toBe('INVALID_INPUT');
    expect(bad.errors![0]!.message).toContain('last');
    const restBad = await rest(t.url, t.adminToken, 'GET', `/api/compute/metal/nodes/${node.id}/timeline?last=500`);
    expect(restBad.status).toBe(400);
  });
});
