/**
 * The HTTP and session layer under every Redfish driver flavour: one undici Pool per BMC origin
 * (reused across calls), timeouts on every request, TLS verified by default, session auth with a
 * basic-auth fallback, and the retry policy that keeps destructive actions from being sent twice.
 *
 * How a node's BMC address becomes a URL (bmcOrigin):
 *   - `https://host[:port]` or `http://host[:port]`: used as written. Plain http is allowed only
 *     when the address spells the `http://` scheme itself (the simulator, a lab BMC); nothing
 *     downgrades an address to http.
 *   - `host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 address: `https://` (port 443 unless
 *     given).
 *   - A path, query, or user:password in the address is refused: the service root is always
 *     `<origin>/redfish/v1` (the one URL the Redfish spec fixes) and every other URL comes from links.
 *
 * TLS (driverOptions): `caCert` (PEM) trusts that CA (or self-signed certificate) for this node
 * only, instead of the system's CAs; `insecure: true` skips verification, and must be exactly the
 * boolean true. Both at once is refused, as is any other type: verification is never silently off.
 */
import { createHash, randomBytes, X509Certificate } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Pool, type Dispatcher } from 'undici';
import { BmcError, type BmcEndpoint, type BmcErrorCode } from '../driver';

export type Doc = Record<string, unknown>;

export interface TransportOptions {
  /** TCP + TLS handshake. */
  connectTimeoutMs?: number;
  /** From the request sent to the response headers. */
  headersTimeoutMs?: number;
  /** Between body chunks. */
  bodyTimeoutMs?: number;
  /** The longest Retry-After (503) waited for; a longer one is BMC_BUSY for the caller to retry later. */
  maxRetryAfterMs?: number;
  /** Wait after a 503 that names no Retry-After. */
  defaultRetryAfterMs?: number;
  /** 503 answers in a row to one request before BMC_BUSY. */
  max503?: number;
  /** Extra tries of a repeatable request (reads, and actions safe to repeat) after a 5xx. */
  retries5xx?: number;
  /** First backoff after a 5xx (doubled each time). */
  retryBaseMs?: number;
  connectionsPerBmc?: number;
}

const DEFAULTS: Required<TransportOptions> = {
  connectTimeoutMs: 10_000,
  headersTimeoutMs: 30_000,
  bodyTimeoutMs: 30_000,
  maxRetryAfterMs: 30_000,
  defaultRetryAfterMs: 2_000,
  max503: 3,
  retries5xx: 2,
  retryBaseMs: 500,
  // BMCs have small web servers; two connections let a read overlap a slow action.
  connectionsPerBmc: 2,
};

const MAX_REDIRECTS = 5;

export interface Response {
  status: number;
  headers: Record<string, string>;
  body: Doc | null;
  /** The path that answered (after redirects). */
  path: string;
}

export interface RequestOptions {
  body?: unknown;
  headers?: Record<string, string>;
  /**
   * Safe to send again after a 5xx or when re-sent by nobody but us: reads, a boot override PATCH,
   * virtual media (each verified by reading back). A Reset is not: it is never re-sent after it may
   * have reached the BMC.
   */
  repeatable: boolean;
  /** For messages: "Reset (ForceOff)", "the system". */
  what: string;
  signal?: AbortSignal;
}

/**
 * A node's Redfish configuration that no request could fix: the driver reports it as its BmcError
 * code, and enroll refuses it up front (check.ts) as INVALID_INPUT naming `bmc.<field>`, so both
 * follow these rules.
 */
export class RedfishConfigError extends BmcError {
  constructor(code: BmcErrorCode, readonly field: 'address' | `driverOptions.${string}`, message: string) {
    super(code, message);
  }
}

