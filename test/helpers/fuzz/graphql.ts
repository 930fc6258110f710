import fc from 'fast-check';
import {
  getNamedType,
  isInterfaceType,
  isLeafType,
  isNonNullType,
  isObjectType,
  isUnionType,
  type GraphQLField,
  type GraphQLOutputType,
  type GraphQLSchema,
} from 'graphql';
import { fromGraphqlInput, type Shape } from './shape';
import { applyMutations, encodeJson, hostileString, mutations, Raw, validValue, type Mutation, type Val } from './values';
import { actorArb, authHeader, type Actor, type World } from './world';
import type { RawRequest } from './http';
import { requestIdHeader } from './rest';

/** One root field of the schema, with its arguments as one object shape (what `variables` carries). */
export interface GraphqlTarget {
  name: string;
  operation: 'query' | 'mutation' | 'subscription';
  field: string;
  args: { name: string; type: string; shape: Shape }[];
  argsShape: Extract<Shape, { kind: 'object' }>;
  selection: string;
}

/** A small selection of the return type: scalars of the first two levels, enough to run the resolvers. */
function selectionOf(type: GraphQLOutputType, depth = 0): string {
  const named = getNamedType(type);
  if (isLeafType(named)) return '';
  if (isUnionType(named) || depth > 1) return '{ __typename }';
  const fields = isObjectType(named) || isInterfaceType(named) ? Object.values(named.getFields()) : [];
  const parts = ['__typename'];
  for (const f of fields) {
    if (f.args.some((a) => isNonNullType(a.type))) continue;
    const inner = getNamedType(f.type);
    if (isLeafType(inner)) parts.push(f.name);
    else if (depth < 1 && parts.length < 12) parts.push(`${f.name} ${selectionOf(f.type, depth + 1)}`);
  }
  return `{ ${parts.join(' ')} }`;
}

export function graphqlTargets(schema: GraphQLSchema): GraphqlTarget[] {
  const roots = [
    ['query', schema.getQueryType()],
    ['mutation', schema.getMutationType()],
    ['subscription', schema.getSubscriptionType()],
  ] as const;
  const out: GraphqlTarget[] = [];
  for (const [operation, root] of roots) {
    if (!root) continue;
    for (const field of Object.values(root.getFields()) as GraphQLField<unknown, unknown>[]) {
      const args = field.args.map((a) => ({ name: a.name, type: a.type.toString(), shape: fromGraphqlInput(a.type, a.name) }));
      out.push({
        name: `${operation} ${field.name}`,
        operation,
        field: field.name,
        args,
        argsShape: {
          kind: 'object',
          name: 'variables',
          properties: Object.fromEntries(args.map((a) => [a.name, a.shape])),
          required: field.args.filter((a) => isNonNullType(a.type) && a.defaultValue === undefined).map((a) => a.name),
          additional: false,
        },
        selection: selectionOf(field.type),
      });
    }
  }
  return out;
}

export interface GraphqlCase {
  actor: Actor;
  authPick: number;
  mode: 'variables' | 'literals';
  variables: Val;
  mutations: Mutation[];
  /** an argument written into the query text as a hostile string literal (NUL, surrogate escapes) */
  literalEscape?: { arg: string; text: string };
  csrf: boolean;
  requestId: Record<string, string>;
  input: string;
}

