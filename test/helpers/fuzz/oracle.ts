import fs from 'node:fs';
import pg from 'pg';
import pino, { type Logger } from 'pino';
import { createLogger } from '../../../src/ops/log';
import { ERROR_CODES, httpStatusOf, isErrorCode } from '../../../src/errors';
import type { RawResponse } from './http';
import { SECRET_MARKER, summarize } from './values';

// ---- logs -----------------------------------------------------------------------------------

/**
 * The service's own logger (its redaction rules included) writing into memory, so every line can
 * be scanned for secrets and every error line tied to the request that caused it.
 */
export class LogCapture {
  readonly lines: string[] = [];
  readonly logger: Logger;
  constructor(level = process.env.FUZZ_LOG_LEVEL ?? 'debug') {
    this.logger = createLogger(level);
    const sink = { write: (line: string) => void this.lines.push(line) };
    (this.logger as unknown as Record<symbol, unknown>)[pino.symbols.streamSym] = sink;
  }
  mark(): number {
    return this.lines.length;
  }
  since(mark: number): string[] {
    return this.lines.slice(mark);
  }
}

// ---- the database's fingerprint ---------------------------------------------------------------

/**
 * One statement that digests every row of every table of the service, so "a refusal changed
 * nothing" is a comparison of two strings. Left out on purpose:
 * - `_prisma_migrations` (only the migrator writes it);
 * - the outbox's `seq`, which the sequencer fills in shortly after a commit (the rows are counted
 *   and their ids compared instead: an event written by a refusal still shows);
 * - pg-boss's own bookkeeping: only its job count is kept (a refusal must not queue a job; its
 *   maintenance rewrites job states, never the count, and this suite runs no workers).
 */
export class Fingerprint {
  private constructor(private client: pg.Client, private sql: string) {}

  static async open(databaseUrl: string): Promise<Fingerprint> {
    const client = new pg.Client({ connectionString: databaseUrl, application_name: 'fuzz-fingerprint' });
    await client.connect();
    const { rows } = await client.query<{ table_name: string }>(
      `SELECT table_name FROM information_schema.tables
        WHERE table_schema = 'public' AND table_type = 'BASE TABLE' AND table_name <> '_prisma_migrations' ORDER BY 1`,
    );
    // A sum of 64-bit row hashes: order-free, so no sort, and any changed, added or removed row moves it.
    const parts = rows.map(({ table_name: name }) =>
      name === 'event'
        ? `'event', (SELECT count(*) || ':' || coalesce(max(id), 0) || ':' || coalesce(sum(hashtextextended(id || type || coalesce(node_id, '') || payload::text, 0)::numeric), 0) FROM event)`
        : `'${name}', (SELECT count(*) || ':' || coalesce(sum(hashtextextended(t::text, 0)::numeric), 0) FROM "${name}" t)`,
    );
    const boss = await client.query(`SELECT 1 FROM information_schema.tables WHERE table_schema = 'pgboss' AND table_name = 'job'`);
    if (boss.rowCount) parts.push(`'pgboss.job', (SELECT count(*)::text FROM pgboss.job)`);
    return new Fingerprint(client, `SELECT json_build_object(${parts.join(', ')}) AS f`);
  }

  async take(): Promise<Record<string, string>> {
    const { rows } = await this.client.query<{ f: Record<string, string> }>(this.sql);
    return rows[0]!.f;
  }

  close() {
    return this.client.end();
  }
}

export const changedTables = (before: Record<string, string>, after: Record<string, string>) =>
  Object.keys({ ...before, ...after }).filter((k) => before[k] !== after[k]);

// ---- verdicts -------------------------------------------------------------------------------

export type ViolationKind =
  | '5xx'
  | 'no answer'
  | 'INTERNAL code'
  | 'error shape'
  | 'status does not match code'
  | 'unexpected status'
  | 'row changed after a refusal'
  | 'secret in response'
  | 'secret in log'
  | 'anonymous not 401';

export interface Violation {
  kind: ViolationKind;
  detail: string;
}

