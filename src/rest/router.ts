import Router, { type HTTPVersion } from 'find-my-way';
import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { AppError, HTTP_STATUS, isErrorCode, type ErrorCode } from '../errors';
import { routes as defaultRoutes, type Route, type RouteInput } from './routes';
import { loadOperations } from './operations';
import { CSRF_HEADER, type GraphqlServer, type ServerContext } from '../graphql/yoga';
import { PayloadTooLarge, checkJsonDepth, readBody } from '../http/body';
import { sendJson, sendError } from '../http/respond';
import { checkJsonStrings, isIdFieldName, maxLengthOf } from '../limits';
import type { JsonSchema } from './schemas';

type Auth = NonNullable<ServerContext['auth']>;

/**
 * The string limits of src/limits.ts written into a route's JSON Schema (a copy), by property
 * name: ajv enforces them with REST field names, and /openapi.json shows them as maxLength.
 * Enums, patterns with their own bounds and formats (date-time) keep their own rules.
 */
export function withStringLimits(schema: JsonSchema, name?: string): JsonSchema {
  const out: JsonSchema = { ...schema };
  if (out.type === 'string' && out.enum === undefined && out.format === undefined && out.maxLength === undefined) {
    out.maxLength = maxLengthOf(name, name !== undefined && isIdFieldName(name));
  }
  if (out.properties && typeof out.properties === 'object') {
    out.properties = Object.fromEntries(
      Object.entries(out.properties as Record<string, JsonSchema>).map(([key, inner]) => [key, withStringLimits(inner, key)]),
    );
  }
  if (out.items && typeof out.items === 'object' && !Array.isArray(out.items)) out.items = withStringLimits(out.items as JsonSchema, name);
  for (const key of ['anyOf', 'oneOf', 'allOf'] as const) {
    if (Array.isArray(out[key])) out[key] = (out[key] as JsonSchema[]).map((inner) => withStringLimits(inner, name));
  }
  return out;
}

export function limitRoute(route: Route): Route {
  return {
    ...route,
    ...(route.params ? { params: Object.fromEntries(Object.entries(route.params).map(([key, s]) => [key, withStringLimits(s, key)])) } : {}),
    ...(route.query ? { query: withStringLimits(route.query) as Route['query'] } : {}),
    ...(route.body ? { body: withStringLimits(route.body) } : {}),
  };
}

/**
 * A GraphQL error's field (`input.policy.quorum`, `nodeIds[3]`, `$input.name`) as the REST
 * caller wrote it (`body.policy.quorum`, `path.id`): the route's variables carry the body's
 * fields under the same names, and path parameters are found by their value.
 */
