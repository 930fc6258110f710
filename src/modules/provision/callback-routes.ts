import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { Sql } from '../../db/sql';
import { AppError } from '../../errors';
import { readJsonBody } from '../../http/body';
import { sendError, sendJson } from '../../http/respond';
import type { SecretBroker } from '../../../clients/secrets/broker';
import {
  checkCompleteCallback, checkFirstbootCallback, checkStepCallback, installSession, storeInstallReport,
  type InstallReportKind, type InstallSession,
} from './callbacks';

/**
 * The installer's callbacks (seed 004), served beside the REST surface because their callers are
 * machines with a job's callback token, never API tokens:
 *   POST /controlnode/job/{id}/step      { step, state: active|done|failed, percent }
 *   POST /controlnode/job/{id}/complete  { os_ip, os_password }
 *   POST /controlnode/firstboot          { bmc_ip, os_ip }
 * Who calls is settled before the body is read: no token, an unknown, revoked or expired one, or
 * another job's, is the same 401, and nothing changes. A reported OS password goes to the secret
 * broker (the node's control-node record points at it) and nowhere else.
 */

const JOB_PATH = /^\/controlnode\/job\/([^/]+)\/(step|complete)$/;
const FIRSTBOOT = '/controlnode/firstboot';

function unauthorized(req: IncomingMessage, res: ServerResponse, requestId: string): void {
  req.resume();
  res.setHeader('www-authenticate', 'Bearer realm="installer"');
  sendError(res, 401, 'UNAUTHENTICATED', 'the job\'s callback token (the one its ISO carries) is required', requestId);
}

export class InstallerHttp {
  constructor(private sql: Sql, private secrets: SecretBroker | null, private log: Logger) {}

  static owns(pathname: string): boolean {
    return pathname === FIRSTBOOT || JOB_PATH.test(pathname);
  }

  owns(pathname: string): boolean {
    return InstallerHttp.owns(pathname);
  }

  /** The metrics label of a callback path: its template, never the job id. */
  static routeLabel(pathname: string): string | null {
    if (pathname === FIRSTBOOT) return FIRSTBOOT;
    const m = JOB_PATH.exec(pathname);
    return m ? `/controlnode/job/{id}/${m[2]}` : null;
  }

  async serve(req: IncomingMessage, res: ServerResponse, url: URL, requestId: string): Promise<void> {
    if (req.method !== 'POST') {
      res.setHeader('allow', 'POST');
      return sendError(res, 405, 'INVALID_INPUT', `method ${req.method} is not allowed here; use POST`, requestId);
    }
    const m = JOB_PATH.exec(url.pathname);
    const kind: InstallReportKind = m ? (m[2] as 'step' | 'complete') : 'firstboot';
    let jobId: string | null = null;
    if (m) {
      try {
        jobId = decodeURIComponent(m[1]!);
      } catch {
        jobId = '';
      }
    }
    const session = await this.authenticate(req, jobId, requestId);
    if (!session) return unauthorized(req, res, requestId);
    if (url.search) throw new AppError('INVALID_INPUT', 'query: this route takes no query parameters', { field: 'query' });
    const parsed = await readJsonBody(req);
    const base = { jobId: session.jobId, ...(session.jobId !== session.runId ? { runId: session.runId } : {}), bmcIp: session.bmcAddress };
    if (kind === 'step') {
      const step = checkStepCallback(parsed);
      return this.store(req, res, requestId, session, kind, { ...step }, { ...base, kind, ...step });
    }
    if (kind === 'firstboot') {
      const boot = checkFirstbootCallback(parsed);
      if (boot.bmcIp !== session.bmcAddress.toLowerCase()) {
        throw new AppError('INVALID_INPUT', `body.bmc_ip: is not the BMC of the job this token belongs to`, { field: 'body.bmc_ip' });
      }
      return this.store(req, res, requestId, session, kind, { ...boot }, { ...base, kind, osIp: boot.osIp });
    }
    const done = checkCompleteCallback(parsed);
    let ref: string | null = null;
    if (done.osPassword) {
      if (!this.secrets) throw new AppError('INVALID_CONFIG', 'no secret broker is configured: the reported OS password cannot be kept');
      ref = await this.secrets.put(session.tenantId, { username: await this.osUser(session), password: done.osPassword });
    }
    try {
      await this.store(req, res, requestId, session, kind, { osIp: done.osIp, osPasswordReported: ref !== null }, { ...base, kind, osIp: done.osIp }, ref);
    } catch (error) {
      if (ref) await this.secrets!.delete(ref, session.tenantId).catch(() => undefined);
      throw error;
    }
  }