export interface Observed {
  face: 'rest' | 'graphql';
  method: string;
  /**
   * A subscription whose inputs passed: Yoga validates, coerces and subscribes before it finds that
   * a JSON answer cannot carry a stream, and then says 406 with no body. That is an acceptance.
   */
  subscription?: boolean;
  response: RawResponse;
  /** whether the request carried no credentials at all and hit a route (REST: must be 401) */
  anonymousOnRoute: boolean;
  logLines: string[];
  before: Record<string, string>;
  after: Record<string, string>;
  secrets: string[];
}

export interface Verdict {
  violations: Violation[];
  refused: boolean;
  status: number;
  code?: string;
  message?: string;
  /** error-level log lines written for this request (findings, not failures: see the issue's section 1) */
  errorLogs: string[];
}

const VOCABULARY = new Set<string>(ERROR_CODES);

function parse(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
}

const markerSecret = (secrets: string[]) => (text: string) =>
  text.includes(SECRET_MARKER) || secrets.some((s) => text.includes(s));

/** The rules every answer obeys, whatever was sent. */
export function judge(o: Observed): Verdict {
  const violations: Violation[] = [];
  const { status, body } = o.response;
  const text = body.toString('utf8');
  const json = parse(body) as Record<string, unknown> | undefined;
  let code: string | undefined;
  let message: string | undefined;
  let refused = status >= 400;

  if (status === 0 || status === -1) violations.push({ kind: 'no answer', detail: text });
  else if (status >= 500) violations.push({ kind: '5xx', detail: `status ${status}` });
  else if (status < 200 || (status >= 300 && status < 400)) violations.push({ kind: 'unexpected status', detail: `status ${status}` });

  // Node's own HTTP parser answers a request line or headers over its limit with a bare 431: that
  // refusal happens before any code of the service runs, so it cannot carry the error shape.
  const acceptedStream = o.subscription === true && status === 406 && body.length === 0;
  const bare = status === 431 || o.method === 'HEAD' || acceptedStream;
  if (acceptedStream) refused = false;
  if (o.face === 'rest' && status > 0 && !o.response.streamed && !bare) {
    const error = json?.error as Record<string, unknown> | undefined;
    if (status >= 400) {
      if (!error || typeof error.code !== 'string' || typeof error.message !== 'string' || typeof error.requestId !== 'string') {
        violations.push({ kind: 'error shape', detail: `status ${status} body ${text.slice(0, 200)}` });
      } else {
        code = error.code;
        message = error.message;
        if (!VOCABULARY.has(code)) violations.push({ kind: 'error shape', detail: `code ${code} is not in the vocabulary` });
        if (code === 'INTERNAL' && status < 500) violations.push({ kind: 'INTERNAL code', detail: message });
        const expected = isErrorCode(code) ? httpStatusOf(code, error.details as Record<string, unknown> | undefined) : undefined;
        // 405 (method) and 413 (body size) are the two statuses the vocabulary shares with 400.
        const special = code === 'INVALID_INPUT' && (status === 405 || status === 413);
        if (expected !== undefined && expected !== status && !special) {
          violations.push({ kind: 'status does not match code', detail: `${status} with ${code}` });
        }
      }
    } else if (status >= 200 && status < 300) {
      if (json === undefined) violations.push({ kind: 'error shape', detail: `2xx without JSON: ${text.slice(0, 120)}` });
      else if (error) violations.push({ kind: 'error shape', detail: `2xx carrying an error: ${text.slice(0, 200)}` });
    }
    if (o.anonymousOnRoute && status !== 401 && status !== 413 && status > 0) {
      violations.push({ kind: 'anonymous not 401', detail: `${status} ${code ?? ''}` });
    }
  }

  if (o.face === 'graphql' && status > 0 && !bare) {
    const errors = json?.errors;
    if (json === undefined) {
      violations.push({ kind: 'error shape', detail: `not JSON: ${text.slice(0, 200)}` });
    } else if (errors !== undefined) {
      if (!Array.isArray(errors) || errors.length === 0) violations.push({ kind: 'error shape', detail: `errors is not a non-empty list` });
      else {
        refused = true;
        for (const e of errors as { message?: unknown; extensions?: { code?: unknown } }[]) {
          const c = e?.extensions?.code;
          if (typeof e?.message !== 'string' || typeof c !== 'string' || !VOCABULARY.has(c)) {
            violations.push({ kind: 'error shape', detail: `error without a known code: ${JSON.stringify(e).slice(0, 200)}` });
          } else if (c === 'INTERNAL') {
            violations.push({ kind: 'INTERNAL code', detail: String(e.message) });
          }
          code ??= typeof c === 'string' ? c : undefined;
          message ??= typeof e?.message === 'string' ? e.message : undefined;
        }
      }
    } else if (status < 300 && (json.data === undefined || json.data === null)) {
      violations.push({ kind: 'error shape', detail: 'neither data nor errors' });
    }
  }

  const isSecret = markerSecret(o.secrets);
  const headerText = JSON.stringify(o.response.headers);
  if (isSecret(text) || isSecret(headerText)) violations.push({ kind: 'secret in response', detail: redact(text).slice(0, 300) });
  const leaking = o.logLines.filter(isSecret);
  if (leaking.length) violations.push({ kind: 'secret in log', detail: redact(leaking[0]!).slice(0, 300) });

  if (refused) {
    const changed = changedTables(o.before, o.after);
    if (changed.length) violations.push({ kind: 'row changed after a refusal', detail: `tables: ${changed.join(', ')}` });
  }
  const errorLogs = o.logLines.filter((l) => /"level":"(error|fatal)"/.test(l));
  return { violations, refused, status, code, message, errorLogs };
}

