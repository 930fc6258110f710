/**
 * The domain series of /metrics (issue 22 item 4) against the service split as it is deployed: a
 * ROLE=api process and a ROLE=worker process on one database, the worker scraped on its
 * METRICS_PORT listener (it has no other). Simulated Redfish machines move through enroll,
 * inspect and commission while the test scrapes both; every counter is checked against the rows
 * the same work left in the database, in the process where the work happened.
 */
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { createTestDatabase, startTestApp, type TestApp } from './helpers/app';
import { rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { startMachineSim, type MachineSim } from './sim/machine';
import { newId } from '../src/ids';
import { queueCommand, COMMAND_KINDS } from '../src/modules/sites/commands';
import { generateAgentKeyPair } from '../src/modules/sites/seal';
import { PROVISION_STATES, WORKFLOW_KINDS } from '../src/modules/metal/states';
import { Metrics, RUN_ERROR_CODES, FABRIC_JOB_STATUSES, FABRIC_NODE_STATES } from '../src/ops/metrics';
import { readDomainSnapshot } from '../src/ops/domain-gauges';
import { WORKFLOWS } from '../jobs/workflows';
import { fromRoot } from '../src/paths';
import { loadConfig } from '../src/config';

jest.setTimeout(180_000);

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The Prometheus text format, as far as this service writes it (no escapes in label values). */
function parse(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const pair of (m[2] ?? '').match(/[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"/g) ?? []) {
      const at = pair.indexOf('=');
      labels[pair.slice(0, at)] = pair.slice(at + 2, -1);
    }
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

async function scrape(base: string): Promise<Sample[]> {
  const response = await fetch(`${base}/metrics`);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toMatch(/^text\/plain/);
  return parse(await response.text());
}

/** The value of the one sample of `name` whose labels are exactly `labels` (absent: 0). */
function value(samples: Sample[], name: string, labels: Record<string, string>): number {
  const match = samples.filter((s) => s.name === name && Object.keys(s.labels).length === Object.keys(labels).length
    && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  expect(match.length).toBeLessThanOrEqual(1);
  return match[0]?.value ?? 0;
}

/** Every sample of `name`, keyed by its labels in `keys` order. */
function byLabels(samples: Sample[], name: string, keys: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of samples.filter((x) => x.name === name)) out[keys.map((k) => s.labels[k] ?? '').join('|')] = s.value;
  return out;
}

async function until<T>(what: string, read: () => Promise<T>, ok: (v: T) => boolean, limitMs = 120_000): Promise<T> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    const v = await read();
    if (ok(v)) return v;
    if (Date.now() > deadline) {
      const shown = Array.isArray(v) ? (v as Sample[]).filter((x) => x.name?.startsWith('metal_') && x.value !== 0) : v;
      const nodes = (await api.app.services.sql.query('SELECT name, provision_state, last_error_code, last_error_message FROM node ORDER BY name')).rows;
      throw new Error(`${what}: still ${JSON.stringify(shown)}; nodes ${JSON.stringify(nodes)}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

let api: TestApp;
let worker: TestApp;
let sim: MachineSim;

beforeAll(async () => {
  const databaseUrl = await createTestDatabase();
  // One SECRET_KEY for both, as a deployment has: the API stores BMC credentials, the worker's agent reads them.
  const secretKey = randomBytes(32).toString('base64');
  // The API process reads the domain gauges at most every 300 ms here (5 s by default).
  api = await startTestApp({ databaseUrl, secretKey, role: 'api', metricsCacheMs: 300, tokenCacheMs: 0 });
  worker = await startTestApp({ databaseUrl, secretKey, role: 'worker', metricsPort: 0, agentPollMs: 200 });
  sim = await startMachineSim({ serviceUrl: api.url, redfish: { machines: [{ id: 'good' }, { id: 'locked' }] } });
});
afterAll(async () => {
  await sim?.stop();
  await Promise.all([api?.stop(), worker?.stop()]);
});

describe('/metrics: the domain series, in the process where each happens', () => {
  let siteId: string;
  const nodes: Record<string, string> = {};

  it('a worker process serves /metrics and /healthz on METRICS_PORT, nothing else; it has no HTTP API', async () => {
    expect(worker.app.server).toBeNull();
    expect(worker.app.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(api.app.metricsUrl).toBeNull();
    expect((await fetch(`${worker.app.metricsUrl}/healthz`)).status).toBe(200);
    expect((await fetch(`${worker.app.metricsUrl}/graphql`)).status).toBe(404);
    expect((await fetch(`${worker.app.metricsUrl}/metrics`, { method: 'POST' })).status).toBe(400);
    const samples = await scrape(worker.app.metricsUrl!);
    // The database-derived gauges are the API processes' (a worker would only say the same again).
    expect(samples.some((s) => s.name === 'metal_nodes')).toBe(false);
    expect(samples.some((s) => s.name === 'metal_fabric_rollouts')).toBe(false);
    expect(samples.some((s) => s.name === 'metal_builtin_agent_heartbeat_age_seconds')).toBe(true);
    const apiSamples = await scrape(api.url);
    expect(apiSamples.some((s) => s.name === 'metal_builtin_agent_heartbeat_age_seconds')).toBe(false);
    expect(value(apiSamples, 'metal_fabric_rollouts', { status: 'running' })).toBe(0);
  });

  it('machines enrolled and inspected move the state gauge; runs, steps and commands are counted by the worker that ran them', async () => {
    const { prisma, sql } = api.app.services;
    const tree = await makeTenantTree(prisma, 'metrics', { pools: 1, nodesPerPool: 0 });
    siteId = tree.site.id;
    const token = await makeToken(prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const before = await scrape(api.url);
    expect(Object.keys(byLabels(before, 'metal_nodes', ['site', 'state'])).filter((k) => k.startsWith(`${siteId}|`))).toEqual([]);

    for (const m of sim.machines) {
      // `locked`: enrolled with a password its BMC refuses, so its enroll fails BMC_AUTH_FAILED.
      const password = m.id === 'locked' ? `wrong-${randomBytes(6).toString('hex')}` : m.bmc.password;
      const r = await rest(api.url, token, 'POST', '/api/compute/metal/enroll', {
        poolId: tree.pools[0]!.id, name: m.id, macs: m.macs,
        bmc: { address: m.bmc.url, driver: 'redfish', credentials: { username: m.bmc.username, password } },
      });
      expect(r.status).toBe(200);
      nodes[m.id] = r.body.node.id as string;
    }
    // Right after the enroll requests both nodes are in the database: the gauge counts them (in
    // enrolling, or already further along).
    const enrolled = await until('the gauge counting both nodes', () => scrape(api.url),
      (s) => PROVISION_STATES.reduce((n, state) => n + value(s, "metal_nodes", { site: siteId, state }), 0) === 2);
    // Every state of the site is a series, 0 included.
    expect(Object.keys(byLabels(enrolled, 'metal_nodes', ['site', 'state'])).filter((k) => k.startsWith(`${siteId}|`)).sort())
      .toEqual(PROVISION_STATES.map((s) => `${siteId}|${s}`).sort());

    const settled = await until('good ready and locked failed (by the gauge)', () => scrape(api.url),
      (s) => value(s, 'metal_nodes', { site: siteId, state: 'ready' }) === 1 && value(s, 'metal_nodes', { site: siteId, state: 'failed' }) === 1);
    expect(value(settled, 'metal_nodes', { site: siteId, state: 'enrolling' })).toBe(0);
    const states = (await sql.query('SELECT id, provision_state, last_error_code FROM node WHERE id = ANY($1::text[])', [Object.values(nodes)])).rows;
    expect(Object.fromEntries(states.map((r) => [r.id, [r.provision_state, r.last_error_code]]))).toEqual({
      [nodes.good!]: ['ready', null], [nodes.locked!]: ['failed', 'BMC_AUTH_FAILED'],
    });

    // Each run's end is committed before the worker counts it: wait for the runs to end, then read.
    await until('every run ended', async () => (await sql.query(`SELECT count(*)::int AS n FROM workflow_run WHERE status IN ('queued', 'running', 'waiting', 'aborting')`)).rows[0]!.n as number, (n) => n === 0);
    const w = await scrape(worker.app.metricsUrl!);
    const runs = (await sql.query('SELECT kind, status, last_error_code FROM workflow_run')).rows;
    expect(runs.map((r) => `${r.kind}|${r.status}`).sort()).toEqual(
      ['metal-enroll|succeeded', 'metal-enroll|failed', 'metal-inspect|succeeded', 'metal-commission|succeeded'].sort());
    expect(byLabels(w, 'metal_workflow_runs_started_total', ['kind'])).toEqual({ 'metal-enroll': 2, 'metal-inspect': 1, 'metal-commission': 1 });
    expect(byLabels(w, 'metal_workflow_runs_finished_total', ['kind', 'outcome', 'code'])).toEqual({
      'metal-enroll|succeeded|': 1, 'metal-enroll|failed|BMC_AUTH_FAILED': 1, 'metal-inspect|succeeded|': 1, 'metal-commission|succeeded|': 1,
    });

    // The step histogram: one observation per step that started and ended, as workflow_step says.
    const steps = (await sql.query(
      `SELECT w.kind, s.name, s.status, count(*)::int AS n FROM workflow_step s JOIN workflow_run w ON w.id = s.run_id
        WHERE s.started_at IS NOT NULL AND s.finished_at IS NOT NULL GROUP BY 1, 2, 3`,
    )).rows;
    expect(steps.length).toBeGreaterThan(5);
    expect(byLabels(w, 'metal_workflow_step_duration_seconds_count', ['kind', 'step', 'outcome']))
      .toEqual(Object.fromEntries(steps.map((r) => [`${r.kind}|${r.name}|${r.status}`, r.n])));
    const sums = byLabels(w, 'metal_workflow_step_duration_seconds_sum', ['kind', 'step', 'outcome']);
    expect(Object.values(sums).reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    // The failed enroll's failing step is in the histogram as failed.
    expect(steps.some((r) => r.kind === 'metal-enroll' && r.status === 'failed')).toBe(true);

    // BMC commands, by kind and outcome: the built-in agent of the worker ran every one of them.
    const commands = (await sql.query(
      `SELECT kind, status, CASE WHEN status IN ('failed', 'expired') THEN result->>'code' ELSE '' END AS code, count(*)::int AS n
         FROM command WHERE status IN ('succeeded', 'unverified', 'failed', 'expired')
          -- Withdrawn by the engine when their run ended (never claimed): not a BMC command's outcome.
          AND coalesce(result->>'message', '') NOT LIKE 'withdrawn:%' GROUP BY 1, 2, 3`,
    )).rows;
    // The locked machine's BMC refused the first command sent to it (verifying access).
    expect(commands.filter((c) => c.status === 'failed').map((c) => c.code)).toEqual(['BMC_AUTH_FAILED']);
    expect(byLabels(w, 'metal_bmc_commands_total', ['kind', 'outcome', 'code']))
      .toEqual(Object.fromEntries(commands.map((c) => [`${c.kind}|${c.status}|${c.code}`, c.n])));
    expect(value(w, 'metal_bmc_commands_total', { kind: 'bmc.power', outcome: 'succeeded' })).toBeGreaterThan(0);

    // The API process ran none of it: it has no such counts.
    const a = await scrape(api.url);
    expect(a.filter((s) => /^metal_(workflow|bmc)_/.test(s.name))).toEqual([]);
  });

  it('heartbeat age: the worker\'s built-in agent, and a remote agent per site from the database; a remote agent\'s results are counted by the API', async () => {
    const w = await scrape(worker.app.metricsUrl!);
    const builtin = value(w, 'metal_builtin_agent_heartbeat_age_seconds', {});
    expect(builtin).toBeGreaterThanOrEqual(0);
    expect(builtin).toBeLessThan(5); // it claims every AGENT_POLL_MS (200 ms here)

    const { prisma } = api.app.services;
    const tree = await makeTenantTree(prisma, 'metrics-remote', { pools: 1, nodesPerPool: 0 });
    const admin = await makeToken(prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const call = async (token: string, query: string, variables: Record<string, unknown> = {}) => {
      const response = await fetch(`${api.url}/graphql`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: JSON.stringify({ query, variables }) });
      const body = (await response.json()) as { data?: Record<string, any>; errors?: unknown[] };
      expect(body.errors).toBeUndefined();
      return body.data!;
    };
    const registered = await call(admin, 'mutation ($s: ID!) { registerSiteAgent(siteId: $s, name: "rack-1") { token } }', { s: tree.site.id });
    const agent = registered.registerSiteAgent.token as string;
    // Registered but never heartbeaten: no age yet.
    await new Promise((r) => setTimeout(r, 350));
    expect(byLabels(await scrape(api.url), 'metal_agent_heartbeat_age_seconds', ['site'])[tree.site.id]).toBeUndefined();
    await call(agent, 'mutation { agentReportStatus { id } }');
    await new Promise((r) => setTimeout(r, 350));
    const fresh = byLabels(await scrape(api.url), 'metal_agent_heartbeat_age_seconds', ['site'])[tree.site.id]!;
    expect(fresh).toBeGreaterThanOrEqual(0);
    expect(fresh).toBeLessThan(2);
    await new Promise((r) => setTimeout(r, 1500));
    const older = byLabels(await scrape(api.url), 'metal_agent_heartbeat_age_seconds', ['site'])[tree.site.id]!;
    expect(older).toBeGreaterThan(fresh + 1);
    await call(agent, 'mutation { agentReportStatus { id } }');
    await new Promise((r) => setTimeout(r, 350));
    expect(byLabels(await scrape(api.url), 'metal_agent_heartbeat_age_seconds', ['site'])[tree.site.id]).toBeLessThan(older);

    // The remote agent runs a command of its site and reports a failure: the API process stores
    // it, so the API process counts it; the worker does not.
    await call(agent, 'mutation ($k: String!) { registerAgentKey(publicKey: $k) { id } }', { k: generateAgentKeyPair().publicKey });
    const nodeId = newId('MetalNode');
    await prisma.node.create({ data: { id: nodeId, tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id, provisionState: 'ready', bmcAddress: '127.9.9.9', bmcDriver: 'redfish' } });
    const workerBefore = value(await scrape(worker.app.metricsUrl!), 'metal_bmc_commands_total', { kind: 'bmc.power-state', outcome: 'failed', code: 'BMC_TIMEOUT' });
    const queued = await queueCommand(api.app.services.sql, { kind: 'bmc.power-state', params: {}, nodeId, runId: 'run_metrics_test', stepIdx: 0, idempotencyKey: `metrics-${randomBytes(4).toString('hex')}`, ttlMs: 300_000 });
    const claimed = await call(agent, 'mutation { claimCommands(max: 5) { id } }');
    expect(claimed.claimCommands).toEqual([{ id: queued.id }]);
    await call(agent, 'mutation ($c: ID!, $r: CommandResultInput!) { reportCommandResult(commandId: $c, result: $r) { id } }',
      { c: queued.id, r: { ok: false, code: 'BMC_TIMEOUT', message: 'the BMC did not answer' } });
    expect(value(await scrape(api.url), 'metal_bmc_commands_total', { kind: 'bmc.power-state', outcome: 'failed', code: 'BMC_TIMEOUT' })).toBe(1);
    expect(value(await scrape(worker.app.metricsUrl!), 'metal_bmc_commands_total', { kind: 'bmc.power-state', outcome: 'failed', code: 'BMC_TIMEOUT' })).toBe(workerBefore);
  });

  it('fabric rollouts by status, and the nodes of the running one by state', async () => {
    const { sql } = api.app.services;
    const jobId = (await sql.query(`INSERT INTO fabric_job (id, job_type, scope, state, total_nodes) VALUES (gen_random_uuid(), 'fabric_apply', 'all', 'apply_running', 3) RETURNING id`)).rows[0]!.id as string;
    await sql.query(
      `INSERT INTO fabric_job_node (job_id, node_id, position, node_ip, finished, ok) VALUES
         ($1, 'cn-1', 0, '127.0.0.11', true, true), ($1, 'cn-2', 1, '127.0.0.12', true, false), ($1, 'cn-3', 2, '127.0.0.13', false, false)`,
      [jobId],
    );
    const running = await until('the running rollout', () => scrape(api.url), (s) => value(s, 'metal_fabric_rollouts', { status: 'running' }) === 1);
    expect(byLabels(running, 'metal_fabric_rollout_nodes', ['state'])).toEqual({ pending: 1, succeeded: 1, failed: 1 });
    await sql.query(`UPDATE fabric_job_node SET finished = true, ok = true WHERE job_id = $1 AND node_id = 'cn-3'`, [jobId]);
    await sql.query(`UPDATE fabric_job SET job_status = 'partial', state = 'apply_partial', finished_at = now() WHERE id = $1`, [jobId]);
    const ended = await until('the rollout ended', () => scrape(api.url), (s) => value(s, 'metal_fabric_rollouts', { status: 'partial' }) === 1);
    expect(byLabels(ended, 'metal_fabric_rollouts', ['status'])).toEqual({ running: 0, completed: 0, failed: 0, partial: 1 });
    expect(byLabels(ended, 'metal_fabric_rollout_nodes', ['state'])).toEqual({ pending: 0, succeeded: 0, failed: 0 });
  });

  it('every label value of a domain series comes from the service\'s own lists: no node id, no name, no message', async () => {
    const steps = new Set(Object.values(WORKFLOWS).flatMap((def) => def!.steps.flatMap((s) => [s.name, ...(s.cleanup ? [s.cleanup.name] : [])])));
    const allowed: Record<string, (v: string) => boolean> = {
      kind: (v) => v in WORKFLOW_KINDS || (COMMAND_KINDS as readonly string[]).includes(v) || v === 'OTHER',
      outcome: (v) => ['succeeded', 'unverified', 'skipped', 'failed', 'aborted', 'superseded', 'expired'].includes(v),
      code: (v) => RUN_ERROR_CODES.includes(v) || v === 'OTHER',
      step: (v) => steps.has(v) || v === 'OTHER',
      state: (v) => (PROVISION_STATES as readonly string[]).includes(v) || (FABRIC_NODE_STATES as readonly string[]).includes(v),
      status: (v) => (FABRIC_JOB_STATUSES as readonly string[]).includes(v),
      site: (v) => /^site_[0-9a-f-]{36}$/.test(v),
      le: (v) => v === '+Inf' || Number.isFinite(Number(v)),
    };
    // Every step of every definition, its cleanup's too, is its own label value (not OTHER).
    const own = new Metrics();
    own.engine({ started: [], finished: [], commands: [], steps: [...steps].map((step) => ({ kind: 'metal-inspect', step, outcome: 'succeeded', seconds: 1 })) });
    expect(Object.keys(byLabels(parse(await own.render()), 'metal_workflow_step_duration_seconds_count', ['step'])).sort()).toEqual([...steps].sort());
    const samples = [...(await scrape(api.url)), ...(await scrape(worker.app.metricsUrl!))].filter((s) => s.name.startsWith('metal_'));
    expect(samples.length).toBeGreaterThan(30);
    for (const s of samples) {
      for (const [label, v] of Object.entries(s.labels)) {
        if (!allowed[label]?.(v)) throw new Error(`${s.name}: label ${label}="${v}" is not from a closed list`);
      }
    }
  });

  it('every error code jobs/ fails a step or a run with is on the metrics\' list (else it would count as OTHER)', () => {
    const codes = new Set<string>();
    const walk = (dir: string) => {
      for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
        const file = path.join(dir, entry.name);
        if (entry.isDirectory()) walk(file);
        else if (file.endsWith('.ts')) {
          for (const m of fs.readFileSync(file, 'utf8').matchAll(/\b(?:fail|failure|failed)\(\s*'([A-Z][A-Z0-9_]+)'/g)) codes.add(m[1]!);
          for (const m of fs.readFileSync(file, 'utf8').matchAll(/\bcode: '([A-Z][A-Z0-9_]+)'/g)) codes.add(m[1]!);
        }
      }
    };
    walk(fromRoot('jobs'));
    walk(fromRoot('src', 'modules', 'metal'));
    expect(codes.size).toBeGreaterThan(10);
    expect([...codes].filter((c) => !RUN_ERROR_CODES.includes(c))).toEqual([]);
  });
});

describe('METRICS_PORT and METRICS_CACHE_MS', () => {
  it('are read from the environment; unset, no metrics listener and a 5 s cache; a bad value names the variable', () => {
    expect(loadConfig({})).toMatchObject({ metricsPort: undefined, metricsCacheMs: 5000 });
    expect(loadConfig({ METRICS_PORT: '9464', METRICS_CACHE_MS: '1000' })).toMatchObject({ metricsPort: 9464, metricsCacheMs: 1000 });
    for (const bad of ['70000', '-1', 'x', '1.5']) expect(() => loadConfig({ METRICS_PORT: bad })).toThrow(/^METRICS_PORT must be/);
    expect(() => loadConfig({ METRICS_CACHE_MS: 'soon' })).toThrow(/^METRICS_CACHE_MS must be/);
  });
});

describe('the domain gauges read the database once per METRICS_CACHE_MS, however many scrapes come', () => {
  it('twenty concurrent scrapes make one read; a change shows after the cache time, not before', async () => {
    const { sql, prisma } = api.app.services;
    let reads = 0;
    const metrics = new Metrics({ readDomain: () => { reads += 1; return readDomainSnapshot(sql); }, domainCacheMs: 60_000 });
    const texts = await Promise.all(Array.from({ length: 20 }, () => metrics.render()));
    expect(reads).toBe(1);
    const tree = await makeTenantTree(prisma, 'metrics-cache', { pools: 1, nodesPerPool: 2 });
    const cached = parse(await metrics.render());
    expect(reads).toBe(1);
    expect(byLabels(cached, 'metal_nodes', ['site'])[tree.site.id]).toBeUndefined();
    expect(texts.every((t) => t.includes('metal_domain_snapshot_age_seconds'))).toBe(true);
    const fresh = new Metrics({ readDomain: () => { reads += 1; return readDomainSnapshot(sql); }, domainCacheMs: 0 });
    const now = parse(await fresh.render());
    expect(reads).toBe(2);
    expect(PROVISION_STATES.reduce((n, state) => n + value(now, 'metal_nodes', { site: tree.site.id, state }), 0)).toBe(2);
    expect(value(now, 'metal_domain_snapshot_age_seconds', {})).toBeLessThan(1);
  });
});
