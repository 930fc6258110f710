import { createHash } from 'node:crypto';
import pg from 'pg';
import type { StatementCounter } from './client';
import { AppError } from '../errors';
import type { DatabaseHealth } from './health';

const TIMESTAMPTZ_OID = 1184;
const defaultTimestamptz = pg.types.getTypeParser(TIMESTAMPTZ_OID, 'text') as (text: string) => unknown;
const digit = (text: string, i: number) => text.charCodeAt(i) - 48;
const digits = (text: string, from: number, to: number) => {
  let n = 0;
  for (let i = from; i < to; i += 1) {
    const d = digit(text, i);
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n;
};

/**
 * timestamptz as PostgreSQL prints it (DateStyle ISO: `2026-11-30 01:02:03.456+00`, an offset of
 * ±HH or ±HH:MM), parsed by position. pg's own parser (postgres-date) runs three regular
 * expressions per value, which was a fifth of the time a page of nodes spent reading its rows
 * (five timestamps a row). Anything else (other years, BC, offsets with seconds, infinity) is
 * handed to pg's parser, and the result is always the one it would give (test/sql.test.ts).
 */
export function parseTimestamptz(text: string): unknown {
  const n = text.length;
  if (n < 22 || text[4] !== '-' || text[7] !== '-' || text[10] !== ' ' || text[13] !== ':' || text[16] !== ':') return defaultTimestamptz(text);
  const year = digits(text, 0, 4);
  const month = digits(text, 5, 7);
  const day = digits(text, 8, 10);
  const hour = digits(text, 11, 13);
  const minute = digits(text, 14, 16);
  const second = digits(text, 17, 19);
  let i = 19;
  let ms = 0;
  if (text[i] === '.') {
    let scale = 100;
    i += 1;
    const start = i;
    while (i < n && text.charCodeAt(i) >= 48 && text.charCodeAt(i) <= 57) {
      ms += digit(text, i) * scale;
      scale /= 10;
      i += 1;
    }
    if (i === start || i - start > 6) return defaultTimestamptz(text);
    ms = Math.floor(ms);
  }
  const sign = text[i] === '+' ? 1 : text[i] === '-' ? -1 : 0;
  const rest = n - i - 1;
  if (sign === 0 || (rest !== 2 && rest !== 5) || (rest === 5 && text[i + 3] !== ':')) return defaultTimestamptz(text);
  const offsetHours = digits(text, i + 1, i + 3);
  const offsetMinutes = rest === 5 ? digits(text, i + 4, i + 6) : 0;
  // Years below 1000 read as 19xx by Date.UTC (and would need care for 0-99): pg's parser does it.
  if (year < 1000 || month < 1 || day < 1 || hour < 0 || minute < 0 || second < 0 || offsetHours < 0 || offsetMinutes < 0) return defaultTimestamptz(text);
  return new Date(Date.UTC(year, month - 1, day, hour, minute, second, ms) - sign * (offsetHours * 60 + offsetMinutes) * 60000);
}

const TEXT_ARRAY_OID = 1009;
// pg's TypeId lists the scalar types only; array parsers are registered under their own oids.
const defaultTextArray = (pg.types.getTypeParser as (oid: number, format: 'text') => (text: string) => unknown)(TEXT_ARRAY_OID, 'text');
/** text[]: the empty array (most nodes' macs and addresses) without pg's array parser. */
export const parseTextArray = (text: string): unknown => (text === '{}' ? [] : defaultTextArray(text));

/** pg's parsers, but timestamptz by position (see parseTimestamptz) and empty text[] at once. */
const ARRAY_ROW_TYPES = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    format === 'binary' ? pg.types.getTypeParser(oid, 'binary')
      : oid === TIMESTAMPTZ_OID ? parseTimestamptz
        : oid === TEXT_ARRAY_OID ? parseTextArray
          : pg.types.getTypeParser(oid, 'text')) as typeof pg.types.getTypeParser,
};

/**
 * Statements sent as named prepared statements: PostgreSQL parses and plans each text once per
 * connection (then reuses a generic plan once it is as good as the custom ones) instead of at
 * every call. In the lifecycle bench (300 machines), planning was 30 s of PostgreSQL's 80 s of
 * CPU: the engine and the callbacks send the same few dozen statements tens of thousands of
 * times. A name is the text's hash, so one text always has one name. Bounded: node-postgres keeps
 * every statement a connection prepared for the connection's life, so past MAX_PREPARED distinct
 * texts (the service has about a hundred fixed ones) a new text is sent unnamed, as before.
 */
