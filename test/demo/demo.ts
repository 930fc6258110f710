/**
 * `npm run demo -- --machines 20`: the whole control plane on one machine, with nothing to set up.
 * It starts the service in this process on an embedded PostgreSQL in a temporary DATA_DIR (its
 * own free ports), N simulated machines with Redfish BMCs (test/sim/machine), then acts as an
 * operator would, through the API with the admin token: a tenant, a site and a pool; REST enroll
 * of every machine; a deploy profile; deploy of a few ready machines; undeploy of some of those.
 * It shows the machines move (a live table on a terminal, plain lines otherwise), prints a
 * summary and stops everything it started: the simulator, the service, PostgreSQL, the temp dir.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { startApp, type App } from '../../src/app';
import { createLogger } from '../../src/ops/log';
import { stopEmbeddedPostgresNow } from '../../src/db/embedded';
import { startMachineSim, type MachineSim } from '../sim/machine';
import { freePort } from '../helpers/ports';
import { FLAVOURS, type FlavourName } from '../sim/redfish/flavours';
import type { DemoOptions } from './options';
import { createView, type Move, type Row, type View } from './view';

export class Interrupted extends Error {
  override name = 'Interrupted';
}

interface Api {
  url: string;
  token: string;
}

async function call(api: Api, method: string, route: string, body?: unknown): Promise<Record<string, unknown>> {
  const response = await fetch(`${api.url}${route}`, {
    method,
    headers: { authorization: `Bearer ${api.token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  const parsed = (text ? JSON.parse(text) : {}) as Record<string, unknown>;
  if (!response.ok) throw new Error(`${method} ${route}: ${response.status} ${text.slice(0, 300)}`);
  return parsed;
}

async function graphql<T>(api: Api, query: string, variables: Record<string, unknown>): Promise<T> {
  const body = await call(api, 'POST', '/graphql', { query, variables }) as { data?: T; errors?: { message: string }[] };
  if (body.errors?.length || !body.data) throw new Error(`GraphQL: ${body.errors?.map((e) => e.message).join('; ') ?? 'no data'}`);
  return body.data;
}


const ACTIVE_RUN = ['queued', 'running', 'waiting', 'aborting'];

async function readRows(app: App, tenantId: string, flavours: Map<string, string>): Promise<Row[]> {
  const { rows } = await app.services.sql.query(
    `SELECT n.id, n.name, n.provision_state, n.failed_from, n.last_error_code, n.last_error_message,
            r.kind, r.status AS run_status, r.waiting_for, s.title AS step_title, s.attempts
       FROM node n
       LEFT JOIN workflow_run r ON r.id = n.workflow_id
       LEFT JOIN workflow_step s ON s.run_id = r.id AND s.idx = r.step_index
      WHERE n.tenant_id = $1
      ORDER BY n.name`,
    [tenantId],
  );
  return rows.map((r) => ({
    id: r.id as string,
    name: r.name as string,
    flavour: flavours.get(r.name as string) ?? '',
    state: r.provision_state as string,
    step: ACTIVE_RUN.includes(r.run_status as string) ? ((r.step_title as string | null) ?? null) : null,
    attempts: (r.attempts as number | null) ?? 0,
    error: r.last_error_code ? `${r.last_error_code as string} (from ${r.failed_from as string}): ${r.last_error_message as string}` : null,
  }));
}

/**
 * The provision moves published after stream position `after` (the outbox: node.enrolled, then node.provision.<state>),
 * in the stream's order (`seq`, numbered in commit order: an event id is taken at insert, so a
 * later-committed event can hold a smaller id than one already read), in order:
 * what the plain view prints, so a machine that moves through a state between two polls still
 * shows it (with the engine waking runs in its own process, a whole inspection can take less than
 * the 250 ms between polls).
 */
