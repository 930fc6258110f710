/**
 * `npm run bench -- iso` (issue 11, "Speed"): the installer ISO of one control-node job, built from
 * the cached base image (Debian's netboot kernel and initrd, already on disk), target at most 1 s;
 * and the throughput of the product's ISO-build queue for 20 jobs at its default concurrency.
 *
 * 1. One build at a time, in this process, as a job does it: render and check the preseed (the
 *    SHA-512 crypt of the password included), write the job's initrd and isolinux menu, run xorriso
 *    (src/modules/provision/iso.ts buildInstallerIso). One warm-up, then --builds timed: median and
 *    spread.
 * 2. The queue, end to end: the real service started in this process (src/app.ts startApp, ROLE
 *    all: API, workflow engine, built-in site agent and queue workers, on a fresh embedded
 *    PostgreSQL in a temporary DATA_DIR, or DATABASE_URL's database when set), 20 nodes in state
 *    ready whose BMCs are simulated Redfish BMCs (test/sim/redfish, one per node at a bare IP
 *    127.79.x.y on 443 over TLS verified with the site's CA, the five seed vendors in turn, as
 *    test/controlnode-provision.test.ts sets them up). The bench POSTs the 20
 *    /controlnode/provision/<vendor> requests at once; each records a metal-install run whose first
 *    step (Building ISO) queues a pg-boss job on provision.iso; the service's one fetch loop takes
 *    up to CONTROLNODE_ISO_CONCURRENCY of them per fetch (polling every 2 s) and jobs/iso-build.ts
 *    builds, publishes and records each (an install_report row of kind 'iso'). Measured:
 *    - wall: from the first POST to the 20th iso report with ok true (the table polled every 50 ms);
 *    - jobs per minute: jobs / wall;
 *    - per job, from the service's rows: POST -> queued (iso_build_job created_at: the engine ran
 *      Building ISO), queue wait (created_at -> started_at), the build as the worker timed it (the
 *      report's ms), the build job's active time (started_at -> ended_at), POST -> report; and how busy the build slots were
 *      (sum of builds / concurrency / wall).
 *    The runs go on after their ISO (mount, boot from the CD, power on: the simulated machines then
 *    wait for an installer nobody plays): that BMC work runs beside the later builds, as it would in
 *    production. Once measured, the service is stopped (its runs left deploying) and the simulators.
 *
 * Environment: INSTALLER_BASE_DIR (a base folder other than Debian's packages, see findBaseImage),
 * CONTROLNODE_ISO_CONCURRENCY (as the service reads it), DATABASE_URL (use that database),
 * BENCH_LOG_LEVEL (the service's log level, default warn).
 * Options: --builds 10 (timed one at a time), --jobs 20, --concurrency N (overrides the service's
 *          CONTROLNODE_ISO_CONCURRENCY; default: the config's), --timeout 300 (s, for the queue).
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { randomBytes } from 'node:crypto';
import pino from 'pino';
import { startApp, type App } from '../../src/app';
import { loadConfig } from '../../src/config';
import { newId } from '../../src/ids';
import { renderPreseed } from '../../src/modules/provision/preseed';
import { buildInstallerIso, findBaseImage, type BaseImage } from '../../src/modules/provision/iso';
import { makeTenantTree, makeToken } from '../helpers/fixtures';
import { bmcCertificates } from '../helpers/tls';
import { startRedfishSim, type RedfishSim } from '../sim/redfish/server';
import type { FlavourName } from '../sim/redfish/flavours';
import { freePorts, intOption, machineInfo, option, parseBenchArgs, sleep } from './read';

const TARGET_BUILD_S = 1;
/** The seed's vendor routes and the simulator flavour each drives (as test/controlnode-provision.test.ts). */
const VENDORS: [string, FlavourName][] = [['dell', 'idrac'], ['hp', 'ilo'], ['lenovo', 'xcc'], ['cisco', 'cimc'], ['supermicro', 'supermicro']];
/** Bare loopback IPs of our own (the provision test uses 127.77.1.x): the BMC is found by its IP, on 443. */
const ipOf = (i: number) => `127.79.${Math.floor(i / 250)}.${(i % 250) + 1}`;
const BMC_PASSWORD = 'Bmc-B3nch-Pa55';
const OS_PASSWORD = 'Os-B3nch-Pa55';

