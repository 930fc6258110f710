/**
 * `npm run bench -- failover` (issue 24 items 3 and 4): several service processes on a Patroni
 * cluster (test/helpers/patroni.ts: etcd, a primary and a synchronous standby on loopback), every
 * one given the multi-host DATABASE_URL: 2 × ROLE=api, 2 × ROLE=worker (the engine and the built-in
 * site agent) and 1 × ROLE=agent (a remote site agent talking to the first api process over HTTP).
 *
 * The fleet is two sites of one tenant: site A's machines are served by the workers' built-in
 * agents and boot from the first api process, site B's by the remote agent (a site with a remote
 * agent heartbeating is left to it) and boot from the second. N simulated Redfish machines
 * (test/sim/machine; default 200, half per site) are enrolled over REST and go enroll -> inspect ->
 * commission -> ready; each one ready is deployed (POST /api/compute/metal/deploy with a deploy
 * profile: the simulator's deploy ramdisk reports the profile's steps) to deployed.
 *
 * Once 30% of the machines are ready (or further), the primary's postmaster is SIGKILLed (Patroni
 * promotes the synchronous standby); once the old primary is back as the synchronous standby and
 * 60% are deploying or deployed, a planned switchover (Patroni's REST API). The bench holds back
 * the deploys of the last 30% of the fleet until the switchover starts, so that there is work in
 * flight across it at any fleet size.
 *
 * For each of the two, one line each (`--json` also writes them as JSON):
 *   process exits: service children that exited (any exit of any child; by when it happened);
 *   lost events: seq values missing from the event table over the run (gaps, or rows never
 *     numbered) plus, for each of two SSE readers of /api/events (one per api process, each
 *     reconnecting with Last-Event-ID after every drop, and dropping its own connection every 7 s
 *     and 11 s to exercise that), seq values not received or received
 *     more than once (by seq: up to the seq at the switchover's start for the kill);
 *   duplicate destructive calls: idempotency keys the Redfish simulators accepted twice;
 *   stuck runs: for the kill, just before the switchover: active runs whose lease ran out or that
 *     were due more than 60 s ago and are not leased; for the switchover, at the end: active runs
 *     that are not due and not leased, or as above, plus machines not in the expected end state;
 *   resumed after: from the SIGKILL (from the moment the old primary stopped taking writes, for
 *     the switchover) until the first workflow step finishes again (workflow_step.finished_at
 *     read on the new primary).
 * Exits 1 when any of the four counts is not 0.
 *
 * `--workers-ratio`: instead, the lifecycle wall (enroll -> ready, no failover, no deploy, no remote
 * agent) at the same machine count with 1 and with 2 worker processes (2 api processes each time),
 * each on a fresh cluster, and their ratio: on two cores it shows the work is shared, not faster.
 *
 * Options: --machines 200, --batch 25 (enroll calls in flight), --timeout 900 (s, per run),
 *          --stall 180 (s: stop waiting when no machine changed state for that long),
 *          --no-agent (no remote agent: one site), --json <file>,
 *          --workers-ratio.
 * Everything it starts (the cluster, the children, the simulators) is stopped at the end, on a
 * failure and on Ctrl-C; it then checks that no process of the cluster or of a child is left.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import pg from 'pg';
import { databasePool } from '../../src/db/target';
import { ACTIVE_RUN_STATUSES } from '../../src/modules/metal/states';
import { patroniMissing, startPatroniCluster, type Member, type PatroniCluster } from '../helpers/patroni';
import { startMachineSim, type MachineSim } from '../sim/machine';
import { logged, readyz, spawnServiceChild, type ServiceChild } from './failover-children';
import { readStream, type StreamReader } from './failover-stream';
import { flag, gql, intOption, machineInfo, option, parseBenchArgs, processCpuSeconds, sleep } from './read';

const hex = (n: number) => (n & 0xff).toString(16).padStart(2, '0');
const ACTIVE = `(${ACTIVE_RUN_STATUSES.map((s) => `'${s}'`).join(', ')})`;
const PROFILE_STEPS = [{ name: 'disk', kind: 'partition' }, { name: 'os', kind: 'image', params: { image: 'debian-12' } }];

interface Site {
  name: string;
  siteId: string;
  poolId: string;
  /** The api process its machines boot from and are enrolled through. */
  api: ServiceChild;
  sim: MachineSim | null;
  nodeIds: string[];
}

interface Setup {
  /** The cluster while it starts (a Ctrl-C then waits for it, to stop it). */
  starting: Promise<PatroniCluster> | null;
  cluster: PatroniCluster | null;
  children: ServiceChild[];
  sites: Site[];
  readers: StreamReader[];
  pool: pg.Pool | null;
}

/** Everything still to stop, for a failure and for Ctrl-C. */
let current: Setup | null = null;
let cleaning: Promise<string[]> | null = null;