const MAX_PREPARED = 400;
/** How many times a single statement chosen as a deadlock's victim is sent again (Sql.query). */
const DEADLOCK_RETRIES = 3;

/**
 * The planner settings of statements that are lookups by key (a `genericPlans` transaction's, a
 * joinedWhenConnected message's). A named statement's generic plan is built once per connection,
 * with the statistics of that moment, and kept until the next ANALYZE of its tables: in a database
 * that grows fast from empty (a bulk enroll of 1,000 machines, a fresh install) that is a plan for
 * a table of 50 rows, kept while it grows to thousands, as autovacuum looks only once a minute.
 * Such plans were seq scans joined by hash: in the lifecycle bench (auto_explain, one sampled call
 * in ten) the engine's load of several runs read every node and every run on 37% of its calls, a
 * run's end every boot token, a ramdisk report's token lookup the whole boot_token table on 26%.
 * Without seq scans, hash and merge joins the planner is left with index scans in nested loops, the
 * plan a lookup by key needs at any size. Every join of these statements is on indexed keys (one
 * without an index would still run, as a nested loop over a scan). SET LOCAL: a simple-protocol
 * message of several statements is one transaction, so these end with it.
 */
const KEY_LOOKUP_SETTINGS = 'SET LOCAL enable_seqscan = off; SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off';
/** A `genericPlans` transaction's settings: generic plans at once (Sql.transaction), of key lookups. */
const GENERIC_PLAN_SETTINGS = `SET LOCAL plan_cache_mode = force_generic_plan; ${KEY_LOOKUP_SETTINGS}`;
/** The FirstStatement names each connection has PREPARE'd (Sql.transaction). */
const preparedFirst = new WeakMap<pg.PoolClient, Set<string>>();
const prepared = new Map<string, string>();
/** A text's hash as an SQL identifier's tail (base64url's `-` would end an unquoted name). */
const textHash = (text: string): string => createHash('sha1').update(text).digest('base64url').replace(/-/g, '_');
export function statementName(text: string): string | undefined {
  let name = prepared.get(text);
  if (name === undefined && prepared.size < MAX_PREPARED) {
    name = `s${textHash(text)}`;
    prepared.set(text, name);
  }
  return name;
}

/**
 * A transaction's first statement, sent in its BEGIN's round trip (Sql.transaction's `first`): a
 * server-side prepared statement (PREPARE'd once per connection, named `name`, with parameter
 * types `types`) run with EXECUTE and its values as quoted literals, so nothing is planned again.
 * For a hot transaction that always starts with the same read (the workflow engine's load).
 */
export interface FirstStatement {
  name: string;
  text: string;
  types: readonly string[];
  values: readonly (string | null)[];
}

/** A value as the quoted literal an EXECUTE takes: pg's own serialisation (arrays as PostgreSQL array literals, dates in ISO form). */
export function executeLiteral(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  return String((pg as unknown as { utils: { prepareValue(v: unknown): unknown } }).utils.prepareValue(value));
}

/** A FirstStatement's name for a text (PREPARE'd by name): its hash, so one text always has one name. */
export const firstStatementName = (text: string): string => `f${textHash(text)}`;

/**
 * `statements` run with EXECUTE in one simple-protocol message between `before` and `after` (each
 * PREPARE'd first on a connection that has not yet), so in one round trip. Resolves to the
 * EXECUTEs' answers in order. `after` is empty or one statement (`; COMMIT`). After a failure
 * the connection may hold a PREPARE not recorded here: the caller must not reuse it.
 */
async function sendJoined(client: pg.PoolClient, before: string, statements: readonly FirstStatement[], after: string): Promise<pg.QueryResult[]> {
  const known = preparedFirst.get(client) ?? new Set<string>();
  const preparing = new Set<string>();
  let text = before;
  for (const statement of statements) {
    if (!known.has(statement.name) && !preparing.has(statement.name)) {
      preparing.add(statement.name);
      text += `PREPARE ${statement.name}(${statement.types.join(', ')}) AS ${statement.text}; `;
    }
  }
  text += statements.map((statement) =>
    `EXECUTE ${statement.name}(${statement.values.map((v) => (v === null ? 'NULL' : client.escapeLiteral(v))).join(', ')})`).join('; ');
  const answer = (await client.query(`${text}${after}`)) as unknown as pg.QueryResult | pg.QueryResult[];
  if (preparing.size) preparedFirst.set(client, new Set([...known, ...preparing]));
  // One statement in the message is answered alone, several as an array.
  const results = Array.isArray(answer) ? answer : [answer];
  const end = results.length - (after ? 1 : 0);
  return results.slice(end - statements.length, end);
}

