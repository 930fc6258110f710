import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { GraphqlServer } from './graphql/yoga';
import type { RestRouter } from './rest/router';
import type { Metrics } from './ops/metrics';
import { openApiDocument } from './rest/openapi';
import { docsAssets, docsPage, DOCS_CSP } from './rest/docs';
import { graphiqlAssets } from './graphql/graphiql';
import { uiAssets, uiPage, UI_CSP } from './ui/page';
import { readBody, checkJsonDepth, PayloadTooLarge } from './http/body';
import { sendError, sendJson, serverTiming, startTiming } from './http/respond';
import { AppError, HTTP_STATUS } from './errors';
import { DATABASE_RETRY_AFTER_SECONDS, databaseAppError } from './db/failure';
import type { EventHub } from './events/hub';
import { serveEventStream } from './events/sse';
import { bearerToken, type TokenStore } from './auth/tokens';
import { unauthenticated } from './errors';
import { BootHttp } from './modules/boot/routes';
import { InstallerHttp } from './modules/provision/callback-routes';

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * Paths a prober or a scraper asks for every few seconds (a load balancer's /readyz, Prometheus's
 * /metrics): their request lines are logged at debug, so that at the default info level the log
 * is what happened, not the probes.
 */
const PROBE_PATHS = new Set(['/healthz', '/readyz', '/metrics']);

export interface HttpDeps {
  yoga: GraphqlServer;
  events: EventHub | null;
  tokens: TokenStore;
  rest: RestRouter;
  /** iPXE scripts and ramdisk callbacks (src/modules/boot): machines, not API tokens. */
  boot?: BootHttp | null;
  /** The control-node installer's callbacks (src/modules/provision): a job's callback token, not API tokens. */
  installer?: InstallerHttp | null;
  metrics: Metrics;
  log: Logger;
  version: string;
  ready(): Promise<{ ok: boolean; checks: Record<string, string> }>;
}

/** Route label for metrics: the matched route template, never the raw path (bounded cardinality). */
function routeLabel(deps: HttpDeps, method: string, pathname: string): string {
  if (['/graphql', '/healthz', '/readyz', '/metrics', '/openapi.json', '/docs', '/api/events', '/ui'].includes(pathname)) return pathname;
  if (pathname === '/ui/') return '/ui';
  for (const assets of [docsAssets, graphiqlAssets, uiAssets]) if (assets.owns(pathname)) return assets.prefix;
  const boot = BootHttp.routeLabel(pathname) ?? InstallerHttp.routeLabel(pathname);
  if (boot) return boot;
  for (const r of deps.rest.routes) {
    if (r.method !== method) continue;
    const re = new RegExp('^' + r.path.replace(/\{\w+\}/g, '[^/]+') + '/?$');
    if (re.test(pathname)) return r.path;
  }
  return 'other';
}

/**
 * The REST caller, before anything about the request (route, path, query, body) is looked at:
 * an anonymous or unknown caller hears 401 and nothing about its input.
 */
async function authenticateRest(tokens: TokenStore, req: IncomingMessage) {
  const token = bearerToken(req.headers.authorization);
  if (!token) throw unauthenticated();
  return { principal: await tokens.authenticate(token), token };
}

/** A GraphQL-over-HTTP error answer, for refusals made before Yoga sees the request. */
function sendGraphqlError(res: ServerResponse, error: AppError, requestId: string): void {
  sendJson(res, HTTP_STATUS[error.code], { errors: [{ message: error.message, extensions: { ...error.extensions, requestId } }] });
}

/**
 * Hands a request to Yoga through its fetch API, with the body already read under the size limit
 * and its JSON nesting bounded (the same for the `variables` and `extensions` of a GET).
 */
