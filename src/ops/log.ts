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

/** Past this many characters waiting, the lines are written at once rather than at the turn's end. */
const BATCH_MAX_CHARS = 64 * 1024;

/**
 * Standard output for the logs, the lines of one event-loop turn written together: one write(2)
 * where pino's default destination makes one per line (under load the service logs a few lines
 * per command, report and request). A line waits at most until the end of the turn it was logged in (or until
 * BATCH_MAX_CHARS are waiting); the process's exit writes what waits, and `flush` (pino's
 * logger.flush, called before a stop's exit) does too. The writes themselves are sonic-boom's
 * synchronous ones (pino.destination's), which retry a pipe that is full (EAGAIN).
 */
export class TurnBatchedOutput implements DestinationStream {
  private waiting = '';
  private scheduled = false;

  constructor(private readonly out: { write(text: string): unknown } = pino.destination({ dest: 1, sync: true })) {}

  write(line: string): void {
    this.waiting += line;
    if (this.waiting.length >= BATCH_MAX_CHARS) {
      this.writeWaiting();
    } else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.writeWaiting);
    }
  }

  /** Writes what waits now; then calls `done`. */
  flush(done?: (error?: Error) => void): void {
    this.writeWaiting();
    done?.();
  }

  readonly writeWaiting = (): void => {
    this.scheduled = false;
    if (this.waiting === '') return;
    const text = this.waiting;
    this.waiting = '';
    this.out.write(text);
  };
}

let stdout: TurnBatchedOutput | null = null;
/** The process's one batched standard output (every logger of the process shares it). */
function sharedStdout(): TurnBatchedOutput {
  if (!stdout) {
    const created = new TurnBatchedOutput();
    process.on('exit', created.writeWaiting);
    stdout = created;
  }
  return stdout;
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
  return pino(options, destination ?? sharedStdout());
}
