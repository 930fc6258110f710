import fs from 'node:fs/promises';
import type { Logger } from 'pino';
import type { Config } from '../config';
import type { DriverRegistry } from '../../clients/bmc/registry';
import { startAgent, type RunningAgent } from './remote';

/** The agent's token: AGENT_TOKEN, else the first line of AGENT_TOKEN_FILE. Never logged. */
async function agentToken(config: Config): Promise<string> {
  if (config.agentToken) return config.agentToken;
  if (config.agentTokenFile) {
    const token = (await fs.readFile(config.agentTokenFile, 'utf8')).split('\n')[0]!.trim();
    if (token) return token;
    throw new Error(`AGENT_TOKEN_FILE (${config.agentTokenFile}) is empty`);
  }
  throw new Error('ROLE=agent needs AGENT_TOKEN or AGENT_TOKEN_FILE (the token registerSiteAgent returned)');
}

/**
 * ROLE=agent: the remote site agent as a process. No HTTP listener, no database: API_URL and the
 * agent's token are all it needs. Resolves with the process's exit code once it has stopped (a
 * signal: 0; its token refused: 1). A stop drains: running commands get SHUTDOWN_TIMEOUT_MS to
 * finish, the rest are reported as abandoned.
 */
export async function runAgentProcess(config: Config, log: Logger, registry: DriverRegistry): Promise<number> {
  if (!config.apiUrl) throw new Error('ROLE=agent needs API_URL (the service\'s base URL, e.g. http://control-plane:4000)');
  let url: URL;
  try {
    url = new URL(config.apiUrl);
  } catch {
    throw new Error(`API_URL is not a URL: "${config.apiUrl}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error(`API_URL must be http or https, got ${url.protocol}`);
  const token = await agentToken(config);
  let agent: RunningAgent | null = null;
  let stopRequested: ((signal: NodeJS.Signals) => void) | null = null;
  const stopSignal = new Promise<NodeJS.Signals>((resolve) => (stopRequested = resolve));
  const onSignal = (signal: NodeJS.Signals) => stopRequested!(signal);
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, onSignal);
  agent = await startAgent({
    apiUrl: url.toString(),
    token,
    registry,
    log,
    concurrency: config.agentConcurrency,
    pollMs: config.agentPollMs,
    // Well within both the service's heartbeat window and the claim lease.
    heartbeatMs: Math.max(250, Math.floor(Math.min(config.agentHeartbeatMs, config.agentLeaseMs) / 4)),
  });
  const outcome = await Promise.race([stopSignal.then((signal) => ({ signal })), agent.ended.then((reason) => ({ reason }))]);
  if ('signal' in outcome) {
    log.info({ signal: outcome.signal }, 'site agent stopping: no new claims, finishing running commands');
    await agent.stop(config.shutdownTimeoutMs);
    log.info('site agent stopped');
    return 0;
  }
  await agent.stop(config.shutdownTimeoutMs);
  log.error('site agent stopped: the service refused its token');
  return 1;
}
