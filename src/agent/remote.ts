import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import type { DriverRegistry } from '../../clients/bmc/registry';
import type { CommandResult } from '../modules/sites/commands';
import type { SightingInput } from '../modules/metal/discovery';
import { generateAgentKeyPair, openSealed, type SealedBox } from '../modules/sites/seal';
import { executeCommand, redact } from './execute';
import { CommandPump } from './pump';

/**
 * A remote site agent: a process at the site, beside the BMCs, talking to the service over its
 * GraphQL API with its own token (site:agent on its site). No database, no listener. See
 * docs/agent-protocol.md for the protocol it speaks.
 */
export interface AgentOptions {
  /** The service's base URL (http://host:port). */
  apiUrl: string;
  token: string;
  registry: DriverRegistry;
  log: Logger;
  concurrency?: number;
  pollMs?: number;
  /** How often it heartbeats; must be well within the service's AGENT_HEARTBEAT_MS and AGENT_LEASE_MS. */
  heartbeatMs?: number;
  /** Machines seen PXE-booting since the last heartbeat (a DHCP snooper's list), or null to leave the service's list as it is. */
  sightings?: () => Promise<SightingInput[] | null>;
  /** Per GraphQL call. */
  requestTimeoutMs?: number;
}

export interface RunningAgent {
  agentId: string;
  publicKey: string;
  /** Resolves when the agent ends on its own (its token was refused), with the reason. */
  ended: Promise<unknown>;
  stop(graceMs?: number): Promise<void>;
}

/** How long a command's result is offered again while the service cannot take it (a failover). */
export const REPORT_TRY_MS = 60_000;

export class AgentApiError extends Error {
  constructor(readonly code: string, message: string, readonly status: number) {
    super(message);
    this.name = 'AgentApiError';
  }
}

interface ClaimedCommand {
  id: string;
  kind: string;
  params: Record<string, unknown>;
  leaseExpiresAt: string;
  started?: boolean;
}

interface Credentials {
  commandId: string;
  agentId: string;
  claimDeadline: string;
  kind: string;
  params: Record<string, unknown>;
  endpoint: { address: string; driver: string; driverOptions: Record<string, unknown>; driverBindings: Record<string, string> };
  sealed: SealedBox;
}

const REGISTER_KEY = 'mutation ($k: String!) { registerAgentKey(publicKey: $k) { id } }';
const HEARTBEAT = 'mutation ($m: [SightingInput!]) { agentReportStatus(machines: $m) { id } }';
const CLAIM = 'mutation ($m: Int) { claimCommands(max: $m) { id kind params leaseExpiresAt } }';
const CREDENTIALS = `mutation ($c: ID!) { commandCredentials(commandId: $c) {
  commandId agentId claimDeadline kind params endpoint { address driver driverOptions driverBindings } sealed { scheme epk iv ciphertext tag } } }`;
const REPORT = 'mutation ($c: ID!, $r: CommandResultInput!) { reportCommandResult(commandId: $c, result: $r) { id status } }';

export function agentApi(apiUrl: string, token: string, timeoutMs = 30000) {
  const url = new URL('/graphql', apiUrl).toString();
  return async function call<T>(query: string, variables: Record<string, unknown> = {}): Promise<T> {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query, variables }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await response.text();
    let body: { data?: T | null; errors?: { message: string; extensions?: { code?: string } }[] };
    try {
      body = JSON.parse(text) as typeof body;
    } catch {
      throw new AgentApiError('INTERNAL', `the service answered ${response.status} with no JSON`, response.status);
    }
    const first = body.errors?.[0];
    if (first) throw new AgentApiError(first.extensions?.code ?? 'INTERNAL', first.message, response.status);
    if (!body.data) throw new AgentApiError('INTERNAL', `the service answered ${response.status} with no data`, response.status);
    return body.data;
  };
}

