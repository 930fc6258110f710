import { createYoga, mapAsyncIterator, type Plugin } from 'graphql-yoga';
import { GraphQLError, Kind, parse, type ExecutionArgs, specifiedRules, visit, type DocumentNode, type FragmentDefinitionNode, type GraphQLSchema, type SelectionSetNode, type ASTNode, type ASTVisitor, type ValidationContext, type DefinitionNode, type ExecutionResult, type OperationDefinitionNode } from 'graphql';
import { compileQuery, isCompiledQuery, type CompiledQuery } from 'graphql-jit';
import type { PromiseOrValue } from 'graphql/jsutils/PromiseOrValue';
import { EnvelopArmorPlugin } from '@escape.tech/graphql-armor';
import { useCSRFPrevention } from '@graphql-yoga/plugin-csrf-prevention';
import { getSchema } from './schema';
import type { Context, Services } from '../context';
import { bearerToken, type TokenStore } from '../auth/tokens';
import type { Principal } from '../auth/permissions';
import { databaseAppError } from '../db/failure';
import { AppError, isErrorCode, unauthenticated } from '../errors';
import { uniqueViolation } from '../db/unique';
import { checkDocumentNesting, checkVariables, operationOf, withLiteralInputRule } from './input-check';
import type { Metrics } from '../ops/metrics';
import type { ResponseCache } from './response-cache';
import { renderOfflineGraphiQL } from './graphiql';

export const CSRF_HEADER = 'x-graphql-csrf';

/** What the HTTP layer hands to Yoga with each request. */
export interface ServerContext {
  requestId: string;
  /**
   * Set by the REST layer, which runs GraphQL in-process: the final result object (codes fixed,
   * errors masked) is handed over here instead of being serialized to JSON and parsed back.
   */
  capture?: { result?: ExecutionResult };
  /**
   * Who the caller is, decided before anything else looks at the request (see {@link authFirst};
   * the REST layer sets it from its own check).
   */
  auth?: { principal: Principal | null; token: string | null };
}

/**
 * GraphQL-js's variable coercion messages print the value they refuse (`Variable "$i" got invalid
 * value { ... password: ... }`). The input checks below answer first; should one still get
 * through, only the variable's name is kept.
 */
function withoutValues(error: GraphQLError): GraphQLError {
  const coercion = /^Variable "\$(\w+)" got invalid value /.exec(error.message);
  if (!coercion) return error;
  const field = `$${coercion[1]}`;
  return new GraphQLError(`${field}: is invalid`, { nodes: error.nodes, positions: error.positions, extensions: { code: 'INVALID_INPUT', details: { field } } });
}

/** Operations made of `__schema`, `__type` and `__typename` only: open without a token. */
export function isIntrospectionOnly(document: DocumentNode): boolean {
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const d of document.definitions) if (d.kind === Kind.FRAGMENT_DEFINITION) fragments.set(d.name.value, d);
  const seen = new Set<string>();
  const rootOnlyMeta = (set: SelectionSetNode): boolean =>
    set.selections.every((s) => {
      if (s.kind === Kind.FIELD) return s.name.value.startsWith('__');
      if (s.kind === Kind.INLINE_FRAGMENT) return rootOnlyMeta(s.selectionSet);
      if (seen.has(s.name.value)) return true;
      seen.add(s.name.value);
      const fragment = fragments.get(s.name.value);
      return fragment !== undefined && rootOnlyMeta(fragment.selectionSet);
    });
  const operations = document.definitions.filter((d): d is OperationDefinitionNode => d.kind === Kind.OPERATION_DEFINITION);
  return operations.length > 0 && operations.every((o) => o.operation === 'query' && rootOnlyMeta(o.selectionSet));
}

/**
 * Authentication before anything else: a caller without a valid token learns nothing about
 * inputs, so the token is checked before parsing, validation and variable coercion. A token that
 * is given but unknown, revoked or expired is UNAUTHENTICATED; no token at all is allowed only for
 * pure introspection (the schema is public: it is committed as schema/schema.graphql).
 */
