/**
 * What metalctl prints, in one place.
 *
 * - `--json` on every read: one JSON document on stdout (a stream: one JSON object per line).
 * - A table otherwise (cli-table3), without colours when stdout is not a terminal.
 * - Progress bars (cli-progress) and redraws (log-update) only when stdout is a terminal and --json
 *   is off; otherwise plain lines, one per result or change, that a log or a pipe can keep.
 */
import Table from 'cli-table3';
import { MultiBar, Presets, type SingleBar } from 'cli-progress';
import { oneLine } from './errors';

export interface Progress {
  /** One more item done; `line` (a result) is printed above the bar, or as a plain line. */
  tick(line?: string): void;
  /** A line that is not a step (a warning, a note). */
  note(line: string): void;
  stop(): void;
}

export interface Live {
  /** Replaces what the last call drew (terminal), or does nothing (not a terminal: print changes instead). */
  draw(text: string): void;
  /** Leaves what was drawn on the screen. */
  done(): void;
}

/** No rule between rows: a row per line. */
const COMPACT = { mid: '', 'left-mid': '', 'mid-mid': '', 'right-mid': '' };

export class Output {
  readonly json: boolean;
  /** stdout is a terminal and JSON is off: bars and redraws. */
  readonly interactive: boolean;
  private readonly out: NodeJS.WriteStream;

  constructor(opts: { json?: boolean; stdout?: NodeJS.WriteStream } = {}) {
    this.out = opts.stdout ?? process.stdout;
    this.json = Boolean(opts.json);
    this.interactive = Boolean(this.out.isTTY) && !this.json;
  }

  write(text: string): void {
    this.out.write(text);
  }

  line(text = ''): void {
    this.out.write(`${text}\n`);
  }

  /** The JSON answer of a read (pretty when a person reads it). */
  printJson(value: unknown): void {
    this.out.write(`${JSON.stringify(value, null, this.out.isTTY ? 2 : undefined)}\n`);
  }

  /** One JSON object per line: for streams (watch) and per-row results. */
  jsonLine(value: unknown): void {
    this.out.write(`${JSON.stringify(value)}\n`);
  }

  /** A table of the rows, as text. Cells are made one line: a value from elsewhere cannot draw on the terminal. */
  renderTable(head: string[], rows: unknown[][]): string {
    const table = new Table({ head, chars: COMPACT, style: this.out.isTTY ? { head: ['cyan'], border: ['grey'] } : { head: [], border: [] }, wordWrap: false });
    for (const row of rows) table.push(row.map(cell));
    return table.toString();
  }

  table(head: string[], rows: unknown[][]): void {
    this.line(this.renderTable(head, rows));
  }

  /** Key/value pairs of one object, as a two-column table. */
  record(pairs: [string, unknown][]): void {
    const table = new Table({ chars: COMPACT, style: this.out.isTTY ? { head: [], border: ['grey'] } : { head: [], border: [] } });
    for (const [k, v] of pairs) table.push({ [k]: cell(v) });
    this.line(table.toString());
  }

  /** One bar for `total` items when interactive; plain `what i/total: line` lines otherwise (nothing with --json). */
  progress(total: number, what: string): Progress {
    if (this.interactive) {
      const multi = new MultiBar(
        { stream: this.out, format: `${what} [{bar}] {value}/{total}`, hideCursor: true, clearOnComplete: false, stopOnComplete: false },
        Presets.shades_classic,
      );
      const bar: SingleBar = multi.create(total, 0);
      return {
        tick: (line) => {
          if (line) multi.log(`${oneLine(line)}\n`);
          bar.increment();
        },
        note: (line) => multi.log(`${oneLine(line)}\n`),
        // cli-progress prints logged lines at its next redraw, and stop() does not redraw: one last update first.
        stop: () => {
          multi.update();
          multi.stop();
        },
      };
    }
    let done = 0;
    return {
      tick: (line) => {
        done += 1;
        if (!this.json) this.line(`${what} ${done}/${total}${line ? `: ${oneLine(line)}` : ''}`);
      },
      note: (line) => {
        if (!this.json) this.line(oneLine(line));
      },
      stop: () => undefined,
    };
  }

  /** A redraw area (log-update) when interactive; a no-op otherwise. */
  async live(): Promise<Live> {
    if (!this.interactive) return { draw: () => undefined, done: () => undefined };
    // log-update is ESM only: loaded when needed (Node >= 20.19 loads it from CommonJS).
    const { createLogUpdate } = await import('log-update');
    const update = createLogUpdate(this.out, { showCursor: false });
    return { draw: (text) => update(text), done: () => update.done() };
  }
}

export function cell(value: unknown): string {
  if (value === null || value === undefined) return '';
  if (typeof value === 'string') return oneLine(value);
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return oneLine(JSON.stringify(value));
}

/** A timestamp as the table shows it: ISO, to the second, in UTC. */
export function when(iso: string | null | undefined): string {
  if (!iso) return '';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? oneLine(iso) : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

/** A duration between two timestamps (or until now), e.g. 1m05s. */
export function took(from: string | null | undefined, to?: string | null): string {
  if (!from) return '';
  const ms = (to ? new Date(to).getTime() : Date.now()) - new Date(from).getTime();
  if (!Number.isFinite(ms) || ms < 0) return '';
  const s = Math.round(ms / 1000);
  if (s < 1) return `${ms}ms`;
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}
