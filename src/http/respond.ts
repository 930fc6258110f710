import type { ServerResponse } from 'node:http';
import { httpStatusOf, type ErrorCode } from '../errors';

const started = new WeakMap<ServerResponse, bigint>();

/** Marks when the server began on this response, for {@link serverTiming}. */
export function startTiming(res: ServerResponse): void {
  started.set(res, process.hrtime.bigint());
}

/**
 * `Server-Timing: app;dur=<ms>`: the server's own time up to the response head (JSON answers are
 * written in one piece, so that is all of it), for clients and benchmarks that want server time
 * apart from the network and their own parsing.
 */
export function serverTiming(res: ServerResponse): Record<string, string> {
  const since = started.get(res);
  return since === undefined ? {} : { 'server-timing': `app;dur=${(Number(process.hrtime.bigint() - since) / 1e6).toFixed(2)}` };
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), ...serverTiming(res) });
  res.end(text);
}

/**
 * The REST error envelope: {"error": {"code", "message", "requestId"}} (no stack traces, ever).
 * A refusal because of the database (details.upstream 'database': UPSTREAM_UNAVAILABLE,
 * STORAGE_UNAVAILABLE) is 503 whatever status the caller passed (its code's usual one), with
 * Retry-After.
 */
export function sendError(
  res: ServerResponse,
  status: number,
  code: ErrorCode,
  message: string,
  requestId: string,
  details?: Record<string, unknown>,
): void {
  if (details?.upstream === 'database') {
    status = httpStatusOf(code, details);
    const after = details.retryAfterSeconds;
    if (typeof after === 'number') res.setHeader('retry-after', String(after));
  }
  sendJson(res, status, { error: { code, message, requestId, ...(details ? { details } : {}) } });
}
