import pg from 'pg';
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaClient } from '../generated/prisma/client';
import { Sql } from './sql';

export type Db = PrismaClient;
export type Tx = Parameters<Parameters<PrismaClient['$transaction']>[0]>[0];

/** Counts the SQL statements Prisma sends (monotonic: read deltas); /metrics exports it. */
export class StatementCounter {
  count = 0;
}

export interface Database {
  prisma: PrismaClient;
  pool: pg.Pool;
  statements: StatementCounter;
  /** Plain SQL on the same pool, counted with Prisma's statements. */
  sql: Sql;
  /** The same pool for background readers (the event stream's poller), counted apart so request-level statement counts stay exact. */
  backgroundSql: Sql;
  close(): Promise<void>;
}

export function connectDatabase(url: string, opts: { poolSize?: number } = {}): Database {
  const pool = new pg.Pool({ connectionString: url, max: opts.poolSize ?? 20 });
  // An idle client that loses its server (restart, failover) must not crash the process.
  pool.on('error', () => undefined);
  const prisma = new PrismaClient({
    adapter: new PrismaPg(pool),
    log: [{ emit: 'event', level: 'query' }],
  });
  const statements = new StatementCounter();
  prisma.$on('query', () => {
    statements.count += 1;
  });
  return {
    prisma,
    pool,
    statements,
    sql: new Sql(pool, statements),
    backgroundSql: new Sql(pool, new StatementCounter()),
    async close() {
      await prisma.$disconnect();
      await pool.end();
    },
  };
}
