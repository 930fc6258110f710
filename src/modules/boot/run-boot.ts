import type { Runner } from '../metal/node-store';

/**
 * The boot entries of one workflow run (the entries module, entries.ts, issues and revokes them
 * per node; this is the revocation a run's step cleanup does for its own).
 */

/** Revokes the run's boot entries and their tokens (a step's cleanup; the run's end does it too); how many entries. */
export async function revokeRunBoot(db: Runner, runId: string): Promise<number> {
  const { rows } = await db.query(
    `WITH e AS (UPDATE boot_entry SET revoked_at = now() WHERE run_id = $1 AND revoked_at IS NULL RETURNING id),
          t AS (UPDATE boot_token SET revoked_at = now() WHERE revoked_at IS NULL AND boot_entry_id IN (SELECT id FROM e))
     SELECT count(*)::int AS n FROM e`,
    [runId],
  );
  return Number(rows[0]?.n ?? 0);
}
