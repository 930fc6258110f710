/**
 * Sql.joinedWhenConnected and JoinedWriter (src/db/sql.ts, src/db/joined-writer.ts): one-statement
 * writes of many callers that wait for a connection go in one message, one round trip and one
 * commit. The built-in agent's command results and the ramdisk reports use them.
 */
import pg from 'pg';
import { oneConnectionSql } from './helpers/app';
import { Sql, type FirstStatement } from '../src/db/sql';
import { StatementCounter } from '../src/db/client';
import { JoinedWriter } from '../src/db/joined-writer';
import { databaseFailure } from '../src/db/failure';

let pool: pg.Pool;
let sql: Sql;
let statements: StatementCounter;
beforeAll(async () => {
  // One connection: holding it makes every write wait, as a busy pool does.
  ({ pool, sql, statements } = await oneConnectionSql());
});
afterAll(async () => { await pool?.end(); });

interface Item { id: string; n: number }
const insert = (item: Item): FirstStatement => ({
  name: 'test_item_insert', text: 'INSERT INTO item VALUES ($1, $2) RETURNING id, xmin::text AS tx', types: ['text', 'int'], values: [item.id, String(item.n)],
});
const alone: Item[] = [];
const writer = () => new JoinedWriter<Item, { id: string; tx: string } | null>(sql, {
  statement: insert,
  settle: (row) => (row ? { id: row.id as string, tx: row.tx as string } : null),
  alone: async (item) => {
    alone.push(item);
    const { rows } = await sql.query('INSERT INTO item VALUES ($1, $2) RETURNING id, xmin::text AS tx', [item.id, item.n]);
    return { id: rows[0].id as string, tx: rows[0].tx as string };
  },
});

/** Holds the pool's one connection until the returned function is called. */
async function holdPool(): Promise<() => Promise<void>> {
  const client = await pool.connect();
  return async () => client.release();
}

beforeEach(() => { alone.length = 0; });

