import { GraphQLError } from 'graphql';
import { typeOfId } from './ids';

/** The one error vocabulary (DESIGN.md). Every refusal the service makes carries one of these. */
export const ERROR_CODES = [
  'INVALID_INPUT',
  'UNAUTHENTICATED',
  'PERMISSION_DENIED',
  'NOT_FOUND',
  'CONFLICT',
  'INVALID_STATE',
  'INVALID_CONFIG',
  'UNSUPPORTED',
  'UNVERIFIED_WIPE',
  'ABORTED',
  'INTERNAL',
  // The fabric's VTEP pool changed: the switch's BGP listen range must be re-configured and acked first.
  'REQUIRES_SWITCH_RECONFIG_ACK',
  // A service this one reads from (NetBox) is unreachable, timed out or answered with an error;
  // or the database is (details.upstream = 'database', HTTP 503).
  'UPSTREAM_UNAVAILABLE',
  // The database answers but cannot write: disk full or failing, or read-only (HTTP 503).
  'STORAGE_UNAVAILABLE',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

/** HTTP status for each code, used by the REST layer and by GraphQL-over-HTTP for whole-request failures. */
export const HTTP_STATUS: Record<ErrorCode, number> = {
  INVALID_INPUT: 400,
  UNAUTHENTICATED: 401,
  PERMISSION_DENIED: 403,
  NOT_FOUND: 404,
  CONFLICT: 409,
  INVALID_STATE: 409,
  INVALID_CONFIG: 422,
  UNSUPPORTED: 422,
  UNVERIFIED_WIPE: 422,
  ABORTED: 409,
  INTERNAL: 500,
  REQUIRES_SWITCH_RECONFIG_ACK: 409,
  UPSTREAM_UNAVAILABLE: 502,
  STORAGE_UNAVAILABLE: 503,
};

/**
 * Statuses a code is also answered with, beside its HTTP_STATUS: the error table of docs/api.md and the
 * one /docs shows (src/rest/openapi.ts) list them in the code's row, "400 (405 for ..., 413 for ...)".
 * test/error-table.test.ts keeps the two tables, HTTP_STATUS and this list the same.
 */
export const ALSO_ANSWERED_AS: readonly { code: ErrorCode; status: number; when: string }[] = [
  { code: 'INVALID_INPUT', status: 405, when: 'a method the route does not take' },
  { code: 'INVALID_INPUT', status: 413, when: 'a body over 1 MiB' },
  { code: 'UPSTREAM_UNAVAILABLE', status: 503, when: 'the database' },
];

/**
 * The error table as markdown rows (`| code, code | status (other for when) |`), one per status of
 * HTTP_STATUS, ordered by status: what /docs shows. `note` adds a gloss after a code.
 */
export function errorTableRows(note: (code: ErrorCode) => string | undefined = () => undefined): string[] {
  const statuses = [...new Set(Object.values(HTTP_STATUS))].sort((a, b) => a - b);
  return statuses.map((status) => {
    const codes = ERROR_CODES.filter((c) => HTTP_STATUS[c] === status);
    const others = ALSO_ANSWERED_AS.filter((o) => codes.includes(o.code)).map((o) => `${o.status} for ${o.when}`);
    const named = codes.map((c) => (note(c) ? `${c} (${note(c)})` : c));
    return `| ${named.join(', ')} | ${status}${others.length ? ` (${others.join(', ')})` : ''} |`;
  });
}

/**
 * The status of one refusal: its code's, except the database's unavailability, which is 503 (the
 * service itself cannot serve for now) where an upstream such as NetBox failing is 502.
 */
export function httpStatusOf(code: ErrorCode, details?: Record<string, unknown> | null): number {
  if (code === 'UPSTREAM_UNAVAILABLE' && details?.upstream === 'database') return 503;
  return HTTP_STATUS[code];
}

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && (ERROR_CODES as readonly string[]).includes(value);
}

/**
 * A refusal with a code. It extends GraphQLError so Yoga passes it through unmasked with
 * `extensions.code`; `details` carries machine-readable context (field path, current state...).
 */
export class AppError extends GraphQLError {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, details?: Record<string, unknown>) {
    super(message, { extensions: { code, ...(details ? { details } : {}) } });
    this.code = code;
    this.name = 'AppError';
  }
}

export const invalidInput = (field: string, message: string) =>
  new AppError('INVALID_INPUT', `${field}: ${message}`, { field });
/**
 * `<what> <id> not found`, naming the id only when it is a well-formed id of this service (the same
 * answer for another tenant's object and a missing one); anything else a caller sent (an address,
 * a made-up string) is not repeated: `<what> not found`.
 */
export const notFound = (what: string, id?: string) =>
  new AppError('NOT_FOUND', id && typeOfId(id) ? `${what} ${id} not found` : `${what} not found`);
export const permissionDenied = (permission: string, on: string) =>
  new AppError('PERMISSION_DENIED', `missing permission ${permission} on ${on}`, { permission });
export const unauthenticated = (message = 'a valid bearer token is required') =>
  new AppError('UNAUTHENTICATED', message);