  private async authenticate(req: IncomingMessage, jobId: string | null, requestId: string): Promise<InstallSession | null> {
    const match = /^Bearer\s+([A-Za-z0-9_-]{16,128})\s*$/i.exec(req.headers.authorization ?? '');
    if (!match) {
      this.log.info({ requestId }, 'installer callback without a callback token');
      return null;
    }
    const session = await installSession(this.sql, match[1]!);
    if (!session) {
      this.log.info({ requestId }, 'installer callback with an unknown, revoked or expired callback token');
      return null;
    }
    // The job's id (what provision answered and the ISO carries), or its install run's.
    if (jobId !== null && jobId !== session.jobId && jobId !== session.runId) {
      this.log.warn({ requestId, tokenJob: session.jobId }, 'installer callback with another job\'s token');
      return null;
    }
    (req as IncomingMessage & { callbackToken?: string }).callbackToken = match[1]!;
    return session;
  }

  private async osUser(session: InstallSession): Promise<string> {
    const { rows } = await this.sql.query(`SELECT params->>'osUsername' AS u FROM workflow_run WHERE id = $1`, [session.runId]);
    return (rows[0]?.u as string | null) ?? 'root';
  }

  private async store(req: IncomingMessage, res: ServerResponse, requestId: string, session: InstallSession, kind: InstallReportKind,
    payload: Record<string, unknown>, event: Record<string, unknown>, passwordRef: string | null = null): Promise<void> {
    const token = (req as IncomingMessage & { callbackToken?: string }).callbackToken!;
    let replaced: string | null = null;
    const stored = await this.sql.transaction(async (tx) => {
      const report = await storeInstallReport(tx, token, session.runId, kind, payload, event);
      if (report && passwordRef) {
        const { rows } = await tx.query(
          `WITH old AS (SELECT os_credentials_ref FROM bmc_info WHERE node_id = $1 FOR UPDATE)
           INSERT INTO bmc_info (node_id, tenant_id, os_credentials_ref, os_username)
           VALUES ($1, $2, $3, (SELECT params->>'osUsername' FROM workflow_run WHERE id = $4))
           ON CONFLICT (node_id) DO UPDATE SET os_credentials_ref = EXCLUDED.os_credentials_ref, version = bmc_info.version + 1, updated_at = now()
           RETURNING (SELECT os_credentials_ref FROM old) AS old`,
          [session.nodeId, session.tenantId, passwordRef, session.runId],
        );
        replaced = (rows[0]?.old as string | null) ?? null;
      }
      return report;
    });
    if (!stored) {
      if (passwordRef) await this.secrets!.delete(passwordRef, session.tenantId).catch(() => undefined);
      return unauthorized(req, res, requestId);
    }
    if (replaced && replaced !== passwordRef) await this.secrets!.delete(replaced, session.tenantId).catch(() => undefined);
    this.log.info({ requestId, jobId: session.jobId, runId: session.runId, nodeId: session.nodeId, kind, reportId: stored.id }, 'installer report stored');
    sendJson(res, 200, { success: true, job_id: session.jobId, kind, report_id: stored.id, created_at: stored.createdAt.toISOString() });
  }
}
