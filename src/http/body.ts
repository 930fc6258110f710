import type { IncomingMessage } from 'node:http';
import { AppError } from '../errors';

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
