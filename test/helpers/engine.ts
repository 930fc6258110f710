import { randomBytes, createHash } from 'node:crypto';
import type { PrismaClient } from '../../src/generated/prisma/client';
import type { Sql } from '../../src/db/sql';
import { newId } from '../../src/ids';
import { updateNode } from '../../src/modules/metal/node-store';
import { resultStatus, type CommandResult } from '../../src/modules/sites/commands';
import type { ReportKind } from '../../src/modules/boot/entries';
import { wakeRun as queueAdvance } from '../../jobs/wake';
import { advanceRun, type AdvanceOutcome, type EngineDeps } from '../../jobs/engine';
import type { WorkflowKind } from '../../src/modules/metal/states';
import type { StepDef } from '../../jobs/engine-types';
import { complete } from '../../jobs/steps';
import { startTestApp, type TestApp } from './app';

/**
 * Test stand-ins for the two parties outside the engine, writing exactly the rows their modules
 * write (so the real site agent and the simulated machine can replace them): the site agent
 * claims a command, then sets its status and result and wakes the run (wakeRun, in the same
 * transaction); the ramdisk's callback stores a ramdisk_report for the run's live boot entry with
 * its boot token and wakes the run. Time passing is moved in the rows (expireTimers), never slept.
 */

export interface World {
  tenantId: string;
  siteId: string;
  poolId: string;
}

export async function makeWorld(prisma: PrismaClient, opts: { agent?: 'bcd' | 'none'; trustProvisioningNetwork?: boolean } = {}): Promise<World> {
  const tag = randomBytes(4).toString('hex');
  const tenant = await prisma.tenant.create({ data: { id: newId('Tenant'), name: `engine-${tag}` } });
  const site = await prisma.site.create({ data: { id: newId('Site'), tenantId: tenant.id, name: `engine-${tag}-site` } });
  const pool = await prisma.pool.create({
    data: {
      id: newId('Pool'), tenantId: tenant.id, siteId: site.id, name: `engine-${tag}-pool`,
      policy: { agent: opts.agent ?? 'bcd', trustProvisioningNetwork: opts.trustProvisioningNetwork ?? false },
    },
  });
  return { tenantId: tenant.id, siteId: site.id, poolId: pool.id };
}

export const DISKS = [
  { name: 'nvme0n1', serial: 'S5GXNF0R100001', sizeBytes: 3_840_000_000_000 },
  { name: 'nvme1n1', serial: 'S5GXNF0R100002', sizeBytes: 3_840_000_000_000 },
];

let macSeq = 0x100;
export const nextMac = () => {
  macSeq += 1;
  const hex = macSeq.toString(16).padStart(4, '0');
  return `52:54:00:${randomBytes(1).toString('hex')}:${hex.slice(0, 2)}:${hex.slice(2)}`;
};

export async function makeNode(prisma: PrismaClient, world: World, opts: {
  state: string; macs?: string[]; productUuid?: string | null; inventory?: Record<string, unknown> | null; profile?: { profileId: string; profileVersion: number };
}): Promise<{ id: string; macs: string[]; productUuid: string | null }> {
  const id = newId('MetalNode');
  const macs = opts.macs ?? [nextMac()];
  const productUuid = opts.productUuid === undefined ? crypto.randomUUID() : opts.productUuid;
  await prisma.node.create({
    data: {
      id, tenantId: world.tenantId, siteId: world.siteId, poolId: world.poolId, name: `n-${id.slice(-6)}`,
      provisionState: opts.state as never, bmcAddress: '127.20.0.1', bmcDriver: 'redfish', bmcCredentialsRef: 'secret://fixture',
      macs, productUuid, inventory: (opts.inventory ?? undefined) as never,
      profileId: opts.profile?.profileId, profileVersion: opts.profile?.profileVersion,
    },
  });
  return { id, macs, productUuid };
}

/** Starts a run as the verbs do (runs.md): through the node store, with the run's params. */
export async function startRun(sql: Sql, nodeId: string, kind: WorkflowKind, params: Record<string, unknown> = {}, data: Record<string, unknown> = {}): Promise<string> {
  const runId = newId('WorkflowRun');
  const row = await sql.transaction((tx) => updateNode(tx, { id: nodeId, version: null }, {
    data, run: { id: runId, kind, params }, events: [{ type: 'test.run-started', payload: { workflowId: runId } }],
  }, null));
  if (!row) throw new Error(`node ${nodeId} not found`);
  return runId;
}