async function oneBuild(base: BaseImage, dir: string, i: number): Promise<number> {
  const started = performance.now();
  const preseed = renderPreseed({
    hostname: `cn-${i}.lab.example`, osUsername: 'ops', osPassword: randomBytes(12).toString('base64url'),
    disks: ['nvme0n1', 'nvme1n1', 'nvme2n1'], poolType: 'raidz1', nicMac: '3c:fd:fe:a1:b2:c3', network: { mode: 'dhcp' },
    gpuPassthrough: { iommu: 'intel', pci_ids: ['10de:2330'] },
    callback: { baseUrl: 'https://cp.example:4000', jobId: `job_${i}`, token: randomBytes(24).toString('base64url') }, bmcIp: '10.20.0.11',
  });
  const out = path.join(dir, `job_${i}.iso`);
  await buildInstallerIso({ base, preseed, outPath: out, workDir: path.join(dir, 'work') });
  const ms = performance.now() - started;
  await fs.rm(out, { force: true });
  return ms;
}

/** The service's log lines at warn and above, counted by message (the last 20 kept). */
function countingLogger(level: string) {
  const kinds = new Map<string, number>();
  const last: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) {
        if (!line.trim()) continue;
        try {
          const e = JSON.parse(line) as { level?: number; msg?: string; err?: unknown };
          if ((e.level ?? 0) < 40) continue;
          const err = typeof e.err === 'string' ? e.err : (e.err as { message?: string } | undefined)?.message;
          const kind = `${e.level === 40 ? 'warn' : 'error'}: ${e.msg ?? '?'}${err ? ` (${String(err).slice(0, 160)})` : ''}`;
          kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
        } catch {
          kinds.set('not JSON', (kinds.get('not JSON') ?? 0) + 1);
        }
        last.push(line.slice(0, 400));
        if (last.length > 20) last.shift();
      }
      done();
    },
  });
  return { log: pino({ level }, sink), kinds: () => [...kinds].sort((a, b) => b[1] - a[1]), last };
}

const quantile = (values: number[], q: number): number => {
  if (!values.length) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
};
const s = (ms: number) => (ms / 1000).toFixed(2);
const spread = (values: number[]) => `p50 ${s(quantile(values, 0.5))} s, p95 ${s(quantile(values, 0.95))} s, max ${s(Math.max(...values))} s`;

interface JobTimes {
  runId: string;
  posted: number;
  queued: number | null;
  started: number | null;
  completed: number | null;
  reported: number | null;
  buildMs: number | null;
  ok: boolean | null;
  error: string | null;
}

async function singleBuilds(builds: number): Promise<{ median: number; min: number; max: number; initrdMB: number }> {
  const base = await findBaseImage(process.env.INSTALLER_BASE_DIR || undefined);
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'metal-bench-iso-'));
  try {
    await oneBuild(base, dir, 0); // warm: the base files in the page cache, xorriso's binary too
    const times: number[] = [];
    for (let i = 1; i <= builds; i += 1) times.push(await oneBuild(base, dir, i));
    const sorted = [...times].sort((a, b) => a - b);
    return { median: sorted[Math.floor(sorted.length / 2)]!, min: sorted[0]!, max: sorted[sorted.length - 1]!, initrdMB: (await fs.stat(base.initrd)).size / 1e6 };
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}

