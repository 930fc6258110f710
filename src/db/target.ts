import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';

/*
 * DATABASE_URL in libpq's multi-host form (issue 24): `postgresql://u:p@h1:5432,h2:5432/db?target_session_attrs=read-write`
 * names every member of a replicated PostgreSQL (Patroni's, or a managed one's), and each new
 * connection goes to the one that is the primary now. node-postgres does not parse that form
 * (pg-connection-string throws "Invalid URL"), so it is parsed here, and each connection is made
 * by PrimaryClient: to the member last found writable, checked once connected; when that member
 * refuses, is gone, or is a standby, the members are probed again (in parallel, with a growing
 * pause between rounds) for the one where pg_is_in_recovery() is false and the session is not
 * read-only. A single-host URL is handed to node-postgres as it is, as before.
 *
 * A connection never outlives its member's promotion or demotion: PostgreSQL restarts to demote a
 * primary (every connection ends), and a standby promoted keeps its sessions but was never a
 * connection target before. So the check at connect is enough; a connection lost with its member
 * makes the next one search again (it is discarded by its pool, or reconnected by its owner).
 */

export interface HostPort {
  host: string;
  port: number;
}

/** Why DATABASE_URL was refused: names the variable and the part, never the value (it holds the password). */
export class DatabaseUrlError extends Error {
  constructor(reason: string) {
    super(`DATABASE_URL is not a usable PostgreSQL URL: ${reason}`);
    this.name = 'DatabaseUrlError';
  }
}

/** At most this many members in one URL. */
const MAX_HOSTS = 16;
/** Query parameters a multi-host URL may carry (handed to node-postgres for each member). */
const PARAMETERS = new Set(['target_session_attrs', 'sslmode', 'sslrootcert', 'sslcert', 'sslkey', 'connect_timeout', 'application_name', 'options']);
/** libpq's values that ask for the primary; `any`, `standby`, `read-only`, `prefer-standby` are refused (the service writes). */
const PRIMARY_ATTRS = new Set(['read-write', 'primary']);
const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*\.?$/;
const IPV6 = /^[0-9A-Fa-f:.]{2,45}$/;

export interface MultiHostUrl {
  hosts: HostPort[];
  /** One single-host URL per member, in node-postgres's form (credentials, database, parameters). */
  urls: string[];
  /** For logs: the members, without credentials. */
  describe: string;
}

function decode(part: string, what: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new DatabaseUrlError(`its ${what} is not valid percent-encoding`);
  }
}

function parseHost(entry: string, index: number): HostPort {
  let host: string;
  let portText: string | undefined;
  const v6 = /^\[([^\]]*)\](?::(.*))?$/.exec(entry);
  if (v6) {
    host = v6[1]!;
    portText = v6[2];
    if (!IPV6.test(host) || !host.includes(':')) throw new DatabaseUrlError(`host ${index + 1} is not an IPv6 address`);
  } else {
    const colon = entry.lastIndexOf(':');
    host = colon >= 0 ? entry.slice(0, colon) : entry;
    portText = colon >= 0 ? entry.slice(colon + 1) : undefined;
    if (!HOSTNAME.test(host)) throw new DatabaseUrlError(`host ${index + 1} is not a host name or address`);
  }
  let port = 5432;
  if (portText !== undefined) {
    port = /^[0-9]{1,5}$/.test(portText) ? Number(portText) : NaN;
    if (!(port >= 1 && port <= 65535)) throw new DatabaseUrlError(`the port of host ${index + 1} is not a TCP port (1..65535)`);
  }
  return { host, port };
}

/**
 * A multi-host URL's parts, or null for a URL with one host (node-postgres takes it as it is).
 * Throws {@link DatabaseUrlError} for a multi-host URL that is malformed.
 */
