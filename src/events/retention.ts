import type { Sql } from '../db/sql';

const CHUNK = 10000;

/**
 * Deletes the events older than the retention, in chunks (a long outage must not become one huge
 * transaction), and moves the horizon: a cursor older than the newest pruned event is refused
 * from then on (src/events/hub.ts) rather than silently skipping what is gone. Only sequenced events
 * are pruned, so a subscriber is never told about a gap the sequencer has not numbered yet.
 */
export async function pruneEvents(sql: Sql, retentionHours: number): Promise<{ deleted: number; prunedThrough: string }> {
  let deleted = 0;
  let prunedThrough = '0';
  for (;;) {
    const { rows } = await sql.query<{ deleted: number; pruned: string }>(
      `WITH del AS (
         DELETE FROM event WHERE id IN (
           SELECT id FROM event WHERE created_at < now() - make_interval(hours => $1) AND seq IS NOT NULL LIMIT ${CHUNK}
         ) RETURNING seq
       )
       UPDATE event_horizon SET pruned_through = GREATEST(pruned_through, COALESCE((SELECT max(seq) FROM del), 0)),
                                pruned_at = now()
        WHERE id = 1
       RETURNING (SELECT count(*) FROM del)::int AS deleted, pruned_through::text AS pruned`,
      [retentionHours],
    );
    deleted += rows[0]!.deleted;
    prunedThrough = rows[0]!.pruned;
    if (rows[0]!.deleted < CHUNK) return { deleted, prunedThrough };
  }
}
