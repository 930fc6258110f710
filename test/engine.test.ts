/**
 * The workflow engine (jobs/engine.ts) against the real database: leases, lost wake-ups,
 * retries with backoff, continue / wait / deadline, abort with cleanup, worker loss, and that
 * no command is ever queued twice for one intended action. The site agent and the ramdisk are
 * played by test/helpers/engine.ts, writing the rows their modules write.
 */
import { startTestApp, type TestApp } from './helpers/app';
import {
  commandsOf, expireCommands, expireTimers, makeNode, makeWorld, nodeOf, playAgent, powerStateStep, queuedCommands, reportCommand, runOf, startRun, stepsOf, type World,
} from './helpers/engine';
import { advanceLeased, advanceRun, sweepRuns, type EngineDeps } from '../jobs/engine';
import { fetchDueRuns } from '../jobs/due-runs';
import { recordResult, recordResultStatement, settleRecorded } from '../src/modules/sites/claims';
import type { StepDef, WorkflowDef } from '../jobs/engine-types';
import { complete, continueAfter, failed } from '../jobs/steps';
import { wakeRun as queueAdvance } from '../jobs/wake';
import { STUCK_RESUMES, WORKFLOW_CHAINS, WORKFLOW_KINDS } from '../src/modules/metal/states';
import { WORKFLOWS } from '../jobs/workflows';
import { loadConfig } from '../src/config';

let t: TestApp;
let world: World;
beforeAll(async () => {
  // No workers: each test advances its runs itself, so every interleaving is the test's.
  t = await startTestApp({ role: 'api' });
  world = await makeWorld(t.app.services.prisma);
});
afterAll(async () => { await t?.stop(); });

const sql = () => t.app.services.sql;

const powerOnStep: StepDef = {
  name: 'power-on',
  title: 'Powering on',
  destructive: true,
  async run(ctx) {
    await ctx.command('bmc.power', { action: 'on' });
    return complete('on');
  },
  cleanup: {
    name: 'power-on.cleanup',
    title: 'Powering off again',
    async run(ctx) {
      await ctx.command('bmc.power', { action: 'off' });
      return complete('off');
    },
  },
};

function deps(steps: StepDef[], extra: Partial<EngineDeps> = {}): EngineDeps {
  const def: WorkflowDef = { kind: 'metal-enroll', steps };
  return { sql: sql(), workflows: { 'metal-enroll': def }, random: () => 0.5, ...extra };
}

async function enrollingRun(): Promise<{ nodeId: string; runId: string }> {
  const node = await makeNode(t.app.services.prisma, world, { state: 'enrolling' });
  const runId = await startRun(sql(), node.id, 'metal-enroll', { verb: 'enroll' });
  return { nodeId: node.id, runId };
}

const ok = (value?: unknown) => ({ ok: true as const, value });

/** 1 when the run is due now (the engine's fetch would take it once its lease is free), else 0. */
async function advanceJobs(runId: string): Promise<number> {
  const { rows } = await sql().query(`SELECT count(*)::int AS n FROM workflow_run WHERE id = $1 AND due_at <= now()`, [runId]);
  return rows[0]!.n as number;
}

