/**
 * The service side of the interop suite: the real service in this process (startTestApp: HTTP on a
 * free loopback port, the engine, the built-in site agent with the real BMC drivers, a database of
 * its own cloned from the jest global setup's PostgreSQL), a tenant, site and pool
 * (test/helpers/fixtures.ts), and what an operator does through the REST API with the admin token.
 */
import type { DriverRegistry } from '../../../clients/bmc/registry';
import { newId } from '../../../src/ids';
import { queueCommand, type CommandKind, type CommandParams } from '../../../src/modules/sites/commands';
import { startTestApp, type TestApp } from '../../helpers/app';
import { gql, rest } from '../../helpers/client';
import { makeTenantTree } from '../../helpers/fixtures';

export interface ControlPlane {
  t: TestApp;
  tenantId: string;
  siteId: string;
  poolId: string;
  sql: TestApp['app']['services']['sql'];
}

/**
 * The service with the built-in agent polling every 200 ms. `drivers`: the agent's registry; unset,
 * the service's own defaultDriverRegistry() (the real redfish driver and its flavours).
 */
export async function startControlPlane(name: string, drivers?: DriverRegistry): Promise<ControlPlane> {
  const t = await startTestApp({ role: 'all', agentPollMs: 200, builtinAgent: true }, drivers ? { drivers } : {});
  const tree = await makeTenantTree(t.app.database.prisma, name, { pools: 1, nodesPerPool: 0, agent: 'bcd' });
  return { t, tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id, sql: t.app.services.sql };
}

export interface EnrollBmc {
  address: string;
  username: string;
  password: string;
  driver?: string;
  driverOptions?: Record<string, unknown>;
}

/** A further tenant, site and pool (the fixtures'): machines that share MACs or a UUID each get a site of their own. */
export async function addPool(cp: ControlPlane, name: string): Promise<string> {
  return (await makeTenantTree(cp.t.app.database.prisma, name, { pools: 1, nodesPerPool: 0, agent: 'bcd' })).pools[0]!.id;
}

/** POST /api/compute/metal/enroll with no MACs (unless given): the node's id. */
export async function enroll(cp: ControlPlane, name: string, bmc: EnrollBmc, extra: { macs?: string[]; poolId?: string } = {}): Promise<string> {
  const { poolId, ...rest_ } = extra;
  const r = await rest(cp.t.url, cp.t.adminToken, 'POST', '/api/compute/metal/enroll', {
    poolId: poolId ?? cp.poolId, name, ...rest_,
    bmc: { address: bmc.address, driver: bmc.driver ?? 'redfish', credentials: { username: bmc.username, password: bmc.password }, ...(bmc.driverOptions ? { driverOptions: bmc.driverOptions } : {}) },
  });
  if (r.status !== 200) throw new Error(`enroll ${name}: ${r.status} ${JSON.stringify(r.body).slice(0, 500)}`);
  return r.body.node.id as string;
}

export async function verb(cp: ControlPlane, name: string, body: Record<string, unknown>): Promise<{ status: number; body: any }> {
  return rest(cp.t.url, cp.t.adminToken, 'POST', `/api/compute/metal/${name}`, body);
}

export interface NodeRow {
  state: string;
  macs: string[];
  productUuid: string | null;
  failedFrom: string | null;
  lastError: string | null;
  inventory: any;
}

export async function nodeRow(cp: ControlPlane, nodeId: string): Promise<NodeRow> {
  const r = (await cp.sql.query('SELECT provision_state, macs, product_uuid, failed_from, last_error_code, last_error_message, inventory FROM node WHERE id = $1', [nodeId])).rows[0]!;
  return {
    state: r.provision_state as string,
    macs: (r.macs ?? []) as string[],
    productUuid: (r.product_uuid ?? null) as string | null,
    failedFrom: (r.failed_from ?? null) as string | null,
    lastError: r.last_error_code ? `${r.last_error_code as string}: ${r.last_error_message as string}` : null,
    inventory: r.inventory,
  };
}

export interface RunRow { id: string; kind: string; status: string; waitingFor: string | null; lastError: string | null }

export async function runsOf(cp: ControlPlane, nodeId: string): Promise<RunRow[]> {
  const { rows } = await cp.sql.query('SELECT id, kind, status, waiting_for, last_error_code, last_error_message FROM workflow_run WHERE node_id = $1 ORDER BY created_at, id', [nodeId]);
  return rows.map((r) => ({ id: r.id as string, kind: r.kind as string, status: r.status as string, waitingFor: (r.waiting_for ?? null) as string | null, lastError: r.last_error_code ? `${r.last_error_code as string}: ${r.last_error_message as string}` : null }));
}

export const ACTIVE_RUN = ['queued', 'running', 'waiting', 'aborting'];

/** GET /api/compute/metal/nodes/{id}/timeline: the runs, newest first, each with its steps. */
export async function timeline(cp: ControlPlane, nodeId: string): Promise<{ id: string; kind: string; status: string; steps: { idx: number; name: string; status: string; message: string | null; errorCode: string | null }[] }[]> {
  const r = await rest(cp.t.url, cp.t.adminToken, 'GET', `/api/compute/metal/nodes/${nodeId}/timeline?last=50`);
  if (r.status !== 200) throw new Error(`timeline: ${r.status}`);
  return r.body.runs;
}

