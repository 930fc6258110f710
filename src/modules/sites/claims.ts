import { afterWake, wakeRunsSql, type RunWaker } from '../../../jobs/wake';
import { COMMAND_KINDS, DESTRUCTIVE_COMMANDS, resultStatus, type CommandKind, type CommandResult } from './commands';
import type { DomainCounters } from '../../ops/metrics';
import type { FirstStatement } from '../../db/sql';

/**
 * The rows of the agent protocol, in SQL shared by the remote agents' API (agent.ts) and the
 * built-in agent (src/agent/builtin.ts): one claim, one lease, one sweep, one way to record a
 * result. No Context here: the built-in agent has no request.
 */

export interface Runner {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
}

const DESTRUCTIVE_KINDS: string[] = COMMAND_KINDS.filter((k) => DESTRUCTIVE_COMMANDS[k]);

/** Which commands an agent may claim: its own site's, or (the built-in agent) every site no remote agent serves. */
export type ClaimScope = { siteId: string } | { unservedWithinMs: number };

export interface ClaimedRow {
  id: string;
  kind: CommandKind;
  params: Record<string, unknown>;
  nodeId: string | null;
  siteId: string;
  leaseExpiresAt: Date;
}

function scopeSql(scope: ClaimScope, at: number): { where: string; value: unknown } {
  if ('siteId' in scope) return { where: `site_id = $${at}`, value: scope.siteId };
  return {
    where: `site_id NOT IN (SELECT site_id FROM site_agent WHERE last_heartbeat_at >= now() - $${at}::int * interval '1 millisecond')`,
    value: scope.unservedWithinMs,
  };
}

/**
 * Claims up to `limit` queued, unexpired commands, oldest first, for `agentId`, each held until
 * now + leaseMs. SKIP LOCKED: two agents (or two built-in agents of two workers) never claim the
 * same command.
 */
/** The claim's UPDATE (parameters: $1 agent, $2 scope, $3 lease ms, $4 limit), returning the command rows' columns. */
function claimUpdate(scopeWhere: string): string {
  return `UPDATE command SET status = 'claimed', claimed_by = $1, claimed_at = now(),
            lease_expires_at = now() + $3::int * interval '1 millisecond', updated_at = now()
      WHERE id IN (SELECT id FROM command WHERE ${scopeWhere} AND status = 'queued' AND expires_at > now()
                   ORDER BY created_at LIMIT $4 FOR UPDATE SKIP LOCKED)
      RETURNING id, kind, params, status, site_id, claimed_by, lease_expires_at, node_id, created_at`;
}

export async function claimQueued(db: Runner, agentId: string, scope: ClaimScope, limit: number, leaseMs: number): Promise<ClaimedRow[]> {
  const s = scopeSql(scope, 2);
  const { rows } = await db.query(claimUpdate(s.where), [agentId, s.value, Math.round(leaseMs), limit]);
  return rows.map((r) => ({
    id: r.id as string, kind: r.kind as CommandKind, params: (r.params ?? {}) as Record<string, unknown>, nodeId: (r.node_id ?? null) as string | null,
    siteId: r.site_id as string, leaseExpiresAt: r.lease_expires_at as Date,
  }));
}

/**
 * Extends the lease of every command the agent still holds (its heartbeat), but those in `except`
 * (claims it lets go: their leases run out and the sweep settles them). A lapsed lease is not
 * revived: the sweep owns it.
 */
export async function renewLeases(db: Runner, agentId: string, leaseMs: number, except: readonly string[] = []): Promise<number> {
  const { rows } = await db.query(
    `WITH renewed AS (
       UPDATE command SET lease_expires_at = now() + $2::int * interval '1 millisecond', updated_at = now()
        WHERE claimed_by = $1 AND status = 'claimed' AND lease_expires_at > now() AND NOT (id = ANY($3::text[])) RETURNING 1)
     SELECT count(*)::int AS n FROM renewed`,
    [agentId, Math.round(leaseMs), except],
  );
  return rows[0]!.n as number;
}

