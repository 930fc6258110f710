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
import { stopEmbeddedPostgresNow } from '../../src/db/embedded/process';
import { startMachineSim, type MachineSim } from '../sim/machine';
import { freePort } from '../helpers/ports';
import { FLAVOURS, type FlavourName } from '../sim/redfish/flavours';
import type { DemoOptions } from './options';
import { createView, type Move, type Row, type View } from './view';
import { EventFeed } from './events';

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


/** What the events said of a node: its last provision move, its active run's current step, its failure. */
interface Seen {
  state?: string;
  step?: { runId: string; title: string; attempts: number } | null;
}

interface NodesPage {
  nodes: {
    edges: { node: { id: string; name: string; provisionState: string; failedFrom: string | null; lastError: { code: string; message: string } | null } }[];
    pageInfo: { hasNextPage: boolean; endCursor: string | null };
  };
}

/** Every node of the pool, through GraphQL (the API's nodes connection, page by page). */
async function readRows(api: Api, poolId: string, flavours: Map<string, string>, seen: Map<string, Seen>): Promise<Row[]> {
  const rows: Row[] = [];
  let after: string | null = null;
  for (;;) {
    const page: NodesPage = await graphql<NodesPage>(api,
      'query ($p: ID!, $after: String) { nodes(first: 500, after: $after, filter: { poolId: $p }) { edges { node { id name provisionState failedFrom lastError { code message } } } pageInfo { hasNextPage endCursor } } }',
      { p: poolId, after });
    for (const { node: n } of page.nodes.edges) {
      const step = seen.get(n.id)?.step ?? null;
      rows.push({
        id: n.id,
        name: n.name,
        flavour: flavours.get(n.name) ?? '',
        state: n.provisionState,
        step: step?.title ?? null,
        attempts: step?.attempts ?? 0,
        error: n.lastError ? failure(n.lastError, n.failedFrom) : null,
      });
    }
    if (!page.nodes.pageInfo.hasNextPage) break;
    after = page.nodes.pageInfo.endCursor;
  }
  return rows.sort((a, b) => a.name.localeCompare(b.name));
}

const failure = (e: { code?: unknown; message?: unknown }, from: unknown) => `${String(e.code)} (from ${String(from)}): ${String(e.message)}`;

/**
 * The provision moves in the events received since the last call (node.enrolled, then
 * node.provision.<state>), in the stream's order: what the plain view prints, so a machine that
 * moves through a state between two reads of the rows still shows it. The same events keep each
 * node's current step (workflow.step, workflow.finished) for the table.
 */
function readMoves(feed: EventFeed, seen: Map<string, Seen>): Move[] {
  const moves: Move[] = [];
  for (const e of feed.drain()) {
    if (!e.nodeId) continue;
    const node = seen.get(e.nodeId) ?? {};
    seen.set(e.nodeId, node);
    const p = e.payload;
    if (e.type === 'node.enrolled' || e.type.startsWith('node.provision.')) {
      // node.enrolled: a new node, in enrolling.
      const to = e.type === 'node.enrolled' ? 'enrolling' : e.type.slice('node.provision.'.length);
      node.state = to;
      const error = to === 'failed' && p.error && typeof p.error === 'object' ? failure(p.error as Record<string, unknown>, p.failedFrom) : undefined;
      moves.push({ nodeId: e.nodeId, to, ...(error ? { error } : {}) });
    } else if (e.type === 'workflow.step' && (p.status === 'running' || p.status === 'waiting')) {
      node.step = { runId: String(p.workflowId), title: String(p.title ?? p.step), attempts: Number(p.attempt ?? 0) };
    } else if (e.type === 'workflow.finished' && node.step?.runId === p.workflowId) {
      node.step = null;
    }
  }
  return moves;
}

interface Timelines {
  nodes: { edges: { node: { timeline: { id: string; steps: { status: string; attempts: number }[] }[] } }[]; pageInfo: { hasNextPage: boolean; endCursor: string | null } };
}

