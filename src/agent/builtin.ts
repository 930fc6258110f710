import os from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { DriverRegistry } from '../../clients/bmc/registry';
import type { SecretBroker } from '../../clients/secrets/broker';
import type { Notifications } from '../db/listen';
import type { Sql } from '../db/sql';
import { builtinClaimants, claimHeld, lapseClaim, lapseClaims, recordResult, recordResultStatement, renewLeases, settleRecorded, sweepCommands, type HeldCommand } from '../modules/sites/claims';
import { AppError } from '../errors';
import { databaseFailure } from '../db/failure';
import { DESTRUCTIVE_COMMANDS, type CommandKind, type CommandResult } from '../modules/sites/commands';
import { executeCommand } from './execute';
import type { RunWaker } from '../../jobs/wake';
import { CommandPump } from './pump';
import { JoinedWriter } from '../db/joined-writer';
import type { DomainCounters } from '../ops/metrics';

/**
 * The built-in agent of a worker process (ROLE worker or all, BUILTIN_AGENT on): for the
 * single-machine default, it serves every site whose remote agents have not heartbeaten within
 * AGENT_HEARTBEAT_MS. Same claim SQL and same lease as a remote agent (claims.ts), but no HTTP and
 * no sealing: it is inside the trust boundary, so it reads the credentials from the broker
 * directly, for the command it holds, when it runs it. A remote agent that starts heartbeating
 * takes its site back at the next claim.
 */
export interface BuiltinAgentOptions {
  sql: Sql;
  secrets: SecretBroker | null;
  registry: DriverRegistry;
  log: Logger;
  heartbeatMs: number;
  leaseMs: number;
  pollMs: number;
  concurrency: number;
  /** With it, the agent hears of queued commands (the command_queued_notify trigger) and claims at once; AGENT_POLL_MS stays the fallback. */
  notifications?: Notifications;
  /** This process's engine: told at once of a run a result woke (jobs/wake.ts RunWaker). */
  waker?: RunWaker | null;
  /** Default CREDENTIALS_RETRY_MS. */
  credentialsRetryMs?: number;
  /** Where read credentials are kept (default: a KeptCredentials of the agent's own). */
  keptCredentials?: KeptCredentials;
  /** The process's metrics: command results, sweeps, and the agent's own heartbeat age. */
  metrics?: (DomainCounters & { builtinAgentStarted?(): void }) | null;
}

/** How long a credentials read the database fails is tried again before the command fails as retryable. */
export const CREDENTIALS_RETRY_MS = 10_000;

/**
 * How long the built-in agent keeps a node's BMC credentials after reading them, and for how many
 * references at most. A secret never changes under its reference (new credentials are a new
 * secret, and the node's reference moves to it), so a kept value is never stale; what the keeping
 * saves is a statement and a decryption for each of a machine's BMC commands (ten in its
 * lifecycle). The values live in this process's memory, as the driver's sessions already do.
 */
export const CREDENTIALS_KEEP_MS = 10 * 60_000;
export const CREDENTIALS_KEEP_MAX = 20_000;

/**
 * Credentials by secret reference and tenant, for CREDENTIALS_KEEP_MS; the oldest read is dropped
 * first past CREDENTIALS_KEEP_MAX. Only good { username, password } values are kept.
 */
export class KeptCredentials {
  private readonly kept = new Map<string, { until: number; username: string; password: string }>();
  constructor(private readonly keepMs = CREDENTIALS_KEEP_MS, private readonly max = CREDENTIALS_KEEP_MAX, private readonly now = Date.now) {}

  private static key(ref: string, tenantId: string | null): string {
    return `${tenantId ?? ''}\u0000${ref}`;
  }

  get(ref: string, tenantId: string | null): { username: string; password: string } | null {
    const key = KeptCredentials.key(ref, tenantId);
    const hit = this.kept.get(key);
    if (!hit) return null;
    if (hit.until <= this.now()) {
      this.kept.delete(key);
      return null;
    }
    return { username: hit.username, password: hit.password };
  }