/**
 * Ends now the lease of one command the agent holds (it cannot store the command's result): the
 * next sweep settles it as any lapsed claim. Returns whether it held it.
 */
export async function lapseClaim(db: Runner, commandId: string, agentId: string): Promise<boolean> {
  const { rows } = await db.query(
    `WITH lapsed AS (UPDATE command SET lease_expires_at = now(), updated_at = now() WHERE id = $1 AND claimed_by = $2 AND status = 'claimed' RETURNING 1)
     SELECT count(*)::int AS n FROM lapsed`,
    [commandId, agentId],
  );
  return Number(rows[0]!.n) > 0;
}

/**
 * The built-in agents whose claims are still open (claimed_by `builtin:<host>:<pid>:<random>`),
 * for a new process to find its dead predecessors' (see src/agent/builtin.ts).
 */
export async function builtinClaimants(db: Runner, host: string): Promise<string[]> {
  const { rows } = await db.query(
    `SELECT DISTINCT claimed_by FROM command WHERE status = 'claimed' AND starts_with(claimed_by, $1)`,
    [`builtin:${host}:`],
  );
  return rows.map((r) => r.claimed_by as string);
}

/**
 * Ends now the lease of every command the agent holds (a new process of it registered its key: the
 * old one's claims are nobody's, and the heartbeat would renew them for ever); the sweep then
 * settles them as any lapsed claim. Returns how many there were.
 */
export async function lapseClaims(db: Runner, agentId: string): Promise<number> {
  const { rows } = await db.query(
    `WITH lapsed AS (UPDATE command SET lease_expires_at = now(), updated_at = now() WHERE claimed_by = $1 AND status = 'claimed' RETURNING 1)
     SELECT count(*)::int AS n FROM lapsed`,
    [agentId],
  );
  return rows[0]!.n as number;
}

export const AGENT_LOST_MESSAGE = 'the site agent\'s claim lapsed without a result: whether the action ran is unknown, so it is not sent again';

export interface SweepCounts {
  lost: number;
  requeued: number;
  expired: number;
  woken: number;
}

/**
 * One statement: a lapsed claim of a destructive command fails as AGENT_LOST (never re-sent
 * blindly: the engine reads the state back), a lapsed claim of any other command goes back to
 * queued, and a queued command past expires_at becomes EXPIRED; the run of every command that
 * ended here is woken (due_at) in the same statement, so a run waiting for it wakes.
 * Run by every claim (for the claimer's site), by a credentials request (for that command's
 * site) and periodically by each worker process (every site), so it happens whether or not an
 * agent is alive. Rows another sweep has locked are skipped: that sweep handles them.
 */
export async function sweepCommands(db: Runner, siteId: string | null = null, metrics?: DomainCounters | null): Promise<SweepCounts> {
  const site = 'AND ($2::text IS NULL OR site_id = $2::text)';
  const { rows } = await db.query(
    `WITH lapsed AS (
       SELECT id FROM command WHERE status = 'claimed' AND lease_expires_at <= now() ${site} FOR UPDATE SKIP LOCKED
     ), lost AS (
       UPDATE command c SET status = 'failed', lease_expires_at = NULL, updated_at = now(),
              result = jsonb_build_object('ok', false, 'code', 'AGENT_LOST', 'message', $3::text, 'retryable', false)
         FROM lapsed WHERE c.id = lapsed.id AND c.kind = ANY($1::text[])
       RETURNING c.id, c.run_id, c.kind
     ), requeued AS (
       UPDATE command c SET status = 'queued', claimed_by = NULL, claimed_at = NULL, lease_expires_at = NULL, updated_at = now()
         FROM lapsed WHERE c.id = lapsed.id AND NOT (c.kind = ANY($1::text[]))
       RETURNING c.id
     ), stale AS (
       SELECT id FROM command WHERE status = 'queued' AND expires_at <= now() ${site} FOR UPDATE SKIP LOCKED
     ), expired AS (
       UPDATE command c SET status = 'expired', updated_at = now(),
              result = jsonb_build_object('ok', false, 'code', 'EXPIRED', 'message',
                'no site agent claimed it within ' || round(extract(epoch FROM c.expires_at - c.created_at))::text || ' s')
         FROM stale WHERE c.id = stale.id
       RETURNING c.id, c.run_id, c.kind
     ), woken AS (
       ${wakeRunsSql('SELECT run_id FROM lost UNION ALL SELECT run_id FROM expired')}
     )
     SELECT (SELECT count(*) FROM lost)::int AS lost, (SELECT count(*) FROM requeued)::int AS requeued,
            (SELECT count(*) FROM expired)::int AS expired, (SELECT count(*) FROM woken)::int AS woken,
            ARRAY(SELECT kind FROM lost) AS lost_kinds, ARRAY(SELECT kind FROM expired) AS expired_kinds`,
    [DESTRUCTIVE_KINDS, siteId, AGENT_LOST_MESSAGE],
  );
  const r = rows[0]!;
  if (metrics) {
    for (const kind of (r.lost_kinds ?? []) as string[]) metrics.command(kind, 'failed', 'AGENT_LOST');
    for (const kind of (r.expired_kinds ?? []) as string[]) metrics.command(kind, 'expired', 'EXPIRED');
  }
  return { lost: r.lost as number, requeued: r.requeued as number, expired: r.expired as number, woken: r.woken as number };
}

