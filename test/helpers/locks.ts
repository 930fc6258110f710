import type pg from 'pg';

/**
 * Sessions of the holder's own database that wait for a lock. pg_locks is cluster-wide and the
 * suites share one PostgreSQL, so a bare `NOT granted` count also sees the other suites' waiters
 * (a transactionid lock has no database), and a race test would let go before its racers wait.
 */
export async function lockWaiters(holder: pg.Client): Promise<number> {
  const { rows } = await holder.query(
    `SELECT count(DISTINCT l.pid)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE NOT l.granted AND l.pid <> pg_backend_pid() AND a.datname = current_database()`,
  );
  return rows[0].n;
}

/** Waits until `count` other sessions of the holder's database wait for a lock, or `settled()`. */
export async function waitForLockWaiters(holder: pg.Client, count: number, settled: () => boolean = () => false): Promise<void> {
  while (!settled() && (await lockWaiters(holder)) < count) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