describe('advanceRun', () => {
  it('a step that queues a command is three statements: the load with its BEGIN, one write of the step, its run, its events and its command, and the COMMIT', async () => {
    const d = deps([powerStateStep, powerOnStep]);
    const { runId } = await enrollingRun();
    // The run's first transaction also lays out its steps: measure the second.
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting' });
    await playAgent(sql(), runId, () => ok('off'));
    const counter = t.app.database;
    const before = counter.statements.count;
    const lease = await fetchDueRuns(sql(), 1, 60_000);
    expect(lease.runs.map((r) => r.runId)).toEqual([runId]);
    const afterFetch = counter.statements.count;
    expect(await advanceLeased(d, runId, lease.runs[0]!)).toMatchObject({ kind: 'waiting', for: 'the site agent to run bmc.power' });
    // BEGIN and the load (one round trip, counted as two), the flush, the COMMIT.
    expect(counter.statements.count - afterFetch).toBe(4);
    expect(afterFetch - before).toBe(1);
    expect(await commandsOf(sql(), runId)).toEqual([
      { kind: 'bmc.power-state', key: `${runId}:0:1/1`, status: 'succeeded', params: {} },
      { kind: 'bmc.power', key: `${runId}:1:1/1`, status: 'queued', params: { action: 'on' } },
    ]);
  });

  it('a step write that finds its rows changed under its lock is refused whole: nothing of the transaction commits (the check goes with the COMMIT)', async () => {
    const vanishing: StepDef = {
      name: 'drop-next',
      title: 'Dropping the next step row (a bug)',
      async run(ctx) {
        await ctx.db.query('DELETE FROM workflow_step WHERE run_id = $1 AND idx = 2', [ctx.run.id]);
        return complete('dropped');
      },
    };
    const d = deps([powerStateStep, vanishing, powerOnStep]);
    const { runId } = await enrollingRun();
    // The first transaction lays out the three steps (inserted by its flush) and waits for the power state.
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting' });
    const laidOut = await stepsOf(sql(), runId);
    expect(laidOut.map((s) => [s.idx, s.name, s.status])).toEqual([[0, 'read-power', 'waiting'], [1, 'drop-next', 'pending'], [2, 'power-on', 'pending']]);
    await playAgent(sql(), runId, () => ok('off'));
    // The second: the first step ends, the bug drops the third step's row, the third starts: its write finds no row.
    await expect(advanceRun(d, runId)).rejects.toThrow(/workflow step write refused: run .*: its rows changed under the step's lock/);
    // Nothing of it, the delete included: the steps are as the first transaction left them, the run handed back.
    expect(await stepsOf(sql(), runId)).toEqual(laidOut);
    expect(await runOf(sql(), runId)).toMatchObject({ status: 'waiting' });
    expect((await sql().query('SELECT lease_until FROM workflow_run WHERE id = $1', [runId])).rows[0].lease_until).toBeNull();
  });

  it('a step the database fails (a failover) is handed back once the database answers again, not a lease later', async () => {
    await sql().query('DROP SEQUENCE IF EXISTS test_hand_back_seq');
    await sql().query('CREATE SEQUENCE test_hand_back_seq');
    await sql().query(`CREATE OR REPLACE FUNCTION test_lost_step() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'the connection was lost (test)' USING ERRCODE = '08006'; END $$`);
    // The first two hand-backs fail the same way (sequences are not rolled back with them).
    await sql().query(`CREATE OR REPLACE FUNCTION test_lost_release() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF nextval('test_hand_back_seq') <= 2 THEN RAISE EXCEPTION 'the connection was lost (test)' USING ERRCODE = '08006'; END IF;
        RETURN NEW;
      END $$`);
    const { runId } = await enrollingRun();
    await sql().query(`CREATE TRIGGER test_lost_step BEFORE UPDATE ON workflow_step FOR EACH ROW WHEN (NEW.run_id = '${runId}') EXECUTE FUNCTION test_lost_step()`);
    await sql().query(`CREATE TRIGGER test_lost_release BEFORE UPDATE ON workflow_run FOR EACH ROW
      WHEN (NEW.id = '${runId}' AND OLD.lease_until IS NOT NULL AND NEW.lease_until IS NULL) EXECUTE FUNCTION test_lost_release()`);
    try {
      await expect(advanceRun(deps([powerStateStep]), runId)).rejects.toThrow(/the connection was lost/);
      const { rows } = await sql().query(`SELECT lease_until, due_at <= now() + interval '1 second' AS soon FROM workflow_run WHERE id = $1`, [runId]);
      expect(rows[0]).toEqual({ lease_until: null, soon: true });
      expect(Number((await sql().query('SELECT last_value FROM test_hand_back_seq')).rows[0].last_value)).toBe(3);
    } finally {
      await sql().query('DROP TRIGGER IF EXISTS test_lost_step ON workflow_step');
      await sql().query('DROP TRIGGER IF EXISTS test_lost_release ON workflow_run');
    }
  });

  it("a run that starts withdraws what the run it superseded left queued (never its own, never another node's)", async () => {
    const d = deps([powerStateStep, powerOnStep]);
    const { nodeId, runId: old } = await enrollingRun();
    const other = await enrollingRun();
    expect(await advanceRun(d, old)).toMatchObject({ kind: 'waiting' });
    expect(await advanceRun(d, other.runId)).toMatchObject({ kind: 'waiting' });
    const newer = await startRun(sql(), nodeId, 'metal-enroll', { verb: 'enroll' });
    expect((await runOf(sql(), old)).status).toBe('superseded');
    expect(await advanceRun(d, newer)).toMatchObject({ kind: 'waiting', for: 'the site agent to run bmc.power-state' });
    const { rows } = await sql().query(`SELECT run_id, status, result->>'message' AS message FROM command WHERE run_id = ANY($1::text[]) ORDER BY created_at`, [[old, newer, other.runId]]);
    expect(rows.map((r) => [r.run_id, r.status, r.message])).toEqual([
      [old, 'expired', 'withdrawn: a newer workflow run of the node started'],
      [other.runId, 'queued', null],
      [newer, 'queued', null],
    ]);
  });

  it('runs the steps in order, one command per step, and moves the node on success with its chained run', async () => {
    const d = deps([powerStateStep, powerOnStep]);
    const { nodeId, runId } = await enrollingRun();
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting', for: 'the site agent to run bmc.power-state' });
    expect(await stepsOf(sql(), runId)).toMatchObject([
      { idx: 0, name: 'read-power', title: 'Reading the power state', status: 'waiting', attempts: 1, idempotencyKey: `${runId}:0:1` },
      { idx: 1, name: 'power-on', status: 'pending', attempts: 0, idempotencyKey: null },
    ]);
    expect(await playAgent(sql(), runId, () => ok('off'))).toBe(1);
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting', for: 'the site agent to run bmc.power' });
    await playAgent(sql(), runId, () => ok('on'));
    expect(await advanceRun(d, runId)).toEqual({ kind: 'finished', status: 'succeeded' });
    expect(await commandsOf(sql(), runId)).toEqual([
      { kind: 'bmc.power-state', key: `${runId}:0:1/1`, status: 'succeeded', params: {} },
      { kind: 'bmc.power', key: `${runId}:1:1/1`, status: 'succeeded', params: { action: 'on' } },
    ]);
    const steps = await stepsOf(sql(), runId);
    expect(steps.map((s) => [s.status, s.message])).toEqual([['succeeded', 'power is off'], ['succeeded', 'on']]);
    const node = await nodeOf(sql(), nodeId);
    expect(node.provision_state).toBe('inspecting');
    // enrolling chains inspecting: a new metal-inspect run, named by the node, with its job.
    const { rows: [next] } = await sql().query(`SELECT id, kind, status, params FROM workflow_run WHERE id = $1`, [node.workflow_id]);
    expect(next).toMatchObject({ kind: 'metal-inspect', status: 'queued', params: { verb: 'enroll', chainedFrom: runId } });
    expect(await advanceJobs(next!.id)).toBe(1);
    // Every step start and end is an event of the run, with its title and no secret.
    const { rows: events } = await sql().query(`SELECT type, payload FROM event WHERE subject = $1 OR payload->>'workflowId' = $1 ORDER BY id`, [runId]);
    const stepEvents = events.filter((e) => e.type === 'workflow.step').map((e) => [e.payload.step, e.payload.status]);
    expect(stepEvents).toEqual([['read-power', 'running'], ['read-power', 'waiting'], ['read-power', 'succeeded'], ['power-on', 'running'], ['power-on', 'waiting'], ['power-on', 'succeeded']]);
    expect(events.map((e) => e.type)).toEqual(expect.arrayContaining(['workflow.finished', 'node.provision.inspecting']));
    expect(events.find((e) => e.type === 'node.provision.inspecting')!.payload).toMatchObject({ workflowId: runId, from: 'enrolling', to: 'inspecting', next: { kind: 'metal-inspect' } });
  });

  it('a wake-up while the run is leased is not lost: the run stays due, and goes on once the lease is free', async () => {
    const d = deps([powerStateStep]);
    const { runId } = await enrollingRun();
    await advanceRun(d, runId);
    // Another worker holds the run when the command's result arrives.
    await sql().query(`UPDATE workflow_run SET lease_until = now() + interval '1 hour' WHERE id = $1`, [runId]);
    await playAgent(sql(), runId, () => ok('on'));
    const jobs = await advanceJobs(runId);
    const busy = await advanceRun(d, runId);
    expect(busy).toEqual({ kind: 'busy', retryInMs: 1000 });
    // The result's wake-up made the run due; the busy call leaves it so.
    expect(jobs).toBe(1);
    expect(await advanceJobs(runId)).toBe(1);
    expect((await stepsOf(sql(), runId))[0]!.status).toBe('waiting');
    // The holder lets go without having seen the result; the re-queued job finds it.
    await sql().query(`UPDATE workflow_run SET lease_until = NULL WHERE id = $1`, [runId]);
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'finished', status: 'succeeded' });
  });

  it('two workers at once: one advances, the other backs off, and the step starts once with one command', async () => {
    const d = deps([powerStateStep]);
    const { runId } = await enrollingRun();
    const outcomes = await Promise.all([advanceRun(d, runId), advanceRun(d, runId), advanceRun(d, runId)]);
    expect(outcomes.filter((o) => o.kind === 'waiting').length).toBeGreaterThanOrEqual(1);
    for (const o of outcomes) expect(['waiting', 'busy']).toContain(o.kind);
    expect(await commandsOf(sql(), runId)).toHaveLength(1);
    expect((await stepsOf(sql(), runId))[0]).toMatchObject({ attempts: 1, idempotencyKey: `${runId}:0:1` });
  });

  it('retries a retryable failure with backoff and a new key, clears the old message while it runs, then fails with lastError', async () => {
    const d = deps([powerStateStep, powerOnStep]);
    const { nodeId, runId } = await enrollingRun();
    const timeout = { ok: false as const, code: 'BMC_TIMEOUT' as const, message: 'the BMC did not answer within 10 s', retryable: true };
    await advanceRun(d, runId);
    await playAgent(sql(), runId, () => timeout);
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting', for: 'a retry of "Reading the power state"' });
    let [step] = await stepsOf(sql(), runId);
    expect(step).toMatchObject({ status: 'waiting', attempts: 1, errorCode: 'BMC_TIMEOUT' });
    expect(step!.message).toContain('attempt 1 of 3; retrying in 2 s');
    // Woken before the backoff is over (another job): nothing is sent again.
    await advanceRun(d, runId);
    expect(await commandsOf(sql(), runId)).toHaveLength(1);
    await expireTimers(sql(), runId);
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting', for: 'the site agent to run bmc.power-state' });
    [step] = await stepsOf(sql(), runId);
    // The retry runs under a new key, and the previous failure no longer shows.
    expect(step).toMatchObject({ status: 'waiting', attempts: 2, errorCode: null, idempotencyKey: `${runId}:0:2`, message: 'waiting for the site agent to run bmc.power-state' });
    expect((await commandsOf(sql(), runId)).map((c) => c.key)).toEqual([`${runId}:0:1/1`, `${runId}:0:2/1`]);
    await playAgent(sql(), runId, () => timeout);
    await advanceRun(d, runId);
    const backoff = (await stepsOf(sql(), runId))[0]!.message!;
    expect(backoff).toContain('attempt 2 of 3; retrying in 4 s');
    await expireTimers(sql(), runId);
    await advanceRun(d, runId);
    await playAgent(sql(), runId, () => timeout);
    expect(await advanceRun(d, runId)).toEqual({ kind: 'finished', status: 'failed' });
    const run = await runOf(sql(), runId);
    expect(run).toMatchObject({ status: 'failed', lastErrorCode: 'BMC_TIMEOUT' });
    expect(run.lastErrorMessage).toBe('Reading the power state: bmc.power-state: the BMC did not answer within 10 s');
    const node = await nodeOf(sql(), nodeId);
    expect(node).toMatchObject({ provision_state: 'failed', failed_from: 'enrolling', last_error_code: 'BMC_TIMEOUT', maintenance: true });
    expect(node.last_error_message).toBe(run.lastErrorMessage);
    expect((await stepsOf(sql(), runId)).map((s) => [s.name, s.status, s.attempts])).toEqual([['read-power', 'failed', 3], ['power-on', 'skipped', 0]]);
  });

  it('continue runs the body again after its delay; a wait past its deadline fails the run with CALLBACK_TIMEOUT', async () => {
    const waiting: StepDef = {
      name: 'await-thing',
      title: 'Waiting for the thing',
      deadlineSeconds: 600,
      async run(ctx) {
        if (!ctx.memo.continued) {
          ctx.memo.continued = true;
          return continueAfter(5000, 'not visible yet');
        }
        return ctx.waitFor('the thing to call back');
      },
    };
    const d = deps([waiting]);
    const { nodeId, runId } = await enrollingRun();
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting', for: '"Waiting for the thing" to go on' });
    expect((await stepsOf(sql(), runId))[0]).toMatchObject({ status: 'waiting', message: 'not visible yet' });
    // Too early: the delay holds.
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting', for: '"Waiting for the thing" to go on' });
    await expireTimers(sql(), runId);
    const waitOutcome = await advanceRun(d, runId);
    expect(waitOutcome).toMatchObject({ kind: 'waiting', for: 'the thing to call back' });
    expect(await runOf(sql(), runId)).toMatchObject({ status: 'waiting', waitingFor: 'the thing to call back' });
    // A wake-up before the deadline (someone else's callback) changes nothing.
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting' });
    await expireTimers(sql(), runId, { deadlines: true });
    expect(await advanceRun(d, runId)).toEqual({ kind: 'finished', status: 'failed' });
    const node = await nodeOf(sql(), nodeId);
    expect(node).toMatchObject({ provision_state: 'failed', failed_from: 'enrolling', last_error_code: 'CALLBACK_TIMEOUT' });
    expect(node.last_error_message).toMatch(/^gave up waiting for its MAC address to be confirmed/);
    expect((await stepsOf(sql(), runId))[0]).toMatchObject({ status: 'failed', errorCode: 'CALLBACK_TIMEOUT', message: 'gave up waiting for the thing to call back' });
  });

  it('abort mid-step: the queued command is withdrawn, the started steps\' cleanup runs newest first, and the run ends aborted', async () => {
    const second: StepDef = { ...powerStateStep, name: 'read-again', title: 'Reading it again' };
    const d = deps([powerOnStep, second]);
    const { nodeId, runId } = await enrollingRun();
    await advanceRun(d, runId);
    await playAgent(sql(), runId, () => ok('on'));
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting', for: 'the site agent to run bmc.power-state' });
    // abort, as the verb writes it (runs.md): node failed, run aborting, and a job for the engine.
    await sql().transaction(async (tx) => {
      await tx.query(`UPDATE node SET provision_state = 'failed', failed_from = 'enrolling', last_error_code = 'ABORTED', last_error_message = 'aborted', maintenance = true WHERE id = $1`, [nodeId]);
      await tx.query(`UPDATE workflow_run SET status = 'aborting', abort_requested_at = now() WHERE id = $1`, [runId]);
      await queueAdvance(tx, runId);
    });
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting', for: 'the site agent to run bmc.power' });
    const cmds = await commandsOf(sql(), runId);
    expect(cmds.map((c) => [c.kind, c.status])).toEqual([['bmc.power', 'succeeded'], ['bmc.power-state', 'expired'], ['bmc.power', 'queued']]);
    expect(cmds[2]!.params).toEqual({ action: 'off' });
    await playAgent(sql(), runId, () => ok('off'));
    expect(await advanceRun(d, runId)).toEqual({ kind: 'finished', status: 'aborted' });
    expect((await stepsOf(sql(), runId)).map((s) => [s.name, s.status, s.cleanup])).toEqual([
      ['power-on', 'succeeded', false], ['read-again', 'failed', false], ['power-on.cleanup', 'succeeded', true],
    ]);
    // The node stays as abort left it.
    expect(await nodeOf(sql(), nodeId)).toMatchObject({ provision_state: 'failed', last_error_code: 'ABORTED' });
  });

  it('a failure runs the cleanup of the steps that started too, then ends failed', async () => {
    const failing: StepDef = { name: 'explode', title: 'Failing', async run() { return failed('BMC_ERROR', 'the BMC said no'); } };
    const d = deps([powerOnStep, failing]);
    const { nodeId, runId } = await enrollingRun();
    await advanceRun(d, runId);
    await playAgent(sql(), runId, () => ok('on'));
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting', for: 'the site agent to run bmc.power' });
    expect(await runOf(sql(), runId)).toMatchObject({ status: 'aborting', lastErrorCode: 'BMC_ERROR' });
    expect(await nodeOf(sql(), nodeId)).toMatchObject({ provision_state: 'failed', failed_from: 'enrolling', last_error_code: 'BMC_ERROR', last_error_message: 'Failing: the BMC said no' });
    await playAgent(sql(), runId, () => ok('off'));
    expect(await advanceRun(d, runId)).toEqual({ kind: 'finished', status: 'failed' });
  });

  it('a worker that died holding the lease: the run is taken up again with the same keys (nothing sent twice), then WORKER_LOST after STUCK_RESUMES', async () => {
    const d = deps([powerOnStep, powerStateStep]);
    const { nodeId, runId } = await enrollingRun();
    await advanceRun(d, runId);
    const die = () => sql().query(`UPDATE workflow_run SET lease_until = now() - interval '1 second' WHERE id = $1`, [runId]);
    // Died after the step's transaction committed its command: taken up again, the same command is found.
    await die();
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting', for: 'the site agent to run bmc.power' });
    expect(await runOf(sql(), runId)).toMatchObject({ resumes: 1 });
    expect(await commandsOf(sql(), runId)).toHaveLength(1);
    await playAgent(sql(), runId, () => ok('on'));
    for (let i = 2; i <= STUCK_RESUMES; i += 1) {
      await die();
      await advanceRun(d, runId);
      expect(await runOf(sql(), runId)).toMatchObject({ resumes: i });
    }
    const powers = (await commandsOf(sql(), runId)).filter((c) => c.kind === 'bmc.power');
    expect(powers).toHaveLength(1);
    await die();
    // Given up: the node fails at once, and the started power-on step's cleanup still runs.
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting', for: 'the site agent to run bmc.power' });
    const node = await nodeOf(sql(), nodeId);
    expect(node).toMatchObject({ provision_state: 'failed', failed_from: 'enrolling', last_error_code: 'WORKER_LOST' });
    expect(node.last_error_message).toBe(`the worker running metal-enroll died ${STUCK_RESUMES + 1} times; the run was given up`);
    await playAgent(sql(), runId, () => ok('off'));
    expect(await advanceRun(d, runId)).toEqual({ kind: 'finished', status: 'failed' });
    expect(await runOf(sql(), runId)).toMatchObject({ status: 'failed', lastErrorCode: 'WORKER_LOST' });
  });

  it('a restart whose agent was lost is never counted as done: OUTCOME_UNKNOWN, no read-back taken for proof, nothing sent again', async () => {
    const lost = { ok: false as const, code: 'AGENT_LOST' as const, message: 'the agent\'s claim lapsed without a result' };
    for (const action of ['cycle', 'reset', 'graceful-restart', 'nmi'] as const) {
      const d = deps([{ name: 'restart', title: 'Restarting', destructive: true, async run(ctx) { await ctx.command('bmc.power', { action }); return complete(action); } }]);
      const a = await enrollingRun();
      await advanceRun(d, a.runId);
      await playAgent(sql(), a.runId, () => lost);
      // A machine that was on reads on whether or not it was cycled: no read-back is asked for.
      expect(await advanceRun(d, a.runId)).toEqual({ kind: 'finished', status: 'failed' });
      expect(await runOf(sql(), a.runId)).toMatchObject({ status: 'failed', lastErrorCode: 'OUTCOME_UNKNOWN' });
      expect((await commandsOf(sql(), a.runId)).map((c) => [c.kind, c.params])).toEqual([['bmc.power', { action }]]);
      const node = await nodeOf(sql(), a.nodeId);
      expect(node).toMatchObject({ provision_state: 'failed', last_error_code: 'OUTCOME_UNKNOWN' });
      expect(node.last_error_message).toContain('may or may not have run');
      expect((await stepsOf(sql(), a.runId))[0]).toMatchObject({ status: 'failed', errorCode: 'OUTCOME_UNKNOWN' });
    }
  });

  it('a step whose command the BMC accepted but cannot prove reads unverified, never succeeded, and the run goes on to its next wait', async () => {
    const cycleStep: StepDef = { name: 'cycle', title: 'Power-cycling', destructive: true, async run(ctx) { await ctx.command('bmc.power', { action: 'cycle' }); return complete('cycled'); } };
    const d = deps([cycleStep, powerOnStep]);
    const a = await enrollingRun();
    await advanceRun(d, a.runId);
    const why = 'the BMC accepted ResetType ForceRestart but reports no usable LastResetTime and showed no power transition within 10000 ms';
    await playAgent(sql(), a.runId, () => ({ ok: true as const, value: 'on', notes: ['sent ResetType ForceRestart; not verifiable on this BMC'], unverified: why }));
    expect((await commandsOf(sql(), a.runId))[0]).toMatchObject({ kind: 'bmc.power' });
    expect((await sql().query(`SELECT status FROM command WHERE run_id = $1`, [a.runId])).rows[0]!.status).toBe('unverified');
    expect(await advanceRun(d, a.runId)).toMatchObject({ kind: 'waiting', for: 'the site agent to run bmc.power' });
    const [first] = await stepsOf(sql(), a.runId);
    expect(first).toMatchObject({ status: 'unverified' });
    expect(first!.message).toContain('not verifiable on this BMC');
  });

  it('a destructive command whose agent was lost is not sent again: its power state is read back instead', async () => {
    const d = deps([powerOnStep]);
    const lost = { ok: false as const, code: 'AGENT_LOST' as const, message: 'the agent\'s claim lapsed without a result' };
    const a = await enrollingRun();
    await advanceRun(d, a.runId);
    await playAgent(sql(), a.runId, () => lost);
    expect(await advanceRun(d, a.runId)).toMatchObject({ kind: 'waiting', for: 'the site agent to run bmc.power-state' });
    await playAgent(sql(), a.runId, () => ok('on'));
    expect(await advanceRun(d, a.runId)).toMatchObject({ kind: 'finished', status: 'succeeded' });
    expect((await commandsOf(sql(), a.runId)).map((c) => [c.kind, c.key])).toEqual([['bmc.power', `${a.runId}:0:1/1`], ['bmc.power-state', `${a.runId}:0:1/1/read-back`]]);
    expect((await stepsOf(sql(), a.runId))[0]!.message).toContain('not sent again: the power state reads back as on');
    // Read back as not applied: the step fails, still without a second power command.
    const b = await enrollingRun();
    await advanceRun(d, b.runId);
    await playAgent(sql(), b.runId, () => lost);
    await advanceRun(d, b.runId);
    await playAgent(sql(), b.runId, () => ok('off'));
    await advanceRun(d, b.runId);
    expect(await runOf(sql(), b.runId)).toMatchObject({ status: 'aborting', lastErrorCode: 'AGENT_LOST' });
    // The power-on was never sent again; the one power command after it is its cleanup's power-off.
    expect((await commandsOf(sql(), b.runId)).filter((c) => c.kind === 'bmc.power').map((c) => c.params)).toEqual([{ action: 'on' }, { action: 'off' }]);
    expect((await nodeOf(sql(), b.nodeId)).last_error_message).toContain('reads back as off, not on');
  });

  it('a command no agent claims expires, and the run fails with a lastError that says so', async () => {
    const d = deps([powerStateStep]);
    const { nodeId, runId } = await enrollingRun();
    await advanceRun(d, runId);
    await expireCommands(sql(), runId);
    expect(await advanceRun(d, runId)).toEqual({ kind: 'finished', status: 'failed' });
    expect((await commandsOf(sql(), runId))[0]!.status).toBe('expired');
    const node = await nodeOf(sql(), nodeId);
    expect(node.last_error_code).toBe('EXPIRED');
    expect(node.last_error_message).toContain('claimed bmc.power-state before it expired');
  });

  it('a step body that throws leaves none of its writes and counts as a retryable failure', async () => {
    let calls = 0;
    const flaky: StepDef = {
      name: 'flaky', title: 'Sometimes throwing',
      async run(ctx) {
        calls += 1;
        await ctx.updateNode({ maintenance: true });
        throw new Error('a bug');
      },
    };
    const d = deps([flaky]);
    const { nodeId, runId } = await enrollingRun();
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting', for: 'a retry of "Sometimes throwing"' });
    expect((await nodeOf(sql(), nodeId)).maintenance).toBe(false);
    expect((await stepsOf(sql(), runId))[0]).toMatchObject({ status: 'waiting', attempts: 1, errorCode: 'STEP_ERROR' });
    expect(calls).toBe(1);
  });

  it('a run whose node was moved by someone else ends superseded without touching the node', async () => {
    const d = deps([powerStateStep]);
    const { nodeId, runId } = await enrollingRun();
    await advanceRun(d, runId);
    await sql().query(`UPDATE node SET provision_state = 'ready' WHERE id = $1`, [nodeId]);
    const cmd = (await queuedCommands(sql(), runId))[0]!;
    await reportCommand(sql(), cmd.id, ok('on'));
    expect(await advanceRun(d, runId)).toEqual({ kind: 'finished', status: 'superseded' });
    expect((await nodeOf(sql(), nodeId)).provision_state).toBe('ready');
  });

  it('a new run of the node supersedes its active one, which then does nothing', async () => {
    const d = deps([powerStateStep]);
    const { nodeId, runId } = await enrollingRun();
    await advanceRun(d, runId);
    const second = await startRun(sql(), nodeId, 'metal-enroll', { verb: 'manage' });
    expect((await runOf(sql(), runId)).status).toBe('superseded');
    expect(await advanceRun(d, runId)).toEqual({ kind: 'idle', status: 'superseded' });
    expect((await nodeOf(sql(), nodeId)).workflow_id).toBe(second);
  });
});