describe('Sql.joinedWhenConnected', () => {
  it('sends what `take` gives once the connection is held, in one transaction, answering each statement in order; prepared once per connection', async () => {
    const release = await holdPool();
    let taken = false;
    const sent = sql.joinedWhenConnected(() => {
      taken = true;
      return [insert({ id: 'j1', n: 1 }), insert({ id: "j'2", n: 2 }), insert({ id: 'j\\3', n: 3 })];
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    // Not before the connection was free.
    expect(taken).toBe(false);
    const before = statements.count;
    await release();
    const { results } = await sent;
    expect(statements.count - before).toBe(3);
    expect(results.map((r) => r.rows[0].id)).toEqual(['j1', "j'2", 'j\\3']);
    expect(new Set(results.map((r) => r.rows[0].tx)).size).toBe(1);
    // A single statement, known on the connection now: answered as a list of one.
    const again = await sql.joinedWhenConnected(() => [insert({ id: 'j4', n: 4 })]);
    expect(again.results.map((r) => r.rows[0].id)).toEqual(['j4']);
    expect(Number((await sql.query(`SELECT count(*)::int AS n FROM pg_prepared_statements WHERE name = 'test_item_insert'`)).rows[0].n)).toBe(1);
    // Nothing to send: no statement.
    expect((await sql.joinedWhenConnected(() => [])).results).toEqual([]);
  });

  it('a statement that fails keeps none of the message', async () => {
    await expect(sql.joinedWhenConnected(() => [insert({ id: 'k1', n: 1 }), insert({ id: 'j1', n: 9 })])).rejects.toThrow(/duplicate key/);
    expect((await sql.query(`SELECT count(*)::int AS n FROM item WHERE id = 'k1'`)).rows[0].n).toBe(0);
  });
});

describe('JoinedWriter', () => {
  it('a lone write with the pool idle goes at once, alone', async () => {
    const before = statements.count;
    await expect(writer().write({ id: 'w0', n: 0 })).resolves.toMatchObject({ id: 'w0' });
    expect(statements.count - before).toBe(1);
  });

  it('writes that arrive while the pool is busy go in one message: one transaction for all, each answered with its own row', async () => {
    const w = writer();
    const release = await holdPool();
    const writes = [1, 2, 3, 4, 5].map((n) => w.write({ id: `w${n}`, n }));
    await new Promise((resolve) => setTimeout(resolve, 20));
    await release();
    const answers = await Promise.all(writes);
    expect(answers.map((a) => a!.id)).toEqual(['w1', 'w2', 'w3', 'w4', 'w5']);
    expect(new Set(answers.map((a) => a!.tx)).size).toBe(1);
    expect(alone).toEqual([]);
  });

  it('a message the database refuses for one item: the others are written alone, the bad one fails with its own error', async () => {
    const w = writer();
    const release = await holdPool();
    const writes = [w.write({ id: 'b1', n: 1 }), w.write({ id: 'w1', n: 7 }), w.write({ id: 'b3', n: 3 })];
    const settled = Promise.allSettled(writes);
    await release();
    const [first, bad, third] = await settled;
    expect(first).toMatchObject({ status: 'fulfilled', value: { id: 'b1' } });
    expect(third).toMatchObject({ status: 'fulfilled', value: { id: 'b3' } });
    expect(bad.status).toBe('rejected');
    expect(String((bad as PromiseRejectedResult).reason)).toMatch(/duplicate key/);
    expect(alone.map((i) => i.id)).toEqual(['b1', 'w1', 'b3']);
    expect((await sql.query(`SELECT n FROM item WHERE id = 'w1'`)).rows).toEqual([{ n: 1 }]);
  });

  it('the connection lost in the middle of a message: every item of it fails with the database\'s failure and nothing of it stays', async () => {
    const kill: FirstStatement = { name: 'test_kill_self', text: 'SELECT pg_terminate_backend(pg_backend_pid()) AND $1::boolean AS id', types: ['boolean'], values: ['true'] };
    const w = new JoinedWriter<Item | 'kill', unknown>(sql, {
      statement: (item) => (item === 'kill' ? kill : insert(item)),
      settle: (row) => row,
      alone: async () => { throw new Error('not to be called for a database failure'); },
    });
    const release = await holdPool();
    const settled = Promise.allSettled([w.write({ id: 'd1', n: 1 }), w.write('kill'), w.write({ id: 'd3', n: 3 })]);
    await release();
    const outcomes = await settled;
    expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected', 'rejected']);
    for (const o of outcomes) expect(databaseFailure((o as PromiseRejectedResult).reason)).toBe('unavailable');
    expect((await sql.query(`SELECT count(*)::int AS n FROM item WHERE id IN ('d1', 'd3')`)).rows[0].n).toBe(0);
    // The pool gives a new connection: the writer goes on.
    await expect(writer().write({ id: 'd4', n: 4 })).resolves.toMatchObject({ id: 'd4' });
  });

  it('no connection to be had: what waits is refused with the failure, and the writer is ready again afterwards', async () => {
    const nowhere = new pg.Pool({ host: '127.0.0.1', port: 1, connectionTimeoutMillis: 2000, max: 1 });
    const w = new JoinedWriter<Item, unknown>(new Sql(nowhere, new StatementCounter()), {
      statement: insert, settle: (row) => row, alone: async () => { throw new Error('not to be called'); },
    });
    try {
      const outcomes = await Promise.allSettled([w.write({ id: 'n1', n: 1 }), w.write({ id: 'n2', n: 2 })]);
      expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected']);
      for (const o of outcomes) expect(databaseFailure((o as PromiseRejectedResult).reason)).toBe('unavailable');
      const later = await Promise.allSettled([w.write({ id: 'n3', n: 3 })]);
      expect(later[0]!.status).toBe('rejected');
    } finally {
      await nowhere.end();
    }
  });
});
