/**
 * `npm run bench -- lifecycle`: 1,000 simulated Redfish machines from enroll to ready (issue 9,
 * "Speed": at most 60 s wall, at most 5 ms of the engine's CPU per step).
 *
 * The service runs as a child process (read.ts's startService: `node dist/src/main.js`, ROLE all:
 * API, engine worker and built-in site agent with the real Redfish driver, on a fresh embedded
 * PostgreSQL). This process runs the simulated machines (test/sim/machine: one Redfish BMC HTTP
 * server per machine at zero added latency, and the machine that PXE-boots, fetches its iPXE
 * script by MAC and plays the ramdisk against the callback API), and enrolls them over REST in
 * batches, as an operator's script would. With `--split`, three children on one database: the API
 * (ROLE=api, which owns the embedded PostgreSQL), the engine (ROLE=worker, BUILTIN_AGENT=off) and
 * the agent (ROLE=worker, WORKFLOW_ENGINE=off: the built-in agent with the Redfish driver), so the
 * engine's own CPU is measured apart from the API's and from the BMC I/O's.
 *
 * Measured from the first enroll call until every node is ready or failed:
 * - wall time; steps per second: workflow_step rows that ran (started_at set) / wall;
 * - CPU (/proc utime+stime) of each service child, of PostgreSQL (the children's descendants) and
 *   of this process (the simulators), each per step.
 *
 * Options: --machines 1000, --batch 50 (enroll calls in flight at once), --timeout 600 (s),
 *          --quiet (the ramdisk sends no step reports: fewer callbacks), --split,
 *          --mockup public-rackmount1, --cpu-prof <dir> (every child),
 *          --pg-stats (PG_STAT_STATEMENTS=on: the top statements by time, and the count of all).
 * Tuning knobs of the service (AGENT_CONCURRENCY, AGENT_POLL_MS, QUEUE_POLL_SECONDS, ...) reach
 * the children from this process's environment unchanged.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startMachineSim, type MachineSim } from '../sim/machine';
import type { MockupName } from '../sim/redfish/mockup';
import { Sql } from '../../src/db/sql';
import { StatementCounter } from '../../src/db/client';
import { newId } from '../../src/ids';
import { updateNode } from '../../src/modules/metal/node-store';
import { CreatePoolDocument, CreateSiteDocument, CreateTenantDocument } from '../../src/generated/operations';
import { cpuSample, flag, freePorts, gql, hostProbe, intOption, machineInfo, option, parseBenchArgs, processCpuSeconds, sleep, startService, type CpuSample, type Service } from './read';

const TARGET_WALL_S = 60;
const hex = (n: number) => (n & 0xff).toString(16).padStart(2, '0');
const TARGET_CPU_PER_STEP_MS = 5;

type Worker = { pid: number | undefined; stop(): Promise<void>; output: string[] };
interface Children {
  /** Where enroll, iPXE and the callbacks go. */
  api: Service;
  /** The process running the engine (and the built-in agent without --split; the api one without --split). */
  worker: Worker;
  /** --split: the process running the built-in agent alone. */
  agent: Worker | null;
  split: boolean;
}

/** /proc utime+stime in seconds of one pid; NaN when unreadable. */
const cpuOf = async (pid: number | undefined): Promise<number> => (pid === undefined ? NaN : (await processCpuSeconds(pid)) ?? NaN);

interface Cpu { api: CpuSample; worker: number; agent: number }
async function sampleCpu(c: Children): Promise<Cpu> {
  return { api: await cpuSample(c.api), worker: c.split ? await cpuOf(c.worker.pid) : NaN, agent: c.agent ? await cpuOf(c.agent.pid) : NaN };
}

/**
 * The worker child of --split: ROLE=worker on the API child's database, its own DATA_DIR (it
 * starts no PostgreSQL: DATABASE_URL is set). Ready once it logs that its queue workers started.
 */
