import { newId } from '../../ids';

/**
 * Boot entries, as the workflow engine uses them: a step that boots a ramdisk issues an entry for
 * the node's MACs (one purpose, one run), then sets PXE boot-once and powers the machine on; the
 * iPXE route serves the entry's script by MAC and mints a per-boot token; the ramdisk calls back
 * with that token, and each report lands in ramdisk_report and wakes the run. The HTTP side
 * (iPXE scripts, tokens, callbacks) lives beside this file.
 */
export const BOOT_PURPOSES = ['inspect', 'commission', 'release', 'rescue', 'deploy', 'retire'] as const;
export type BootPurpose = (typeof BOOT_PURPOSES)[number];

export const REPORT_KINDS = ['heartbeat', 'inventory', 'step', 'dcgm', 'wipe'] as const;
export type ReportKind = (typeof REPORT_KINDS)[number];

interface Runner {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
}

export class NoConfirmedMac extends Error {
  constructor(readonly nodeId: string) {
    super(`node ${nodeId} has no confirmed MAC address: a machine known only by its UUID gets no boot entry until confirmMac`);
    this.name = 'NoConfirmedMac';
  }
}

export interface IssueBootEntry {
  nodeId: string;
  runId: string;
  purpose: BootPurpose;
  /** What the ramdisk is to do: wipe mode, DCGM level, the disks expected... (no secrets). */
  params: Record<string, unknown>;
  ttlMs: number;
}

/**
 * Issues the boot entry of one run for every confirmed MAC of the node, replacing (revoking) any
 * live entry for those MACs and the node's earlier entries, in the caller's transaction. Resolves
 * to the entry ids. A node with no confirmed MAC (node.macs empty: enrolled by UUID only, not yet
 * through confirmMac) gets none: NoConfirmedMac.
 */
export async function issueBootEntry(db: Runner, e: IssueBootEntry): Promise<string[]> {
  const { rows: nodes } = await db.query('SELECT macs FROM node WHERE id = $1', [e.nodeId]);
  const macs = (nodes[0]?.macs as string[] | undefined) ?? [];
  if (macs.length === 0) throw new NoConfirmedMac(e.nodeId);
  await revokeNodeBoot(db, e.nodeId, macs);
  const ids = macs.map(() => newId('BootEntry'));
  await db.query(
    `INSERT INTO boot_entry (id, node_id, run_id, mac, purpose, params, expires_at)
     SELECT id, $2, $3, mac, $4, $5::jsonb, now() + $6::int * interval '1 millisecond'
       FROM unnest($1::text[], $7::text[]) AS m(id, mac)`,
    [ids, e.nodeId, e.runId, e.purpose, JSON.stringify(e.params), Math.round(e.ttlMs), macs],
  );
  return ids;
}

/**
 * Revokes the node's live boot entries and their tokens (and any live entry of `macs`, whoever
 * holds it): what a run's end, a retire's identity revocation and a new entry do. Resolves to the
 * number of entries revoked.
 */
export async function revokeNodeBoot(db: Runner, nodeId: string, macs: readonly string[] = []): Promise<number> {
  const { rows } = await db.query(
    `WITH e AS (
       UPDATE boot_entry SET revoked_at = now() WHERE revoked_at IS NULL AND (node_id = $1 OR mac = ANY($2::text[])) RETURNING id
     ), t AS (
       UPDATE boot_token SET revoked_at = now() WHERE revoked_at IS NULL AND (node_id = $1 OR boot_entry_id IN (SELECT id FROM e))
     )
     SELECT count(*)::int AS n FROM e`,
    [nodeId, macs],
  );
  return Number(rows[0]?.n ?? 0);
}

export interface ReportRow {
  id: string;
  kind: ReportKind;
  payload: Record<string, unknown>;
  createdAt: Date;
}

/** The run's ramdisk reports, oldest first, optionally of one kind and after a report id. */
export async function reportsOf(db: Runner, runId: string, opts: { kind?: ReportKind; afterId?: string } = {}): Promise<ReportRow[]> {
  const { rows } = await db.query(
    `SELECT id::text, kind, payload, created_at FROM ramdisk_report
      WHERE run_id = $1 AND ($2::text IS NULL OR kind = $2) AND ($3::bigint IS NULL OR id > $3::bigint)
      ORDER BY id`,
    [runId, opts.kind ?? null, opts.afterId ?? null],
  );
  return rows.map((r) => ({ id: r.id as string, kind: r.kind as ReportKind, payload: r.payload as Record<string, unknown>, createdAt: r.created_at as Date }));
}