function authFirst(tokens: TokenStore): Plugin<{}, ServerContext> {
  return {
    async onParams({ params, request, context, setResult }) {
      const refuse = (error: AppError) => setResult({ errors: [error] });
      // The parser is recursive: a document nested 10,000 deep must not reach it (nor the one below).
      const tooDeep = typeof params.query === 'string' ? checkDocumentNesting(params.query) : null;
      if (context.auth) return tooDeep ? refuse(tooDeep) : undefined; // decided by the REST layer, with the same rule
      let token: string | undefined;
      try {
        token = bearerToken(request.headers.get('authorization'));
      } catch (error) {
        return refuse(error as AppError);
      }
      if (token) {
        try {
          context.auth = { principal: await tokens.authenticate(token), token };
        } catch (error) {
          if (error instanceof AppError) return refuse(error);
          const database = databaseError(error);
          if (database) return setResult({ errors: [database] });
          throw error;
        }
        return tooDeep ? refuse(tooDeep) : undefined;
      }
      let document: DocumentNode | null = null;
      try {
        document = typeof params.query === 'string' && !tooDeep ? parse(params.query, { maxTokens: 5000 }) : null;
      } catch {
        document = null;
      }
      if (!document || !isIntrospectionOnly(document)) return refuse(unauthenticated());
      context.auth = { principal: null, token: null };
    },
  };
}

/**
 * Input checks of src/graphql/input-check.ts: literals during validation (in place of
 * ValuesOfCorrectTypeRule), variables just before execution, both naming the field and never
 * repeating a value.
 */
function inputChecks(): Plugin {
  const beforeRun = ({ args, setResultAndStopExecution }: {
    args: { schema: GraphQLSchema; document: DocumentNode; operationName?: string | null; variableValues?: unknown };
    setResultAndStopExecution: (result: ExecutionResult) => void;
  }) => {
    const operation = operationOf(args.document, args.operationName);
    if (!operation) return;
    const errors = checkVariables(args.schema, operation, args.variableValues as Record<string, unknown> | undefined);
    if (errors.length) setResultAndStopExecution({ errors });
  };
  return {
    onValidate({ setValidationFn, validateFn }) {
      setValidationFn((schema, document, rules, typeInfo, options) =>
        validateFn(schema, document, withLiteralInputRule(rules ?? specifiedRules), typeInfo, options));
    },
    onExecute: beforeRun as never,
    onSubscribe: beforeRun as never,
  };
}

/**
 * A failure of the database itself (src/db/failure.ts) as the refusal it is: UPSTREAM_UNAVAILABLE
 * or STORAGE_UNAVAILABLE, HTTP 503 with Retry-After (Yoga reads `extensions.http` and drops it
 * from the body), the database named but not where it is.
 */
function databaseError(error: unknown, path?: readonly (string | number)[]): GraphQLError | null {
  const app = databaseAppError(error);
  if (!app) return null;
  const seconds = String(app.extensions.details && (app.extensions.details as { retryAfterSeconds?: number }).retryAfterSeconds);
  return new GraphQLError(app.message, { path, extensions: { ...app.extensions, http: { status: 503, headers: { 'retry-after': seconds } } } });
}

/** The error behind each INTERNAL that maskError made: the response says "internal error", the log says what. */
const internalCauses = new WeakMap<GraphQLError, unknown>();
const maskedInternals = new WeakSet<GraphQLError>();
/** Longer than any HTTP result takes from masking to errorLog, however busy the machine. */
const UNLOGGED_AFTER_MS = 5000;

/**
 * errorLog logs a masked INTERNAL with its request id. A WebSocket operation's result never passes
 * errorLog (graphql-ws sends it itself): such an error is logged here, once, when errorLog has not.
 */
function rememberInternal(log: Services['log'], masked: GraphQLError, cause: unknown): void {
  maskedInternals.add(masked);
  internalCauses.set(masked, cause);
  setTimeout(() => {
    if (internalCauses.delete(masked)) log.error({ err: cause, code: 'INTERNAL' }, 'internal error in a GraphQL operation');
  }, UNLOGGED_AFTER_MS).unref();
}

