/** One GraphQL error as the service sends it (`extensions.code`, `extensions.details`, `extensions.requestId`). */
export interface GraphQLErrorLike {
  message: string;
  path?: readonly (string | number)[];
  extensions?: { code?: unknown; details?: unknown; requestId?: unknown; [key: string]: unknown };
}

export interface MetalErrorOptions {
  details?: unknown;
  status?: number;
  requestId?: string;
  field?: string;
  /** Every GraphQL error of the response, when there was more than one. */
  errors?: readonly GraphQLErrorLike[];
  /** The GraphQL path of the error, when it came from a field. */
  path?: readonly (string | number)[];
  cause?: unknown;
}

const fieldOf = (details: unknown): string | undefined => {
  if (details && typeof details === 'object' && typeof (details as { field?: unknown }).field === 'string') return (details as { field: string }).field;
  return undefined;
};

/**
 * A refusal or failure, with the service's error code: `NOT_FOUND`, `INVALID_INPUT` (with `field`),
 * `UNAUTHENTICATED`, `PERMISSION_DENIED`, `CONFLICT`, `INVALID_STATE`, `ABORTED` ... as the service's
 * `extensions.code` / REST `error.code` says; or, when the service gave no code:
 * - `NETWORK`: no answer (connection refused or reset, DNS, timeout);
 * - `HTTP_<status>`: an answer that is not the service's JSON (a proxy's error page, say).
 */
export class MetalError extends Error {
  readonly code: string;
  readonly details?: unknown;
  readonly status?: number;
  readonly requestId?: string;
  readonly field?: string;
  readonly errors?: readonly GraphQLErrorLike[];
  readonly path?: readonly (string | number)[];

  constructor(code: string, message: string, opts: MetalErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'MetalError';
    this.code = code;
    if (opts.details !== undefined) this.details = opts.details;
    if (opts.status !== undefined) this.status = opts.status;
    if (opts.requestId !== undefined) this.requestId = opts.requestId;
    const field = opts.field ?? fieldOf(opts.details);
    if (field !== undefined) this.field = field;
    if (opts.errors && opts.errors.length > 1) this.errors = opts.errors;
    if (opts.path !== undefined) this.path = opts.path;
  }

  /** From a GraphQL response's errors (the first one names the code; all are kept in `errors`). */
  static fromGraphQL(errors: readonly GraphQLErrorLike[], status?: number, requestId?: string): MetalError {
    const first = errors[0] ?? { message: 'the service answered with an empty error list' };
    const ext = first.extensions ?? {};
    const code = typeof ext.code === 'string' ? ext.code : status !== undefined && status >= 400 ? `HTTP_${status}` : 'INTERNAL';
    return new MetalError(code, String(first.message), {
      details: ext.details,
      status,
      requestId: typeof ext.requestId === 'string' ? ext.requestId : requestId,
      errors,
      path: first.path,
    });
  }

  /** From a REST answer's `{ error: { code, message, requestId, details } }` body. */
  static fromRest(body: unknown, status: number, requestId?: string): MetalError {
    const error = body && typeof body === 'object' ? (body as { error?: unknown }).error : undefined;
    if (error && typeof error === 'object' && typeof (error as { code?: unknown }).code === 'string') {
      const e = error as { code: string; message?: unknown; requestId?: unknown; details?: unknown };
      return new MetalError(e.code, typeof e.message === 'string' ? e.message : e.code, {
        details: e.details,
        status,
        requestId: typeof e.requestId === 'string' ? e.requestId : requestId,
      });
    }
    return new MetalError(`HTTP_${status}`, `the service answered HTTP ${status} without an error body`, { status, requestId });
  }
}

/** Whether a value is a MetalError (also across two copies of the SDK). */
export function isMetalError(value: unknown): value is MetalError {
  return value instanceof MetalError || (value instanceof Error && value.name === 'MetalError' && typeof (value as { code?: unknown }).code === 'string');
}
