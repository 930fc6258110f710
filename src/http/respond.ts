import type { ServerResponse } from 'node:http';
import type { ErrorCode } from '../errors';

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** The REST error envelope: {"error": {"code", "message", "requestId"}} (no stack traces, ever). */
export function sendError(
  res: ServerResponse,
  status: number,
  code: ErrorCode,
  message: string,
  requestId: string,
  details?: Record<string, unknown>,
): void {
  sendJson(res, status, { error: { code, message, requestId, ...(details ? { details } : {}) } });
}
