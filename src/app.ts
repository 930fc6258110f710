import fs from 'node:fs/promises';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import type { Logger } from 'pino';
import { loadConfig, type Config } from './config';
import { createLogger } from './ops/log';
import { Metrics } from './ops/metrics';
import { readDomainSnapshot } from './ops/domain-gauges';
import { startEmbeddedPostgres, type EmbeddedDatabase } from './db/embedded';
import { migrate } from './db/migrate';
import { connectDatabase, type Database } from './db/client';
import { databaseFailure } from './db/failure';
import { TokenStore, generateToken } from './auth/tokens';
import { Queues } from '../jobs/registry';
import { startWorkers } from '../jobs/workers';
import { dueRunCount } from '../jobs/due-runs';
import type { RunWaker } from '../jobs/wake';
import { createGraphqlServer, type GraphqlServer } from './graphql/yoga';
import { ResponseCache } from './graphql/response-cache';
import { RestRouter } from './rest/router';
import { createHttpServer, createMetricsServer } from './server';
import type { Services } from './context';
import { fromRoot } from './paths';
import { BuiltinSecretBroker, loadSecretKey } from '../clients/secrets/broker';
import { Notifications } from './db/listen';
import { Sequencer } from './events/sequencer';
import { EventHub } from './events/hub';
import { attachGraphqlWs } from './events/ws';
import type { DriverRegistry } from '../clients/bmc/registry';
import { defaultDriverRegistry } from '../clients/bmc/defaults';
import { startBuiltinAgent, startCommandSweeper } from './agent/builtin';
import { BootHttp } from './modules/boot/routes';
import { InstallerHttp } from './modules/provision/callback-routes';
import { InventoryService } from './modules/provision/inventory';

export interface App {
  config: Config;
  services: Services;
  database: Database;
  queues: Queues;
  yoga: GraphqlServer | null;
  server: Server | null;
  /** http://host:port of the listening server (api and all roles). */
  url: string | null;
  /** http://host:port of the METRICS_PORT listener (/metrics and /healthz only), when there is one. */
  metricsUrl: string | null;
  metrics: Metrics;
  databaseUrl: string;
  stop(): Promise<void>;
}

async function packageVersion(): Promise<string> {
  const pkg = JSON.parse(await fs.readFile(fromRoot('package.json'), 'utf8')) as { version: string };
  return pkg.version;
}

/**
 * The admin token: ADMIN_TOKEN when set; else the one in DATA_DIR/admin-token; else, when the
 * database has no platform admin yet, a new one written there (0600). The token itself is never logged.
 */
async function bootstrapAdmin(config: Config, tokens: TokenStore, database: Database, log: Logger): Promise<void> {
  if (config.adminToken) {
    await tokens.ensureAdminToken(config.adminToken, 'admin (ADMIN_TOKEN)');
    return;
  }
  const file = path.join(config.dataDir, 'admin-token');
  const existing = await fs.readFile(file, 'utf8').then((t) => t.trim(), () => null);
  if (existing) {
    await tokens.ensureAdminToken(existing, 'admin (generated)');
    log.info({ path: file }, 'platform admin token is in this file');
    return;
  }
  const admins = await database.prisma.apiToken.count({
    where: { tenantId: null, revokedAt: null, grants: { some: { scopeType: 'platform', permission: 'admin' } } },
  });
  if (admins > 0) {
    log.info('a platform admin token already exists; set ADMIN_TOKEN to add one');
    return;
  }
  const token = generateToken();
  await fs.mkdir(config.dataDir, { recursive: true });
  await fs.writeFile(file, token + '\n', { mode: 0o600, flag: 'wx' });
  await tokens.ensureAdminToken(token, 'admin (generated)');
  log.info({ path: file }, 'generated the platform admin token and wrote it to this file (mode 0600)');
}

/** A readiness check that has not answered by then counts as failed. */
const READY_CHECK_MS = 2000;

