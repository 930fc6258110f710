import fc from 'fast-check';
import { isSecretPath, type Path, type Shape } from './shape';

/**
 * Text sent as-is where a JSON value would go: what JSON.stringify cannot produce (10,000-deep
 * nesting, 1e400, invalid UTF-8 bytes inside a string). Built by repetition, never by recursion.
 */
export class Raw {
  constructor(readonly bytes: Buffer, readonly label: string) {}
  static text(text: string, label: string) {
    return new Raw(Buffer.from(text, 'utf8'), label);
  }
}

export type Val = null | boolean | number | string | Raw | Val[] | { [key: string]: Val };

/** What generators need to know about the world: real ids to hit, and how to mark a secret. */
export interface IdPool {
  /** ids of the acting tenant (and of the platform admin's view), by prefix: node, pool, site, ... */
  mine: Record<string, string[]>;
  /** ids of another tenant, by prefix */
  theirs: Record<string, string[]>;
}

/** Every generated credential starts with this, so a scan of responses and logs finds any echo. */
export const SECRET_MARKER = 'FuzzSecret';

export const secretArb = fc
  .tuple(fc.constantFrom('', 'Pw-', 'root:'), fc.stringMatching(/^[A-Za-z0-9]{6,12}$/))
  .map(([prefix, tail]) => `${prefix}${SECRET_MARKER}${tail}`);

const uuidTail = fc.uuid({ version: 7 });

/** Id fields hit real rows most of the time: the actor's, another tenant's, a missing one, garbage. */
function idArb(name: string, ids: IdPool): fc.Arbitrary<string> {
  const prefix = idPrefixFor(name);
  const pick = (source: Record<string, string[]>, p: string | undefined) => {
    const list = p ? source[p] ?? [] : Object.values(source).flat();
    return list.length ? fc.constantFrom(...list) : null;
  };
  const options: fc.WeightedArbitrary<string>[] = [];
  const mine = pick(ids.mine, prefix);
  const theirs = pick(ids.theirs, prefix);
  const anyMine = pick(ids.mine, undefined);
  if (mine) options.push({ arbitrary: mine, weight: 50 });
  if (theirs) options.push({ arbitrary: theirs, weight: 20 });
  if (anyMine) options.push({ arbitrary: anyMine, weight: 8 });
  options.push({ arbitrary: uuidTail.map((u) => `${prefix ?? 'node'}_${u}`), weight: 8 });
  options.push({ arbitrary: fc.constantFrom('', 'not-an-id', 'node_', 'node_x', 'ten_00000000-0000-0000-0000-000000000000', 'TOK_1'), weight: 6 });
  return fc.oneof(...options);
}

export function idPrefixFor(name: string): string | undefined {
  const n = name.replace(/Ids?$/, '').toLowerCase();
  const table: Record<string, string> = {
    node: 'node', pool: 'pool', site: 'site', tenant: 'ten', profile: 'dpr', batch: 'bat', command: 'cmd', run: 'wf', job: 'wf', token: 'tok', agent: 'agt',
  };
  return table[n];
}

const isIdName = (name: string) => /(^id$|Ids?$)/.test(name) && name !== 'keyId';

const macArb = fc.oneof(
  fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 6, maxLength: 6 }).map((b) => b.map((x) => x.toString(16).padStart(2, '0')).join(':')),
  fc.constantFrom('00:00:00:00:00:00', 'ff:ff:ff:ff:ff:ff', '01:00:5e:00:00:01', '52:54:00:12:34:56', '52-54-00-12-34-57', '525400123458', 'zz:zz:zz:zz:zz:zz'),
);
const addressArb = fc.oneof(
  fc.tuple(fc.integer({ min: 1, max: 254 }), fc.integer({ min: 1, max: 254 })).map(([a, b]) => `127.9.${a}.${b}`),
  fc.constantFrom('bmc.example.test', '[fd00::5]:443', 'https://127.0.0.9/redfish/v1', 'http://[::1', '127.0.0.5:99999', '999.1.1.1'),
);
const dateArb = fc
  .integer({ min: -2 * 86400_000, max: 30 * 86400_000 })
  .map((offset) => new Date(Date.UTC(2026, 11, 1) + offset).toISOString());

