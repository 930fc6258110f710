import { isIP } from 'node:net';
import { Agent, request, type Dispatcher } from 'undici';

/**
 * A read-only client of NetBox's REST API (issue 11, "NetBox inventory"): a device found from its
 * BMC address, and its interfaces, inventory items and modules.
 *
 * - Auth: `Authorization: Token <v1 token>`, or for NetBox 4.5+ v2 tokens (`nbt_<key>.<token>`)
 *   `Authorization: Bearer nbt_...`, chosen by the token's form.
 * - The device: `ipam/ip-addresses/?address=<ip>`, then the IP's assigned object (an interface,
 *   whose `device` is the machine). A device search with `q` does not look at `oob_ip`, so it is
 *   not used.
 * - Lists follow `next` until it is null, `count` is never relied on (NetBox 4.6's cursor pages
 *   answer `count: null`). From the first answer's `API-Version` header on, a 4.6+ NetBox is asked
 *   for cursor pages (`start=0`), cheaper than offsets on large tables. A `next` link is followed
 *   only as a path under NETBOX_URL, on NETBOX_URL's origin: a NetBox behind a TLS proxy that
 *   writes `http://` links still works, and a link elsewhere is never fetched (the token would go
 *   with it).
 * - Every request has a timeout (headers and body); one lookup has a deadline for all its pages.
 * - Errors are NetboxError with a kind (unreachable, timeout, unauthorized, bad-answer, status);
 *   no message ever carries the token.
 */

export type NetboxErrorKind = 'unreachable' | 'timeout' | 'unauthorized' | 'bad-answer' | 'status' | 'exhausted';

export class NetboxError extends Error {
  constructor(readonly kind: NetboxErrorKind, message: string, readonly status?: number) {
    super(message);
    this.name = 'NetboxError';
  }
}

export interface NetboxClientOptions {
  /** NetBox's base URL (https://netbox.example.com, or with a path prefix); the API is under /api/. */
  url: string;
  token: string;
  /** Per request: the headers and each gap in the body (default 10 s). */
  timeoutMs?: number;
  /** One lookup, all of its pages (default 30 s). */
  deadlineMs?: number;
  /** Objects per page asked for (NetBox caps it at its MAX_PAGE_SIZE, 1000 by default). */
  pageSize?: number;
  /** Pages one list may take before the lookup is refused (a runaway `next`). */
  maxPages?: number;
  dispatcher?: Dispatcher;
}

/** A NetBox object as the API answers it: only what this client reads is typed. */
type Obj = Record<string, unknown>;

export interface NetboxDevice {
  id: number;
  name: string | null;
  serial: string;
  /** The BMC address as NetBox stores it (with its prefix length). */
  bmcAddress: string;
  /** The interface the BMC address is assigned to. */
  bmcInterface: string | null;
}

export interface NetboxPrefix { id: number; prefix: string; isPool: boolean; customFields: Record<string, unknown> }
export interface NetboxAddress { id: number; address: string; dnsName: string }
const addressOf = (r: Record<string, unknown>): NetboxAddress => ({ id: r.id as number, address: r.address as string, dnsName: typeof r.dns_name === 'string' ? r.dns_name : '' });

export interface NetboxInventory {
  device: NetboxDevice;
  interfaces: Obj[];
  inventoryItems: Obj[];
  modules: Obj[];
  /** Module types by id, for the 4.3+ profile attributes a Module's nested type does not carry. */
  moduleTypes: Map<number, Obj>;
  /** The API-Version NetBox answered with (e.g. "4.6"), or null. */
  apiVersion: string | null;
}

const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_DEADLINE_MS = 30_000;
const DEFAULT_PAGE_SIZE = 250;
const DEFAULT_MAX_PAGES = 200;

export class NetboxClient {
  private readonly base: URL;
  private readonly apiPrefix: string;
  private readonly authorization: string;
  private readonly timeoutMs: number;
  private readonly deadlineMs: number;
  private readonly pageSize: number;
  private readonly maxPages: number;
  private readonly dispatcher: Dispatcher;
  private readonly ownDispatcher: boolean;
  private apiVersion: string | null = null;

