/**
 * `npm run bench -- fabric`: the fabric's three speed targets (issue 10, "Speed").
 *
 *   plan       POST /controlnode/fabric-config/plan against the real service, one request at a
 *              time (target: at most 50 ms). Reported "not available" when the route is not
 *              there (the plan endpoint is another part of the issue).
 *   render     every host frr.conf for 1,000 compute nodes plus the switch config and the
 *              listen-range snippet, in-process through the same functions the service calls
 *              (target: at most 100 ms), for a route-reflector-client fabric and for the
 *              software route reflector on the gateway.
 *   preflight  POST /controlnode/fabric-config/preflight over 100 real sshd nodes in network
 *              namespaces with 50 ms of added latency on what each node sends, at the default
 *              fan-out concurrency (target: at most 5 s wall time); wall time and per-node time.
 *
 *   apply      POST /controlnode/fabric-config/apply over 100 compute nodes on one management
 *              segment, each a real sshd (+50 ms on what it sends) with real FRR behind the
 *              node's `systemctl`, the gateway the software route reflector: from baseline to
 *              every node's own "BGP neighbor ... Established", then the idempotent re-apply; wall
 *              time and per-node time (no target in the issue: the figures are recorded).
 *
 * Needs root (namespaces, veth pairs, sshd). Options: --nodes 100 (preflight and apply nodes),
 * --delay-ms 50, --rounds 3 (preflight runs measured after one warm-up run), --render-nodes 1000,
 * --render-rounds 20, --plan-requests 50, --skip plan,render,preflight,apply.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { DEFAULT_CONCURRENCY } from '../../clients/ssh';
import type { ComputeNode } from '../../src/modules/fabric/compute-nodes';
import { renderIntentOf, nodeIntentsOf } from '../../src/modules/fabric/render-intent';
import { renderAllHostFrr } from '../../src/modules/fabric/render/host-frr';
import { renderListenRangeSnippet, renderSwitchConfig } from '../../src/modules/fabric/render/switch';
import { DEFAULT_SETTINGS, type FabricSettings } from '../../src/modules/fabric/validate';
import { startSshNodes, type SshNodes } from '../helpers/ssh-nodes';
import { intOption, machineInfo, option, parseBenchArgs, seed, startService, usageError, type Service } from './read';

const TARGET_PLAN_MS = 50;
const TARGET_RENDER_MS = 100;
const TARGET_PREFLIGHT_S = 5;

const percentile = (sorted: number[], p: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]! : NaN);
const median = (list: number[]) => percentile([...list].sort((a, b) => a - b), 50);
const pass = (ok: boolean) => (ok ? 'PASS' : 'FAIL');

/** POST with a JSON body, or none when body is undefined (the apply route takes none). */
async function post(service: Service, route: string, body?: unknown): Promise<{ status: number; body: unknown }> {
  const response = await fetch(`${service.url}${route}`, {
    method: 'POST',
    headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), authorization: `Bearer ${service.adminToken}` },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: response.status, body: parsed };
}

// ---------------------------------------------------------------------------------------------
// render

const BENCH_SETTINGS: FabricSettings = {
  ...DEFAULT_SETTINGS,
  as: 65000,
  fabricSwitchAs: 65000,
  externalRouteReflector: true,
  fabricSwitchName: 'spine1',
  fabricSwitchNos: 'sonic',
  fabricSwitchPeeringIp: '10.255.0.254',
  fabricSwitchRole: 'spine',
  managementCidr: '192.168.0.0/21',
  routerIdBase: '10.255.0.1',
  routerIdPrefixLen: 21,
  ospfEnabled: true,
  ospfFabricInterface: 'eth1',
  ospfAuthType: 'message-digest',
  bfdEnabled: true,
  expectedNodes: 1000,
  expectedVms: 10000,
  vxlanMtu: 9000,
  bgpPasswordSet: true,
  ospfAuthKeySet: true,
};

function renderOnce(settings: FabricSettings, nodes: ComputeNode[], vteps: Map<string, string>): number {
  const before = renderIntentOf({ ...settings, routerIdPrefixLen: 22 }, { underlayCidr: '10.60.0.0/21' });
  const intent = renderIntentOf(settings, { underlayCidr: '10.60.0.0/21' });
  const configs = renderAllHostFrr(intent, nodeIntentsOf(nodes, vteps), { bgpPassword: 'bench-bgp-pass', ospfAuthKey: 'benchkey' });
  const switchConfig = renderSwitchConfig(intent);
  const snippet = renderListenRangeSnippet(before, intent, intent.switch.nos);
  let bytes = switchConfig.length + snippet.snippet.length;
  for (const text of configs.values()) bytes += text.length;
  return bytes;
}

