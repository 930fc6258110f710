import fc from 'fast-check';
import { fromJsonSchema, type Shape } from './shape';
import { applyMutations, encodeJson, hostileString, idPrefixFor, mutations, validValue, type IdPool, type Mutation, type Val } from './values';
import { actorArb, authHeader, type Actor, type World } from './world';
import type { RawRequest } from './http';

type JsonSchema = Record<string, unknown>;

/** One METHOD /path of /openapi.json, with what its parameters and body look like. */
export interface RestTarget {
  name: string;
  method: string;
  path: string;
  pathParams: { name: string; shape: Shape }[];
  queryParams: { name: string; shape: Shape }[];
  headerParams: { name: string; shape: Shape }[];
  body?: Shape;
}

export function restTargets(doc: Record<string, unknown>): RestTarget[] {
  const components = ((doc.components as JsonSchema | undefined)?.schemas ?? {}) as Record<string, JsonSchema>;
  const out: RestTarget[] = [];
  for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, JsonSchema>>)) {
    for (const [method, op] of Object.entries(item)) {
      const params = (op.parameters ?? []) as { name: string; in: string; schema?: JsonSchema }[];
      const of = (where: string) => params.filter((p) => p.in === where).map((p) => ({ name: p.name, shape: fromJsonSchema(p.schema ?? {}, p.name, components) }));
      const bodySchema = ((op.requestBody as JsonSchema | undefined)?.content as Record<string, { schema?: JsonSchema }> | undefined)?.['application/json']?.schema;
      out.push({
        name: `${method.toUpperCase()} ${path}`,
        method: method.toUpperCase(),
        path,
        pathParams: of('path'),
        queryParams: of('query'),
        headerParams: of('header'),
        ...(bodySchema ? { body: fromJsonSchema(bodySchema, 'body', components) } : {}),
      });
    }
  }
  return out;
}

/** What one REST case sends; plain data, so fast-check can print and replay it. */
export interface RestCase {
  actor: Actor;
  authPick: number;
  method: string;
  params: Record<string, { raw: string } | { value: string }>;
  query: [string, { raw: string } | { value: string }][];
  headers: Record<string, string>;
  body:
    | { kind: 'none' }
    | { kind: 'json'; value: Val; mutations: Mutation[] }
    | { kind: 'bytes'; bytes: Buffer; label: string };
  contentType?: string;
  /** how the input was made, for grouping findings */
  input: string;
}

/** Path segments that have broken routers: NUL, bad escapes, traversal, overlong UTF-8, a lone surrogate. */
const HOSTILE_SEGMENTS = [
  '%00', 'a%00b', '%ZZ', '%', '%E0%A4%A', '..', '%2e%2e', '%2F', 'a%2Fb', '%ED%A0%80', '%C0%80', '%FF', '%20', '~', '.',
  "'", '%22', '%3Cscript%3E', 'node_%00', '%u0000',
];

/** The UTF-8 (or WTF-8, for a lone surrogate) bytes of a string, percent-encoded: what a client puts in a URL. */
export function percentEncode(text: string): string {
  let out = '';
  for (let i = 0; i < text.length; i += 1) {
    const unit = text.charCodeAt(i);
    let bytes: number[];
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      bytes = [...Buffer.from(text.slice(i, i + 2), 'utf8')];
      i += 1;
    } else if (unit >= 0xd800 && unit <= 0xdfff) {
      bytes = [0xe0 | (unit >> 12), 0x80 | ((unit >> 6) & 0x3f), 0x80 | (unit & 0x3f)];
    } else {
      const ch = text[i]!;
      if (/[A-Za-z0-9\-._~]/.test(ch)) {
        out += ch;
        continue;
      }
      bytes = [...Buffer.from(ch, 'utf8')];
    }
    out += bytes.map((b) => '%' + b.toString(16).toUpperCase().padStart(2, '0')).join('');
  }
  return out;
}

function idFor(target: RestTarget): Shape {
  // /api/compute/pools/{id}/policy: the collection before the parameter says what the id names.
  const collection = target.path.replace(/\/\{id\}.*$/, '').split('/').pop() ?? '';
  const name = `${collection.replace(/s$/, '')}Id`;
  return { kind: 'string', name: idPrefixFor(name) ? name : 'id', id: true };
}