/** Plausible values for the string fields whose meaning the schema does not spell (GraphQL Strings). */
function hintFor(name: string, shape: Extract<Shape, { kind: 'string' }>): fc.Arbitrary<string> | null {
  if (shape.pattern === '^secret://') return fc.constantFrom('secret://sec_00000000-0000-7000-8000-000000000000', 'secret://fixture', 'secret://');
  switch (name) {
    case 'mac':
      return macArb;
    case 'address':
    case 'addresse':
      return addressArb;
    case 'driver':
      return fc.constantFrom('redfish', 'ipmi', 'idrac', 'ilo', 'xcc', 'cimc', 'supermicro', 'none', 'REDFISH');
    case 'power':
    case 'management':
    case 'virtualMedia':
      return fc.constantFrom('redfish', 'ipmi', 'idrac', 'none');
    case 'permission':
      return fc.constantFrom('admin', 'compute:nodes:provision', 'compute:nodes:power', 'compute:sites:read', 'site:agent', 'root');
    case 'ref':
      return fc.constantFrom('secret://sec_00000000-0000-7000-8000-000000000000', 'secret://fixture', 'plain');
    case 'kind':
      return fc.constantFrom('partition', 'image', 'configure', 'script', 'reboot', 'format-c');
    case 'role':
      return fc.constantFrom('worker', 'control-plane', 'storage');
    case 'productUuid':
      return fc.oneof(fc.uuid(), fc.constantFrom('00000000-0000-0000-0000-000000000000', 'not-a-uuid'));
    case 'hardwareProfile':
      return fc.constantFrom('generic', 'dell-r650', 'missing-profile');
    case 'publicKey':
      return fc.constantFrom('MCowBQYDK2VwAyEA' + 'A'.repeat(43) + '=', 'not-a-key', '-----BEGIN PUBLIC KEY-----\nabc\n-----END PUBLIC KEY-----');
    case 'signature':
      return fc.base64String({ maxLength: 88 });
    case 'firstSeen':
    case 'lastSeen':
    case 'expiresAt':
      return dateArb;
    default:
      return null;
  }
}

const plainString = fc.oneof(
  { arbitrary: fc.stringMatching(/^[a-z][a-z0-9-]{0,15}$/), weight: 6 },
  { arbitrary: fc.string({ maxLength: 12 }), weight: 2 },
  { arbitrary: fc.constantFrom('', ' ', 'x'), weight: 1 },
);

/** A value the schema accepts (give or take the rules the schema cannot say), with real ids. */
export function validValue(shape: Shape, path: Path, ids: IdPool, depth = 0): fc.Arbitrary<Val> {
  switch (shape.kind) {
    case 'string': {
      if (isSecretPath(path)) return secretArb;
      if (shape.enum) return fc.constantFrom(...shape.enum);
      if (shape.id || isIdName(shape.name)) return idArb(shape.name, ids);
      if (shape.format === 'date-time') return dateArb;
      return hintFor(shape.name, shape) ?? plainString;
    }
    case 'integer': {
      const min = shape.minimum ?? (shape.name === 'profileVersion' ? 1 : -2);
      return fc.integer({ min, max: Math.min(shape.maximum ?? min + 60, min + 60) });
    }
    case 'number':
      return fc.double({ noNaN: true, noDefaultInfinity: true, min: -1e6, max: 1e6 });
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    case 'any':
      return depth > 3 ? fc.constant({}) : fc.oneof(fc.constant({}), fc.dictionary(fc.stringMatching(/^[a-z]{1,8}$/), fc.oneof(fc.string({ maxLength: 8 }), fc.integer(), fc.boolean()), { maxKeys: 3 }));
    case 'array': {
      const minLength = shape.minItems ?? 0;
      const maxLength = Math.max(minLength, Math.min(shape.maxItems ?? 3, 3));
      return fc.array(validValue(shape.items, [...path, 0], ids, depth + 1), { minLength, maxLength });
    }
    case 'object': {
      if (depth > 6) return fc.constant({});
      const model: Record<string, fc.Arbitrary<Val>> = {};
      for (const [key, child] of Object.entries(shape.properties)) model[key] = validValue(child, [...path, key], ids, depth + 1);
      return fc.record(model, { requiredKeys: shape.required.filter((k) => k in model) }) as fc.Arbitrary<Val>;
    }
    case 'anyOf': {
      const real = shape.options.filter((o) => o.kind !== 'null');
      const options: fc.WeightedArbitrary<Val>[] = real.map((o) => ({ arbitrary: validValue(o, path, ids, depth), weight: 8 }));
      if (real.length !== shape.options.length) options.push({ arbitrary: fc.constant(null), weight: 1 });
      return fc.oneof(...options);
    }
  }
}

// ---- hostile values -------------------------------------------------------------------------