async function startWorker(api: Service, env: Record<string, string>, nodeArgs: string[]): Promise<Worker> {
  const root = path.resolve(__dirname, '..', '..', '..');
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'metal-bench-worker-'));
  const [port] = await freePorts(1);
  const child = spawn(process.execPath, [...nodeArgs, path.join(root, 'dist', 'src', 'main.js')], {
    cwd: root,
    env: { ...process.env, ...env, ROLE: 'worker', DATABASE_URL: api.databaseUrl, DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  const output: string[] = [];
  let started = false;
  const onData = (chunk: Buffer) => {
    for (const line of chunk.toString('utf8').split('\n')) {
      if (!line.trim()) continue;
      if (line.includes('queue workers started')) started = true;
      // Info lines are per command and per run: keep only what is worth reading afterwards.
      if (/"level":"(warn|error|fatal)"/.test(line) || !line.startsWith('{')) {
        output.push(line);
        if (output.length > 200) output.shift();
      }
    }
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 20_000);
      await exited;
      clearTimeout(t);
    }
    await fs.rm(dataDir, { recursive: true, force: true });
  };
  for (let i = 0; !started; i += 1) {
    if (child.exitCode !== null) throw new Error(`the worker exited during start-up:\n${output.join('\n')}`);
    if (i > 600) {
      await stop();
      throw new Error(`the worker did not start its queue workers within 60 s:\n${output.join('\n')}`);
    }
    await sleep(100);
  }
  return { pid: child.pid, stop, output };
}

/**
 * The m9-engine branch predates "intent in rows" (enroll starting its own metal-enroll run):
 * there, a node enrolled has no run, and the bench starts it through the node store as the
 * end-to-end tests do. Once enroll records its run, this finds one on every node and does nothing.
 */
async function startMissingRuns(sql: Sql, nodeIds: string[]): Promise<number> {
  const { rows } = await sql.query<{ id: string }>(`SELECT id FROM node WHERE id = ANY($1::text[]) AND workflow_id IS NULL`, [nodeIds]);
  await Promise.all(rows.map(({ id }) => sql.transaction((tx) => updateNode(tx, { id, version: null }, {
    data: {}, run: { id: newId('WorkflowRun'), kind: 'metal-enroll', params: { verb: 'enroll' } }, events: [],
  }, null))));
  return rows.length;
}