function paramArb(shape: Shape, ids: IdPool): fc.Arbitrary<{ raw: string } | { value: string }> {
  // Mostly valid, so the body behind it gets a say; the URL's own hostility a third of the time.
  return fc.oneof(
    { arbitrary: validValue(shape, [shape.name], ids).map((v) => ({ value: String(v) })), weight: 40 },
    { arbitrary: fc.constantFrom(...HOSTILE_SEGMENTS).map((raw) => ({ raw })), weight: 10 },
    { arbitrary: hostileString.map((value) => ({ value })), weight: 10 },
    { arbitrary: fc.constantFrom(2000, 8000).map((n) => ({ value: 'n'.repeat(n) })), weight: 2 },
    { arbitrary: fc.constant({ raw: 'q'.repeat(20_000) }), weight: 1 },
  );
}

const MALFORMED_BODIES: [string, string][] = [
  ['{', 'truncated'], ['{"a":', 'truncated'], ['null', 'null'], ['[]', 'array'], ['"text"', 'string'], ['1', 'number'], ['true', 'boolean'],
  ['', 'empty'], ['\ufeff{}', 'BOM'], ['{}x', 'trailing garbage'], ["{'a':1}", 'single quotes'], ['{"a":1,}', 'trailing comma'],
  ['{"nodeId":"a","nodeId":"b"}', 'duplicate key'], ['{"__proto__":{"admin":true}}', '__proto__'], ['{"a":NaN}', 'NaN'],
  ['{"a":"\\ud800"}', 'escaped lone surrogate'], ['{"a":"\\u0000"}', 'escaped NUL'], ['{"a":"\u0000"}', 'raw NUL in string'],
];
const INVALID_UTF8: [number[], string][] = [
  [[0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d], 'invalid UTF-8 0xff'],
  [[0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xed, 0xa0, 0x80, 0x22, 0x7d], 'CESU-8 surrogate'],
  [[0xfe, 0xff, 0x00, 0x7b, 0x00, 0x7d], 'UTF-16 BOM'],
];

const rawBodyArb: fc.Arbitrary<RestCase['body']> = fc.oneof(
  fc.constantFrom(...MALFORMED_BODIES).map(([text, label]) => ({ kind: 'bytes' as const, bytes: Buffer.from(text, 'utf8'), label })),
  fc.constantFrom(...INVALID_UTF8).map(([bytes, label]) => ({ kind: 'bytes' as const, bytes: Buffer.from(bytes), label })),
  fc.constantFrom(10_000, 50_000).map((n) => ({ kind: 'bytes' as const, bytes: Buffer.from('['.repeat(n) + ']'.repeat(n)), label: `${n}-deep body` })),
  fc.constant({ kind: 'bytes' as const, bytes: Buffer.from(`{"a":"${'z'.repeat(1_200_000)}"}`), label: '1.2 MB body' }),
);

/**
 * X-Request-Id is also power's idempotency key: a few fixed values, so the same id comes back
 * with another node or another verb, next to ones the server must not take as ids at all.
 */
export const requestIdHeader: fc.Arbitrary<Record<string, string>> = fc.oneof(
  { arbitrary: fc.constant({}), weight: 6 },
  { arbitrary: fc.constantFrom('fuzz-req-1', 'fuzz-req-2', 'x'.repeat(200), '../..', 'a b', 'é').map((id) => ({ 'x-request-id': id })), weight: 1 },
);

const CONTENT_TYPES = ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/json; charset=utf-16', 'application/jsonx', 'APPLICATION/JSON', 'application/json;', ''];

