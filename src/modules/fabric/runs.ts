import type { Tx } from '../../db/client';
import { ACTIVE_STATUSES_SQL, wakeRun as wakeDueRun } from '../../../jobs/wake';

/**
 * The fabric's workflow runs (the rollout's, the preflight's): runs of the engine that are not
 * tied to a metal node (jobs/engine-detached.ts). Their node_id names what they work on instead
 * (`fabric:<job id>`), so the one-active-run-per-node index never meets a metal node's run.
 *
 * startRun and wakeRun are the one place the fabric starts and wakes a run: through the engine's
 * due-run index (workflow_run.due_at, jobs/wake.ts), in the caller's transaction.
 */

export type FabricRunKind = 'fabric-apply' | 'fabric-teardown' | 'fabric-preflight';

/** A run's id from the fabric job (or preflight) it carries out: one run per job. */
export const fabricRunId = (jobId: string): string => `wf_${jobId}`;

/** The raw face of a Prisma transaction as the wake-up's SQL runner. */
function runnerOf(tx: Tx) {
  return { query: async (text: string, values: unknown[] = []) => ({ rows: await tx.$queryRawUnsafe<Record<string, unknown>[]>(text, ...values) }) };
}

/** Wakes the run (now, or after `afterMs`), in the caller's transaction. */
export async function wakeRun(tx: Tx, runId: string, afterMs = 0): Promise<void> {
  await wakeDueRun(runnerOf(tx), runId, afterMs);
}

/** Creates the run, queued and due at once (due_at's default), in the caller's transaction. */
export async function startRun(tx: Tx, run: { id: string; subject: string; kind: FabricRunKind; params: Record<string, unknown> }): Promise<void> {
  await tx.$executeRawUnsafe(
    `INSERT INTO workflow_run (id, node_id, kind, status, params) VALUES ($1, $2, $3, 'queued', $4::jsonb)`,
    run.id, run.subject, run.kind, JSON.stringify(run.params));
}

/** Asks the run to abort (its body runs its cleanup); false when it is not active. */
export async function abortRun(tx: Tx, runId: string): Promise<boolean> {
  const n = await tx.$executeRawUnsafe(
    `UPDATE workflow_run SET abort_requested_at = COALESCE(abort_requested_at, now()), due_at = LEAST(due_at, now()), updated_at = now(), version = version + 1
      WHERE id = $1 AND status IN ${ACTIVE_STATUSES_SQL}`, runId);
  return n === 1;
}
