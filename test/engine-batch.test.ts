/**
 * A step transaction of several runs (jobs/engine.ts advanceLeasedBatch): the runs of one fetch
 * advanced by one load, their step logic, and every flush with one COMMIT; and whenever any part
 * of it fails, nothing of it kept and each run advanced alone, as without batching.
 */
import { commandsOf, engineTestWorld, makeNode, playAgent, powerStateStep, runOf, startRun, stepsOf } from './helpers/engine';
import { advanceLeasedBatch, type EngineDeps } from '../jobs/engine';
import { DueRunLoop, fetchDueRuns, type DueRun } from '../jobs/due-runs';
import type { StepDef, WorkflowDef } from '../jobs/engine-types';
import { complete } from '../jobs/steps';
import pino from 'pino';

const env = engineTestWorld();
const sql = () => env.t.app.services.sql;

/** Throws for the runs whose node is in `throwFor` (a bug in a body), completes for the others. */
const throwFor = new Set<string>();
const pickyStep: StepDef = {
  name: 'picky',
  title: 'Completing, unless told to throw',
  async run(ctx) {
    if (throwFor.has(ctx.node.id)) throw new Error('a bug in this step');
    return complete('done');
  },
};

function deps(steps: StepDef[]): EngineDeps {
  const def: WorkflowDef = { kind: 'metal-enroll', steps };
  return { sql: sql(), workflows: { 'metal-enroll': def }, random: () => 0.5 };
}

async function enrollingRuns(n: number): Promise<{ nodeId: string; runId: string }[]> {
  const out: { nodeId: string; runId: string }[] = [];
  for (let i = 0; i < n; i += 1) {
    const node = await makeNode(env.t.app.services.prisma, env.world, { state: 'enrolling' });
    out.push({ nodeId: node.id, runId: await startRun(sql(), node.id, 'metal-enroll', { verb: 'enroll' }) });
  }
  return out;
}

/** Leaves only `keep` due (other tests' runs must not fill a fetch), then leases them. */
async function leaseOnly(keep: string[]): Promise<DueRun[]> {
  await sql().query(`UPDATE workflow_run SET due_at = NULL WHERE NOT (id = ANY($1::text[]))`, [keep]);
  const { runs } = await fetchDueRuns(sql(), 50, 60_000);
  expect(runs.map((r) => r.runId).sort()).toEqual([...keep].sort());
  return runs;
}

/** The transaction ids that last wrote the runs' rows: one id means one transaction. */
const writers = async (runIds: string[]) =>
  new Set((await sql().query(`SELECT xmin::text AS x FROM workflow_run WHERE id = ANY($1::text[])`, [runIds])).rows.map((r) => r.x as string));

const ok = (value?: unknown) => ({ ok: true as const, value });