async function serveGraphql(deps: HttpDeps, req: IncomingMessage, res: ServerResponse, requestId: string): Promise<void> {
  const body = req.method === 'GET' || req.method === 'HEAD' ? undefined : await readBody(req);
  try {
    if (body) checkJsonDepth(body);
    if (req.url?.includes('?')) {
      const search = new URL(req.url, 'http://localhost').searchParams;
      for (const name of ['variables', 'extensions']) {
        const value = search.get(name);
        if (value) checkJsonDepth(value, name);
      }
    }
  } catch (error) {
    if (error instanceof AppError) return sendGraphqlError(res, error, requestId);
    throw error;
  }
  const abort = new AbortController();
  // 'close' also fires after every complete response: only a close before the end means the client
  // left. Then the response body (a subscription's stream, over SSE) must be cancelled, or its
  // subscription and timers would live on with nobody reading.
  let left = false;
  let cancel: (() => void) | null = null;
  const gone = new Promise<void>((resolve) =>
    res.on('close', () => {
      if (res.writableFinished) return;
      left = true;
      abort.abort();
      cancel?.();
      resolve();
    }),
  );
  // A plain record: Yoga's fetch ponyfill reads it lazily, where a Headers object (Node's own)
  // is built here and then copied into the ponyfill's on every request.
  const headers: Record<string, string> = {};
  for (const name in req.headers) {
    const value = req.headers[name];
    if (value === undefined) continue;
    headers[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  const response = await deps.yoga.fetch(
    `http://${req.headers.host ?? 'localhost'}${req.url}`,
    { method: req.method, headers, body, signal: abort.signal } as RequestInit,
    { requestId },
  );
  if (left) {
    await response.body?.cancel().catch(() => undefined);
    return;
  }
  // Yoga answers some transport refusals (415 for a Content-Type it does not read) with no body:
  // give them the error shape every other refusal has.
  if (response.status >= 400 && !response.headers.get('content-type')) {
    const text = await response.text();
    if (!text) {
      const message = response.status === 415
        ? 'body: the Content-Type must be application/json (or application/graphql-response+json)'
        : `the request was refused (HTTP ${response.status})`;
      const details = response.status === 415 ? { field: 'body' } : undefined;
      res.writeHead(response.status, { 'content-type': 'application/json; charset=utf-8', ...serverTiming(res) });
      return void res.end(JSON.stringify({ errors: [{ message, extensions: { code: 'INVALID_INPUT', ...(details ? { details } : {}), requestId } }] }));
    }
    res.writeHead(response.status, { ...Object.fromEntries(response.headers), ...serverTiming(res) });
    return void res.end(text);
  }
  const outHeaders: Record<string, string> = {};
  response.headers.forEach((value, name) => {
    outHeaders[name] = value;
  });
  // A single result (JSON) is one string already: answered in one write with its length, not
  // chunk by chunk through a stream reader. Streams (SSE, multipart) go through the reader below.
  const type = outHeaders['content-type'] ?? '';
  if (type.startsWith('application/json') || type.startsWith('application/graphql-response+json')) {
    const text = await response.text();
    if (left) return;
    res.writeHead(response.status, { ...outHeaders, 'content-length': String(Buffer.byteLength(text)), ...serverTiming(res) });
    return void res.end(text);
  }
  res.writeHead(response.status, { ...outHeaders, ...serverTiming(res) });
  if (!response.body) return void res.end();
  const reader = response.body.getReader();
  cancel = () => void reader.cancel().catch(() => undefined);
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done || left) break;
      if (!res.write(value)) await Promise.race([new Promise((r) => res.once('drain', r)), gone]);
    }
  } finally {
    if (left) await reader.cancel().catch(() => undefined);
    res.end();
  }
}

