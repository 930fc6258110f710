import pg from 'pg';
import pino from 'pino';
import { createTestDatabase } from './helpers/app';
import { Sql } from '../src/db/sql';
import { StatementCounter } from '../src/db/client';
import { EventHub } from '../src/events/hub';
import type { Notifications } from '../src/db/listen';
import type { TokenStore } from '../src/auth/tokens';

/**
 * The event hub's reads of the stream are planned at every call, never kept as a named prepared
 * statement: a connection's generic plan for `seq > $1 ORDER BY seq LIMIT 1000`, chosen while the
 * event table was nearly empty, was a seq scan and sort that read the whole table at every read
 * once it had grown (npm run bench -- events: delivery p50 3 -> 30 ms). Checked on the
 * connection itself: what PostgreSQL holds prepared there (pg_prepared_statements).
 */
describe('event hub reads', () => {
  let pool: pg.Pool;
  let sql: Sql;

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: await createTestDatabase(), max: 1 });
    sql = new Sql(pool, new StatementCounter());
  });
  afterAll(async () => {
    await pool.end();
  });

  const preparedOnConnection = async () =>
    (await pool.query<{ statement: string }>('SELECT statement FROM pg_prepared_statements')).rows.map((r) => r.statement);

  it('Sql keeps a statement prepared unless it is to be planned at every call', async () => {
    await sql.query('SELECT count(*) FROM event WHERE seq > $1 AND type <> $2', ['0', 'planned-once']);
    await sql.query('SELECT count(*) FROM event WHERE seq > $1 AND type <> $2 AND true', ['0', 'planned-each-time'], { planEachTime: true });
    const prepared = await preparedOnConnection();
    expect(prepared.some((s) => s.includes("type <> $2") && !s.includes('AND true'))).toBe(true);
    expect(prepared.some((s) => s.includes('AND true'))).toBe(false);
  });

  it('the hub reads the stream (with a subscriber and without) with no prepared statement', async () => {
    await pool.query(`INSERT INTO event (type, tenant_id, subject, payload) VALUES ('test.hub.read', NULL, 'x', '{}')`);
    await pool.query('UPDATE event SET seq = COALESCE((SELECT max(seq) FROM event), 0) + 1 WHERE seq IS NULL');
    const notifications = { subscribe: async () => ({ stop: () => undefined }) } as unknown as Notifications;
    const hub = new EventHub(notifications, sql, {} as TokenStore, pino({ level: 'silent' }), { buffer: 100 });
    const internals = hub as unknown as { read(): Promise<void>; subs: Set<unknown>; head: bigint };
    // No subscriber: the head moves past the events without reading them.
    await internals.read();
    // A subscriber (nothing matches it): the events are read and dispatched.
    internals.head = 0n;
    internals.subs.add({});
    await internals.read();
    expect(internals.head).toBeGreaterThan(0n);
    const prepared = await preparedOnConnection();
    expect(prepared.filter((s) => /FROM event WHERE seq > \$1($| ORDER BY)/.test(s))).toEqual([]);
  });
});
