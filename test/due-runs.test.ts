/**
 * The engine's own due-run index (issue 23): workflow_run.due_at, the fetch that leases due runs
 * (jobs/due-runs.ts), the wake-up API (jobs/wake.ts) and the notification that makes the fetch
 * loop take a woken run at once. Replaces the tests of the metal.advance pg-boss queue.
 */
import pg from 'pg';
import pino from 'pino';
import { startTestApp, type TestApp } from './helpers/app';
import { makeNode, makeWorld, startRun, type World } from './helpers/engine';
import { DueRunLoop, fetchDueRuns, type DueRun } from '../jobs/due-runs';
import { RUN_DUE_CHANNEL, wakeRun } from '../jobs/wake';
import { advanceLeased } from '../jobs/engine';
import { DetachedRuns } from '../jobs/engine-detached';

let t: TestApp;
let world: World;
beforeAll(async () => {
  // No workers: the tests fetch the runs themselves.
  t = await startTestApp({ role: 'api' });
  world = await makeWorld(t.app.services.prisma);
});
afterAll(async () => { await t?.stop(); });

const sql = () => t.app.services.sql;
const log = pino({ level: 'silent' });

async function newRun(): Promise<string> {
  const node = await makeNode(t.app.services.prisma, world, { state: 'enrolling' });
  return startRun(sql(), node.id, 'metal-enroll', { verb: 'enroll' });
}
/** Releases a run as a step's commit does when the run waits (lease free, due at `dueAt`). */
const park = (runId: string, dueAt: string | null = null) =>
  sql().query(`UPDATE workflow_run SET lease_until = NULL, status = 'waiting', due_at = ${dueAt ?? 'NULL'} WHERE id = $1`, [runId]);
const rowOf = async (runId: string) => (await sql().query(`SELECT due_at, lease_until, status, resumes FROM workflow_run WHERE id = $1`, [runId])).rows[0]!;
/** Leaves only `keep` due: other tests' runs must not fill a fetch. */
const onlyDue = (keep: string[]) => sql().query(`UPDATE workflow_run SET due_at = NULL WHERE NOT (id = ANY($1::text[]))`, [keep]);