describe('the due-run index and the engine (jobs/due-runs.ts)', () => {
  it('a wake-up that arrives while a fetched run is leased survives the step\'s commit: the run is fetched again once released', async () => {
    const d = deps([powerStateStep]);
    const { runId } = await enrollingRun();
    await sql().query(`UPDATE workflow_run SET due_at = NULL WHERE id <> $1`, [runId]);
    const [lease] = (await fetchDueRuns(sql(), 10, 60_000)).runs;
    expect(lease!.runId).toBe(runId);
    // News for the run (a report, an abort) commits while its worker holds the lease, before its step reads anything.
    await queueAdvance(sql(), runId);
    expect(await advanceLeased(d, runId, lease!)).toMatchObject({ kind: 'waiting' });
    expect((await fetchDueRuns(sql(), 10, 60_000)).runs.map((r) => r.runId)).toEqual([runId]);
    // Without news, the step's commit leaves the run due at its wait's end only.
    await sql().query(`UPDATE workflow_run SET lease_until = NULL WHERE id = $1`, [runId]);
    await queueAdvance(sql(), runId);
    const [again] = (await fetchDueRuns(sql(), 10, 60_000)).runs;
    expect(await advanceLeased(d, runId, again!)).toMatchObject({ kind: 'waiting' });
    expect((await fetchDueRuns(sql(), 10, 60_000)).runs).toEqual([]);
    const { rows: [run] } = await sql().query(`SELECT due_at, wait_until FROM workflow_run WHERE id = $1`, [runId]);
    expect((run!.due_at as Date).getTime()).toBe((run!.wait_until as Date).getTime());
  });
});