function benchRender(count: number, rounds: number): boolean {
  const nodes: ComputeNode[] = Array.from({ length: count }, (_, i) => ({
    nodeId: `node-${i}`,
    nodeIp: `192.168.${Math.floor(i / 250)}.${(i % 250) + 2}`,
    fqdn: `compute-${String(i).padStart(4, '0')}.bench.example`,
    sshPort: 22,
    sshUser: 'root',
    sshHostKey: null,
    sshKeyRef: null,
    underlayIface: 'eth1',
    isGateway: i === 0,
  }));
  const vteps = new Map(nodes.map((n, i) => [n.nodeId, `10.255.${Math.floor((i + 1) / 254)}.${((i + 1) % 254) + 1}`]));
  let ok = true;
  for (const [label, settings] of [
    ['route-reflector clients (external RR on the switch)', BENCH_SETTINGS],
    ['software route reflector on the gateway', { ...BENCH_SETTINGS, externalRouteReflector: false }],
  ] as const) {
    for (let i = 0; i < 3; i += 1) renderOnce(settings, nodes, vteps); // warm-up: JIT
    const times: number[] = [];
    let bytes = 0;
    for (let i = 0; i < rounds; i += 1) {
      const started = performance.now();
      bytes = renderOnce(settings, nodes, vteps);
      times.push(performance.now() - started);
    }
    const m = median(times);
    ok &&= m <= TARGET_RENDER_MS;
    console.log(`render, ${label}: ${count} host configs + switch config + listen-range snippet (${(bytes / 1024).toFixed(0)} KiB): median ${m.toFixed(1)} ms, min ${Math.min(...times).toFixed(1)}, max ${Math.max(...times).toFixed(1)} over ${rounds} rounds; target <= ${TARGET_RENDER_MS} ms: ${pass(m <= TARGET_RENDER_MS)}`);
  }
  return ok;
}

// ---------------------------------------------------------------------------------------------
// plan

async function benchPlan(service: Service, requests: number): Promise<boolean | null> {
  const body = {
    expected_nodes: 1000, expected_vms: 10000, fabric_switch_nos: 'sonic', fabric_switch_name: 'spine1',
    management_cidr: '192.168.0.0/21', vxlan_mtu: 9000, public_mtu: 1500,
  };
  const probe = await post(service, '/controlnode/fabric-config/plan', body);
  if (probe.status === 404 || probe.status === 405) {
    console.log(`plan: not available (POST /controlnode/fabric-config/plan answered ${probe.status}: the plan endpoint is not on this build)`);
    return null;
  }
  if (probe.status !== 200) {
    console.log(`plan: FAIL, the first request answered ${probe.status}: ${JSON.stringify(probe.body).slice(0, 300)}`);
    return false;
  }
  for (let i = 0; i < 5; i += 1) await post(service, '/controlnode/fabric-config/plan', body);
  const times: number[] = [];
  for (let i = 0; i < requests; i += 1) {
    const started = performance.now();
    const answer = await post(service, '/controlnode/fabric-config/plan', body);
    times.push(performance.now() - started);
    if (answer.status !== 200) throw new Error(`plan request ${i}: ${answer.status}`);
  }
  times.sort((a, b) => a - b);
  const p50 = percentile(times, 50);
  console.log(`plan: ${requests} sequential requests over HTTP: p50 ${p50.toFixed(1)} ms, p99 ${percentile(times, 99).toFixed(1)} ms, max ${times[times.length - 1]!.toFixed(1)} ms; target p50 <= ${TARGET_PLAN_MS} ms: ${pass(p50 <= TARGET_PLAN_MS)}`);
  return p50 <= TARGET_PLAN_MS;
}

// ---------------------------------------------------------------------------------------------
// preflight

interface PreflightBody {
  ready: boolean;
  underlay_mtu: number;
  nodes: { mode: string; reason: string }[];
}