export function createHttpServer(deps: HttpDeps): http.Server {
  const handler = async (req: IncomingMessage, res: ServerResponse) => {
    const started = process.hrtime.bigint();
    startTiming(res);
    const incoming = req.headers['x-request-id'];
    const requestId = typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID();
    res.setHeader('x-request-id', requestId);
    const url = new URL(req.url ?? '/', 'http://localhost');
    const method = req.method ?? 'GET';
    res.on('finish', () => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      deps.metrics.httpDuration.observe({ method, route: routeLabel(deps, method, url.pathname), status: String(res.statusCode) }, seconds);
      const line = { requestId, method, path: BootHttp.loggedPath(url.pathname), status: res.statusCode, ms: Math.round(seconds * 1e4) / 10 };
      if (PROBE_PATHS.has(url.pathname)) deps.log.debug(line, 'request');
      else deps.log.info(line, 'request');
    });
    try {
      switch (url.pathname) {
        case '/healthz':
          return sendJson(res, 200, { status: 'ok' });
        case '/readyz': {
          const { ok, checks } = await deps.ready();
          if (!ok) res.setHeader('retry-after', String(DATABASE_RETRY_AFTER_SECONDS));
          return sendJson(res, ok ? 200 : 503, { status: ok ? 'ready' : 'not ready', checks });
        }
        case '/metrics': {
          const text = await deps.metrics.render();
          res.writeHead(200, { 'content-type': deps.metrics.registry.contentType });
          return void res.end(text);
        }
        case '/openapi.json':
          return sendJson(res, 200, openApiDocument(deps.rest.routes, deps.version));
        case '/docs': {
          const html = await docsPage();
          res.writeHead(200, {
            'content-type': 'text/html; charset=utf-8',
            'content-security-policy': DOCS_CSP,
            'x-content-type-options': 'nosniff',
            'cache-control': 'no-cache',
          });
          return void res.end(html);
        }
        case '/ui':
        case '/ui/': {
          // The status page: a shell and its script; the token never travels in this URL (the
          // page reads it from the fragment, which browsers do not send, or from the form).
          if (req.method !== 'GET' && req.method !== 'HEAD') {
            res.setHeader('allow', 'GET, HEAD');
            return sendError(res, 405, 'INVALID_INPUT', 'this method is not allowed here; use GET', requestId);
          }
          const html = await uiPage();
          res.writeHead(200, {
            'content-type': 'text/html; charset=utf-8',
            'content-security-policy': UI_CSP,
            'x-content-type-options': 'nosniff',
            'referrer-policy': 'no-referrer',
            'cache-control': 'no-cache',
          });
          return void res.end(req.method === 'HEAD' ? undefined : html);
        }
        case '/graphql':
          return await serveGraphql(deps, req, res, requestId);
        case '/api/events':
          return await serveEventStream(deps, req, res, requestId);
      }
      // The files of the browser pages (/docs, GraphiQL, /ui), from their npm packages: no CDN.
      if (docsAssets.owns(url.pathname)) return await docsAssets.serve(req, res, url);
      if (graphiqlAssets.owns(url.pathname)) return await graphiqlAssets.serve(req, res, url);
      if (uiAssets.owns(url.pathname)) return await uiAssets.serve(req, res, url);
      // Before the REST surface: a machine has a boot token at most, never an API token.
      if (deps.boot?.owns(url.pathname)) return await deps.boot.serve(req, res, url, requestId);
      if (deps.installer?.owns(url.pathname)) return await deps.installer.serve(req, res, url, requestId);
      if (deps.rest.owns(url.pathname)) return await deps.rest.lookup(req, res, await authenticateRest(deps.tokens, req));
      return sendError(res, 404, 'NOT_FOUND', 'no route has this method and path (see /docs for the REST routes, /graphql for GraphQL)', requestId);
    } catch (error) {
      if (res.destroyed || !res.socket || res.socket.destroyed) return; // the client went away: nothing to answer
      if (res.headersSent) {
        deps.log.error({ err: error, requestId }, 'error after the response started');
        return void res.destroy();
      }
      if (error instanceof PayloadTooLarge) {
        res.setHeader('connection', 'close');
        return sendError(res, 413, 'INVALID_INPUT', error.message, requestId, { field: 'body' });
      }
      if (error instanceof AppError) {
        return sendError(res, HTTP_STATUS[error.code], error.code, error.message, requestId, error.extensions.details as Record<string, unknown> | undefined);
      }
      const database = databaseAppError(error);
      if (database) {
        // Logged without the error object: pg's messages carry the database's host and port.
        deps.log.warn({ err: error, requestId, code: database.code }, 'the database failed this request');
        return sendError(res, HTTP_STATUS[database.code], database.code, database.message, requestId, database.extensions.details as Record<string, unknown>);
      }
      deps.log.error({ err: error, requestId }, 'unhandled error');
      return sendError(res, 500, 'INTERNAL', 'internal error', requestId);
    }
  };
  const server = http.createServer((req, res) => void handler(req, res));
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  server.requestTimeout = 120_000;
  return server;
}

/**
 * The METRICS_PORT listener: /metrics and /healthz, nothing else (no API, no token). For a process
 * with no other listener (ROLE=worker), and for keeping the scrape off the API's port.
 */
export function createMetricsServer(metrics: Metrics, log: Logger): http.Server {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    res.on('finish', () => log.debug({ method: req.method, path: url.pathname, status: res.statusCode, listener: 'metrics' }, 'request'));
    if (req.method !== 'GET' && req.method !== 'HEAD') return sendError(res, 400, 'INVALID_INPUT', 'this listener answers GET /metrics and GET /healthz only', randomUUID());
    if (url.pathname === '/healthz') return sendJson(res, 200, { status: 'ok' });
    if (url.pathname !== '/metrics') return sendError(res, 404, 'NOT_FOUND', 'this listener serves /metrics and /healthz only', randomUUID());
    metrics.render().then(
      (text) => {
        res.writeHead(200, { 'content-type': metrics.registry.contentType });
        res.end(text);
      },
      (error: unknown) => {
        log.error({ err: error }, 'rendering /metrics failed');
        if (!res.headersSent) sendError(res, 500, 'INTERNAL', 'internal error', randomUUID());
      },
    );
  });
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  server.requestTimeout = 30_000;
  return server;
}