async function enrollAll(service: Service, sim: MachineSim, poolId: string, batch: number, sql: Sql): Promise<{ nodeIds: string[]; startedByBench: number }> {
  const nodeIds: string[] = [];
  let startedByBench = 0;
  for (let i = 0; i < sim.machines.length; i += batch) {
    const slice = sim.machines.slice(i, i + batch);
    const ids = await Promise.all(slice.map(async (m) => {
      const response = await fetch(`${service.url}/api/compute/metal/enroll`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${service.adminToken}` },
        body: JSON.stringify({
          poolId, name: m.id, macs: m.macs,
          bmc: { address: m.bmc.url, driver: 'redfish', credentials: { username: m.bmc.username, password: m.bmc.password } },
        }),
        signal: AbortSignal.timeout(60_000),
      });
      const body = await response.json() as { node?: { id: string }; error?: unknown };
      if (response.status !== 200 || !body.node) throw new Error(`enroll ${m.id}: HTTP ${response.status} ${JSON.stringify(body).slice(0, 300)}`);
      return body.node.id;
    }));
    nodeIds.push(...ids);
    startedByBench += await startMissingRuns(sql, ids);
  }
  return { nodeIds, startedByBench };
}

interface Progress { counts: Record<string, number>; at: number }
/**
 * The bench's machines by state (they are all of its own pool): read every 250 ms, and counted in
 * PostgreSQL's CPU with the service's, so by the pool's index rather than 1,000 ids (2.5 ms a read).
 */
async function states(sql: Sql, poolId: string): Promise<Record<string, number>> {
  const { rows } = await sql.query<{ s: string; n: number }>(
    `SELECT provision_state AS s, count(*)::int AS n FROM node WHERE pool_id = $1 GROUP BY 1 ORDER BY 1`, [poolId]);
  return Object.fromEntries(rows.map((r) => [r.s, r.n]));
}

/** Where the work waits: runs due now / later (the engine's due-run index), commands queued / claimed, runs waiting. */
async function backlog(sql: Sql): Promise<string> {
  const r = (await sql.query(`SELECT
      (SELECT count(*)::int FROM workflow_run WHERE due_at <= now() AND (lease_until IS NULL OR lease_until <= now())) AS due,
      (SELECT count(*)::int FROM workflow_run WHERE due_at > now() AND (lease_until IS NULL OR lease_until <= now())) AS later,
      (SELECT count(*)::int FROM command WHERE status = 'queued') AS queued,
      (SELECT count(*)::int FROM command WHERE status = 'claimed') AS claimed,
      (SELECT count(*)::int FROM workflow_run WHERE status = 'waiting') AS waiting,
      (SELECT count(*)::int FROM workflow_run WHERE lease_until > now()) AS leased`)).rows[0]!;
  return `runs due ${r.due}, due later ${r.later}; commands queued ${r.queued}, claimed ${r.claimed}; runs waiting ${r.waiting}, leased ${r.leased}`;
}

const fmt = (counts: Record<string, number>) => Object.entries(counts).map(([s, n]) => `${s} ${n}`).join(', ');

async function run(argv: string[]): Promise<number> {
  const args = parseBenchArgs(argv, ['machines', 'batch', 'timeout', 'mockup', 'cpu-prof'], ['quiet', 'split', 'pg-stats']);
  const machines = intOption(args, 'machines', 1000, 1);
  const batch = intOption(args, 'batch', 50, 1);
  const timeoutS = intOption(args, 'timeout', 600, 1);
  const quiet = flag(args, 'quiet');
  const split = flag(args, 'split');
  const mockup = (option(args, 'mockup') ?? 'public-rackmount1') as MockupName;
  const profDir = option(args, 'cpu-prof');
  const pgStats = flag(args, 'pg-stats');
  const machine = machineInfo();
  const knobs = ['AGENT_CONCURRENCY', 'AGENT_POLL_MS', 'QUEUE_POLL_SECONDS', 'WORKFLOW_LEASE_MS', 'AGENT_LEASE_MS'].filter((k) => process.env[k]).map((k) => `${k}=${process.env[k]}`);
  console.log(`lifecycle benchmark: ${machines} simulated Redfish machines (${mockup}, zero added latency), enroll -> inspect -> commission -> ready`);
  console.log(`  enroll over REST, ${batch} calls in flight; ramdisk ${quiet ? 'quiet (no step reports)' : 'with step reports'}; service ${split ? 'ROLE=api + engine (ROLE=worker BUILTIN_AGENT=off) + agent (ROLE=worker WORKFLOW_ENGINE=off)' : 'ROLE=all (one child)'}${knobs.length ? `; ${knobs.join(' ')}` : ''}${pgStats ? '; PG_STAT_STATEMENTS=on' : ''}`);
  console.log(`machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB, Node ${machine.node}, ${machine.os}`);
  console.log(`date: ${machine.date}`);
  const probeBefore = await hostProbe();

  const nodeArgs = profDir ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`] : [];
  // One broker key for both children of --split: the worker's agent decrypts what the API's enroll stored.
  const secretKey = randomBytes(32).toString('base64');
  const api = await startService({ env: { ROLE: split ? 'api' : 'all', SECRET_KEY: secretKey, ...(pgStats ? { PG_STAT_STATEMENTS: 'on' } : {}) }, nodeArgs });
  let worker: Worker | null = null;
  let agent: Worker | null = null;
  let sim: MachineSim | null = null;
  // A Ctrl-C (or SIGTERM) still stops both children and the simulators, in order.
  const onSignal = () => {
    console.error('[bench] interrupted: stopping the service and the simulators');
    void Promise.allSettled([sim?.stop(), worker?.stop(), agent?.stop(), api.stop()]).then(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const pool = new pg.Pool({ connectionString: api.databaseUrl, max: 4 });
  // The service stopping (its PostgreSQL with it) ends these connections: not an error of the bench.
  pool.on('error', () => undefined);
  const sql = new Sql(pool, new StatementCounter());
  try {
    worker = split ? await startWorker(api, { SECRET_KEY: secretKey, BUILTIN_AGENT: 'off' }, nodeArgs) : { pid: api.pid, stop: async () => undefined, output: api.output };
    agent = split ? await startWorker(api, { SECRET_KEY: secretKey, WORKFLOW_ENGINE: 'off' }, nodeArgs) : null;
    const children: Children = { api, worker, agent, split };
    if (pgStats) {
      await sql.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
      await sql.query('SELECT pg_stat_statements_reset()');
      await sql.query('SELECT pg_stat_reset()');
    }
    const { createTenant } = await gql(api.url, api.adminToken, CreateTenantDocument, { input: { name: 'bench-lifecycle' } });
    const { createSite } = await gql(api.url, api.adminToken, CreateSiteDocument, { input: { name: 'bench-lifecycle-site', tenantId: createTenant.id } });
    const { createPool } = await gql(api.url, api.adminToken, CreatePoolDocument, { input: { siteId: createSite.id, name: 'bench-lifecycle-pool' } });

    const simStarted = performance.now();
    sim = await startMachineSim({
      serviceUrl: api.url,
      // MACs of our own, one per NIC of the mockup (at most four): the simulator's fallback scheme (index + 0x40 for the
      // second NIC) gives machine i's second MAC to machine i + 64 as its first.
      redfish: { machines: Array.from({ length: machines }, (_, i) => ({ macs: [0, 1, 2, 3].map((nic) => `02:be:${hex(i >> 16)}:${hex(i >> 8)}:${hex(i)}:${hex(nic)}`) })), defaults: { mockup } },
      behaviour: quiet ? { quiet: true } : {},
    });
    console.log(`  ${machines} simulated BMCs listening (${((performance.now() - simStarted) / 1000).toFixed(1)} s)`);

    const before = await sampleCpu(children);
    const started = performance.now();
    const { nodeIds, startedByBench } = await enrollAll(api, sim, createPool.id, batch, sql);
    const enrolledMs = performance.now() - started;
    console.log(`  enrolled ${nodeIds.length} in ${(enrolledMs / 1000).toFixed(1)} s${startedByBench ? ` (${startedByBench} metal-enroll runs started by the bench: this branch's enroll records none)` : ''}`);

    let last: Progress = { counts: await states(sql, createPool.id), at: performance.now() };
    let printed = 0;
    for (;;) {
      const moving = nodeIds.length - (last.counts.ready ?? 0) - (last.counts.failed ?? 0);
      if (moving === 0) break;
      if (performance.now() - started > timeoutS * 1000) {
        console.log(`  NOT SETTLED after ${timeoutS} s: ${fmt(last.counts)}; the figures below are up to now`);
        break;
      }
      if (performance.now() - printed >= 5000) {
        printed = performance.now();
        console.log(`  ${((printed - started) / 1000).toFixed(0).padStart(4)} s: ${fmt(last.counts)}  | ${await backlog(sql)}`);
      }
      await sleep(250);
      last = { counts: await states(sql, createPool.id), at: performance.now() };
    }
    const wallMs = last.at - started;
    const after = await sampleCpu(children);
    const statements = pgStats
      ? await sql.query<{ calls: number; exec: number; plan: number; q: string; total: string; all: string; sumMs: string; jitMs: string; jitN: string }>(
        `SELECT calls::int, round(total_exec_time)::int AS exec, round(total_plan_time)::int AS plan,
                (SELECT round(sum(jit_generation_time + jit_inlining_time + jit_optimization_time + jit_emission_time))::text FROM pg_stat_statements) AS "jitMs",
                (SELECT count(*) FILTER (WHERE jit_functions > 0)::text FROM pg_stat_statements) AS "jitN",
                left(regexp_replace(query, '\\s+', ' ', 'g'), 150) AS q,
                (SELECT sum(calls) FROM pg_stat_statements WHERE toplevel)::text AS total, (SELECT sum(calls) FROM pg_stat_statements)::text AS "all",
                (SELECT round(sum(total_exec_time + total_plan_time)) FROM pg_stat_statements WHERE toplevel)::text AS "sumMs"
           FROM pg_stat_statements ORDER BY total_exec_time + total_plan_time DESC LIMIT 25`)
      : null;
    const byCalls = pgStats
      ? await sql.query<{ calls: number; exec: number; q: string }>(
        `SELECT calls::int, round(total_exec_time)::int AS exec, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS q
           FROM pg_stat_statements WHERE toplevel ORDER BY calls DESC LIMIT 30`)
      : null;
    // What triggers and functions ran on the statements' behalf (foreign-key checks, notifications).
    const nested = pgStats
      ? await sql.query<{ calls: number; exec: number; q: string }>(
        `SELECT calls::int, round(total_exec_time)::int AS exec, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS q
           FROM pg_stat_statements WHERE NOT toplevel ORDER BY calls DESC LIMIT 15`)
      : null;

    const figures = (await sql.query(`SELECT
        (SELECT count(*)::int FROM workflow_step s JOIN workflow_run w ON w.id = s.run_id JOIN node n ON n.id = w.node_id WHERE n.pool_id = $1 AND s.started_at IS NOT NULL) AS steps,
        (SELECT count(*)::int FROM workflow_step s JOIN workflow_run w ON w.id = s.run_id JOIN node n ON n.id = w.node_id WHERE n.pool_id = $1 AND s.status = 'skipped') AS skipped,
        (SELECT count(*)::int FROM workflow_run w JOIN node n ON n.id = w.node_id WHERE n.pool_id = $1) AS runs,
        (SELECT count(*)::int FROM command c JOIN node n ON n.id = c.node_id WHERE n.pool_id = $1) AS commands,
        (SELECT count(*)::int FROM ramdisk_report r JOIN node n ON n.id = r.node_id WHERE n.pool_id = $1) AS reports,
        (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM s.finished_at - s.started_at)) FROM workflow_step s JOIN workflow_run w ON w.id = s.run_id JOIN node n ON n.id = w.node_id WHERE n.pool_id = $1 AND s.finished_at IS NOT NULL) AS step_p50_s`,
      [createPool.id])).rows[0]!;
    const perStep = await sql.query<{ kind: string; name: string; n: number; p50: number; p95: number }>(
      `SELECT w.kind, s.name, count(*)::int AS n,
              percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM s.finished_at - s.started_at)) AS p50,
              percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM s.finished_at - s.started_at)) AS p95
         FROM workflow_step s JOIN workflow_run w ON w.id = s.run_id
        WHERE s.finished_at IS NOT NULL AND s.started_at IS NOT NULL
        GROUP BY w.kind, s.idx, s.name ORDER BY min(s.started_at), s.idx`);
    const failed = (await sql.query(`SELECT failed_from, last_error_code, count(*)::int AS n FROM node WHERE pool_id = $1 AND provision_state = 'failed' GROUP BY 1, 2`, [createPool.id])).rows;
    const totals = sim.totals();
    let duplicates = 0;
    let bmcConnections = 0;
    for (const m of sim.machines) {
      const counts = sim.redfish.counts(m.id);
      duplicates += counts.duplicateKeys.length;
      bmcConnections += sim.redfish.connections(m.id);
    }
    // Every HTTP request the simulated BMCs answered, by method and path (the simulator keeps the last 2,000 per BMC).
    const bmcRequests = new Map<string, number>();
    for (const m of sim.machines) {
      for (const r of sim.redfish.requests(m.id)) {
        const key = `${r.method} ${r.path.replace(/\/Systems\/[^/]+/, '/Systems/{id}').replace(/\/Managers\/[^/]+/, '/Managers/{id}').replace(/\/Sessions\/[^/]+/, '/Sessions/{id}')} ${r.status}`;
        bmcRequests.set(key, (bmcRequests.get(key) ?? 0) + 1);
      }
    }
    const bmcTotal = [...bmcRequests.values()].reduce((a, b) => a + b, 0);

    const steps = Number(figures.steps);
    const d = (a: number | undefined, b: number | undefined) => (b ?? NaN) - (a ?? NaN);
    const serviceCpu = d(before.api.server, after.api.server);
    const dbCpu = d(before.api.database, after.api.database);
    const benchCpu = d(before.api.bench, after.api.bench);
    const workerCpu = split ? d(before.worker, after.worker) : serviceCpu;
    const agentCpu = d(before.agent, after.agent);
    const ms = (seconds: number) => ((seconds * 1000) / steps).toFixed(2);
    const wallS = wallMs / 1000;
    // The issue's targets are for 1,000 machines; a smaller fleet's figures are not held to them.
    const pass = (ok: boolean) => (machines !== 1000 ? `n/a (${machines} machines; the target is for 1000)` : ok && last.counts.ready === machines ? 'PASS' : 'FAIL');

    console.log('\n== per step (all runs): count, duration p50 / p95 ==');
    for (const r of perStep.rows) console.log(`  ${`${r.kind} ${r.name}`.padEnd(50)} ${String(r.n).padStart(5)}  ${Number(r.p50).toFixed(3)} / ${Number(r.p95).toFixed(3)} s`);
    console.log('\n== summary: lifecycle ==');
    console.log(`machine:            ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB, Node ${machine.node}`);
    const probeAfter = await hostProbe();
    console.log(`host probe:         hashing ${probeBefore.hashMs} / ${probeAfter.hashMs} ms of CPU, a pipe round trip ${probeBefore.roundTripUs} / ${probeAfter.roundTripUs} us of CPU (before / after the run; higher: a slower host, see hostProbe)`);
    console.log(`nodes:              ${fmt(last.counts)}${failed.length ? ` (failed: ${failed.map((f) => `${f.n} from ${f.failed_from} ${f.last_error_code}`).join(', ')})` : ''}`);
    console.log(`wall:               ${wallS.toFixed(1)} s from the first enroll call to the last node settled (enrolling ${machines}: ${(enrolledMs / 1000).toFixed(1)} s of it)`);
    console.log(`steps:              ${steps} workflow steps ran (${figures.skipped} of them skipped), ${figures.runs} runs: ${(steps / wallS).toFixed(1)} steps/s; median step ${(Number(figures.step_p50_s) * 1000).toFixed(0)} ms`);
    console.log(`work:               ${figures.commands} BMC commands, ${figures.reports} ramdisk reports`);
    console.log(`machines:           ${totals.pxeBoots} PXE boots, ${totals.ramdiskBoots} ramdisk boots, ${totals.wipesPerformed} disk wipes, ${totals.refused} calls refused, ${totals.failedCalls} failed; ${duplicates} idempotency keys accepted twice`);
    console.log(`BMC requests:       ${bmcTotal} (${(bmcTotal / Number(figures.commands)).toFixed(2)} per BMC command) on ${bmcConnections} TCP connections: ${[...bmcRequests].sort((a, b) => b[1] - a[1]).slice(0, 8).map(([k, n]) => `${n} ${k}`).join(', ')}`);
    if (split) {
      console.log(`CPU, engine:        ${workerCpu.toFixed(1)} s = ${ms(workerCpu)} ms per step (ROLE=worker BUILTIN_AGENT=off: the workflow engine alone)`);
      console.log(`CPU, agent:         ${agentCpu.toFixed(1)} s = ${ms(agentCpu)} ms per step (ROLE=worker WORKFLOW_ENGINE=off: the built-in agent with the Redfish driver)`);
      console.log(`CPU, API:           ${serviceCpu.toFixed(1)} s = ${ms(serviceCpu)} ms per step (ROLE=api: enroll, iPXE scripts, ramdisk callbacks)`);
    } else {
      console.log(`CPU, service:       ${serviceCpu.toFixed(1)} s = ${ms(serviceCpu)} ms per step (ROLE=all: API, engine and built-in agent in one process)`);
    }
    console.log(`CPU, PostgreSQL:    ${dbCpu.toFixed(1)} s = ${ms(dbCpu)} ms per step`);
    console.log(`CPU, bench:         ${benchCpu.toFixed(1)} s = ${ms(benchCpu)} ms per step (${machines} simulated BMCs and machines, enroll calls)`);
    console.log(`target wall <= ${TARGET_WALL_S} s: ${pass(wallS <= TARGET_WALL_S)}`);
    // Issue 23's target: all the service's processes and PostgreSQL together (with --split, the three children).
    const allServiceCpu = split ? serviceCpu + workerCpu + agentCpu : serviceCpu;
    console.log(`target service + PostgreSQL CPU per step <= ${TARGET_CPU_PER_STEP_MS} ms: ${Number.isFinite(dbCpu) ? `${pass(((allServiceCpu + dbCpu) * 1000) / steps <= TARGET_CPU_PER_STEP_MS)} (${ms(allServiceCpu + dbCpu)} ms)` : 'not measured (PostgreSQL is not a child here: DATABASE_URL)'}`);
    // PostgreSQL's CPU by process: which backends (the LISTEN connection, the pools, autovacuum, the WAL writer) use it.
    const byProcess = pgStats
      ? await (async () => {
        const rows = (await sql.query<{ pid: number; kind: string }>(
          `SELECT pid, backend_type || CASE WHEN application_name <> '' THEN ' ' || application_name ELSE '' END AS kind FROM pg_stat_activity`)).rows;
        const groups = new Map<string, { n: number; s: number }>();
        for (const r of rows) {
          const s = await processCpuSeconds(r.pid);
          if (s === undefined) continue;
          const g = groups.get(r.kind) ?? { n: 0, s: 0 };
          groups.set(r.kind, { n: g.n + 1, s: g.s + s });
        }
        return [...groups].sort((a, b) => b[1].s - a[1].s);
      })()
      : null;
    console.log(split
      ? `target engine CPU per step <= ${TARGET_CPU_PER_STEP_MS} ms: ${pass((workerCpu * 1000) / steps <= TARGET_CPU_PER_STEP_MS)} (${ms(workerCpu)} ms: the engine process)`
      : `target engine CPU per step <= ${TARGET_CPU_PER_STEP_MS} ms: not measured apart here (the one service process, API and agent included, used ${ms(workerCpu)} ms); --split runs the engine in a process of its own`);
    if (statements) {
      const [first] = statements.rows;
      console.log(`\n== PostgreSQL statements (pg_stat_statements): ${first?.total ?? 0} sent (${(Number(first?.total ?? 0) / steps).toFixed(1)} per step), ${first?.all ?? 0} with the ones triggers and functions run; ${(Number(first?.sumMs ?? 0) / 1000).toFixed(1)} s of execution and planning in all (JIT: ${first?.jitMs ?? 0} ms in ${first?.jitN ?? 0} statements); the top by time ==`);
      for (const r of statements.rows) console.log(`  ${String(r.calls).padStart(7)} calls ${String(r.exec).padStart(6)} ms exec ${String(r.plan).padStart(5)} ms plan  ${r.q}`);
      console.log('== the most called, sent by a client ==');
      for (const r of byCalls!.rows) console.log(`  ${String(r.calls).padStart(7)} calls (${(r.calls / steps).toFixed(2)} per step) ${String(r.exec).padStart(6)} ms  ${r.q}`);
      console.log('== the most called, run by triggers and functions ==');
      for (const r of nested!.rows) console.log(`  ${String(r.calls).padStart(7)} calls (${(r.calls / steps).toFixed(2)} per step) ${String(r.exec).padStart(6)} ms  ${r.q}`);
      // Which tables are read by scans of many rows, and how many updates were HOT (no index entry).
      const tables = await sql.query<{ t: string; seq: string; seqRows: string; idx: string; idxRows: string; upd: string; hot: string; ins: string; dead: string }>(
        `SELECT relname AS t, seq_scan::text AS seq, seq_tup_read::text AS "seqRows", COALESCE(idx_scan, 0)::text AS idx, COALESCE(idx_tup_fetch, 0)::text AS "idxRows",
                n_tup_upd::text AS upd, n_tup_hot_upd::text AS hot, n_tup_ins::text AS ins, n_dead_tup::text AS dead
           FROM pg_stat_user_tables WHERE seq_scan + COALESCE(idx_scan, 0) + n_tup_ins + n_tup_upd > 0 ORDER BY seq_tup_read + COALESCE(idx_tup_fetch, 0) DESC LIMIT 14`);
      console.log('== tables: scans and the rows they read, inserts, updates (HOT), dead rows now ==');
      for (const r of tables.rows) {
        console.log(`  ${r.t.padEnd(22)} seq ${r.seq.padStart(6)} (${r.seqRows.padStart(9)} rows)  idx ${r.idx.padStart(7)} (${r.idxRows.padStart(9)} rows)  ins ${r.ins.padStart(6)}  upd ${r.upd.padStart(6)} (${r.hot} HOT)  dead ${r.dead}`);
      }
      console.log('== PostgreSQL CPU by process (since each started; processes that ended are not listed) ==');
      for (const [kind, g] of byProcess!) console.log(`  ${g.s.toFixed(1).padStart(6)} s  ${String(g.n).padStart(3)} x ${kind}`);
    }
    const errors = api.outputKinds().filter(([k]) => k.startsWith('error') || k.startsWith('fatal') || k.startsWith('warn'));
    if (errors.length) console.log(`service warnings/errors: ${errors.slice(0, 8).map(([k, n]) => `${n}x ${k}`).join('; ')}`);
    if (split && worker.output.length) console.log(`engine warnings/errors (last): ${worker.output.slice(-5).map((l) => l.slice(0, 300)).join('\n  ')}`);
    if (agent?.output.length) console.log(`agent warnings/errors (last): ${agent.output.slice(-5).map((l) => l.slice(0, 300)).join('\n  ')}`);
    return last.counts.ready === machines ? 0 : 1;
  } finally {
    await sim?.stop();
    await pool.end();
    await worker?.stop();
    await agent?.stop();
    await api.stop();
  }
}

export const lifecycleBench = {
  summary: '1,000 simulated Redfish machines from enroll to ready (wall, steps/s, CPU per step)',
  options: ['--machines 1000 --batch 50 --timeout 600 [--quiet] [--split] [--mockup public-rackmount1] [--cpu-prof <dir>] [--pg-stats]'],
  run,
};