async function benchPreflight(service: Service, count: number, delayMs: number, rounds: number): Promise<boolean> {
  const started = performance.now();
  let h: SshNodes | undefined;
  try {
    h = await startSshNodes('bench-fabric', Array.from({ length: count }, () => ({ delayMs })));
    const method = h.nodes[0]?.delay?.method ?? 'none';
    for (const node of h.nodes) {
      const n = node.index;
      await h.inNode(node, ['ip', 'link', 'add', 'br0', 'type', 'bridge']);
      await h.inNode(node, ['ip', 'addr', 'add', `10.60.${Math.floor(n / 250)}.${(n % 250) + 2}/16`, 'dev', 'br0']);
      await h.inNode(node, ['ip', 'link', 'set', 'br0', 'mtu', '9000', 'up']);
    }
    console.log(`preflight: ${count} sshd nodes with ${delayMs} ms added latency (${method}) and a bridge each, set up in ${((performance.now() - started) / 1000).toFixed(1)} s`);

    // Compute nodes: the seeded metal nodes, deployed, each at one namespace's address.
    const s = await seed(service, count);
    const db = new pg.Client({ connectionString: service.databaseUrl });
    await db.connect();
    try {
      await db.query(`UPDATE node SET provision_state = 'deployed' WHERE tenant_id = $1`, [s.tenantId]);
      const ids = (await db.query<{ id: string }>('SELECT id FROM node WHERE tenant_id = $1 ORDER BY name', [s.tenantId])).rows.map((r) => r.id);
      for (const [i, node] of h.nodes.entries()) {
        await db.query('INSERT INTO compute_node (node_id, os_ip, fqdn) VALUES ($1, $2, $3)', [ids[i], node.address, `bench-${i}.fabric.example`]);
      }
      // The first preflight creates the service's key pair (its nodes refuse it: nothing is pinned);
      // then every node trusts that key, as an admin would have set them up.
      const first = await post(service, '/controlnode/fabric-config/preflight', { underlay_cidr: '10.60.0.0/16' });
      if (first.status !== 200) throw new Error(`preflight: ${first.status} ${JSON.stringify(first.body).slice(0, 300)}`);
      const key = (await db.query<{ public_key: string }>('SELECT public_key FROM service_ssh_key WHERE id = 1')).rows[0]?.public_key;
      if (!key) throw new Error('the service has no SSH key after a preflight');
      for (const node of h.nodes) await fs.appendFile(path.join(node.dir, 'authorized_keys'), key + '\n');
    } finally {
      await db.end();
    }

    const walls: number[] = [];
    const inFlight = Math.min(DEFAULT_CONCURRENCY, count);
    // Round 0 is the warm-up: it also pins every host key (trust on first use), which later rounds verify.
    for (let round = 0; round <= rounds; round += 1) {
      const t0 = performance.now();
      const answer = await post(service, '/controlnode/fabric-config/preflight', { underlay_cidr: '10.60.0.0/16' });
      const wall = performance.now() - t0;
      if (answer.status !== 200) throw new Error(`preflight: ${answer.status} ${JSON.stringify(answer.body).slice(0, 300)}`);
      const body = answer.body as PreflightBody;
      const modes = new Map<string, number>();
      for (const n of body.nodes) modes.set(n.mode, (modes.get(n.mode) ?? 0) + 1);
      const notReuse = body.nodes.find((n) => n.mode !== 'reuse');
      console.log(`  ${round === 0 ? 'warm-up' : `round ${round}`}: ${(wall / 1000).toFixed(2)} s wall, ${(wall / count).toFixed(1)} ms of wall time per node (about ${((wall * inFlight) / count).toFixed(0)} ms each, ${inFlight} at a time); ${[...modes].map(([m, c]) => `${c} ${m}`).join(', ')}; underlay_mtu ${body.underlay_mtu}${notReuse ? `; e.g. ${notReuse.mode}: ${notReuse.reason}` : ''}`);
      if (round > 0) walls.push(wall / 1000);
    }
    const m = median(walls);
    console.log(`preflight: ${count} nodes at concurrency ${DEFAULT_CONCURRENCY}: median ${m.toFixed(2)} s wall (${((m * 1000) / count).toFixed(1)} ms per node) over ${rounds} rounds; target <= ${TARGET_PREFLIGHT_S} s for 100 nodes: ${count === 100 ? pass(m <= TARGET_PREFLIGHT_S) : 'n/a (not 100 nodes)'}`);
    return count !== 100 || m <= TARGET_PREFLIGHT_S;
  } finally {
    await h?.stop();
  }
}

