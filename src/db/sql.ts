import type pg from 'pg';
import type { StatementCounter } from './client';
import { AppError } from '../errors';

/** One connection inside an open transaction. */
export interface SqlTx {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>>;
  /** Rows as arrays of column values in select-list order (see {@link Sql.queryArrays}). */
  queryArrays(text: string, values?: unknown[]): Promise<unknown[][]>;
  /** For APIs that take an executor (pg-boss's `db` option): its statements join this transaction. */
  executor: { executeSql(text: string, values: unknown[]): Promise<{ rows: unknown[] }> };
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
  ) {}

  query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>> {
    this.statements.count += 1;
    return this.pool.query<R>(text, values);
  }

  /**
   * Rows as arrays in select-list order: for wide rows read by position (node-rows.ts), where pg's
   * per-row object keyed by column name would only be copied again.
   */
  async queryArrays(text: string, values?: unknown[]): Promise<unknown[][]> {
    this.statements.count += 1;
    return (await this.pool.query<unknown[]>({ text, values, rowMode: 'array' })).rows;
  }

  /** Runs fn inside BEGIN ... COMMIT on one connection; any throw rolls back and is rethrown. */
  async transaction<T>(fn: (tx: SqlTx) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    const query = <R extends pg.QueryResultRow>(text: string, values?: unknown[]) => {
      this.statements.count += 1;
      return client.query<R>(text, values);
    };
    let broken = false;
    try {
      await query('BEGIN');
      const queryArrays = async (text: string, values?: unknown[]) => {
        this.statements.count += 1;
        return (await client.query<unknown[]>({ text, values, rowMode: 'array' })).rows;
      };
      const result = await fn({ query, queryArrays, executor: { executeSql: (text, values) => query(text, values) } });
      await query('COMMIT');
      return result;
    } catch (error) {
      await query('ROLLBACK').catch(() => {
        broken = true;
      });
      // A deadlock or serialization failure is a concurrent change like any other: say so with
      // the retryable code, not as an internal error.
      const sqlstate = (error as { code?: unknown }).code;
      if (sqlstate === '40P01' || sqlstate === '40001') {
        throw new AppError('CONFLICT', 'a concurrent change to the same rows won; nothing was written, read them again and retry');
      }
      throw error;
    } finally {
      client.release(broken);
    }
  }
}