/** Each of these has broken some server somewhere: NUL, lone surrogates, controls, traversal, injection. */
const NUL_STRINGS = ['a\u0000b', '\u0000', 'a\u0000'.repeat(32), '\u202e\u0000evil', 'node_\u0000', 'pool_00000000-0000-7000-8000-00000000000\u0000', 'secret://\u0000'];
const SURROGATE_STRINGS = ['x\ud800', '\ud800', '\udc00x', '\udfff\ud800', 'a\ud83d', '\ude00b'];
export const HOSTILE_STRINGS = [
  ...NUL_STRINGS, ...SURROGATE_STRINGS,
  'a\u0001\u001f\u007f', '\uffff\ufffe', '\ufeffbom', '%00', '%ZZ', '../../etc/passwd', '..', "' OR '1'='1",
  '"; DROP TABLE node; --', '${7*7}', '<script>alert(1)</script>', '\\', '\r\nX-Injected: 1', ' ', '', 'null', 'NaN',
  '1e400', '{}', '[]', 'secret://', 'secret://../../x', 'secret://sec_00000000-0000-7000-8000-000000000000',
  '\ud83d\ude00'.repeat(300), 'e\u0301'.repeat(40),
];

/** Random UTF-16 code units: NUL, controls, lone surrogates and all. */
const codeUnits = fc
  .array(fc.oneof(fc.integer({ min: 0, max: 0x1f }), fc.integer({ min: 0xd800, max: 0xdfff }), fc.integer({ min: 0, max: 0xffff })), { minLength: 1, maxLength: 12 })
  .map((units) => String.fromCharCode(...units));

/** NUL and lone surrogates most (PostgreSQL refuses both), then the rest. */
export const hostileString: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.constantFrom(...NUL_STRINGS), weight: 5 },
  { arbitrary: fc.constantFrom(...SURROGATE_STRINGS), weight: 4 },
  { arbitrary: fc.constantFrom(...HOSTILE_STRINGS), weight: 4 },
  { arbitrary: codeUnits, weight: 2 },
  { arbitrary: fc.string({ unit: 'binary', maxLength: 16 }), weight: 1 },
);

/** 100 KB and more: over every sane limit, still under the 1 MiB body limit (except the last). */
export const hugeString: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.integer({ min: 100_000, max: 110_000 }).map((n) => 'x'.repeat(n)), weight: 4 },
  { arbitrary: fc.constant('é'.repeat(60_000)), weight: 1 },
  { arbitrary: fc.constant('a\u0000'.repeat(50_000)), weight: 1 },
  { arbitrary: fc.constant('y'.repeat(1_100_000)), weight: 1 },
);

/** 1,000 to 10,000 levels of [ or {"a":, as text (a recursive builder would overflow first). */
export const deepRaw: fc.Arbitrary<Raw> = fc
  .tuple(fc.constantFrom(1000, 5000, 10_000, 10_001), fc.boolean())
  .map(([depth, arrays]) =>
    arrays
      ? Raw.text('['.repeat(depth) + ']'.repeat(depth), `[${depth} deep]`)
      : Raw.text('{"a":'.repeat(depth) + '1' + '}'.repeat(depth), `{${depth} deep}`),
  );

/** Numbers JSON can carry but no column can: out of int32, past 2^53, 1e400 (Infinity when parsed). */
export const extremeNumber: fc.Arbitrary<Val> = fc.oneof(
  fc.constantFrom<Val>(2 ** 31, -(2 ** 31) - 1, 2 ** 53 + 2, -(2 ** 53) - 2, 1e308, -1, 0, 1.5, -0.5, Number.MAX_SAFE_INTEGER, 4294967296),
  fc.constantFrom('1e400', '-1e400', '123456789012345678901234567890', '-0', '1.0', '0.1e1', '1E2').map((t) => Raw.text(t, t)),
);

/** Invalid UTF-8 inside a JSON string: a stray continuation byte, an overlong NUL, a CESU-8 surrogate. */
export const invalidUtf8String: fc.Arbitrary<Raw> = fc
  .constantFrom([0xff], [0xc3, 0x28], [0xc0, 0x80], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0x80])
  .map((bytes) => new Raw(Buffer.concat([Buffer.from('"a'), Buffer.from(bytes), Buffer.from('b"')]), `"a<${bytes.map((b) => b.toString(16)).join(' ')}>b"`));

const wrongTypeValues: Val[] = [0, -1, 1.5, true, false, null, '', 'x', [], {}, [1, 2], { a: 1 }, ['x'], [null], [{}]];

