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

export type NetboxErrorKind = 'unreachable' | 'timeout' | 'unauthorized' | 'bad-answer' | 'status';

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
    const left = deadline - Date.now();
    const what = `GET ${url.pathname}`;
    if (left <= 0) throw new NetboxError('timeout', `NetBox at ${this.where} did not answer within ${this.deadlineMs} ms (${what})`);
    const timeout = Math.min(this.timeoutMs, left);
    let res: Dispatcher.ResponseData;
    try {
      res = await request(url, {
        method: 'GET',
        dispatcher: this.dispatcher,
        headers: { authorization: this.authorization, accept: 'application/json' },
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
    if (res.statusCode !== 200) {
      throw new NetboxError('status', `NetBox at ${this.where} answered ${res.statusCode} to ${what}${detailOf(text)}`, res.statusCode);
    }
    try {
      return JSON.parse(text);
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

/** NetBox's `detail` (DRF's error body), short and on one line; nothing else of the body. */
function detailOf(text: string): string {
  try {
    const body = JSON.parse(text) as { detail?: unknown };
    if (typeof body.detail === 'string') return `: ${body.detail.replace(/\s+/g, ' ').slice(0, 200)}`;
  } catch {
    // not JSON: an HTML error page, say nothing of it
  }
  return '';
}