/** Yoga's own lines, minus any error object: the message of a refusal may quote input. */
function yogaLogFields(args: unknown[]): Record<string, unknown> {
  return { args: args.map((a) => (typeof a === 'string' ? a : a instanceof Error ? a.name : typeof a)) };
}

/**
 * One line per error, after codes are fixed: a client's refusal (4xx codes) at info with its code
 * and path, never its message (it may quote input); an INTERNAL at error with the request id and
 * what caused it.
 */
function errorLog(log: Services['log']): Plugin<{}, ServerContext> {
  const report = (result: ExecutionResult, requestId: string) => {
    for (const error of result.errors ?? []) {
      const code = error.extensions?.code;
      const path = error.path?.join('.');
      if (code !== 'INTERNAL') {
        log.info({ requestId, code, path }, 'GraphQL request refused');
        continue;
      }
      const masked = error as GraphQLError;
      const cause = internalCauses.get(masked);
      // Made by maskError: logged here unless its fallback already did; made elsewhere: logged here.
      if (maskedInternals.has(masked) && !internalCauses.delete(masked)) continue;
      log.error({ err: cause ?? error, requestId, path, code }, 'internal error in a GraphQL operation');
    }
  };
  return {
    onResultProcess({ result, serverContext }) {
      const requestId = serverContext?.requestId ?? 'unknown';
      if (Array.isArray(result)) for (const r of result) report(r as ExecutionResult, requestId);
      else if (result && typeof result === 'object' && 'errors' in result) report(result as ExecutionResult, requestId);
    },
  };
}

/**
 * The error with the request's id in `extensions.requestId`: the id REST puts in its error body and
 * every answer carries as X-Request-Id, so a GraphQL error can be quoted and found in the log too.
 * A new error (errors can be shared objects); the same one when it carries the id already.
 */
export function withRequestId<E extends GraphQLError | { message: string; extensions?: Record<string, unknown> }>(error: E, requestId: string): E {
  if (error.extensions?.requestId === requestId) return error;
  if (!(error instanceof GraphQLError)) return { ...error, extensions: { ...error.extensions, requestId } };
  return new GraphQLError(error.message, {
    nodes: error.nodes,
    source: error.source,
    positions: error.positions,
    path: error.path,
    originalError: error.originalError,
    extensions: { ...error.extensions, requestId },
  }) as E;
}

/**
 * Every error of a result gets the request's id ({@link withRequestId}): single results, batches
 * and each result of a stream (a subscription over SSE). After errorLog, which keys the causes of
 * masked errors by the error objects themselves.
 */
function requestIdOnErrors(): Plugin<{}, ServerContext> {
  const stamp = (result: ExecutionResult, requestId: string): ExecutionResult =>
    result?.errors?.length ? { ...result, errors: result.errors.map((e) => withRequestId(e, requestId)) } : result;
  return {
    onResultProcess({ result, setResult, serverContext }) {
      const requestId = serverContext?.requestId;
      if (!requestId || !result || typeof result !== 'object') return;
      if (Array.isArray(result)) setResult(result.map((r) => stamp(r as ExecutionResult, requestId)) as never);
      else if (Symbol.asyncIterator in result) setResult(mapAsyncIterator(result as AsyncIterable<ExecutionResult> as never, (r: ExecutionResult) => stamp(r, requestId)) as never);
      else if ('errors' in result) setResult(stamp(result as ExecutionResult, requestId) as never);
    },
  };
}

/** Hands the result to an in-process caller (see ServerContext.capture); must be the last plugin. */
function captureResult(): Plugin<{}, ServerContext> {
  return {
    onResultProcess({ result, serverContext, setResultProcessor }) {
      const capture = serverContext?.capture;
      if (!capture || Array.isArray(result) || !result || typeof result !== 'object' || Symbol.asyncIterator in result) return;
      capture.result = result as ExecutionResult;
      setResultProcessor((_result, fetchAPI) => new fetchAPI.Response(null, { status: 204 }), 'application/json');
    },
  };
}

