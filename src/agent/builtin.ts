import os from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { DriverRegistry } from '../../clients/bmc/registry';
import type { SecretBroker } from '../../clients/secrets/broker';
import type { Notifications } from '../db/listen';
import type { Sql } from '../db/sql';
import { claimHeld, recordResult, renewLeases, sweepCommands, type HeldCommand } from '../modules/sites/claims';
import type { CommandResult } from '../modules/sites/commands';
import { executeCommand } from './execute';
import type { RunWaker } from '../../jobs/local-wake';
import { CommandPump } from './pump';

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
  /** This process's engine: a result's run is woken here, not through a metal.advance job (jobs/local-wake.ts). */
  waker?: RunWaker | null;
}

export interface BuiltinAgent {
  /** claimed_by of its commands: `builtin:<host>:<pid>:<random>`. */
  agentId: string;
  stop(graceMs: number): Promise<void>;
}

export function startBuiltinAgent(opts: BuiltinAgentOptions): BuiltinAgent {
  const agentId = `builtin:${os.hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
  const log = opts.log.child({ agent: 'builtin' });
  const record = async (commandId: string, result: CommandResult) => {
    // One statement (the result, and its run's wake-up unless this process's engine wakes it): no transaction around it.
    const recorded = await recordResult(opts.sql, commandId, agentId, result, opts.waker);
    if (!recorded) log.warn({ commandId }, 'the built-in agent no longer held the command when it finished; result dropped');
  };
  const pump = new CommandPump<HeldCommand & { started?: boolean }>({
    log,
    concurrency: opts.concurrency,
    pollMs: opts.pollMs,
    renewMs: Math.max(250, Math.floor(opts.leaseMs / 4)),
    // The claim answers each command with its node's BMC endpoint (claimHeld): it runs at once.
    claim: (max) => claimHeld(opts.sql, agentId, { unservedWithinMs: opts.heartbeatMs }, max, opts.leaseMs),
    renew: async () => {
      await renewLeases(opts.sql, agentId, opts.leaseMs);
    },
    abandon: (item, result) => record(item.id, result),
    run: async (command, signal) => {
      const node = command.node;
      let result: CommandResult;
      if (!node || !node.credentialsRef) {
        result = { ok: false, code: 'AGENT_ERROR', message: node ? `node ${node.id} has no BMC credentials` : 'the command names no node', retryable: false };
      } else if (!opts.secrets) {
        result = { ok: false, code: 'AGENT_ERROR', message: 'no secret broker is configured: the BMC credentials cannot be read', retryable: false };
      } else {
        const credentials = (await opts.secrets.get(node.credentialsRef, node.tenantId).catch((error: unknown) => {
          log.warn({ commandId: command.id, nodeId: node.id, err: error }, 'the BMC credentials could not be read');
          return null;
        })) as { username?: unknown; password?: unknown } | null;
        if (!credentials || typeof credentials.username !== 'string' || typeof credentials.password !== 'string') {
          result = { ok: false, code: 'AGENT_ERROR', message: `the BMC credentials of node ${node.id} (${node.credentialsRef}) could not be read as { username, password }`, retryable: false };
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
      await record(command.id, result);
      log.info({ commandId: command.id, ok: result.ok, ...(result.ok ? {} : { code: result.code }) }, 'command finished');
    },
  });
  pump.start();
  const listening = opts.notifications?.subscribe('metal_command_queued', () => pump.poke()) ?? null;
  log.info({ agentId, drivers: opts.registry.names() }, 'built-in site agent started: it serves every site with no remote agent heartbeating');
  return {
    agentId,
    async stop(graceMs) {
      (await listening)?.stop();
      await pump.stop(graceMs);
    },
  };
}

/**
 * Every worker process sweeps (claims.ts's sweepCommands) on a timer, whether or not an agent is
 * alive: lapsed claims become AGENT_LOST or queued again, expired commands EXPIRED, and their runs
 * wake. Claims sweep their own site too; this is what catches a site with no agent at all.
 */
export function startCommandSweeper(sql: Sql, log: Logger, periodMs: number): { stop(): Promise<void> } {
  let running: Promise<void> | null = null;
  const tick = () => {
    if (running) return;
    running = sweepCommands(sql)
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
