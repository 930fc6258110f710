import { createYoga, type Plugin } from 'graphql-yoga';
import { GraphQLError, type DefinitionNode, type ExecutionResult, type OperationDefinitionNode } from 'graphql';
import { EnvelopArmorPlugin } from '@escape.tech/graphql-armor';
import { useCSRFPrevention } from '@graphql-yoga/plugin-csrf-prevention';
import { getSchema } from './schema';
import type { Context, Services } from '../context';
import { bearerToken } from '../auth/tokens';
import { AppError, isErrorCode } from '../errors';
import type { Metrics } from '../ops/metrics';

export const CSRF_HEADER = 'x-graphql-csrf';

/** What the HTTP layer hands to Yoga with each request. */
export interface ServerContext {
  requestId: string;
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

export function createGraphqlServer(services: Services, metrics: Metrics) {
  const { config, log } = services;
  return createYoga<ServerContext, Context>({
    schema: getSchema(),
    graphqlEndpoint: '/graphql',
    landingPage: false,
    graphiql: { title: 'Metal control plane', headers: JSON.stringify({ [CSRF_HEADER]: '1', Authorization: 'Bearer <token>' }) },
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
        const original = error instanceof GraphQLError ? error.originalError : error;
        if (original instanceof AppError) return original;
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
      return { ...services, requestId, principal };
    },
    plugins: [
      useCSRFPrevention({ requestHeaders: [CSRF_HEADER, 'x-request-id'] }),
      EnvelopArmorPlugin({
        maxDepth: { n: config.maxDepth, exposeLimits: true, flattenFragments: true },
        costLimit: { maxCost: config.maxCost, exposeLimits: true },
        maxAliases: { n: 30, exposeLimits: true },
        maxDirectives: { n: 30, exposeLimits: true },
        maxTokens: { n: 5000, exposeLimits: true },
        blockFieldSuggestion: { enabled: true },
      }),
      timing(metrics),
      codeErrors(metrics),
    ],
  });
}

export type GraphqlServer = ReturnType<typeof createGraphqlServer>;