/**
 * Every error leaves with a code: request-level errors (syntax, validation, depth/cost limits,
 * variable coercion) are the client's input; anything else without a code is INTERNAL and masked.
 */
export function withCode(error: GraphQLError, requestId: string): GraphQLError {
  const code = error.extensions?.code;
  if (isErrorCode(code)) return withoutValues(error);
  if (!error.path && !error.originalError) {
    if (/^Variable "\$\w+" got invalid value /.test(error.message)) return withoutValues(error);
    return new GraphQLError(error.message, { nodes: error.nodes, source: error.source, positions: error.positions, extensions: { code: 'INVALID_INPUT' } });
  }
  return new GraphQLError('internal error', { path: error.path, extensions: { code: 'INTERNAL', requestId } });
}

function codeErrors(metrics: Metrics): Plugin<{}, ServerContext> {
  const fix = (result: ExecutionResult, requestId: string): ExecutionResult => {
    if (!result.errors?.length) return result;
    const errors = result.errors.map((e) => withCode(e as GraphQLError, requestId));
    for (const e of errors) metrics.graphqlErrors.inc({ code: String(e.extensions.code) });
    return { ...result, errors };
  };
  return {
    onResultProcess({ result, setResult, serverContext }) {
      const requestId = serverContext?.requestId ?? 'unknown';
      if (Array.isArray(result)) setResult(result.map((r) => fix(r as ExecutionResult, requestId)) as never);
      else if (result && typeof result === 'object' && 'errors' in result) setResult(fix(result as ExecutionResult, requestId) as never);
    },
  };
}

/**
 * Queries and mutations run as compiled functions (graphql-jit): each distinct document is compiled
 * once against the schema into plain JavaScript that resolves and completes its fields, instead of
 * graphql-js walking the document for every field of every row. Yoga's parser cache hands back the
 * same DocumentNode for the same text, so the compiled form is kept beside it (and dropped with it).
 * Yoga's own executor (@graphql-tools/executor) exists for @defer/@stream and abortable execution,
 * which this schema does not offer. On a page of 20 nodes the executor's per-field work was the
 * largest share of a cache miss; a bulk answer of 10,000 node views was mostly that.
 * Subscriptions (not passed through onExecute) keep Yoga's.
 */
type Compiled = CompiledQuery | ExecutionResult;
const compiledQueries = new WeakMap<DocumentNode, Map<string, Compiled>>();
function jitExecute(args: ExecutionArgs): PromiseOrValue<ExecutionResult> {
  let byName = compiledQueries.get(args.document);
  if (!byName) compiledQueries.set(args.document, (byName = new Map()));
  const key = args.operationName ?? '';
  let compiled = byName.get(key);
  if (!compiled) {
    // Errors keep graphql-js's shape (no stack capture); values are serialized by their scalar types.
    compiled = compileQuery(args.schema, args.document, args.operationName ?? undefined, { disablingCapturingStackErrors: true }) as Compiled;
    byName.set(key, compiled);
  }
  if (!isCompiledQuery(compiled as CompiledQuery)) return compiled as ExecutionResult;
  return (compiled as CompiledQuery).query(args.rootValue, args.contextValue, args.variableValues ?? {}) as PromiseOrValue<ExecutionResult>;
}

function plainExecutor(): Plugin {
  return { onExecute: ({ setExecuteFn }) => setExecuteFn(jitExecute as never) };
}

function timing(metrics: Metrics): Plugin {
  return {
    onExecute({ args }) {
      const started = process.hrtime.bigint();
      const definitions = (args.document as { definitions: readonly DefinitionNode[] }).definitions;
      const op = definitions.find((d): d is OperationDefinitionNode => d.kind === 'OperationDefinition');
      const name = args.operationName ?? op?.name?.value ?? 'anonymous';
      // Operation names come from clients: keep the label set bounded.
      const operation = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/.test(name) ? name : 'invalid';
      const type = op?.operation ?? 'unknown';
      return {
        onExecuteDone({ result }) {
          const seconds = Number(process.hrtime.bigint() - started) / 1e9;
          const outcome = 'errors' in result && result.errors?.length ? 'error' : 'ok';
          metrics.graphqlDuration.observe({ operation, type, outcome }, seconds);
        },
      };
    },
  };
}

