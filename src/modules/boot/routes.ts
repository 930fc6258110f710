import fs from 'node:fs';
import path from 'node:path';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { Sql } from '../../db/sql';
import { AppError, invalidInput } from '../../errors';
import { readBody, readJsonBody } from '../../http/body';
import { sendError, sendJson, serverTiming } from '../../http/respond';
import { sendFile } from '../../http/file';
import { ISO_URL_PREFIX, liveIso } from '../provision/iso-store';
import { checkString } from '../../limits';
import { normalizeMac } from '../metal/mac';
import { BOOT_PURPOSES, bootSession, reportPossible, settleStoredReport, startBoot, storeReport, storeReportStatement, type BootSession, type ReportKind, type ReportToStore, type StoredReport } from './entries';
import { JoinedWriter } from '../../db/joined-writer';
import type { RunWaker } from '../../../jobs/wake';
import { checkReport, reportAllowed, reportWakesRun, REPORTS_BY_PURPOSE } from './reports';

/**
 * The boot side of the service over HTTP, outside the bearer-token REST surface: machines have no
 * API token. `GET /boot/ipxe?mac=` is what iPXE fetches (firmware: no credentials at all), and the
 * ramdisk it boots calls back under `/boot/v1/entries/{entryId}/` with the per-boot token the
 * script carried. docs/boot.md describes the protocol; bootOpenApiPaths() documents the callbacks
 * in /openapi.json.
 */

export interface BootHttpOptions {
  /** PUBLIC_URL: the URL machines reach the service at; unset, the address each request came in on. */
  publicUrl?: string;
  ramdiskKernelUrl?: string;
  ramdiskInitrdUrl?: string;
  /** RAMDISK_DIR: the folder whose vmlinuz and initrd.img are served at /boot/ramdisk/. */
  ramdiskDir?: string;
  /** ISO_DIR: where the installer ISOs published at /boot/iso/<token>/<name>.iso lie. */
  isoDir?: string;
  /** This process's engine (ROLE all): told at once of a run a report woke (jobs/wake.ts RunWaker). */
  waker?: RunWaker | null;
}

/** The only files /boot/ramdisk/ serves: no path is ever built from the request. */
export const RAMDISK_FILES = ['vmlinuz', 'initrd.img'] as const;

/** What the ramdisk is told to heartbeat at (rescue keeps calling while it is up). */
export const HEARTBEAT_SECONDS = 60;

/** The POST path segment of each report kind. */
export const REPORT_PATHS: Record<string, ReportKind> = {
  heartbeat: 'heartbeat',
  inventory: 'inventory',
  steps: 'step',
  dcgm: 'dcgm',
  wipe: 'wipe',
};

/** The script every MAC without a live entry hears, word for word: it tells the asker nothing. */
export const NO_ENTRY_SCRIPT = '#!ipxe\n# no boot entry: boot from the next device\nexit\n';

const CALLBACK = /^\/boot\/v1\/entries\/([^/]+)\/([a-z]+)\/?$/;

/**
 * Characters that would change an iPXE script line: whitespace ends an argument, `$` starts an
 * iPXE setting expansion, `#` a comment, quotes and backslashes are quoting.
 */