const within = <T>(promise: Promise<T>, ms: number): Promise<T> => {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => (timer = setTimeout(() => reject(new Error('timed out')), ms))),
  ]).finally(() => clearTimeout(timer));
};

/**
 * /readyz. Ready when all of: the database answers a statement within READY_CHECK_MS; that
 * session is not read-only (a standby after a failover, default_transaction_read_only: writes
 * would fail with 25006); no write of this process was refused for lack of storage (disk full or
 * failing, 53xxx/58030/25006) within the last STORAGE_FAILURE_WINDOW_MS (src/db/health.ts); and
 * the queue answers. Each check says `ok` or what is wrong in a word, never the error's text (it
 * names the database's host and port).
 */
async function readiness(database: Database, queues: Queues, log: Logger): Promise<{ ok: boolean; checks: Record<string, string> }> {
  const checks: Record<string, string> = {};
  const said = (error: unknown) => {
    log.warn({ err: error }, 'a readiness check failed');
    return databaseFailure(error) === 'storage' ? 'cannot write' : 'unavailable';
  };
  await within(database.backgroundSql.query<{ ro: string }>("SELECT current_setting('transaction_read_only') AS ro"), READY_CHECK_MS).then(
    ({ rows }) => {
      checks.database = 'ok';
      checks.writes = rows[0]?.ro === 'on' ? 'read-only' : database.health.writesFailing ? 'cannot write (disk full or failing)' : 'ok';
    },
    (error: unknown) => {
      checks.database = said(error);
      checks.writes = 'unknown';
    },
  );
  await within(queues.boss.getQueueSize('metal.batch'), READY_CHECK_MS).then(() => (checks.queue = 'ok'), (error: unknown) => (checks.queue = said(error)));
  return { ok: Object.values(checks).every((v) => v === 'ok'), checks };
}