/** The address as a message may show it: no user:password@, nothing after the authority (a path or query may carry a token). */
function shown(address: string): string {
  const match = /^(?:([a-z][a-z0-9+.-]*:)\/\/)?([^/?#]*)/i.exec(address.trim())!;
  const authority = match[2]!.includes('@') ? `***@${match[2]!.slice(match[2]!.lastIndexOf('@') + 1)}` : match[2]!;
  return `${match[1] ? `${match[1]}//` : ''}${authority}`.slice(0, 300);
}

function badAddress(address: string, why: string): BmcError {
  return new RedfishConfigError('BMC_UNREACHABLE', 'address', `bmcAddress "${shown(address)}" ${why}: give host, host:port, or http(s)://host[:port]`);
}

/** The origin (scheme://host[:port]) a node's BMC address means; see the file comment. */
export function bmcOrigin(address: string): string {
  const trimmed = address.trim();
  if (!trimmed) throw badAddress(address, 'is empty');
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(trimmed);
  let url: URL;
  try {
    if (withScheme) url = new URL(trimmed);
    else {
      // A bare IPv6 address has more than one colon and no brackets.
      const colons = trimmed.split(':').length - 1;
      url = new URL(`https://${colons > 1 && !trimmed.startsWith('[') ? `[${trimmed}]` : trimmed}`);
    }
  } catch {
    throw badAddress(address, 'is not a valid address');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw badAddress(address, `has scheme ${url.protocol} (only https:// and http://)`);
  if (url.username || url.password) throw badAddress(address, 'carries credentials (they come from the secret broker)');
  if (url.pathname !== '/' && url.pathname !== '') throw badAddress(address, 'has a path (the service root is always /redfish/v1)');
  if (url.search || url.hash) throw badAddress(address, 'has a query or fragment (the service root is always /redfish/v1)');
  return url.origin;
}

export interface TlsChoice {
  /** Part of the pool key: a node with another CA gets another pool. */
  id: string;
  connect: { ca?: string; rejectUnauthorized: boolean };
}

export function tlsOf(options: Readonly<Record<string, unknown>>): TlsChoice {
  const { caCert, insecure } = options;
  if (insecure !== undefined && typeof insecure !== 'boolean') {
    throw new RedfishConfigError('BMC_TLS', 'driverOptions.insecure', `driverOptions.insecure must be true or false (got a ${typeof insecure}); TLS verification stays on`);
  }
  if (caCert !== undefined && caCert !== null && typeof caCert !== 'string') {
    throw new RedfishConfigError('BMC_TLS', 'driverOptions.caCert', 'driverOptions.caCert must be a PEM certificate string');
  }
  // An empty caCert is refused as not a PEM below, not read as unset: verification is never silently other than asked.
  if (insecure === true && caCert !== undefined && caCert !== null) throw new RedfishConfigError('BMC_TLS', 'driverOptions.insecure', 'driverOptions.caCert and driverOptions.insecure: true are both set; set one');
  if (insecure === true) return { id: 'insecure', connect: { rejectUnauthorized: false } };
  if (typeof caCert === 'string') {
    let fingerprint: string;
    try {
      fingerprint = new X509Certificate(caCert).fingerprint256;
    } catch {
      throw new RedfishConfigError('BMC_TLS', 'driverOptions.caCert', 'driverOptions.caCert is not a PEM certificate (-----BEGIN CERTIFICATE-----)');
    }
    return { id: `ca:${fingerprint}`, connect: { ca: caCert, rejectUnauthorized: true } };
  }
  return { id: 'system', connect: { rejectUnauthorized: true } };
}

interface Session {
  token: string;
  /** Where to DELETE it (the Location of the POST, else the session's @odata.id). */
  location: string | null;
  poolKey: string;
  origin: string;
}

/** What the service root says, cached per BMC: it only changes with a firmware update. */
export interface RootInfo {
  root: Doc;
  sessionsPath: string | null;
  /** The system path per driverOptions.systemId ('' when unset), once found (a 404 on it forgets it). */
  systems: Map<string, string>;
}

const TLS_CODES = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT', 'SELF_SIGNED_CERT_IN_CHAIN', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY', 'CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID', 'CERT_UNTRUSTED', 'CERT_REJECTED',
  'CERT_SIGNATURE_FAILURE', 'ERR_TLS_CERT_ALTNAME_INVALID', 'HOSTNAME_MISMATCH', 'EPROTO',
]);
const UNREACHABLE_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'EADDRNOTAVAIL', 'UND_ERR_CONNECT_TIMEOUT']);

