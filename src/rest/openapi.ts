import type { Route } from './routes';
import { components } from './schemas';

const ERROR_RESPONSES: Record<string, string> = {
  '400': 'INVALID_INPUT: malformed JSON, unknown field, wrong type (the message names the field)',
  '401': 'UNAUTHENTICATED: missing, unknown, revoked or expired bearer token',
  '403': 'PERMISSION_DENIED: the token lacks the permission on this scope',
  '404': 'NOT_FOUND: no such resource for this tenant',
  '409': 'CONFLICT or INVALID_STATE',
  '413': 'body over 1 MiB',
  '422': 'INVALID_CONFIG, UNSUPPORTED or UNVERIFIED_WIPE',
  '500': 'INTERNAL (quote the requestId)',
};

/** The OpenAPI 3.1 document, generated from the same route table the router serves. */
export function openApiDocument(routes: Route[], version: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) {
    const parameters = [
      ...Object.entries(route.params ?? {}).map(([name, schema]) => ({ name, in: 'path', required: true, schema })),
      ...Object.entries(route.query?.properties ?? {}).map(([name, schema]) => ({ name, in: 'query', required: false, schema })),
    ];
    const errors = Object.fromEntries(
      Object.entries(ERROR_RESPONSES)
        .filter(([status]) => status !== '413' || route.body)
        .map(([status, description]) => [status, { description, content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } }]),
    );
    (paths[route.path] ??= {})[route.method.toLowerCase()] = {
      operationId: route.operation,
      summary: route.summary,
      ...(route.description ? { description: route.description } : {}),
      tags: [route.tag],
      ...(parameters.length ? { parameters } : {}),
      ...(route.body ? { requestBody: { required: true, content: { 'application/json': { schema: route.body } } } } : {}),
      responses: {
        [String(route.successStatus ?? 200)]: { description: 'OK', content: { 'application/json': { schema: route.response } } },
        ...errors,
      },
      'x-graphql-operation': route.operation,
    };
  }
  paths['/api/events'] = { get: eventStreamOperation() };
  return {
    openapi: '3.1.0',
    info: {
      title: 'Metal control plane REST API',
      version,
      description: 'REST compatibility routes. Each executes a GraphQL operation of the same service (see x-graphql-operation); /graphql is the full API.',
    },
    servers: [{ url: '/' }],
    security: [{ bearer: [] }],
    tags: [...new Set([...routes.map((r) => r.tag), 'events'])].map((name) => ({ name })),
    paths,
    components: {
      schemas: components,
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'An API token (see README: admin token)' } },
    },
  };
}

const escape = (text: string) => text.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);

/** A plain, self-contained docs page (no CDN: this service often runs where the internet is not). */
export function docsPage(routes: Route[]): string {
  const rows = routes.map((r) => {
    const params = [
      ...Object.keys(r.params ?? {}).map((p) => `<code>${escape(p)}</code> (path)`),
      ...Object.keys(r.query?.properties ?? {}).map((p) => `<code>${escape(p)}</code> (query)`),
    ].join(', ');
    const body = r.body ? `<details><summary>body</summary><pre>${escape(JSON.stringify(r.body, null, 2))}</pre></details>` : '';
    return `<section><h3><span class="m">${r.method}</span> <code>${escape(r.path)}</code></h3>
<p>${escape(r.summary)}${r.description ? ` — ${escape(r.description)}` : ''}</p>
${params ? `<p>Parameters: ${params}</p>` : ''}${body}
<p class="op">GraphQL operation: <code>${escape(r.operation)}</code></p></section>`;
  });
  return `<!doctype html><html><head><meta charset="utf-8"><title>Metal control plane REST API</title>
<style>body{font:15px/1.5 system-ui,sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}
section{border-top:1px solid #ddd;padding:.5em 0}.m{background:#234;color:#fff;padding:0 .4em;border-radius:3px;font-size:.85em}
pre{background:#f6f6f6;padding:.5em;overflow:auto}.op{color:#666;font-size:.9em}</style></head><body>
<h1>Metal control plane REST API</h1>
<p>Authenticate with <code>Authorization: Bearer &lt;token&gt;</code>. Errors are
<code>{"error": {"code", "message", "requestId"}}</code>. Machine-readable: <a href="/openapi.json">/openapi.json</a> (OpenAPI 3.1).
The full API is GraphQL at <a href="/graphql">/graphql</a>.</p>
${rows.join('\n')}
</body></html>`;
}

/** The REST event stream (src/events/sse.ts): not a GraphQL-backed route, so described here. */
function eventStreamOperation(): Record<string, unknown> {
  const error = (description: string) => ({ description, content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } });
  return {
    operationId: 'EventStream',
    summary: 'Server-Sent Events: the events the token may read, replayed after a cursor, then live',
    description:
      'Each message has `id: <cursor>`, `event: <name>` and `data: <JSON event>`. Names: channel metal uses the event type ' +
      '(node.enrolled, node.provision.<state>, ...); fabric uses fabric_switch; provision uses provision_step. A reconnect with ' +
      'Last-Event-ID (EventSource sends it) resumes after that event. The server ends a stream with `event: error` ' +
      '(data: code, message, details.lastCursor): ABORTED when the reader fell too far behind, UNAUTHENTICATED when the token was revoked.',
    tags: ['events'],
    parameters: [
      { name: 'channel', in: 'query', required: false, schema: { type: 'string', enum: ['metal', 'fabric', 'provision', 'all'], default: 'metal' } },
      { name: 'after', in: 'query', required: false, schema: { type: 'string', pattern: '^[0-9]{1,19}$' }, description: 'Replay the events after this cursor first.' },
      { name: 'nodeId', in: 'query', required: false, schema: { type: 'string' }, description: 'Only the events of this node.' },
      { name: 'Last-Event-ID', in: 'header', required: false, schema: { type: 'string' }, description: 'Wins over after: the cursor of the last event received.' },
    ],
    responses: {
      '200': { description: 'An event stream', content: { 'text/event-stream': { schema: { type: 'string' } } } },
      '400': error('INVALID_INPUT: an unknown channel or parameter, a malformed cursor, or one older than the retention'),
      '401': error('UNAUTHENTICATED'),
    },
  };
}
