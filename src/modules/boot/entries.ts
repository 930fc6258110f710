import { randomBytes } from 'node:crypto';
import { hashToken } from '../../auth/tokens';
import { newId } from '../../ids';
import { afterWake, wakeRunsSql, type RunWaker } from '../../../jobs/wake';
import { executeLiteral, type FirstStatement, type QueryOptions, type Sql } from '../../db/sql';

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
  query(text: string, values?: unknown[], opts?: QueryOptions): Promise<{ rows: Record<string, unknown>[] }>;
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
  // Two statements, as revokeNodeBoot's two (entries, then tokens: the order an iPXE fetch locks
  // them in): the first reads the node's MACs and revokes the live entries of the node and of those
  // MACs (none when it has no MAC); the second revokes their tokens and inserts the new entries.
  // The node's own entries and other nodes' entries of its MACs apart, each on the partial index
  // that has its key (boot_entry_live_node_idx, boot_entry_live_mac): as one OR, the planner
  // could only scan every live entry.
  const { rows } = await db.query(
    `WITH n AS (SELECT macs FROM node WHERE id = $1),
     own AS (UPDATE boot_entry SET revoked_at = now()
              WHERE node_id = $1 AND revoked_at IS NULL AND (SELECT cardinality(macs) FROM n) > 0
             RETURNING id),
     theirs AS (UPDATE boot_entry SET revoked_at = now()
                 WHERE mac = ANY((SELECT macs FROM n)::text[]) AND node_id <> $1 AND revoked_at IS NULL
                RETURNING id)
     SELECT COALESCE((SELECT macs FROM n), '{}') AS macs, ARRAY(SELECT id FROM own UNION ALL SELECT id FROM theirs) AS revoked`,
    [e.nodeId],
  );
  const macs = (rows[0]?.macs as string[] | undefined) ?? [];
  if (macs.length === 0) throw new NoConfirmedMac(e.nodeId);
  const ids = macs.map(() => newId('BootEntry'));
  await db.query(
    `WITH t AS (UPDATE boot_token SET revoked_at = now() WHERE revoked_at IS NULL AND (node_id = $2 OR boot_entry_id = ANY($8::text[])))
     INSERT INTO boot_entry (id, node_id, run_id, mac, purpose, params, expires_at)
     SELECT id, $2, $3, mac, $4, $5::jsonb, now() + $6::int * interval '1 millisecond'
       FROM unnest($1::text[], $7::text[]) AS m(id, mac)`,
    [ids, e.nodeId, e.runId, e.purpose, JSON.stringify(e.params), Math.round(e.ttlMs), macs, rows[0]!.revoked as string[]],
  );
  return ids;
}

/**
 * Revokes the node's live boot entries and their tokens (and any live entry of `macs`, whoever
 * holds it): what a run's end, a retire's identity revocation and a new entry do. Resolves to the
 * number of entries revoked.
 */
export async function revokeNodeBoot(db: Runner, nodeId: string, macs: readonly string[] = []): Promise<number> {
  // Entries first, then their tokens, in two statements: the order an iPXE fetch locks them in
  // (startBoot), so a run's end racing a boot of the same entry waits instead of deadlocking.
  const { rows } = await db.query(
    'UPDATE boot_entry SET revoked_at = now() WHERE revoked_at IS NULL AND (node_id = $1 OR mac = ANY($2::text[])) RETURNING id',
    [nodeId, macs],
  );
  await db.query(
    'UPDATE boot_token SET revoked_at = now() WHERE revoked_at IS NULL AND (node_id = $1 OR boot_entry_id = ANY($2::text[]))',
    [nodeId, rows.map((r) => r.id as string)],
  );
  return rows.length;
}

export interface ReportRow {
  id: string;
  kind: ReportKind;
  payload: Record<string, unknown>;
  createdAt: Date;
}

/**
 * The run's ramdisk reports, oldest first, optionally of one kind and after a report id. (Ordered
 * by the bigint column: the select list's `id::text` would sort "10" before "9".)
 */
