/**
 * A start-up refusal whose message already says why and what to do (a second instance on the same
 * DATA_DIR, a folder PostgreSQL cannot reach...): reported as one line, never with a stack.
 */
export class StartupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StartupError';
  }
}

const MAX_TEXT = 2000;

/** Text for whatever was thrown: an Error, a string, a plain object, null, a symbol... */
export function describeThrown(thrown: unknown): string {
  let text: string;
  if (thrown instanceof Error) text = thrown.message || thrown.name;
  else if (typeof thrown === 'string') text = thrown;
  else {
    try {
      text = JSON.stringify(thrown) ?? String(thrown);
    } catch {
      // Circular, BigInt inside, or no prototype (String() would throw too).
      try {
        text = String(thrown);
      } catch {
        text = Object.prototype.toString.call(thrown);
      }
    }
  }
  return text.length > MAX_TEXT ? `${text.slice(0, MAX_TEXT)}...` : text;
}

/** The one JSON line main.ts prints when the service cannot start. */
export function fatalLine(thrown: unknown): string {
  const line: Record<string, unknown> = { level: 'fatal', time: Date.now(), service: 'metal-control-plane', msg: 'start-up failed', error: describeThrown(thrown) };
  if (thrown instanceof Error && !(thrown instanceof StartupError)) {
    line.type = thrown.name;
    const code = (thrown as { code?: unknown }).code;
    if (typeof code === 'string' || typeof code === 'number') line.code = code;
  }
  return JSON.stringify(line);
}