/** Valid-ish requests, then the same with mutated bodies, hostile parameters, raw bytes and wrong headers. */
export function restCaseArb(target: RestTarget, world: World): fc.Arbitrary<RestCase> {
  const ids = world.ids;
  const params: Record<string, fc.Arbitrary<{ raw: string } | { value: string }>> = {};
  for (const p of target.pathParams) params[p.name] = paramArb(p.name === 'id' ? idFor(target) : p.shape, ids);
  const queryEntries = fc
    .tuple(
      fc.subarray(target.queryParams),
      fc.oneof(
        { arbitrary: fc.constant<string[]>([]), weight: 8 },
        { arbitrary: fc.array(fc.constantFrom('extra', 'first', 'a[]', '%00', 'siteId'), { minLength: 1, maxLength: 2 }), weight: 2 },
      ),
    )
    .chain(([chosen, extras]) =>
      fc.tuple(
        ...chosen.map((p) => paramArb(p.shape, ids).map((v) => [p.name, v] as [string, { raw: string } | { value: string }])),
        ...extras.map((name) => paramArb({ kind: 'string', name }, ids).map((v) => [name, v] as [string, { raw: string } | { value: string }])),
      ),
    );
  const headers = fc
    .tuple(
      fc.subarray(target.headerParams).chain((chosen) =>
        fc.tuple(...chosen.map((h) => fc.oneof(fc.constantFrom('0', '1', '99999999999999999999', 'abc', '-1', ''), fc.stringMatching(/^[ -~]{0,20}$/)).map((v) => [h.name, v] as const))),
      ),
      requestIdHeader,
    )
    .map(([pairs, requestId]) => ({ ...Object.fromEntries(pairs), ...requestId }));

  let body: fc.Arbitrary<{ body: RestCase['body']; input: string; contentType?: string }>;
  if (target.body) {
    const shape = target.body;
    const valid = validValue(shape, [], ids);
    body = fc.oneof(
      { arbitrary: valid.map((value) => ({ body: { kind: 'json' as const, value, mutations: [] }, input: 'valid-ish body' })), weight: 25 },
      {
        arbitrary: valid.chain((value) =>
          mutations(value, shape, ids).map((list) => ({ body: { kind: 'json' as const, value, mutations: list }, input: describeMutations(list) })),
        ),
        weight: 55,
      },
      { arbitrary: rawBodyArb.map((b) => ({ body: b, input: `raw body: ${b.kind === 'bytes' ? b.label : ''}` })), weight: 12 },
      {
        arbitrary: fc.tuple(valid, fc.constantFrom(...CONTENT_TYPES)).map(([value, contentType]) => ({
          body: { kind: 'json' as const, value, mutations: [] },
          contentType,
          input: `content-type ${contentType || '(none)'}`,
        })),
        weight: 5,
      },
    );
  } else {
    body = fc.oneof(
      { arbitrary: fc.constant({ body: { kind: 'none' as const }, input: 'no body' }), weight: 12 },
      { arbitrary: rawBodyArb.map((b) => ({ body: b, input: `stray body: ${b.kind === 'bytes' ? b.label : ''}` })), weight: 1 },
    );
  }
  const method = fc.oneof(
    { arbitrary: fc.constant(target.method), weight: 30 },
    { arbitrary: fc.constantFrom('GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'HEAD'), weight: 1 },
  );
  return fc
    .record({ actor: actorArb, authPick: fc.nat(20), method, params: fc.record(params), query: queryEntries, headers, b: body })
    .map(({ b, query, ...rest }): RestCase => {
      const hostileParam = Object.values(rest.params).some((p) => 'raw' in p || p.value.length > 100 || /[^\w-]/.test(p.value));
      const input = [b.input, hostileParam ? 'hostile path parameter' : '', query.length ? `query ${query.map(([k]) => k).join('&')}` : '']
        .filter(Boolean)
        .join('; ');
      return { ...rest, query, body: b.body, ...(b.contentType !== undefined ? { contentType: b.contentType } : {}), input };
    });
}

function describeMutations(list: Mutation[]): string {
  return list.map((m) => `${m.why} at ${m.at.join('.') || 'body'}${m.op === 'add' ? `.${m.key}` : ''}`).join(', ');
}

const encodeParam = (p: { raw: string } | { value: string }) => ('raw' in p ? p.raw : percentEncode(p.value));

export function restRequest(target: RestTarget, c: RestCase, world: World): RawRequest {
  let path = target.path;
  for (const [name, value] of Object.entries(c.params)) path = path.replace(`{${name}}`, encodeParam(value));
  if (c.query.length) path += '?' + c.query.map(([k, v]) => `${percentEncode(k)}=${encodeParam(v)}`).join('&');
  const headers: Record<string, string> = { ...authHeader(world, c.actor, c.authPick), ...c.headers };
  let body: Buffer | undefined;
  if (c.body.kind === 'json') {
    body = encodeJson(applyMutations(c.body.value, c.body.mutations));
    headers['content-type'] = 'application/json';
  } else if (c.body.kind === 'bytes') {
    body = c.body.bytes;
    headers['content-type'] = 'application/json';
  }
  if (c.contentType !== undefined) {
    if (c.contentType) headers['content-type'] = c.contentType;
    else delete headers['content-type'];
  }
  return { method: c.method, path, headers, body };
}

/** Whether an anonymous case reached the route itself (then it must be 401, whatever else is wrong). */
export function anonymousOnRoute(target: RestTarget, c: RestCase): boolean {
  if (c.actor !== 'none' || c.method !== target.method) return false;
  // A traversal or an encoded slash may route elsewhere (or nowhere): that is not this route's answer.
  return !Object.values(c.params).some((p) => ('raw' in p ? /\.|%2f|^%?$/i.test(p.raw) : p.value === '' || p.value === '.' || p.value === '..' || p.value.includes('/')));
}