// ---------------------------------------------------------------------------------------------
// apply

interface JobView {
  job_status: string;
  state: string;
  completed_nodes: number;
  failed_nodes: number;
  first_fail_node: string;
  first_fail_error: string;
  nodes: { node_ip: string; ok: boolean; steps: { step: string; started_at: string | null; finished_at: string | null }[] }[];
}

async function getJson(service: Service, route: string): Promise<{ status: number; body: unknown }> {
  const response = await fetch(`${service.url}${route}`, { headers: { authorization: `Bearer ${service.adminToken}` } });
  return { status: response.status, body: await response.json().catch(() => null) };
}

/** Polls GET latest until the job is no longer running; its view and the wall time from the POST. */
async function waitJob(service: Service, jobId: string, t0: number, limitMs: number): Promise<{ view: JobView; wall: number }> {
  for (;;) {
    const latest = await getJson(service, '/controlnode/fabric-config/latest');
    const view = latest.body as JobView & { job_id: string };
    if (latest.status === 200 && view.job_id === jobId && view.job_status !== 'running') return { view, wall: performance.now() - t0 };
    if (performance.now() - t0 > limitMs) throw new Error(`apply ${jobId} still running after ${limitMs / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** A node's own time: its first step's start to its last step's end. */
function nodeSeconds(view: JobView): number[] {
  return view.nodes.map((n) => {
    const starts = n.steps.map((st) => Date.parse(st.started_at ?? '')).filter(Number.isFinite);
    const ends = n.steps.map((st) => Date.parse(st.finished_at ?? '')).filter(Number.isFinite);
    return starts.length && ends.length ? (Math.max(...ends) - Math.min(...starts)) / 1000 : NaN;
  }).filter(Number.isFinite);
}

async function benchApply(service: Service, count: number, delayMs: number): Promise<boolean> {
  const started = performance.now();
  let h: SshNodes | undefined;
  try {
    h = await startSshNodes('bench-apply', Array.from({ length: count }, () => ({ delayMs })), { lan: true, frr: true, frrDaemonsFile: true });
    console.log(`apply: ${count} sshd nodes with real FRR on ${h.lan!.cidr} (+${delayMs} ms, ${h.nodes[0]?.delay?.method ?? 'none'}), set up in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    const s = await seed(service, count);
    const db = new pg.Client({ connectionString: service.databaseUrl });
    await db.connect();
    try {
      // The preflight part's nodes are gone (and its MTU finding with them): this part's own only.
      await db.query('DELETE FROM compute_node');
      await db.query('DELETE FROM fabric_preflight');
      await db.query(`UPDATE node SET provision_state = 'deployed' WHERE tenant_id = $1`, [s.tenantId]);
      const ids = (await db.query<{ id: string }>('SELECT id FROM node WHERE tenant_id = $1 ORDER BY name', [s.tenantId])).rows.map((r) => r.id);
      for (const [i, node] of h.nodes.entries()) {
        await db.query('INSERT INTO compute_node (node_id, os_ip, fqdn, is_gateway) VALUES ($1, $2, $3, $4)',
          [ids[i], node.lanAddress, i === 0 ? 'gw.bench.example' : `host${i}.bench.example`, i === 0]);
      }
    } finally {
      await db.end();
    }
    // The service's own key pair, created on first read, trusted by every node as an admin would.
    const key = await fetch(`${service.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${service.adminToken}` },
      body: JSON.stringify({ query: '{ serviceSshKey { publicKey } }' }),
    }).then((r) => r.json() as Promise<{ data?: { serviceSshKey?: { publicKey: string } } }>);
    const publicKey = key.data?.serviceSshKey?.publicKey;
    if (!publicKey) throw new Error(`apply: no service SSH key: ${JSON.stringify(key).slice(0, 300)}`);
    for (const node of h.nodes) await fs.appendFile(path.join(node.dir, 'authorized_keys'), publicKey + '\n');
    const saved = await post(service, '/controlnode/fabric-config', {
      as: 65010, external_route_reflector: false, ospf_enabled: false, management_cidr: h.lan!.cidr,
      router_id_cidr: '172.31.0.1/23', advertise_all_vni: true, expected_nodes: count, expected_vms: count * 10, vxlan_mtu: 1500,
    });
    if (saved.status !== 200) throw new Error(`apply: fabric config: ${saved.status} ${JSON.stringify(saved.body).slice(0, 300)}`);

    let ok = true;
    for (const label of ['apply from baseline', 're-apply (idempotent)']) {
      const t0 = performance.now();
      const answer = await post(service, '/controlnode/fabric-config/apply');
      const accepted = performance.now() - t0;
      if (answer.status !== 202) throw new Error(`apply: ${answer.status} ${JSON.stringify(answer.body).slice(0, 300)}`);
      const { view, wall } = await waitJob(service, (answer.body as { apply_job_id: string }).apply_job_id, t0, 30 * 60_000);
      const per = nodeSeconds(view).sort((a, b) => a - b);
      console.log(`  ${label}: ${view.job_status} (${view.completed_nodes} ok, ${view.failed_nodes} failed${view.first_fail_node ? `; first: ${view.first_fail_node}: ${view.first_fail_error}` : ''}); 202 in ${accepted.toFixed(0)} ms; ${(wall / 1000).toFixed(2)} s wall, ${(wall / count).toFixed(0)} ms of wall time per node; per node median ${median(per).toFixed(2)} s, p90 ${percentile(per, 90).toFixed(2)} s, max ${per.at(-1)?.toFixed(2)} s (${Math.min(DEFAULT_CONCURRENCY, count)} at a time)`);
      ok &&= view.job_status === 'completed';
    }
    return ok;
  } finally {
    await h?.stop();
  }
}