export async function startApp(overrides: Partial<Config> = {}, opts: { log?: Logger; drivers?: DriverRegistry } = {}): Promise<App> {
  const config = { ...loadConfig(), ...overrides };
  if (config.role === 'agent') throw new Error('ROLE=agent runs the site agent (src/agent/process.ts), not the service');
  const log = opts.log ?? createLogger(config.logLevel);
  const cleanups: (() => Promise<void>)[] = [];
  const stopAll = async () => {
    for (const cleanup of cleanups.reverse()) {
      await cleanup().catch((error: unknown) => log.error({ err: error }, 'error while stopping'));
    }
  };
  try {
    let databaseUrl = config.databaseUrl;
    if (!databaseUrl) {
      const embedded: EmbeddedDatabase = await startEmbeddedPostgres({
        dataDir: config.dataDir,
        port: config.embeddedPgPort,
        systemDir: config.embeddedPgSystemDir,
        statStatements: config.pgStatStatements,
        log,
      });
      // First in, so last out: after HTTP, workers and every pool of ours have closed.
      cleanups.push(async () => {
        await embedded.stop();
        log.info({ pid: embedded.pid }, 'embedded PostgreSQL stopped');
      });
      databaseUrl = embedded.url;
    }
    const applied = await migrate(databaseUrl);
    if (applied.length) log.info({ applied }, 'migrations applied');
    const database = connectDatabase(databaseUrl, { poolSize: config.databasePoolSize });
    cleanups.push(() => database.close());
    const tokens = new TokenStore(database.prisma, config.tokenCacheMs);
    await bootstrapAdmin(config, tokens, database, log);

    // The process's one LISTEN connection (src/db/listen.ts); closed last of what uses it.
    const notifications = new Notifications(databaseUrl, log);
    await notifications.start();
    cleanups.push(() => notifications.stop());
    const queues = new Queues(databaseUrl, log, config.bossPollSeconds);
    await queues.start();
    cleanups.push(async () => {
      await queues.stop(config.shutdownTimeoutMs);
      log.info('workers stopped');
    });
    const secretKey = await loadSecretKey({
      secretKey: config.secretKey,
      secretKeyFile: config.secretKeyFile,
      dataDir: config.dataDir,
      embedded: !config.databaseUrl,
    });
    if (!secretKey) log.warn('no SECRET_KEY or SECRET_KEY_FILE: no secret broker, so inline BMC credentials are refused');
    const secrets = secretKey ? new BuiltinSecretBroker(database, secretKey) : null;
    // Every process that serves the API numbers the event stream (its readers are the API's
    // streams); one at a time does (advisory lock). A worker-only process does not: it would only
    // compete for the lock (the lifecycle bench, three processes: every commit's notification made
    // a pass in each). Events a worker writes while no API runs wait unnumbered for one.
    if (config.role !== 'worker') {
      const sequencer = new Sequencer(databaseUrl, notifications, log);
      await sequencer.start();
      cleanups.push(() => sequencer.stop());
    }
    let events: EventHub | null = null;
    if (config.role !== 'worker') {
      const hub = new EventHub(notifications, database.backgroundSql, tokens, log, { buffer: config.subscriberBuffer });
      cleanups.push(() => hub.stop());
      await hub.start();
      events = hub;
    }
    const inventory = config.role === 'worker' ? null : new InventoryService(config, log);
    if (inventory) cleanups.push(() => inventory.close());
    // One registry per process (docs/operations.md): the domain counters count where the thing
    // happens (runs and steps in the engine, commands where their result is stored); the gauges
    // read from the database only in processes that serve the API (a worker would export the same
    // values again), at scrape time, at most once per METRICS_CACHE_MS.
    const metrics = new Metrics({
      readDepths: async () => ({ ...(await queues.depths()), 'metal.advance': await dueRunCount(database.backgroundSql) }),
      readStatements: () => database.statements.count,
      readSubscribers: () => events?.subscriberCount ?? 0,
      // backgroundSql: the scrape's statement is not a request's.
      readDomain: config.role === 'worker' ? undefined : () => readDomainSnapshot(database.backgroundSql),
      domainCacheMs: config.metricsCacheMs,
      onDomainError: (error) => log.warn({ err: error }, 'reading the domain gauges for /metrics failed; they keep their last values'),
    });
    const services: Services = { config, prisma: database.prisma, sql: database.sql, tokens, queues, secrets, events, inventory, log, metrics };
    // This process's engine, when it runs one: told at once of the runs its own agent and API wake (jobs/wake.ts RunWaker).
    let waker: RunWaker | null = null;
    if (config.role !== 'api') {
      const workers = await startWorkers(queues, log, { sql: database.sql, engineSql: database.backgroundSql, notifications, retentionHours: config.eventRetentionHours, workflow: { engine: config.workflowEngine, leaseMs: config.workflowLeaseMs }, metrics, iso: { secrets, isoDir: config.isoDir, publicUrl: () => config.publicUrl, baseDir: config.installerBaseDir, concurrency: config.controlnodeIsoConcurrency, maxBytes: config.isoDirMaxBytes }, fabric: { prisma: database.prisma, secrets, bgpWaitMs: config.fabricBgpWaitMs, connectTimeoutMs: config.fabricSshConnectTimeoutMs, nodeTimeoutMs: config.fabricNodeTimeoutMs } });
      // Cleanups run in reverse: the run sweep stops before the queues and the pool close.
      cleanups.push(async () => workers.stop());
      waker = workers.waker;
      // Site agents' claims lapse and commands expire whether or not any agent is alive.
      // backgroundSql: their statements must not count in request-level statement counts.
      const sweeper = startCommandSweeper(database.backgroundSql, log, Math.max(config.agentPollMs, Math.min(15000, Math.floor(config.agentLeaseMs / 4))), metrics);
      cleanups.push(() => sweeper.stop());
      if (config.builtinAgent) {
        const builtin = startBuiltinAgent({
          sql: database.backgroundSql, secrets, registry: opts.drivers ?? defaultDriverRegistry(), log,
          heartbeatMs: config.agentHeartbeatMs, leaseMs: config.agentLeaseMs, pollMs: config.agentPollMs, concurrency: config.agentConcurrency,
          notifications, waker, metrics,
        });
        // Before the pools close (cleanups run in reverse): running commands finish or are reported.
        cleanups.push(() => builtin.stop(config.shutdownTimeoutMs));
      }
    }

    let server: Server | null = null;
    let yoga: GraphqlServer | null = null;
    let url: string | null = null;
    if (config.role !== 'worker') {
      let cache: ResponseCache | null = null;
      if (config.responseCacheTtlMs > 0) {
        const readCache = new ResponseCache(notifications, log, config.responseCacheTtlMs);
        await readCache.start();
        cleanups.push(() => readCache.stop());
        cache = readCache;
      }
      yoga = createGraphqlServer(services, metrics, cache);
      const rest = new RestRouter(yoga);
      const httpServer = createHttpServer({
        yoga,
        events,
        tokens,
        rest,
        boot: new BootHttp(database.sql, log, { publicUrl: config.publicUrl, ramdiskKernelUrl: config.ramdiskKernelUrl, ramdiskInitrdUrl: config.ramdiskInitrdUrl, ramdiskDir: config.ramdiskDir ?? path.join(config.dataDir, 'ramdisk'), isoDir: config.isoDir, waker }),
        installer: new InstallerHttp(database.sql, secrets, log),
        metrics,
        log,
        version: await packageVersion(),
        ready: () => readiness(database, queues, log),
      });
      await new Promise<void>((resolve, reject) => {
        httpServer.once('error', reject);
        httpServer.listen(config.port, config.host, () => resolve());
      });
      server = httpServer;
      const address = httpServer.address() as AddressInfo;
      url = `http://${address.address.includes(':') ? `[${address.address}]` : address.address}:${address.port}`;
      cleanups.push(async () => {
        // Drain: stop accepting, let in-flight requests finish, then cut what is left.
        const closed = new Promise<void>((resolve) => httpServer.close(() => resolve()));
        httpServer.closeIdleConnections();
        const timer = setTimeout(() => httpServer.closeAllConnections(), config.shutdownTimeoutMs);
        await closed;
        clearTimeout(timer);
        log.info('HTTP drained');
      });
      const ws = attachGraphqlWs(httpServer, yoga, log);
      // Runs before the HTTP drain (cleanups run in reverse): open streams end first, so the drain
      // does not wait for them.
      const hub = events!;
      cleanups.push(async () => {
        await hub.stop(); // every stream completes (graphql-ws sends "complete", SSE ends)
        await ws.close();
      });
      log.info({ url, role: config.role }, 'listening');
    } else {
      log.info({ role: config.role }, 'worker role: no HTTP listener');
    }
    let metricsUrl: string | null = null;
    if (config.metricsPort !== undefined) {
      const metricsServer = createMetricsServer(metrics, log);
      await new Promise<void>((resolve, reject) => {
        metricsServer.once('error', reject);
        metricsServer.listen(config.metricsPort, config.host, () => resolve());
      });
      const address = metricsServer.address() as AddressInfo;
      metricsUrl = `http://${address.address.includes(':') ? `[${address.address}]` : address.address}:${address.port}`;
      cleanups.push(async () => {
        const closed = new Promise<void>((resolve) => metricsServer.close(() => resolve()));
        metricsServer.closeAllConnections();
        await closed;
      });
      log.info({ url: metricsUrl, role: config.role }, 'metrics listening (METRICS_PORT)');
    }
    let stopping: Promise<void> | undefined;
    return {
      config,
      services,
      database,
      queues,
      yoga,
      server,
      url,
      metricsUrl,
      metrics,
      databaseUrl,
      stop: () => (stopping ??= stopAll()),
    };
  } catch (error) {
    await stopAll();
    throw error;
  }
}
