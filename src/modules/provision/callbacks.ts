import { isIP } from 'node:net';
import { hashToken } from '../../auth/tokens';
import { invalidInput } from '../../errors';
import { checkEventPayload } from '../../events/outbox';
import { wakeRunsSql } from '../../../jobs/wake';
import type { Runner } from '../metal/node-store';

/**
 * What a control-node job's installer calls back with (seed 004: POST /controlnode/job/{id}/step,
 * /job/{id}/complete, /firstboot), checked, and stored with the job's callback token in one
 * statement. The seed says "No auth required"; here each call carries `Authorization: Bearer
 * <token>`, the job's callback token, which only that job's ISO holds (preseed.ts writes it into
 * the ISO's initrd, and into the installed system for the first boot). The token lives as long as
 * the job's ISO: its end (success, failure, cancel) revokes both, and a call with it is then 401.
 */

export type InstallReportKind = 'step' | 'complete' | 'firstboot';

export const STEP_STATES = ['active', 'done', 'failed'] as const;
export type StepState = (typeof STEP_STATES)[number];

export interface StepCallback { step: string; state: StepState; percent: number | null }
export interface CompleteCallback { osIp: string | null; osPassword: string | null }
export interface FirstbootCallback { bmcIp: string; osIp: string }

type Body = Record<string, unknown>;

function object(body: unknown): Body {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw invalidInput('body', 'must be a JSON object');
  return body as Body;
}

function only(body: Body, fields: readonly string[]): void {
  for (const k of Object.keys(body)) if (!fields.includes(k)) throw invalidInput(`body.${k}`, `is not a known field (${fields.join(', ')})`);
}

function ip(body: Body, name: string, required: boolean): string | null {
  const v = body[name];
  if (v === undefined || v === null || v === '') {
    if (required) throw invalidInput(`body.${name}`, 'is required');
    return null;
  }
  if (typeof v !== 'string' || !isIP(v.trim())) throw invalidInput(`body.${name}`, 'must be an IPv4 or IPv6 address');
  return v.trim().toLowerCase();
}

/** `{ step, state, percent }`: step and state required (seed), percent 0..100. */
export function checkStepCallback(raw: unknown): StepCallback {
  const body = object(raw);
  only(body, ['step', 'state', 'percent']);
  const { step, state, percent } = body;
  if (typeof step !== 'string' || step.trim() === '') throw invalidInput('body.step', 'is required: the installer step\'s name');
  if (step.length > 128 || /[\u0000-\u001f\u007f]/.test(step)) throw invalidInput('body.step', 'must be at most 128 printable characters');
  if (typeof state !== 'string' || !(STEP_STATES as readonly string[]).includes(state)) throw invalidInput('body.state', `is required: one of ${STEP_STATES.join(', ')}`);
  if (percent !== undefined && percent !== null && (typeof percent !== 'number' || !Number.isInteger(percent) || percent < 0 || percent > 100)) {
    throw invalidInput('body.percent', 'must be an integer 0..100');
  }
  return { step: step.trim(), state: state as StepState, percent: typeof percent === 'number' ? percent : null };
}

/** `{ os_ip, os_password }`, both optional; the password goes to the broker, never into a row. */
export function checkCompleteCallback(raw: unknown): CompleteCallback {
  const body = object(raw ?? {});
  only(body, ['os_ip', 'os_password']);
  const password = body.os_password;
  if (password !== undefined && password !== null && (typeof password !== 'string' || password.length > 1024)) throw invalidInput('body.os_password', 'must be a string of at most 1024 characters');
  return { osIp: ip(body, 'os_ip', false), osPassword: typeof password === 'string' && password !== '' ? password : null };
}