/** Stops the readers, the simulators, the children (api last) and the cluster; returns what is left running. */
function cleanup(s: Setup): Promise<string[]> {
  return (cleaning ??= (async () => {
    for (const r of s.readers) r.stop();
    await Promise.allSettled(s.sites.map((site) => site.sim?.stop()));
    const order = [...s.children].sort((a, b) => Number(a.role === 'api') - Number(b.role === 'api'));
    await Promise.allSettled(order.filter((c) => c.role !== 'api').map((c) => c.stop()));
    await Promise.allSettled(order.filter((c) => c.role === 'api').map((c) => c.stop()));
    await s.pool?.end().catch(() => undefined);
    const left: string[] = [];
    for (const c of s.children) {
      try {
        process.kill(-c.pid!, 0);
        left.push(`${c.name} (process group ${c.pid})`);
      } catch {
        // gone
      }
    }
    if (!s.cluster && s.starting) s.cluster = await s.starting.catch(() => null);
    if (s.cluster) {
      await s.cluster.stop().catch((e: unknown) => left.push(`cluster stop failed: ${String(e)}`));
      for (const p of s.cluster.leftovers()) left.push(`${p.pid} ${p.cmdline.slice(0, 120)}`);
    }
    return left;
  })());
}

function onSignal(): void {
  console.error('[bench] interrupted: stopping the service processes, the simulators and the cluster');
  const s = current;
  void (s ? cleanup(s) : Promise.resolve([])).then((left) => {
    if (left.length) console.error(`[bench] still running: ${left.join('; ')}`);
    process.exit(130);
  });
}

async function rest(url: string, token: string, method: string, route: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${url}${route}`, {
    method,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  let parsed: Record<string, unknown> = {};
  try {
    parsed = JSON.parse(text) as Record<string, unknown>;
  } catch {
    parsed = { text: text.slice(0, 200) };
  }
  return { status: res.status, body: parsed };
}

/** A query through the multi-host pool that is retried while there is no primary (a failover). */
async function q<T extends pg.QueryResultRow>(pool: pg.Pool, text: string, values: unknown[] = [], waitMs = 60_000): Promise<T[]> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      return (await pool.query<T>(text, values)).rows;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await sleep(250);
    }
  }
}

interface Options {
  machines: number;
  batch: number;
  timeoutS: number;
  workers: number;
  deploy: boolean;
  agent: boolean;
  failover: boolean;
  /** Stop waiting when no machine changed state for this long (nothing in progress on the cluster). */
  stallS: number;
}

/** Starts the cluster, the children and the fleet's sites; registers them in `s` as they start. */
async function setUp(s: Setup, o: Options, adminToken: string): Promise<void> {
  const started = Date.now();
  s.starting = startPatroniCluster({ waitMs: 90_000 });
  s.cluster = await s.starting;
  const url = s.cluster.url;
  s.pool = databasePool(url, { max: 4 });
  s.pool.on('error', () => undefined);
  console.log(`  Patroni cluster up (${((Date.now() - started) / 1000).toFixed(1)} s): members ${s.cluster.members.map((m) => `${m.name} 127.0.0.1:${m.port}`).join(', ')}`);
  const secretKey = randomBytes(32).toString('base64');
  const common = { DATABASE_URL: url, SECRET_KEY: secretKey, ADMIN_TOKEN: adminToken, LOG_LEVEL: 'info', SHUTDOWN_TIMEOUT_MS: '10000' };
  // The first api process runs the migrations; the others start on a migrated database.
  const onSpawn = (c: ServiceChild) => s.children.push(c);
  const api1 = await spawnServiceChild({ name: 'api-1', env: { ...common, ROLE: 'api' }, ready: readyz, onSpawn });
  const rest2 = await Promise.all([
    spawnServiceChild({ name: 'api-2', env: { ...common, ROLE: 'api' }, ready: readyz, onSpawn }),
    ...Array.from({ length: o.workers }, (_, i) =>
      spawnServiceChild({ name: `worker-${i + 1}`, env: { ...common, ROLE: 'worker' }, ready: logged('queue workers started'), onSpawn })),
  ]);
  const api2 = rest2[0]!;

  const { createTenant } = await gql<{ createTenant: { id: string } }, unknown>(api1.url!, adminToken, 'mutation ($i: CreateTenantInput!) { createTenant(input: $i) { id } }', { i: { name: 'bench-failover' } });
  const siteNames = o.agent ? ['a', 'b'] : ['a'];
  const perSite = siteNames.map((_, i) => Math.floor(o.machines / siteNames.length) + (i < o.machines % siteNames.length ? 1 : 0));
  for (const [i, name] of siteNames.entries()) {
    const { createSite } = await gql<{ createSite: { id: string } }, unknown>(api1.url!, adminToken, 'mutation ($i: CreateSiteInput!) { createSite(input: $i) { id } }', { i: { name: `bench-failover-${name}`, tenantId: createTenant.id } });
    const { createPool } = await gql<{ createPool: { id: string } }, unknown>(api1.url!, adminToken, 'mutation ($i: CreatePoolInput!) { createPool(input: $i) { id } }', { i: { name: `bench-failover-${name}`, siteId: createSite.id } });
    s.sites.push({ name, siteId: createSite.id, poolId: createPool.id, api: i === 0 ? api1 : api2, sim: null, nodeIds: [] });
  }
  if (o.agent) {
    const site = s.sites[1]!;
    const { registerSiteAgent } = await gql<{ registerSiteAgent: { token: string } }, unknown>(api1.url!, adminToken, 'mutation ($s: ID!) { registerSiteAgent(siteId: $s, name: "bench-failover") { token } }', { s: site.siteId });
    await spawnServiceChild({
      name: 'agent-1',
      env: { ROLE: 'agent', API_URL: api1.url!, AGENT_TOKEN: registerSiteAgent.token, LOG_LEVEL: 'info', SHUTDOWN_TIMEOUT_MS: '10000' },
      ready: logged('site agent registered its key and is serving its site'),
      onSpawn,
    });
  }
  for (const [i, site] of s.sites.entries()) {
    const count = perSite[i]!;
    site.sim = await startMachineSim({
      serviceUrl: site.api.url!,
      redfish: {
        machines: Array.from({ length: count }, (_, j) => ({
          id: `fo-${site.name}-${j}`,
          macs: [0, 1, 2, 3].map((nic) => `02:f0:${hex(i)}:${hex(j >> 8)}:${hex(j)}:${hex(nic)}`),
        })),
      },
      // Firmware and a ramdisk that follow the protocol try a 503 (the database failing over) again after its Retry-After.
      behaviour: { retryUnavailable: true },
    });
  }
  console.log(`  processes: ${s.children.map((c) => `${c.name} (pid ${c.pid}${c.url ? `, ${c.url.replace('http://', '')}` : ''})`).join(', ')}`);
}

async function enrollAll(s: Setup, o: Options, adminToken: string): Promise<void> {
  for (const site of s.sites) {
    const machines = site.sim!.machines;
    for (let i = 0; i < machines.length; i += o.batch) {
      const ids = await Promise.all(machines.slice(i, i + o.batch).map(async (m) => {
        const r = await rest(site.api.url!, adminToken, 'POST', '/api/compute/metal/enroll', {
          poolId: site.poolId, name: m.id, macs: m.macs,
          bmc: { address: m.bmc.url, driver: 'redfish', credentials: { username: m.bmc.username, password: m.bmc.password } },
        });
        const node = r.body.node as { id?: string } | undefined;
        if (r.status !== 200 || !node?.id) throw new Error(`enroll ${m.id}: HTTP ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
        return node.id;
      }));
      site.nodeIds.push(...ids);
    }
  }
}

