import Table from 'cli-table3';
import type { DemoOptions } from './options';

export interface Row {
  id: string;
  name: string;
  flavour: string;
  state: string;
  /** The active run's current step, as the timeline names it; null when no run is active. */
  step: string | null;
  attempts: number;
  error: string | null;
}

/** A node's provision move, as its node.provision.<state> event says. */
export interface Move {
  nodeId: string;
  to: string;
  /** A move to failed: the error its event carries. */
  error?: string;
}

export interface View {
  /** `moves`: the provision moves since the last update, in order (the rows are a snapshot). */
  update(phase: string, rows: Row[], seconds: number, moves: Move[]): void;
  phaseDone(phase: string, rows: Row[], seconds: number): void;
  close(): void;
}

const ORDER = ['enrolling', 'inspecting', 'commissioning', 'ready', 'deploying', 'deployed', 'releasing', 'failed'];

function countLine(rows: Row[]): string {
  const counts = new Map<string, number>();
  for (const r of rows) counts.set(r.state, (counts.get(r.state) ?? 0) + 1);
  const states = [...new Set([...ORDER.filter((s) => counts.has(s)), ...counts.keys()])];
  return states.map((s) => `${s} ${counts.get(s)}`).join(' | ');
}

const clip = (text: string, width: number) => (text.length > width ? `${text.slice(0, width - 1)}…` : text);

/**
 * A terminal gets one frame redrawn in place (log-update); anything else (a pipe, CI) gets a line
 * per state change, so a log reads as the story of each machine.
 */
export async function createView(opts: DemoOptions, out: NodeJS.WriteStream): Promise<View> {
  if (!out.isTTY || opts.plain) return plainView(out);
  // ESM-only: loaded by import(), which this CommonJS build keeps as a real dynamic import.
  const { createLogUpdate } = await import('log-update');
  const draw = createLogUpdate(out, { showCursor: false });
  return {
    update(phase, rows, seconds) {
      const width = Math.max(60, out.columns ?? 100);
      const room = Math.max(3, (out.rows ?? 40) - 10);
      const table = new Table({
        head: ['machine', 'BMC', 'state', 'current step', 'try'],
        colWidths: [12, 12, 15, Math.max(20, width - 12 - 12 - 15 - 6 - 8), 6],
        style: { head: ['cyan'], compact: true },
      });
      // Machines still moving first: they are what the eye follows.
      const moving = rows.filter((r) => r.step !== null);
      const shown = [...moving, ...rows.filter((r) => r.step === null)].slice(0, room);
      for (const r of shown) {
        const step = r.step ?? (r.error ? clip(r.error, 200) : '');
        table.push([r.name, r.flavour, r.state, step, r.step ? String(r.attempts) : '']);
      }
      const more = rows.length - shown.length;
      draw([
        `metal demo · ${phase} · ${seconds.toFixed(1)} s`,
        countLine(rows),
        table.toString(),
        more > 0 ? `… and ${more} more (${moving.length} moving)` : '',
      ].join('\n'));
    },
    phaseDone(phase, rows, seconds) {
      draw.done();
      out.write(`done: ${phase} at ${seconds.toFixed(1)} s: ${countLine(rows)}\n`);
    },
    close() {
      draw.done();
    },
  };
}

function plainView(out: NodeJS.WriteStream): View {
  const last = new Map<string, string>();
  let lastPhase = '';
  return {
    update(phase, rows, seconds, moves) {
      const at = `${seconds.toFixed(1).padStart(6)}s`;
      if (phase !== lastPhase) {
        lastPhase = phase;
        out.write(`${at} phase: ${phase}\n`);
      }
      const byId = new Map(rows.map((r) => [r.id, r]));
      // Every move, from the events (a snapshot misses a state passed between two polls); a
      // machine's first line is its enrollment's.
      for (const m of moves) {
        const r = byId.get(m.nodeId);
        if (!r) continue;
        const before = last.get(m.nodeId);
        last.set(m.nodeId, m.to);
        if (before === m.to) continue;
        const error = m.error ?? r.error;
        const why = m.to === 'failed' && error ? `: ${error}` : '';
        out.write(`${at} ${r.name} (${r.flavour}) ${before ? `${before} -> ` : ''}${m.to}${why}\n`);
      }
    },
    phaseDone(phase, rows, seconds) {
      out.write(`${seconds.toFixed(1).padStart(6)}s done: ${phase}: ${countLine(rows)}\n`);
    },
    close() {},
  };
}
