import { AppError } from '../errors';

/**
 * What a failed database call says about the database itself, apart from the statement:
 * - `unavailable`: no connection could be had or the one in use was lost (a restart, a failover,
 *   the OOM killer taking a backend, which resets every connection; a pool that waited too long).
 *   Nothing is wrong with the request: the same call later will do.
 * - `storage`: PostgreSQL answers but cannot write: its disk is full (53100), it is short of some
 *   other resource (53xxx), its disk fails (58030), or the database is read-only (25006: a
 *   standby after a failover, default_transaction_read_only).
 * - null: anything else (the statement's own error, a constraint, a bug).
 *
 * The errors come in several wrappings: pg's own (`code` is the SQLSTATE or the socket's errno),
 * Prisma's over the driver adapter (`meta.driverAdapterError.cause` with `kind` and
 * `originalCode`, or the SQLSTATE in `meta.code`), and a `cause` chain: every layer is looked at.
 */
export type DatabaseFailure = 'unavailable' | 'storage';

const SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNABORTED']);
/** Prisma's codes for a database it cannot reach or that closed the connection, and its pool timeout. */
const PRISMA_UNAVAILABLE = new Set(['P1001', 'P1002', 'P1008', 'P1017', 'P2024']);
/** The driver adapter's kinds for the same (its `kind` for a SQLSTATE it has no name for is `postgres`). */
const ADAPTER_UNAVAILABLE = new Set(['DatabaseNotReachable', 'ConnectionClosed', 'SocketTimeout', 'TooManyConnections']);
/** node-postgres's own messages for a connection that is gone (it has no code for them). */
const LOST_CONNECTION = /Connection terminated|connection error and is not queryable|Client was closed and is not queryable|Cannot use a pool after calling end|timeout exceeded when trying to connect|Connection ended unexpectedly|server closed the connection unexpectedly|the database system is (starting up|shutting down|in recovery mode|not yet accepting connections)|is not currently accepting connections|terminating connection due to/;

function bySqlstate(code: string): DatabaseFailure | null {
  if (!/^[0-9A-Z]{5}$/.test(code)) return null;
  // 08: connection exception; 57P01-57P03: admin shutdown, crash shutdown, cannot connect now; 53300: too many connections.
  if (code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03' || code === '53300') return 'unavailable';
  // 53: insufficient resources (53100 disk full, 53200 out of memory, 53400 configuration limit); 58030 io_error; 25006 read-only transaction.
  if (code.startsWith('53') || code === '58030' || code === '25006') return 'storage';
  return null;
}

function one(error: object): DatabaseFailure | null {
  const e = error as { code?: unknown; kind?: unknown; originalCode?: unknown; message?: unknown; errorCode?: unknown; syscall?: unknown };
  // A Unix socket that is not there: PostgreSQL is down (not a missing file of ours).
  if (e.code === 'ENOENT' && (e.syscall === 'connect' || (typeof e.message === 'string' && /\bconnect ENOENT\b/.test(e.message)))) return 'unavailable';
  for (const code of [e.code, e.originalCode, e.errorCode]) {
    if (typeof code !== 'string') continue;
    const found = bySqlstate(code);
    if (found) return found;
    if (SOCKET_CODES.has(code) || PRISMA_UNAVAILABLE.has(code)) return 'unavailable';
  }
  if (typeof e.kind === 'string' && ADAPTER_UNAVAILABLE.has(e.kind)) return 'unavailable';
  if (typeof e.message === 'string' && LOST_CONNECTION.test(e.message)) return 'unavailable';
  return null;
}

/** See {@link DatabaseFailure}; null for an error that is the statement's own (or not the database's at all). */
export function databaseFailure(error: unknown): DatabaseFailure | null {
  const seen = new Set<object>();
  const queue: unknown[] = [error];
  while (queue.length) {
    const next = queue.shift();
    if (!next || typeof next !== 'object' || seen.has(next) || seen.size > 20) continue;
    seen.add(next);
    // An AppError already says what it is: it is the service's answer, not the database's.
    if (next instanceof AppError) return null;
    const found = one(next);
    if (found) return found;
    const n = next as { cause?: unknown; meta?: { driverAdapterError?: unknown; code?: unknown }; originalError?: unknown; errors?: unknown };
    queue.push(n.cause, n.originalError, n.meta?.driverAdapterError);
    if (typeof n.meta?.code === 'string') queue.push({ code: n.meta.code });
    // AggregateError (a connect tried on IPv4 and IPv6, both refused)
    if (Array.isArray(n.errors)) queue.push(...n.errors);
  }
  return null;
}

/** Seconds a client is asked to wait (Retry-After) before trying again after either failure. */
export const DATABASE_RETRY_AFTER_SECONDS = 2;

/**
 * The answer for a call that failed because of the database: 503, Retry-After, and a message that
 * names the database but not where it is (no host, port or upstream text).
 */
export function databaseAppError(error: unknown): AppError | null {
  const failure = databaseFailure(error);
  if (failure === 'unavailable') {
    return new AppError('UPSTREAM_UNAVAILABLE', 'the database is unavailable (its connection was lost or refused): retry shortly', { upstream: 'database', retryAfterSeconds: DATABASE_RETRY_AFTER_SECONDS });
  }
  if (failure === 'storage') {
    return new AppError('STORAGE_UNAVAILABLE', 'the database cannot write now (its disk is full or failing, or it is read-only); nothing was written, retry later', { upstream: 'database', retryAfterSeconds: DATABASE_RETRY_AFTER_SECONDS });
  }
  return null;
}
