import type { BmcErrorCode, BootDevice, PowerAction } from '../../../clients/bmc/driver';
import { newId } from '../../ids';

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
  | { ok: true; value?: unknown; notes?: string[] }
  | { ok: false; code: BmcErrorCode | 'AGENT_ERROR' | 'AGENT_LOST' | 'EXPIRED'; message: string; retryable?: boolean };

/** command.status: queued, claimed, succeeded, failed, expired. */
export type CommandStatus = 'queued' | 'claimed' | 'succeeded' | 'failed' | 'expired';

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
  /** The run step that queues it; its result wakes that run (metal.advance). */
  runId: string;
  stepIdx: number;
  /** Unique per intended action: the same key returns the command already queued, never a second. */
  idempotencyKey: string;
  /** The command expires (EXPIRED) when no agent claims it within this time. */
  ttlMs: number;
}

function rowOf(r: Record<string, unknown>): CommandRow {
  return { id: r.id as string, kind: r.kind as string, status: r.status as CommandStatus, result: (r.result ?? null) as CommandResult | null, expiresAt: r.expires_at as Date };
}

/**
 * Queues a command for the agent of the node's site, in the caller's transaction, or returns the
 * one already queued under the same idempotency key (whatever its status). The node's tenant and
 * site are read from the node row.
 */
export async function queueCommand<K extends CommandKind>(db: Runner, c: QueueCommand<K>): Promise<CommandRow> {
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
    [newId('Command'), c.nodeId, c.kind, JSON.stringify(c.params), c.idempotencyKey, Math.round(c.ttlMs), c.runId, c.stepIdx],
  );
  if (!rows[0]) throw new Error(`node ${c.nodeId} does not exist: command ${c.kind} not queued`);
  return rowOf(rows[0]);
}

/** The command queued under `idempotencyKey`, or null. */
export async function commandByKey(db: Runner, idempotencyKey: string): Promise<CommandRow | null> {
  const { rows } = await db.query('SELECT id, kind, status, result, expires_at FROM command WHERE idempotency_key = $1', [idempotencyKey]);
  return rows[0] ? rowOf(rows[0]) : null;
}
