/**
 * Sql.transaction's `first` (src/db/sql.ts): a transaction's first statement sent in its BEGIN's
 * round trip, as a server-side prepared statement run with EXECUTE and quoted literals. The
 * workflow engine's load uses it (jobs/engine-rows.ts loadStatement).
 */
import pg from 'pg';
import { createTestDatabase } from './helpers/app';
import { Sql, type FirstStatement } from '../src/db/sql';
import { StatementCounter } from '../src/db/client';

let pool: pg.Pool;
let sql: Sql;
let statements: StatementCounter;
beforeAll(async () => {
  // One connection: every transaction below reuses it, so a second PREPARE of one name would fail.
  pool = new pg.Pool({ connectionString: await createTestDatabase(), max: 1 });
  statements = new StatementCounter();
  sql = new Sql(pool, statements);
  await sql.query('CREATE TABLE item (id text PRIMARY KEY, n int NOT NULL)');
  await sql.query(`INSERT INTO item VALUES ('a', 1), ('o''brien', 2), ('back\\slash', 3)`);
});
afterAll(async () => { await pool?.end(); });

const lookup = (id: string | null): FirstStatement => ({ name: 'test_item_lookup', text: 'SELECT id, n, now() AS at FROM item WHERE id = $1 FOR UPDATE', types: ['text'], values: [id] });
const backends = async () => Number((await sql.query('SELECT count(*)::int AS n FROM pg_prepared_statements WHERE name = $1', ['test_item_lookup'])).rows[0].n);

describe('a transaction whose first statement goes with its BEGIN', () => {
  it('answers as the statement would, prepared once per connection, inside the transaction (its row lock held), with values quoted', async () => {
    for (const id of ['a', "o'brien", 'back\\slash', 'a', "x'); DROP TABLE item; --", null]) {
      const rows = await sql.transaction(async (tx, first) => {
        // The lock is this transaction's: the statement ran after the BEGIN.
        const held = await tx.query(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'transactionid' AND pid = pg_backend_pid()`);
        expect(held.rows[0].n).toBeGreaterThanOrEqual(id === 'a' || id === "o'brien" || id === 'back\\slash' ? 1 : 0);
        return first!.rows;
      }, { genericPlans: true, first: lookup(id) });
      const want = { a: 1, "o'brien": 2, 'back\\slash': 3 }[id ?? ''] as number | undefined;
      expect(rows.map((r) => [r.id, r.n, r.at instanceof Date])).toEqual(want ? [[id, want, true]] : []);
    }
    expect(await backends()).toBe(1);
    expect((await sql.query('SELECT count(*)::int AS n FROM item')).rows[0].n).toBe(3);
  });

  it('counts as the two statements it replaces, and without `first` the callback gets null', async () => {
    const before = statements.count;
    await sql.transaction(async (_tx, first) => first, { first: lookup('a') });
    // BEGIN and the statement, then COMMIT.
    expect(statements.count - before).toBe(3);
    expect(await sql.transaction(async (_tx, first) => first)).toBeNull();
  });

  it('a first statement that fails rolls back and does not leave its connection in the pool', async () => {
    const pid = async () => Number((await sql.query('SELECT pg_backend_pid() AS p')).rows[0].p);
    const before = await pid();
    const broken: FirstStatement = { name: 'test_broken', text: 'SELECT 1 / $1::int AS x', types: ['int'], values: ['0'] };
    await expect(sql.transaction(async () => 'never', { first: broken })).rejects.toThrow(/division by zero/);
    // A new connection: the one whose PREPARE may or may not have stayed was discarded.
    expect(await pid()).not.toBe(before);
    // And the name works again on it.
    expect(await sql.transaction(async (_tx, first) => first!.rows, { first: { ...broken, values: ['2'] } })).toEqual([{ x: 0 }]);
  });
});
