import type { Route } from './routes';
import { components, type JsonSchema } from './schemas';
import { EXAMPLE_IDS as ID } from './examples';
import { HTTP_STATUS, errorTableRows, type ErrorCode } from '../errors';
import { DATABASE_RETRY_AFTER_SECONDS, databaseAppError } from '../db/failure';
import { MAX_BODY_BYTES } from '../http/body';
import { serverStopping } from '../events/hub';
import { BOOT_SECURITY_SCHEME, bootOpenApiPaths } from '../modules/boot/openapi';
import { INSTALLER_SECURITY_SCHEME, installerOpenApiPaths } from '../modules/provision/callback-openapi';

/** What each code means, for the response descriptions (docs/api.md: errors and limits). */
const CODE_MEANING: Record<ErrorCode, string> = {
  INVALID_INPUT: 'malformed JSON, an unknown field, a wrong type or value; the message names the field first',
  UNAUTHENTICATED: 'a missing, unknown, revoked or expired bearer token (checked before anything else)',
  PERMISSION_DENIED: 'the token has no grant for this on the object\'s scope',
  NOT_FOUND: 'no such object for this tenant (another tenant\'s object is NOT_FOUND too)',
  CONFLICT: 'a concurrent change won, or the name or MAC is taken: read again, then retry',
  INVALID_STATE: 'the object\'s state does not allow this (details.state, details.legalFrom)',
  INVALID_CONFIG: 'this service is not configured for the request (the message says what is missing)',
  UNSUPPORTED: 'the machine or its pool cannot do this',
  UNVERIFIED_WIPE: 'the wipe could not be attested',
  ABORTED: 'the stream or workflow was stopped',
  INTERNAL: 'a fault of the service: quote the requestId',
  REQUIRES_SWITCH_RECONFIG_ACK: 'the VTEP pool changed: paste details.snippets[] on the fabric switch, then re-POST with switch_acked, switch_snippet_hash and acked_by',
  UPSTREAM_UNAVAILABLE: 'a service this one reads from (NetBox) is unreachable, timed out or answered with an error: the message names it; retry later',
  STORAGE_UNAVAILABLE: `the database cannot write (disk full or failing, or read-only after a failover): nothing was written; retry after Retry-After (${DATABASE_RETRY_AFTER_SECONDS} s)`,
};

/** The database's unavailability: UPSTREAM_UNAVAILABLE too, but 503 (the service cannot serve at all for now). */
const DATABASE_UNAVAILABLE_MEANING = `UPSTREAM_UNAVAILABLE with details.upstream "database": the database is unreachable or its connection was lost (a restart, a failover); retry after Retry-After (${DATABASE_RETRY_AFTER_SECONDS} s)`;

/** The body of a database failure, as the service answers it (src/db/failure.ts). */
function databaseExample(failure: 'unavailable' | 'storage'): Record<string, unknown> {
  const error = databaseAppError(failure === 'storage' ? { code: '53100' } : { code: 'ECONNREFUSED' })!;
  return { error: { code: error.code, message: error.message, requestId: EXAMPLE_REQUEST_ID, details: error.extensions.details } };
}

/** Every route may answer these, whatever it does (STORAGE_UNAVAILABLE: so may any route that reads, when the database is down). */
const ALWAYS: ErrorCode[] = ['INVALID_INPUT', 'UNAUTHENTICATED', 'INTERNAL', 'STORAGE_UNAVAILABLE'];

const EXAMPLE_REQUEST_ID = '6f1c2e0a-9b7d-4c1e-8a55-3d2f7e9b1a40';

/** What a route acts on, for the wording of its error examples. */
function subjectOf(route: Route): { what: string; id: string } {
  const body = (route.body?.properties ?? {}) as Record<string, unknown>;
  if (route.path.includes('/tokens/')) return { what: 'api token', id: ID.token };
  if ('nodeId' in body || route.path.includes('/nodes')) return { what: 'node', id: ID.node };
  if ('poolId' in body || route.path.startsWith('/api/compute/pools/')) return { what: 'pool', id: ID.pool };
  if ('siteId' in body || route.path.startsWith('/api/compute/sites/')) return { what: 'site', id: ID.site };
  return { what: 'tenant', id: ID.tenant };
}

