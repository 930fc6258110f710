import {
  GraphQLError,
  Kind,
  ValuesOfCorrectTypeRule,
  isEnumType,
  isInputObjectType,
  isInputType,
  isListType,
  isNonNullType,
  typeFromAST,
  valueFromASTUntyped,
  visit,
  type ASTNode,
  type ASTVisitor,
  type GraphQLInputType,
  type GraphQLScalarType,
  type GraphQLSchema,
  type GraphQLEnumType,
  type OperationDefinitionNode,
  type ValidationContext,
  type ValidationRule,
  type ValueNode,
} from 'graphql';
import { AppError } from '../errors';
import { LIMITS, checkJsonStrings, checkString, maxLengthOf } from '../limits';

/**
 * Input coercion checks that replace graphql-js's own messages, which print the value they refuse
 * (`Variable "$i" got invalid value { ... password: "..." }`). These name the field path only,
 * apply the string limits of src/limits.ts and refuse what PostgreSQL cannot store (NUL, lone
 * surrogates), for variables (before execution) and literals (as a validation rule) alike. When
 * they pass, graphql-js's coercion has nothing left to refuse.
 */

const MAX_ERRORS = 20;
const INT_MIN = -(2 ** 31);
const INT_MAX = 2 ** 31 - 1;

class Problems {
  readonly list: AppError[] = [];
  add(field: string, message: string): void {
    if (this.list.length < MAX_ERRORS) this.list.push(new AppError('INVALID_INPUT', `${field}: ${message}`, { field }));
  }
  addError(error: AppError): void {
    if (this.list.length < MAX_ERRORS) this.list.push(error);
  }
  get full(): boolean {
    return this.list.length >= MAX_ERRORS;
  }
}

function enumChoice(type: GraphQLEnumType): string {
  const names = type.getValues().map((v) => v.name);
  return names.length <= 20 ? `must be one of ${names.join(', ')}` : `must be a value of ${type.name}`;
}

/** `name` is the input field or argument the value is for: it picks the string limit. */
function checkScalar(type: GraphQLScalarType, value: unknown, field: string, name: string | undefined, out: Problems): void {
  switch (type.name) {
    case 'String':
    case 'ID': {
      const isId = type.name === 'ID';
      if (typeof value === 'string') {
        const bad = checkString(field, value, maxLengthOf(name, isId));
        if (bad) out.addError(bad);
      } else if (!(isId && Number.isInteger(value))) out.add(field, isId ? 'must be an id (a string)' : 'must be a string');
      return;
    }
    case 'Int':
      if (!Number.isInteger(value) || (value as number) < INT_MIN || (value as number) > INT_MAX) out.add(field, 'must be a 32-bit integer');
      return;
    case 'Float':
      if (typeof value !== 'number' || !Number.isFinite(value)) out.add(field, 'must be a number');
      return;
    case 'Boolean':
      if (typeof value !== 'boolean') out.add(field, 'must be true or false');
      return;
    case 'JSON': {
      const bad = checkJsonStrings(value, field);
      if (bad) out.addError(bad);
      return;
    }
    default: {
      if (typeof value === 'string') {
        const bad = checkString(field, value, maxLengthOf(name, false));
        if (bad) return out.addError(bad);
      }
      try {
        type.parseValue(value);
      } catch {
        out.add(field, `is not a valid ${type.name}`);
      }
    }
  }
}

/** A runtime (variable) value against its input type. */
function checkValue(type: GraphQLInputType, value: unknown, field: string, name: string | undefined, out: Problems, depth = 0): void {
  if (out.full) return;
  if (depth > LIMITS.jsonDepth) return out.add(field, `nested deeper than ${LIMITS.jsonDepth} levels`);
  if (isNonNullType(type)) {
    if (value === undefined) return out.add(field, 'is required');
    if (value === null) return out.add(field, 'must not be null');
    return checkValue(type.ofType, value, field, name, out, depth);
  }
  if (value === null || value === undefined) return;
  if (isListType(type)) {
    if (!Array.isArray(value)) return checkValue(type.ofType, value, field, name, out, depth + 1);
    value.forEach((item, i) => checkValue(type.ofType, item, `${field}[${i}]`, name, out, depth + 1));
    return;
  }
  if (isInputObjectType(type)) {
    if (typeof value !== 'object' || Array.isArray(value)) return out.add(field, 'must be an object');
    const fields = type.getFields();
    const given = value as Record<string, unknown>;
    for (const key of Object.keys(given)) {
      if (!Object.hasOwn(fields, key)) out.add(`${field}.${fieldKey(key)}`, 'is not a known field');
    }
    if (type.isOneOf) {
      const set = Object.keys(given).filter((k) => given[k] !== undefined);
      if (set.length !== 1 || given[set[0]!] === null) return out.add(field, `must set exactly one of ${Object.keys(fields).join(', ')}`);
    }
    for (const def of Object.values(fields)) {
      const inner = given[def.name];
      if (inner === undefined && def.defaultValue !== undefined) continue;
      checkValue(def.type, inner, `${field}.${def.name}`, def.name, out, depth + 1);
    }
    return;
  }
  if (isEnumType(type)) {
    if (typeof value !== 'string' || !type.getValue(value)) out.add(field, enumChoice(type));
    return;
  }
  checkScalar(type, value, field, name, out);
}