/** `{ bmc_ip, os_ip }` (both required, seed), and the job_id the installed system also sends. */
export function checkFirstbootCallback(raw: unknown): FirstbootCallback {
  const body = object(raw);
  only(body, ['bmc_ip', 'os_ip', 'job_id']);
  if (body.job_id !== undefined && typeof body.job_id !== 'string') throw invalidInput('body.job_id', 'must be a string');
  return { bmcIp: ip(body, 'bmc_ip', true)!, osIp: ip(body, 'os_ip', true)! };
}

/** The job a callback token belongs to, while its ISO is live: for the checks before a report is stored. */
export interface InstallSession {
  isoId: string;
  /** The install run the ISO was built for (the callback paths' id). */
  runId: string;
  /** The job it belongs to: the run itself, or the enrollment a new BMC's provision started with. */
  jobId: string;
  nodeId: string; tenantId: string; bmcAddress: string;
}

export async function installSession(db: Runner, token: string): Promise<InstallSession | null> {
  const { rows } = await db.query(
    `SELECT i.id AS "isoId", i.run_id AS "runId", COALESCE(w.params->>'jobId', w.id) AS "jobId", n.id AS "nodeId", n.tenant_id AS "tenantId", n.bmc_address AS "bmcAddress"
       FROM installer_iso i JOIN workflow_run w ON w.id = i.run_id JOIN node n ON n.id = w.node_id
      WHERE i.callback_token_hash = $1 AND i.revoked_at IS NULL AND i.expires_at > now()`,
    [hashToken(token)],
  );
  return (rows[0] as unknown as InstallSession | undefined) ?? null;
}

/**
 * Stores one installer report for the token's job and wakes its run, with a `provision.step`
 * event (the REST SSE channel `provision`), in one statement: the token is checked again there,
 * under a share lock on its ISO, so a revocation that commits first wins and nothing is stored
 * (null). `payload` is checked and holds no secret.
 */
export async function storeInstallReport(db: Runner, token: string, runId: string, kind: InstallReportKind, payload: Record<string, unknown>, event: Record<string, unknown>): Promise<{ id: string; createdAt: Date } | null> {
  checkEventPayload(payload);
  checkEventPayload(event);
  const { rows } = await db.query(
    `WITH s AS (
       SELECT i.id AS iso_id, i.run_id FROM installer_iso i
        WHERE i.callback_token_hash = $1 AND i.run_id = $2 AND i.revoked_at IS NULL AND i.expires_at > now()
          FOR SHARE OF i
     ), rep AS (
       INSERT INTO install_report (run_id, iso_id, kind, payload) SELECT run_id, iso_id, $3, $4::jsonb FROM s
       RETURNING id, run_id, created_at
     ), ev AS (
       INSERT INTO event (type, tenant_id, site_id, pool_id, node_id, subject, payload)
       SELECT 'provision.step', n.tenant_id, n.site_id, n.pool_id, n.id, COALESCE(w.params->>'jobId', w.id), $5::jsonb
         FROM rep JOIN workflow_run w ON w.id = rep.run_id JOIN node n ON n.id = w.node_id
     ), woke AS (
       ${wakeRunsSql('SELECT run_id FROM rep')}
     )
     SELECT rep.id::text AS id, rep.created_at, (SELECT count(*) FROM woke)::int AS woken FROM rep`,
    [hashToken(token), runId, kind, JSON.stringify(payload), JSON.stringify(event)],
  );
  const r = rows[0];
  return r ? { id: r.id as string, createdAt: r.created_at as Date } : null;
}

/** A run's installer reports of one kind, oldest first (what its steps read). */
export async function installReports(db: Runner, runId: string, kind: InstallReportKind | 'iso'): Promise<{ id: string; payload: Record<string, unknown>; createdAt: Date }[]> {
  const { rows } = await db.query(
    `SELECT id::text AS id, payload, created_at FROM install_report WHERE run_id = $1 AND kind = $2 ORDER BY id`,
    [runId, kind],
  );
  return rows.map((r) => ({ id: r.id as string, payload: (r.payload ?? {}) as Record<string, unknown>, createdAt: r.created_at as Date }));
}