export function parseMultiHostUrl(url: string): MultiHostUrl | null {
  const m = /^(postgres(?:ql)?):\/\/(?:(.*)@)?([^@/?#]*)(?:\/([^?#]*))?(?:\?([^#]*))?$/s.exec(url);
  // Not of this form, or one host: node-postgres's parser decides, as before.
  if (!m || !m[3]!.includes(',')) return null;
  const [, , userinfo, hostPart, dbPart, query] = m;
  const entries = hostPart!.split(',');
  if (entries.length > MAX_HOSTS) throw new DatabaseUrlError(`it names more than ${MAX_HOSTS} hosts`);
  if (entries.some((e) => e === '')) throw new DatabaseUrlError('its host list has an empty entry');
  const hosts = entries.map(parseHost);
  let user = '';
  let password = '';
  if (userinfo !== undefined) {
    const colon = userinfo.indexOf(':');
    user = decode(colon >= 0 ? userinfo.slice(0, colon) : userinfo, 'user name');
    password = colon >= 0 ? decode(userinfo.slice(colon + 1), 'password') : '';
  }
  if (!user) throw new DatabaseUrlError('it names no user (postgresql://USER:PASSWORD@host1:port1,host2:port2/DATABASE)');
  if (/[\0\r\n]/.test(user) || /[\0\r\n]/.test(password)) throw new DatabaseUrlError('its user name or password holds a control character');
  const database = decode(dbPart ?? '', 'database name');
  if (!database) throw new DatabaseUrlError('it names no database (…/DATABASE after the hosts)');
  if (Buffer.byteLength(database) > 63 || /[\0/\r\n]/.test(database)) throw new DatabaseUrlError('its database name is not a PostgreSQL database name');
  const params = new URLSearchParams();
  let attrs: string | null = null;
  for (const [key, value] of new URLSearchParams(query ?? '')) {
    if (!PARAMETERS.has(key)) {
      throw new DatabaseUrlError(/^[a-z_]{1,40}$/.test(key)
        ? `its parameter ${key} is not supported with several hosts (supported: ${[...PARAMETERS].join(', ')})`
        : 'it has a query parameter that is not supported with several hosts');
    }
    if (key === 'target_session_attrs') attrs = value;
    else params.append(key, value);
  }
  if (attrs !== null && !PRIMARY_ATTRS.has(attrs)) {
    throw new DatabaseUrlError('target_session_attrs must be read-write or primary (the service writes; it always connects to the primary)');
  }
  const auth = `${encodeURIComponent(user)}${password ? `:${encodeURIComponent(password)}` : ''}@`;
  const tail = `/${encodeURIComponent(database)}${params.size ? `?${params.toString()}` : ''}`;
  const hostText = (h: HostPort) => (h.host.includes(':') ? `[${h.host}]` : h.host);
  return {
    hosts,
    urls: hosts.map((h) => `postgresql://${auth}${hostText(h)}:${h.port}${tail}`),
    describe: hosts.map((h) => `${hostText(h)}:${h.port}`).join(','),
  };
}

/** Throws {@link DatabaseUrlError} for a multi-host DATABASE_URL that cannot be used (config's check at start). */
export function checkDatabaseUrl(url: string): void {
  parseMultiHostUrl(url);
}

/** The error a connection gets when no member is a writable primary: SQLSTATE 08001, so it counts as the database being unavailable (src/db/failure.ts). */
export class NoPrimaryError extends Error {
  readonly code = '08001';
  constructor(message: string) {
    super(message);
    this.name = 'NoPrimaryError';
  }
}

const CHECK = "SELECT pg_is_in_recovery() AS recovery, current_setting('transaction_read_only') AS ro";
const isPrimary = (row: { recovery?: unknown; ro?: unknown } | undefined) => row?.recovery === false && row.ro === 'off';

/** How long one connection's search for a primary goes on before it fails (its caller retries, as for any lost database). */
export const FIND_PRIMARY_MS = 10_000;
const PROBE_TIMEOUT_MS = 3000;
const CONNECT_TIMEOUT_MS = 5000;

/** The members of one multi-host URL, and which of them is the primary as far as this process knows. */
export class PrimaryFinder {
  private preferred: number | null = null;
  private finding: Promise<number> | null = null;
  /** Searches made (probe rounds): for tests and logs. */
  rounds = 0;

  constructor(readonly target: MultiHostUrl, private readonly budgetMs = FIND_PRIMARY_MS) {}

  /** The member to connect to: the one last found writable, or the result of a new search. */
  find(): Promise<number> {
    if (this.preferred !== null) return Promise.resolve(this.preferred);
    this.finding ??= this.search().finally(() => { this.finding = null; });
    return this.finding;
  }

  /** That member failed or is no longer the primary: the next connection searches again. */
  forget(index: number): void {
    if (this.preferred === index) this.preferred = null;
  }

  private async probe(index: number): Promise<boolean> {
    const c = new pg.Client({ connectionString: this.target.urls[index], connectionTimeoutMillis: PROBE_TIMEOUT_MS, application_name: 'metal-find-primary' });
    c.on('error', () => undefined);
    try {
      await c.connect();
      const { rows } = await c.query<{ recovery: boolean; ro: string }>(CHECK);
      return isPrimary(rows[0]);
    } catch {
      return false;
    } finally {
      await c.end().catch(() => undefined);
    }
  }

  private async search(): Promise<number> {
    const deadline = Date.now() + this.budgetMs;
    for (let pause = 100; ; pause = Math.min(pause * 2, 2000)) {
      this.rounds += 1;
      const results = await Promise.all(this.target.hosts.map((_, i) => this.probe(i)));
      const found = results.indexOf(true);
      if (found >= 0) {
        this.preferred = found;
        return found;
      }
      if (Date.now() + pause > deadline) break;
      // A timer that holds the process: at start (the migrations) nothing else may be keeping it alive yet.
      await sleep(pause);
    }
    throw new NoPrimaryError(`none of the ${this.target.hosts.length} hosts of DATABASE_URL (${this.target.describe}) is a writable primary now`);
  }
}

type ConnectCallback = ((err: Error) => void) | ((err: null, c: pg.Client) => void);

/** A node-postgres Client class whose connections go to the finder's primary (a pool takes it as its `Client`). */
function primaryClientClass(finder: PrimaryFinder): typeof pg.Client {
  class PrimaryClient extends pg.Client {
    constructor(config: pg.ClientConfig = {}) {
      // The first member's URL sets everything but where to connect (user, password, TLS...): connect() picks the member.
      // Unless told otherwise, a member that does not answer (a host down, a partition) is given up
      // after CONNECT_TIMEOUT_MS rather than the kernel's TCP timeout, which is minutes.
      const { connectionString: _ignored, ...rest } = config;
      super({ ...rest, connectionTimeoutMillis: rest.connectionTimeoutMillis ?? CONNECT_TIMEOUT_MS, connectionString: finder.target.urls[0] });
    }

    /** node-postgres's two forms in one: a promise, or the callback pg-pool passes (the promise is then handled by it). */
    override connect(callback?: ConnectCallback): Promise<pg.Client> {
      const done = this.connectToPrimary();
      if (callback) {
        const cb = callback as (err: Error | null, c?: pg.Client) => void;
        done.then((c) => cb(null, c), (error: Error) => cb(error));
      }
      return done;
    }

    private async connectToPrimary(): Promise<pg.Client> {
      const index = await finder.find();
      const { host, port } = finder.target.hosts[index]!;
      const self = this as unknown as { host: string; port: number; connectionParameters: { host: string; port: number } };
      self.host = host;
      self.port = port;
      self.connectionParameters.host = host;
      self.connectionParameters.port = port;
      try {
        await super.connect();
      } catch (error) {
        finder.forget(index);
        throw error;
      }
      let primary: boolean;
      try {
        primary = isPrimary((await this.query<{ recovery: boolean; ro: string }>(CHECK)).rows[0]);
      } catch (error) {
        finder.forget(index);
        await this.end().catch(() => undefined);
        throw error;
      }
      if (!primary) {
        finder.forget(index);
        await this.end().catch(() => undefined);
        throw new NoPrimaryError(`host ${index + 1} of DATABASE_URL is no longer the primary (a failover or switchover): the next connection finds the new one`);
      }
      // The connection lost (the member crashed, or stopped to be demoted: PostgreSQL ends every
      // session then): the next connection searches again instead of trying this member first.
      this.on('error', () => finder.forget(index));
      return this;
    }
  }
  return PrimaryClient;
}

interface Target {
  finder: PrimaryFinder | null;
  Client: typeof pg.Client;
}

const targets = new Map<string, Target>();

/** The URL's target, made once per URL per process: every pool and client of it shares what is known of the primary. */
function target(url: string): Target {
  let t = targets.get(url);
  if (!t) {
    const multi = parseMultiHostUrl(url);
    const finder = multi ? new PrimaryFinder(multi) : null;
    t = { finder, Client: finder ? primaryClientClass(finder) : pg.Client };
    targets.set(url, t);
  }
  return t;
}

/** A client for DATABASE_URL: of one host as node-postgres makes it, of several connected to the primary. */
export function databaseClient(url: string, config: Omit<pg.ClientConfig, 'connectionString'> = {}): pg.Client {
  const t = target(url);
  return t.finder ? new t.Client(config) : new pg.Client({ ...config, connectionString: url });
}

/** A pool for DATABASE_URL (see {@link databaseClient}). */
export function databasePool(url: string, config: Omit<pg.PoolConfig, 'connectionString' | 'Client'> = {}): pg.Pool {
  const t = target(url);
  return t.finder ? new pg.Pool({ ...config, Client: t.Client }) : new pg.Pool({ ...config, connectionString: url });
}

/** The finder of a multi-host URL (null for one host): tests read its rounds. */
export function primaryFinder(url: string): PrimaryFinder | null {
  return target(url).finder;
}
