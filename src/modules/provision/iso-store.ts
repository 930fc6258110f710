import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Runner } from '../metal/node-store';
import { invalidInput } from '../../errors';
import { newId } from '../../ids';
import { hashToken } from '../../auth/tokens';

/**
 * The installer ISOs a control-node job publishes (issue 11 item 3): a file under ISO_DIR, served
 * at `/boot/iso/<token>/<name>.iso` until revoked (its job ended) or expired. BMCs mount virtual
 * media without credentials, so the URL's 256-bit token is the secret; only its sha256 is stored,
 * and an unknown, revoked or expired token all answer the same 404.
 */

export const ISO_URL_PREFIX = '/boot/iso/';
const TOKEN = /^[A-Za-z0-9_-]{43}$/;
/** What the file is called in the URL: iDRAC and XCC refuse an image whose name does not end in .iso. */
const ISO_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}\.iso$/;

/**
 * A path the client named (cache_dir, output_iso, pxe_path) inside the service's ISO directory, or
 * INVALID_INPUT naming the field: relative to ISO_DIR, no `..`, no NUL, and no symlink on the way
 * out of it (the deepest existing ancestor is resolved and must still be inside).
 */
export async function confinedPath(field: string, value: unknown, isoDir: string): Promise<string> {
  if (typeof value !== 'string' || value.length === 0 || value.length > 1024) throw invalidInput(field, 'must be a path of 1 to 1024 characters inside the service\'s ISO directory');
  if (/[\u0000-\u001f\u007f]/.test(value) || /[\ud800-\udfff]/.test(value)) throw invalidInput(field, 'must not contain control characters');
  const root = path.resolve(isoDir);
  const rel = path.isAbsolute(value) ? path.relative(root, path.resolve(value)) : path.normalize(value);
  if (rel === '' || rel === '.' || rel.startsWith('..') || path.isAbsolute(rel) || rel.split(path.sep).includes('..')) {
    throw invalidInput(field, 'must stay inside the service\'s ISO directory (ISO_DIR)');
  }
  const target = path.join(root, rel);
  // A symlink inside ISO_DIR must not lead out of it: resolve the deepest part that exists.
  const realRoot = await fs.realpath(root).catch(() => root);
  let probe = target;
  for (;;) {
    const real = await fs.realpath(probe).catch(() => null);
    if (real) {
      if (real !== realRoot && !real.startsWith(realRoot + path.sep)) throw invalidInput(field, 'must stay inside the service\'s ISO directory (ISO_DIR)');
      break;
    }
    const up = path.dirname(probe);
    if (up === probe) break;
    probe = up;
  }
  return target;
}

export interface PublishedIso {
  id: string;
  /** The path to give the BMC (append to the service's public URL). */
  urlPath: string;
  expiresAt: Date;
}

/** Records a built ISO (a file directly under ISO_DIR) and answers its URL; the token is not kept. */
export async function publishIso(db: Runner, isoDir: string, opts: { file: string; name: string; nodeId?: string | null; runId?: string | null; ttlMs: number; callbackToken?: string | null }): Promise<PublishedIso> {
  if (!ISO_NAME.test(opts.name)) throw new Error(`an ISO's name must end in .iso and be URL-safe: ${opts.name}`);
  const root = path.resolve(isoDir);
  const file = path.resolve(opts.file);
  if (path.dirname(file) !== root) throw new Error('a published ISO must lie directly in ISO_DIR');
  const stat = await fs.stat(file);
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  const token = randomBytes(32).toString('base64url');
  const id = newId('InstallerIso');
  const { rows } = await db.query(
    `INSERT INTO installer_iso (id, node_id, run_id, token_hash, file_name, bytes, sha256, expires_at, callback_token_hash)
     VALUES ($1, $2, $3, $4, $5, $6, $7, now() + $8::int * interval '1 millisecond', $9) RETURNING expires_at`,
    [id, opts.nodeId ?? null, opts.runId ?? null, hashToken(token), path.basename(file), stat.size, hash.digest('hex'), Math.round(opts.ttlMs),
      opts.callbackToken ? hashToken(opts.callbackToken) : null],
  );
  return { id, urlPath: `${ISO_URL_PREFIX}${token}/${opts.name}`, expiresAt: rows[0]!.expires_at as Date };
}

/** Ends an ISO's URL (its job ended or was cancelled). Resolves to how many were revoked. */
export async function revokeIsos(db: Runner, by: { id?: string; runId?: string }): Promise<number> {
  if (!by.id && !by.runId) throw new Error('revokeIsos: an id or a runId');
  const { rows } = await db.query(
    `UPDATE installer_iso SET revoked_at = now() WHERE revoked_at IS NULL AND ($1::text IS NULL OR id = $1) AND ($2::text IS NULL OR run_id = $2) RETURNING id`,
    [by.id ?? null, by.runId ?? null],
  );
  return rows.length;
}

/** The live ISO a URL path names, or null (unknown, revoked, expired or malformed: one answer). */
export async function liveIso(db: Runner, isoDir: string, pathname: string): Promise<{ id: string; file: string } | null> {
  const rest = pathname.slice(ISO_URL_PREFIX.length).split('/');
  if (rest.length !== 2 || !TOKEN.test(rest[0]!) || !ISO_NAME.test(rest[1]!)) return null;
  const { rows } = await db.query(
    'SELECT id, file_name FROM installer_iso WHERE token_hash = $1 AND revoked_at IS NULL AND expires_at > now()',
    [hashToken(rest[0]!)],
  );
  const row = rows[0];
  if (!row) return null;
  return { id: row.id as string, file: path.join(path.resolve(isoDir), row.file_name as string) };
}

/** Records an ISO build's outcome for its run (the install workflow's build-iso step reads it): the ISO it published, if any. */
export async function recordIsoReport(tx: Pick<Runner, 'query'>, runId: string, isoId: string | null, report: Record<string, unknown>): Promise<void> {
  await tx.query(`INSERT INTO install_report (run_id, iso_id, kind, payload) VALUES ($1, $2, 'iso', $3::jsonb)`, [runId, isoId, JSON.stringify(report)]);
}

/**
 * The ISO builds GET /controlnode/provision/queue lists (iso_build_job): one row per build the
 * Building ISO step queued (`id`: its provision.iso job's id, jobs/iso-build.ts queueIsoBuild),
 * in the step's transaction.
 */
export async function recordIsoBuildQueued(db: Pick<Runner, 'query'>, id: string, runId: string): Promise<void> {
  await db.query('INSERT INTO iso_build_job (id, run_id) VALUES ($1::uuid, $2)', [id, runId]);
}

/** A worker started the build of job `id` (the first time it took it). */
export async function markIsoBuildStarted(db: Pick<Runner, 'query'>, id: string): Promise<void> {
  await db.query('UPDATE iso_build_job SET started_at = COALESCE(started_at, now()) WHERE id = $1::uuid', [id]);
}

/** The run's builds are over (its outcome recorded, or nothing to build): they leave the queue. */
export async function endIsoBuilds(db: Pick<Runner, 'query'>, runId: string): Promise<void> {
  await db.query('UPDATE iso_build_job SET ended_at = now() WHERE run_id = $1 AND ended_at IS NULL', [runId]);
}