const allNodeIds = (s: Setup) => s.sites.flatMap((site) => site.nodeIds);

async function states(s: Setup): Promise<Record<string, number>> {
  const rows = await q<{ s: string; n: number }>(s.pool!, `SELECT provision_state AS s, count(*)::int AS n FROM node WHERE id = ANY($1::text[]) GROUP BY 1 ORDER BY 1`, [allNodeIds(s)]);
  return Object.fromEntries(rows.map((r) => [r.s, r.n]));
}
const fmt = (counts: Record<string, number>) => Object.entries(counts).map(([k, n]) => `${k} ${n}`).join(', ');

/** The first workflow step finished after `since` (ms since the epoch), read through the pool (the new primary). */
async function resumedAfter(s: Setup, since: number, timeoutMs: number): Promise<number | null> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const rows = await s.pool!.query<{ t: string | null }>(
      `SELECT (extract(epoch FROM min(finished_at)) * 1000)::text AS t FROM workflow_step WHERE finished_at > to_timestamp($1::double precision / 1000)`, [since]).then((r) => r.rows, () => []);
    if (rows[0]?.t) return (Number(rows[0].t) - since) / 1000;
    await sleep(200);
  }
  return null;
}

/** Watches a member until it no longer takes writes (refuses, is gone or in recovery); resolves with when. */
function downWatch(c: PatroniCluster, m: Member): { at: Promise<number>; stop(): void } {
  let stopped = false;
  const at = (async () => {
    while (!stopped) {
      const t = Date.now();
      const client = new pg.Client({ connectionString: c.memberUrl(m, { admin: true }), connectionTimeoutMillis: 1000 });
      client.on('error', () => undefined);
      const writable = await client.connect()
        .then(() => client.query<{ r: boolean }>('SELECT pg_is_in_recovery() AS r'))
        .then((r) => !r.rows[0]!.r, () => false);
      await client.end().catch(() => undefined);
      if (!writable) return t;
      await sleep(100);
    }
    return Date.now();
  })();
  return { at, stop: () => { stopped = true; } };
}

/** /proc utime+stime in seconds of one pid; NaN when unreadable. */
const cpuSeconds = async (pid: number | undefined): Promise<number> => (pid === undefined ? NaN : (await processCpuSeconds(pid)) ?? NaN);

/**
 * The runs in flight at `at` (ms since the epoch: created before, not finished by then) and, for each,
 * how long until it made progress again: its next step finished, or the run ended. Informative: a run
 * that waits out a lease shows here even when the fleet as a whole resumed at once.
 */
async function inFlightResume(s: Setup, at: number): Promise<{ runs: number; p50S: number | null; maxS: number | null; over30s: number }> {
  const [r] = await q<{ runs: number; p50: number | null; max: number | null; over: number }>(s.pool!, `WITH t AS (SELECT to_timestamp($2::double precision / 1000) AS t),
      flight AS (
        SELECT w.id, (SELECT min(x) FROM (SELECT min(st.finished_at) AS x FROM workflow_step st WHERE st.run_id = w.id AND st.finished_at > t.t
                                          UNION ALL SELECT w.finished_at) m) AS next, t.t
          FROM workflow_run w, t
         WHERE w.node_id = ANY($1::text[]) AND w.created_at < t.t AND (w.finished_at IS NULL OR w.finished_at > t.t))
    SELECT count(*)::int AS runs,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM next - t)) AS p50,
           max(extract(epoch FROM next - t))::float8 AS max,
           count(*) FILTER (WHERE next IS NULL OR next - t > interval '30 seconds')::int AS over
      FROM flight`, [allNodeIds(s), at]);
  return { runs: r!.runs, p50S: r!.p50 === null ? null : Number(r!.p50), maxS: r!.max === null ? null : Number(r!.max), over30s: r!.over };
}