describe('sweepRuns', () => {
  it('makes due a quiet run with something to do that nothing woke (a result written without a wake-up), and leaves a waiting one alone', async () => {
    const d = deps([powerStateStep]);
    const { runId } = await enrollingRun();
    await advanceRun(d, runId);
    const quiet = () => sql().query(`UPDATE workflow_run SET updated_at = now() - interval '1 minute' WHERE id = $1`, [runId]);
    await quiet();
    expect(await advanceJobs(runId)).toBe(0);
    await sweepRuns(sql(), 30_000);
    expect(await advanceJobs(runId)).toBe(0);
    // A writer that forgot to wake the run: the sweep makes it due.
    const cmd = (await queuedCommands(sql(), runId))[0]!;
    await sql().query(`UPDATE command SET status = 'succeeded', result = '{"ok":true,"value":"on"}', updated_at = now() WHERE id = $1`, [cmd.id]);
    expect(await sweepRuns(sql(), 30_000)).toBe(1);
    expect(await advanceJobs(runId)).toBe(1);
    expect(await advanceRun(d, runId)).toEqual({ kind: 'finished', status: 'succeeded' });
  });
});

describe('waking a run in the process that committed the news (RunWaker)', () => {
  it('a result recorded with a waker makes the run due in its statement and tells the waker after it', async () => {
    const d = deps([powerStateStep]);
    const { runId } = await enrollingRun();
    await advanceRun(d, runId);
    const cmd = (await queuedCommands(sql(), runId))[0]!;
    await sql().query(`UPDATE command SET status = 'claimed', claimed_by = 'agent-x', claimed_at = now(), lease_expires_at = now() + interval '1 minute' WHERE id = $1`, [cmd.id]);
    expect(await advanceJobs(runId)).toBe(0);
    const woken: string[] = [];
    expect(await recordResult(sql(), cmd.id, 'agent-x', ok('on'), { wake: (id) => woken.push(id) })).toBe(true);
    expect(woken).toEqual([runId]);
    expect(await advanceJobs(runId)).toBe(1);
    expect(await advanceRun(d, runId)).toEqual({ kind: 'finished', status: 'succeeded' });
    expect(await advanceJobs(runId)).toBe(0);
  });

  /** A step that queues two independent commands at once (as pxeBootOnce does: boot device and power state). */
  const bothStep: StepDef = {
    name: 'both',
    title: 'Setting the boot device and reading the power state',
    async run(ctx) {
      const [, state] = await ctx.commands([
        { kind: 'bmc.boot-device', params: { device: 'pxe', persistent: false } },
        { kind: 'bmc.power-state', params: {} },
      ]);
      return complete(`power is ${String(state)}`);
    },
  };
  const claim = (id: string) => sql().query(
    `UPDATE command SET status = 'claimed', claimed_by = 'agent-x', claimed_at = now(), lease_expires_at = now() + interval '1 minute' WHERE id = $1`, [id]);
  /** A run of bothStep waiting for its two commands, both claimed by agent-x. */
  const bothClaimed = async () => {
    const d = deps([bothStep]);
    const { runId } = await enrollingRun();
    await advanceRun(d, runId);
    const [device, power] = await queuedCommands(sql(), runId);
    await claim(device!.id);
    await claim(power!.id);
    return { d, runId, device: device!, power: power! };
  };

  it('commands(): both are queued in the step\'s transaction, with the keys two command() calls would have; the run wakes once, when the last result is in', async () => {
    const d = deps([bothStep]);
    const { runId } = await enrollingRun();
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting' });
    // Both in the step's one transaction, before any result: the agent can take them together.
    const [device, power] = await queuedCommands(sql(), runId);
    expect([device!.kind, power!.kind]).toEqual(['bmc.boot-device', 'bmc.power-state']);
    expect(device!.idempotencyKey).toMatch(/:0:1\/1$/);
    expect(power!.idempotencyKey).toMatch(/:0:1\/2$/);
    await claim(device!.id);
    await claim(power!.id);
    const woken: string[] = [];
    // The first result: its sibling has none yet, so the run sleeps on.
    expect(await recordResult(sql(), power!.id, 'agent-x', ok('off'), { wake: (id) => woken.push(id) })).toBe(true);
    expect(woken).toEqual([]);
    expect(await advanceJobs(runId)).toBe(0);
    // The last one wakes it, and the step goes on with both values.
    expect(await recordResult(sql(), device!.id, 'agent-x', ok(), { wake: (id) => woken.push(id) })).toBe(true);
    expect(woken).toEqual([runId]);
    expect(await advanceJobs(runId)).toBe(1);
    expect(await advanceRun(d, runId)).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await stepsOf(sql(), runId))[0]).toMatchObject({ status: 'succeeded', message: 'power is off' });
  });

  it('commands(): both results in one message (the built-in agent\'s JoinedWriter) wake the run once, at the second, as one after the other would', async () => {
    const { d, runId, device, power } = await bothClaimed();
    const results = [{ id: power!.id, result: ok('off') }, { id: device!.id, result: ok() }];
    const { results: answers } = await sql().joinedWhenConnected(() => results.map((r) => recordResultStatement(r.id, 'agent-x', r.result)));
    expect(answers.map((a) => Number(a.rows[0].woken))).toEqual([0, 1]);
    const woken: string[] = [];
    expect(results.map((r, i) => settleRecorded(answers[i]!.rows[0], r.result, { wake: (id) => woken.push(id) }))).toEqual([true, true]);
    expect(woken).toEqual([runId]);
    expect(await advanceJobs(runId)).toBe(1);
    expect(await advanceRun(d, runId)).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await stepsOf(sql(), runId))[0]).toMatchObject({ status: 'succeeded', message: 'power is off' });
    // A result for a command no longer held (written again): not recorded, nothing woken.
    const { results: late } = await sql().joinedWhenConnected(() => [recordResultStatement(power!.id, 'agent-x', ok('on'))]);
    expect(settleRecorded(late[0]!.rows[0], ok('on'), { wake: (id) => woken.push(id) })).toBe(false);
    expect(woken).toEqual([runId]);
  });

  it('commands(): a sibling locked by another writer (its own result committing at the same moment) counts as done: the run is woken rather than left asleep', async () => {
    const { d, runId, device, power } = await bothClaimed();
    let release!: () => void;
    const held = new Promise<void>((resolve) => { release = resolve; });
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => { locked = resolve; });
    // Another transaction holds the sibling's row, as a concurrent result write does until it commits.
    const other = sql().transaction(async (tx) => {
      await tx.query('SELECT 1 FROM command WHERE id = $1 FOR UPDATE', [device!.id]);
      locked();
      await held;
    });
    await isLocked;
    try {
      expect(await recordResult(sql(), power!.id, 'agent-x', ok('on'))).toBe(true);
      expect(await advanceJobs(runId)).toBe(1);
    } finally {
      release();
      await other;
    }
    // Woken early, the step finds the boot device still without a result and waits again: nothing is lost.
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting' });
    expect(await recordResult(sql(), device!.id, 'agent-x', ok())).toBe(true);
    expect(await advanceJobs(runId)).toBe(1);
    expect(await advanceRun(d, runId)).toEqual({ kind: 'finished', status: 'succeeded' });
  });

  it('commands(): the first failure fails the step, as separate calls would, whatever the other answered', async () => {
    const d = deps([bothStep]);
    const { runId } = await enrollingRun();
    await advanceRun(d, runId);
    const [device, power] = await queuedCommands(sql(), runId);
    await reportCommand(sql(), power!.id, ok('on'));
    await reportCommand(sql(), device!.id, { ok: false, code: 'BMC_ERROR', message: 'the BMC refused the override', retryable: false });
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'finished', status: 'failed' });
    expect((await stepsOf(sql(), runId))[0]).toMatchObject({ status: 'failed', errorCode: 'BMC_ERROR' });
  });

  it('every wait is due at its end (no timer job, no sweep): a long wait that ran out is due and fails as a deadline passed', async () => {
    const long: StepDef = { name: 'await', title: 'Waiting for a long time', deadlineSeconds: 3600, async run(ctx) { return ctx.waitFor('a report that never comes'); } };
    const { runId } = await enrollingRun();
    const d = deps([long]);
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'waiting' });
    const { rows: [run] } = await sql().query(`SELECT due_at, wait_until, lease_until FROM workflow_run WHERE id = $1`, [runId]);
    expect(run!.lease_until).toBeNull();
    expect((run!.due_at as Date).getTime()).toBe((run!.wait_until as Date).getTime());
    expect(await advanceJobs(runId)).toBe(0);
    await expireTimers(sql(), runId, { deadlines: true });
    expect(await advanceJobs(runId)).toBe(1);
    expect(await advanceRun(d, runId)).toMatchObject({ kind: 'finished', status: 'failed' });
    expect((await stepsOf(sql(), runId))[0]).toMatchObject({ status: 'failed', errorCode: 'CALLBACK_TIMEOUT' });
    expect(await advanceJobs(runId)).toBe(0);
  });
});

