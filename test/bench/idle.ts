/**
 * `npm run bench -- idle`: what the service costs while nobody asks it anything. Every request a
 * loaded service answers shares the cores with its background loops (the pg-boss fetch loops, the
 * event sequencer's tick, the built-in agent's poll, the sweeps), so their idle cost shows in every
 * "CPU per request" figure (the uncached read bench). Starts the service (ROLE=all, the defaults,
 * or whatever this process's environment sets: WORKFLOW_ENGINE, BUILTIN_AGENT, QUEUE_POLL_SECONDS,
 * ...), lets it settle, then measures a quiet window: CPU milliseconds per second of the service's
 * Node process and of its PostgreSQL, and with --pg-stats the statements sent in the window.
 *
 * Options: --settle 15 (s before the window), --duration 30 (s), --pg-stats.
 */
import pg from 'pg';
import { cpuSample, flag, intOption, machineInfo, parseBenchArgs, sleep, startService } from './read';

async function run(argv: string[]): Promise<number> {
  const args = parseBenchArgs(argv, ['settle', 'duration'], ['pg-stats']);
  const settleS = intOption(args, 'settle', 15, 0);
  const durationS = intOption(args, 'duration', 30, 1);
  const pgStats = flag(args, 'pg-stats');
  const machine = machineInfo();
  const knobs = ['WORKFLOW_ENGINE', 'BUILTIN_AGENT', 'QUEUE_POLL_SECONDS', 'AGENT_POLL_MS'].filter((k) => process.env[k]).map((k) => `${k}=${process.env[k]}`);
  console.log(`idle benchmark: the service with nothing to do, ${settleS} s to settle, then ${durationS} s measured${knobs.length ? `; ${knobs.join(' ')}` : ''}`);
  console.log(`machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB, Node ${machine.node}, ${machine.os}`);
  console.log(`date: ${machine.date}`);
  const service = await startService({ env: pgStats ? { PG_STAT_STATEMENTS: 'on' } : {} });
  const client = new pg.Client({ connectionString: service.databaseUrl });
  client.on('error', () => undefined);
  try {
    await client.connect();
    if (pgStats) await client.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    await sleep(settleS * 1000);
    if (pgStats) await client.query('SELECT pg_stat_statements_reset()');
    const before = await cpuSample(service);
    const started = performance.now();
    await sleep(durationS * 1000);
    const after = await cpuSample(service);
    const seconds = (performance.now() - started) / 1000;
    const perSecond = (a: number | undefined, b: number | undefined) => ((((b ?? NaN) - (a ?? NaN)) * 1000) / seconds).toFixed(1);
    console.log('\n== summary: idle ==');
    console.log(`service (Node):     ${perSecond(before.server, after.server)} ms of CPU per second`);
    console.log(`PostgreSQL:         ${perSecond(before.database, after.database)} ms of CPU per second`);
    if (pgStats) {
      const { rows } = await client.query<{ calls: string; q: string }>(
        `SELECT calls::text, left(regexp_replace(query, '\\s+', ' ', 'g'), 120) AS q FROM pg_stat_statements
          WHERE toplevel AND query NOT LIKE '%pg_stat_statements%' ORDER BY calls DESC LIMIT 15`);
      const total = rows.reduce((n, r) => n + Number(r.calls), 0);
      console.log(`statements:         ${(total / seconds).toFixed(1)} per second (the most frequent:)`);
      for (const r of rows) console.log(`  ${(Number(r.calls) / seconds).toFixed(2).padStart(6)}/s  ${r.q}`);
    }
    return 0;
  } finally {
    await client.end().catch(() => undefined);
    await service.stop();
  }
}

export const idleBench = {
  summary: "the service's own CPU while idle (its background loops), and with --pg-stats its statements per second",
  options: ['--settle 15 --duration 30 [--pg-stats]'],
  run,
};
