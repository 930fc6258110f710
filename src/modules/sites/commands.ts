import type { BmcErrorCode, BootDevice, PowerAction } from '../../../clients/bmc/driver';
import { newId } from '../../ids';
import { invalidInput } from '../../errors';

/**
 * The commands a site agent runs for metal, with their parameters and the result it reports.
 * Every BMC call goes through one of these: the control plane never talks to a BMC itself. A
 * workflow step queues its commands with an idempotency key derived from its own (recorded when
 * the step started), so running the step again finds the command it queued instead of sending a
 * second one.
 */
export interface CommandParams {
  'bmc.power': { action: PowerAction };
  'bmc.power-state': Record<string, never>;
  'bmc.boot-device': { device: BootDevice; persistent: boolean; uefi?: boolean };
  'bmc.media-insert': { imageUrl: string };
  'bmc.media-eject': Record<string, never>;
  /** Out-of-band inventory (OutOfBandInventory); also what verifies the BMC's credentials. */
  'bmc.inventory': Record<string, never>;
}
export type CommandKind = keyof CommandParams;
export const COMMAND_KINDS = ['bmc.power', 'bmc.power-state', 'bmc.boot-device', 'bmc.media-insert', 'bmc.media-eject', 'bmc.inventory'] as const satisfies readonly CommandKind[];

/** Whether running the command changes the machine in a way that must never happen twice. */
export const DESTRUCTIVE_COMMANDS: Readonly<Record<CommandKind, boolean>> = {
  'bmc.power': true,
  'bmc.power-state': false,
  'bmc.boot-device': false,
  'bmc.media-insert': false,
  'bmc.media-eject': false,
  'bmc.inventory': false,
};

/**
 * What an agent reports (command.result). `value` is the driver's: PowerState for the power
 * commands, OutOfBandInventory for bmc.inventory; `notes` go to the step's timeline message.
 * AGENT_LOST: the agent's claim lapsed without a result, so whether the action ran is unknown.
 */
export type CommandResult =
  /**
   * unverified: the action was sent and the BMC accepted it, but nothing it shows proves the effect
   * (issue 20: a restart on a BMC with no LastResetTime and no power transition seen): the command
   * ends `unverified`, never `succeeded`, and a step that ran it says so.
   */
  | { ok: true; value?: unknown; notes?: string[]; unverified?: string }
  | { ok: false; code: BmcErrorCode | 'AGENT_ERROR' | 'AGENT_LOST' | 'EXPIRED'; message: string; retryable?: boolean };

/** command.status: queued, claimed, succeeded, unverified (sent and accepted, effect not provable), failed, expired. */
export type CommandStatus = 'queued' | 'claimed' | 'succeeded' | 'unverified' | 'failed' | 'expired';

/** The status a reported result ends its command in. */
export const resultStatus = (result: CommandResult): CommandStatus => (result.ok ? (result.unverified ? 'unverified' : 'succeeded') : 'failed');

export interface CommandRow {
  id: string;
  kind: string;
  status: CommandStatus;
  result: CommandResult | null;
  expiresAt: Date;
}

/** Something that runs SQL in an open transaction (the node store's Runner). */
interface Runner {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
}

export interface QueueCommand<K extends CommandKind = CommandKind> {
  kind: K;
  params: CommandParams[K];
  nodeId: string;
  /** The run step that queues it; its result wakes that run (due_at). */
  runId: string;
  stepIdx: number;
  /** Unique per intended action: the same key returns the command already queued, never a second. */
  idempotencyKey: string;
  /** The command expires (EXPIRED) when no agent claims it within this time. */
  ttlMs: number;
}

function rowOf(row: Record<string, unknown>): CommandRow {
  return { id: row.id as string, kind: row.kind as string, status: row.status as CommandStatus, result: (row.result ?? null) as CommandResult | null, expiresAt: row.expires_at as Date };
}

/**
 * Queues a command for the agent of the node's site, in the caller's transaction, or returns the
 * one already queued under the same idempotency key (whatever its status). The node's tenant and
 * site are read from the node row.
 */