describe('the workflows as data', () => {
  it('every kind the state table names has a definition, and each chained run runs in the state its predecessor succeeds into', () => {
    for (const kind of Object.keys(WORKFLOW_KINDS) as (keyof typeof WORKFLOW_KINDS)[]) {
      const def = WORKFLOWS[kind];
      expect(def?.kind).toBe(kind);
      const names = def!.steps.map((s) => s.name);
      expect(new Set(names).size).toBe(names.length);
      for (const s of def!.steps) expect(typeof s.title === 'function' || /^[A-Z]/.test(s.title)).toBe(true);
    }
    for (const [from, to] of Object.entries(WORKFLOW_CHAINS) as [keyof typeof WORKFLOW_KINDS, keyof typeof WORKFLOW_KINDS][]) {
      expect(WORKFLOW_KINDS[to].state).toBe(WORKFLOW_KINDS[from].onSuccess);
    }
  });
});

describe('the engine settings', () => {
  it('WORKFLOW_ENGINE is on by default, off with off, and anything else is refused', () => {
    expect(loadConfig({}).workflowEngine).toBe(true);
    expect(loadConfig({ WORKFLOW_ENGINE: 'on' }).workflowEngine).toBe(true);
    expect(loadConfig({ WORKFLOW_ENGINE: 'off' }).workflowEngine).toBe(false);
    expect(() => loadConfig({ WORKFLOW_ENGINE: 'maybe' })).toThrow(/WORKFLOW_ENGINE/);
  });

  it('WORKFLOW_LEASE_MS is the engine default when unset, and only an integer 500..3600000', () => {
    expect(loadConfig({}).workflowLeaseMs).toBeUndefined();
    expect(loadConfig({ WORKFLOW_LEASE_MS: '2000' }).workflowLeaseMs).toBe(2000);
    for (const bad of ['499', '3600001', '1.5', 'soon']) expect(() => loadConfig({ WORKFLOW_LEASE_MS: bad })).toThrow(/WORKFLOW_LEASE_MS/);
  });

  it('PG_STAT_STATEMENTS is off unless on, and nothing else', () => {
    expect(loadConfig({}).pgStatStatements).toBe(false);
    expect(loadConfig({ PG_STAT_STATEMENTS: 'on' }).pgStatStatements).toBe(true);
    expect(loadConfig({ PG_STAT_STATEMENTS: 'off' }).pgStatStatements).toBe(false);
    expect(() => loadConfig({ PG_STAT_STATEMENTS: 'yes' })).toThrow(/PG_STAT_STATEMENTS/);
  });
});