/** Secrets out of a text before it is printed anywhere (a failure message is a log too). */
export function redact(text: string, secrets: string[] = []): string {
  let out = text.replace(new RegExp(`${SECRET_MARKER}\\w*`, 'g'), '<secret>');
  for (const s of secrets) out = out.split(s).join('<token>');
  return out;
}

// ---- findings -------------------------------------------------------------------------------

export interface Finding {
  kind: ViolationKind;
  target: string;
  status: number;
  code?: string;
  message: string;
  /** the cause as the error-level log line tells it (error type and its last line), if one was written */
  log?: string;
  /** up to three different ways the inputs were made that hit it */
  inputs: string[];
  count: number;
  sample: unknown;
}

/** Messages grouped without the parts that vary from case to case (ids, numbers, quoted values). */
export function normalizeMessage(message: string): string {
  return message
    .replace(/\b[a-z]{2,4}_[0-9a-f]{8}-[0-9a-f-]{27}\b/g, '<id>')
    .replace(/"(?:[^"\\]|\\.){0,400}"/g, '"…"')
    .replace(/\{[^{}]*\}/g, '{…}')
    .replace(/\d+/g, 'N')
    .slice(0, 160);
}

/** Control characters out, so a report stays text (hostile inputs are full of NUL). */
const printable = (text: string) => text.replace(/[\u0000-\u001f\u007f\ud800-\udfff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

/** Every violation seen in the run, grouped by target, kind, status, code, message and logged cause. */
export class Findings {
  private groups = new Map<string, Finding>();
  add(target: string, input: string, verdict: Verdict, violation: Violation, sample: unknown, secrets: string[]) {
    const base = redact(verdict.message ?? violation.detail, secrets);
    const message = violation.kind === 'row changed after a refusal' || violation.kind.startsWith('secret') || violation.kind === 'error shape' || violation.kind === 'anonymous not 401'
      ? `${base} — ${redact(violation.detail, secrets)}`
      : base;
    const log = verdict.errorLogs.map((l) => logCause(l, secrets)).find(Boolean);
    const key = [target, violation.kind, verdict.status, verdict.code, normalizeMessage(message), log ? normalizeMessage(log) : ''].join('|');
    const existing = this.groups.get(key);
    if (existing) {
      existing.count += 1;
      if (existing.inputs.length < 3 && !existing.inputs.includes(input)) existing.inputs.push(input);
      return;
    }
    this.groups.set(key, {
      kind: violation.kind,
      target,
      status: verdict.status,
      code: verdict.code,
      message,
      ...(log ? { log } : {}),
      inputs: [input],
      count: 1,
      sample: summarize(sample),
    });
  }
  get size() {
    return this.groups.size;
  }
  list(): Finding[] {
    return [...this.groups.values()].sort((a, b) => a.target.localeCompare(b.target) || a.kind.localeCompare(b.kind));
  }
  /** Appends a Markdown report (FUZZ_REPORT=<file>): first by cause across targets, then each group in full. */
  write(file: string, header: string) {
    const causes = new Map<string, { kind: string; status: string; cause: string; targets: Set<string>; inputs: Set<string>; count: number }>();
    for (const f of this.list()) {
      // Validation before authentication is one cause, whatever the field.
      const cause = f.kind === 'anonymous not 401' ? 'answered before authenticating' : f.log ? `log: ${normalizeMessage(f.log)}` : `message: ${normalizeMessage(f.message)}`;
      const key = `${f.kind}|${f.status} ${f.code ?? ''}|${cause}`;
      const entry = causes.get(key) ?? { kind: f.kind, status: `${f.status} ${f.code ?? ''}`, cause, targets: new Set(), inputs: new Set(), count: 0 };
      entry.targets.add(f.target);
      for (const i of f.inputs) if (entry.inputs.size < 4) entry.inputs.add(i);
      entry.count += f.count;
      causes.set(key, entry);
    }
    const lines = [`\n## ${header}\n`, `### By cause (${causes.size})\n`];
    for (const c of [...causes.values()].sort((a, b) => a.kind.localeCompare(b.kind) || b.targets.size - a.targets.size)) {
      lines.push(`- **${c.kind}** ${c.status} — ${printable(c.cause)} — ${c.count} cases on ${c.targets.size} targets: ${[...c.targets].map((t) => `\`${t}\``).join(', ')}`);
      lines.push(`  - inputs: ${printable([...c.inputs].join(' / '))}`);
    }
    lines.push(`\n### Each group (${this.size}): target | kind | status code | message | log | inputs | count\n`);
    for (const f of this.list()) {
      lines.push(`- \`${f.target}\` | **${f.kind}** | ${f.status} ${f.code ?? ''} | ${printable(JSON.stringify(f.message.slice(0, 240)))} | ${f.log ? printable(JSON.stringify(f.log)) : '-'} | ${printable(f.inputs.join(' / '))} | ${f.count}`);
      lines.push(`  - sample: \`${printable(JSON.stringify(f.sample).slice(0, 500))}\``);
    }
    fs.appendFileSync(file, lines.join('\n') + '\n');
  }
}

/** "<error type>: <the line that says why>" from a log line (Prisma puts the reason last). */
function logCause(line: string, secrets: string[]): string {
  const parsed = parse(Buffer.from(line)) as { msg?: string; err?: { type?: string; message?: string; code?: string }; args?: unknown } | undefined;
  if (!parsed) return redact(line, secrets).slice(0, 200);
  if (!parsed.err) return '';
  const why = (parsed.err.message ?? '').split('\n').map((l) => l.trim()).filter(Boolean).pop() ?? '';
  // Where a stack overflow happens says which code walks the input recursively.
  const frame = parsed.err.type === 'RangeError' ? /node_modules\/((?:@[^/]+\/)?[^/]+)|\/(src\/[^:)]+)/.exec((parsed.err as { stack?: string }).stack ?? '') : null;
  const where = frame ? ` (in ${frame[1] ?? frame[2]})` : '';
  return redact(`${parsed.msg ?? ''}: ${parsed.err.type ?? ''}${parsed.err.code ? ` ${parsed.err.code}` : ''}: ${why}${where}`, secrets).slice(0, 240);
}