describe('a step transaction of several runs', () => {
  it('advances each run as far as it would alone, in one transaction: one load, one COMMIT', async () => {
    const d = deps([powerStateStep, pickyStep]);
    const runs = await enrollingRuns(4);
    const ids = runs.map((r) => r.runId);
    const leased = await leaseOnly(ids);
    const counter = env.t.app.database;
    const before = counter.statements.count;
    const outcomes = await Promise.all(advanceLeasedBatch(d, leased));
    expect(outcomes).toEqual(leased.map(() => ({ kind: 'waiting', until: expect.any(Date), for: 'the site agent to run bmc.power-state' })));
    // The BEGIN with the load of the four (counted as two), and the four flushes (each laying out its
    // run's steps too) with the COMMIT (five): seven, where alone it is sixteen.
    expect(counter.statements.count - before).toBe(7);
    expect((await writers(ids)).size).toBe(1);
    for (const { runId } of runs) {
      expect(await commandsOf(sql(), runId)).toEqual([{ kind: 'bmc.power-state', key: `${runId}:0:1/1`, status: 'queued', params: {} }]);
      expect(await runOf(sql(), runId)).toMatchObject({ status: 'waiting' });
    }
    // The agent answers: the next batch completes the first step and runs the second to the run's end.
    for (const { runId } of runs) await playAgent(sql(), runId, () => ok('off'));
    const again = await leaseOnly(ids);
    const beforeEnd = counter.statements.count;
    expect(await Promise.all(advanceLeasedBatch(d, again))).toEqual(again.map(() => ({ kind: 'finished', status: 'succeeded' })));
    // The BEGIN with the load (two); each run's end written with its step rows (one statement
    // each: the end is part of the flush); each node's move to inspecting (with the next run) and
    // each run's last events go with the COMMIT (eight, and the COMMIT): fifteen, where the run's
    // end as a statement of its own and the node's move before the COMMIT made it nineteen.
    expect(counter.statements.count - beforeEnd).toBe(15);
    for (const { runId } of runs) {
      expect((await stepsOf(sql(), runId)).map((s) => [s.name, s.status])).toEqual([['read-power', 'succeeded'], ['picky', 'succeeded']]);
      expect(await runOf(sql(), runId)).toMatchObject({ status: 'succeeded' });
    }
  });

  it("one run's body throwing keeps nothing of the transaction; each run is then advanced alone (the thrower's step retried, the others on)", async () => {
    const d = deps([pickyStep, powerStateStep]);
    const runs = await enrollingRuns(3);
    throwFor.add(runs[1]!.nodeId);
    const leased = await leaseOnly(runs.map((r) => r.runId));
    const outcomes = await Promise.all(advanceLeasedBatch(d, leased));
    const byRun = new Map(leased.map((run, i) => [run.runId, outcomes[i]]));
    for (const [i, { runId }] of runs.entries()) {
      const steps = await stepsOf(sql(), runId);
      if (i === 1) {
        expect(byRun.get(runId)).toMatchObject({ kind: 'waiting', for: 'a retry of "Completing, unless told to throw"' });
        expect(steps[0]).toMatchObject({ name: 'picky', status: 'waiting', attempts: 1, errorCode: 'STEP_ERROR' });
        expect(await commandsOf(sql(), runId)).toEqual([]);
      } else {
        expect(byRun.get(runId)).toMatchObject({ kind: 'waiting', for: 'the site agent to run bmc.power-state' });
        expect(steps.map((s) => [s.name, s.status])).toEqual([['picky', 'succeeded'], ['read-power', 'waiting']]);
        // Queued once: the batch's attempt was rolled back with its key.
        expect(await commandsOf(sql(), runId)).toEqual([{ kind: 'bmc.power-state', key: `${runId}:1:1/1`, status: 'queued', params: {} }]);
      }
    }
    throwFor.clear();
  });

  it('a run whose lease another worker holds now is left as it is (busy); the others advance in the one transaction', async () => {
    const d = deps([powerStateStep]);
    const runs = await enrollingRuns(3);
    const leased = await leaseOnly(runs.map((r) => r.runId));
    // The second run's lease was taken over (its worker was thought dead): this worker's token is stale.
    const stale = leased.find((r) => r.runId === runs[1]!.runId)!;
    await sql().query(`UPDATE workflow_run SET lease_until = lease_until + interval '1 second' WHERE id = $1`, [stale.runId]);
    const outcomes = await Promise.all(advanceLeasedBatch(d, leased));
    leased.forEach((run, i) => {
      expect(outcomes[i]).toMatchObject(run === stale ? { kind: 'busy' } : { kind: 'waiting', for: 'the site agent to run bmc.power-state' });
    });
    // The others in one transaction still: the stale one was left out of it, not the cause of a rollback.
    expect((await writers(leased.filter((r) => r !== stale).map((r) => r.runId))).size).toBe(1);
    expect(await commandsOf(sql(), stale.runId)).toEqual([]);
    expect(await stepsOf(sql(), stale.runId)).toEqual([]);
  });

  it('a run the load does not find (removed meanwhile) and a kind no metal workflow has are advanced alone', async () => {
    const d = deps([powerStateStep]);
    const runs = await enrollingRuns(3);
    const leased = await leaseOnly(runs.map((r) => r.runId));
    await sql().query('DELETE FROM workflow_run WHERE id = $1', [runs[0]!.runId]);
    const outcomes = await Promise.all(advanceLeasedBatch(d, [...leased, { runId: 'wf_not_a_run', kind: 'not-a-kind', leaseUntil: new Date(), workerLost: false, previousResumes: 0 }]));
    const byRun = new Map([...leased.map((run) => run.runId), 'wf_not_a_run'].map((id, i) => [id, outcomes[i]]));
    expect(byRun.get(runs[0]!.runId)).toEqual({ kind: 'idle', status: 'missing' });
    expect(byRun.get('wf_not_a_run')).toEqual({ kind: 'idle', status: 'missing' });
    for (const { runId } of runs.slice(1)) expect(byRun.get(runId)).toMatchObject({ kind: 'waiting', for: 'the site agent to run bmc.power-state' });
  });

  it("the fetch loop hands a fetch's runs out in groups of its group size, each run holding its own slot", async () => {
    const groups: number[] = [];
    const runs = Array.from({ length: 11 }, (_, i) => `wf_group_${i}`);
    const loop = new DueRunLoop(sql(), async () => { groups.push(1); }, pino({ level: 'silent' }), {
      concurrency: 20, pollMs: 60_000, groupSize: 4,
      advanceGroup: (group) => { groups.push(group.length); return group.map(async () => undefined); },
    });
    // Not started: its fetch is driven by hand through the same path (the private loop is what start() runs).
    await sql().query(`UPDATE workflow_run SET due_at = NULL`);
    for (const id of runs) {
      await sql().query(`INSERT INTO workflow_run (id, node_id, kind, status, params) VALUES ($1, $2, 'test-group', 'queued', '{}'::jsonb)`, [id, `fabric:${id}`]);
    }
    loop.start();
    for (let i = 0; i < 100 && groups.reduce((a, b) => a + b, 0) < 11; i += 1) await new Promise((resolve) => setTimeout(resolve, 20));
    await loop.stop();
    expect(groups).toEqual([4, 4, 3]);
    await sql().query('DELETE FROM workflow_run WHERE id = ANY($1::text[])', [runs]);
  });
});