function wrongTypeFor(shape: Shape): fc.Arbitrary<Val> {
  const kind = shape.kind === 'anyOf' ? shape.options[0]?.kind : shape.kind;
  const candidates = wrongTypeValues.filter((v) => {
    if (kind === 'string') return typeof v !== 'string';
    if (kind === 'integer' || kind === 'number') return typeof v !== 'number' || (kind === 'integer' && !Number.isInteger(v));
    if (kind === 'boolean') return typeof v !== 'boolean';
    if (kind === 'array') return !Array.isArray(v);
    if (kind === 'object') return v === null || typeof v !== 'object' || Array.isArray(v);
    return true;
  });
  return fc.constantFrom(...candidates);
}

const extraKey = fc.constantFrom('__proto__', 'constructor', 'prototype', 'extra', 'a\u0000b', '\ud800', '', 'x'.repeat(300), 'password', 'id');

export type Mutation =
  | { op: 'replace'; at: Path; value: Val; why: string }
  | { op: 'delete'; at: Path; why: string }
  | { op: 'add'; at: Path; key: string; value: Val; why: string };

/** Every place in a value where a mutation may land, with the shape expected there. */
function sites(value: Val, shape: Shape, path: Path, out: { path: Path; value: Val; shape: Shape }[] = [], depth = 0) {
  out.push({ path, value, shape });
  if (depth > 8) return out;
  const resolved = shape.kind === 'anyOf' ? shape.options.find((o) => o.kind !== 'null') ?? shape : shape;
  if (Array.isArray(value) && resolved.kind === 'array') {
    value.slice(0, 4).forEach((item, i) => sites(item, resolved.items, [...path, i], out, depth + 1));
  } else if (value && typeof value === 'object' && !(value instanceof Raw) && !Array.isArray(value) && resolved.kind === 'object') {
    for (const [key, child] of Object.entries(value)) {
      const childShape = resolved.properties[key];
      if (childShape) sites(child, childShape, [...path, key], out, depth + 1);
    }
  }
  return out;
}

function mutationAt(site: { path: Path; value: Val; shape: Shape }, ids: IdPool): fc.Arbitrary<Mutation> {
  const at = site.path;
  const resolved = site.shape.kind === 'anyOf' ? site.shape.options.find((o) => o.kind !== 'null') ?? site.shape : site.shape;
  const replace = (arb: fc.Arbitrary<Val>, why: string, weight: number): fc.WeightedArbitrary<Mutation> => ({
    arbitrary: arb.map((value): Mutation => ({ op: 'replace', at, value, why })),
    weight,
  });
  const options: fc.WeightedArbitrary<Mutation>[] = [
    replace(hostileString, 'hostile string', resolved.kind === 'string' ? 12 : 3),
    replace(wrongTypeFor(site.shape), 'wrong type', 5),
    replace(hugeString, 'huge string', resolved.kind === 'string' ? 2 : 1),
    replace(deepRaw, 'deep nesting', 1),
    replace(extremeNumber, 'extreme number', resolved.kind === 'integer' || resolved.kind === 'number' ? 8 : 1),
    replace(invalidUtf8String, 'invalid UTF-8', resolved.kind === 'string' ? 2 : 1),
  ];
  if (resolved.kind === 'array') {
    options.push(
      replace(
        fc.tuple(fc.constantFrom(10_001, 30_000), validValue(resolved.items, [...at, 0], ids)).map(([n, item]) => Array.from({ length: n }, () => item)),
        'huge array',
        3,
      ),
    );
  }
  if (site.value && typeof site.value === 'object' && !Array.isArray(site.value) && !(site.value instanceof Raw)) {
    const keys = Object.keys(site.value);
    if (keys.length) options.push({ arbitrary: fc.constantFrom(...keys).map((key): Mutation => ({ op: 'delete', at: [...at, key], why: 'field left out' })), weight: 5 });
    options.push({
      arbitrary: fc.tuple(extraKey, fc.oneof(hostileString, fc.constant<Val>(1), fc.constant<Val>({}))).map(([key, value]): Mutation => ({ op: 'add', at, key, value, why: 'extra key' })),
      weight: 3,
    });
  }
  return fc.oneof(...options);
}

/** One mutation (sometimes two or three) at random places of a valid value. */
export function mutations(value: Val, shape: Shape, ids: IdPool): fc.Arbitrary<Mutation[]> {
  const all = sites(value, shape, []);
  // Mostly below the root: a wrong root is the easy case.
  const weighted = all.length > 1 ? all.slice(1).concat([all[0]!]) : all;
  const one = fc.constantFrom(...weighted).chain((site) => mutationAt(site, ids));
  // Mostly one: of several, the first the server checks hides the others.
  return fc.oneof({ arbitrary: fc.tuple(one), weight: 7 }, { arbitrary: fc.array(one, { minLength: 2, maxLength: 3 }), weight: 3 });
}