/** One line per run (kind, status, the step it stands at or failed on): what a failed wait prints. */
export async function describeNode(cp: ControlPlane, nodeId: string): Promise<string> {
  const node = await nodeRow(cp, nodeId);
  const runs = await timeline(cp, nodeId);
  const lines = runs.reverse().map((run) => {
    // The step that failed, else the one it stands at (the last that started).
    const last = run.steps.find((s) => s.status === 'failed') ?? [...run.steps].reverse().find((s) => s.status !== 'pending' && s.status !== 'skipped');
    return `  ${run.kind} ${run.status}${last ? `: ${last.name} ${last.status}${last.errorCode ? ` ${last.errorCode}` : ''}${last.message ? ` "${last.message.slice(0, 300)}"` : ''}` : ''}`;
  });
  return `${nodeId} ${node.state}${node.lastError ? ` (${node.lastError})` : ''}\n${lines.join('\n')}`;
}

/** Polls `read` until `done`, at most `limitMs`; then fails with `describe()`'s text. */
export async function until<T>(what: string, read: () => Promise<T>, done: (v: T) => boolean, limitMs: number, describe?: () => Promise<string>): Promise<T> {
  const started = Date.now();
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() - started > limitMs) throw new Error(`no ${what} within ${limitMs / 1000} s${describe ? `:\n${await describe()}` : ''}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Until every node is out of `moving` and has no active run (its cleanups done); their states. A failure names each node's runs and `more()`. */
export async function settle(cp: ControlPlane, nodeIds: string[], moving: string[], limitMs: number, more?: () => string): Promise<string[]> {
  const read = () => Promise.all(nodeIds.map(async (id) => {
    const node = await nodeRow(cp, id);
    const active = (await runsOf(cp, id)).some((r) => ACTIVE_RUN.includes(r.status));
    return { state: node.state, busy: moving.includes(node.state) || active };
  }));
  const done = await until(`settling of ${moving.join('/')}`, read, (v) => v.every((n) => !n.busy), limitMs,
    async () => [...await Promise.all(nodeIds.map((id) => describeNode(cp, id))), ...(more ? [more()] : [])].join('\n'));
  return done.map((n) => n.state);
}

/** A deploy profile of three steps (the installer reports each): its id and version. */
export async function deployProfile(cp: ControlPlane): Promise<{ profileId: string; profileVersion: number }> {
  const r = await gql<{ saveDeployProfileVersion: { id: string; versions: { version: number }[] } }>(cp.t.url, cp.t.adminToken,
    'mutation ($i: DeployProfileVersionInput!) { saveDeployProfileVersion(input: $i) { id versions { version } } }',
    { i: { name: 'interop', tenantId: cp.tenantId, role: 'web', steps: [
      { kind: 'partition', name: 'partition-disks', params: { layout: 'single-root' } },
      { kind: 'image', name: 'write-image', params: { url: 'http://127.0.0.1:9/debian.qcow2' } },
      { kind: 'configure', name: 'configure-host' },
    ] } });
  if (r.errors?.length || !r.data) throw new Error(`deploy profile: ${JSON.stringify(r.errors)}`);
  return { profileId: r.data.saveDeployProfileVersion.id, profileVersion: Math.max(...r.data.saveDeployProfileVersion.versions.map((v) => v.version)) };
}

export interface CommandDone { id: string; status: string; result: any }

/** A power verb through the API, then its command's end (the built-in agent runs it). */
export async function powerVerb(cp: ControlPlane, nodeId: string, action: string, limitMs = 120000): Promise<CommandDone> {
  const r = await verb(cp, 'power', { nodeId, action });
  if (r.status !== 200) throw new Error(`power ${action}: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
  return commandEnd(cp, r.body.commandId as string, limitMs);
}

export async function commandEnd(cp: ControlPlane, commandId: string, limitMs = 120000): Promise<CommandDone> {
  const row = await until(`end of command ${commandId}`,
    async () => (await cp.sql.query('SELECT id, status, result FROM command WHERE id = $1', [commandId])).rows[0]!,
    (c) => c.status !== 'queued' && c.status !== 'claimed', limitMs);
  return { id: row.id as string, status: row.status as string, result: row.result };
}

/**
 * A command no verb queues on its own (virtual media: the install workflow's), queued for the
 * node's site agent as a workflow step would, under a run of its own: a waiting run the node does
 * not point at, which the engine ends as superseded once the result wakes it (as in
 * test/site-agent-builtin.test.ts).
 */
export async function runCommand<K extends CommandKind>(cp: ControlPlane, nodeId: string, kind: K, params: CommandParams[K], limitMs = 120000): Promise<CommandDone> {
  const runId = newId('WorkflowRun');
  await cp.sql.query(`INSERT INTO workflow_run (id, node_id, kind, status, wait_until, waiting_for, due_at) VALUES ($1, $2, 'metal-inspect', 'waiting', now() + interval '1 hour', 'the command', now() + interval '1 hour')`, [runId, nodeId]);
  const cmd = await queueCommand(cp.sql, { kind, params, nodeId, runId, stepIdx: 0, idempotencyKey: `interop-${runId}`, ttlMs: limitMs });
  return commandEnd(cp, cmd.id, limitMs);
}