interface Figures {
  processExits: number;
  lostEvents: number;
  duplicateDestructiveCalls: number;
  stuckRuns: number;
  resumedAfterS: number | null;
  details: Record<string, unknown>;
}

const duplicates = (s: Setup) => s.sites.reduce((sum, site) => sum + site.sim!.machines.reduce((n, m) => n + site.sim!.redfish.counts(m.id).duplicateKeys.length, 0), 0);
const exits = (s: Setup) => s.children.flatMap((c) => c.exits);

/** Runs whose lease ran out or that have been due for over a minute without being leased. */
async function overdueRuns(s: Setup): Promise<number> {
  const rows = await q<{ n: number }>(s.pool!, `SELECT count(*)::int AS n FROM workflow_run
     WHERE node_id = ANY($1::text[]) AND status IN ${ACTIVE}
       AND ((lease_until IS NOT NULL AND lease_until < now() - interval '60 seconds')
         OR (due_at < now() - interval '60 seconds' AND (lease_until IS NULL OR lease_until <= now())))`, [allNodeIds(s)]);
  return rows[0]!.n;
}

async function failoverRun(o: Options, json: string | null): Promise<number> {
  const adminToken = `bench_${randomBytes(24).toString('hex')}`;
  const s: Setup = { starting: null, cluster: null, children: [], sites: [], readers: [], pool: null };
  current = s;
  cleaning = null;
  const endState = o.deploy ? 'deployed' : 'ready';
  let failed = false;
  try {
    await setUp(s, o, adminToken);
    const pool = s.pool!;
    let profile: { id: string } | null = null;
    if (o.deploy) {
      const r = await gql<{ saveDeployProfileVersion: { id: string } }, unknown>(s.sites[0]!.api.url!, adminToken,
        'mutation ($i: DeployProfileVersionInput!) { saveDeployProfileVersion(input: $i) { id } }',
        { i: { name: 'bench-failover', role: 'bench', steps: PROFILE_STEPS, tenantId: (await q<{ t: string }>(pool, `SELECT tenant_id AS t FROM site WHERE id = $1`, [s.sites[0]!.siteId]))[0]!.t } });
      profile = { id: r.saveDeployProfileVersion.id };
    }
    const startSeq = BigInt((await q<{ m: string }>(pool, `SELECT coalesce(max(seq), 0)::text AS m FROM event`))[0]!.m);
    const apis = s.children.filter((c) => c.role === 'api');
    s.readers.push(...apis.map((a, i) => readStream(a.name, a.url!, adminToken, startSeq, (7 + 4 * i) * 1000)));

    const started = Date.now();
    await enrollAll(s, o, adminToken);
    const ids = allNodeIds(s);
    console.log(`  enrolled ${ids.length} in ${((Date.now() - started) / 1000).toFixed(1)} s`);

    // Deploys as machines become ready; the last 30% wait for the switchover (work in flight across it).
    const deployed = new Set<string>();
    const siteOf = new Map(s.sites.flatMap((site) => site.nodeIds.map((id) => [id, site] as const)));
    const holdBack = o.failover ? Math.ceil(o.machines * 0.3) : 0;
    let released = !o.failover;
    const deployReady = async () => {
      if (!profile) return;
      const ready = await pool.query<{ id: string }>(`SELECT id FROM node WHERE id = ANY($1::text[]) AND provision_state = 'ready'`, [ids]).then((r) => r.rows, () => []);
      const todo = ready.map((r) => r.id).filter((id) => !deployed.has(id)).slice(0, released ? undefined : Math.max(0, o.machines - holdBack - deployed.size)).slice(0, o.batch);
      await Promise.all(todo.map(async (id) => {
        const r = await rest(siteOf.get(id)!.api.url!, adminToken, 'POST', '/api/compute/metal/deploy', { nodeId: id, profileId: profile!.id, profileVersion: 1 }).catch(() => null);
        // Anything else is tried again while the node is still ready (a lost answer leaves it deploying: not tried again).
        if (r?.status === 200) deployed.add(id);
      }));
    };

    type Phase = { at: number; downAt: number; resumed: number | null; exits: number; dups: number; seq: bigint; stuck: number };
    let kill: Phase | null = null;
    let switchover: Phase | null = null;
    let chaos: Promise<void> | null = null;
    let chaosError: unknown = null;
    let counts = await states(s);
    let printed = 0;
    let lastKey = '';
    let lastChange = Date.now();
    const inFlight = () => ids.length - (counts[endState] ?? 0) - (counts.failed ?? 0);
    for (;;) {
      counts = await states(s).catch(() => counts);
      const ready = (counts.ready ?? 0) + (counts.deploying ?? 0) + (counts.deployed ?? 0);
      const deploying = (counts.deploying ?? 0) + (counts.deployed ?? 0);
      if (o.failover && !kill && !chaos && ready >= 0.3 * ids.length) {
        chaos = (async () => {
          const k = await s.cluster!.killPrimary({ waitMs: 90_000 });
          console.log(`  ${((Date.now() - started) / 1000).toFixed(0).padStart(4)} s: SIGKILLed the primary ${k.killed.name}; ${k.primary.name} promoted after ${((Date.now() - k.killedAt) / 1000).toFixed(1)} s`);
          const resumed = await resumedAfter(s, k.killedAt, 180_000);
          kill = { at: k.killedAt, downAt: k.killedAt, resumed, exits: 0, dups: 0, seq: 0n, stuck: 0 };
          console.log(`  steps finish again ${resumed === null ? 'NOT within 180 s' : `${resumed.toFixed(1)} s after the kill`}`);
          await s.cluster!.waitHealthy(180_000);
          console.log(`  ${((Date.now() - started) / 1000).toFixed(0).padStart(4)} s: ${k.killed.name} is back as the synchronous standby`);
        })().catch((e: unknown) => { chaosError = e; }).finally(() => { chaos = null; });
      }
      if (o.failover && kill && !switchover && !chaos && (deploying >= 0.6 * ids.length || (!o.deploy && ready >= 0.6 * ids.length) || inFlight() === 0 || released === false && deployed.size >= o.machines - holdBack && deploying >= deployed.size)) {
        const k = kill as Phase;
        k.exits = exits(s).length;
        k.dups = duplicates(s);
        k.seq = BigInt((await q<{ m: string }>(pool, `SELECT coalesce(max(seq), 0)::text AS m FROM event`))[0]!.m);
        k.stuck = await overdueRuns(s);
        const from = (await s.cluster!.primary())!;
        const watch = downWatch(s.cluster!, from);
        const at = Date.now();
        switchover = { at, downAt: at, resumed: null, exits: 0, dups: 0, seq: 0n, stuck: 0 };
        const sw = switchover as Phase;
        released = true;
        chaos = (async () => {
          const r = await s.cluster!.switchover({ waitMs: 120_000 });
          sw.downAt = await Promise.race([watch.at, sleep(5000).then(() => at)]);
          watch.stop();
          console.log(`  ${((Date.now() - started) / 1000).toFixed(0).padStart(4)} s: switchover ${r.from.name} -> ${r.primary.name}; the old primary stopped taking writes ${((sw.downAt - at) / 1000).toFixed(1)} s after the request`);
          sw.resumed = await resumedAfter(s, sw.downAt, 180_000);
          console.log(`  steps finish again ${sw.resumed === null ? 'NOT within 180 s' : `${sw.resumed.toFixed(1)} s after the old primary stopped taking writes`}`);
        })().catch((e: unknown) => { chaosError = e; }).finally(() => { chaos = null; });
      }
      if (chaosError) throw chaosError;
      await deployReady();
      if (inFlight() === 0 && (!o.failover || (switchover && !chaos))) break;
      if (Date.now() - started > o.timeoutS * 1000) {
        console.log(`  NOT SETTLED after ${o.timeoutS} s: ${fmt(counts)}`);
        break;
      }
      const key = fmt(counts);
      if (key !== lastKey) {
        lastKey = key;
        lastChange = Date.now();
      } else if (!chaos && Date.now() - lastChange > o.stallS * 1000) {
        console.log(`  NO PROGRESS for ${o.stallS} s: ${key}`);
        break;
      }
      if (Date.now() - printed >= 5000) {
        printed = Date.now();
        console.log(`  ${((printed - started) / 1000).toFixed(0).padStart(4)} s: ${fmt(counts)}`);
      }
      await sleep(500);
    }
    while (chaos) await sleep(200);
    const wallS = (Date.now() - started) / 1000;
    console.log(`  settled: ${fmt(counts)} in ${wallS.toFixed(1)} s`);

    // Events: every row numbered (the sequencer runs a moment after commit), the readers caught up.
    for (let i = 0; i < 100; i += 1) {
      const [r] = await q<{ n: number }>(pool, `SELECT count(*)::int AS n FROM event WHERE seq IS NULL`);
      if (r!.n === 0) break;
      await sleep(200);
    }
    const endSeq = BigInt((await q<{ m: string }>(pool, `SELECT coalesce(max(seq), 0)::text AS m FROM event`))[0]!.m);
    for (let i = 0; i < 150 && s.readers.some((r) => r.last() < endSeq); i += 1) await sleep(200);
    const [nulls] = await q<{ n: number }>(pool, `SELECT count(*)::int AS n FROM event WHERE seq IS NULL`);
    const holes = (await q<{ s: string }>(pool,
      `SELECT g::text AS s FROM generate_series($1::bigint + 1, $2::bigint) g WHERE NOT EXISTS (SELECT 1 FROM event WHERE seq = g)`, [String(startSeq), String(endSeq)])).map((r) => BigInt(r.s));
    const split = kill ? (kill as Phase).seq || endSeq : endSeq;
    const byPhase = (seq: bigint) => (seq <= split ? 0 : 1);
    const lost = [0, 0];
    const tableHoles = [0, 0];
    for (const h of holes) tableHoles[byPhase(h)]! += 1;
    const readerFigures = s.readers.map((r) => {
      const missing = [0, 0];
      const dup = [0, 0];
      for (let seq = startSeq + 1n; seq <= endSeq; seq += 1n) {
        const n = r.seen.get(seq) ?? 0;
        if (holes.includes(seq)) continue;
        if (n === 0) missing[byPhase(seq)]! += 1;
        if (n > 1) dup[byPhase(seq)]! += n - 1;
      }
      const beyond = [...r.seen.keys()].filter((seq) => seq <= startSeq || seq > endSeq).length;
      for (const p of [0, 1]) lost[p]! += missing[p]! + dup[p]!;
      return { reader: r.name, received: [...r.seen.values()].reduce((a, b) => a + b, 0), missing, duplicates: dup, outside: beyond, connections: r.connections(), drops: Object.fromEntries(r.drops) };
    });
    lost[0]! += tableHoles[0]!;
    lost[1]! += tableHoles[1]! + nulls!.n;

    // Stuck runs at the end, and machines not where they should be.
    const [end] = await q<{ idle: number; overdue: number; active: number }>(pool, `SELECT
        count(*) FILTER (WHERE (due_at IS NULL OR due_at > now()) AND (lease_until IS NULL OR lease_until <= now()))::int AS idle,
        count(*) FILTER (WHERE (lease_until IS NOT NULL AND lease_until < now() - interval '60 seconds')
                            OR (due_at < now() - interval '60 seconds' AND (lease_until IS NULL OR lease_until <= now())))::int AS overdue,
        count(*)::int AS active
      FROM workflow_run WHERE node_id = ANY($1::text[]) AND status IN ${ACTIVE}`, [ids]);
    const notThere = ids.length - (counts[endState] ?? 0);
    const failedNodes = await q<{ failed_from: string; code: string; n: number }>(pool,
      `SELECT failed_from, last_error_code AS code, count(*)::int AS n FROM node WHERE id = ANY($1::text[]) AND provision_state = 'failed' GROUP BY 1, 2`, [ids]);

    // Who did the work: commands by site and claimer (site b's by the remote agent), CPU of each process.
    const claims = await q<{ site: string; claimer: string; status: string; n: number }>(pool,
      `SELECT c.site_id AS site, coalesce(c.claimed_by, '-') AS claimer, c.status, count(*)::int AS n FROM command c
        WHERE c.node_id = ANY($1::text[]) GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`, [ids]);
    const cpu = await Promise.all(s.children.map(async (c) => [c.name, await cpuSeconds(c.pid)] as const));
    const failedCommands = await q<{ kind: string; code: string; n: number }>(pool,
      `SELECT kind, coalesce(result->>'code', '-') AS code, count(*)::int AS n FROM command
        WHERE node_id = ANY($1::text[]) AND status NOT IN ('succeeded', 'queued', 'claimed') GROUP BY 1, 2 ORDER BY 3 DESC`, [ids]);
    // Power actions the BMCs performed against the bmc.power commands (informative): more resets on a
    // machine than bmc.power commands of any outcome would be one command acting twice; a command whose
    // result was lost (AGENT_LOST) and that the BMC did perform shows as performed but not succeeded.
    const power = new Map((await q<{ name: string; ok: number; all: number }>(pool,
      `SELECT n.name, count(c.id) FILTER (WHERE c.status = 'succeeded')::int AS ok, count(c.id)::int AS all FROM node n
         LEFT JOIN command c ON c.node_id = n.id AND c.kind = 'bmc.power' WHERE n.id = ANY($1::text[]) GROUP BY 1`, [ids])).map((r) => [r.name, r]));
    let resets = 0;
    let powerSucceeded = 0;
    let powerCommands = 0;
    let overMachines = 0;
    for (const site of s.sites) {
      for (const m of site.sim!.machines) {
        const done = site.sim!.redfish.counts(m.id).reset;
        const p = power.get(m.id);
        resets += done;
        powerSucceeded += p?.ok ?? 0;
        powerCommands += p?.all ?? 0;
        if (done > (p?.all ?? 0)) overMachines += 1;
      }
    }
    const totalExits = exits(s);
    const totalDups = duplicates(s);
    const k = kill as Phase | null;
    const sw = switchover as Phase | null;
    const phases: Record<string, Figures> = {};
    if (o.failover) {
      phases.kill = {
        processExits: k ? k.exits : totalExits.length,
        lostEvents: lost[0]!,
        duplicateDestructiveCalls: k ? k.dups : totalDups,
        stuckRuns: k ? k.stuck : 0,
        resumedAfterS: k?.resumed ?? null,
        details: { tableHoles: tableHoles[0], seqUpTo: String(split), inFlight: k ? await inFlightResume(s, k.at) : null },
      };
      phases.switchover = {
        processExits: totalExits.length - (k?.exits ?? 0),
        lostEvents: lost[1]!,
        duplicateDestructiveCalls: totalDups - (k?.dups ?? 0),
        stuckRuns: end!.idle + end!.overdue + notThere,
        resumedAfterS: sw?.resumed ?? null,
        details: { tableHoles: tableHoles[1], unnumbered: nulls!.n, activeRunsAtEnd: end!.active, idleRuns: end!.idle, overdueRuns: end!.overdue, machinesNotInEndState: notThere, happened: sw !== null, inFlight: sw ? await inFlightResume(s, sw.downAt) : null },
      };
    }

    console.log('\n== summary: failover ==');
    const machine = machineInfo();
    console.log(`machine:   ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB, Node ${machine.node}`);
    console.log(`processes: ${s.children.map((c) => c.name).join(', ')}${o.agent ? '' : ' (no remote agent: --no-agent)'}`);
    console.log(`machines:  ${fmt(counts)} (expected: ${ids.length} ${endState})${failedNodes.length ? `; failed: ${failedNodes.map((f) => `${f.n} from ${f.failed_from} ${f.code}`).join(', ')}` : ''}`);
    console.log(`wall:      ${wallS.toFixed(1)} s from the first enroll call`);
    console.log(`events:    seq ${startSeq + 1n}..${endSeq}: ${holes.length} missing from the table, ${nulls!.n} never numbered; readers: ${readerFigures.map((r) => `${r.reader} received ${r.received} over ${r.connections} connections (${Object.entries(r.drops).map(([why, n]) => `${n} ${why}`).join(', ') || 'no drop'}; missing ${r.missing[0]! + r.missing[1]!}, twice ${r.duplicates[0]! + r.duplicates[1]!})`).join('; ')}`);
    const siteName = new Map(s.sites.map((site) => [site.siteId, site.name]));
    const simTotals = s.sites.map((site) => ({ site: site.name, ...site.sim!.totals() }));
    console.log(`simulators: ${simTotals.map((t) => `site ${t.site}: ${t.pxeBoots} PXE boots, ${t.ramdiskBoots} ramdisk boots, ${t.refused} calls refused, ${t.failedCalls} failed`).join('; ')}`);
    console.log(`commands:  ${claims.map((c) => `site ${siteName.get(c.site) ?? c.site} ${c.status} ${c.n} by ${c.claimer}`).join('; ')}`);
    if (failedCommands.length) console.log(`not succeeded: ${failedCommands.map((c) => `${c.n} ${c.kind} ${c.code}`).join(', ')}`);
    console.log(`power:     the BMCs performed ${resets} resets; ${powerCommands} bmc.power commands, ${powerSucceeded} of them succeeded; machines with more resets than bmc.power commands: ${overMachines}`);
    console.log(`CPU:       ${cpu.map(([name, t]) => `${name} ${Number.isNaN(t) ? '?' : t.toFixed(1)} s`).join(', ')}`);
    for (const [name, f] of Object.entries(phases)) {
      console.log(`\n-- ${name === 'kill' ? 'SIGKILL of the primary' : 'planned switchover'} --`);
      console.log(`process exits: ${f.processExits}`);
      console.log(`lost events: ${f.lostEvents}`);
      console.log(`duplicate destructive calls: ${f.duplicateDestructiveCalls}`);
      console.log(`stuck runs: ${f.stuckRuns}`);
      console.log(`resumed after ${f.resumedAfterS === null ? 'never' : f.resumedAfterS.toFixed(1)} s`);
      const flight = f.details.inFlight as Awaited<ReturnType<typeof inFlightResume>> | null;
      if (flight) console.log(`  (${flight.runs} runs in flight then: each made progress again after p50 ${flight.p50S?.toFixed(1) ?? '-'} s, max ${flight.maxS?.toFixed(1) ?? '-'} s; ${flight.over30s} after more than 30 s)`);
    }
    if (totalExits.length) console.log(`\nexits: ${totalExits.map((e) => `${e.name} code ${e.code} signal ${e.signal} at +${((e.at - started) / 1000).toFixed(1)} s`).join('; ')}`);
    for (const c of s.children) {
      const worst = c.kinds().filter(([kind]) => /^(warn|error|fatal)/.test(kind)).slice(0, 4);
      if (worst.length) console.log(`${c.name}: ${worst.map(([kind, n]) => `${n}x ${kind}`).join('; ')}`);
    }
    if (json) {
      await fs.writeFile(json, `${JSON.stringify({ bench: 'failover', machine, machines: o.machines, workers: o.workers, agent: o.agent, deploy: o.deploy, wallS, nodes: counts, phases, readers: readerFigures, exits: totalExits, simulators: simTotals, commands: claims, notSucceeded: failedCommands, power: { resets, powerCommands, powerSucceeded, overMachines }, cpuSeconds: Object.fromEntries(cpu) }, null, 2)}\n`);
    }
    const bad = Object.values(phases).some((f) => f.processExits || f.lostEvents || f.duplicateDestructiveCalls || f.stuckRuns || f.resumedAfterS === null);
    failed = bad || !phases.switchover || (phases.switchover.details.happened !== true);
    return failed ? 1 : 0;
  } catch (error) {
    failed = true;
    for (const c of s.children) if (c.output.length) console.error(`${c.name} (last lines):\n  ${c.output.slice(-8).join('\n  ')}`);
    if (s.cluster) console.error(`cluster (last lines):\n${s.cluster.logs().split('\n').slice(-20).join('\n')}`);
    throw error;
  } finally {
    const left = await cleanup(s);
    if (left.length) console.error(`[bench] STILL RUNNING after the clean-up: ${left.join('; ')}`);
    else console.log(`clean-up: every child and the cluster stopped, nothing left running${failed ? '' : ''}`);
    current = null;
  }
}

