/**
 * Sql.transaction's `first` and SqlTx.commitWith (src/db/sql.ts): a transaction's first statement
 * sent in its BEGIN's round trip, and its last in its COMMIT's, as server-side prepared statements
 * run with EXECUTE and quoted literals. The workflow engine's load and flush use them
 * (jobs/engine-rows.ts loadStatement, flush).
 */
import pg from 'pg';
import { oneConnectionSql } from './helpers/app';
import { Sql, type FirstStatement } from '../src/db/sql';
import { StatementCounter } from '../src/db/client';

let pool: pg.Pool;
let sql: Sql;
let statements: StatementCounter;
beforeAll(async () => {
  // One connection: every transaction below reuses it, so a second PREPARE of one name would fail.
  ({ pool, sql, statements } = await oneConnectionSql());
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

  it('a last statement goes with the COMMIT: what it writes commits with the rest; when it raises, nothing of the transaction does', async () => {
    const add: FirstStatement = { name: 'test_item_add', text: 'INSERT INTO item VALUES ($1, $2)', types: ['text', 'int'], values: ['late', '7'] };
    const before = statements.count;
    await sql.transaction(async (tx) => {
      await tx.query("INSERT INTO item VALUES ('early', 6)");
      tx.commitWith(add);
    });
    // BEGIN, the insert, then the statement and the COMMIT (counted as two).
    expect(statements.count - before).toBe(4);
    expect((await sql.query(`SELECT id, n FROM item WHERE id IN ('early', 'late') ORDER BY n`)).rows).toEqual([{ id: 'early', n: 6 }, { id: 'late', n: 7 }]);
    // The engine's flush checks what it wrote with metal_flush_check (a migration): false raises.
    const check: FirstStatement = { name: 'test_check', text: 'SELECT metal_flush_check($1, $2)', types: ['boolean', 'text'], values: ['false', 'run r: its rows changed'] };
    await expect(sql.transaction(async (tx) => {
      await tx.query("INSERT INTO item VALUES ('never', 8)");
      tx.commitWith(check);
    })).rejects.toThrow('workflow step write refused: run r: its rows changed');
    expect((await sql.query(`SELECT count(*)::int AS n FROM item WHERE id = 'never'`)).rows[0].n).toBe(0);
    await sql.transaction(async (tx) => { tx.commitWith({ ...check, values: ['true', 'fine'] }); });
  });

  it('several last statements go with the one COMMIT in their order, each name prepared once; one that raises keeps all of them out', async () => {
    const add = (id: string, n: number): FirstStatement => ({ name: 'test_item_add_many', text: 'INSERT INTO item VALUES ($1, $2)', types: ['text', 'int'], values: [id, String(n)] });
    const prepared = async () => Number((await sql.query('SELECT count(*)::int AS n FROM pg_prepared_statements WHERE name = $1', ['test_item_add_many'])).rows[0].n);
    const before = statements.count;
    await sql.transaction(async (tx) => {
      tx.commitWith(add('m1', 11));
      tx.commitWith(add("m'2", 12));
      tx.commitWith(add('m3', 13));
    });
    // BEGIN, then the three statements and the COMMIT.
    expect(statements.count - before).toBe(5);
    expect(await prepared()).toBe(1);
    expect((await sql.query(`SELECT id FROM item WHERE n BETWEEN 11 AND 13 ORDER BY n`)).rows.map((r) => r.id)).toEqual(['m1', "m'2", 'm3']);
    // Known on the connection now: sent without a PREPARE (a second one of the name would fail).
    await sql.transaction(async (tx) => { tx.commitWith(add('m4', 14)); tx.commitWith(add('m5', 15)); });
    expect((await sql.query(`SELECT count(*)::int AS n FROM item WHERE n IN (14, 15)`)).rows[0].n).toBe(2);
    // The second one collides with a key: neither it, the first, nor the transaction's own insert stays.
    await expect(sql.transaction(async (tx) => {
      await tx.query("INSERT INTO item VALUES ('m6', 16)");
      tx.commitWith(add('m7', 17));
      tx.commitWith(add('m1', 18));
    })).rejects.toThrow(/duplicate key/);
    expect((await sql.query(`SELECT count(*)::int AS n FROM item WHERE n IN (16, 17, 18)`)).rows[0].n).toBe(0);
  });
  it('a last statement\'s answer is had once the transaction committed; when the transaction fails, it rejects with the same error (ignored, it raises nothing)', async () => {
    const add = (id: string, n: number): FirstStatement => ({ name: 'test_item_add_returning', text: 'INSERT INTO item VALUES ($1, $2) RETURNING id, n', types: ['text', 'int'], values: [id, String(n)] });
    let answer: Promise<pg.QueryResult> | null = null;
    let settledInside = false;
    await sql.transaction(async (tx) => {
      answer = tx.commitWith(add('r1', 21));
      void answer.then(() => { settledInside = true; });
      await tx.query('SELECT 1');
      // Not before the COMMIT was sent.
      expect(settledInside).toBe(false);
    });
    expect((await answer!).rows).toEqual([{ id: 'r1', n: 21 }]);
    let failed: Promise<pg.QueryResult> | null = null;
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      await expect(sql.transaction(async (tx) => {
        failed = tx.commitWith(add('r2', 22));
        tx.commitWith(add('r1', 23));
      })).rejects.toThrow(/duplicate key/);
      await expect(failed!).rejects.toThrow(/duplicate key/);
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
    expect((await sql.query(`SELECT count(*)::int AS n FROM item WHERE n IN (22, 23)`)).rows[0].n).toBe(0);
  });
});

