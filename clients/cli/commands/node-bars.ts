import cliProgress from 'cli-progress';
import { oneLine } from '../errors';

/**
 * Progress of several named items at once (a fabric job's nodes; a control-node job): one bar per
 * item (cli-progress's MultiBar) when `interactive` (stdout a terminal, no --json), one plain line
 * per change otherwise, so a log or a pipe keeps readable lines instead of cursor movements.
 */
export interface ItemProgress {
  /** Sets an item's position and what it does now; its bar is made the first time. */
  update(key: string, value: number, total: number, detail: string): void;
  /** A line that is no item's (a job state change): above the bars, or a plain line. */
  log(line: string): void;
  stop(): void;
}

const KEY_WIDTH = 24;
const fit = (s: string, n: number) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);

export function itemProgress(interactive: boolean, stream: NodeJS.WriteStream = process.stdout): ItemProgress {
  if (!interactive) {
    const last = new Map<string, string>();
    return {
      update(key, value, total, detail) {
        const line = `${oneLine(key)}  ${value}/${total}  ${oneLine(detail)}`;
        if (last.get(key) === line) return;
        last.set(key, line);
        stream.write(`${line}\n`);
      },
      log(line) {
        stream.write(`${oneLine(line)}\n`);
      },
      stop() {},
    };
  }
  const multi = new cliProgress.MultiBar({
    stream,
    format: '{key} [{bar}] {value}/{total} {detail}',
    barsize: 24,
    hideCursor: true,
    clearOnComplete: false,
    stopOnComplete: false,
    forceRedraw: true,
  }, cliProgress.Presets.shades_classic);
  const bars = new Map<string, cliProgress.SingleBar>();
  // The line must fit the terminal: cli-progress cannot redraw a line that wrapped.
  const detailWidth = () => Math.max(16, (stream.columns || 80) - KEY_WIDTH - 24 - 12);
  const payload = (key: string, detail: string) => ({ key: fit(oneLine(key), KEY_WIDTH).padEnd(KEY_WIDTH), detail: fit(oneLine(detail), detailWidth()) });
  return {
    update(key, value, total, detail) {
      const bar = bars.get(key);
      if (!bar) {
        bars.set(key, multi.create(total, value, payload(key, detail)));
        return;
      }
      bar.setTotal(total);
      bar.update(value, payload(key, detail));
    },
    log(line) {
      multi.log(`${oneLine(line)}\n`);
    },
    stop() {
      // cli-progress prints logged lines at its next redraw, and stop() does not redraw: one last update first.
      multi.update();
      multi.stop();
    },
  };
}