export async function queueCommand<K extends CommandKind>(db: Runner, command: QueueCommand<K>): Promise<CommandRow> {
  const { rows } = await db.query(
    `WITH ins AS (
       INSERT INTO command (id, tenant_id, site_id, node_id, kind, params, status, idempotency_key, expires_at, run_id, step_idx)
       SELECT $1, n.tenant_id, n.site_id, n.id, $3, $4::jsonb, 'queued', $5, now() + $6::int * interval '1 millisecond', $7, $8
         FROM node n WHERE n.id = $2
       ON CONFLICT (idempotency_key) DO NOTHING
       RETURNING id, kind, status, result, expires_at
     )
     SELECT * FROM ins
     UNION ALL
     SELECT id, kind, status, result, expires_at FROM command WHERE idempotency_key = $5 AND NOT EXISTS (SELECT 1 FROM ins)`,
    [newId('Command'), command.nodeId, command.kind, JSON.stringify(command.params), command.idempotencyKey, Math.round(command.ttlMs), command.runId, command.stepIdx],
  );
  if (!rows[0]) throw new Error(`node ${command.nodeId} does not exist: command ${command.kind} not queued`);
  return rowOf(rows[0]);
}

/** An EXPIRED failure a command is closed with, never retried. */
const expiredResult = (message: string): string => JSON.stringify({ ok: false, code: 'EXPIRED', message, retryable: false });

/** Expires one command still queued (no agent claimed it in time); false when it was claimed or settled first. */
export async function expireQueuedCommand(db: Runner, commandId: string, message: string): Promise<boolean> {
  const { rows } = await db.query(
    `UPDATE command SET status = 'expired', result = $2::jsonb, updated_at = now() WHERE id = $1 AND status = 'queued' RETURNING id`,
    [commandId, expiredResult(message)],
  );
  return rows.length === 1;
}

/** Expires every command still queued for a node, but those of run `exceptRunId` (a retire withdraws the rest); how many. */
export async function withdrawQueuedCommands(db: Runner, nodeId: string, exceptRunId: string | null, message: string): Promise<number> {
  const { rows } = await db.query(
    `UPDATE command SET status = 'expired', result = $2::jsonb, updated_at = now()
      WHERE node_id = $1 AND status = 'queued' AND (run_id IS DISTINCT FROM $3) RETURNING id`,
    [nodeId, expiredResult(message), exceptRunId],
  );
  return rows.length;
}

/** Whether one of the run's boot-device commands set PXE and the BMC reported holding it Continuous. */
export async function heldPxeContinuous(db: Runner, runId: string): Promise<boolean> {
  const { rows } = await db.query(
    `SELECT 1 FROM command WHERE run_id = $1 AND kind = 'bmc.boot-device' AND params->>'device' = 'pxe' AND result->'value'->>'enabled' = 'Continuous' LIMIT 1`,
    [runId],
  );
  return rows.length > 0;
}

/** The command queued under `idempotencyKey`, or null. */
export async function commandByKey(db: Runner, idempotencyKey: string): Promise<CommandRow | null> {
  const { rows } = await db.query('SELECT id, kind, status, result, expires_at FROM command WHERE idempotency_key = $1', [idempotencyKey]);
  return rows[0] ? rowOf(rows[0]) : null;
}

/** The codes an agent may report; EXPIRED is the sweep's alone (no agent ever held the command). */
export const AGENT_RESULT_CODES = [
  'BMC_UNREACHABLE', 'BMC_TIMEOUT', 'BMC_AUTH_FAILED', 'BMC_TLS', 'BMC_UNSUPPORTED', 'BMC_NOT_APPLIED', 'BMC_BUSY', 'BMC_ERROR',
  'AGENT_ERROR', 'AGENT_LOST',
] as const satisfies readonly Exclude<Extract<CommandResult, { ok: false }>['code'], 'EXPIRED'>[];

const POWER_STATES = ['on', 'off', 'powering-on', 'powering-off', 'unknown'] as const;
/** A result is a row in command and a timeline message: bounded, so one agent cannot bloat either. */
export const RESULT_LIMITS = { valueBytes: 64 * 1024, notes: 32, noteChars: 1000, messageChars: 2000, depth: 8 } as const;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Rejects NUL (PostgreSQL's jsonb refuses \u0000) and nesting deeper than a driver's value needs. */
function checkJson(field: string, value: unknown, depth = 0): void {
  if (depth > RESULT_LIMITS.depth) throw invalidInput(field, `nests deeper than ${RESULT_LIMITS.depth} levels`);
  if (typeof value === 'string') {
    if (value.includes('\u0000')) throw invalidInput(field, 'contains a NUL character');
  } else if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw invalidInput(field, 'must be a finite number');
  } else if (Array.isArray(value)) {
    value.forEach((v, i) => checkJson(`${field}[${i}]`, v, depth + 1));
  } else if (isObject(value)) {
    for (const [k, v] of Object.entries(value)) {
      if (k.includes('\u0000')) throw invalidInput(field, 'has a key with a NUL character');
      checkJson(`${field}.${k}`, v, depth + 1);
    }
  } else if (value !== null && typeof value !== 'boolean') {
    throw invalidInput(field, 'must be JSON');
  }
}