describe('the due-run index', () => {
  it('a new run is due at once; the fetch leases it, and its due time becomes the lease\'s end', async () => {
    const runId = await newRun();
    await onlyDue([runId]);
    expect((await rowOf(runId)).due_at).not.toBeNull();
    const { runs } = await fetchDueRuns(sql(), 10, 60_000);
    expect(runs.map((r) => r.runId)).toEqual([runId]);
    const row = await rowOf(runId);
    expect(row.status).toBe('running');
    expect((row.due_at as Date).getTime()).toBe((row.lease_until as Date).getTime());
    expect(runs[0]!.leaseUntil.getTime()).toBe((row.lease_until as Date).getTime());
    expect((await fetchDueRuns(sql(), 10, 60_000)).runs).toEqual([]);
  });

  it("a detached run (the fabric's) comes with its kind and goes to its own path at once, with no step transaction first", async () => {
    const runId = `wf_detached_${Date.now()}`;
    await sql().query(`INSERT INTO workflow_run (id, node_id, kind, status, params) VALUES ($1, $2, 'test-detached', 'queued', '{}'::jsonb)`, [runId, `fabric:${runId}`]);
    await onlyDue([runId]);
    const { runs } = await fetchDueRuns(sql(), 10, 60_000);
    expect(runs.map((r) => [r.runId, r.kind])).toEqual([[runId, 'test-detached']]);
    let ended!: () => void;
    const bodyEnded = new Promise<void>((resolve) => { ended = resolve; });
    const prisma = t.app.services.prisma;
    const detached = new DetachedRuns({
      sql: sql(), db: prisma, log, leaseMs: 60_000,
      defs: [{
        kind: 'test-detached',
        run: async (lease) => { await prisma.$transaction((tx) => lease.end(tx, { status: 'succeeded' })); ended(); },
        lost: async () => undefined,
      }],
    });
    const transactions = jest.spyOn(sql(), 'transaction');
    try {
      expect(await advanceLeased({ sql: sql(), log, detached }, runId, runs[0]!)).toMatchObject({ kind: 'waiting' });
      await bodyEnded;
      expect(transactions).not.toHaveBeenCalled();
    } finally {
      transactions.mockRestore();
      await detached.stop();
    }
    expect((await rowOf(runId)).status).toBe('succeeded');
  });

  it('two fetchers at once never take one run', async () => {
    const ids = await Promise.all(Array.from({ length: 12 }, () => newRun()));
    await onlyDue(ids);
    const taken: DueRun[] = [];
    await Promise.all(Array.from({ length: 6 }, async () => {
      for (let i = 0; i < 4; i += 1) taken.push(...(await fetchDueRuns(sql(), 3, 60_000)).runs);
    }));
    expect(taken.map((r) => r.runId).sort()).toEqual([...ids].sort());
  });

  it('a run woken twice is taken once per wake-up window, and a wake-up during its lease makes it due again after the lease', async () => {
    const runId = await newRun();
    await onlyDue([runId]);
    await fetchDueRuns(sql(), 10, 60_000);
    await park(runId);
    await wakeRun(sql(), runId);
    await wakeRun(sql(), runId);
    expect((await fetchDueRuns(sql(), 10, 60_000)).runs.map((r) => r.runId)).toEqual([runId]);
    expect((await fetchDueRuns(sql(), 10, 60_000)).runs).toEqual([]);
    // Woken while leased: not taken while the lease holds, due once it is released.
    await wakeRun(sql(), runId);
    expect((await fetchDueRuns(sql(), 10, 60_000)).runs).toEqual([]);
    await sql().query(`UPDATE workflow_run SET lease_until = NULL WHERE id = $1`, [runId]);
    expect((await fetchDueRuns(sql(), 10, 60_000)).runs.map((r) => r.runId)).toEqual([runId]);
  });

  it('a lease that expires makes the run due again: its worker died, and the next fetch takes it up (resumes + 1)', async () => {
    const runId = await newRun();
    await onlyDue([runId]);
    const first = (await fetchDueRuns(sql(), 10, 300)).runs;
    expect(first.map((r) => [r.runId, r.workerLost])).toEqual([[runId, false]]);
    expect((await fetchDueRuns(sql(), 10, 300)).runs).toEqual([]);
    await new Promise((r) => setTimeout(r, 400));
    const again = (await fetchDueRuns(sql(), 10, 60_000)).runs;
    expect(again.map((r) => [r.runId, r.workerLost, r.previousResumes])).toEqual([[runId, true, 0]]);
    expect((await rowOf(runId)).resumes).toBe(1);
  });

  it('a wake-up inside a transaction that rolls back wakes nothing', async () => {
    const runId = await newRun();
    await onlyDue([runId]);
    await fetchDueRuns(sql(), 10, 60_000);
    await park(runId);
    await expect(sql().transaction(async (tx) => {
      await wakeRun(tx, runId);
      throw new Error('roll back');
    })).rejects.toThrow('roll back');
    expect((await rowOf(runId)).due_at).toBeNull();
    expect((await fetchDueRuns(sql(), 10, 60_000)).runs).toEqual([]);
  });

  it('a run that ended is not woken, and one that ended while due is dropped from the index without a lease', async () => {
    const runId = await newRun();
    await onlyDue([runId]);
    await sql().query(`UPDATE workflow_run SET status = 'succeeded' WHERE id = $1`, [runId]);
    expect((await fetchDueRuns(sql(), 10, 60_000)).runs).toEqual([]);
    expect(await rowOf(runId)).toMatchObject({ due_at: null, lease_until: null });
    expect(await wakeRun(sql(), runId)).toBe(false);
    expect((await rowOf(runId)).due_at).toBeNull();
  });

  it('a wake-up\'s commit notifies workflow_run_due, and a fetch loop sleeping out a 60 s poll takes the run at once', async () => {
    const runId = await newRun();
    await onlyDue([runId]);
    await fetchDueRuns(sql(), 10, 60_000);
    await park(runId);
    const advanced: string[] = [];
    const loop = new DueRunLoop(sql(), async (run) => { advanced.push(run.runId); await park(run.runId); }, log, { concurrency: 4, pollMs: 60_000 });
    const listener = new pg.Client({ connectionString: t.app.config.databaseUrl });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (n) => { heard.push(n.channel); loop.kick(); });
    await listener.query(`LISTEN ${RUN_DUE_CHANNEL}`);
    try {
      loop.start();
      await new Promise((r) => setTimeout(r, 300));
      expect(advanced).toEqual([]);
      // A future wake-up does not notify; one due now does, at its commit.
      await wakeRun(sql(), runId, 3_600_000);
      await new Promise((r) => setTimeout(r, 200));
      expect(heard).toEqual([]);
      await wakeRun(sql(), runId);
      for (let i = 0; i < 50 && advanced.length === 0; i += 1) await new Promise((r) => setTimeout(r, 50));
      expect(heard.length).toBeGreaterThanOrEqual(1);
      expect(advanced).toEqual([runId]);
    } finally {
      await loop.stop();
      await listener.end();
    }
  });

  it('the fetch reads the partial index on due_at, also once workflow_run holds many runs that are not due', async () => {
    await sql().query(`INSERT INTO workflow_run (id, node_id, kind, status, due_at)
                       SELECT 'wf_plan_' || g, (SELECT node_id FROM workflow_run LIMIT 1), 'metal-enroll', 'succeeded', NULL FROM generate_series(1, 5000) g`);
    await sql().query('ANALYZE workflow_run');
    for (let i = 0; i < 7; i += 1) await fetchDueRuns(sql(), 8, 60_000);
    const { rows } = await sql().query(`EXPLAIN SELECT id FROM workflow_run WHERE due_at <= now() AND (lease_until IS NULL OR lease_until <= now()) ORDER BY due_at LIMIT 8 FOR UPDATE SKIP LOCKED`);
    const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
    expect(plan).toContain('workflow_run_due_idx');
    expect(plan).not.toContain('Seq Scan');
  });
});