function errCode(e: unknown): string {
  const error = e as { code?: unknown; cause?: { code?: unknown } };
  return String(error?.code ?? error?.cause?.code ?? '');
}

/** Waits `ms`; rejects with the BMC_ERROR of an aborted call when `signal` aborts (or already has). */
export async function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  try {
    await delay(ms, undefined, { signal });
  } catch (error) {
    if (signal?.aborted) throw aborted();
    throw error;
  }
}

function aborted(): BmcError {
  return new BmcError('BMC_ERROR', 'the BMC call was aborted (the run was aborted or the agent is stopping)');
}

/** Seconds or an HTTP date, in ms; null when absent or unreadable. */
export function retryAfterMs(value: string | undefined): number | null {
  if (!value) return null;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - Date.now());
}

/**
 * A short, sanitised summary of a Redfish error body: each registry message id with its
 * MessageArgs ("Base.1.8.ActionParameterNotSupported [UserName, InsertMedia]"), else the error's
 * code. Never the BMC's free text: a body can quote what it was sent, or be anything at all when
 * the address is not a BMC (issue 21 item 6), so only registry-shaped ids and short arguments pass.
 */
export function redfishMessage(body: Doc | null): string {
  const err = (body?.error ?? null) as Doc | null;
  const infos = [err?.['@Message.ExtendedInfo'], body?.['@Message.ExtendedInfo']].flatMap((x) => (Array.isArray(x) ? x : [])) as Doc[];
  const parts: string[] = [];
  for (const info of infos.slice(0, 3)) {
    const id = registryId(info?.MessageId);
    if (!id) continue;
    const args = (Array.isArray(info.MessageArgs) ? info.MessageArgs : []).slice(0, 6).map(shortArg);
    parts.push(args.length ? `${id} [${args.join(', ')}]` : id);
  }
  if (!parts.length) {
    const code = registryId(err?.code);
    if (code) parts.push(code);
  }
  return [...new Set(parts)].join('; ');
}

/** A registry message id (Base.1.8.PropertyValueNotInList, IDRAC.2.8.SYS403), else null. */
function registryId(v: unknown): string | null {
  return typeof v === 'string' && /^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+){1,5}$/.test(v) && v.length <= 100 ? v : null;
}

/** One MessageArg as the error may carry it: printable, at most 64 characters. */
function shortArg(v: unknown): string {
  const text = (typeof v === 'string' ? v : typeof v === 'number' || typeof v === 'boolean' ? String(v) : '?')
    .replace(/[^\x20-\x7e]/g, '?');
  return JSON.stringify(text.length > 64 ? `${text.slice(0, 61)}...` : text);
}

/**
 * The pools, the sessions and the service roots of every BMC this process talks to. One per site
 * agent (redfishDrivers() shares one among its flavours); close() logs out of every cached session
 * and closes the pools.
 */
export class RedfishTransport {
  readonly options: Required<TransportOptions>;
  private readonly pools = new Map<string, Pool>();
  private readonly sessions = new Map<string, Session>();
  private readonly logins = new Map<string, Promise<Session | null>>();
  private readonly roots = new Map<string, RootInfo>();
  /** BMCs that answered 428 once: their PATCHes carry If-Match from the start. */
  readonly etagRequired = new Set<string>();
  /** BMCs without sessions: basic auth from the start. */
  private readonly basicOnly = new Set<string>();
  // Session cache keys hash the password with a per-process salt: a rotated password logs in anew,
  // and no map key holds the password itself.
  private readonly salt = randomBytes(16);
  private closed = false;

  constructor(options: TransportOptions = {}) {
    this.options = { ...DEFAULTS, ...options };
  }