/** A command with its node's BMC endpoint, as a credentials request or the built-in agent reads it. */
export interface HeldCommand {
  id: string;
  kind: CommandKind;
  params: Record<string, unknown>;
  status: string;
  siteId: string;
  claimedBy: string | null;
  leaseExpiresAt: Date | null;
  /** Whether the lease still holds, by the database's clock (the one that wrote it). */
  held: boolean;
  node: {
    id: string;
    tenantId: string;
    siteId: string;
    address: string;
    driver: string;
    driverOptions: Record<string, unknown>;
    driverBindings: Record<string, string>;
    credentialsRef: string | null;
  } | null;
}

const HELD_COLUMNS = `c.id, c.kind, c.params, c.status, c.site_id, c.claimed_by, c.lease_expires_at,
            (c.status = 'claimed' AND c.lease_expires_at > now()) AS held,
            n.id AS node_id, n.tenant_id, n.site_id AS node_site_id, n.bmc_address, n.bmc_driver, n.bmc_driver_options,
            n.driver_bindings, n.bmc_credentials_ref`;

export async function heldCommand(db: Runner, commandId: string): Promise<HeldCommand | null> {
  const { rows } = await db.query(`SELECT ${HELD_COLUMNS} FROM command c LEFT JOIN node n ON n.id = c.node_id WHERE c.id = $1`, [commandId]);
  return rows[0] ? toHeld(rows[0]) : null;
}

/**
 * claimQueued, answering each claimed command as heldCommand would, in the claim's statement: for
 * the built-in agent, which runs what it claims at once and so needs no second read per command.
 */
export async function claimHeld(db: Runner, agentId: string, scope: ClaimScope, limit: number, leaseMs: number): Promise<HeldCommand[]> {
  const s = scopeSql(scope, 2);
  const { rows } = await db.query(
    `WITH c AS (${claimUpdate(s.where)})
     SELECT ${HELD_COLUMNS} FROM c LEFT JOIN node n ON n.id = c.node_id ORDER BY c.created_at`,
    [agentId, s.value, Math.round(leaseMs), limit],
  );
  return rows.map(toHeld);
}

function toHeld(r: Record<string, unknown>): HeldCommand {
  return {
    id: r.id as string, kind: r.kind as CommandKind, params: (r.params ?? {}) as Record<string, unknown>, status: r.status as string,
    siteId: r.site_id as string, claimedBy: (r.claimed_by ?? null) as string | null, leaseExpiresAt: (r.lease_expires_at ?? null) as Date | null,
    held: r.held === true,
    node: r.node_id
      ? {
          id: r.node_id as string, tenantId: r.tenant_id as string, siteId: r.node_site_id as string, address: r.bmc_address as string,
          driver: r.bmc_driver as string, driverOptions: (r.bmc_driver_options ?? {}) as Record<string, unknown>,
          driverBindings: (r.driver_bindings ?? {}) as Record<string, string>, credentialsRef: (r.bmc_credentials_ref ?? null) as string | null,
        }
      : null,
  };
}

