import {
  GraphQLEnumType,
  GraphQLInputObjectType,
  GraphQLList,
  GraphQLNonNull,
  GraphQLScalarType,
  type GraphQLInputType,
} from 'graphql';

/**
 * One small description of "what an input looks like", read from a REST route's JSON Schema or
 * from a GraphQL input type, so a single generator and a single set of mutations serve both faces.
 * `name` is the field's own name (hints pick plausible values by it: ids, MACs, passwords).
 */
export type Shape =
  | { kind: 'string'; name: string; enum?: string[]; format?: string; pattern?: string; id?: boolean }
  | { kind: 'integer'; name: string; minimum?: number; maximum?: number }
  | { kind: 'number'; name: string }
  | { kind: 'boolean'; name: string }
  | { kind: 'null'; name: string }
  /** free-form JSON (the JSON scalar, `{ type: 'object' }` without properties) */
  | { kind: 'any'; name: string }
  | { kind: 'array'; name: string; items: Shape; minItems?: number; maxItems?: number }
  | { kind: 'object'; name: string; properties: Record<string, Shape>; required: string[]; additional: boolean }
  | { kind: 'anyOf'; name: string; options: Shape[] };

type JsonSchema = Record<string, unknown>;

/** JSON Schema (the subset the route table uses) to a Shape; `$ref`s resolve against the components. */
export function fromJsonSchema(schema: JsonSchema, name: string, components: Record<string, JsonSchema> = {}, depth = 0): Shape {
  if (depth > 12) return { kind: 'any', name };
  if (typeof schema.$ref === 'string') {
    const target = components[schema.$ref.replace('#/components/schemas/', '')];
    return target ? fromJsonSchema(target, name, components, depth + 1) : { kind: 'any', name };
  }
  const options = (schema.anyOf ?? schema.oneOf) as JsonSchema[] | undefined;
  if (options) return { kind: 'anyOf', name, options: options.map((o) => fromJsonSchema(o, name, components, depth + 1)) };
  if (Array.isArray(schema.enum)) return { kind: 'string', name, enum: schema.enum.map(String) };
  switch (schema.type) {
    case 'string':
      return {
        kind: 'string',
        name,
        ...(typeof schema.format === 'string' ? { format: schema.format } : {}),
        ...(typeof schema.pattern === 'string' ? { pattern: schema.pattern } : {}),
      };
    case 'integer':
      return {
        kind: 'integer',
        name,
        ...(typeof schema.minimum === 'number' ? { minimum: schema.minimum } : {}),
        ...(typeof schema.maximum === 'number' ? { maximum: schema.maximum } : {}),
      };
    case 'number':
      return { kind: 'number', name };
    case 'boolean':
      return { kind: 'boolean', name };
    case 'null':
      return { kind: 'null', name };
    case 'array':
      return {
        kind: 'array',
        name,
        items: fromJsonSchema((schema.items as JsonSchema | undefined) ?? {}, singular(name), components, depth + 1),
        ...(typeof schema.minItems === 'number' ? { minItems: schema.minItems } : {}),
        ...(typeof schema.maxItems === 'number' ? { maxItems: schema.maxItems } : {}),
      };
    case 'object': {
      const properties = (schema.properties ?? {}) as Record<string, JsonSchema>;
      if (!Object.keys(properties).length) return { kind: 'any', name };
      return {
        kind: 'object',
        name,
        properties: Object.fromEntries(Object.entries(properties).map(([key, value]) => [key, fromJsonSchema(value, key, components, depth + 1)])),
        required: Array.isArray(schema.required) ? schema.required.map(String) : [],
        additional: schema.additionalProperties !== false,
      };
    }
    default:
      return { kind: 'any', name };
  }
}

const singular = (name: string) => (name.endsWith('Ids') ? name.slice(0, -1) : name.endsWith('s') ? name.slice(0, -1) : name);

/**
 * A GraphQL input type to a Shape. Nullable types become anyOf(type, null); the object's `required`
 * lists its non-null fields. Input objects are followed to a bounded depth (they may be recursive).
 */
export function fromGraphqlInput(type: GraphQLInputType, name: string, depth = 0): Shape {
  if (type instanceof GraphQLNonNull) return fromGraphqlNamed(type.ofType as GraphQLInputType, name, depth);
  return { kind: 'anyOf', name, options: [fromGraphqlNamed(type, name, depth), { kind: 'null', name }] };
}

function fromGraphqlNamed(type: GraphQLInputType, name: string, depth: number): Shape {
  if (type instanceof GraphQLList) return { kind: 'array', name, items: fromGraphqlInput(type.ofType as GraphQLInputType, singular(name), depth + 1) };
  if (type instanceof GraphQLEnumType) return { kind: 'string', name, enum: type.getValues().map((v) => v.name) };
  if (type instanceof GraphQLInputObjectType) {
    if (depth > 6) return { kind: 'any', name };
    const fields = type.getFields();
    return {
      kind: 'object',
      name,
      properties: Object.fromEntries(Object.values(fields).map((f) => [f.name, fromGraphqlInput(f.type, f.name, depth + 1)])),
      required: Object.values(fields).filter((f) => f.type instanceof GraphQLNonNull && f.defaultValue === undefined).map((f) => f.name),
      additional: false,
    };
  }
  if (type instanceof GraphQLScalarType) {
    switch (type.name) {
      case 'ID':
        return { kind: 'string', name, id: true };
      case 'String':
        return { kind: 'string', name };
      case 'Int':
        return { kind: 'integer', name, minimum: -(2 ** 31), maximum: 2 ** 31 - 1 };
      case 'Float':
        return { kind: 'number', name };
      case 'Boolean':
        return { kind: 'boolean', name };
      case 'DateTime':
        return { kind: 'string', name, format: 'date-time' };
      default:
        return { kind: 'any', name };
    }
  }
  return { kind: 'any', name };
}

/** Where each value sits in a generated input: `bmc.credentials.password`, `nodeIds[3]`. */
export type Path = (string | number)[];
export const pathText = (path: Path) => path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i === 0 ? p : `.${p}`)).join('');

/** Whether the value at this path is a credential (generated secrets go there, and nowhere else). */
export function isSecretPath(path: Path): boolean {
  const names = path.filter((p): p is string => typeof p === 'string');
  const last = names[names.length - 1] ?? '';
  return /^(password|username)$/i.test(last) && names.includes('credentials');
}