  constructor(opts: NetboxClientOptions) {
    const base = new URL(opts.url);
    if (base.protocol !== 'http:' && base.protocol !== 'https:') throw new Error('NETBOX_URL must be an http or https URL');
    base.search = '';
    base.hash = '';
    this.base = base;
    this.apiPrefix = `${base.pathname.replace(/\/+$/, '')}/api/`;
    const token = opts.token.trim();
    this.authorization = token.startsWith('nbt_') ? `Bearer ${token}` : `Token ${token}`;
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.deadlineMs = opts.deadlineMs ?? DEFAULT_DEADLINE_MS;
    this.pageSize = opts.pageSize ?? DEFAULT_PAGE_SIZE;
    this.maxPages = opts.maxPages ?? DEFAULT_MAX_PAGES;
    this.ownDispatcher = !opts.dispatcher;
    this.dispatcher = opts.dispatcher ?? new Agent({ connect: { timeout: this.timeoutMs }, keepAliveTimeout: 10_000 });
  }

  /** Where NetBox is, for messages (never with credentials). */
  get where(): string {
    return `${this.base.origin}${this.base.pathname.replace(/\/+$/, '')}`;
  }

  async close(): Promise<void> {
    if (this.ownDispatcher) await this.dispatcher.close();
  }

  /**
   * The device whose BMC has this address, with its interfaces, inventory items and modules; null
   * when NetBox has no such address, or the address is not assigned to a device's interface.
   */
  async inventoryByBmcIp(bmcIp: string): Promise<NetboxInventory | null> {
    if (!isIP(bmcIp)) throw new Error('bmcIp must be an IP address');
    const deadline = Date.now() + this.deadlineMs;
    const addresses = await this.list('ipam/ip-addresses/', { address: bmcIp }, deadline);
    const host = (a: Obj) => String(a.address ?? '').split('/')[0];
    const assigned = addresses.filter((a) => host(a) === bmcIp && a.assigned_object_type === 'dcim.interface' && a.assigned_object);
    const withDevice = assigned.map((a) => ({ a, iface: a.assigned_object as Obj })).filter(({ iface }) => iface.device && typeof (iface.device as Obj).id === 'number');
    if (withDevice.length === 0) return null;
    const deviceIds = [...new Set(withDevice.map(({ iface }) => (iface.device as Obj).id as number))];
    if (deviceIds.length > 1) {
      throw new NetboxError('bad-answer', `NetBox assigns ${bmcIp} to interfaces of ${deviceIds.length} devices (${deviceIds.join(', ')}): the BMC address must name one device`);
    }
    const { a, iface } = withDevice[0]!;
    const deviceId = deviceIds[0]!;
    const device = await this.get(`dcim/devices/${deviceId}/`, deadline);
    const [interfaces, inventoryItems, modules] = await Promise.all([
      this.list('dcim/interfaces/', { device_id: String(deviceId) }, deadline),
      this.list('dcim/inventory-items/', { device_id: String(deviceId) }, deadline),
      this.list('dcim/modules/', { device_id: String(deviceId) }, deadline),
    ]);
    // NetBox 4.3+: a module's type may have a profile (Hard disk, GPU, ...) whose attributes
    // (size, ...) only the module type itself carries.
    const typeIds = [...new Set(modules.map((m) => (m.module_type as Obj | null)?.id).filter((id): id is number => typeof id === 'number'))];
    const moduleTypes = new Map<number, Obj>();
    if (typeIds.length) {
      for (const t of await this.list('dcim/module-types/', { id: typeIds.map(String) }, deadline)) {
        if (typeof t.id === 'number') moduleTypes.set(t.id, t);
      }
    }
    return {
      device: {
        id: deviceId,
        name: typeof device.name === 'string' ? device.name : null,
        serial: typeof device.serial === 'string' ? device.serial : '',
        bmcAddress: String(a.address),
        bmcInterface: typeof iface.name === 'string' ? iface.name : null,
      },
      interfaces, inventoryItems, modules, moduleTypes, apiVersion: this.apiVersion,
    };
  }

  /** A prefix by its id (its CIDR, whether it is a pool, its custom fields), or null when NetBox has none. */
  async prefix(id: number): Promise<NetboxPrefix | null> {
    const deadline = Date.now() + this.deadlineMs;
    let body: Obj;
    try {
      body = await this.get(`ipam/prefixes/${id}/`, deadline);
    } catch (error) {
      if (error instanceof NetboxError && error.status === 404) return null;
      throw error;
    }
    if (typeof body.prefix !== 'string') throw new NetboxError('bad-answer', `NetBox's prefix ${id} has no prefix`);
    const custom = body.custom_fields && typeof body.custom_fields === 'object' ? (body.custom_fields as Obj) : {};
    return { id, prefix: body.prefix, isPool: body.is_pool === true, customFields: custom };
  }