/**
 * Records the result of a command the agent still holds (status claimed, by it) and, when a run
 * queued it, that run woken (due_at), in one statement: no transaction needed around it. A result that arrives after the lease lapsed but
 * before a sweep is accepted: it is better knowledge than AGENT_LOST. Returns false when the agent
 * does not hold the command (any more).
 *
 * With `waker` (a process that runs the engine itself: the built-in agent), that process's engine
 * is also told after the statement (it fetches at once, without waiting for the notification), so
 * `db` must not be a transaction then.
 *
 * The run is woken only when no other command of the same run step (StepContext.commands queues
 * several at once) is still without a result (`siblings`), so the step wakes once for all
 * of them instead of once per result (and waits again). Locked, so two results of one step that
 * commit at the same time cannot both miss each other: the second waits for the first's lock and
 * then reads the first as done. SKIP LOCKED: a sibling locked elsewhere (its own result being
 * written, a claim, the sweep) counts as done, so a doubt wakes the run (it only looks again)
 * rather than leaving it asleep until its commands' expiry.
 */
export async function recordResult(db: Runner, commandId: string, agentId: string, result: CommandResult, waker?: RunWaker | null, metrics?: DomainCounters | null): Promise<boolean> {
  const { rows } = await db.query(RECORD_RESULT_SQL, recordResultValues(commandId, agentId, result));
  return settleRecorded(rows[0]!, result, waker, metrics);
}

const RECORD_RESULT_SQL = `WITH upd AS (
       UPDATE command SET status = $3, result = $4::jsonb, lease_expires_at = NULL, updated_at = now()
        WHERE id = $1 AND claimed_by = $2 AND status = 'claimed'
       RETURNING run_id, kind, step_idx
     ), siblings AS (
       SELECT 1 FROM command o, upd
        WHERE o.run_id = upd.run_id AND o.step_idx = upd.step_idx AND o.id <> $1 AND o.status IN ('queued', 'claimed')
        FOR UPDATE OF o SKIP LOCKED
     ), woke AS (
       ${wakeRunsSql('SELECT run_id FROM upd', { when: 'NOT EXISTS (SELECT 1 FROM siblings)' })}
     )
     SELECT (SELECT count(*) FROM upd)::int AS recorded, (SELECT run_id FROM upd) AS run_id, (SELECT kind FROM upd) AS kind,
            (SELECT count(*) FROM woke)::int AS woken`;

function recordResultValues(commandId: string, agentId: string, result: CommandResult): string[] {
  return [commandId, agentId, resultStatus(result), JSON.stringify(result)];
}

/**
 * recordResult's statement for Sql.joinedWhenConnected: several results in one message (the
 * built-in agent's JoinedWriter). Each statement of a message sees the ones before it, so two
 * results of one step's commands sent together wake the run once, at the second, as they would
 * one after the other.
 */
export function recordResultStatement(commandId: string, agentId: string, result: CommandResult): FirstStatement {
  return { name: 'metal_record_result', text: RECORD_RESULT_SQL, types: ['text', 'text', 'text', 'jsonb'], values: recordResultValues(commandId, agentId, result) };
}

/** What recordResult does with its statement's answer: false when the agent no longer held the command. */
export function settleRecorded(row: Record<string, unknown>, result: CommandResult, waker?: RunWaker | null, metrics?: DomainCounters | null): boolean {
  if (Number(row.recorded) === 0) return false;
  metrics?.command(row.kind as string, resultStatus(result) as 'succeeded' | 'unverified' | 'failed', result.ok ? null : result.code);
  afterWake(Number(row.woken) ? (row.run_id as string) : null, waker);
  return true;
}