const SCRIPT_UNSAFE = /[\s$#"'\\]/;

function checkUrlSetting(name: string, value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error(`${name} must be an absolute http(s) URL, got "${value}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error(`${name} must be an http or https URL`);
  if (SCRIPT_UNSAFE.test(value)) throw new Error(`${name} must not contain whitespace, $, #, quotes or backslashes (it goes into iPXE scripts)`);
  return value.replace(/\/+$/, '');
}

function unauthorized(req: IncomingMessage, res: ServerResponse, requestId: string): void {
  // The body is never read for a caller without a boot: drained, so the answer reaches the client.
  req.resume();
  res.setHeader('www-authenticate', 'Bearer realm="boot"');
  sendError(res, 401, 'UNAUTHENTICATED', 'a valid boot token for this boot entry is required', requestId);
}

/** What a callback's request says of its caller, before any lookup. */
interface Bearer {
  entryId: string;
  token: string;
}

export class BootHttp {
  private readonly publicUrl: string | null;
  private readonly kernelUrl: string | null;
  private readonly initrdUrl: string | null;
  private readonly ramdiskDir: string | null;
  private readonly isoDir: string | null;
  private readonly waker: RunWaker | null;
  /** Reports of many machines that wait for a connection go in one message (one round trip, one commit). */
  private readonly reports: JoinedWriter<ReportToStore, StoredReport>;

  constructor(private sql: Sql, private log: Logger, opts: BootHttpOptions = {}) {
    this.publicUrl = opts.publicUrl ? checkUrlSetting('PUBLIC_URL', opts.publicUrl) : null;
    this.kernelUrl = opts.ramdiskKernelUrl ? checkUrlSetting('RAMDISK_KERNEL_URL', opts.ramdiskKernelUrl) : null;
    this.initrdUrl = opts.ramdiskInitrdUrl ? checkUrlSetting('RAMDISK_INITRD_URL', opts.ramdiskInitrdUrl) : null;
    this.ramdiskDir = opts.ramdiskDir ?? null;
    this.isoDir = opts.isoDir ?? null;
    this.waker = opts.waker ?? null;
    this.reports = new JoinedWriter<ReportToStore, StoredReport>(sql, {
      statement: storeReportStatement,
      settle: (row) => settleStoredReport(row, this.waker),
      alone: (report) => storeReport(sql, report, this.waker),
    });
  }

  owns(pathname: string): boolean {
    return pathname === '/boot/ipxe' || pathname.startsWith('/boot/v1/') || pathname.startsWith('/boot/ramdisk/') || pathname.startsWith(ISO_URL_PREFIX);
  }

  /**
   * The path a request log line may carry: an installer ISO's path holds its URL token, the only
   * credential a BMC has, so it is logged as its template; every other path as it is.
   */
  static loggedPath(pathname: string): string {
    return pathname.startsWith(ISO_URL_PREFIX) ? '/boot/iso/{token}/{name}' : pathname;
  }

  /** The metrics label of a boot path: its template, never the entry id. */
  static routeLabel(pathname: string): string | null {
    if (pathname === '/boot/ipxe') return pathname;
    if (pathname.startsWith('/boot/ramdisk/')) return '/boot/ramdisk/{file}';
    if (pathname.startsWith(ISO_URL_PREFIX)) return BootHttp.loggedPath(pathname);
    const m = CALLBACK.exec(pathname);
    return m ? `/boot/v1/entries/{entryId}/${m[2] === 'instructions' || REPORT_PATHS[m[2]!] ? m[2] : 'other'}` : null;
  }

  async serve(req: IncomingMessage, res: ServerResponse, url: URL, requestId: string): Promise<void> {
    if (url.pathname === '/boot/ipxe') return this.ipxe(req, res, url, requestId);
    if (url.pathname.startsWith('/boot/ramdisk/')) return this.ramdiskFile(req, res, url, requestId);
    if (url.pathname.startsWith(ISO_URL_PREFIX)) return this.isoFile(req, res, url, requestId);
    const m = CALLBACK.exec(url.pathname);
    const action = m?.[2];
    const kind = action ? REPORT_PATHS[action] : undefined;
    const method = req.method ?? 'GET';
    if (!m || (action !== 'instructions' && !kind)) return sendError(res, 404, 'NOT_FOUND', 'no route has this method and path (see docs/boot.md)', requestId);
    const expected = action === 'instructions' ? 'GET' : 'POST';
    if (method !== expected) {
      res.setHeader('allow', expected);
      return sendError(res, 405, 'INVALID_INPUT', `this method is not allowed here; use ${expected}`, requestId);
    }
    // Who is calling, before anything about the request is answered: no boot, no answer.
    const bearer = this.bearer(req, m[1]!, requestId);
    if (!bearer) return unauthorized(req, res, requestId);
    if (action === 'instructions') {
      const session = await this.authenticate(bearer, requestId);
      if (!session) return unauthorized(req, res, requestId);
      if (url.search) throw invalidInput(queryField([...url.searchParams.keys()][0] ?? ''), 'is not a known field');
      const raw = await readBody(req);
      if (raw.length > 0) throw invalidInput('body', 'this route takes no body');
      return sendJson(res, 200, {
        entryId: session.entryId,
        purpose: session.purpose,
        params: session.params,
        expiresAt: session.expiresAt.toISOString(),
        reports: ['heartbeat', 'step', ...REPORTS_BY_PURPOSE[session.purpose]],
        heartbeatSeconds: HEARTBEAT_SECONDS,
      });
    }
    return this.report(req, res, url, bearer, kind!, requestId);
  }

  /**
   * The entry id of the path and the boot token from `Authorization: Bearer`, as sent (no lookup):
   * null, logged, when either is missing or malformed (never the token).
   */
  private bearer(req: IncomingMessage, rawEntryId: string, requestId: string): Bearer | null {
    let entryId: string;
    try {
      entryId = decodeURIComponent(rawEntryId);
    } catch {
      entryId = '';
    }
    const match = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
    if (!match) {
      this.log.info({ requestId, entryId: !entryId || checkString('entryId', entryId, 128) ? '(malformed)' : entryId }, 'boot callback without a bearer token');
      return null;
    }
    return { entryId, token: match[1]! };
  }

  /** The boot of the bearer's token, checked against the entry the path names. Every failure is the same 401 to the caller; the log says which. */
  private async authenticate(bearer: Bearer, requestId: string): Promise<BootSession | null> {
    const session = await bootSession(this.sql, bearer.token);
    return this.isBearers(session, bearer, requestId) ? session : null;
  }

  /** Whether the boot found for the token (null: none live) is the one the path names; logs why not. */
  private isBearers(session: Pick<BootSession, 'tokenId' | 'entryId'> | null, bearer: Bearer, requestId: string): session is Pick<BootSession, 'tokenId' | 'entryId'> {
    if (!session) {
      this.log.info({ requestId }, 'boot callback with an unknown, revoked or expired boot token');
      return false;
    }
    if (session.entryId !== bearer.entryId) {
      this.log.warn({ requestId, tokenId: session.tokenId, tokenEntryId: session.entryId }, 'boot callback with the token of another boot entry');
      return false;
    }
    return true;
  }

  /**
   * A report, authenticated and stored in one statement (storeReport, sent with the other reports
   * waiting for a connection) when its query and body are good. A request refused for its query
   * or body is authenticated first (one more statement), so
   * a caller without a live token of this entry learns nothing but 401, as when the lookup came
   * first. The token is checked in the statement that stores: a new iPXE fetch or a revocation
   * that committed before it wins, and nothing is stored for a boot that is over.
   */
  private async report(req: IncomingMessage, res: ServerResponse, url: URL, bearer: Bearer, kind: ReportKind, requestId: string): Promise<void> {
    let payload: object;
    try {
      if (url.search) throw invalidInput(queryField([...url.searchParams.keys()][0] ?? ''), 'is not a known field');
      payload = checkReport(kind, await readJsonBody(req));
    } catch (error) {
      if (!(await this.authenticate(bearer, requestId))) return unauthorized(req, res, requestId);
      throw error;
    }
    const toStore: ReportToStore = {
      token: bearer.token, entryId: bearer.entryId, kind, payload,
      allowed: BOOT_PURPOSES.filter((purpose) => reportAllowed(purpose, kind)),
      wakes: BOOT_PURPOSES.filter((purpose) => reportWakesRun(purpose, kind, payload)),
    };
    const stored = reportPossible(toStore) ? await this.reports.write(toStore) : null;
    if (!this.isBearers(stored ? stored.session : null, bearer, requestId) || !stored) return unauthorized(req, res, requestId);
    const { session } = stored;
    if (stored.kind === 'refused') {
      throw new AppError('INVALID_STATE', `a ${session.purpose} boot takes no ${kind} report`, { purpose: session.purpose, reports: ['heartbeat', 'step', ...REPORTS_BY_PURPOSE[session.purpose]] });
    }
    this.log.info({ requestId, entryId: session.entryId, nodeId: session.nodeId, runId: session.runId, kind, reportId: stored.id }, 'ramdisk report stored');
    sendJson(res, 201, { report: { id: stored.id, kind, createdAt: stored.createdAt.toISOString() } });
  }

  /**
   * The ramdisk's kernel and initrd, for the default RAMDISK_KERNEL_URL and RAMDISK_INITRD_URL: as
   * public as the iPXE route (firmware fetches them), and as secret-free (a ramdisk image holds
   * no credential: its token comes on the kernel command line).
   */
  private async ramdiskFile(req: IncomingMessage, res: ServerResponse, url: URL, requestId: string): Promise<void> {
    const name = RAMDISK_FILES.find((f) => url.pathname === `/boot/ramdisk/${f}`);
    if (!name || !this.ramdiskDir) return sendError(res, 404, 'NOT_FOUND', 'no such ramdisk file (RAMDISK_DIR serves vmlinuz and initrd.img)', requestId);
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD');
      return sendError(res, 405, 'INVALID_INPUT', 'this method is not allowed here; use GET', requestId);
    }
    const file = path.join(this.ramdiskDir, name);
    const stat = await fs.promises.stat(file).catch(() => null);
    if (!stat?.isFile()) return sendError(res, 404, 'NOT_FOUND', `the ramdisk's ${name} is not installed (put it in RAMDISK_DIR)`, requestId);
    await sendFile(req, res, file, stat);
  }

  /**
   * A published installer ISO, to the BMC that mounts it (no credentials: the URL's token is the
   * secret). Unknown, revoked and expired tokens are one 404, which says nothing of which.
   */
  private async isoFile(req: IncomingMessage, res: ServerResponse, url: URL, requestId: string): Promise<void> {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD');
      return sendError(res, 405, 'INVALID_INPUT', 'this method is not allowed here; use GET', requestId);
    }
    const gone = () => sendError(res, 404, 'NOT_FOUND', 'no such ISO (its job ended, or the link is wrong)', requestId);
    if (!this.isoDir) return gone();
    const iso = await liveIso(this.sql, this.isoDir, url.pathname);
    const stat = iso ? await fs.promises.stat(iso.file).catch(() => null) : null;
    if (!iso || !stat?.isFile()) return gone();
    await sendFile(req, res, iso.file, stat, { 'content-type': 'application/x-iso9660-image' });
  }

  private async ipxe(req: IncomingMessage, res: ServerResponse, url: URL, requestId: string): Promise<void> {
    if (req.method !== 'GET') {
      res.setHeader('allow', 'GET');
      return sendError(res, 405, 'INVALID_INPUT', 'this method is not allowed here; use GET', requestId);
    }
    for (const key of url.searchParams.keys()) {
      if (key !== 'mac') throw invalidInput(queryField(key), 'is not a known field');
    }
    const macs = url.searchParams.getAll('mac');
    if (macs.length !== 1) throw invalidInput('query.mac', macs.length ? 'is given more than once' : 'is required');
    if (macs[0]!.length > 64) throw invalidInput('query.mac', 'is not a MAC address');
    let mac: string;
    try {
      mac = normalizeMac(macs[0]!, 'query.mac');
    } catch {
      // normalizeMac quotes what it was given; this route never echoes a caller's input.
      throw invalidInput('query.mac', 'is not a MAC address');
    }
    const boot = await startBoot(this.sql, mac);
    let script = NO_ENTRY_SCRIPT;
    if (boot) {
      const base = this.publicUrl ?? localUrl(req);
      const callback = `${base}/boot/v1/entries/${boot.entryId}`;
      const kernel = this.kernelUrl ?? `${base}/boot/ramdisk/vmlinuz`;
      const initrd = this.initrdUrl ?? `${base}/boot/ramdisk/initrd.img`;
      script = [
        '#!ipxe',
        `# boot entry ${boot.entryId}`,
        `kernel ${kernel} initrd=initrd.img metal.callback=${callback} metal.entry=${boot.entryId} metal.token=${boot.token}`,
        `initrd --name initrd.img ${initrd}`,
        'boot',
        '',
      ].join('\n');
      this.log.info({ requestId, entryId: boot.entryId, nodeId: boot.nodeId, runId: boot.runId, tokenId: boot.tokenId, purpose: boot.purpose }, 'boot script served');
    }
    // A script with a token must never sit in a cache; one without must look the same.
    res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store', 'content-length': Buffer.byteLength(script), ...serverTiming(res) });
    res.end(script);
  }
}

/** An unknown query parameter as a field name, only when it is a short clean one (it is the caller's input). */
function queryField(key: string): string {
  return /^[A-Za-z_][A-Za-z0-9_-]{0,63}$/.test(key) ? `query.${key}` : 'query';
}

/** This service as the machine reached it: the address and port its request came in on. */
function localUrl(req: IncomingMessage): string {
  let address = req.socket.localAddress ?? '127.0.0.1';
  if (address.startsWith('::ffff:')) address = address.slice(7);
  const host = address.includes(':') ? `[${address}]` : address;
  const scheme = 'encrypted' in req.socket && req.socket.encrypted ? 'https' : 'http';
  return `${scheme}://${host}:${req.socket.localPort}`;
}