/**
 * Abuse limits (graphql-armor). Every limit reports its error instead of throwing, so a query that
 * breaks several limits hears about each of them; introspection counts too (the standard
 * introspection query is 15 deep, the default limit).
 */
function armorConfig(config: Services['config']) {
  const report = (context: ValidationContext | null, error: GraphQLError) => {
    context?.reportError(new GraphQLError(error.message.replace(/^Syntax Error: /, ''), { extensions: { code: 'INVALID_INPUT' } }));
  };
  const common = { exposeLimits: true, propagateOnRejection: false, onReject: [report] };
  return {
    maxDepth: { ...common, n: config.maxDepth, flattenFragments: true, ignoreIntrospection: false },
    costLimit: { ...common, maxCost: config.maxCost, ignoreIntrospection: false },
    maxAliases: { ...common, n: 30 },
    maxDirectives: { ...common, n: 30 },
    // The token limit guards the parser, which can only stop by throwing.
    maxTokens: { exposeLimits: true, n: 5000 },
    blockFieldSuggestion: { enabled: true },
  };
}

/** `first`/`last` literals over the page limit are refused by name, before any cost is computed. */
function pageSizeRule(max: number) {
  // Checked when each definition is entered, so this error comes before the cost limit's.
  const check = (context: ValidationContext) => (definition: ASTNode) => {
    visit(definition, {
      Argument(node) {
        if ((node.name.value === 'first' || node.name.value === 'last') && node.value.kind === Kind.INT) {
          const value = Number(node.value.value);
          if (value < 1 || value > max) {
            context.reportError(new GraphQLError(`${node.name.value}: must be between 1 and ${max}`, {
              nodes: [node],
              extensions: { code: 'INVALID_INPUT', details: { field: node.name.value } },
            }));
          }
        }
      },
    });
  };
  return (context: ValidationContext): ASTVisitor => ({
    OperationDefinition: check(context),
    FragmentDefinition: check(context),
  });
}

function pageSizePlugin(max: number): Plugin {
  return { onValidate: ({ addValidationRule }) => addValidationRule(pageSizeRule(max)) };
}

/**
 * GraphiQL's first screen: the schema loads without a token (introspection is public), so the
 * headers start with the CSRF header alone (a placeholder token would be sent, refused, and leave
 * "Error fetching schema"); the first query says where the token goes.
 */
export const GRAPHIQL_OPTIONS = {
  title: 'Metal control plane',
  headers: JSON.stringify({ [CSRF_HEADER]: '1' }),
  defaultQuery: [
    '# Metal control plane: GraphQL',
    '#',
    '# The schema (Docs, autocompletion) needs no token. Everything else does: in the Headers tab',
    '# below, add your token beside the CSRF header, e.g.',
    '#',
    `#   { "${CSRF_HEADER}": "1", "authorization": "Bearer <your token>" }`,
    '#',
    '# (the first start writes an admin token to DATA_DIR/admin-token). The schema is fetched again',
    '# with the new headers. Then run this query with the play button or Ctrl-Enter:',
    '',
    '{ viewer { tokenId platformAdmin } }',
    '',
  ].join('\n'),
};