  keep(ref: string, tenantId: string | null, credentials: { username: string; password: string }): void {
    const key = KeptCredentials.key(ref, tenantId);
    this.kept.delete(key);
    this.kept.set(key, { until: this.now() + this.keepMs, ...credentials });
    // Insertion order is read order: the first key is the oldest read.
    while (this.kept.size > this.max) this.kept.delete(this.kept.keys().next().value!);
  }

  get size(): number {
    return this.kept.size;
  }
}

/** 250 ms, doubling to 4 s. */
const backoff = (attempt: number) => Math.min(250 * 2 ** attempt, 4000);

/** `builtin:<host>:<pid>:<random>` split (the host may hold ':' in principle: the last two fields are fixed). */
export function parseBuiltinId(id: string): { host: string; pid: number; nonce: string } | null {
  const parts = id.split(':');
  if (parts.length < 4 || parts[0] !== 'builtin') return null;
  const pid = Number(parts[parts.length - 2]);
  if (!Number.isInteger(pid) || pid <= 0) return null;
  return { host: parts.slice(1, -2).join(':'), pid, nonce: parts[parts.length - 1]! };
}

/** The built-in agents running in this process now (a test may run several): never anyone's dead predecessor. */
const liveHere = new Set<string>();

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * The claims of this host's built-in agents that are dead (a crashed or killed process of this
 * service): no process with their pid, or the pid is ours (a restart that got the same pid, as in
 * a container). Their leases end now and a sweep settles them at once, as registerAgentKey does
 * for a remote agent's new process: a destructive command fails AGENT_LOST (the engine reads the
 * state back), any other is queued again. A live built-in agent of another process on this host
 * keeps its claims. (Hosts are told apart by name: two machines of one name would see each other's
 * agents as dead.)
 */
export async function settleDeadPredecessors(sql: Sql, agentId: string, log: Logger, metrics?: DomainCounters | null): Promise<number> {
  const self = parseBuiltinId(agentId)!;
  const dead = (await builtinClaimants(sql, self.host)).filter((id) => {
    const other = parseBuiltinId(id);
    if (other === null || other.host !== self.host || liveHere.has(id)) return false;
    return other.pid === self.pid || !processAlive(other.pid);
  });
  let lapsed = 0;
  for (const id of dead) lapsed += await lapseClaims(sql, id);
  if (lapsed > 0) {
    const swept = await sweepCommands(sql, null, metrics);
    log.warn({ predecessors: dead, lapsed, ...swept }, 'the commands a dead built-in agent of this host held were settled as lapsed');
  }
  return lapsed;
}

export interface BuiltinAgent {
  /** claimed_by of its commands: `builtin:<host>:<pid>:<random>`. */
  agentId: string;
  stop(graceMs: number): Promise<void>;
}

