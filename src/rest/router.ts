import Router, { type HTTPVersion } from 'find-my-way';
import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { AppError, HTTP_STATUS, isErrorCode, type ErrorCode } from '../errors';
import { routes as defaultRoutes, type Route, type RouteInput } from './routes';
import { loadOperations } from './operations';
import { CSRF_HEADER, type GraphqlServer, type ServerContext } from '../graphql/yoga';
import { PayloadTooLarge, readBody } from '../http/body';
import { sendJson, sendError } from '../http/respond';

interface CompiledRoute {
  route: Route;
  document: string;
  params?: ValidateFunction;
  query?: ValidateFunction;
  body?: ValidateFunction;
}

/** `/instancePath` + ajv's keyword params -> `body.bmc.address` style field paths. */
function fieldOf(where: string, error: ErrorObject): string {
  const parts = error.instancePath.split('/').filter(Boolean);
  if (error.keyword === 'additionalProperties') parts.push(String(error.params.additionalProperty));
  if (error.keyword === 'required') parts.push(String(error.params.missingProperty));
  return [where, ...parts].join('.').replace(/\.(\d+)(?=\.|$)/g, '[$1]');
}

function explain(where: string, error: ErrorObject): AppError {
  const field = fieldOf(where, error);
  const message =
    error.keyword === 'additionalProperties' ? 'is not a known field'
      : error.keyword === 'required' ? 'is required'
        : error.message ?? 'is invalid';
  return new AppError('INVALID_INPUT', `${field}: ${message}`, { field });
}

/**
 * The REST compatibility layer: find-my-way matches `METHOD /path`, ajv validates path, query and
 * body against the route's JSON Schema, and the route's GraphQL operation runs in-process through
 * Yoga with the caller's own headers, so every rule (auth included) is the GraphQL one.
 */
export class RestRouter {
  private router = Router<HTTPVersion.V1>({ ignoreTrailingSlash: true, caseSensitive: true });
  readonly routes: Route[];

  constructor(private yoga: GraphqlServer, routeTable: Route[] = defaultRoutes) {
    this.routes = routeTable;
    const operations = loadOperations();
    const ajvBody = new Ajv({ allErrors: false, strict: false });
    const ajvQuery = new Ajv({ allErrors: false, strict: false, coerceTypes: true });
    addFormats(ajvBody);
    addFormats(ajvQuery);
    for (const route of routeTable) {
      const document = operations.get(route.operation);
      if (!document) throw new Error(`route ${route.method} ${route.path}: no operation ${route.operation} in schema/operations`);
      const compiled: CompiledRoute = {
        route,
        document,
        params: route.params
          ? ajvQuery.compile({ type: 'object', properties: route.params, required: Object.keys(route.params) })
          : undefined,
        query: ajvQuery.compile(route.query ?? { type: 'object', additionalProperties: false, properties: {} }),
        body: route.body ? ajvBody.compile(route.body) : undefined,
      };
      const pattern = route.path.replace(/\{(\w+)\}/g, ':$1');
      this.router.on(route.method, pattern, (req, res, params) =>
        this.handle(compiled, req as IncomingMessage, res as ServerResponse, params as Record<string, string>),
      );
    }
  }

  /** true when the path belongs to the REST surface (so the server does not try other handlers). */
  owns(pathname: string): boolean {
    return pathname.startsWith('/api/') || pathname.startsWith('/controlnode/');
  }

  lookup(req: IncomingMessage, res: ServerResponse): void | Promise<void> {
    const requestId = String(res.getHeader('x-request-id'));
    const url = req.url ?? '/';
    const found = this.router.find(req.method as never, url.split('?')[0]!);
    if (found) return this.router.lookup(req, res);
    const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
    const allowed = METHODS.filter((method) => this.router.find(method, url.split('?')[0]!) !== null);
    if (allowed.length) {
      res.setHeader('allow', allowed.join(', '));
      return sendError(res, 405, 'INVALID_INPUT', `method ${req.method} is not allowed here; use ${allowed.join(' or ')}`, requestId);
    }
    return sendError(res, 404, 'NOT_FOUND', `no route ${req.method} ${url.split('?')[0]}`, requestId);
  }