export async function reportsOf(db: Runner, runId: string, opts: { kind?: ReportKind; afterId?: string } = {}): Promise<ReportRow[]> {
  const { rows } = await db.query(
    `SELECT id::text, kind, payload, created_at FROM ramdisk_report
      WHERE run_id = $1 AND ($2::text IS NULL OR kind = $2) AND ($3::bigint IS NULL OR id > $3::bigint)
      ORDER BY ramdisk_report.id`,
    [runId, opts.kind ?? null, opts.afterId ?? null],
  );
  return rows.map((r) => ({ id: r.id as string, kind: r.kind as ReportKind, payload: r.payload as Record<string, unknown>, createdAt: r.created_at as Date }));
}

/**
 * What a boot entry's params may carry for the ramdisk (the engine writes them; nothing secret):
 * `wipe` the mode to wipe with (release; commission wipes quick, retire crypto-erases when unset),
 * `dcgmLevel` the DCGM run level (commission, default 1), `disks` the serials the engine expects.
 */
export interface BootParams {
  wipe?: 'quick' | 'secure-erase' | 'crypto-erase';
  dcgmLevel?: number;
  disks?: string[];
  [key: string]: unknown;
}

/**
 * Boots of one entry: each iPXE fetch is a boot with a token of its own. Past this many the entry
 * boots nothing more (the MAC hears the "no entry" script): an entry lives for one run, and a
 * machine that PXE-boots more often than that in one run is being impersonated or is looping.
 */
export const MAX_BOOTS_PER_ENTRY = 8;

/** Boot tokens look like this, so a leaked one is recognisable (and never an API token). */
export const BOOT_TOKEN_PREFIX = 'mbt_';

export interface Boot {
  entryId: string;
  nodeId: string;
  runId: string | null;
  purpose: BootPurpose;
  tokenId: string;
  /** The token itself: handed to the machine in its iPXE script, never stored or logged. */
  token: string;
  expiresAt: Date;
}

/**
 * One boot of the live, unexpired entry of `mac` (a normalised MAC) whose node still has that MAC:
 * revokes the entry's earlier tokens (a new fetch is a new boot, so the last boot's ramdisk can no
 * longer report) and mints the token of this one, expiring with the entry; only its hash is kept.
 * Resolves null when the MAC has no such entry or its entry used up MAX_BOOTS_PER_ENTRY: the two
 * are the same answer to the machine. Its own transaction: the entry row is locked, so two fetches
 * at once leave one live token. The lock is NO KEY UPDATE, not UPDATE: a report being
 * stored holds its token and takes the entry's KEY SHARE for its foreign key, and an UPDATE lock
 * here would deadlock with it (test/boot-routes.test.ts races the two).
 */
export async function startBoot(sql: Sql, mac: string): Promise<Boot | null> {
  const token = BOOT_TOKEN_PREFIX + randomBytes(32).toString('base64url');
  const tokenId = newId('BootToken');
  let inserted: Promise<{ rows: Record<string, unknown>[] }> | null = null;
  // The entry's lookup (locking it) goes with the BEGIN, the token's insert with the COMMIT: one
  // round trip each. Two statements, not one: the insert's snapshot is taken after the lock, so it
  // sees (and revokes) the token a concurrent fetch of the same entry committed meanwhile.
  const entry = await sql.transaction(async (tx, first) => {
    const found = first!.rows[0];
    if (!found) return null;
    inserted = tx.commitWith({
      name: 'metal_boot_token_insert', text: BOOT_TOKEN_INSERT_SQL, types: ['text', 'text', 'text', 'text', 'int'],
      values: [found.id as string, tokenId, found.node_id as string, hashToken(token), String(MAX_BOOTS_PER_ENTRY)],
    });
    return found;
  }, { genericPlans: true, first: { name: 'metal_boot_entry_lock', text: BOOT_ENTRY_LOCK_SQL, types: ['text'], values: [mac] } });
  if (!entry) return null;
  const { rows } = await inserted!;
  if (!rows[0]) return null;
  return {
    entryId: entry.id as string,
    nodeId: entry.node_id as string,
    runId: (entry.run_id as string | null) ?? null,
    purpose: entry.purpose as BootPurpose,
    tokenId,
    token,
    expiresAt: entry.expires_at as Date,
  };
}