export function startBuiltinAgent(opts: BuiltinAgentOptions): BuiltinAgent {
  const agentId = `builtin:${os.hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
  const log = opts.log.child({ agent: 'builtin' });
  let stopping = false;
  const kept = opts.keptCredentials ?? new KeptCredentials();
  /** Results go with the others that wait for a connection: one round trip and one commit for them all. */
  const results = new JoinedWriter<{ commandId: string; result: CommandResult }, boolean>(opts.sql, {
    statement: ({ commandId, result }) => recordResultStatement(commandId, agentId, result),
    settle: (row, { result }) => settleRecorded(row!, result, opts.waker, opts.metrics),
    alone: ({ commandId, result }) => recordResult(opts.sql, commandId, agentId, result, opts.waker, opts.metrics),
  });
  /** Claims let go (their result could not be stored): the heartbeat no longer renews them. */
  const letGo = new Set<string>();
  /**
   * Ends the claim now so the sweep settles it (AGENT_LOST for a destructive command, queued again
   * otherwise); should even that fail, the heartbeat stops renewing it and it lapses by itself.
   */
  const release = async (commandId: string) => {
    letGo.add(commandId);
    try {
      if (await lapseClaim(opts.sql, commandId, agentId)) await sweepCommands(opts.sql, null, opts.metrics);
      letGo.delete(commandId);
    } catch (error) {
      log.warn({ err: error, commandId }, 'could not end the claim; it lapses within the lease');
      // Dropped from the set once the lease must have run out (nothing renews it meanwhile).
      setTimeout(() => letGo.delete(commandId), opts.leaseMs * 2).unref();
    }
  };
  /** One attempt at storing a result: false when the agent no longer holds the command. */
  const store = async (commandId: string, result: CommandResult) => {
    // One statement (the result, and its run's wake-up unless this process's engine wakes it), sent
    // with the other results that wait for a connection (JoinedWriter).
    const recorded = await results.write({ commandId, result });
    if (!recorded) log.warn({ commandId }, 'the built-in agent no longer held the command when it finished; result dropped');
  };
  /**
   * Stores a command's result. While the database is down or cannot write, the same statement is
   * tried again until it is stored (the claim held: the heartbeat renews it once the database is
   * back, and a result that comes after the lease but before a sweep is still taken). A result the database refuses for
   * itself (it fails the same way every time) is replaced by one that says so: AGENT_LOST for a
   * destructive command that reached the BMC (whether it ran is not to be guessed: never sent
   * again, the engine reads the state back), a retryable AGENT_ERROR otherwise. When even that
   * cannot be stored, the claim is let go for the sweep to settle. Never a claim held for ever.
   */
  const record = async (command: { id: string; kind: string; started?: boolean }, result: CommandResult) => {
    for (let attempt = 0; ; attempt += 1) {
      try {
        await store(command.id, result);
        return;
      } catch (error) {
        // The database down or unable to write: the same statement will do once it is back.
        if (databaseFailure(error) && !stopping) {
          if (attempt === 0) log.warn({ err: error, commandId: command.id }, 'storing a command\'s result failed; trying again until it is stored');
          await sleep(backoff(attempt));
          continue;
        }
        if (!databaseFailure(error)) {
          log.error({ err: error, commandId: command.id }, 'the database refused the command\'s result: storing a failure in its place');
          const destructive = DESTRUCTIVE_COMMANDS[command.kind as CommandKind] === true && command.started === true;
          const substitute: CommandResult = destructive
            ? { ok: false, code: 'AGENT_LOST', message: 'the command\'s result could not be stored: whether the action ran is not known here, so it is not sent again', retryable: false }
            : { ok: false, code: 'AGENT_ERROR', message: 'the command\'s result could not be stored', retryable: true };
          try {
            await store(command.id, substitute);
            return;
          } catch (again) {
            log.error({ err: again, commandId: command.id }, 'not even a failure could be stored for the command');
          }
        }
        log.error({ commandId: command.id }, 'the command\'s result could not be stored: its claim is let go for the sweep to settle');
        await release(command.id);
        return;
      }
    }
  };
  /**
   * The node's BMC credentials, or why not. Only a credential problem (no such secret, one the key
   * does not open, one that is not { username, password }) fails the command for good; the
   * database failing the read is tried again, then fails it as retryable (nothing reached the BMC).
   */
  const credentialsOf = async (command: HeldCommand, node: NonNullable<HeldCommand['node']>, secrets: SecretBroker): Promise<{ username: string; password: string } | CommandResult> => {
    const known = kept.get(node.credentialsRef!, node.tenantId);
    if (known) return known;
    const until = Date.now() + (opts.credentialsRetryMs ?? CREDENTIALS_RETRY_MS);
    for (let attempt = 0; ; attempt += 1) {
      let credentials: { username?: unknown; password?: unknown } | null;
      try {
        credentials = (await secrets.get(node.credentialsRef!, node.tenantId)) as { username?: unknown; password?: unknown } | null;
      } catch (error) {
        if (!(error instanceof AppError)) {
          if (!stopping && Date.now() < until) {
            if (attempt === 0) log.warn({ commandId: command.id, nodeId: node.id, err: error }, 'reading the BMC credentials failed; trying again');
            await sleep(backoff(attempt));
            continue;
          }
          log.warn({ commandId: command.id, nodeId: node.id, err: error }, 'the BMC credentials could not be read');
          const why = databaseFailure(error) ? 'the database failed the read' : 'the read failed';
          return { ok: false, code: 'AGENT_ERROR', message: `the BMC credentials of node ${node.id} could not be read now (${why}); nothing was sent to the BMC`, retryable: true };
        }
        log.warn({ commandId: command.id, nodeId: node.id, err: error }, 'the BMC credentials could not be read');
        credentials = null;
      }
      if (!credentials || typeof credentials.username !== 'string' || typeof credentials.password !== 'string') {
        return { ok: false, code: 'AGENT_ERROR', message: `the BMC credentials of node ${node.id} (${node.credentialsRef}) could not be read as { username, password }`, retryable: false };
      }
      const good = { username: credentials.username, password: credentials.password };
      kept.keep(node.credentialsRef!, node.tenantId, good);
      return good;
    }
  };
  const pump = new CommandPump<HeldCommand & { started?: boolean }>({
    log,
    concurrency: opts.concurrency,
    pollMs: opts.pollMs,
    renewMs: Math.max(250, Math.floor(opts.leaseMs / 4)),
    // The claim answers each command with its node's BMC endpoint (claimHeld): it runs at once.
    claim: async (max) => {
      const claimed = await claimHeld(opts.sql, agentId, { unservedWithinMs: opts.heartbeatMs }, max, opts.leaseMs);
      opts.metrics?.builtinAgentContact();
      return claimed;
    },
    renew: async () => {
      await renewLeases(opts.sql, agentId, opts.leaseMs, [...letGo]);
      opts.metrics?.builtinAgentContact();
    },
    abandon: (item, result) => record(item, result),
    run: async (command, signal) => {
      const node = command.node;
      let result: CommandResult;
      if (!node || !node.credentialsRef) {
        result = { ok: false, code: 'AGENT_ERROR', message: node ? `node ${node.id} has no BMC credentials` : 'the command names no node', retryable: false };
      } else if (!opts.secrets) {
        result = { ok: false, code: 'AGENT_ERROR', message: 'no secret broker is configured: the BMC credentials cannot be read', retryable: false };
      } else {
        const credentials = await credentialsOf(command, node, opts.secrets);
        if ('ok' in credentials) {
          result = credentials;
        } else {
          log.info({ commandId: command.id, kind: command.kind, nodeId: node.id, address: node.address }, 'running command');
          command.started = true;
          result = await executeCommand(
            opts.registry,
            { id: command.id, kind: command.kind, params: command.params },
            { address: node.address, username: credentials.username, password: credentials.password, options: node.driverOptions },
            node.driverBindings,
            signal,
          );
        }
      }
      if (signal.aborted) return;
      await record(command, result);
      log.info({ commandId: command.id, ok: result.ok, ...(result.ok ? {} : { code: result.code }) }, 'command finished');
    },
  });
  liveHere.add(agentId);
  // A dead process of this host left claims: settled now, not AGENT_LEASE_MS from now.
  const settled = settleDeadPredecessors(opts.sql, agentId, log, opts.metrics).catch((error: unknown) =>
    log.warn({ err: error }, 'could not settle the claims of dead built-in agents; their leases lapse instead'));
  opts.metrics?.builtinAgentStarted?.();
  pump.start();
  const listening = opts.notifications?.subscribe('metal_command_queued', () => pump.poke()) ?? null;
  log.info({ agentId, drivers: opts.registry.names() }, 'built-in site agent started: it serves every site with no remote agent heartbeating');
  return {
    agentId,
    async stop(graceMs) {
      stopping = true;
      await settled;
      (await listening)?.stop();
      await pump.stop(graceMs);
      liveHere.delete(agentId);
    },
  };
}

/**
 * Every worker process sweeps (claims.ts's sweepCommands) on a timer, whether or not an agent is
 * alive: lapsed claims become AGENT_LOST or queued again, expired commands EXPIRED, and their runs
 * wake. Claims sweep their own site too; this is what catches a site with no agent at all.
 */
export function startCommandSweeper(sql: Sql, log: Logger, periodMs: number, metrics?: DomainCounters | null): { stop(): Promise<void> } {
  let running: Promise<void> | null = null;
  const tick = () => {
    if (running) return;
    running = sweepCommands(sql, null, metrics)
      .then((counts) => {
        if (counts.lost || counts.requeued || counts.expired) log.info({ ...counts }, 'swept site agent commands');
      })
      .catch((error: unknown) => log.warn({ err: error }, 'sweeping site agent commands failed'))
      .finally(() => (running = null));
  };
  const timer = setInterval(tick, periodMs);
  timer.unref();
  return {
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}