/** The lifecycle wall (enroll -> ready) with `workers` worker processes, on a fresh cluster. */
async function lifecycleWall(o: Options): Promise<{ wallS: number; ready: number }> {
  const adminToken = `bench_${randomBytes(24).toString('hex')}`;
  const s: Setup = { starting: null, cluster: null, children: [], sites: [], readers: [], pool: null };
  current = s;
  cleaning = null;
  try {
    await setUp(s, o, adminToken);
    const started = Date.now();
    await enrollAll(s, o, adminToken);
    let counts = await states(s);
    for (;;) {
      counts = await states(s);
      if ((counts.ready ?? 0) + (counts.failed ?? 0) >= o.machines) break;
      if (Date.now() - started > o.timeoutS * 1000) throw new Error(`not settled after ${o.timeoutS} s: ${fmt(counts)}`);
      await sleep(250);
    }
    const wallS = (Date.now() - started) / 1000;
    const exited = exits(s);
    if (exited.length) throw new Error(`service processes exited: ${exited.map((e) => e.name).join(', ')}`);
    // The work shared: commands each worker's built-in agent claimed, CPU of each process.
    const claims = await q<{ claimer: string; n: number }>(s.pool!, `SELECT coalesce(claimed_by, '-') AS claimer, count(*)::int AS n FROM command WHERE node_id = ANY($1::text[]) GROUP BY 1 ORDER BY 1`, [allNodeIds(s)]);
    const byPid = new Map(s.children.map((c) => [String(c.pid), c.name]));
    const cpu = await Promise.all(s.children.map(async (c) => `${c.name} ${(await cpuSeconds(c.pid)).toFixed(1)} s`));
    console.log(`  ${o.workers} worker(s): ${fmt(counts)} in ${wallS.toFixed(1)} s; commands claimed: ${claims.map((c) => `${c.n} by ${byPid.get(/^builtin:[^:]*:(\d+):/.exec(c.claimer)?.[1] ?? '') ?? c.claimer}`).join(', ')}; CPU: ${cpu.join(', ')}`);
    return { wallS, ready: counts.ready ?? 0 };
  } finally {
    const left = await cleanup(s);
    if (left.length) console.error(`[bench] STILL RUNNING after the clean-up: ${left.join('; ')}`);
    current = null;
  }
}