export interface CommandSeen {
  id: string;
  kind: string;
  params: Record<string, unknown>;
  idempotencyKey: string;
  stepIdx: number | null;
}

export async function queuedCommands(sql: Sql, runId: string): Promise<CommandSeen[]> {
  const { rows } = await sql.query(
    `SELECT id, kind, params, idempotency_key, step_idx FROM command WHERE run_id = $1 AND status = 'queued' ORDER BY created_at, idempotency_key`, [runId],
  );
  return rows.map((r) => ({ id: r.id, kind: r.kind, params: r.params, idempotencyKey: r.idempotency_key, stepIdx: r.step_idx }));
}

/** The agent's side of one command: claim it, report its result, wake its run. */
export async function reportCommand(sql: Sql, commandId: string, result: CommandResult): Promise<void> {
  await sql.transaction(async (tx) => {
    const { rows } = await tx.query(
      `UPDATE command SET status = 'claimed', claimed_at = now(), updated_at = now() WHERE id = $1 AND status = 'queued' RETURNING run_id`, [commandId],
    );
    if (!rows[0]) throw new Error(`command ${commandId} is not queued`);
    await tx.query(`UPDATE command SET status = $2, result = $3::jsonb, updated_at = now() WHERE id = $1`, [commandId, resultStatus(result), JSON.stringify(result)]);
    if (rows[0].run_id) await queueAdvance(tx, rows[0].run_id as string);
  });
}

/** A machine as its BMC shows it, for the stand-in agent. */
export class FakeMachine {
  power: 'on' | 'off' = 'off';
  bootOverride: string | null = null;
  /** Every destructive command received, as a BMC counts them. */
  destructive: string[] = [];
  constructor(readonly inventory: Record<string, unknown> = {}) {}

  answer(kind: string, params: Record<string, unknown>): CommandResult {
    switch (kind) {
      case 'bmc.power-state': return { ok: true, value: this.power };
      case 'bmc.inventory': return { ok: true, value: this.inventory };
      case 'bmc.boot-device': this.bootOverride = String(params.device); return { ok: true };
      case 'bmc.power': {
        this.destructive.push(`power ${String(params.action)}`);
        this.power = params.action === 'off' || params.action === 'graceful-off' ? 'off' : 'on';
        return { ok: true, value: this.power };
      }
      default: return { ok: true };
    }
  }
}

export type AgentPlay = (cmd: CommandSeen) => CommandResult | 'hold';

/** Answers every queued command of the run with `agent`; resolves to how many it answered. */
export async function playAgent(sql: Sql, runId: string, agent: AgentPlay): Promise<number> {
  let n = 0;
  for (const cmd of await queuedCommands(sql, runId)) {
    const result = agent(cmd);
    if (result === 'hold') continue;
    await reportCommand(sql, cmd.id, result);
    n += 1;
  }
  return n;
}

/** The live boot entry of the run (what the machine booted), or null. */
export async function liveEntry(sql: Sql, runId: string): Promise<{ id: string; nodeId: string; purpose: string; params: Record<string, unknown> } | null> {
  const { rows } = await sql.query(`SELECT id, node_id, purpose, params FROM boot_entry WHERE run_id = $1 AND revoked_at IS NULL ORDER BY created_at LIMIT 1`, [runId]);
  return rows[0] ? { id: rows[0].id, nodeId: rows[0].node_id, purpose: rows[0].purpose, params: rows[0].params } : null;
}

/** The ramdisk's callback: a report stored with its boot entry and token, and the run woken. */
export async function ramdiskReport(sql: Sql, runId: string, kind: ReportKind, payload: Record<string, unknown>): Promise<void> {
  const entry = await liveEntry(sql, runId);
  if (!entry) throw new Error(`run ${runId} has no live boot entry: nothing booted could report`);
  await sql.transaction(async (tx) => {
    const tokenId = newId('BootToken');
    await tx.query(
      `INSERT INTO boot_token (id, boot_entry_id, node_id, hash, expires_at) VALUES ($1, $2, $3, $4, now() + interval '1 hour') ON CONFLICT DO NOTHING`,
      [tokenId, entry.id, entry.nodeId, createHash('sha256').update(randomBytes(16)).digest('hex')],
    );
    await tx.query(
      `INSERT INTO ramdisk_report (boot_entry_id, boot_token_id, node_id, run_id, kind, payload) VALUES ($1, $2, $3, $4, $5, $6::jsonb)`,
      [entry.id, tokenId, entry.nodeId, runId, kind, JSON.stringify(payload)],
    );
    await queueAdvance(tx, runId);
  });
}

