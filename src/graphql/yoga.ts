import { createYoga, type Plugin } from 'graphql-yoga';
import { GraphQLError, Kind, visit, type ASTNode, type ASTVisitor, type ValidationContext, type DefinitionNode, type ExecutionResult, type OperationDefinitionNode } from 'graphql';
import { EnvelopArmorPlugin } from '@escape.tech/graphql-armor';
import { useCSRFPrevention } from '@graphql-yoga/plugin-csrf-prevention';
import { getSchema } from './schema';
import type { Context, Services } from '../context';
import { bearerToken } from '../auth/tokens';
import { AppError, isErrorCode } from '../errors';
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
function withCode(error: GraphQLError, requestId: string): GraphQLError {
  const code = error.extensions?.code;
  if (isErrorCode(code)) return error;
  if (!error.path && !error.originalError) {
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
            context.reportError(new GraphQLError(`${node.name.value}: must be between 1 and ${max}, got ${value}`, {
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

export function createGraphqlServer(services: Services, metrics: Metrics, cache: ResponseCache | null = null) {
  const { config, log } = services;
  return createYoga<ServerContext, Context>({
    schema: getSchema(),
    graphqlEndpoint: '/graphql',
    landingPage: false,
    graphiql: { title: 'Metal control plane', headers: JSON.stringify({ [CSRF_HEADER]: '1', Authorization: 'Bearer <token>' }) },
    // GraphiQL's scripts and styles come from this service (src/graphql/graphiql.ts), not a CDN.
    renderGraphiQL: renderOfflineGraphiQL,
    logging: {
      debug: (...args) => log.debug({ args }, 'yoga'),
      info: (...args) => log.info({ args }, 'yoga'),
      warn: (...args) => log.warn({ args }, 'yoga'),
      error: (...args) => log.error({ args }, 'yoga'),
    },
    cors: config.corsOrigins.length
      ? { origin: config.corsOrigins, credentials: false, allowedHeaders: ['authorization', 'content-type', 'x-request-id', CSRF_HEADER] }
      : false,
    maskedErrors: {
      maskError(error, message) {
        const original = (error instanceof GraphQLError ? error.originalError : error) as Error | undefined;
        if (original instanceof AppError) return original;
        // Pothos checks connection arguments (cursors, negative sizes) before the resolver runs.
        if (original?.name === 'PothosValidationError') {
          const message = /cursor/i.test(original.message) ? `after: ${original.message}` : original.message;
          return new GraphQLError(message, { path: error instanceof GraphQLError ? error.path : undefined, extensions: { code: 'INVALID_INPUT' } });
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
        log.error({ err: original ?? error }, 'unexpected error in a resolver');
        return new GraphQLError(message, { path: error instanceof GraphQLError ? error.path : undefined, extensions: { code: 'INTERNAL' } });
      },
    },
    context: async ({ request, requestId }): Promise<Context> => {
      // Subscriptions over WebSocket build their context elsewhere: this one always has a request.
      const token = bearerToken(request.headers.get('authorization'));
      const principal = token ? await services.tokens.authenticate(token) : null;
      return { ...services, requestId, principal, token: token ?? null };
    },
    plugins: [
      useCSRFPrevention({ requestHeaders: [CSRF_HEADER, 'x-request-id'] }),
      pageSizePlugin(config.maxPageSize),
      EnvelopArmorPlugin(armorConfig(config)),
      ...(cache ? [cache.plugin(services.tokens)] : []),
      timing(metrics),
      codeErrors(metrics),
      captureResult(),
    ],
  });
}

export type GraphqlServer = ReturnType<typeof createGraphqlServer>;