function checkText(field: string, value: unknown, max: number): string {
  if (typeof value !== 'string') throw invalidInput(field, 'must be a string');
  if (value.includes('\u0000')) throw invalidInput(field, 'contains a NUL character');
  if (value.length > max) throw invalidInput(field, `is longer than ${max} characters`);
  return value;
}

/** What `value` must be for each kind: the driver's return, as the engine reads it. */
function checkValue(kind: string, value: unknown): void {
  const field = 'result.value';
  if (kind === 'bmc.power' || kind === 'bmc.power-state') {
    if (!(POWER_STATES as readonly unknown[]).includes(value)) throw invalidInput(field, `must be the power state read back: one of ${POWER_STATES.join(', ')}`);
  } else if (kind === 'bmc.inventory') {
    if (!isObject(value)) throw invalidInput(field, 'must be the out-of-band inventory object');
    if (value.uuid !== null && typeof value.uuid !== 'string') throw invalidInput('result.value.uuid', 'must be a string or null');
    if (!Array.isArray(value.macs) || !value.macs.every((m) => typeof m === 'string')) throw invalidInput('result.value.macs', 'must be a list of strings');
  } else if (kind === 'bmc.boot-device' && value !== undefined && value !== null) {
    if (!isObject(value) || Object.keys(value).some((k) => k !== 'enabled') || (value.enabled !== 'Once' && value.enabled !== 'Continuous')) {
      throw invalidInput(field, 'must be absent or { enabled: "Once" | "Continuous" } (how the BMC holds the override)');
    }
  } else if (value !== undefined && value !== null) {
    throw invalidInput(field, `must be absent for ${kind}`);
  }
}

/**
 * An agent's report, checked field by field before anything is written (hostile input: wrong
 * types, NUL, huge values get INVALID_INPUT naming the field). Unknown fields are refused too, so
 * a typo does not pass as a result with the field silently dropped.
 */
export function checkCommandResult(kind: string, raw: unknown): CommandResult {
  if (!isObject(raw)) throw invalidInput('result', 'must be an object');
  if (typeof raw.ok !== 'boolean') throw invalidInput('result.ok', 'must be true or false');
  const allowed = raw.ok ? ['ok', 'value', 'notes', 'unverified'] : ['ok', 'code', 'message', 'retryable'];
  for (const key of Object.keys(raw)) {
    if (!allowed.includes(key)) throw invalidInput(`result.${key}`, `is not a field of a ${raw.ok ? 'successful' : 'failed'} result (${allowed.join(', ')})`);
  }
  if (raw.ok) {
    let notes: string[] | undefined;
    if (raw.notes !== undefined && raw.notes !== null) {
      if (!Array.isArray(raw.notes)) throw invalidInput('result.notes', 'must be a list of strings');
      if (raw.notes.length > RESULT_LIMITS.notes) throw invalidInput('result.notes', `has more than ${RESULT_LIMITS.notes} entries`);
      notes = raw.notes.map((n, i) => checkText(`result.notes[${i}]`, n, RESULT_LIMITS.noteChars));
    }
    const value = raw.value ?? undefined;
    if (value !== undefined) {
      const size = Buffer.byteLength(JSON.stringify(value) ?? '', 'utf8');
      if (size > RESULT_LIMITS.valueBytes) throw invalidInput('result.value', `is ${size} bytes, more than ${RESULT_LIMITS.valueBytes}`);
      checkJson('result.value', value);
    }
    checkValue(kind, value);
    let unverified: string | undefined;
    if (raw.unverified !== undefined && raw.unverified !== null) {
      unverified = checkText('result.unverified', raw.unverified, RESULT_LIMITS.noteChars);
      if (!unverified.trim()) throw invalidInput('result.unverified', 'must say why the effect cannot be proven');
    }
    return { ok: true, ...(value !== undefined ? { value } : {}), ...(notes ? { notes } : {}), ...(unverified ? { unverified } : {}) };
  }
  if (!(AGENT_RESULT_CODES as readonly unknown[]).includes(raw.code)) throw invalidInput('result.code', `must be one of ${AGENT_RESULT_CODES.join(', ')}`);
  const message = checkText('result.message', raw.message, RESULT_LIMITS.messageChars);
  if (!message.trim()) throw invalidInput('result.message', 'must say what failed');
  if (raw.retryable !== undefined && raw.retryable !== null && typeof raw.retryable !== 'boolean') throw invalidInput('result.retryable', 'must be true or false');
  return { ok: false, code: raw.code as (typeof AGENT_RESULT_CODES)[number], message, ...(typeof raw.retryable === 'boolean' ? { retryable: raw.retryable } : {}) };
}