/** A GraphQL literal of a value; enums bare where the shape says enum. Raw text goes in as it is. */
export function printLiteral(value: Val, shape: Shape | undefined): string {
  if (value instanceof Raw) return value.bytes.toString('latin1');
  if (value === null) return 'null';
  if (Array.isArray(value)) {
    const items = shape?.kind === 'array' ? shape.items : shape?.kind === 'anyOf' ? (shape.options.find((o) => o.kind === 'array') as Extract<Shape, { kind: 'array' }> | undefined)?.items : undefined;
    return `[${value.map((v) => printLiteral(v, items)).join(', ')}]`;
  }
  if (typeof value === 'object') {
    const obj = shape?.kind === 'object' ? shape : shape?.kind === 'anyOf' ? (shape.options.find((o) => o.kind === 'object') as Extract<Shape, { kind: 'object' }> | undefined) : undefined;
    const name = (k: string) => (/^[_A-Za-z][_0-9A-Za-z]*$/.test(k) ? k : `bad${k.length}`);
    return `{${Object.entries(value).map(([k, v]) => `${name(k)}: ${printLiteral(v, obj?.properties[k])}`).join(', ')}}`;
  }
  if (typeof value === 'string') {
    const enumShape = shape?.kind === 'string' ? shape : shape?.kind === 'anyOf' ? (shape.options.find((o) => o.kind === 'string') as Extract<Shape, { kind: 'string' }> | undefined) : undefined;
    if (enumShape?.enum?.includes(value) && /^[_A-Za-z][_0-9A-Za-z]*$/.test(value)) return value;
    return JSON.stringify(value);
  }
  return String(value);
}

/** GraphQL string literals JSON cannot carry unharmed: an escaped NUL, lone surrogate escapes, a block string with NUL. */
const LITERAL_ESCAPES = ['"a\\u0000b"', '"\\ud800"', '"x\\udc00"', '"\\uD83D"', '"""a\u0000b"""', '"\\u{0}"', '"\\u{D800}"', '"a\u0000b"', '"\\x00"'];

export function graphqlCaseArb(target: GraphqlTarget, world: World): fc.Arbitrary<GraphqlCase> {
  const valid = validValue(target.argsShape, [], world.ids);
  const mutated = valid.chain((value) => mutations(value, target.argsShape, world.ids).map((list) => ({ value, list })));
  const base = fc.record({ actor: actorArb, authPick: fc.nat(20), requestId: requestIdHeader, csrf: fc.oneof({ arbitrary: fc.constant(true), weight: 19 }, { arbitrary: fc.constant(false), weight: 1 }) });
  const stringArgs = target.args.filter((a) => a.shape.kind === 'string' || (a.shape.kind === 'anyOf' && a.shape.options.some((o) => o.kind === 'string')));
  const modes: fc.WeightedArbitrary<Omit<GraphqlCase, 'actor' | 'authPick' | 'csrf' | 'requestId'>>[] = [
    { arbitrary: valid.map((variables) => ({ mode: 'variables' as const, variables, mutations: [], input: 'valid-ish variables' })), weight: 20 },
    { arbitrary: mutated.map(({ value, list }) => ({ mode: 'variables' as const, variables: value, mutations: list, input: describe(list, 'variables') })), weight: 50 },
    { arbitrary: valid.map((variables) => ({ mode: 'literals' as const, variables, mutations: [], input: 'valid-ish literals' })), weight: 8 },
    { arbitrary: mutated.map(({ value, list }) => ({ mode: 'literals' as const, variables: value, mutations: list, input: describe(list, 'literals') })), weight: 15 },
  ];
  if (stringArgs.length) {
    modes.push({
      arbitrary: fc.tuple(valid, fc.constantFrom(...stringArgs.map((a) => a.name)), fc.oneof(fc.constantFrom(...LITERAL_ESCAPES), hostileString.map((s) => JSON.stringify(s))))
        .map(([variables, arg, text]) => ({ mode: 'literals' as const, variables, mutations: [], literalEscape: { arg, text }, input: `literal ${arg} = ${JSON.stringify(text).slice(0, 40)}` })),
      weight: 8,
    });
  }
  return fc.tuple(base, fc.oneof(...modes)).map(([b, m]) => ({ ...b, ...m }));
}

/** Only valid-ish variables, as the admin or the tenant: what a race needs to get past the checks. */
export function graphqlValidCaseArb(target: GraphqlTarget, world: World): fc.Arbitrary<GraphqlCase> {
  return fc.record({
    actor: fc.constantFrom<Actor>('admin', 'admin', 'tenant'),
    authPick: fc.constant(0),
    mode: fc.constant('variables' as const),
    variables: validValue(target.argsShape, [], world.ids),
    mutations: fc.constant([]),
    csrf: fc.constant(true),
    requestId: fc.constant({}),
    input: fc.constant('valid-ish variables'),
  });
}