/** startBoot's lookup: the MAC's live entry, its node still holding the MAC, locked. */
const BOOT_ENTRY_LOCK_SQL = `SELECT e.id, e.node_id, e.run_id, e.purpose, e.expires_at
       FROM boot_entry e JOIN node n ON n.id = e.node_id
      WHERE e.mac = $1 AND e.revoked_at IS NULL AND e.expires_at > now() AND e.mac = ANY(n.macs)
        FOR NO KEY UPDATE OF e`;

/** startBoot's new token: the entry's earlier ones revoked, unless it has booted $5 times already (then nothing). */
const BOOT_TOKEN_INSERT_SQL = `WITH boots AS (
       SELECT count(*)::int AS n FROM boot_token WHERE boot_entry_id = $1
     ), revoked AS (
       UPDATE boot_token SET revoked_at = now()
        WHERE boot_entry_id = $1 AND revoked_at IS NULL AND (SELECT n FROM boots) < $5
     )
     INSERT INTO boot_token (id, boot_entry_id, node_id, hash, expires_at)
     SELECT $2, $1, $3, $4, e.expires_at FROM boot_entry e
      WHERE e.id = $1 AND (SELECT n FROM boots) < $5
     RETURNING id`;

/** The boot a valid token belongs to: what a ramdisk callback may act for. */
export interface BootSession {
  tokenId: string;
  entryId: string;
  nodeId: string;
  runId: string | null;
  purpose: BootPurpose;
  params: BootParams;
  expiresAt: Date;
}

/**
 * The boot of `token` when the token is unrevoked and unexpired, belongs to the node of its entry,
 * and that entry is still live (not revoked by a newer entry, the run's end or revokeNodeBoot, and
 * not expired); null otherwise, with no hint of which.
 */
export async function bootSession(db: Runner, token: string): Promise<BootSession | null> {
  if (!token.startsWith(BOOT_TOKEN_PREFIX)) return null;
  const { rows } = await db.query(
    `SELECT t.id AS token_id, e.id AS entry_id, e.node_id, e.run_id, e.purpose, e.params, e.expires_at
       FROM boot_token t JOIN boot_entry e ON e.id = t.boot_entry_id AND e.node_id = t.node_id
      WHERE t.hash = $1 AND t.revoked_at IS NULL AND t.expires_at > now()
        AND e.revoked_at IS NULL AND e.expires_at > now()`,
    // Planned at every call: a generic plan made while boot_token was nearly empty scans it whole
    // (src/db/sql.ts, KEY_LOOKUP_SETTINGS, says why such plans stay).
    [hashToken(token)], { planEachTime: true },
  );
  const r = rows[0];
  if (!r) return null;
  return {
    tokenId: r.token_id as string,
    entryId: r.entry_id as string,
    nodeId: r.node_id as string,
    runId: (r.run_id as string | null) ?? null,
    purpose: r.purpose as BootPurpose,
    params: (r.params ?? {}) as BootParams,
    expiresAt: r.expires_at as Date,
  };
}

/** What storeReport did: stored, or found the boot but did not store (the route says why), or found no live boot. */
export type StoredReport =
  | { kind: 'stored'; id: string; createdAt: Date; session: Pick<BootSession, 'tokenId' | 'entryId' | 'nodeId' | 'runId' | 'purpose'> }
  | { kind: 'refused'; session: Pick<BootSession, 'tokenId' | 'entryId' | 'nodeId' | 'runId' | 'purpose'> }
  | null;

