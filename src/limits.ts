import { AppError } from './errors';

/**
 * Input limits, in one place: GraphQL (src/graphql/input-check.ts, for variables and literals) and
 * REST (src/rest/router.ts, which writes them into the compiled JSON Schemas and so into
 * /openapi.json) read them from here. A string field's limit is chosen by its name, which is the
 * same on both faces (REST bodies carry the GraphQL input fields under the same names).
 */
export const LIMITS = {
  /** Characters (Unicode code points) of an id: GraphQL `ID`, REST `id` and `...Id` / `...Ids`. */
  id: 128,
  /** Characters of any other string not named in {@link LONG_FIELDS}. */
  string: 256,
  /** Levels of nesting of a JSON request body (GraphQL or REST), and of a GraphQL JSON value. */
  jsonDepth: 32,
} as const;

/** Fields that need more than {@link LIMITS.string}, by field name. */
export const LONG_FIELDS: Readonly<Record<string, number>> = {
  password: 1024,
  /** A secret:// reference to an external secret store. */
  ref: 1024,
  credentials: 1024,
  reason: 1024,
  /** Ed25519 public keys: base64 (44) or PEM (113); room for line-ending variants. */
  publicKey: 1024,
  signature: 1024,
  /** An agent's report of a command's outcome. */
  message: 1024,
  /** A compute node's own SSH private key (an RSA 4096 key in PEM is about 3.3 KB). */
  sshPrivateKey: 16384,
};

/** `id`, `poolId`, `nodeIds`: fields that hold ids on the REST face. */
export function isIdFieldName(name: string): boolean {
  return name === 'id' || /[a-z]Ids?$/.test(name);
}

/** The maximum length of a string field, by its name and whether GraphQL types it `ID`. */
export function maxLengthOf(name: string | undefined, isId: boolean): number {
  if (isId) return LIMITS.id;
  if (name !== undefined && Object.hasOwn(LONG_FIELDS, name)) return LONG_FIELDS[name]!;
  if (name !== undefined && isIdFieldName(name)) return LIMITS.id;
  return LIMITS.string;
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/**
 * Why a string cannot be stored (PostgreSQL refuses NUL in text and jsonb, and lone UTF-16
 * surrogates are not Unicode), or null. Never repeats the value.
 */
export function badCharacters(value: string): string | null {
  if (value.includes('\u0000')) return 'must not contain a NUL character';
  if (LONE_SURROGATE.test(value)) return 'must be valid Unicode (it holds a lone UTF-16 surrogate)';
  return null;
}

/** Code points, as JSON Schema's maxLength counts them; cheap for the usual short strings. */
function codePoints(value: string, max: number): number {
  if (value.length <= max) return value.length;
  let count = 0;
  for (const _ of value) count += 1;
  return count;
}

/** The refusal for a string field, or null. `max` null skips the length check (keys, enum values). */
export function checkString(field: string, value: string, max: number | null): AppError | null {
  const bad = badCharacters(value);
  if (bad) return new AppError('INVALID_INPUT', `${field}: ${bad}`, { field });
  if (max !== null && codePoints(value, max) > max) {
    return new AppError('INVALID_INPUT', `${field}: must be at most ${max} characters`, { field, maxLength: max });
  }
  return null;
}

/**
 * Every string (keys included) of a parsed JSON value, without recursion: NUL and lone surrogates
 * are refused anywhere, and nesting past {@link LIMITS.jsonDepth}. String lengths are the schema's
 * business (free-form JSON objects have their own byte limits). A number JSON.parse could not hold
 * (1e309 is Infinity) is refused too: carried on, it became null on its way to GraphQL, and a
 * write kept the old value while answering 200 (issue 21 item 13).
 */
export function checkJsonStrings(root: unknown, rootField: string, maxDepth: number = LIMITS.jsonDepth): AppError | null {
  const stack: { value: unknown; field: string; depth: number }[] = [{ value: root, field: rootField, depth: 0 }];
  while (stack.length) {
    const { value, field, depth } = stack.pop()!;
    if (typeof value === 'string') {
      const bad = checkString(field, value, null);
      if (bad) return bad;
      continue;
    }
    if (typeof value === 'number') {
      if (!Number.isFinite(value)) return new AppError('INVALID_INPUT', `${field}: must be a finite number (this one overflows)`, { field });
      continue;
    }
    if (value === null || typeof value !== 'object') continue;
    if (depth >= maxDepth) return new AppError('INVALID_INPUT', `${field}: nested deeper than ${maxDepth} levels`, { field, maxDepth });
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i -= 1) stack.push({ value: value[i], field: `${field}[${i}]`, depth: depth + 1 });
      continue;
    }
    const entries = Object.entries(value as Record<string, unknown>);
    for (let i = entries.length - 1; i >= 0; i -= 1) {
      const [key, inner] = entries[i]!;
      const bad = badCharacters(key);
      if (bad) return new AppError('INVALID_INPUT', `${field}: a key ${bad}`, { field });
      stack.push({ value: inner, field: `${field}.${key}`, depth: depth + 1 });
    }
  }
  return null;
}
