import fs from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { Runner } from '../metal/node-store';
import { AppError } from '../../errors';

/**
 * The installer ISOs on disk (issue 21 item 12). Each is about 54 MiB and holds the OS password's
 * crypt hash, so it lives only as long as its job: a file is deleted once its URL is revoked or
 * expired, or its run ended (succeeded, failed, aborted, superseded), and a file no row names is
 * deleted once its run ended (a build a crash cut short; while the run is active it may be being
 * built, and a run this database does not know is not its to judge). The sweep runs when a worker starts
 * (what a crash left) and every ISO_SWEEP_MS after. ISO_DIR_MAX_BYTES caps the folder: provision
 * and the ISO build refuse a new ISO that would not fit (ISO_DIR_FULL).
 */

/** What buildRunIso names its files: `<run id>-<8 hex>.iso`; nothing else in ISO_DIR is touched. */
export const ISO_FILE = /^(wf_[0-9a-f-]{36})-[0-9a-f]{8}\.iso$/;
/** A run whose ISO may still be read or written. */
const ACTIVE_RUN = ['queued', 'running', 'waiting', 'aborting'];
/** How often a worker sweeps ISO_DIR; a job's ISO is gone at most this long after it ended. */
export const ISO_SWEEP_MS = 5_000;
/** What an ISO is assumed to take before any was built here (the Debian netboot installer is ~54 MiB). */
export const ISO_SIZE_ESTIMATE = 64 * 1024 * 1024;

async function listIsoDir(isoDir: string): Promise<{ name: string; bytes: number }[]> {
  let names: string[];
  try {
    names = await fs.readdir(isoDir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
  const out: { name: string; bytes: number }[] = [];
  for (const name of names) {
    const stat = await fs.lstat(path.join(isoDir, name)).catch(() => null);
    if (stat?.isFile()) out.push({ name, bytes: stat.size });
  }
  return out;
}

/** Deletes the ISOs no live job needs; resolves to the names deleted. Never throws for one file. */
export async function sweepIsoDir(db: Pick<Runner, 'query'>, isoDir: string, log: Logger): Promise<string[]> {
  const files = (await listIsoDir(isoDir)).filter((f) => ISO_FILE.test(f.name));
  if (files.length === 0) return [];
  const names = files.map((f) => f.name);
  const runIds = [...new Set(names.map((n) => ISO_FILE.exec(n)![1]!))];
  const { rows } = await db.query<{ fileName: string; id: string; live: boolean; revoked: boolean }>(
    `SELECT i.file_name AS "fileName", i.id, (i.revoked_at IS NOT NULL) AS revoked,
            (i.revoked_at IS NULL AND i.expires_at > now() AND w.status = ANY($2::text[])) IS TRUE AS live
       FROM installer_iso i LEFT JOIN workflow_run w ON w.id = i.run_id WHERE i.file_name = ANY($1::text[])`,
    [names, ACTIVE_RUN],
  );
  const { rows: runs } = await db.query<{ id: string; active: boolean }>('SELECT id, status = ANY($2::text[]) AS active FROM workflow_run WHERE id = ANY($1::text[])', [runIds, ACTIVE_RUN]);
  // A file no row names is this database's to delete only when its run is here and ended: one of a
  // run this database does not know is another service's sharing the folder (a test's, a copy's).
  const endedRuns = new Set(runs.filter((r) => !r.active).map((r) => r.id));
  const byName = new Map<string, { id: string; live: boolean; revoked: boolean }[]>();
  for (const r of rows) byName.set(r.fileName, [...(byName.get(r.fileName) ?? []), r]);
  const deleted: string[] = [];
  const unrevoked: string[] = [];
  for (const name of names) {
    const published = byName.get(name);
    const keep = published ? published.some((r) => r.live) : !endedRuns.has(ISO_FILE.exec(name)![1]!);
    if (keep) continue;
    try {
      await fs.rm(path.join(isoDir, name), { force: true });
      deleted.push(name);
      for (const r of published ?? []) if (!r.revoked) unrevoked.push(r.id);
    } catch (error) {
      log.warn({ err: error, file: name }, 'an ended job\'s installer ISO could not be deleted');
    }
  }
  // A file gone is a URL that no longer works: said so in its row too (its run ended without revoking it).
  if (unrevoked.length) await db.query('UPDATE installer_iso SET revoked_at = now() WHERE id = ANY($1::text[]) AND revoked_at IS NULL', [unrevoked]);
  if (deleted.length) log.info({ files: deleted.length }, 'deleted the installer ISOs of ended jobs');
  return deleted;
}

/** ISO_DIR's use: the bytes of its files, and the largest ISO (the next one's likely size). */
export async function isoDirUse(isoDir: string): Promise<{ bytes: number; largestIso: number }> {
  const files = await listIsoDir(isoDir);
  return {
    bytes: files.reduce((n, f) => n + f.bytes, 0),
    largestIso: files.filter((f) => ISO_FILE.test(f.name)).reduce((m, f) => Math.max(m, f.bytes), 0),
  };
}

export const ISO_DIR_FULL_MESSAGE = 'ISO_DIR_FULL: the installer ISO folder (ISO_DIR) has no room for another ISO within ISO_DIR_MAX_BYTES; each job\'s ISO is deleted when it ends';

/** Whether one more ISO fits in ISO_DIR under its cap (0: no cap). */
export async function isoDirHasRoom(isoDir: string, maxBytes: number): Promise<boolean> {
  if (!maxBytes) return true;
  const use = await isoDirUse(isoDir);
  return use.bytes + Math.max(use.largestIso, ISO_SIZE_ESTIMATE) <= maxBytes;
}

/** Refuses a request whose job would need an ISO that does not fit (before anything is written). */
export async function refuseFullIsoDir(isoDir: string, maxBytes: number): Promise<void> {
  if (!(await isoDirHasRoom(isoDir, maxBytes))) {
    throw new AppError('INVALID_STATE', ISO_DIR_FULL_MESSAGE, { reason: 'ISO_DIR_FULL' });
  }
}
