import { defaultDatabasePoolSize } from '../config';
import pg from 'pg';
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaClient } from '../generated/prisma/client';
import { Sql } from './sql';
import { DatabaseHealth } from './health';
import { databasePool } from './target';

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
  /** Storage failures seen by this process's statements (for /readyz). */
  health: DatabaseHealth;
  /** Plain SQL on the same pool, counted with Prisma's statements. */
  sql: Sql;
  /** The same pool for background readers (the event stream's poller), counted apart so request-level statement counts stay exact. */
  backgroundSql: Sql;
  close(): Promise<void>;
}

export function connectDatabase(url: string, opts: { poolSize?: number } = {}): Database {
  // A multi-host URL's connections go to its primary (src/db/target.ts).
  const pool = databasePool(url, { max: opts.poolSize ?? defaultDatabasePoolSize() });
  // An idle client that loses its server (restart, failover) must not crash the process.
  pool.on('error', () => undefined);
  // Nor one checked out (Sql.transaction, Prisma's transactions): the pool listens to idle clients
  // only, and a client's 'error' with no listener is thrown. The statement in flight, or the next
  // one, fails with the connection's error; its caller sees that, and the client is discarded.
  pool.on('connect', (client) => {
    client.on('error', () => undefined);
  });
  const prisma = new PrismaClient({
    adapter: new PrismaPg(pool),
    log: [{ emit: 'event', level: 'query' }],
  });
  const statements = new StatementCounter();
  const health = new DatabaseHealth();
  prisma.$on('query', () => {
    statements.count += 1;
  });
  return {
    prisma,
    pool,
    statements,
    health,
    sql: new Sql(pool, statements, health),
    backgroundSql: new Sql(pool, new StatementCounter(), health),
    async close() {
      await prisma.$disconnect();
      await pool.end();
    },
  };
}
