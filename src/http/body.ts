import type { IncomingMessage } from 'node:http';
import { AppError } from '../errors';
import { LIMITS, checkJsonStrings } from '../limits';

export const MAX_BODY_BYTES = 1024 * 1024;

/** Thrown for bodies over the limit; the server answers 413 for it. */
export class PayloadTooLarge extends AppError {
  constructor(limit: number) {
    super('INVALID_INPUT', `body: larger than ${limit} bytes`, { field: 'body', limit });
  }
}

/** Reads a request body, refusing (without buffering it all) anything over the limit. */
export async function readBody(req: IncomingMessage, limit = MAX_BODY_BYTES): Promise<Buffer> {
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (Number.isFinite(declared) && declared > limit) {
    req.resume();
    throw new PayloadTooLarge(limit);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) {
      req.resume();
      throw new PayloadTooLarge(limit);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/**
 * Refuses a JSON text nested deeper than `maxDepth` before it is parsed: JSON.parse copes, but
 * everything after it (GraphQL coercion, ajv, Prisma) walks values recursively and would overflow
 * the stack. One pass over the bytes, counting `[` and `{` outside strings, no recursion.
 */
export function checkJsonDepth(raw: Buffer | string, field = 'body', maxDepth: number = LIMITS.jsonDepth): void {
  const bytes = typeof raw === 'string' ? Buffer.from(raw, 'utf8') : raw;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i += 1) {
    const c = bytes[i]!;
    if (inString) {
      if (c === 0x5c) i += 1; // backslash: skip the escaped byte (a quote or another backslash)
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      depth += 1;
      if (depth > maxDepth) throw new AppError('INVALID_INPUT', `${field}: JSON nested deeper than ${maxDepth} levels`, { field, maxDepth });
    } else if (c === 0x5d || c === 0x7d) depth -= 1;
  }
}

/**
 * A machine callback's JSON body (the ramdisk's, the installer's): application/json, within the
 * size and depth limits, parsed. A parse error is not JSON.parse's message, which quotes a piece of
 * the body (and a body may hold a password).
 */
export async function readJsonBody(req: IncomingMessage): Promise<unknown> {
  const raw = await readBody(req);
  if (!/^application\/json\b/i.test(req.headers['content-type'] ?? '')) throw new AppError('INVALID_INPUT', 'body: the Content-Type must be application/json', { field: 'body' });
  checkJsonDepth(raw);
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8') || 'null');
  } catch {
    throw new AppError('INVALID_INPUT', 'body: malformed JSON', { field: 'body' });
  }
  // The API's rule holds on the machines' routes too (issue 21 item 8): a JSON-escaped lone
  // surrogate or NUL is valid JSON, but PostgreSQL's jsonb refuses it (a 500); nor an overflowing number.
  const bad = checkJsonStrings(parsed, 'body');
  if (bad) throw bad;
  return parsed;
}