  /** The IP addresses within `prefix` (NetBox's parent filter) whose DNS name is `dnsName`, assigned to no interface. */
  async addressesNamed(prefix: string, dnsName: string): Promise<NetboxAddress[]> {
    const rows = await this.list('ipam/ip-addresses/', { parent: prefix, dns_name: dnsName }, Date.now() + this.deadlineMs);
    // Only addresses assigned to nothing: one on another device's interface is that device's.
    return rows.filter((r) => typeof r.id === 'number' && typeof r.address === 'string' && r.dns_name === dnsName && (r.assigned_object_id ?? null) === null).map(addressOf);
  }

  /**
   * Allocates the next available address of prefix `prefixId` (POST ipam/prefixes/{id}/available-ips/,
   * NetBox's own allocation under its advisory lock), with `fields` (status, dns_name, description).
   * A prefix with no address left is a NetboxError of kind 'exhausted'.
   */
  async allocateIp(prefixId: number, fields: Obj): Promise<NetboxAddress> {
    const path = `ipam/prefixes/${prefixId}/available-ips/`;
    const { status, body } = await this.send('POST', new URL(this.apiPrefix + path, this.base), Date.now() + this.deadlineMs, fields, [201, 204, 400, 409]);
    // NetBox has answered "too few free" with 400, then 204 (with a detail body a 204 cannot carry), then 409.
    const detail = body && typeof body === 'object' && typeof (body as Obj).detail === 'string' ? String((body as Obj).detail) : '';
    // The detail decides, but is never repeated: only a fixed phrase for it (see detailOf).
    if (status === 204 || status === 409 || (status === 400 && /insufficient/i.test(detail))) {
      throw new NetboxError('exhausted', `NetBox's prefix ${prefixId} has no address left`, status);
    }
    if (status !== 201) throw new NetboxError('status', `NetBox at ${this.where} answered ${status} to POST ${path}${detailOf(JSON.stringify({ detail }))}`, status);
    const created = Array.isArray(body) ? body[0] : body;
    if (!created || typeof created !== 'object' || typeof (created as Obj).id !== 'number' || typeof (created as Obj).address !== 'string') {
      throw new NetboxError('bad-answer', `NetBox's answer to POST ${path} is not an IP address`);
    }
    return addressOf(created as Obj);
  }

  /** Deletes an IP address (an allocation that was not used); one NetBox no longer has is fine. */
  async deleteIp(id: number): Promise<void> {
    await this.send('DELETE', new URL(`${this.apiPrefix}ipam/ip-addresses/${id}/`, this.base), Date.now() + this.deadlineMs, undefined, [204, 404]);
  }

  /** Every object of a list endpoint matching `query`, following `next` to the end. */
  async list(path: string, query: Record<string, string | string[]>, deadline: number): Promise<Obj[]> {
    const first = new URL(this.apiPrefix + path, this.base);
    for (const [k, v] of Object.entries(query)) for (const one of Array.isArray(v) ? v : [v]) first.searchParams.append(k, one);
    first.searchParams.set('limit', String(this.pageSize));
    // NetBox 4.6+: cursor pages (by primary key) instead of offsets.
    if (this.cursorPages()) first.searchParams.set('start', '0');
    const out: Obj[] = [];
    let next: URL | null = first;
    for (let page = 0; next; page += 1) {
      if (page >= this.maxPages) throw new NetboxError('bad-answer', `NetBox's ${path} list did not end within ${this.maxPages} pages`);
      const body = await this.fetchJson(next, deadline);
      if (!body || typeof body !== 'object' || !Array.isArray((body as Obj).results)) {
        throw new NetboxError('bad-answer', `NetBox's ${path} answer is not a list page (no results array)`);
      }
      for (const r of (body as { results: unknown[] }).results) if (r && typeof r === 'object') out.push(r as Obj);
      next = this.nextOf((body as Obj).next, path);
    }
    return out;
  }

  private async get(path: string, deadline: number): Promise<Obj> {
    const body = await this.fetchJson(new URL(this.apiPrefix + path, this.base), deadline);
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw new NetboxError('bad-answer', `NetBox's ${path} answer is not an object`);
    return body as Obj;
  }

  private cursorPages(): boolean {
    const m = /^(\d+)\.(\d+)/.exec(this.apiVersion ?? '');
    return m ? Number(m[1]) > 4 || (Number(m[1]) === 4 && Number(m[2]) >= 6) : false;
  }