export async function startAgent(opts: AgentOptions): Promise<RunningAgent> {
  const call = agentApi(opts.apiUrl, opts.token, opts.requestTimeoutMs);
  const log = opts.log;
  // A fresh key pair per start, kept in memory only: nothing on disk to steal, and a restart
  // simply registers the new public key. The service then settles the commands the previous
  // process still held as lapsed claims (registerAgentKey): this process never saw them.
  const keys = generateAgentKeyPair();
  const registered = await call<{ registerAgentKey: { id: string } }>(REGISTER_KEY, { k: keys.publicKey });
  const agentId = registered.registerAgentKey.id;
  const heartbeat = async () => {
    const machines = opts.sightings ? await opts.sightings() : null;
    await call(HEARTBEAT, machines ? { m: machines } : {});
  };
  await heartbeat();
  log.info({ agentId, apiUrl: opts.apiUrl, drivers: opts.registry.names() }, 'site agent registered its key and is serving its site');

  // A lost report of a destructive command that did run would end as AGENT_LOST, and one given up
  // on keeps its claim renewed by every heartbeat (its run never moves on): tried again for up to
  // REPORT_TRY_MS while the service cannot answer (no connection, a 5xx: its database failing over
  // answers 503 for a few seconds). A refusal (CONFLICT: no longer held; INVALID_INPUT) is final.
  const report = async (commandId: string, result: CommandResult) => {
    const until = Date.now() + REPORT_TRY_MS;
    for (let attempt = 1; ; attempt += 1) {
      try {
        await call(REPORT, { c: commandId, r: result });
        return;
      } catch (error) {
        const passing = !(error instanceof AgentApiError) || error.code === 'INTERNAL' || error.status >= 500;
        if (!passing || Date.now() >= until) throw error;
        log.warn({ commandId, attempt, err: error }, 'reporting a command result failed; retrying');
        await sleep(Math.min(250 * 2 ** attempt, 4000));
      }
    }
  };

  const pump = new CommandPump<ClaimedCommand>({
    log,
    concurrency: opts.concurrency ?? 8,
    pollMs: opts.pollMs ?? 1000,
    renewMs: opts.heartbeatMs ?? 15000,
    claim: async (max) => (await call<{ claimCommands: ClaimedCommand[] }>(CLAIM, { m: Math.min(max, 100) })).claimCommands,
    renew: heartbeat,
    isFatal: (error) => error instanceof AgentApiError && (error.code === 'UNAUTHENTICATED' || error.code === 'PERMISSION_DENIED'),
    abandon: (item, result) => report(item.id, result),
    run: async (command, signal) => {
      let creds: Credentials;
      try {
        creds = (await call<{ commandCredentials: Credentials }>(CREDENTIALS, { c: command.id })).commandCredentials;
      } catch (error) {
        if (error instanceof AgentApiError && error.code === 'CONFLICT') {
          log.warn({ commandId: command.id }, 'the claim lapsed before the command ran: dropped (the service has settled it)');
          return;
        }
        const message = error instanceof Error ? error.message : String(error);
        await report(command.id, { ok: false, code: 'AGENT_ERROR', message: `credentials unavailable: ${message}`.slice(0, 2000), retryable: true });
        return;
      }
      let username: string;
      let password: string;
      try {
        if (creds.agentId !== agentId || creds.commandId !== command.id) throw new Error('the credentials were bound to another agent or command');
        const opened = JSON.parse(openSealed(keys.privateKey, creds.sealed, { commandId: command.id, agentId, claimDeadline: creds.claimDeadline })) as { username: string; password: string };
        username = opened.username;
        password = opened.password;
      } catch (error) {
        await report(command.id, { ok: false, code: 'AGENT_ERROR', message: `the sealed credentials did not open: ${error instanceof Error ? error.message : String(error)}`, retryable: false });
        return;
      }
      // By the time the credentials arrived the claim may be over (a slow network, a paused
      // process): the service has then settled it, and a destructive action must not start late.
      if (Date.parse(creds.claimDeadline) <= Date.now()) {
        log.warn({ commandId: command.id, claimDeadline: creds.claimDeadline }, 'the claim ran out before the command could start: dropped (the service settles it)');
        return;
      }
      log.info({ commandId: command.id, kind: command.kind, address: creds.endpoint.address, driver: creds.endpoint.driver }, 'running command');
      command.started = true;
      const result = await executeCommand(
        opts.registry,
        { id: command.id, kind: creds.kind, params: creds.params },
        { address: creds.endpoint.address, username, password, options: creds.endpoint.driverOptions },
        creds.endpoint.driverBindings,
        signal,
      );
      // Stopping: the pump has reported this one as abandoned.
      if (signal.aborted) return;
      await report(command.id, result);
      log.info({ commandId: command.id, ok: result.ok, ...(result.ok ? {} : { code: result.code, message: redact(result.message, password) }) }, 'command finished');
    },
  });
  pump.start();
  return {
    agentId,
    publicKey: keys.publicKey,
    ended: pump.ended,
    stop: (graceMs = 10000) => pump.stop(graceMs),
  };
}
