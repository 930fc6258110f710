import pino, { type Logger } from 'pino';

/**
 * JSON logs. Anything that looks like a secret is redacted by path, in case a caller ever logs a
 * whole input: credentials travel only to the secret broker.
 */
export function createLogger(level: string): Logger {
  return pino({
    level,
    base: { service: 'metal-control-plane' },
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
  });
}