export function createGraphqlServer(services: Services, metrics: Metrics, cache: ResponseCache | null = null) {
  const { config, log } = services;
  return createYoga<ServerContext, Context>({
    schema: getSchema(),
    graphqlEndpoint: '/graphql',
    // Every body reaching Yoga is bounded already: src/server.ts reads it with readBody's limit
    // (MAX_BODY_BYTES, 413 naming the field) and the REST layer builds its own from input read the
    // same way. Yoga's limit would turn that string back into a stream piped through a
    // TransformStream on every request.
    maxRequestBodySize: false,
    landingPage: false,
    graphiql: GRAPHIQL_OPTIONS,
    // GraphiQL's scripts and styles come from this service (src/graphql/graphiql.ts), not a CDN.
    renderGraphiQL: renderOfflineGraphiQL,
    // Yoga calls error() for every error it masks, client refusals included: each is logged once,
    // by errorLog, at its level (INTERNAL with its cause); here only a debug line.
    logging: {
      debug: (...args) => log.debug(yogaLogFields(args), 'yoga'),
      info: (...args) => log.info(yogaLogFields(args), 'yoga'),
      warn: (...args) => log.warn(yogaLogFields(args), 'yoga'),
      error: (...args) => log.debug(yogaLogFields(args), 'yoga'),
    },
    cors: config.corsOrigins.length
      ? { origin: config.corsOrigins, credentials: false, allowedHeaders: ['authorization', 'content-type', 'x-request-id', CSRF_HEADER] }
      : false,
    maskedErrors: {
      maskError(error, message) {
        if (error instanceof GraphQLError && /^Variable "\$\w+" got invalid value /.test(error.message)) return withoutValues(error);
        const original = (error instanceof GraphQLError ? error.originalError : error) as Error | undefined;
        if (original instanceof AppError) return original;
        services.sql.health?.observe(original ?? error);
        const database = databaseError(original ?? error, error instanceof GraphQLError ? error.path : undefined);
        if (database) return database;
        const conflict = uniqueViolation(error);
        if (conflict) return new GraphQLError(conflict.message, { path: error instanceof GraphQLError ? error.path : undefined, extensions: conflict.extensions });
        // Pothos checks connection arguments (cursors, negative sizes) before the resolver runs.
        if (original?.name === 'PothosValidationError') {
          // Its cursor message repeats the cursor sent: name the argument instead.
          const cursor = /cursor/i.test(original.message);
          const message = cursor ? 'after: is not a cursor of this list' : original.message;
          return new GraphQLError(message, {
            path: error instanceof GraphQLError ? error.path : undefined,
            extensions: { code: 'INVALID_INPUT', ...(cursor ? { details: { field: 'after' } } : {}) },
          });
        }
        if (error instanceof GraphQLError) {
          if (isErrorCode(error.extensions?.code)) return error;
          // Raised by GraphQL or Yoga before any resolver ran: bad JSON, syntax, CSRF header missing.
          const http = error.extensions?.http as { status?: number } | undefined;
          if (http?.status && http.status >= 400 && http.status < 500) {
            const code = http.status === 403 ? 'PERMISSION_DENIED' : 'INVALID_INPUT';
            return new GraphQLError(error.message, { nodes: error.nodes, positions: error.positions, extensions: { http: error.extensions.http, code } });
          }
          if (!error.originalError || error.originalError.name === 'GraphQLError') {
            return new GraphQLError(error.message, { nodes: error.nodes, positions: error.positions, path: error.path, extensions: { code: 'INVALID_INPUT' } });
          }
        }
        const masked = new GraphQLError(message, { path: error instanceof GraphQLError ? error.path : undefined, extensions: { code: 'INTERNAL' } });
        rememberInternal(log, masked, original ?? error);
        return masked;
      },
    },
    context: async ({ request, requestId, auth }): Promise<Context> => {
      if (auth) return { ...services, requestId, principal: auth.principal, token: auth.token };
      // Subscriptions over WebSocket build their context elsewhere: this one always has a request.
      const token = bearerToken(request.headers.get('authorization'));
      const principal = token ? await services.tokens.authenticate(token) : null;
      return { ...services, requestId, principal, token: token ?? null };
    },
    plugins: [
      plainExecutor(),
      useCSRFPrevention({ requestHeaders: [CSRF_HEADER, 'x-request-id'] }),
      authFirst(services.tokens),
      inputChecks(),
      pageSizePlugin(config.maxPageSize),
      EnvelopArmorPlugin(armorConfig(config)),
      ...(cache ? [cache.plugin(services.tokens)] : []),
      timing(metrics),
      codeErrors(metrics),
      errorLog(log),
      requestIdOnErrors(),
      captureResult(),
    ],
  });
}

export type GraphqlServer = ReturnType<typeof createGraphqlServer>;