/** Keys of unknown fields are echoed in the path: only short, clean ones. */
function fieldKey(key: string): string {
  return /^[A-Za-z_][A-Za-z0-9_]{0,63}$/.test(key) ? key : '(an unknown key)';
}

/** A literal of the document against its input type (the document's values are inputs too). */
function checkLiteral(type: GraphQLInputType, node: ValueNode, field: string, name: string | undefined, out: Problems): void {
  if (out.full || node.kind === Kind.VARIABLE) return; // variables: checked with their values, at execution
  if (isNonNullType(type)) {
    if (node.kind === Kind.NULL) return out.add(field, 'must not be null');
    return checkLiteral(type.ofType, node, field, name, out);
  }
  if (node.kind === Kind.NULL) return;
  if (isListType(type)) {
    if (node.kind !== Kind.LIST) return checkLiteral(type.ofType, node, field, name, out);
    node.values.forEach((item, i) => checkLiteral(type.ofType, item, `${field}[${i}]`, name, out));
    return;
  }
  if (isInputObjectType(type)) {
    if (node.kind !== Kind.OBJECT) return out.add(field, 'must be an object');
    const fields = type.getFields();
    const given = new Map(node.fields.map((f) => [f.name.value, f.value]));
    for (const f of node.fields) if (!Object.hasOwn(fields, f.name.value)) out.add(`${field}.${fieldKey(f.name.value)}`, 'is not a known field');
    if (type.isOneOf) {
      const only = node.fields.length === 1 ? node.fields[0]!.value : null;
      if (!only || only.kind === Kind.NULL) return out.add(field, `must set exactly one of ${Object.keys(fields).join(', ')}`);
    }
    for (const def of Object.values(fields)) {
      const inner = given.get(def.name);
      if (inner === undefined) {
        if (isNonNullType(def.type) && def.defaultValue === undefined) out.add(`${field}.${def.name}`, 'is required');
        continue;
      }
      checkLiteral(def.type, inner, `${field}.${def.name}`, def.name, out);
    }
    return;
  }
  if (isEnumType(type)) {
    if (node.kind !== Kind.ENUM || !type.getValue(node.value)) out.add(field, enumChoice(type));
    return;
  }
  switch (type.name) {
    case 'String':
      if (node.kind !== Kind.STRING) return out.add(field, 'must be a string');
      return checkScalar(type, node.value, field, name, out);
    case 'ID':
      if (node.kind !== Kind.STRING && node.kind !== Kind.INT) return out.add(field, 'must be an id (a string)');
      return checkScalar(type, node.kind === Kind.INT ? Number(node.value) : node.value, field, name, out);
    case 'Int':
      if (node.kind !== Kind.INT) return out.add(field, 'must be a 32-bit integer');
      return checkScalar(type, Number(node.value), field, name, out);
    case 'Float':
      if (node.kind !== Kind.INT && node.kind !== Kind.FLOAT) return out.add(field, 'must be a number');
      return checkScalar(type, Number(node.value), field, name, out);
    case 'Boolean':
      if (node.kind !== Kind.BOOLEAN) out.add(field, 'must be true or false');
      return;
    default:
      // Custom scalars (JSON, DateTime): the literal as a plain value, then as a variable would be.
      if (hasVariable(node)) return;
      return checkScalar(type, valueFromASTUntyped(node), field, name, out);
  }
}

function hasVariable(node: ValueNode): boolean {
  let found = false;
  visit(node, { Variable: () => void (found = true) });
  return found;
}

/**
 * Replaces graphql-js's ValuesOfCorrectTypeRule (whose messages print the literal) with
 * {@link checkLiteral}, for field and directive arguments and variable defaults.
 */
export function literalInputRule(context: ValidationContext): ASTVisitor {
  const report = (out: Problems, node: ASTNode) => {
    for (const e of out.list) context.reportError(new GraphQLError(e.message, { nodes: [node], extensions: e.extensions }));
  };
  return {
    Argument(node) {
      const def = context.getArgument();
      if (!def) return; // unknown argument: KnownArgumentNamesRule says so
      const out = new Problems();
      checkLiteral(def.type, node.value, node.name.value, node.name.value, out);
      report(out, node);
    },
    VariableDefinition(node) {
      const type = typeFromAST(context.getSchema(), node.type as never);
      if (!node.defaultValue || !type || !isInputType(type)) return;
      const out = new Problems();
      checkLiteral(type, node.defaultValue, `$${node.variable.name.value}`, node.variable.name.value, out);
      report(out, node);
    },
  };
}