/** The pool's workflow runs and their steps, from every node's timeline (GraphQL; 25 nodes a page keeps the query under the cost limit). */
async function readRunTotals(api: Api, poolId: string): Promise<{ runs: number; succeeded: number; failed: number; attempts: number }> {
  const totals = { runs: 0, succeeded: 0, failed: 0, attempts: 0 };
  let after: string | null = null;
  for (;;) {
    const page: Timelines = await graphql<Timelines>(api,
      'query ($p: ID!, $after: String) { nodes(first: 25, after: $after, filter: { poolId: $p }) { edges { node { timeline(last: 50) { id steps { status attempts } } } } pageInfo { hasNextPage endCursor } } }',
      { p: poolId, after });
    for (const { node } of page.nodes.edges) {
      for (const run of node.timeline) {
        totals.runs += 1;
        for (const step of run.steps) {
          if (step.status === 'succeeded') totals.succeeded += 1;
          if (step.status === 'failed') totals.failed += 1;
          totals.attempts += step.attempts;
        }
      }
    }
    if (!page.nodes.pageInfo.hasNextPage) return totals;
    after = page.nodes.pageInfo.endCursor;
  }
}

/**
 * A token for the status page: read-only (compute:sites:read) on the demo's tenant, made through
 * the API, never the admin token. It is written to a 0600 file in the demo's temp dir, which goes
 * with everything else at exit (and the token with the database): the demo prints where it is,
 * not the token, so it is not left in a terminal's scrollback or a CI log.
 */
async function statusPageToken(api: Api, tenantId: string, dataDir: string): Promise<string> {
  const { createApiToken } = await graphql<{ createApiToken: { token: string } }>(api,
    'mutation ($i: CreateApiTokenInput!) { createApiToken(input: $i) { token } }',
    { i: { name: 'demo-status-page', tenantId, grants: [{ permission: 'compute:sites:read', scopeType: 'tenant', scopeId: tenantId }], expiresAt: new Date(Date.now() + 12 * 3600_000).toISOString() } });
  const file = path.join(dataDir, 'ui-token');
  await fs.writeFile(file, createApiToken.token, { mode: 0o600 });
  return file;
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
  let feed: EventFeed | null = null;
  const logFile = path.join(dataDir, 'service.log');
  const stop = async () => {
    view?.close();
    await feed?.close();
    feed = null;
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
    const tokenFile = await statusPageToken(api, createTenant.id, dataDir);
    console.log(`status page: ${app.url}/ui (token in ${tokenFile}: read-only, this demo's tenant, removed at exit)`);
    console.log(`  open it with the token in the URL's fragment, which the page moves out of the address bar: "${app.url}/ui#token=$(cat ${tokenFile})"`);
    // The live view below reads what moves from the event stream, as the page does; opened before
    // the first enrollment, so no move is missed.
    feed = await EventFeed.open(app.url!, adminToken);

    view = await createView(opts, process.stdout);
    const phases: Phase[] = [];
    /** Each node as the events read so far say: its last provision move, its current step. */
    const seen = new Map<string, Seen>();
    const settle = async (phase: string, nodeIds: Set<string>, moving: string[]): Promise<Row[]> => {
      const started = performance.now();
      for (;;) {
        check();
        const rows = await readRows(api, createPool.id, flavours, seen);
        const moves = readMoves(feed!, seen);
        view!.update(phase, rows, elapsed(), moves);
        const mine = rows.filter((r) => nodeIds.has(r.id));
        // Settled, and every move that got it there received (events arrive just after their commit).
        if (mine.every((r) => !moving.includes(r.state) && seen.get(r.id)?.state === r.state)) {
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

    const steps = await readRunTotals(api, createPool.id);
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
      runs: steps.runs,
      stepsSucceeded: steps.succeeded,
      stepsFailed: steps.failed,
      stepAttempts: steps.attempts,
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
    if (opts.hold && !signal.aborted) {
      console.log(`holding: the service ${app.url} and its status page ${app.url}/ui stay up until Ctrl-C`);
      await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
    }
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