async function readMoves(app: App, tenantId: string, after: string): Promise<{ last: string; moves: Move[] }> {
  const { rows } = await app.services.sql.query(
    `SELECT seq::text AS id, node_id, type FROM event WHERE tenant_id = $1 AND seq > $2::bigint AND (type LIKE 'node.provision.%' OR type = 'node.enrolled') ORDER BY seq`,
    [tenantId, after],
  );
  return {
    last: rows.length ? (rows[rows.length - 1]!.id as string) : after,
    // node.enrolled: a new node, in enrolling.
    moves: rows.map((r) => ({ nodeId: r.node_id as string, to: r.type === 'node.enrolled' ? 'enrolling' : (r.type as string).slice('node.provision.'.length) })),
  };
}

interface Phase {
  name: string;
  seconds: number;
}

export async function main(opts: DemoOptions, signal: AbortSignal, onStarted: (stop: () => Promise<void>) => void): Promise<number> {
  const t0 = performance.now();
  const elapsed = () => (performance.now() - t0) / 1000;
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'metal-demo-'));
  // As root the embedded PostgreSQL runs as `postgres`, which must traverse to its cluster.
  await fs.chmod(dataDir, 0o755);
  let app: App | null = null;
  let sim: MachineSim | null = null;
  let view: View | null = null;
  const logFile = path.join(dataDir, 'service.log');
  const stop = async () => {
    view?.close();
    await sim?.stop().catch(() => undefined);
    sim = null;
    await app?.stop().catch(() => stopEmbeddedPostgresNow());
    app = null;
    await fs.rm(dataDir, { recursive: true, force: true });
  };
  onStarted(stop);
  const check = () => {
    if (signal.aborted) throw new Interrupted('interrupted');
  };
  try {
    const pgPort = await freePort();
    const adminToken = `demo-${randomBytes(24).toString('hex')}`;
    // The service's own log format (word levels, redaction), into the demo's file.
    const log = createLogger('warn', pino.destination({ dest: logFile, sync: true }));
    console.log(`metal demo: ${opts.machines} simulated machine(s); data dir ${dataDir} (removed at exit)`);
    app = await startApp({
      databaseUrl: undefined, dataDir, embeddedPgPort: pgPort, embeddedPgSystemDir: path.join(dataDir, 'system'),
      port: 0, host: '127.0.0.1', role: 'all', adminToken, secretKey: randomBytes(32).toString('base64'),
      builtinAgent: true, agentPollMs: 200, publicUrl: undefined, logLevel: 'warn',
      // Its BMCs are simulators on loopback: nothing else is ever connected to (issue 21 item 7).
      bmcNetworks: ['127.0.0.0/8'],
    }, { log });
    check();
    const api: Api = { url: app.url!, token: adminToken };
    const flavourNames = Object.keys(FLAVOURS) as FlavourName[];
    const failing = new Set<string>();
    const machinesSpec = Array.from({ length: opts.machines }, (_, i) => {
      const id = `demo-${String(i + 1).padStart(String(opts.machines).length, '0')}`;
      if (i >= opts.machines - opts.fail) failing.add(id);
      return { id, flavour: opts.flavour === 'mix' ? flavourNames[i % flavourNames.length]! : opts.flavour, mockup: 'public-localstorage' as const };
    });
    sim = await startMachineSim({
      serviceUrl: app.url!,
      redfish: { machines: machinesSpec },
      behaviour: (id) => (failing.has(id) ? { dcgmFails: true } : {}),
    });
    check();
    console.log(`service ${app.url} (embedded PostgreSQL on port ${pgPort}); Redfish simulator ${sim.redfish.url}`);
    const flavours = new Map(machinesSpec.map((m) => [m.id, m.flavour]));

    // The operator's side, through the API only.
    const { createTenant } = await graphql<{ createTenant: { id: string } }>(api, 'mutation ($i: CreateTenantInput!) { createTenant(input: $i) { id } }', { i: { name: 'demo' } });
    const { createSite } = await graphql<{ createSite: { id: string } }>(api, 'mutation ($i: CreateSiteInput!) { createSite(input: $i) { id } }', { i: { name: 'demo-site', tenantId: createTenant.id } });
    const { createPool } = await graphql<{ createPool: { id: string } }>(api, 'mutation ($i: CreatePoolInput!) { createPool(input: $i) { id } }', { i: { name: 'demo-pool', siteId: createSite.id, policy: { agent: 'bcd' } } });
    console.log(`tenant ${createTenant.id}, site ${createSite.id}, pool ${createPool.id} created through GraphQL`);

    view = await createView(opts, process.stdout);
    const phases: Phase[] = [];
    let lastEvent = '0';
    /** Each node's state as its last provision event read says. */
    const moved = new Map<string, string>();
    const settle = async (phase: string, nodeIds: Set<string>, moving: string[]): Promise<Row[]> => {
      const started = performance.now();
      for (;;) {
        check();
        const rows = await readRows(app!, createTenant.id, flavours);
        // Read after the rows: every move the rows show is in it.
        const seen = await readMoves(app!, createTenant.id, lastEvent);
        lastEvent = seen.last;
        for (const m of seen.moves) moved.set(m.nodeId, m.to);
        view!.update(phase, rows, elapsed(), seen.moves);
        const mine = rows.filter((r) => nodeIds.has(r.id));
        // Settled, and every move that got it there read (the stream numbers events just after their commit).
        if (mine.every((r) => !moving.includes(r.state) && moved.get(r.id) === r.state)) {
          phases.push({ name: phase, seconds: (performance.now() - started) / 1000 });
          view!.phaseDone(phase, mine, elapsed());
          return rows;
        }
        if (performance.now() - started > opts.timeoutSeconds * 1000) throw new Error(`${phase}: still moving after ${opts.timeoutSeconds} s: ${mine.filter((r) => moving.includes(r.state)).map((r) => `${r.name} ${r.state}`).join(', ')}`);
        await new Promise<void>((resolve) => {
          const wake = () => {
            clearTimeout(timer);
            signal.removeEventListener('abort', wake);
            resolve();
          };
          const timer = setTimeout(wake, 250);
          signal.addEventListener('abort', wake, { once: true });
        });
      }
    };

    const enrolled = new Map<string, string>();
    for (const m of sim.machines) {
      check();
      const r = await call(api, 'POST', '/api/compute/metal/enroll', {
        poolId: createPool.id, name: m.id, macs: m.macs,
        bmc: { address: m.bmc.url, driver: 'redfish', credentials: { username: m.bmc.username, password: m.bmc.password } },
      }) as { node: { id: string } };
      enrolled.set(m.id, r.node.id);
    }
    const allIds = new Set(enrolled.values());
    let rows = await settle('enroll, inspect, commission -> ready', allIds, ['enrolling', 'inspecting', 'commissioning']);

    const ready = rows.filter((r) => r.state === 'ready').slice(0, opts.deploy);
    const deployIds = new Set(ready.map((r) => r.id));
    if (ready.length) {
      const profile = await graphql<{ saveDeployProfileVersion: { id: string; versions: { version: number }[] } }>(api,
        'mutation ($i: DeployProfileVersionInput!) { saveDeployProfileVersion(input: $i) { id versions { version } } }',
        { i: { name: 'demo-web', tenantId: createTenant.id, role: 'web', steps: [
          { kind: 'partition', name: 'partition-disks', params: { layout: 'single-root' } },
          { kind: 'image', name: 'write-image', params: { url: 'http://images.invalid/debian-13.qcow2' } },
          { kind: 'configure', name: 'configure-host' },
        ] } });
      const profileId = profile.saveDeployProfileVersion.id;
      const profileVersion = Math.max(...profile.saveDeployProfileVersion.versions.map((v) => v.version));
      for (const r of ready) {
        check();
          await call(api, 'POST', '/api/compute/metal/deploy', { nodeId: r.id, profileId, profileVersion });
      }
      rows = await settle(`deploy ${ready.length} -> deployed`, deployIds, ['deploying']);
    }

    const toRelease = rows.filter((r) => deployIds.has(r.id) && r.state === 'deployed').slice(0, opts.release);
    const releaseIds = new Set(toRelease.map((r) => r.id));
    for (const r of toRelease) {
      check();
      await call(api, 'POST', '/api/compute/metal/undeploy', { nodeId: r.id, wipe: 'quick' });
    }
    if (toRelease.length) rows = await settle(`release ${toRelease.length} -> ready`, releaseIds, ['releasing']);

    const { rows: [steps] } = await app.services.sql.query(
      `SELECT count(*) FILTER (WHERE s.status = 'succeeded')::int AS succeeded, count(*) FILTER (WHERE s.status = 'failed')::int AS failed,
              coalesce(sum(s.attempts), 0)::int AS attempts, count(DISTINCT r.id)::int AS runs
         FROM workflow_run r JOIN node n ON n.id = r.node_id LEFT JOIN workflow_step s ON s.run_id = r.id
        WHERE n.tenant_id = $1`, [createTenant.id],
    );
    const counts: Record<string, number> = {};
    for (const r of rows) counts[r.state] = (counts[r.state] ?? 0) + 1;
    const byName = new Map(rows.map((r) => [r.id, r]));
    const failedRows = rows.filter((r) => r.state === 'failed');
    const expectedFailed = [...failing].map((id) => enrolled.get(id)!);
    const ok = failedRows.length === opts.fail && expectedFailed.every((id) => byName.get(id)?.state === 'failed')
      && ready.length === opts.deploy
      && [...deployIds].every((id) => releaseIds.has(id) ? byName.get(id)?.state === 'ready' : byName.get(id)?.state === 'deployed')
      && toRelease.length === opts.release
      && rows.every((r) => ['ready', 'deployed', 'failed'].includes(r.state));
    const totals = sim.totals();
    const summary = {
      ok,
      machines: opts.machines,
      states: counts,
      deployed: ready.map((r) => r.name),
      released: toRelease.map((r) => r.name),
      failed: failedRows.map((r) => ({ name: r.name, error: r.error })),
      wallSeconds: Number(elapsed().toFixed(1)),
      phases: phases.map((p) => ({ name: p.name, seconds: Number(p.seconds.toFixed(1)) })),
      runs: steps!.runs as number,
      stepsSucceeded: steps!.succeeded as number,
      stepsFailed: steps!.failed as number,
      stepAttempts: steps!.attempts as number,
      simulator: { pxeBoots: totals.pxeBoots, ramdiskBoots: totals.ramdiskBoots, wipes: totals.wipesPerformed, diskBoots: totals.diskBoots },
      dataDir,
    };
    view.close();
    view = null;
    console.log('');
    console.log(`summary: ${Object.entries(counts).map(([s, n]) => `${s} ${n}`).join(', ')} of ${opts.machines} machine(s) in ${summary.wallSeconds} s`);
    for (const p of summary.phases) console.log(`  ${p.name}: ${p.seconds} s`);
    console.log(`  ${summary.runs} workflow runs, ${summary.stepsSucceeded} steps succeeded (${summary.stepAttempts} attempts), ${summary.stepsFailed} failed`);
    console.log(`  deployed: ${summary.deployed.join(', ') || 'none'}; released back to ready: ${summary.released.join(', ') || 'none'}`);
    for (const f of summary.failed) console.log(`  failed: ${f.name}: ${f.error}`);
    console.log(`  simulator: ${totals.pxeBoots} PXE boots, ${totals.ramdiskBoots} ramdisk boots, ${totals.wipesPerformed} disk wipes, ${totals.diskBoots} disk boots`);
    if (!ok) console.log('  NOT every machine ended where the demo expected it (see above)');
    if (opts.json) console.log(JSON.stringify({ summary }));
    return ok ? 0 : 1;
  } catch (error) {
    view?.close();
    view = null;
    if (error instanceof Interrupted) throw error;
    const tail = await fs.readFile(logFile, 'utf8').then((t) => t.trim().split('\n').slice(-15), () => []);
    if (tail.length && tail[0]) console.error(`last service log lines:\n${tail.join('\n')}`);
    throw error;
  } finally {
    await stop();
    console.log('stopped: simulator, service, embedded PostgreSQL; temp dir removed');
  }
}