/** Time passes for the run: its retry and continue delays, its wait and every step deadline are now. */
export async function expireTimers(sql: Sql, runId: string, what: { deadlines?: boolean } = {}): Promise<void> {
  // The run's due time was its wait's end (or earlier): it has come too.
  await sql.query(`UPDATE workflow_run SET wait_until = now() - interval '1 second', due_at = LEAST(due_at, now() - interval '1 second') WHERE id = $1 AND wait_until IS NOT NULL`, [runId]);
  await sql.query(
    `UPDATE workflow_step SET state = state
        || CASE WHEN state ? 'retryAt' THEN jsonb_build_object('retryAt', to_jsonb(now() - interval '1 second')) ELSE '{}'::jsonb END
        || CASE WHEN state ? 'notBefore' THEN jsonb_build_object('notBefore', to_jsonb(now() - interval '1 second')) ELSE '{}'::jsonb END
        || CASE WHEN $2::boolean AND state ? 'deadline' THEN jsonb_build_object('deadline', to_jsonb(now() - interval '1 second')) ELSE '{}'::jsonb END
      WHERE run_id = $1`,
    [runId, what.deadlines ?? false],
  );
}

/** Commands of the run expire: what the clock does to a command no agent claimed. */
export async function expireCommands(sql: Sql, runId: string): Promise<void> {
  await sql.query(`UPDATE command SET expires_at = now() - interval '1 second' WHERE run_id = $1 AND status IN ('queued', 'claimed')`, [runId]);
}

export interface RunView {
  status: string;
  stepIndex: number;
  attempt: number;
  resumes: number;
  lastErrorCode: string | null;
  lastErrorMessage: string | null;
  waitingFor: string | null;
  leaseUntil: Date | null;
}

export async function runOf(sql: Sql, runId: string): Promise<RunView> {
  const { rows } = await sql.query(`SELECT * FROM workflow_run WHERE id = $1`, [runId]);
  const r = rows[0]!;
  return {
    status: r.status, stepIndex: r.step_index, attempt: r.attempt, resumes: r.resumes, lastErrorCode: r.last_error_code,
    lastErrorMessage: r.last_error_message, waitingFor: r.waiting_for, leaseUntil: r.lease_until,
  };
}

export async function stepsOf(sql: Sql, runId: string): Promise<{ idx: number; name: string; title: string; status: string; attempts: number; message: string | null; errorCode: string | null; cleanup: boolean; idempotencyKey: string | null }[]> {
  const { rows } = await sql.query(`SELECT * FROM workflow_step WHERE run_id = $1 ORDER BY idx`, [runId]);
  return rows.map((r) => ({ idx: r.idx, name: r.name, title: r.title, status: r.status, attempts: r.attempts, message: r.message, errorCode: r.error_code, cleanup: r.cleanup, idempotencyKey: r.idempotency_key }));
}

export type RawNode = Record<string, unknown> & { inventory: Record<string, Record<string, unknown> | undefined> | null };
export async function nodeOf(sql: Sql, nodeId: string): Promise<RawNode> {
  const { rows } = await sql.query(`SELECT * FROM node WHERE id = $1`, [nodeId]);
  return rows[0]! as RawNode;
}

/** Commands of the run per idempotency key: each key must name exactly one row. */
export async function commandsOf(sql: Sql, runId: string): Promise<{ kind: string; key: string; status: string; params: Record<string, unknown> }[]> {
  const { rows } = await sql.query(`SELECT kind, idempotency_key, status, params FROM command WHERE run_id = $1 ORDER BY created_at, idempotency_key`, [runId]);
  return rows.map((r) => ({ kind: r.kind, key: r.idempotency_key, status: r.status, params: r.params }));
}

export interface RamdiskPlay {
  /** Reports to send for a boot of this purpose (null: the ramdisk never calls back). */
  (entry: { purpose: string; params: Record<string, unknown> }): { kind: ReportKind; payload: Record<string, unknown> }[] | null;
}

/**
 * Drives a run (and the runs it chains to) to its end as the world would: advance, answer every
 * command with the machine, let the ramdisk report once per boot entry, until the node's run is
 * over or nothing moves. Resolves to the last outcome and the run ids it went through.
 */