// ---------------------------------------------------------------------------------------------

async function run(argv: string[]): Promise<number> {
  const args = parseBenchArgs(argv, ['nodes', 'delay-ms', 'rounds', 'render-nodes', 'render-rounds', 'plan-requests', 'skip']);
  const nodes = intOption(args, 'nodes', 100, 1);
  if (nodes > 500) throw usageError('--nodes is at most 500 (a /22 of /31s)');
  const delayMs = intOption(args, 'delay-ms', 50, 1);
  const rounds = intOption(args, 'rounds', 3, 1);
  const renderNodes = intOption(args, 'render-nodes', 1000, 1);
  const renderRounds = intOption(args, 'render-rounds', 20, 1);
  const planRequests = intOption(args, 'plan-requests', 50, 1);
  const skip = new Set((option(args, 'skip') ?? '').split(',').filter(Boolean));
  for (const part of skip) if (!['plan', 'render', 'preflight', 'apply'].includes(part)) throw usageError(`--skip takes plan, render, preflight, apply; got "${part}"`);
  if ((!skip.has('preflight') || !skip.has('apply')) && process.getuid?.() !== 0) throw usageError('the preflight and apply parts need root (network namespaces); --skip preflight,apply to leave them out');
  const machine = machineInfo();
  console.log(`fabric benchmark: plan, render of ${renderNodes} host configs, preflight and apply of ${nodes} sshd nodes (+${delayMs} ms)`);
  console.log(`machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB, Node ${machine.node}, ${machine.os}`);
  console.log(`date: ${machine.date}`);

  const results: (boolean | null)[] = [];
  if (!skip.has('render')) results.push(benchRender(renderNodes, renderRounds));
  if (!skip.has('plan') || !skip.has('preflight') || !skip.has('apply')) {
    // A secret broker: the service keeps its own SSH key pair in it.
    const service = await startService({ env: { SECRET_KEY: randomBytes(32).toString('base64') } });
    try {
      if (!skip.has('plan')) results.push(await benchPlan(service, planRequests));
      if (!skip.has('preflight')) results.push(await benchPreflight(service, nodes, delayMs, rounds));
      if (!skip.has('apply')) results.push(await benchApply(service, nodes, delayMs));
    } finally {
      await service.stop();
    }
  }
  return results.every((r) => r !== false) ? 0 : 2;
}

export const fabricBench = {
  summary: 'fabric: plan latency, rendering 1,000 host configs + switch snippet, preflight and apply of 100 sshd nodes with +50 ms',
  options: ['--nodes 100 --delay-ms 50 --rounds 3 --render-nodes 1000 --render-rounds 20 --plan-requests 50 [--skip plan,render,preflight,apply]'],
  run,
};
