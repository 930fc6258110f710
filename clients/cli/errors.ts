/**
 * metalctl's exit codes and how a failure is told on stderr.
 *
 *   0  done
 *   1  refused: the service (or the CLI, checking input before sending anything) said no;
 *      stderr says `error: <CODE>: <message>`, CODE being the service's extensions.code
 *      (INVALID_STATE, NOT_FOUND, INVALID_INPUT ...) or NETWORK when nothing answered
 *   2  usage: the command line itself is wrong (commander's errors, missing configuration)
 */
import { CommanderError } from 'commander';

export const EXIT_OK = 0;
export const EXIT_REFUSED = 1;
export const EXIT_USAGE = 2;

/** The command line is wrong: exit 2, nothing was sent. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** A refusal decided by the CLI itself (bad rows in a file, a digest that does not match ...): exit 1. */
export class Refusal extends Error {
  constructor(readonly code: string, message: string, readonly details?: unknown) {
    super(message);
    this.name = 'Refusal';
  }
}

/** What the SDK's MetalError carries (matched by shape, so a second copy of the SDK still counts). */
interface CodedError {
  code: string;
  message: string;
  details?: unknown;
  field?: string;
  requestId?: string;
}

function isCoded(e: unknown): e is CodedError {
  return e instanceof Error && typeof (e as { code?: unknown }).code === 'string' && !(e instanceof CommanderError);
}

/** One line, no control characters: a message from elsewhere must not move the terminal's cursor. */
export function oneLine(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f-\u009f]+/g, ' ').trim();
}

/** Lines that say more about a refusal: the nodes a bulk call refused, the field named. */
function detailLines(e: CodedError): string[] {
  const lines: string[] = [];
  const details = e.details as { refused?: { nodeId?: string; code?: string; message?: string }[]; field?: string } | undefined;
  if (details && Array.isArray(details.refused)) {
    for (const r of details.refused.slice(0, 50)) lines.push(`  ${r.nodeId}: ${r.code}: ${oneLine(String(r.message ?? ''))}`);
    if (details.refused.length > 50) lines.push(`  ... and ${details.refused.length - 50} more`);
  }
  if (e.requestId) lines.push(`  request id: ${e.requestId}`);
  return lines;
}

/** Writes the failure to stderr and returns the exit code for it. */
export function reportFailure(e: unknown, stderr: (text: string) => void = (t) => process.stderr.write(t)): number {
  if (e instanceof CommanderError) {
    // --help and --version end through here too, with exitCode 0; commander printed its message already.
    return e.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
  }
  if (e instanceof UsageError) {
    stderr(`error: ${oneLine(e.message)}\n(run with --help for usage)\n`);
    return EXIT_USAGE;
  }
  if (isCoded(e)) {
    stderr(`error: ${oneLine(e.code)}: ${oneLine(e.message)}\n${detailLines(e).map((l) => `${l}\n`).join('')}`);
    return EXIT_REFUSED;
  }
  // A bug of ours: say so plainly, with the stack only when asked for.
  const message = e instanceof Error ? e.message : String(e);
  stderr(`error: INTERNAL: ${oneLine(message)}\n`);
  if (process.env.METALCTL_DEBUG && e instanceof Error && e.stack) stderr(`${e.stack}\n`);
  return EXIT_REFUSED;
}
