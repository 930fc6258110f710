import { startTestApp, type TestApp } from './helpers/app';
import { rest } from './helpers/client';
import { advanceRun } from '../jobs/engine';
import { DetachedRuns } from '../jobs/engine-detached';
import { fabricPreflightWorkflow } from '../jobs/workflows/fabric-preflight';
import { uuidv7 } from '../src/ids';
import { fabricRunId } from '../src/modules/fabric/runs';

/**
 * The preflight as a workflow run (issue 23 item 2): the request starts a `fabric-preflight` run
 * and answers with what the run recorded; a run taken up again after its worker died does not scan
 * the nodes again once its scan step finished (the scan's memo is the input of the resolve step).
 */

jest.setTimeout(60_000);

const PATH = '/controlnode/fabric-config/preflight';
let t: TestApp;

beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t?.stop();
});

describe('the preflight as a workflow run', () => {
  it('the request answers with the findings its run recorded: a fabric-preflight run with its two steps', async () => {
    const before = await t.app.services.prisma.workflowRun.count({ where: { kind: 'fabric-preflight' } });
    const r = await rest(t.url, t.adminToken, 'POST', PATH, { underlay_cidr: '10.61.0.0/24' });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ underlay_cidr: '10.61.0.0/24', ready: true, nodes: [] });
    const runs = await t.app.services.prisma.workflowRun.findMany({ where: { kind: 'fabric-preflight' }, include: { steps: { orderBy: { idx: 'asc' } } }, orderBy: { createdAt: 'asc' } });
    expect(runs.length).toBe(before + 1);
    const run = runs[runs.length - 1]!;
    expect(run).toMatchObject({ status: 'succeeded', leaseUntil: null, nodeId: expect.stringMatching(/^fabric:preflight:/) });
    expect(run.steps.map((s) => [s.name, s.status, s.attempts])).toEqual([['scan-nodes', 'succeeded', 1], ['resolve', 'succeeded', 1]]);
    expect((run.steps[1]!.state as any).memo.result).toMatchObject({ underlayCidr: '10.61.0.0/24', ready: true });
  });

  it('a run taken up again after its scan finished resolves from the scan\'s memo without contacting any node', async () => {
    const { prisma, sql, log, secrets } = t.app.services;
    const id = uuidv7();
    const runId = fabricRunId(id);
    const underlay = { network: '10.62.0.0', prefixLen: 24, text: '10.62.0.0/24' };
    // What the dead worker's scan found: a node that is no compute node here (a scan now would find none).
    const memo = {
      nodes: [{ nodeIp: '192.0.2.10', fqdn: 'gone.lab.example' }],
      rows: [{ ok: true, report: { capability: 'incapable', facts: { frrVersion: '', ifaces: [{ ifindex: 3, ifname: 'br0', mtu: 9000, kind: 'bridge', addresses: [{ address: '10.62.0.10', prefixLen: 24 }] }] } } }],
    };
    await prisma.workflowRun.create({
      data: {
        // Not due: the test app's own engine must not take it up before the advanceRun below does
        // (it did in a CI run: the run was then that engine's, still running, when the test looked).
        id: runId, nodeId: `fabric:preflight:${id}`, kind: 'fabric-preflight', status: 'running', leaseUntil: new Date(Date.now() - 1000), dueAt: null,
        params: { underlay, overrides: [], vtepPool: { routerIdBase: '', routerIdPrefixLen: 0, capacity: 0, expectedNodes: 0, headroom: 0, overallocWarn: false } },
        steps: {
          create: [
            { idx: 0, name: 'scan-nodes', title: 'scan', status: 'succeeded', attempts: 1, state: { memo } },
            { idx: 1, name: 'resolve', title: 'resolve', status: 'running', attempts: 1 },
          ],
        },
      },
    });
    const detached = new DetachedRuns({ sql, db: prisma, log, leaseMs: 5000, defs: [fabricPreflightWorkflow({ prisma, secrets, log })] });
    await advanceRun({ sql, log, leaseMs: 5000, detached }, runId);
    await detached.settled(runId);
    const run = await prisma.workflowRun.findUniqueOrThrow({ where: { id: runId }, include: { steps: { orderBy: { idx: 'asc' } } } });
    expect(run).toMatchObject({ status: 'succeeded', resumes: 1 });
    expect(run.steps.map((s) => [s.name, s.status, s.attempts])).toEqual([['scan-nodes', 'succeeded', 1], ['resolve', 'succeeded', 2]]);
    expect((run.steps[1]!.state as any).memo.result).toMatchObject({
      underlayCidr: '10.62.0.0/24', ready: true, underlayMtu: 9000, matchedBridges: ['br0'],
      nodes: [{ nodeIp: '192.0.2.10', mode: 'reuse', bridge: 'br0', bridgeMtu: 9000, underlayIp: '10.62.0.10/24' }],
    });
    // Recorded as the latest preflight, as a scan's findings are.
    expect(await prisma.fabricPreflight.findUniqueOrThrow({ where: { id: 1 } })).toMatchObject({ underlayCidr: '10.62.0.0/24', underlayMtu: 9000, nodeCount: 1 });
  });
});
