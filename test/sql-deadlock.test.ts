/**
 * Sql.query sends a single statement again when PostgreSQL chose it as a deadlock's victim: it was
 * rolled back whole, so sending it again is what its caller would do. Inside a transaction a
 * deadlock is still the caller's CONFLICT (Sql.transaction): nothing of the transaction is kept.
 */
import pg from 'pg';
import { createTestDatabase } from './helpers/app';
import { Sql } from '../src/db/sql';
import { StatementCounter } from '../src/db/client';
import { AppError } from '../src/errors';

let pool: pg.Pool;
let sql: Sql;
let url: string;
beforeAll(async () => {
  url = await createTestDatabase();
  pool = new pg.Pool({ connectionString: url, max: 2 });
  sql = new Sql(pool, new StatementCounter());
  await sql.query('CREATE TABLE item (id text PRIMARY KEY, n int NOT NULL)');
  await sql.query(`INSERT INTO item VALUES ('a', 0), ('b', 0)`);
});
afterAll(async () => { await pool?.end(); });

/**
 * Locks b in a transaction of its own, waits until `victim` waits for b (after locking a), then
 * asks for a: a deadlock. This side's deadlock_timeout is long, so the victim (whose 1 s passes
 * first) is the one PostgreSQL rolls back. Commits afterwards.
 */
async function holdThenCross(victim: () => Promise<unknown>): Promise<void> {
  const other = new pg.Client({ connectionString: url });
  await other.connect();
  try {
    await other.query(`SET deadlock_timeout = '30s'`);
    await other.query('BEGIN');
    await other.query(`UPDATE item SET n = n + 100 WHERE id = 'b'`);
    const waiting = victim();
    const pid = (await other.query('SELECT pg_backend_pid() AS p')).rows[0].p as number;
    for (let i = 0; i < 200; i += 1) {
      const { rows } = await sql.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND $1::int = ANY(pg_blocking_pids(pid))`, [pid]);
      if (rows[0]!.n > 0) break;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await other.query(`UPDATE item SET n = n + 100 WHERE id = 'a'`);
    await other.query('COMMIT');
    await waiting.catch(() => undefined);
  } finally {
    await other.end();
  }
}

const values = async () => Object.fromEntries((await sql.query<{ id: string; n: number }>('SELECT id, n FROM item ORDER BY id', [])).rows.map((r) => [r.id, r.n]));

describe('a deadlock', () => {
  it('a single statement chosen as its victim is sent again and takes effect once', async () => {
    await sql.query(`UPDATE item SET n = 0`, []);
    let outcome: unknown = null;
    await holdThenCross(async () => {
      // One statement that locks a, then b (a CTE's order), as a command's result locks the command, then its run.
      outcome = await sql.query(`WITH x AS (UPDATE item SET n = n + 1 WHERE id = 'a' RETURNING 1), y AS (SELECT pg_sleep(0.01) FROM x)
        UPDATE item SET n = n + 1 WHERE id = 'b' AND EXISTS (SELECT 1 FROM y)`, []).catch((error: unknown) => error);
    });
    expect(outcome).toMatchObject({ rowCount: 1 });
    // The other transaction's +100 each, and the statement's +1 each, once.
    expect(await values()).toEqual({ a: 101, b: 101 });
  });

  it('inside a transaction it is the caller\'s CONFLICT, and nothing of the transaction is kept', async () => {
    await sql.query(`UPDATE item SET n = 0`, []);
    let outcome: unknown = null;
    await holdThenCross(async () => {
      outcome = await sql.transaction(async (tx) => {
        await tx.query(`UPDATE item SET n = n + 1 WHERE id = 'a'`, []);
        await tx.query(`UPDATE item SET n = n + 1 WHERE id = 'b'`, []);
      }).catch((error: unknown) => error);
    });
    expect(outcome).toBeInstanceOf(AppError);
    expect(outcome).toMatchObject({ code: 'CONFLICT' });
    expect(await values()).toEqual({ a: 100, b: 100 });
  });
});