function describe(list: Mutation[], where: string): string {
  return `${where}: ` + list.map((m) => `${m.why} at ${m.at.join('.') || '(all)'}${m.op === 'add' ? `.${m.key}` : ''}`).join(', ');
}

export function graphqlDocument(target: GraphqlTarget, c: GraphqlCase): { query: string; variables?: Val } {
  const values = applyMutations(c.variables, c.mutations);
  const object = values && typeof values === 'object' && !Array.isArray(values) && !(values instanceof Raw) ? values : {};
  if (c.mode === 'variables') {
    const declared = target.args.map((a) => `$${a.name}: ${a.type}`);
    const passed = target.args.map((a) => `${a.name}: $${a.name}`);
    const query = `${target.operation} Fuzz${declared.length ? `(${declared.join(', ')})` : ''} { ${target.field}${passed.length ? `(${passed.join(', ')})` : ''} ${target.selection} }`;
    return { query, variables: values };
  }
  const args = Object.entries(object).map(([name, v]) => {
    if (c.literalEscape?.arg === name) return `${name}: ${c.literalEscape.text}`;
    return `${/^[_A-Za-z][_0-9A-Za-z]*$/.test(name) ? name : 'bad'}: ${printLiteral(v, target.argsShape.properties[name])}`;
  });
  if (c.literalEscape && !(c.literalEscape.arg in object)) args.push(`${c.literalEscape.arg}: ${c.literalEscape.text}`);
  return { query: `${target.operation} { ${target.field}${args.length ? `(${args.join(', ')})` : ''} ${target.selection} }` };
}

export function graphqlRequest(target: GraphqlTarget, c: GraphqlCase, world: World): RawRequest {
  const { query, variables } = graphqlDocument(target, c);
  const body = Buffer.concat([
    Buffer.from(`{"query":${JSON.stringify(query)}`),
    ...(variables !== undefined ? [Buffer.from(',"variables":'), encodeJson(variables)] : []),
    Buffer.from('}'),
  ]);
  return {
    method: 'POST',
    path: '/graphql',
    headers: {
      'content-type': 'application/json',
      accept: 'application/graphql-response+json, application/json',
      ...(c.csrf ? { 'x-graphql-csrf': '1' } : {}),
      ...c.requestId,
      ...authHeader(world, c.actor, c.authPick),
    },
    body,
  };
}

// ---- whole-request cases: what no single field owns --------------------------------------------

export interface EnvelopeCase {
  actor: Actor;
  authPick: number;
  label: string;
  method: string;
  path: string;
  contentType?: string;
  body?: Buffer;
}

const deepVariables = (n: number) => `{"query":"query($v: JSON) { __typename }","variables":{"v":${'['.repeat(n)}${']'.repeat(n)}}}`;
const deepObjectVariables = (n: number) => `{"query":"mutation($i: MetalEnrollInput!) { enrollNode(input: $i) { node { id } } }","variables":{"i":${'{"bmc":'.repeat(n)}1${'}'.repeat(n)}}}`;