async function run(argv: string[]): Promise<number> {
  const args = parseBenchArgs(argv, ['builds', 'jobs', 'concurrency', 'timeout']);
  const builds = intOption(args, 'builds', 10, 1);
  const jobs = intOption(args, 'jobs', 20, 1);
  const override = option(args, 'concurrency') === undefined ? undefined : intOption(args, 'concurrency', 2, 1);
  const timeoutS = intOption(args, 'timeout', 300, 1);
  if (jobs > 250 * 250) throw new Error('--jobs: at most 62500 (one loopback IP each)');
  const machine = machineInfo();
  const envConcurrency = process.env.CONTROLNODE_ISO_CONCURRENCY;
  const concurrency = override ?? loadConfig().controlnodeIsoConcurrency;
  const concurrencyFrom = override !== undefined ? '--concurrency' : envConcurrency ? `CONTROLNODE_ISO_CONCURRENCY=${envConcurrency}` : "the config's default, CONTROLNODE_ISO_CONCURRENCY unset";
  console.log(`iso benchmark: ${builds} builds one at a time, then ${jobs} POST /controlnode/provision through the service's ISO-build queue (provision.iso) at concurrency ${concurrency}: ${concurrencyFrom}`);
  console.log(`machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB, Node ${machine.node}, ${machine.os}`);
  console.log(`date: ${machine.date}; load average ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);

  // 1. One build at a time.
  const single = await singleBuilds(builds);
  console.log(`  one build: median ${s(single.median)} s over ${builds} (${(single.min / 1000).toFixed(3)}-${(single.max / 1000).toFixed(3)} s)`);

  // 2. The queue, through the real service.
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'metal-bench-iso-svc-'));
  // As root, embedded PostgreSQL runs as `postgres`, which must traverse to its cluster.
  await fs.chmod(dataDir, 0o755);
  const certDir = path.join(dataDir, 'certs');
  await fs.mkdir(certDir);
  const logLevel = process.env.BENCH_LOG_LEVEL ?? 'warn';
  const logger = countingLogger(logLevel);
  let app: App | null = null;
  let sim: RedfishSim | null = null;
  let stopping: Promise<void> | null = null;
  const stopAll = () => (stopping ??= (async () => {
    // The service first (its agent's BMC calls end before their BMCs go), then the simulators.
    await app?.stop().catch((error: unknown) => console.error('[bench] stopping the service:', error));
    await sim?.stop().catch((error: unknown) => console.error('[bench] stopping the simulators:', error));
    await fs.rm(dataDir, { recursive: true, force: true, maxRetries: 3 });
  })());
  const onSignal = () => {
    console.error('[bench] interrupted: stopping the service and the simulators');
    void stopAll().then(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const ips = Array.from({ length: jobs }, (_, i) => ipOf(i));
    const certs = bmcCertificates(certDir, ips);
    sim = await startRedfishSim({
      machines: ips.map((ip, i) => {
        const flavour = VENDORS[i % VENDORS.length]![1];
        return { id: `bmc-${i}`, flavour, listen: { host: ip, port: 443 }, password: BMC_PASSWORD, requireEtag: flavour === 'xcc' || flavour === 'ilo' };
      }),
      tls: { key: certs.key, cert: certs.cert },
    });
    const [port, pgPort] = (await freePorts(2)) as [number, number];
    const serviceStarted = performance.now();
    app = await startApp({
      role: 'all', host: '127.0.0.1', port, publicUrl: `http://127.0.0.1:${port}`, dataDir, embeddedPgPort: pgPort,
      isoDir: path.join(dataDir, 'iso'), adminToken: `bench_${randomBytes(24).toString('hex')}`, secretKey: randomBytes(32).toString('base64'),
      logLevel, bmcNetworks: ['127.0.0.0/8'], ...(override !== undefined ? { controlnodeIsoConcurrency: override } : {}),
    }, { log: logger.log });
    const url = app.url!;
    if (app.config.controlnodeIsoConcurrency !== concurrency) throw new Error(`the service runs concurrency ${app.config.controlnodeIsoConcurrency}, expected ${concurrency}`);
    console.log(`  service in this process at ${url} (${app.config.databaseUrl ? 'DATABASE_URL' : 'embedded PostgreSQL'}), started in ${s(performance.now() - serviceStarted)} s; ${jobs} simulated Redfish BMCs at ${ipOf(0)}..${ipOf(jobs - 1)}:443`);

    // The tenant tree, a provision token, and the ready nodes whose BMCs are the simulators (verified with the site's CA).
    const { prisma, secrets } = app.services;
    const tree = await makeTenantTree(prisma, 'bench-iso', { pools: 1, nodesPerPool: 0 });
    const token = await makeToken(prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    for (const m of sim.machines) {
      const ref = await secrets!.put(tree.tenant.id, { username: m.username, password: m.password });
      await prisma.node.create({
        data: {
          id: newId('MetalNode'), tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id, name: m.id, provisionState: 'ready',
          bmcAddress: new URL(m.url).hostname, bmcDriver: 'redfish', bmcDriverOptions: { caCert: certs.ca }, bmcCredentialsRef: ref,
          driverBindings: { power: 'redfish', management: 'redfish', virtualMedia: 'redfish' }, macs: [m.state().macs[0]!.toLowerCase()],
        },
      });
    }

    // All the POSTs at once.
    const t0 = Date.now();
    const started = performance.now();
    const posted = await Promise.all(sim.machines.map(async (m, i) => {
      const vendor = VENDORS[i % VENDORS.length]![0];
      const response = await fetch(`${url}/controlnode/provision/${vendor}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify({
          bmc_IP: new URL(m.url).hostname, hostname: `cn-bench-${i}`, os_username: 'ops', os_password: OS_PASSWORD,
          selected_disks: ['nvme0n1', 'nvme1n1'], pool_type: 'mirror', selected_nic_mac: m.state().macs[0],
        }),
        signal: AbortSignal.timeout(60_000),
      });
      const body = await response.json() as { success?: boolean; job_id?: string };
      if (response.status !== 200 || !body.job_id) throw new Error(`POST /controlnode/provision/${vendor} (${m.id}): HTTP ${response.status} ${JSON.stringify(body).slice(0, 300)}`);
      return { runId: body.job_id, at: Date.now() };
    }));
    const postsMs = performance.now() - started;
    const runIds = posted.map((p) => p.runId);

    // The 20th iso report (poll every 50 ms).
    const sql = app.services.sql;
    let ok = 0;
    let failed = 0;
    let wallMs = NaN;
    let printed = performance.now();
    for (;;) {
      const { rows: [r] } = await sql.query<{ ok: number; failed: number }>(
        `SELECT count(*) FILTER (WHERE (payload->>'ok')::boolean)::int AS ok, count(*) FILTER (WHERE NOT (payload->>'ok')::boolean)::int AS failed
           FROM install_report WHERE kind = 'iso' AND run_id = ANY($1::text[])`, [runIds]);
      ok = r!.ok;
      failed = r!.failed;
      if (ok >= jobs) {
        wallMs = performance.now() - started;
        break;
      }
      if (ok + failed >= jobs) break;
      if (performance.now() - started > timeoutS * 1000) {
        console.log(`  NOT DONE after ${timeoutS} s: ${ok} ISOs built, ${failed} failed`);
        break;
      }
      if (performance.now() - printed >= 5000) {
        printed = performance.now();
        console.log(`  ${s(printed - started).padStart(6)} s: ${ok} built, ${failed} failed`);
      }
      await sleep(50);
    }

    // The timeline of each job, from the service's own rows (iso_build_job: queued by the Building
    // ISO step, started and ended by the worker), not pg-boss's tables.
    const epoch = (col: string) => `extract(epoch FROM ${col}) * 1000`;
    const boss = await sql.query<{ run_id: string; created: string; started: string | null; completed: string | null }>(
      `SELECT run_id, ${epoch('created_at')} AS created, ${epoch('started_at')} AS started, ${epoch('ended_at')} AS completed
         FROM iso_build_job WHERE run_id = ANY($1::text[])`, [runIds]);
    const reports = await sql.query<{ run_id: string; at: string; payload: { ok?: boolean; ms?: number; error?: string } }>(
      `SELECT run_id, ${epoch('created_at')} AS at, payload FROM install_report WHERE kind = 'iso' AND run_id = ANY($1::text[])`, [runIds]);
    const times: JobTimes[] = posted.map((p) => {
      const b = boss.rows.filter((x) => x.run_id === p.runId).sort((x, y) => Number(x.created) - Number(y.created))[0];
      const rep = reports.rows.find((x) => x.run_id === p.runId);
      const n = (v: string | null | undefined) => (v === null || v === undefined ? null : Number(v));
      return {
        runId: p.runId, posted: p.at, queued: n(b?.created), started: n(b?.started), completed: n(b?.completed), reported: n(rep?.at),
        buildMs: rep?.payload.ms ?? null, ok: rep ? rep.payload.ok === true : null, error: rep?.payload.error ?? null,
      };
    });
    const have = <K extends keyof JobTimes>(k: K) => times.filter((t) => t[k] !== null);
    const postToQueued = have('queued').map((t) => t.queued! - t.posted);
    const wait = times.filter((t) => t.queued !== null && t.started !== null).map((t) => t.started! - t.queued!);
    const build = have('buildMs').filter((t) => t.ok).map((t) => t.buildMs!);
    const active = times.filter((t) => t.started !== null && t.completed !== null).map((t) => t.completed! - t.started!);
    const endToEnd = have('reported').map((t) => t.reported! - t.posted);
    const fetches = new Set(have('started').map((t) => Math.round(t.started!))).size;

    console.log('\n== per job, ms from the first POST: queued (iso_build_job created_at), build started (started_at), ISO reported; the build as the worker timed it ==');
    for (const t of [...times].sort((a, b) => (a.started ?? Infinity) - (b.started ?? Infinity))) {
      const at = (v: number | null) => (v === null ? '-' : String(Math.round(v - t0))).padStart(6);
      console.log(`  ${t.runId.padEnd(30)} queued ${at(t.queued)}  started ${at(t.started)}  reported ${at(t.reported)}  build ${String(t.buildMs ?? '-').padStart(5)} ms${t.ok === false ? `  FAILED: ${t.error}` : ''}`);
    }
    const wallS = wallMs / 1000;
    const errors = logger.kinds();
    console.log('\n== summary: iso ==');
    console.log(`machine:            ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB, Node ${machine.node}`);
    console.log(`one build:          median ${(single.median / 1000).toFixed(3)} s over ${builds} (${(single.min / 1000).toFixed(3)}-${(single.max / 1000).toFixed(3)}); ${single.initrdMB.toFixed(0)} MB of base initrd grafted, not copied`);
    console.log(`queue:              ${jobs} POST /controlnode/provision at once, concurrency ${concurrency} (${concurrencyFrom}); the ${jobs} POSTs answered in ${s(postsMs)} s`);
    console.log(`wall:               ${Number.isFinite(wallS) ? `${wallS.toFixed(2)} s from the first POST to the last of the ${jobs} ISOs built` : `not reached (${ok} built, ${failed} failed)`}`);
    console.log(`throughput:         ${Number.isFinite(wallS) ? `${((jobs / wallS) * 60).toFixed(1)} jobs/minute (${(jobs / wallS).toFixed(2)} ISOs/s)` : 'n/a'}`);
    console.log(`POST -> queued:     ${spread(postToQueued)} (the engine running Building ISO)`);
    console.log(`queue wait:         ${spread(wait)} (iso_build_job created_at -> started_at), in ${fetches} fetches of up to ${concurrency}`);
    console.log(`build:              ${spread(build)} (the worker's timing: password from the broker, preseed, xorriso)`);
    console.log(`build job active:   ${spread(active)} (iso_build_job started_at -> ended_at)`);
    console.log(`POST -> ISO built:  ${spread(endToEnd)}`);
    if (Number.isFinite(wallS)) console.log(`build slots busy:   ${((build.reduce((a, b) => a + b, 0) / concurrency / wallMs) * 100).toFixed(0)}% of ${concurrency} x wall (the rest: a batch waits for its slowest build, the first poll, the engine, the API)`);
    if (errors.length) console.log(`service warnings/errors: ${errors.slice(0, 8).map(([k, n]) => `${n}x ${k}`).join('; ')}`);
    console.log(`target one build <= ${TARGET_BUILD_S} s: ${single.median / 1000 <= TARGET_BUILD_S ? 'PASS' : 'FAIL'}`);
    console.log(`all ${jobs} ISOs built through the queue: ${ok === jobs ? 'PASS' : `FAIL (${ok} built, ${failed} failed)`}`);
    return ok === jobs ? 0 : 1;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await stopAll();
  }
}

export const isoBench = {
  summary: 'one per-job installer ISO from the cached base image (target <= 1 s), and 20 provision jobs through the service\'s ISO-build queue',
  options: ['--builds 10 --jobs 20 [--concurrency N (default: the config\'s CONTROLNODE_ISO_CONCURRENCY)] --timeout 300'],
  run,
};