/** How a statement is sent: `planEachTime` (see {@link Sql.query}). */
export interface QueryOptions { planEachTime?: boolean }

/** One connection inside an open transaction. */
export interface SqlTx {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[], opts?: QueryOptions): Promise<pg.QueryResult<R>>;
  /** Rows as arrays of column values in select-list order (see {@link Sql.queryArrays}). */
  queryArrays(text: string, values?: unknown[]): Promise<unknown[][]>;
  /** For APIs that take an executor (pg-boss's `db` option): its statements join this transaction. */
  executor: { executeSql(text: string, values: unknown[]): Promise<{ rows: unknown[] }> };
  /**
   * A statement sent with the COMMIT in one round trip (as `first` is sent with the BEGIN) once the
   * callback has returned; several go in the order given (a step transaction of several runs: one
   * flush each). What one must check, it checks itself, raising (the COMMIT then does not run, and
   * the transaction is rolled back). Resolves to the statement's answer once the transaction has
   * committed, or rejects with the transaction's error; never to be awaited inside the callback
   * (it waits for the callback to return). Ignoring it is fine: its rejection is handled.
   */
  commitWith(statement: FirstStatement): Promise<pg.QueryResult>;
}

/**
 * Plain SQL on the same pool Prisma uses, for the hot paths where Prisma's per-call cost dominates
 * (a verb's one-statement commit, set-based bulk over 10,000 nodes). Every statement is counted in
 * the same counter as Prisma's, so statement-count tests and /metrics see both.
 */
export class Sql {
  constructor(
    readonly pool: pg.Pool,
    private statements: StatementCounter,
    /** Told of every failed statement (storage failures make /readyz not ready). */
    readonly health: DatabaseHealth | null = null,
  ) {}

  private readonly observe = (error: unknown): never => {
    this.health?.observe(error);
    throw error;
  };