/**
 * Authenticates and stores one report in one statement (the callbacks of 1,000 machines are most of
 * a lifecycle's requests): the boot of `token` when the token is live (bootSession's rules), its
 * entry is `entryId` (the path's) and its purpose is one of `allowed` (the purposes that take this
 * report kind); then the report lands with the entry's run, and the run is woken (due_at) when the
 * boot's purpose is one of `wakes` (reportWakesRun: a report nothing waits for wakes nothing).
 * Only the token row is locked, under a share lock: every revocation (a new fetch, a new entry,
 * revokeNodeBoot) updates the tokens it ends, so a revocation or a new iPXE fetch that commits
 * first wins and nothing is stored; no lock is taken on the entry beyond the foreign key's KEY
 * SHARE. `payload` is already checked (reports.ts). `refused`: the token is live but its entry is
 * another, or its purpose takes no such report (the route answers 401 or 409, as before the
 * statement). With `waker` (this process runs the engine), that engine is also told after the
 * statement (it fetches at once): `db` must not be a transaction then.
 */
export async function storeReport(db: Runner, report: ReportToStore, waker?: RunWaker | null): Promise<StoredReport> {
  if (!reportPossible(report)) return null;
  const { rows } = await db.query(STORE_REPORT_SQL, storeReportValues(report));
  return settleStoredReport(rows[0], waker);
}

/** Whether the report's token can be a boot token at all (else no statement is sent: no live boot). */
export const reportPossible = (report: Pick<ReportToStore, 'token'>): boolean => report.token.startsWith(BOOT_TOKEN_PREFIX);

/** A report as storeReport takes it. */
export interface ReportToStore {
  token: string;
  entryId: string;
  kind: ReportKind;
  payload: object;
  allowed: readonly BootPurpose[];
  wakes: readonly BootPurpose[];
}

const STORE_REPORT_SQL = `WITH s AS (
       SELECT t.id AS token_id, e.id AS entry_id, e.node_id, e.run_id, e.purpose
         FROM boot_token t JOIN boot_entry e ON e.id = t.boot_entry_id AND e.node_id = t.node_id
        WHERE t.hash = $1 AND t.revoked_at IS NULL AND t.expires_at > now()
          AND e.revoked_at IS NULL AND e.expires_at > now()
          FOR SHARE OF t
     ), rep AS (
       INSERT INTO ramdisk_report (boot_entry_id, boot_token_id, node_id, run_id, kind, payload)
       SELECT entry_id, token_id, node_id, run_id, $2, $3::jsonb FROM s WHERE s.entry_id = $5 AND s.purpose = ANY($6::text[])
       RETURNING id, run_id, created_at
     ), woke AS (
       ${wakeRunsSql('SELECT rep.run_id FROM rep, s WHERE s.purpose = ANY($4::text[])')}
     )
     SELECT rep.id::text AS id, rep.created_at, s.*, (SELECT count(*)::int FROM woke) AS woken FROM s LEFT JOIN rep ON true`;

function storeReportValues(report: ReportToStore): string[] {
  return [hashToken(report.token), report.kind, JSON.stringify(report.payload), executeLiteral(report.wakes)!, report.entryId, executeLiteral(report.allowed)!];
}

/**
 * storeReport's statement for Sql.joinedWhenConnected (the report route's JoinedWriter): reports
 * of many machines in one message. The caller checks the token's prefix first, as storeReport does
 * (reportPossible).
 */
export function storeReportStatement(report: ReportToStore): FirstStatement {
  return { name: 'metal_store_report', text: STORE_REPORT_SQL, types: ['text', 'text', 'jsonb', 'text[]', 'text', 'text[]'], values: storeReportValues(report) };
}

/** What storeReport makes of its statement's answer (its first row, if any). */
export function settleStoredReport(r: Record<string, unknown> | undefined, waker?: RunWaker | null): StoredReport {
  if (!r) return null;
  const session = { tokenId: r.token_id as string, entryId: r.entry_id as string, nodeId: r.node_id as string, runId: (r.run_id as string | null) ?? null, purpose: r.purpose as BootPurpose };
  if (r.id == null) return { kind: 'refused', session };
  afterWake(Number(r.woken) ? session.runId : null, waker);
  return { kind: 'stored', id: r.id as string, createdAt: r.created_at as Date, session };
}