/** The permission the route decides on, for its PERMISSION_DENIED example. */
function permissionOf(route: Route): string {
  if (route.operation === 'Power') return 'compute:nodes:power';
  if (route.operation === 'Discovered') return 'compute:sites:read';
  if (route.method === 'GET') return 'read';
  return route.tag === 'metal' ? 'compute:nodes:provision' : 'admin';
}

const INVALID_CONFIG_EXAMPLE: Record<string, string> = {
  Enroll: 'no secret broker is configured: pass bmc.credentials as a secret:// reference',
  Unrescue: 'unrescue needs the provision module, which is not registered (MODULES)',
};

/** A realistic error body for one code on one route. */
function errorExample(route: Route, code: ErrorCode, tooLarge = false): Record<string, unknown> {
  const { what, id } = subjectOf(route);
  const required = (route.body?.required ?? []) as string[];
  let message: string;
  let details: Record<string, unknown> | undefined;
  switch (code) {
    case 'INVALID_INPUT':
      if (tooLarge) {
        message = `body: larger than ${MAX_BODY_BYTES} bytes`;
        details = { field: 'body', limit: MAX_BODY_BYTES };
      } else if (required.length) {
        message = `body.${required[0]}: is required`;
        details = { field: `body.${required[0]}` };
      } else {
        message = 'query.limit: is not a known field';
        details = { field: 'query.limit' };
      }
      break;
    case 'UNAUTHENTICATED':
      message = 'a valid bearer token is required';
      break;
    case 'PERMISSION_DENIED': {
      const permission = permissionOf(route);
      message = `missing permission ${permission} on ${what} ${id}`;
      details = { permission, resource: what };
      break;
    }
    case 'NOT_FOUND':
      message = `${what} ${id} not found`;
      break;
    case 'CONFLICT':
      message = `${what} ${id} changed concurrently; read it again and retry`;
      break;
    case 'INVALID_STATE':
      message = `${route.operation.toLowerCase()} is not legal for node ${ID.node} in state deploying; legal from: ready`;
      details = { state: 'deploying', legalFrom: ['ready'] };
      break;
    case 'INVALID_CONFIG':
      message = INVALID_CONFIG_EXAMPLE[route.operation] ?? 'this process is not configured for this request';
      break;
    case 'INTERNAL':
      message = 'internal error';
      break;
    case 'STORAGE_UNAVAILABLE':
      return databaseExample('storage');
    default:
      message = CODE_MEANING[code];
  }
  return { error: { code, message, requestId: EXAMPLE_REQUEST_ID, ...(details ? { details } : {}) } };
}

const errorContent = (examples: Record<string, unknown>) => ({
  'application/json': {
    schema: { $ref: '#/components/schemas/Error' },
    examples: Object.fromEntries(Object.entries(examples).map(([code, value]) => [code, { summary: code, value }])),
  },
});

/** Every status the route can answer with an error, each with its codes, their meaning and an example of each. */
function errorResponses(route: Route): Record<string, unknown> {
  const codes = [...new Set([...ALWAYS, ...(route.refusals ?? Object.keys(CODE_MEANING) as ErrorCode[])])];
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of codes) byStatus.set(HTTP_STATUS[code], [...(byStatus.get(HTTP_STATUS[code]) ?? []), code]);
  const responses: [number, unknown][] = [...byStatus].map(([status, list]) => [
    status,
    {
      description: [...list.map((code) => `${code}: ${CODE_MEANING[code]}`), ...(status === 503 ? [DATABASE_UNAVAILABLE_MEANING] : [])].join('. '),
      content: errorContent({
        ...Object.fromEntries(list.map((code) => [code, errorExample(route, code)])),
        // Any route answers 503 when the database is down (STORAGE_UNAVAILABLE is in ALWAYS).
        ...(status === 503 ? { UPSTREAM_UNAVAILABLE: databaseExample('unavailable') } : {}),
      }),
      ...(status === 503 ? { headers: { 'Retry-After': { description: 'Seconds to wait before trying again', schema: { type: 'integer' }, example: DATABASE_RETRY_AFTER_SECONDS } } } : {}),
    },
  ]);
  if (route.body) {
    responses.push([413, {
      description: `INVALID_INPUT: the body is over ${MAX_BODY_BYTES} bytes`,
      content: errorContent({ INVALID_INPUT: errorExample(route, 'INVALID_INPUT', true) }),
    }]);
  }
  return Object.fromEntries(responses.sort(([a], [b]) => a - b).map(([status, response]) => [String(status), response]));
}