  /**
   * `planEachTime`: sent unnamed, so PostgreSQL plans it for these values at every call. For a
   * statement over a table that grows from empty while the process runs (the event stream's
   * reads): a named statement's generic plan, once chosen, is kept for the connection's life, and
   * the one chosen while `event` was nearly empty (seq scan and sort) read the whole table at
   * every call once it held 100,000 rows (npm run bench -- events: 25-30 ms a read).
   */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[], opts?: QueryOptions): Promise<pg.QueryResult<R>> {
    this.statements.count += 1;
    // A text without parameters may hold several statements (the simple protocol): sent as it is.
    if (values === undefined) {
      const result = this.pool.query<R>(text);
      return this.health ? result.catch(this.observe) : result;
    }
    const config = { text, values, name: opts?.planEachTime ? undefined : statementName(text) };
    const result = this.pool.query<R>(config).catch((error: unknown) => this.afterDeadlock(error, () => this.pool.query<R>(config)));
    return this.health ? result.catch(this.observe) : result;
  }

  /**
   * A single statement outside a transaction that PostgreSQL chose as a deadlock's victim had no
   * effect at all (it was rolled back whole), so it is sent again, up to DEADLOCK_RETRIES times.
   * A command's result and the workflow engine's step transaction lock a command and its run in
   * opposite orders (the result: the command, then the run it wakes; a run's end: the run, then
   * its commands), and the caller (a site agent reporting over HTTP) should not see that as a 500.
   */
  private async afterDeadlock<T>(error: unknown, again: () => Promise<T>): Promise<T> {
    for (let attempt = 1; (error as { code?: unknown })?.code === '40P01' && attempt <= DEADLOCK_RETRIES; attempt += 1) {
      this.statements.count += 1;
      try {
        return await again();
      } catch (next) {
        error = next;
      }
    }
    throw error;
  }

  /**
   * Rows as arrays in select-list order: for wide rows read by position (node-rows.ts), where pg's
   * per-row object keyed by column name would only be copied again.
   */
  async queryArrays(text: string, values?: unknown[]): Promise<unknown[][]> {
    this.statements.count += 1;
    return (await this.pool.query<unknown[]>({ text, values, rowMode: 'array', types: ARRAY_ROW_TYPES, name: values === undefined ? undefined : statementName(text) }).catch(this.observe)).rows;
  }

  /**
   * Statements sent as one simple-protocol message (see sendJoined), so as one implicit
   * transaction: all of them take effect or none does. `take` is called once a connection is held
   * and says what to send then: a caller that gathers statements (a site agent's results) sends
   * everything that arrived while it waited for the connection. Resolves to each statement's
   * answer, in order (none when `take` gives none).
   */
  async joinedWhenConnected(take: () => readonly FirstStatement[]): Promise<{ results: pg.QueryResult[] }> {
    const client = await this.pool.connect();
    let broken = true;
    try {
      const statements = take();
      if (statements.length === 0) {
        broken = false;
        return { results: [] };
      }
      this.statements.count += statements.length;
      const results = await sendJoined(client, `${KEY_LOOKUP_SETTINGS}; `, statements, '');
      broken = false;
      return { results };
    } catch (error) {
      this.health?.observe(error);
      throw error;
    } finally {
      // A failed message was rolled back whole by PostgreSQL; the connection is not reused only
      // because a PREPARE it held may not be recorded (sendJoined).
      client.release(broken);
    }
  }

  /**
   * Runs fn inside BEGIN ... COMMIT on one connection; any throw rolls back and is rethrown.
   * `genericPlans`: the transaction's prepared statements run their generic plan at once
   * (GENERIC_PLAN_SETTINGS, set in the BEGIN's round trip) instead of being planned again at each
   * call while PostgreSQL compares custom plans: for statements whose plan does not depend on their
   * values (lookups by key). The workflow engine's load and flush were planned at every call,
   * 0.6-0.9 ms each (26 s of PostgreSQL's time at 1,000 machines).
   */
  async transaction<T>(fn: (tx: SqlTx, first: pg.QueryResult | null) => Promise<T>, opts: { genericPlans?: boolean; first?: FirstStatement } = {}): Promise<T> {
    const client = await this.pool.connect();
    const query = <R extends pg.QueryResultRow>(text: string, values?: unknown[], queryOpts?: QueryOptions) => {
      this.statements.count += 1;
      // BEGIN, COMMIT, SAVEPOINT ...: nothing to plan, and no parameters.
      return values === undefined ? client.query<R>(text) : client.query<R>({ text, values, name: queryOpts?.planEachTime ? undefined : statementName(text) });
    };
    let broken = false;
    /** commitWith's statements, and their answers' promises. */
    const last: { statement: FirstStatement; resolve(result: pg.QueryResult): void; reject(error: unknown): void }[] = [];
    try {
      // The BEGIN and its settings in one simple-protocol round trip (no parameters).
      const begin = opts.genericPlans ? `BEGIN; ${GENERIC_PLAN_SETTINGS}` : 'BEGIN';
      let first: pg.QueryResult | null = null;
      /** A failure may leave a PREPARE done and not recorded: that connection is not reused. */
      const joined = async (before: string, statements: readonly FirstStatement[], after: string): Promise<pg.QueryResult[]> => {
        this.statements.count += 1 + statements.length;
        broken = true;
        const results = await sendJoined(client, before, statements, after);
        broken = false;
        return results;
      };
      if (opts.first) first = (await joined(`${begin}; `, [opts.first], ''))[0]!;
      else await query(begin);
      const queryArrays = async (text: string, values?: unknown[]) => {
        this.statements.count += 1;
        return (await client.query<unknown[]>({ text, values, rowMode: 'array', types: ARRAY_ROW_TYPES, name: values === undefined ? undefined : statementName(text) })).rows;
      };
      const result = await fn({
        query, queryArrays, executor: { executeSql: (text, values) => query(text, values) },
        commitWith: (statement) => {
          const answer = new Promise<pg.QueryResult>((resolve, reject) => last.push({ statement, resolve, reject }));
          answer.catch(() => undefined);
          return answer;
        },
      }, first);
      if (last.length) {
        const answers = await joined('', last.map((l) => l.statement), '; COMMIT');
        last.forEach((l, i) => l.resolve(answers[i]!));
      } else {
        await query('COMMIT');
      }
      return result;
    } catch (error) {
      this.health?.observe(error);
      const told = (final: unknown) => {
        for (const l of last) l.reject(final);
        return final;
      };
      await query('ROLLBACK').catch(() => {
        broken = true;
      });
      // A deadlock or serialization failure is a concurrent change like any other: say so with
      // the retryable code, not as an internal error.
      const sqlstate = (error as { code?: unknown }).code;
      if (sqlstate === '40P01' || sqlstate === '40001') {
        throw told(new AppError('CONFLICT', 'a concurrent change to the same rows won; nothing was written, read them again and retry'));
      }
      throw told(error);
    } finally {
      client.release(broken);
    }
  }
}