async function run(argv: string[]): Promise<number> {
  const args = parseBenchArgs(argv, ['machines', 'batch', 'timeout', 'stall', 'json'], ['no-agent', 'workers-ratio']);
  const machines = intOption(args, 'machines', 200, 1);
  const batch = intOption(args, 'batch', 25, 1);
  const timeoutS = intOption(args, 'timeout', 900, 1);
  const stallS = intOption(args, 'stall', 180, 10);
  const json = option(args, 'json') ?? null;
  const missing = patroniMissing();
  if (missing) {
    console.error(`failover benchmark: ${missing}`);
    return 1;
  }
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const machine = machineInfo();
  if (flag(args, 'workers-ratio')) {
    console.log(`failover benchmark, --workers-ratio: the lifecycle wall (enroll -> ready) of ${machines} simulated Redfish machines with 1 and with 2 ROLE=worker processes (2 ROLE=api each time) on a Patroni cluster, no failover`);
    console.log(`machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB, Node ${machine.node}; date ${machine.date}`);
    const base = { machines, batch, timeoutS, stallS, deploy: false, agent: false, failover: false };
    const one = await lifecycleWall({ ...base, workers: 1 });
    const two = await lifecycleWall({ ...base, workers: 2 });
    const ratio = two.wallS / one.wallS;
    console.log(`\nlifecycle wall at ${machines} machines: 1 worker ${one.wallS.toFixed(1)} s, 2 workers ${two.wallS.toFixed(1)} s: ratio (2 / 1) ${ratio.toFixed(2)}`);
    if (json) await fs.writeFile(json, `${JSON.stringify({ bench: 'failover', mode: 'workers-ratio', machine, machines, oneWorkerS: one.wallS, twoWorkersS: two.wallS, ratio }, null, 2)}\n`);
    return one.ready === machines && two.ready === machines ? 0 : 1;
  }
  const o: Options = { machines, batch, timeoutS, stallS, workers: 2, deploy: true, agent: !flag(args, 'no-agent'), failover: true };
  console.log(`failover benchmark: ${machines} simulated Redfish machines, enroll -> ready${o.deploy ? ' -> deployed' : ''}, on a Patroni cluster (etcd, primary + synchronous standby) with a multi-host DATABASE_URL`);
  console.log(`  processes: 2 x ROLE=api, 2 x ROLE=worker (engine + built-in agent)${o.agent ? ', 1 x ROLE=agent (remote agent of site b, against api-1)' : ''}; SIGKILL of the primary at 30% ready, a switchover at 60% deploying`);
  console.log(`machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB, Node ${machine.node}; date ${machine.date}`);
  return failoverRun(o, json);
}

export const failoverBench = {
  summary: 'several service processes on a Patroni cluster: a SIGKILLed primary and a switchover under load (issue 24)',
  options: ['--machines 200 --batch 25 --timeout 900 --stall 180 [--no-agent] [--json <file>] | --workers-ratio'],
  run,
};
