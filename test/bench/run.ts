/**
 * Benchmarks: `npm run bench -- <name> [options]` (after `npm run build`).
 * Each benchmark starts the real service as a child process, loads it, prints a summary and
 * cleans up after itself. Results are recorded in BENCHMARKS.md (current figures) and
 * docs/benchmarks/history.md (every run).
 */
import { readBench } from './read';

// Issue 21 item 7: every service a bench starts takes BMCs on loopback only (the simulators'), so a
// stray address fails at enroll instead of being connected to. Set before any service is spawned.
process.env.BMC_NETWORKS = '127.0.0.0/8';
import { bulkBench } from './bulk';
import { eventsBench } from './events';
import { fabricBench } from './fabric';
import { failoverBench } from './failover';
import { lifecycleBench } from './lifecycle';
import { idleBench } from './idle';
import { isoBench } from './iso';

export interface Bench {
  /** One line for the list printed on an unknown name. */
  summary: string;
  /** Its options, one per line. */
  options?: string[];
  /** Runs the benchmark; resolves to the process exit code. */
  run(args: string[]): Promise<number>;
}

const BENCHES: Record<string, Bench> = {
  read: readBench,
  bulk: bulkBench,
  events: eventsBench,
  fabric: fabricBench,
  lifecycle: lifecycleBench,
  idle: idleBench,
  iso: isoBench,
  failover: failoverBench,
};

function usage(): string {
  const names = Object.entries(BENCHES).flatMap(([name, bench]) => [
    `  ${name.padEnd(9)} ${bench.summary}`,
    ...(bench.options ?? []).map((line) => `            ${line}`),
  ]);
  return ['usage: npm run bench -- <name> [options]', '', 'benchmarks:', ...names].join('\n');
}

async function main(): Promise<number> {
  const name = process.argv[2];
  if (!name || name === '--help' || name === '-h' || !Object.hasOwn(BENCHES, name)) {
    if (name && name !== '--help' && name !== '-h') console.error(`unknown benchmark "${name}"\n`);
    console.error(usage());
    return 1;
  }
  return BENCHES[name]!.run(process.argv.slice(3));
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    if (error instanceof Error && error.name === 'UsageError') console.error(`${error.message}\n\n${usage()}`);
    else console.error('bench failed:', error instanceof Error ? (error.stack ?? error.message) : error);
    process.exit(1);
  },
);