const withExample = (schema: JsonSchema, example: unknown) => (example === undefined ? { schema } : { schema, example });

/** The OpenAPI 3.1 document, generated from the same route table the router serves. */
export function openApiDocument(routes: Route[], version: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) {
    const example = route.example;
    const parameters = [
      ...Object.entries(route.params ?? {}).map(([name, schema]) => ({ name, in: 'path', required: true, ...withExample(schema, example?.params?.[name]) })),
      ...Object.entries(route.query?.properties ?? {}).map(([name, schema]) => ({ name, in: 'query', required: false, ...withExample(schema, example?.query?.[name]) })),
    ];
    const success = route.successStatus ?? 200;
    (paths[route.path] ??= {})[route.method.toLowerCase()] = {
      operationId: route.operationId ?? route.operation,
      summary: route.summary,
      ...(route.description ? { description: route.description } : {}),
      tags: [route.tag],
      ...(parameters.length ? { parameters } : {}),
      ...(route.body ? { requestBody: { required: true, content: { 'application/json': withExample(route.body, example?.body) } } } : {}),
      responses: {
        [String(success)]: { description: success === 201 ? 'Created' : 'OK', content: { 'application/json': withExample(route.response, example?.response) } },
        ...errorResponses(route),
      },
      'x-graphql-operation': route.operation,
    };
  }
  paths['/api/events'] = { get: eventStreamOperation() };
  // The ramdisk callbacks: authenticated by a per-boot token instead (each operation says so).
  Object.assign(paths, bootOpenApiPaths());
  // The installer's callbacks: authenticated by the job's callback token.
  Object.assign(paths, installerOpenApiPaths());
  return {
    openapi: '3.1.0',
    info: {
      title: 'Metal control plane REST API',
      version,
      description: [
        'REST compatibility routes. Each executes a GraphQL operation of the same service (`x-graphql-operation`); [/graphql](/graphql) is the full API (GraphiQL in a browser).',
        '',
        'Every route needs `Authorization: Bearer <token>` (the Authorize button sets it for Try it out), but the ramdisk callbacks under `/boot/v1/` (tag boot), which take the per-boot token of their boot entry instead. Errors are `{"error": {"code", "message", "requestId"}}`, with `details` for some codes:',
        '',
        '| code | HTTP |',
        '| --- | --- |',
        ...errorTableRows(),
      ].join('\n'),
    },
    servers: [{ url: '/' }],
    security: [{ bearer: [] }],
    tags: [...new Set([...routes.map((r) => r.tag), 'events', 'boot'])].map((name) => ({ name })),
    paths,
    components: {
      schemas: components,
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'An API token (see docs/api.md: tokens)' }, bootToken: BOOT_SECURITY_SCHEME, installerToken: INSTALLER_SECURITY_SCHEME },
    },
  };
}

