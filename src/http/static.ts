import { createHash } from 'node:crypto';
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { sendError } from './respond';

const gzipAsync = promisify(gzip);

/** One file the browser pages need: its content type and where its bytes come from (read lazily). */
export interface AssetSource {
  type: string;
  load(): Buffer | string | Promise<Buffer | string>;
}

interface LoadedAsset {
  type: string;
  body: Buffer;
  /** null when compression does not pay (images) or the file is tiny. */
  gzipped: Buffer | null;
  etag: string;
  /** A digest of the bytes: page links carry it as `?v=`, which makes the URL safe to cache forever. */
  version: string;
}

/** `gzip` listed in Accept-Encoding with a weight above zero (`gzip;q=0` refuses it). */
function acceptsGzip(header: string | undefined): boolean {
  return (header ?? '').split(',').some((part) => {
    const [coding, ...params] = part.trim().toLowerCase().split(';');
    if (coding !== 'gzip') return false;
    const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    return q === undefined || Number(q.slice(2)) > 0;
  });
}

const COMPRESSIBLE = /^(text\/|application\/(javascript|json))/;

/**
 * Static files the browser pages (GraphiQL, /docs) load from this service itself, never from a CDN:
 * a control plane often runs where the internet is not. Only the names given to the constructor
 * are served (a whitelist: no file system path is ever built from the request). A link with
 * `?v=<digest>` (see href) is cached by browsers for a year; any other request is revalidated by
 * its ETag. Files are read, hashed and gzipped once, on first use.
 */
export class StaticAssets {
  private readonly loaded = new Map<string, Promise<LoadedAsset>>();

  constructor(
    /** The URL path the files live under, with its trailing slash: `/docs/assets/`. */
    readonly prefix: string,
    private readonly files: Readonly<Record<string, AssetSource>>,
  ) {
    if (!prefix.startsWith('/') || !prefix.endsWith('/')) throw new Error(`asset prefix ${prefix} must start and end with /`);
  }

  /** The names served, for tests and for the page that links them. */
  get names(): string[] {
    return Object.keys(this.files);
  }

  owns(pathname: string): boolean {
    return pathname.startsWith(this.prefix);
  }

  private load(name: string): Promise<LoadedAsset> {
    let found = this.loaded.get(name);
    if (!found) {
      const source = this.files[name]!;
      found = (async () => {
        const raw = await source.load();
        const body = typeof raw === 'string' ? Buffer.from(raw, 'utf8') : raw;
        const digest = createHash('sha256').update(body).digest('base64url').slice(0, 16);
        const gzipped = COMPRESSIBLE.test(source.type) && body.length > 1024 ? await gzipAsync(body, { level: 6 }) : null;
        return { type: source.type, body, gzipped: gzipped && gzipped.length < body.length ? gzipped : null, etag: `"${digest}"`, version: digest };
      })();
      // A failed read is retried on the next request rather than remembered.
      found.catch(() => this.loaded.delete(name));
      this.loaded.set(name, found);
    }
    return found;
  }

  /** The URL a page links the file by, with the digest that makes it cacheable for good. */
  async href(name: string): Promise<string> {
    if (!Object.hasOwn(this.files, name)) throw new Error(`no asset ${name} under ${this.prefix}`);
    const asset = await this.load(name);
    return `${this.prefix}${name}?v=${asset.version}`;
  }

  async serve(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const requestId = String(res.getHeader('x-request-id'));
    const name = url.pathname.slice(this.prefix.length);
    if (!Object.hasOwn(this.files, name)) return sendError(res, 404, 'NOT_FOUND', `no asset ${url.pathname}`, requestId);
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD');
      return sendError(res, 405, 'INVALID_INPUT', 'this method is not allowed here; use GET', requestId);
    }
    const asset = await this.load(name);
    const headers: Record<string, string | number> = {
      'content-type': asset.type,
      etag: asset.etag,
      'cache-control': url.searchParams.get('v') === asset.version ? 'public, max-age=31536000, immutable' : 'no-cache',
      'x-content-type-options': 'nosniff',
      ...(asset.gzipped ? { vary: 'accept-encoding' } : {}),
    };
    const match = req.headers['if-none-match'];
    if (match && match.split(',').some((tag) => tag.trim().replace(/^W\//, '') === asset.etag)) {
      res.writeHead(304, headers);
      return void res.end();
    }
    const useGzip = asset.gzipped !== null && acceptsGzip(req.headers['accept-encoding']);
    const body = useGzip ? asset.gzipped! : asset.body;
    res.writeHead(200, { ...headers, 'content-length': body.length, ...(useGzip ? { 'content-encoding': 'gzip' } : {}) });
    res.end(req.method === 'HEAD' ? undefined : body);
  }
}