function restField(field: string, input: RouteInput, variables: Record<string, unknown>): string | null {
  const bare = field.replace(/^\$/, '');
  const segments = bare.split(/[.[]/);
  let rest = bare;
  let holder: unknown = variables;
  // Strip the argument (`input.`) when the variables hold the fields under it.
  if (segments.length > 1 && variables[segments[0]!] && typeof variables[segments[0]!] === 'object') {
    holder = variables[segments[0]!];
    rest = bare.slice(segments[0]!.length + 1);
  }
  const top = rest.split(/[.[]/)[0]!;
  if (input.body && Object.hasOwn(input.body, top)) return `body.${rest}`;
  const value = (holder as Record<string, unknown> | null)?.[top] ?? variables[top];
  for (const [param, given] of Object.entries(input.params)) if (given === value && rest === top) return `path.${param}`;
  if (Object.hasOwn(input.query, top)) return `query.${rest}`;
  return null;
}

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
  // An unknown key is named, but only a short clean one (the key itself is the caller's input).
  if (error.keyword === 'additionalProperties') {
    const key = String(error.params.additionalProperty);
    parts.push(/^[A-Za-z_][A-Za-z0-9_-]{0,63}$/.test(key) ? key : '(an unknown key)');
  }
  if (error.keyword === 'required') parts.push(String(error.params.missingProperty));
  return [where, ...parts].join('.').replace(/\.(\d+)(?=\.|$)/g, '[$1]');
}

export function explain(where: string, error: ErrorObject): AppError {
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
  // Long path parameters reach the route, whose schema names them (find-my-way's default of 100
  // would answer 404 for a 101-character id).
  private router = Router<HTTPVersion.V1>({ ignoreTrailingSlash: true, caseSensitive: true, maxParamLength: 16 * 1024 });
  readonly routes: Route[];

  /** Who each request is, decided by the server before routing (see {@link lookup}). */
  private auth = new WeakMap<IncomingMessage, Auth>();

  constructor(private yoga: GraphqlServer, routeTable: Route[] = defaultRoutes) {
    routeTable = routeTable.map(limitRoute);
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

  /** `auth`: the caller, authenticated before anything about the request is looked at. */
  lookup(req: IncomingMessage, res: ServerResponse, auth?: Auth): void | Promise<void> {
    if (auth) this.auth.set(req, auth);
    const requestId = String(res.getHeader('x-request-id'));
    const url = req.url ?? '/';
    const found = this.router.find(req.method as never, url.split('?')[0]!);
    if (found) return this.router.lookup(req, res);
    // find-my-way matches nothing when a parameter is not percent-encoded UTF-8 (%ED%A0%80, a lone
    // surrogate; %FF): that is bad input naming the parameter, not a missing route.
    const malformed = this.malformedParam(req.method ?? 'GET', url.split('?')[0]!);
    if (malformed) return sendError(res, 400, 'INVALID_INPUT', `${malformed}: is not percent-encoded UTF-8`, requestId, { field: malformed });
    const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
    const allowed = METHODS.filter((method) => this.router.find(method, url.split('?')[0]!) !== null);
    if (allowed.length) {
      res.setHeader('allow', allowed.join(', '));
      return sendError(res, 405, 'INVALID_INPUT', `this method is not allowed here; use ${allowed.join(' or ')}`, requestId);
    }
    return sendError(res, 404, 'NOT_FOUND', 'no route has this method and path (see /docs)', requestId);
  }

  /** `path.<name>` of the route parameter a malformed percent-encoding stands in, when a route matches with it. */
  private malformedParam(method: string, pathname: string): string | null {
    const MARK = '__malformed__';
    let any = false;
    const probe = pathname.split('/').map((segment) => {
      try {
        decodeURIComponent(segment);
        return segment;
      } catch {
        any = true;
        return MARK;
      }
    }).join('/');
    if (!any) return null;
    const found = this.router.find(method as never, probe);
    const name = found && Object.entries(found.params).find(([, v]) => v === MARK)?.[0];
    return name ? `path.${name}` : null;
  }

  private async handle(compiled: CompiledRoute, req: IncomingMessage, res: ServerResponse, params: Record<string, string>) {
    const requestId = String(res.getHeader('x-request-id'));
    try {
      const input = await this.parse(compiled, req, params);
      const variables = compiled.route.variables(input);
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
        body: JSON.stringify({ query: compiled.document, operationName: compiled.route.operation, variables }),
      }, { requestId, capture, ...(this.auth.has(req) ? { auth: this.auth.get(req) } : {}) });
      // The result object itself when Yoga got as far as a result (see captureResult); its JSON otherwise.
      const result = (capture.result ?? (await response.json())) as {
        data?: Record<string, unknown> | null;
        errors?: readonly { message: string; extensions?: Record<string, unknown> }[];
      };
      if (result.errors?.length) {
        const first = result.errors[0]!;
        const code: ErrorCode = isErrorCode(first.extensions?.code) ? first.extensions.code : 'INTERNAL';
        let details = first.extensions?.details as Record<string, unknown> | undefined;
        let message = first.message;
        const field = typeof details?.field === 'string' ? details.field : null;
        const rename = (path: string) => compiled.route.restField?.(path) ?? restField(path, input, variables);
        const renamed = field ? rename(field) : null;
        if (field && renamed && renamed !== field) {
          details = { ...details, field: renamed };
          message = message.split(field).join(renamed);
        }
        // Other GraphQL paths the message mentions (`the same node is input.nodeIds[1]`)
        message = message.replace(/\$?\binput\.[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+|\[\d+\])*/g, (path) => rename(path) ?? path);
        // bulk names each refused node's element too
        if (Array.isArray(details?.refused)) {
          details = {
            ...details,
            refused: (details.refused as Record<string, unknown>[]).map((r) =>
              typeof r.field === 'string' ? { ...r, field: restField(r.field, input, variables) ?? r.field } : r),
          };
        }
        return sendError(res, HTTP_STATUS[code], code, message, requestId, details);
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
    const badParam = checkJsonStrings(pathParams, 'path');
    if (badParam) throw badParam;
    if (compiled.query && !compiled.query(query)) throw explain('query', compiled.query.errors![0]!);
    const badQuery = checkJsonStrings(query, 'query');
    if (badQuery) throw badQuery;
    let body: Record<string, unknown> | undefined;
    if (compiled.body) {
      const raw = await readBody(req);
      const contentType = req.headers['content-type'] ?? '';
      if (!/^application\/json\b/i.test(contentType)) {
        throw new AppError('INVALID_INPUT', 'body: the Content-Type must be application/json', { field: 'body' });
      }
      checkJsonDepth(raw);
      let parsed: unknown;
      try {
        parsed = JSON.parse(raw.toString('utf8') || 'null');
      } catch (error) {
        // JSON.parse's message quotes the text it read ("Unexpected token ..., "{"password": ..." is
        // not valid JSON"): only where it stopped, when it says so, is kept.
        const at = /at position (\d+)/.exec((error as Error).message);
        throw new AppError('INVALID_INPUT', `body: malformed JSON${at ? ` (at position ${at[1]})` : ''}`, { field: 'body' });
      }
      if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
        throw new AppError('INVALID_INPUT', 'body: must be a JSON object', { field: 'body' });
      }
      if (!compiled.body(parsed)) throw explain('body', compiled.body.errors![0]!);
      const badBody = checkJsonStrings(parsed, 'body');
      if (badBody) throw badBody;
      body = parsed as Record<string, unknown>;
    } else {
      // Routes without a body still refuse oversized or stray bodies rather than ignore them silently.
      const raw = await readBody(req);
      if (raw.length > 0) throw new AppError('INVALID_INPUT', 'body: this route takes no body', { field: 'body' });
    }
    return { params: pathParams, query, body };
  }
}