/** The REST event stream (src/events/sse.ts): not a GraphQL-backed route, so described here. */
function eventStreamOperation(): Record<string, unknown> {
  const error = (description: string, code: ErrorCode, message: string, details?: Record<string, unknown>) => ({
    description,
    content: errorContent({ [code]: { error: { code, message, requestId: EXAMPLE_REQUEST_ID, ...(details ? { details } : {}) } } }),
  });
  const event = {
    cursor: '48213',
    type: 'node.provision.deploying',
    tenantId: ID.tenant,
    siteId: ID.site,
    poolId: ID.pool,
    nodeId: ID.node,
    subject: ID.node,
    payload: { nodeId: ID.node, verb: 'deploy', from: 'ready', to: 'deploying', requestId: EXAMPLE_REQUEST_ID },
    createdAt: '2026-11-30T09:20:03.118Z',
  };
  return {
    operationId: 'EventStream',
    summary: 'Server-Sent Events: the events the token may read, replayed after a cursor, then live',
    description:
      'Each message has `id: <cursor>`, `event: <name>` and `data: <JSON event>`. Names: channel metal uses the event type ' +
      '(node.enrolled, node.provision.<state>, ...); fabric uses fabric_switch; provision uses provision_step. A reconnect with ' +
      'Last-Event-ID (EventSource sends it) resumes after that event. The server ends a stream with `event: error` ' +
      '(data: code, message, requestId, details.lastCursor): ABORTED when the reader fell too far behind (details.reason slow-consumer) or the service ' +
      'is stopping (details.reason server-stopping: reconnect and resume after details.lastCursor), UNAUTHENTICATED when the token was revoked.',
    tags: ['events'],
    parameters: [
      { name: 'channel', in: 'query', required: false, schema: { type: 'string', enum: ['metal', 'fabric', 'provision', 'all'], default: 'metal' }, example: 'metal' },
      { name: 'after', in: 'query', required: false, schema: { type: 'string', pattern: '^[0-9]{1,19}$' }, description: 'Replay the events after this cursor first.', example: '48212' },
      { name: 'nodeId', in: 'query', required: false, schema: { type: 'string' }, description: 'Only the events of this node.', example: ID.node },
      { name: 'Last-Event-ID', in: 'header', required: false, schema: { type: 'string' }, description: 'Wins over after: the cursor of the last event received.', example: '48212' },
    ],
    responses: {
      '200': {
        description: 'An event stream',
        content: {
          'text/event-stream': {
            schema: { type: 'string' },
            // The last message when the service stops (see serverStopping in src/events/hub.ts).
            example: `: metal event stream\nretry: 2000\n\nid: ${event.cursor}\nevent: ${event.type}\ndata: ${JSON.stringify(event)}\n\n` +
              `event: error\ndata: ${JSON.stringify({ code: 'ABORTED', message: serverStopping(BigInt(event.cursor)).message, requestId: EXAMPLE_REQUEST_ID, details: serverStopping(BigInt(event.cursor)).extensions.details })}\n\n`,
          },
        },
      },
      '400': error('INVALID_INPUT: an unknown channel or parameter, a malformed cursor, or one older than the retention', 'INVALID_INPUT',
        'query.channel: must be one of metal, fabric, provision, all', { field: 'query.channel' }),
      '401': error(`UNAUTHENTICATED: ${CODE_MEANING.UNAUTHENTICATED}`, 'UNAUTHENTICATED', 'a valid bearer token is required'),
      '422': error('INVALID_CONFIG: this process serves no event streams', 'INVALID_CONFIG', 'this process serves no event streams (ROLE=worker)'),
      '500': error(`INTERNAL: ${CODE_MEANING.INTERNAL}`, 'INTERNAL', 'internal error'),
      '503': {
        description: `STORAGE_UNAVAILABLE: ${CODE_MEANING.STORAGE_UNAVAILABLE}. ${DATABASE_UNAVAILABLE_MEANING}`,
        content: errorContent({ UPSTREAM_UNAVAILABLE: databaseExample('unavailable'), STORAGE_UNAVAILABLE: databaseExample('storage') }),
        headers: { 'Retry-After': { description: 'Seconds to wait before trying again', schema: { type: 'integer' }, example: DATABASE_RETRY_AFTER_SECONDS } },
      },
    },
  };
}
