import fs from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';

/**
 * A file over HTTP as BMCs and firmware fetch them: GET and HEAD, `Accept-Ranges: bytes`, one byte
 * range answered 206 (BMCs mount an ISO by reading it in ranges: iDRAC, iLO and XCC all do),
 * an unsatisfiable range 416 with `Content-Range: bytes * /size`, and `If-Range` against the
 * file's ETag or Last-Modified (a changed file is sent whole). Several ranges in one request are
 * answered with the whole file (RFC 9110 lets a server ignore Range; no BMC asks for several).
 */

export interface FileStat {
  size: number;
  mtime: Date;
}

const etagOf = (stat: FileStat) => `"${stat.size.toString(16)}-${Math.floor(stat.mtime.getTime()).toString(16)}"`;

/** The one range a Range header asks for, or 'none' (absent, malformed or several), or 'unsatisfiable'. */
export function parseRange(header: string | undefined, size: number): { start: number; end: number } | 'none' | 'unsatisfiable' {
  if (!header) return 'none';
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!m) return 'none';
  const [, a, b] = m;
  if (a === '' && b === '') return 'none';
  if (a === '') {
    // The last N bytes.
    const n = Number(b);
    if (!Number.isSafeInteger(n)) return 'none';
    if (n === 0 || size === 0) return 'unsatisfiable';
    return { start: Math.max(0, size - n), end: size - 1 };
  }
  const start = Number(a);
  const end = b === '' ? size - 1 : Math.min(Number(b), size - 1);
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end)) return 'none';
  if (b !== '' && Number(b) < start) return 'none';
  if (start >= size) return 'unsatisfiable';
  return { start, end };
}

/** Sends `file` (already stat'ed) to a GET or HEAD; resolves when the body is sent or the client left. */
export async function sendFile(req: IncomingMessage, res: ServerResponse, file: string, stat: FileStat, headers: Record<string, string> = {}): Promise<void> {
  const etag = etagOf(stat);
  const lastModified = stat.mtime.toUTCString();
  const base = { 'accept-ranges': 'bytes', etag, 'last-modified': lastModified, 'cache-control': 'no-store', ...headers };
  let range = parseRange(typeof req.headers.range === 'string' ? req.headers.range : undefined, stat.size);
  const ifRange = req.headers['if-range'];
  if (range !== 'none' && typeof ifRange === 'string' && ifRange !== etag && ifRange !== lastModified) range = 'none';
  if (range === 'unsatisfiable') {
    req.resume();
    res.writeHead(416, { ...base, 'content-range': `bytes */${stat.size}`, 'content-length': '0' });
    return void res.end();
  }
  const { start, end } = range === 'none' ? { start: 0, end: stat.size - 1 } : range;
  const length = stat.size === 0 ? 0 : end - start + 1;
  res.writeHead(range === 'none' ? 200 : 206, {
    ...base,
    'content-type': headers['content-type'] ?? 'application/octet-stream',
    'content-length': String(length),
    ...(range === 'none' ? {} : { 'content-range': `bytes ${start}-${end}/${stat.size}` }),
  });
  if (req.method === 'HEAD' || length === 0) return void res.end();
  await new Promise<void>((resolve) => {
    const stream = fs.createReadStream(file, { start, end });
    stream.on('error', () => { res.destroy(); resolve(); });
    res.on('close', () => { stream.destroy(); resolve(); });
    stream.pipe(res);
  });
}