/** Malformed GraphQL requests: bad JSON, wrong types in the envelope, batches, GET mutations, deep variables. */
export function envelopeCaseArb(): fc.Arbitrary<EnvelopeCase> {
  const post = (label: string, body: string | Buffer, contentType = 'application/json') => ({ label, method: 'POST', path: '/graphql', contentType, body: Buffer.isBuffer(body) ? body : Buffer.from(body) });
  const cases = [
    post('malformed JSON', '{"query":'),
    post('empty body', ''),
    post('JSON null', 'null'),
    post('JSON array of nothing', '[]'),
    post('batched operations', '[{"query":"{ __typename }"},{"query":"{ viewer { tokenId } }"}]'),
    post('query is a number', '{"query":1}'),
    post('query is an object', '{"query":{"a":1}}'),
    post('variables is a string', '{"query":"{ __typename }","variables":"{}"}'),
    post('variables is an array', '{"query":"{ __typename }","variables":[1]}'),
    post('operationName unknown', '{"query":"query A { __typename }","operationName":"B"}'),
    post('operationName is a number', '{"query":"query A { __typename }","operationName":5}'),
    post('extensions junk', '{"query":"{ __typename }","extensions":{"persistedQuery":{"version":1,"sha256Hash":"abc"}}}'),
    post('NUL in the document', '{"query":"{ __typename \\u0000 }"}'),
    post('lone surrogate in the document', '{"query":"{ __typename } # \\ud800"}'),
    post('NUL in a string literal', '{"query":"{ node(id: \\"a\\\\u0000b\\") { id } }"}'),
    post('invalid UTF-8 in the document', Buffer.concat([Buffer.from('{"query":"{ node(id: \\"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('\\") { id } }"}')])),
    post('invalid UTF-8 byte', Buffer.from([0x7b, 0x22, 0x71, 0x75, 0x65, 0x72, 0x79, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d])),
    post('10,000-deep variables (array)', deepVariables(10_000)),
    post('100,000-deep variables (array)', deepVariables(100_000)),
    post('10,000-deep variables (input object)', deepObjectVariables(10_000)),
    post('deep selection', `{"query":"{ ${'viewer { grants { '.repeat(200)}${'} } '.repeat(200)} }"}`),
    post('many aliases', `{"query":"{ ${Array.from({ length: 2000 }, (_, i) => `a${i}: __typename`).join(' ')} }"}`),
    post('huge query', `{"query":"{ __typename } #${'x'.repeat(900_000)}"}`),
    post('1.2 MB body', `{"query":"{ __typename }","variables":{"a":"${'x'.repeat(1_200_000)}"}}`),
    post('text/plain', '{"query":"{ viewer { tokenId } }"}', 'text/plain'),
    post('form encoded', 'query=%7B__typename%7D', 'application/x-www-form-urlencoded'),
    post('graphql content type', '{ viewer { tokenId } }', 'application/graphql'),
    post('multipart without boundary', '--x\r\n', 'multipart/form-data'),
    post('charset utf-16', '{"query":"{ __typename }"}', 'application/json; charset=utf-16'),
    post('introspection', JSON.stringify({ query: '{ __schema { types { name } } }' })),
    post('subscription over plain POST', JSON.stringify({ query: 'subscription { events { cursor } }' })),
    post('two operations, no name', JSON.stringify({ query: 'query A { __typename } query B { __typename }' })),
    post('fragment cycle', JSON.stringify({ query: 'query { viewer { ...A } } fragment A on Viewer { ...B } fragment B on Viewer { ...A }' })),
    post('directive junk', JSON.stringify({ query: '{ __typename @skip(if: "yes") @include(if: true) @fuzz }' })),
    { label: 'GET mutation', method: 'GET', path: `/graphql?query=${encodeURIComponent('mutation { createTenant(input: {name: "x"}) { id } }')}` },
    { label: 'GET with NUL', method: 'GET', path: '/graphql?query=%7B%20node(id%3A%20%22%00%22)%20%7B%20id%20%7D%20%7D' },
    { label: 'GET with bad escape', method: 'GET', path: '/graphql?query=%ZZ' },
    { label: 'GET deep variables', method: 'GET', path: `/graphql?query=${encodeURIComponent('query($v: JSON) { __typename }')}&variables=${'%5B'.repeat(3000)}${'%5D'.repeat(3000)}` },
    { label: 'PUT', method: 'PUT', path: '/graphql', contentType: 'application/json', body: Buffer.from('{"query":"{ __typename }"}') },
    { label: 'DELETE', method: 'DELETE', path: '/graphql' },
  ];
  return fc.record({ actor: actorArb, authPick: fc.nat(20), c: fc.constantFrom(...cases) }).map(({ actor, authPick, c }) => ({ actor, authPick, ...c }));
}

export function envelopeRequest(c: EnvelopeCase, world: World): RawRequest {
  return {
    method: c.method,
    path: c.path,
    headers: {
      accept: 'application/graphql-response+json, application/json',
      'x-graphql-csrf': '1',
      ...(c.contentType ? { 'content-type': c.contentType } : {}),
      ...authHeader(world, c.actor, c.authPick),
    },
    ...(c.body ? { body: c.body } : {}),
  };
}