/** The validation rules with graphql-js's value checks swapped for {@link literalInputRule}. */
export function withLiteralInputRule(rules: readonly ValidationRule[]): ValidationRule[] {
  return [...rules.filter((rule) => rule !== ValuesOfCorrectTypeRule), literalInputRule];
}

/**
 * The argument or input field each variable is used for (the first use): a `$r` passed as
 * `reason` gets the limit of `reason`.
 */
const usesCache = new WeakMap<OperationDefinitionNode, Map<string, string>>();

function usesOf(operation: OperationDefinitionNode): Map<string, string> {
  const cached = usesCache.get(operation); // documents come from Yoga's parser cache: same object
  if (cached) return cached;
  const uses = new Map<string, string>();
  usesCache.set(operation, uses);
  visit(operation, {
    Variable(node, _key, _parent, _path, ancestors) {
      if (uses.has(node.name.value)) return;
      for (let i = ancestors.length - 1; i >= 0; i -= 1) {
        const a = ancestors[i] as ASTNode;
        if (a && !Array.isArray(a) && (a.kind === Kind.ARGUMENT || a.kind === Kind.OBJECT_FIELD)) {
          uses.set(node.name.value, a.name.value);
          return;
        }
      }
    },
  });
  return uses;
}

/** Every variable value against its declared type; the errors name `$var.path`. */
export function checkVariables(schema: GraphQLSchema, operation: OperationDefinitionNode, variables: Record<string, unknown> | null | undefined): AppError[] {
  const out = new Problems();
  const values = variables ?? {};
  if (typeof values !== 'object' || Array.isArray(values)) return [new AppError('INVALID_INPUT', 'variables: must be an object', { field: 'variables' })];
  const uses = usesOf(operation);
  for (const definition of operation.variableDefinitions ?? []) {
    const name = definition.variable.name.value;
    const type = typeFromAST(schema, definition.type as never);
    if (!type || !isInputType(type)) continue; // VariablesAreInputTypesRule reported it
    const value = (values as Record<string, unknown>)[name];
    if (value === undefined && definition.defaultValue) continue;
    if (value === undefined && !isNonNullType(type)) continue;
    checkValue(type, value, `$${name}`, uses.get(name) ?? name, out);
  }
  return out.list;
}

/** The operation a request runs (by name, or the only one). */
export function operationOf(document: { definitions: readonly ASTNode[] }, operationName?: string | null): OperationDefinitionNode | undefined {
  const operations = document.definitions.filter((d): d is OperationDefinitionNode => d.kind === Kind.OPERATION_DEFINITION);
  if (operationName) return operations.find((o) => o.name?.value === operationName);
  return operations.length === 1 ? operations[0] : undefined;
}

/** Bracket nesting (`{`, `[`) a document may have: selections, list and object literals. */
export const MAX_DOCUMENT_NESTING = 64;

/**
 * Refuses a document nested past {@link MAX_DOCUMENT_NESTING} before it is parsed: the parser is
 * recursive, and 10,000 `[` overflow the stack before any token limit stops it. One pass, outside
 * strings, block strings and comments.
 */
export function checkDocumentNesting(query: string): AppError | null {
  let depth = 0;
  for (let i = 0; i < query.length; i += 1) {
    const c = query.charCodeAt(i);
    if (c === 0x23) { // # comment, to the end of the line
      while (i < query.length && query.charCodeAt(i) !== 0x0a && query.charCodeAt(i) !== 0x0d) i += 1;
    } else if (c === 0x22) {
      if (query.startsWith('"""', i)) {
        const end = query.indexOf('"""', i + 3);
        i = end === -1 ? query.length : end + 2;
      } else {
        for (i += 1; i < query.length; i += 1) {
          const d = query.charCodeAt(i);
          if (d === 0x5c) i += 1;
          else if (d === 0x22 || d === 0x0a) break;
        }
      }
    } else if (c === 0x7b || c === 0x5b) {
      depth += 1;
      if (depth > MAX_DOCUMENT_NESTING) {
        return new AppError('INVALID_INPUT', `query: nested deeper than ${MAX_DOCUMENT_NESTING} levels`, { field: 'query', maxDepth: MAX_DOCUMENT_NESTING });
      }
    } else if (c === 0x7d || c === 0x5d) depth -= 1;
  }
  return null;
}
