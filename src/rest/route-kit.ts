/**
 * What every module's REST routes are made of: the Route type and the helpers they share. Each
 * module keeps its routes beside it (src/modules/<area>/routes.ts); src/rest/routes.ts lists them.
 */
import { notFound, type ErrorCode } from '../errors';
import { schemaTypes, type JsonSchema } from './schemas';

const { str } = schemaTypes;

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** What the router hands a route: path parameters, query string and JSON body, all validated. */
export interface RouteInput {
  params: Record<string, string>;
  query: Record<string, unknown>;
  body: Record<string, unknown> | undefined;
}

/**
 * One REST route: `METHOD /path` executes a named GraphQL operation from schema/operations/ and
 * shapes its data into the documented JSON. No rule lives here: the resolvers own them all.
 */
export interface Route {
  method: Method;
  /** OpenAPI style: /api/compute/metal/nodes/{id} */
  path: string;
  operation: string;
  /** The OpenAPI operationId when several routes run one operation (the provision/<vendor> routes); default the operation's name. */
  operationId?: string;
  summary: string;
  description?: string;
  tag: string;
  params?: Record<string, JsonSchema>;
  query?: JsonSchema & { properties: Record<string, JsonSchema> };
  body?: JsonSchema;
  variables(input: RouteInput): Record<string, unknown>;
  respond(data: Record<string, unknown>, input: RouteInput): unknown;
  response: JsonSchema;
  successStatus?: number;
  /**
   * The codes this route may answer besides those every route may (INVALID_INPUT, UNAUTHENTICATED,
   * INTERNAL): /openapi.json lists each status the route can answer with them.
   */
  refusals?: ErrorCode[];
  /** What /openapi.json and /docs show; test/openapi.test.ts checks each part against its schema. */
  example?: RouteExample;
  /** The REST name of a GraphQL error's field, for routes whose body is not the input's names (snake_case). */
  restField?(field: string): string | null;
}

export interface RouteExample {
  params?: Record<string, string>;
  query?: Record<string, unknown>;
  body?: Record<string, unknown>;
  response: unknown;
}

/** Reading one object by id: another tenant's is NOT_FOUND, one outside the token's grants PERMISSION_DENIED. */
export const READ_ONE: ErrorCode[] = ['PERMISSION_DENIED', 'NOT_FOUND'];
/** Creating or changing tenancy objects: admin on the parent, the parent must exist, names are unique. */
export const ADMIN_WRITE: ErrorCode[] = ['PERMISSION_DENIED', 'NOT_FOUND', 'CONFLICT'];
/** A metal verb on a node: permission on it, the node exists, the state table allows it, no concurrent change. */
export const NODE_VERB: ErrorCode[] = ['PERMISSION_DENIED', 'NOT_FOUND', 'INVALID_STATE', 'CONFLICT'];

/** `node(id)` with a type condition gives `{}` for an id of another type: that is NOT_FOUND too. */
export function one(value: unknown, what: string, id: string): unknown {
  if (!value || typeof value !== 'object' || !('id' in value)) throw notFound(what, id);
  return value;
}

export const idParam = { id: { ...str, description: 'The entity id (the same string GraphQL uses)' } };

/** A success body: each of its keys is always there. */
export const envelope = (properties: Record<string, JsonSchema>): JsonSchema => ({ type: 'object', required: Object.keys(properties), properties });

export const edgesToList = (connection: { edges: { node: unknown }[]; pageInfo: unknown }) => ({
  list: connection.edges.map((e) => e.node),
  pageInfo: connection.pageInfo,
});

/** snake_case wire names (the seed's) and the camelCase GraphQL input names they stand for. */
export const toCamel = (name: string) => name.replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase());
export const toSnake = (name: string) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** `input.expectedNodes[2]` (a GraphQL error's field) as the body's `body.expected_nodes[2]`, for snake_case routes. */
export function snakeBodyField(field: string): string | null {
  const match = /^\$?input\.([A-Za-z0-9]+)(.*)$/.exec(field);
  return match ? `body.${toSnake(match[1]!)}${match[2]}` : null;
}