  /** A `next` link as a URL on NETBOX_URL, or null at the end. */
  private nextOf(raw: unknown, path: string): URL | null {
    if (raw === null || raw === undefined || raw === '') return null;
    if (typeof raw !== 'string') throw new NetboxError('bad-answer', `NetBox's ${path} page has a next that is not a URL`);
    let link: URL;
    try {
      link = new URL(raw, this.base);
    } catch {
      throw new NetboxError('bad-answer', `NetBox's ${path} page has a next that is not a URL`);
    }
    if (!link.pathname.startsWith(this.apiPrefix + path)) {
      throw new NetboxError('bad-answer', `NetBox's ${path} page links its next page outside ${this.apiPrefix}${path}: not followed`);
    }
    const url = new URL(link.pathname + link.search, this.base);
    return url;
  }

  private async fetchJson(url: URL, deadline: number): Promise<unknown> {
    return (await this.send('GET', url, deadline, undefined, [200])).body;
  }

  /** One request; a status outside `ok` is a NetboxError (401/403: unauthorized). The body is JSON, or null when empty. */
  private async send(method: 'GET' | 'POST' | 'DELETE', url: URL, deadline: number, json: unknown, ok: number[]): Promise<{ status: number; body: unknown }> {
    const left = deadline - Date.now();
    const what = `${method} ${url.pathname}`;
    if (left <= 0) throw new NetboxError('timeout', `NetBox at ${this.where} did not answer within ${this.deadlineMs} ms (${what})`);
    const timeout = Math.min(this.timeoutMs, left);
    let res: Dispatcher.ResponseData;
    try {
      res = await request(url, {
        method,
        dispatcher: this.dispatcher,
        headers: { authorization: this.authorization, accept: 'application/json', ...(json !== undefined ? { 'content-type': 'application/json' } : {}) },
        ...(json !== undefined ? { body: JSON.stringify(json) } : {}),
        headersTimeout: timeout,
        bodyTimeout: timeout,
        signal: AbortSignal.timeout(left),
      });
    } catch (error) {
      throw this.transportError(error, what);
    }
    const version = res.headers['api-version'];
    if (typeof version === 'string' && version) this.apiVersion = version;
    let text: string;
    try {
      text = await res.body.text();
    } catch (error) {
      throw this.transportError(error, what);
    }
    if (res.statusCode === 401 || res.statusCode === 403) {
      throw new NetboxError('unauthorized', `NetBox at ${this.where} refused the configured token (${res.statusCode}${detailOf(text)})`, res.statusCode);
    }
    if (!ok.includes(res.statusCode)) {
      throw new NetboxError('status', `NetBox at ${this.where} answered ${res.statusCode} to ${what}${detailOf(text)}`, res.statusCode);
    }
    if (text.trim() === '') return { status: res.statusCode, body: null };
    try {
      return { status: res.statusCode, body: JSON.parse(text) };
    } catch {
      throw new NetboxError('bad-answer', `NetBox at ${this.where} answered ${what} with something other than JSON`);
    }
  }

  private transportError(error: unknown, what: string): NetboxError {
    const e = error as { code?: string; name?: string; message?: string; cause?: { code?: string } };
    const code = e.code ?? e.cause?.code ?? e.name ?? 'error';
    if (/Timeout|ABORT/i.test(code) || e.name === 'TimeoutError' || e.name === 'AbortError') {
      return new NetboxError('timeout', `NetBox at ${this.where} did not answer in time (${what})`);
    }
    return new NetboxError('unreachable', `NetBox at ${this.where} is unreachable (${code}, ${what})`);
  }
}

/**
 * What NetBox's error body says, as one of a few fixed phrases: never its text (issue 21 item 11).
 * A body is NetBox's or a proxy's, and either may echo the request, the Authorization header (the
 * token) included; a message reaches API callers and logs. Only DRF's well-known `detail`s are
 * recognised; anything else is said as nothing.
 */
const KNOWN_DETAILS: [RegExp, string][] = [
  [/^invalid token/i, 'invalid token'],
  [/token.*expired|expired.*token/i, 'the token has expired'],
  [/authentication credentials were not provided/i, 'no credentials reached it'],
  [/do not have permission/i, 'the token lacks the permission'],
  [/^not found\.?$/i, 'not found'],
  [/insufficient|not enough|no .*available/i, 'not enough free addresses'],
];
export function detailOf(text: string): string {
  let detail: unknown;
  try {
    detail = (JSON.parse(text) as { detail?: unknown } | null)?.detail;
  } catch {
    return ''; // not JSON: an HTML error page, say nothing of it
  }
  if (typeof detail !== 'string') return '';
  const known = KNOWN_DETAILS.find(([pattern]) => pattern.test(detail.trim()));
  return known ? `: ${known[1]}` : '';
}