export async function drive(deps: EngineDeps, nodeId: string, machine: FakeMachine, ramdisk: RamdiskPlay, opts: { maxRounds?: number; agent?: AgentPlay } = {}): Promise<{ outcome: AdvanceOutcome; runs: string[] }> {
  const reported = new Set<string>();
  const runs: string[] = [];
  let outcome: AdvanceOutcome = { kind: 'idle', status: 'none' };
  for (let round = 0; round < (opts.maxRounds ?? 60); round += 1) {
    const { rows } = await deps.sql.query(`SELECT workflow_id FROM node WHERE id = $1`, [nodeId]);
    const runId = rows[0]!.workflow_id as string;
    if (!runs.includes(runId)) runs.push(runId);
    outcome = await advanceRun(deps, runId);
    if (outcome.kind === 'finished' || outcome.kind === 'idle') {
      const next = (await deps.sql.query(`SELECT workflow_id FROM node WHERE id = $1`, [nodeId])).rows[0]!.workflow_id as string;
      const { rows: active } = await deps.sql.query(`SELECT status FROM workflow_run WHERE id = $1`, [next]);
      if (next !== runId && ['queued', 'running', 'waiting', 'aborting'].includes(active[0]?.status)) continue;
      return { outcome, runs };
    }
    let moved = await playAgent(deps.sql, runId, opts.agent ?? ((c) => machine.answer(c.kind, c.params)));
    const entry = await liveEntry(deps.sql, runId);
    if (entry && machine.power === 'on' && !reported.has(entry.id)) {
      reported.add(entry.id);
      for (const r of ramdisk(entry) ?? []) {
        await ramdiskReport(deps.sql, runId, r.kind, r.payload);
        moved += 1;
      }
    }
    if (moved === 0) return { outcome, runs };
  }
  return { outcome, runs };
}

/** The simulated ramdisk's default answers per boot purpose: everything passes. */
export function happyRamdisk(node: { productUuid: string | null; macs: string[] }, disks = DISKS, over: Partial<Record<string, { kind: ReportKind; payload: Record<string, unknown> }[] | null>> = {}): RamdiskPlay {
  return (entry) => {
    if (entry.purpose in over) return over[entry.purpose] ?? null;
    const wipe = (mode: string) => ({ kind: 'wipe' as const, payload: { disks: disks.map((d) => ({ serial: d.serial, name: d.name, mode, attested: true, method: mode === 'quick' ? 'blkdiscard' : mode })) } });
    switch (entry.purpose) {
      case 'inspect':
        return [{ kind: 'inventory', payload: { uuid: node.productUuid, nics: node.macs.map((mac, i) => ({ mac, name: `eth${i}` })), cpus: [{ model: 'EPYC 9654', cores: 96, threads: 192 }], memoryMiB: 1_572_864, disks } }];
      case 'commission':
        return [{ kind: 'dcgm', payload: { passed: true, level: 3, tests: [{ name: 'memory', result: 'pass' }] } }, wipe('quick')];
      case 'release':
        return [wipe(String(entry.params.wipe ?? 'quick'))];
      case 'retire':
        return [wipe('crypto-erase')];
      case 'rescue':
        return [{ kind: 'heartbeat', payload: {} }];
      case 'deploy':
        return ((entry.params.steps as { name: string }[]) ?? []).map((s) => ({ kind: 'step' as const, payload: { name: s.name, status: 'succeeded' } }));
      default:
        return null;
    }
  };
}

/**
 * For a test file of the engine: a test app with no workers (each test fetches and advances its
 * runs itself, so every interleaving is the test's) and a tenant, site and pool, started before
 * the file's tests and stopped after them. Read `t` and `world` inside the tests.
 */
export function engineTestWorld(): { readonly t: TestApp; readonly world: World } {
  const holder = {} as { t: TestApp; world: World };
  beforeAll(async () => {
    holder.t = await startTestApp({ role: 'api' });
    holder.world = await makeWorld(holder.t.app.services.prisma);
  });
  afterAll(async () => { await holder.t?.stop(); });
  return holder;
}

/** A step that reads the power state through the site agent (one command) and completes with it. */
export const powerStateStep: StepDef = {
  name: 'read-power',
  title: 'Reading the power state',
  async run(ctx) {
    const state = await ctx.command('bmc.power-state', {});
    return complete(`power is ${String(state)}`);
  },
};