describe('the planner settings of key lookups (KEY_LOOKUP_SETTINGS)', () => {
  // A table analyzed while it was small, as autovacuum leaves one that grows fast from empty: its
  // statistics say one page, where a seq scan is the cheapest plan for any lookup.
  const planOf = async (run: (text: string) => Promise<pg.QueryResult>) =>
    (await run('EXPLAIN (GENERIC_PLAN, COSTS OFF) SELECT id, n FROM item WHERE id = $1')).rows.map((r) => r['QUERY PLAN'] as string).join('\n');
  beforeAll(async () => { await sql.query('ANALYZE item'); });

  it('a genericPlans transaction plans a lookup by key as an index scan whatever the statistics say; outside it, the same statistics give a seq scan', async () => {
    expect(await planOf((text) => sql.query(text))).toMatch(/Seq Scan on item/);
    const inside = await sql.transaction((tx) => planOf((text) => tx.query(text)), { genericPlans: true });
    expect(inside).toMatch(/Index Scan using item_pkey on item/);
    expect(inside).not.toMatch(/Seq Scan/);
    // SET LOCAL: nothing of it stays on the connection after the COMMIT.
    expect(await planOf((text) => sql.query(text))).toMatch(/Seq Scan on item/);
    expect(await sql.transaction((tx) => planOf((text) => tx.query(text)))).toMatch(/Seq Scan on item/);
  });

  it('statements joined in one message (joinedWhenConnected) run with the same settings, which end with the message', async () => {
    const setting = (name: string): FirstStatement => ({ name: 'test_setting', text: 'SELECT current_setting($1) AS v', types: ['text'], values: [name] });
    const { results } = await sql.joinedWhenConnected(() => [setting('enable_seqscan'), setting('enable_hashjoin'), setting('enable_mergejoin')]);
    expect(results.map((r) => r.rows[0].v)).toEqual(['off', 'off', 'off']);
    expect((await sql.query('SHOW enable_seqscan')).rows[0].enable_seqscan).toBe('on');
  });

  it('a statement of a transaction sent with planEachTime is not prepared (planned for its values at every call)', async () => {
    const named = async () => Number((await sql.query('SELECT count(*)::int AS n FROM pg_prepared_statements WHERE statement LIKE $1', ['%plan_each_time_probe%'])).rows[0].n);
    await sql.transaction(async (tx) => { await tx.query('SELECT $1::int AS plan_each_time_probe', [1], { planEachTime: true }); });
    expect(await named()).toBe(0);
    await sql.transaction(async (tx) => { await tx.query('SELECT $1::int AS plan_each_time_probe', [1]); });
    expect(await named()).toBe(1);
  });
});
