/**
 * The metal.advance fetch loops are woken by the commit that queued a job (the row trigger
 * on the queue's partition notifies metal_advance_queued; the workers LISTEN), not by their poll:
 * with QUEUE_POLL_SECONDS at 60, a job queued after the loops' first fetch is still taken within
 * seconds. Without the notification it would wait for the next poll, a minute later.
 */
import { type TestApp, startTestApp } from './helpers/app';
import { ADVANCE_PARTITION, queueAdvance } from '../jobs/registry';

describe('metal.advance wake-up', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await startTestApp({ role: 'all', bossPollSeconds: 60, builtinAgent: false });
  });
  afterAll(async () => {
    await t?.stop();
  });

  const stateOf = async (id: string) =>
    (await t.app.database.sql.query<{ state: string }>(`SELECT state::text FROM ${ADVANCE_PARTITION} WHERE id = $1::uuid`, [id])).rows[0]?.state ?? 'gone';

  it('a job queued while the loops sleep out a 60 s poll is fetched and done within seconds', async () => {
    // Past the loops' first fetch at start-up: from here on only a notification wakes them.
    await new Promise((r) => setTimeout(r, 1500));
    // A run that does not exist: the advance finds nothing to do and the job completes.
    const id = await t.app.database.sql.transaction((tx) => queueAdvance(tx, 'wf_none-such'));
    let state = await stateOf(id);
    for (let i = 0; i < 100 && state !== 'completed'; i += 1) {
      await new Promise((r) => setTimeout(r, 100));
      state = await stateOf(id);
    }
    expect(state).toBe('completed');
  });

  it('the trigger that notifies is on the queue\'s partition, and the lookup index beside it', async () => {
    const { rows } = await t.app.database.sql.query<{ n: number }>(
      `SELECT (SELECT count(*)::int FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = 'metal_advance_queued')
            + (SELECT count(*)::int FROM pg_index WHERE indrelid = $1::regclass AND indexrelid::regclass::text LIKE '%\\_run') AS n`,
      [ADVANCE_PARTITION],
    );
    expect(rows[0]!.n).toBe(2);
  });
});