  private async handle(compiled: CompiledRoute, req: IncomingMessage, res: ServerResponse, params: Record<string, string>) {
    const requestId = String(res.getHeader('x-request-id'));
    try {
      const input = await this.parse(compiled, req, params);
      const capture: NonNullable<ServerContext['capture']> = {};
      const response = await this.yoga.fetch('http://internal/graphql', {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/graphql-response+json, application/json',
          [CSRF_HEADER]: '1',
          'x-request-id': requestId,
          ...(req.headers.authorization ? { authorization: req.headers.authorization } : {}),
        },
        body: JSON.stringify({ query: compiled.document, operationName: compiled.route.operation, variables: compiled.route.variables(input) }),
      }, { requestId, capture });
      // The result object itself when Yoga got as far as a result (see captureResult); its JSON otherwise.
      const result = (capture.result ?? (await response.json())) as {
        data?: Record<string, unknown> | null;
        errors?: readonly { message: string; extensions?: Record<string, unknown> }[];
      };
      if (result.errors?.length) {
        const first = result.errors[0]!;
        const code: ErrorCode = isErrorCode(first.extensions?.code) ? first.extensions.code : 'INTERNAL';
        const details = first.extensions?.details as Record<string, unknown> | undefined;
        return sendError(res, HTTP_STATUS[code], code, first.message, requestId, details);
      }
      return sendJson(res, compiled.route.successStatus ?? 200, compiled.route.respond(result.data ?? {}, input));
    } catch (error) {
      if (error instanceof PayloadTooLarge) throw error; // the server answers 413 for it
      if (error instanceof AppError) {
        return sendError(res, HTTP_STATUS[error.code], error.code, error.message, requestId, error.extensions.details as Record<string, unknown> | undefined);
      }
      throw error;
    }
  }

  private async parse(compiled: CompiledRoute, req: IncomingMessage, params: Record<string, string>): Promise<RouteInput> {
    const url = new URL(req.url ?? '/', 'http://internal');
    const query: Record<string, unknown> = {};
    for (const [key, value] of url.searchParams) {
      if (key in query) throw new AppError('INVALID_INPUT', `query.${key}: is given more than once`, { field: `query.${key}` });
      query[key] = value;
    }
    const pathParams = { ...params };
    if (compiled.params && !compiled.params(pathParams)) throw explain('path', compiled.params.errors![0]!);
    if (compiled.query && !compiled.query(query)) throw explain('query', compiled.query.errors![0]!);
    let body: Record<string, unknown> | undefined;
    if (compiled.body) {
      const raw = await readBody(req);
      const contentType = req.headers['content-type'] ?? '';
      if (!/^application\/json\b/i.test(contentType)) {
        throw new AppError('INVALID_INPUT', 'body: the Content-Type must be application/json', { field: 'body' });
      }
      let parsed: unknown;
      try {
        parsed = JSON.parse(raw.toString('utf8') || 'null');
      } catch (error) {
        throw new AppError('INVALID_INPUT', `body: malformed JSON (${(error as Error).message})`, { field: 'body' });
      }
      if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
        throw new AppError('INVALID_INPUT', 'body: must be a JSON object', { field: 'body' });
      }
      if (!compiled.body(parsed)) throw explain('body', compiled.body.errors![0]!);
      body = parsed as Record<string, unknown>;
    } else {
      // Routes without a body still refuse oversized or stray bodies rather than ignore them silently.
      const raw = await readBody(req);
      if (raw.length > 0) throw new AppError('INVALID_INPUT', 'body: this route takes no body', { field: 'body' });
    }
    return { params: pathParams, query, body };
  }
}
