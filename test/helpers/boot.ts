import pg from 'pg';
import { newId } from '../../src/ids';
import { issueBootEntry, type BootPurpose } from '../../src/modules/boot/entries';
import type { TestApp } from './app';

/**
 * A workflow run row for a node, as the engine would have started it (no engine runs in these
 * tests). The run enroll started is superseded first, as the node store does: one active run per node.
 */
export async function makeRun(sql: pg.Client, nodeId: string, kind: string): Promise<string> {
  const id = newId('WorkflowRun');
  await sql.query(`UPDATE workflow_run SET status = 'superseded', finished_at = now(), due_at = NULL WHERE node_id = $1 AND status IN ('queued', 'running', 'waiting')`, [nodeId]);
  // Waiting with nothing due (as a step's commit leaves it): a report that wakes it makes it due.
  await sql.query(`INSERT INTO workflow_run (id, node_id, kind, status, due_at) VALUES ($1, $2, $3, 'waiting', NULL)`, [id, nodeId, kind]);
  return id;
}

/** Issues a boot entry through the real module, in a transaction of the service's own pool. */
export async function issueEntry(t: TestApp, nodeId: string, runId: string, purpose: BootPurpose, params: Record<string, unknown> = {}, ttlMs = 3_600_000): Promise<string[]> {
  return t.app.database.sql.transaction((tx) => issueBootEntry(tx, { nodeId, runId, purpose, params, ttlMs }));
}

export { parseIpxeScript, type IpxeBoot } from '../sim/machine/ipxe';