  /** A client for one call against one BMC: the address, TLS and credentials checked before anything is sent. */
  client(bmc: BmcEndpoint, signal?: AbortSignal): RedfishClient {
    if (this.closed) throw new BmcError('BMC_ERROR', 'the Redfish transport is closed (the agent is stopping)');
    const options = bmc.options ?? {};
    const origin = bmcOrigin(bmc.address);
    // Checked for an http:// address too: a malformed TLS option is a mistake worth seeing anyway.
    const chosen = tlsOf(options);
    const tls = origin.startsWith('https:') ? chosen : { id: 'plain', connect: { rejectUnauthorized: true } };
    const poolKey = `${origin}|${tls.id}`;
    if (!bmc.username) throw new BmcError('BMC_AUTH_FAILED', `no BMC user name for ${origin}`);
    const credKey = `${poolKey}|${bmc.username}|${createHash('sha256').update(this.salt).update(bmc.password).digest('hex')}`;
    return new RedfishClient(this, { origin, poolKey, credKey, tls, username: bmc.username, password: bmc.password, signal });
  }

  pool(poolKey: string, origin: string, tls: TlsChoice): Pool {
    let pool = this.pools.get(poolKey);
    if (!pool) {
      pool = new Pool(origin, {
        connections: this.options.connectionsPerBmc,
        connect: { ...tls.connect, timeout: this.options.connectTimeoutMs },
        headersTimeout: this.options.headersTimeoutMs,
        bodyTimeout: this.options.bodyTimeoutMs,
        // A BMC that advertises Keep-Alive: timeout=N keeps an idle connection N s: undici's margin
        // of 2 s below that is for slow links; on a BMC network 1 s is plenty, and a connection
        // kept one second longer spares a new TCP (and TLS) handshake for commands 3-4 s apart.
        keepAliveTimeoutThreshold: 1000,
      });
      this.pools.set(poolKey, pool);
    }
    return pool;
  }

  root(poolKey: string): RootInfo | undefined { return this.roots.get(poolKey); }
  setRoot(poolKey: string, info: RootInfo | null): void { if (info) this.roots.set(poolKey, info); else this.roots.delete(poolKey); }
  isBasicOnly(poolKey: string): boolean { return this.basicOnly.has(poolKey); }
  markBasicOnly(poolKey: string): void { this.basicOnly.add(poolKey); }
  session(credKey: string): Session | undefined { return this.sessions.get(credKey); }
  dropSession(credKey: string, token: string): void { if (this.sessions.get(credKey)?.token === token) this.sessions.delete(credKey); }

  /** One login per credentials at a time: concurrent calls to one BMC share the session. */
  async login(credKey: string, make: () => Promise<Session | null>): Promise<Session | null> {
    const pending = this.logins.get(credKey);
    if (pending) return pending;
    const login = make().then((s) => { if (s) this.sessions.set(credKey, s); return s; }).finally(() => this.logins.delete(credKey));
    this.logins.set(credKey, login);
    return login;
  }

  /** Logs out of every cached session (best effort, bounded), then closes the pools. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const sessions = [...this.sessions.values()];
    this.sessions.clear();
    await Promise.all(sessions.map(async (s) => {
      const pool = this.pools.get(s.poolKey);
      if (!pool || !s.location) return;
      try {
        const res = await pool.request({ method: 'DELETE', path: new URL(s.location, s.origin).pathname, headers: { 'X-Auth-Token': s.token }, headersTimeout: 5000, bodyTimeout: 5000 });
        await res.body.dump();
      } catch {
        // The BMC expires the session itself (SessionService.SessionTimeout).
      }
    }));
    await Promise.all([...this.pools.values()].map((p) => p.close()));
    this.pools.clear();
  }
}

interface ClientParams {
  origin: string;
  poolKey: string;
  credKey: string;
  tls: TlsChoice;
  username: string;
  password: string;
  signal?: AbortSignal;
}

/** One driver call's view of one BMC: authenticated requests with the retry policy. */
export class RedfishClient {
  readonly origin: string;
  /** What the timeline should know about how the call went (basic-auth fallback, retries). */
  readonly notes: string[] = [];
  private session: Session | null = null;
  private useBasic = false;
  private authed = false;