const clone = (value: Val): Val => {
  if (Array.isArray(value)) return value.map(clone);
  if (value && typeof value === 'object' && !(value instanceof Raw)) {
    const out: { [key: string]: Val } = {};
    for (const [k, v] of Object.entries(value)) setOwn(out, k, clone(v));
    return out;
  }
  return value;
};

/** `__proto__` as a plain own key, the way JSON.parse makes it (an assignment would set the prototype). */
function setOwn(target: { [key: string]: Val }, key: string, value: Val) {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

export function applyMutations(value: Val, list: Mutation[]): Val {
  let root = clone(value);
  for (const m of list) {
    const parentPath = m.op === 'add' ? m.at : m.at.slice(0, -1);
    if (m.op === 'replace' && m.at.length === 0) {
      root = m.value;
      continue;
    }
    let parent: Val = root;
    for (const step of parentPath) {
      if (parent === null || typeof parent !== 'object' || parent instanceof Raw) break;
      parent = (parent as Record<string | number, Val>)[step as never] ?? null;
    }
    if (parent === null || typeof parent !== 'object' || parent instanceof Raw) continue;
    if (m.op === 'add') {
      if (!Array.isArray(parent)) setOwn(parent, m.key, m.value);
    } else {
      const key = m.at[m.at.length - 1]!;
      if (Array.isArray(parent) && typeof key === 'number') {
        if (m.op === 'delete') parent.splice(key, 1);
        else parent[key] = m.value;
      } else if (!Array.isArray(parent) && typeof key === 'string') {
        if (m.op === 'delete') delete parent[key];
        else setOwn(parent, key, m.value);
      }
    }
  }
  return root;
}

// ---- encoding -------------------------------------------------------------------------------

/** JSON bytes of a value, Raw parts spliced in as they are. Lone surrogates leave as \udXXX escapes. */
export function encodeJson(value: Val | undefined): Buffer {
  if (!hasRaw(value)) return Buffer.from(JSON.stringify(value ?? null));
  const parts: Buffer[] = [];
  const walk = (v: Val | undefined) => {
    if (v === undefined || v === null) return void parts.push(Buffer.from('null'));
    if (v instanceof Raw) return void parts.push(v.bytes);
    if (Array.isArray(v)) {
      parts.push(Buffer.from('['));
      v.forEach((item, i) => {
        if (i) parts.push(Buffer.from(','));
        walk(item);
      });
      return void parts.push(Buffer.from(']'));
    }
    if (typeof v === 'object') {
      parts.push(Buffer.from('{'));
      Object.entries(v).forEach(([k, item], i) => {
        parts.push(Buffer.from((i ? ',' : '') + JSON.stringify(k) + ':'));
        walk(item);
      });
      return void parts.push(Buffer.from('}'));
    }
    parts.push(Buffer.from(JSON.stringify(v)));
  };
  walk(value);
  return Buffer.concat(parts);
}

/** Whether a value holds anything JSON.stringify would not reproduce (then it goes as raw bytes). */
export function hasRaw(value: Val | undefined): boolean {
  if (value instanceof Raw) return true;
  if (Array.isArray(value)) return value.some(hasRaw);
  if (value && typeof value === 'object') return Object.values(value).some(hasRaw);
  return false;
}

/** A short, secret-free rendering of a value for failure reports: long strings cut, secrets masked. */
export function summarize(value: unknown, depth = 0): unknown {
  if (value instanceof Raw) return `<raw ${value.label.length > 80 ? value.label.slice(0, 80) + '…' : value.label}>`;
  if (Buffer.isBuffer(value)) return `<${value.length} bytes: ${JSON.stringify(value.subarray(0, 120).toString('latin1'))}${value.length > 120 ? '…' : ''}>`;
  if (typeof value === 'string') {
    const masked = value.includes(SECRET_MARKER) ? value.replace(new RegExp(`${SECRET_MARKER}\\w*`, 'g'), '<secret>') : value;
    return masked.length > 120 ? `${masked.slice(0, 60)}…<${masked.length} chars>…${masked.slice(-20)}` : masked;
  }
  if (depth > 6) return '…';
  if (Array.isArray(value)) {
    const head = value.slice(0, 5).map((v) => summarize(v, depth + 1));
    return value.length > 5 ? [...head, `…<${value.length} items>`] : head;
  }
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[summarize(k) as string] = summarize(v, depth + 1);
    return out;
  }
  return value;
}
