import pino, { type DestinationStream, type Logger } from 'pino';

export interface SerializedError {
  type: string;
  message: string;
  code?: string | number;
  stack?: string;
  cause?: SerializedError;
}

const MAX_MESSAGE = 4000;

/**
 * What a log line says about an error: its type, message, code and stack, and the same for its
 * cause. Never its other properties: a pg error or a Prisma one may carry the client, the pool
 * or the query's parameters (kilobytes of internals, and values a caller sent).
 */
export function serializeError(value: unknown, depth = 0): SerializedError {
  if (value instanceof Error || (typeof value === 'object' && value !== null && typeof (value as Error).message === 'string')) {
    const error = value as Error & { code?: unknown };
    const out: SerializedError = {
      type: error.name || error.constructor?.name || 'Error',
      message: String(error.message).slice(0, MAX_MESSAGE),
    };
    if (typeof error.code === 'string' || typeof error.code === 'number') out.code = error.code;
    if (typeof error.stack === 'string') out.stack = error.stack;
    if (error.cause !== undefined && depth < 3) out.cause = serializeError(error.cause, depth + 1);
    return out;
  }
  let message: string;
  try {
    message = typeof value === 'string' ? value : (JSON.stringify(value) ?? String(value));
  } catch {
    message = Object.prototype.toString.call(value);
  }
  return { type: value === null ? 'null' : typeof value, message: message.slice(0, MAX_MESSAGE) };
}

/**
 * JSON logs, one object a line, the level as a word ("level":"info"), as the start-up failure
 * line of src/ops/fatal.ts writes it: a log pipeline reads one format, whatever wrote the line.
 * Anything that looks like a secret is redacted by path, in case a caller ever logs a whole
 * input: credentials travel only to the secret broker. `destination` is for tests that read the
 * lines.
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  const options: pino.LoggerOptions = {
    level,
    base: { service: 'metal-control-plane' },
    formatters: { level: (label) => ({ level: label }) },
    serializers: { err: serializeError, error: serializeError },
    redact: {
      paths: [
        'req.headers.authorization',
        '*.password',
        '*.credentials',
        '*.token',
        '*.*.password',
        '*.*.credentials',
        'variables.*.bmc.credentials',
      ],
      censor: '[redacted]',
    },
  };
  return destination ? pino(options, destination) : pino(options);
}