  constructor(private readonly transport: RedfishTransport, private readonly params: ClientParams) {
    this.origin = params.origin;
  }

  get signal(): AbortSignal | undefined { return this.params.signal; }
  get poolKey(): string { return this.params.poolKey; }
  get etagRequired(): boolean { return this.transport.etagRequired.has(this.params.poolKey); }
  markEtagRequired(): void { this.transport.etagRequired.add(this.params.poolKey); }

  /** An error whose message never carries the password or a session token. */
  error(code: BmcErrorCode, message: string, retryable = false): BmcError {
    let redacted = message;
    for (const secret of [this.params.password, this.session?.token]) if (secret && secret.length >= 3) redacted = redacted.split(secret).join('***');
    return new BmcError(code, redacted, retryable);
  }

  /** The service root (unauthenticated, as the spec requires), cached per BMC. */
  async root(): Promise<RootInfo> {
    const cached = this.transport.root(this.params.poolKey);
    if (cached) return cached;
    const res = await this.raw('GET', '/redfish/v1', { repeatable: true, what: 'the service root' }, {});
    if (res.status !== 200 || !res.body) throw this.statusError(res, 'GET the service root', true);
    const links = (res.body.Links ?? {}) as Doc;
    const sessions = (links.Sessions as Doc | undefined)?.['@odata.id'];
    const info: RootInfo = { root: res.body, sessionsPath: typeof sessions === 'string' ? sessions : null, systems: new Map() };
    this.transport.setRoot(this.params.poolKey, info);
    return info;
  }

  forgetSystems(): void {
    this.transport.root(this.params.poolKey)?.systems.clear();
  }

  private async authenticate(): Promise<void> {
    if (this.authed) return;
    const { sessionsPath } = await this.root();
    if (!sessionsPath || this.transport.isBasicOnly(this.params.poolKey)) {
      this.useBasic = true;
      if (!sessionsPath) this.note('the BMC offers no SessionService (no Links.Sessions): used basic auth');
      this.authed = true;
      return;
    }
    const cached = this.transport.session(this.params.credKey);
    this.session = cached ?? (await this.transport.login(this.params.credKey, () => this.createSession(sessionsPath)));
    if (!this.session) this.useBasic = true;
    this.authed = true;
  }

  private async createSession(sessionsPath: string): Promise<Session | null> {
    const res = await this.raw('POST', sessionsPath, { repeatable: true, what: 'the session login', body: { UserName: this.params.username, Password: this.params.password } }, {});
    if (res.status === 401 || res.status === 403) throw this.authError(res.status);
    if (res.status === 404 || res.status === 405 || res.status === 501) {
      this.transport.markBasicOnly(this.params.poolKey);
      this.note(`the BMC refused a session (HTTP ${res.status}): used basic auth`);
      return null;
    }
    if (res.status >= 400) throw this.statusError(res, 'log in (POST SessionService Sessions)', false);
    const token = res.headers['x-auth-token'];
    if (!token) {
      this.transport.markBasicOnly(this.params.poolKey);
      this.note('the BMC created a session without an X-Auth-Token: used basic auth');
      return null;
    }
    const location = res.headers.location ?? ((res.body?.['@odata.id'] as string | undefined) ?? null);
    return { token, location, poolKey: this.params.poolKey, origin: this.params.origin };
  }

  private authError(status: number): BmcError {
    return this.error('BMC_AUTH_FAILED', `the BMC at ${this.params.origin} refused user "${this.params.username}" (HTTP ${status}): check the BMC credentials in the secret broker`);
  }

  note(text: string): void {
    if (!this.notes.includes(text)) this.notes.push(text);
  }

  /** GET a resource that must exist; its ETag rides along as body['@odata.etag'] when only the header has it. */
  async get(path: string, what: string): Promise<Doc> {
    const res = await this.request('GET', path, { repeatable: true, what });
    if (res.status !== 200 || !res.body) throw this.statusError(res, `GET ${what}`, true);
    if (res.headers.etag && !res.body['@odata.etag']) res.body['@odata.etag'] = res.headers.etag;
    return res.body;
  }

