import type { Logger } from 'pino';

/** The logger calls the embedded PostgreSQL's start and stop make. */
export type Log = Pick<Logger, 'info' | 'warn' | 'error' | 'debug'>;

export const errno = (error: unknown) => (error as NodeJS.ErrnoException).code;
