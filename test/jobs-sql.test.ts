import { startTestApp, type TestApp } from './helpers/app';
import pino from 'pino';
import { insertJobsSql, Queues } from '../jobs/registry';

/**
 * The verbs queue their workflow runs' jobs with insertJobsSql inside their own statement instead of
 * boss.insert. Those jobs must be the ones pg-boss itself would have written, and pg-boss must run them.
 */
describe('jobs queued with insertJobsSql', () => {
  let t: TestApp;
  beforeAll(async () => {
    // No workers: the metal.advance loops would take the jobs these tests fetch themselves.
    t = await startTestApp({ role: 'api' });
  });
  afterAll(() => t.stop());

  const COLUMNS = `name, data, priority, state, retry_limit, retry_count, retry_delay, retry_backoff, singleton_key, singleton_on,
                   expire_in, dead_letter, policy, date_trunc('minute', keep_until - start_after) AS kept_for`;

  it('are column for column what boss.insert writes for the same queue', async () => {
    const { sql, queues } = t.app.services;
    await queues!.boss.insert([{ name: 'metal.advance', data: { runId: 'run_via_boss' } }]);
    const inserted = await sql.query<{ n: number }>(
      `WITH j AS (${insertJobsSql('metal.advance', `jsonb_build_object('runId', v.id)`, `(VALUES ('run_via_sql')) AS v(id)`)} RETURNING 1)
       SELECT count(*)::int AS n FROM j`,
    );
    expect(inserted.rows[0]!.n).toBe(1);
    const rows = (await sql.query(`SELECT ${COLUMNS} FROM pgboss.job WHERE data->>'runId' IN ('run_via_boss', 'run_via_sql') ORDER BY data->>'runId'`)).rows;
    expect(rows).toHaveLength(2);
    const [viaBoss, viaSql] = rows as Record<string, unknown>[];
    expect({ ...viaSql, data: null }).toEqual({ ...viaBoss, data: null });
    // The queue's own settings (jobs/registry.ts QUEUES), not pg-boss's built-in defaults.
    expect(viaSql).toMatchObject({ retry_limit: 5, retry_backoff: true, retry_delay: 1, policy: 'standard', state: 'created' });
  });

  it('are fetched and completed by pg-boss', async () => {
    const { sql, queues } = t.app.services;
    await sql.query(`${insertJobsSql('metal.advance', `jsonb_build_object('runId', v.id)`, `(VALUES ('run_fetched')) AS v(id)`)}`);
    const boss = queues!.boss;
    let found: { id: string; data: unknown } | undefined;
    for (let i = 0; i < 10 && !found; i += 1) {
      const jobs = await boss.fetch<{ runId: string }>('metal.advance', { batchSize: 50 });
      found = jobs.find((j) => j.data.runId === 'run_fetched');
    }
    expect(found).toBeDefined();
    await boss.complete('metal.advance', found!.id);
    const job = await boss.getJobById('metal.advance', found!.id);
    expect(job?.state).toBe('completed');
  });

  it('a standard queue\'s jobs are plain inserts (no speculative insertion); a queue with another policy keeps pg-boss\'s ON CONFLICT DO NOTHING', async () => {
    const { sql } = t.app.services;
    const conflictOf = async (queue: 'metal.advance' | 'events.prune') => {
      const sqlText = insertJobsSql(queue, `'{}'::jsonb`, `(VALUES (1)) AS v(i)`);
      const plan = (await sql.query(`EXPLAIN (FORMAT JSON) ${sqlText}`)).rows[0]!['QUERY PLAN'][0].Plan;
      return plan['Conflict Resolution'] ?? null;
    };
    expect(await conflictOf('metal.advance')).toBeNull();
    expect(await conflictOf('events.prune')).toBe('NOTHING');
  });

  it('a handler that outlives stop()\'s grace completes into the closed pool without an unhandled rejection', async () => {
    const queues = new Queues(t.app.databaseUrl, pino({ level: 'silent' }), 1);
    await queues.start();
    let release!: () => void;
    const running = new Promise<void>((resolve) => { release = resolve; });
    let started = false;
    let finished = false;
    await queues.work('metal.advance', async () => {
      started = true;
      await running;
      finished = true;
    });
    await queues.boss.send('metal.advance', { runId: 'run_slow' });
    for (let i = 0; i < 100 && !started; i += 1) await new Promise((r) => setTimeout(r, 50));
    expect(started).toBe(true);
    const rejections: unknown[] = [];
    const onRejection = (reason: unknown) => { rejections.push(reason); };
    process.on('unhandledRejection', onRejection);
    try {
      await queues.stop(200);
      release();
      for (let i = 0; i < 20 && !finished; i += 1) await new Promise((r) => setTimeout(r, 50));
      // pg-boss completes the job after the handler returns: give it the time to try.
      await new Promise((r) => setTimeout(r, 300));
    } finally {
      process.off('unhandledRejection', onRejection);
    }
    expect(finished).toBe(true);
    expect(rejections.map(String)).toEqual([]);
  });
});