  /** An authenticated request; 401 with a cached session logs in again once. */
  async request(method: string, path: string, opts: RequestOptions): Promise<Response> {
    await this.authenticate();
    let res = await this.raw(method, path, opts, this.authHeaders());
    if (res.status === 401 && this.session) {
      // The session expired or the BMC restarted: a 401 was not acted on, so sending again is safe.
      this.transport.dropSession(this.params.credKey, this.session.token);
      const { sessionsPath } = await this.root();
      this.session = sessionsPath ? await this.transport.login(this.params.credKey, () => this.createSession(sessionsPath)) : null;
      if (!this.session) this.useBasic = true;
      res = await this.raw(method, path, opts, this.authHeaders());
    }
    if (res.status === 401) throw this.authError(401);
    if (res.status === 403) {
      const said = redfishMessage(res.body);
      throw this.error('BMC_AUTH_FAILED', `the BMC at ${this.params.origin} denied user "${this.params.username}" ${method} of ${opts.what} (HTTP 403${said ? `: ${said}` : ''}): the account lacks the privilege, or the BMC's licence lacks the feature`);
    }
    return res;
  }

  private authHeaders(): Record<string, string> {
    if (this.session) return { 'X-Auth-Token': this.session.token };
    if (this.useBasic) return { Authorization: `Basic ${Buffer.from(`${this.params.username}:${this.params.password}`).toString('base64')}` };
    return {};
  }

  /**
   * One request with redirects (same origin only), 503 Retry-After and, for repeatable requests,
   * bounded 5xx retries. Timeouts are never retried here: after a send they are ambiguous.
   */
  private async raw(method: string, path: string, opts: RequestOptions, auth: Record<string, string>): Promise<Response> {
    const options = this.transport.options;
    const pool = this.transport.pool(this.params.poolKey, this.params.origin, this.params.tls);
    let url = this.resolve(path, this.params.origin, opts.what);
    let sendMethod = method as Dispatcher.HttpMethod;
    let body = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    let n503 = 0;
    let n5xx = 0;
    let hops = 0;
    for (;;) {
      if (url.origin !== this.params.origin) {
        throw this.error('BMC_ERROR', `${opts.what}: the BMC redirected to another origin (${url.origin}); not followed, credentials go only to ${this.params.origin}`);
      }
      const headers: Record<string, string> = { Accept: 'application/json', 'OData-Version': '4.0', ...auth, ...opts.headers };
      if (body !== undefined) headers['Content-Type'] = 'application/json';
      let status: number;
      let resHeaders: Record<string, string>;
      let text: string;
      try {
        const res = await pool.request({ method: sendMethod, path: url.pathname + url.search, headers, body, signal: this.params.signal });
        status = res.statusCode;
        resHeaders = Object.fromEntries(Object.entries(res.headers).map(([k, v]) => [k.toLowerCase(), Array.isArray(v) ? v.join(', ') : String(v ?? '')]));
        text = await res.body.text();
      } catch (e) {
        throw this.transportError(e, sendMethod, opts);
      }
      if ([301, 302, 303, 307, 308].includes(status) && resHeaders.location && hops < MAX_REDIRECTS) {
        hops++;
        url = this.resolve(resHeaders.location, url.href, opts.what);
        if (status === 303) { sendMethod = 'GET'; body = undefined; }
        continue;
      }
      if (status === 503) {
        n503++;
        const wait = retryAfterMs(resHeaders['retry-after']) ?? options.defaultRetryAfterMs;
        if (n503 > options.max503 || wait > options.maxRetryAfterMs) {
          throw this.error('BMC_BUSY', `${opts.what}: the BMC is temporarily unavailable (HTTP 503${resHeaders['retry-after'] ? `, Retry-After ${resHeaders['retry-after']}` : ''}) after ${n503} tries; try again later`, true);
        }
        // 503 means the request was not acted on: waiting and sending again is safe even for a Reset.
        this.note(`the BMC answered 503; waited ${Math.round(wait)} ms as its Retry-After asked`);
        await sleep(wait, this.params.signal);
        continue;
      }
      if (status >= 500 && status !== 501 && opts.repeatable && n5xx < options.retries5xx) {
        n5xx++;
        this.note(`the BMC answered ${status} to ${opts.what}; tried again`);
        await sleep(options.retryBaseMs * 2 ** (n5xx - 1), this.params.signal);
        continue;
      }
      let parsed: Doc | null = null;
      if (text) {
        try { parsed = JSON.parse(text) as Doc; } catch { parsed = null; }
      }
      return { status, headers: resHeaders, body: parsed, path: url.pathname };
    }
  }

