import type pg from 'pg';

/**
 * Sessions of the holder's own database that wait for a lock. pg_locks is cluster-wide and the
 * suites share one PostgreSQL, so a bare `NOT granted` count also sees the other suites' waiters,
 * and a race test would let go before its racers wait. A relation, tuple or advisory lock names
 * its database; a wait for another transaction (transactionid) does not, and is told by the
 * session's database instead (pg_stat_activity, which can show a waiting session with no
 * database yet, so it is not used for the others).
 */
export async function lockWaiters(holder: pg.Client): Promise<number> {
  const { rows } = await holder.query(
    `SELECT count(DISTINCT l.pid)::int AS n FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE NOT l.granted AND l.pid <> pg_backend_pid()
        AND (l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
             OR (l.database IS NULL AND a.datname = current_database()))`,
  );
  return rows[0].n;
}

/** Waits until `count` other sessions of the holder's database wait for a lock, or `settled()`. */
export async function waitForLockWaiters(holder: pg.Client, count: number, settled: () => boolean = () => false): Promise<void> {
  while (!settled() && (await lockWaiters(holder)) < count) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