  /** A link or Location from the BMC, resolved; one that is no URL is the BMC's error, not a crash. */
  private resolve(ref: string, base: string, what: string): URL {
    try {
      return new URL(ref, base);
    } catch {
      throw this.error('BMC_ERROR', `${what}: the BMC gave a link that is not a URL (${ref.slice(0, 200)})`);
    }
  }

  private transportError(e: unknown, method: string, opts: RequestOptions): BmcError {
    if (e instanceof BmcError) return e;
    if (this.params.signal?.aborted) {
      if (opts.repeatable) return aborted();
      return this.error('BMC_ERROR', `the call was aborted while ${opts.what} was in flight: the BMC may or may not have acted; read the power state before retrying`);
    }
    const code = errCode(e);
    const msg = e instanceof Error ? e.message : String(e);
    const options = this.transport.options;
    if (TLS_CODES.has(code) || code.startsWith('ERR_TLS') || code.startsWith('ERR_SSL')) {
      return this.error('BMC_TLS', `TLS verification of ${this.params.origin} failed (${code}: ${msg}): give the BMC's CA certificate in driverOptions.caCert, or set driverOptions.insecure: true to skip verification`);
    }
    if (UNREACHABLE_CODES.has(code)) {
      const why = code === 'UND_ERR_CONNECT_TIMEOUT' ? `no connection within ${options.connectTimeoutMs} ms` : code;
      // Nothing was sent: any request may be tried again.
      return this.error('BMC_UNREACHABLE', `cannot reach the BMC at ${this.params.origin} (${why}); check its address and the site network`, true);
    }
    const sent = code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_SOCKET' || code === 'ECONNRESET';
    if (sent) {
      const after = code === 'UND_ERR_BODY_TIMEOUT' ? options.bodyTimeoutMs : options.headersTimeoutMs;
      const what = code.startsWith('UND_ERR_') && code.endsWith('TIMEOUT') ? `did not answer within ${after} ms` : `closed the connection (${code})`;
      if (opts.repeatable) return this.error('BMC_TIMEOUT', `the BMC at ${this.params.origin} ${what} to ${method} ${opts.what}`, true);
      return this.error('BMC_TIMEOUT', `the BMC at ${this.params.origin} ${what} after ${opts.what} was sent: it may or may not have acted, so it was not sent again; read the power state before retrying`, false);
    }
    return this.error('BMC_ERROR', `${method} ${opts.what} at ${this.params.origin} failed: ${msg}`, opts.repeatable);
  }

  /** A BmcError for an answer that is not what the caller needed. */
  statusError(res: Response, doing: string, repeatable: boolean): BmcError {
    const said = redfishMessage(res.body);
    const tail = said ? `: ${said}` : '';
    const status = res.status;
    let code: BmcErrorCode = 'BMC_ERROR';
    let retry = false;
    if (status === 405 || status === 501) code = 'BMC_UNSUPPORTED';
    else if (status === 409 || status === 503) { code = 'BMC_BUSY'; retry = true; }
    else if (status >= 500) retry = repeatable;
    return this.error(code, `${doing} at ${this.params.origin} answered HTTP ${status}${tail}`, retry);
  }
}
