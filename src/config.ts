import path from 'node:path';
import os from 'node:os';
import { parseBmcNetworksEnv } from './modules/metal/bmc-networks';
import { checkDatabaseUrl } from './db/target';

/** Every environment variable the service reads, with its default. docs/configuration.md's table mirrors this. */
export interface Config {
  host: string;
  port: number;
  dataDir: string;
  databaseUrl: string | undefined;
  /**
   * DATABASE_POOL_SIZE: connections this process keeps to PostgreSQL (API, engine and built-in
   * agent share them; the LISTEN connection, the event sequencer and pg-boss have their own).
   * Default 2 x CPU cores + 2: PostgreSQL does the most work per CPU second with about that many
   * busy backends; more only wait on each other (see defaultDatabasePoolSize).
   */
  databasePoolSize: number;
  embeddedPgPort: number;
  /** As root, where the embedded PostgreSQL's binaries and clusters go when the postgres user cannot reach the clone or DATA_DIR. */
  embeddedPgSystemDir: string;
  adminToken: string | undefined;
  /** agent: a remote site agent (no HTTP listener, no database; AGENT_TOKEN and API_URL). */
  role: 'api' | 'worker' | 'all' | 'agent';
  logLevel: string;
  corsOrigins: string[];
  maxDepth: number;
  maxCost: number;
  maxPageSize: number;
  tokenCacheMs: number;
  /** Events older than this are pruned (EVENT_RETENTION_HOURS, default 7 days). */
  eventRetentionHours: number;
  /** Events a subscriber may fall behind before it is closed with its last cursor. */
  subscriberBuffer: number;
  agentHeartbeatMs: number;
  /** How long an agent's claim on a command holds without a heartbeat renewing it (AGENT_LEASE_MS). */
  agentLeaseMs: number;
  /** The worker's built-in agent for every site no remote agent serves (BUILTIN_AGENT, `off` disables). */
  builtinAgent: boolean;
  /** How often an agent (built-in or remote) asks for commands, and the lease sweep's period. */
  agentPollMs: number;
  /** Commands one agent runs at once. */
  agentConcurrency: number;
  /** WORKFLOW_ENGINE: whether this worker advances workflow runs (off: its other jobs only). */
  workflowEngine: boolean;
  /** PG_STAT_STATEMENTS=on: the embedded PostgreSQL loads pg_stat_statements (what the statements cost; the lifecycle bench's --pg-stats). */
  pgStatStatements: boolean;
  /** WORKFLOW_LEASE_MS: a worker's lease on a run (unset: jobs/engine.ts LEASE_MS, 60 s); a dead worker's runs are taken up after it. */
  workflowLeaseMs: number | undefined;
  /** ROLE=agent: the service's base URL and the agent's token (AGENT_TOKEN, or AGENT_TOKEN_FILE). */
  apiUrl: string | undefined;
  agentToken: string | undefined;
  agentTokenFile: string | undefined;
  responseCacheTtlMs: number;
  shutdownTimeoutMs: number;
  secretKey: string | undefined;
  /** Registered modules: 'all', or a list of metal, provision, fabric. */
  modules: 'all' | string[];
  secretKeyFile: string | undefined;
  bossPollSeconds: number;
  /** Fabric rollouts: how long a node's BGP neighbours may take to reach Established. */
  fabricBgpWaitMs: number;
  /** Fabric rollouts: SSH connect + handshake budget, and each node's whole budget for its steps. */
  fabricSshConnectTimeoutMs: number;
  fabricNodeTimeoutMs: number;
  /** The URL machines reach this service at (iPXE scripts carry it to the ramdisk); unset: the address a request came in on. */
  publicUrl: string | undefined;
  /** The ramdisk's kernel and initrd, as iPXE fetches them; unset: under publicUrl at /boot/ramdisk/. */
  ramdiskKernelUrl: string | undefined;
  ramdiskInitrdUrl: string | undefined;
  /** Where the service finds the ramdisk it serves at /boot/ramdisk/ (vmlinuz, initrd.img); unset: DATA_DIR/ramdisk. */
  ramdiskDir: string | undefined;
  /** NetBox (control-node inventory): its base URL, and its API token (NETBOX_TOKEN, or NETBOX_TOKEN_FILE). */
  netboxUrl: string | undefined;
  netboxToken: string | undefined;
  netboxTokenFile: string | undefined;
  /** One NetBox request's timeout (headers, and each gap in a body). */
  netboxTimeoutMs: number;
  /** How long a device's NetBox inventory is reused before NetBox is asked again. */
  netboxCacheMs: number;
  /** Where installer ISOs are built and served from (ISO_DIR; unset: DATA_DIR/iso); client paths stay inside it. */
  isoDir: string;
  /**
   * The pool (and so tenant and site) the control-node API records machines in that metal does not
   * know yet: register's control node, provision's new BMC addresses (CONTROLNODE_POOL_ID).
   */
  controlnodePoolId: string | undefined;
  /**
   * How the BMCs the control-node API records are trusted over TLS (their nodes' driverOptions):
   * the CA certificate in CONTROLNODE_BMC_CA_FILE (PEM), or CONTROLNODE_BMC_INSECURE=true (no
   * verification, said so in each node's driverOptions); neither: the system's CAs.
   */
  controlnodeBmcCaFile: string | undefined;
  controlnodeBmcInsecure: boolean;
  /**
   * The BMC user and password provision enrolls a BMC address with that no node has yet
   * (CONTROLNODE_BMC_CREDENTIALS_FILE: one line `user:password`, read at each use so a rotated
   * file is picked up); unset, such an address is NOT_FOUND and has to be registered or enrolled.
   */
  controlnodeBmcCredentialsFile: string | undefined;
  /** The installer's base files (linux, initrd.gz, isolinux.bin, ldlinux.c32): INSTALLER_BASE_DIR, else Debian's packages. */
  installerBaseDir: string | undefined;
  /** Installer ISOs built at once per worker process (CONTROLNODE_ISO_CONCURRENCY). */
  controlnodeIsoConcurrency: number;
  /** A control-node job with no installer step report for this long fails as stuck (CONTROLNODE_INSTALL_STUCK_S). */
  controlnodeInstallStuckS: number;
  /**
   * BMC_NETWORKS: the CIDRs a BMC may be at for every site whose own bmcNetworks are empty (comma
   * separated); none: any address but loopback, link-local, unspecified, multicast and broadcast.
   */
  bmcNetworks: string[];
  /** ISO_DIR_MAX_BYTES: what installer ISOs may take in ISO_DIR in all (0: no cap); a new one that would not fit is refused (ISO_DIR_FULL). */
  isoDirMaxBytes: number;
  /**
   * METRICS_PORT: a listener of its own serving only /metrics and /healthz (on HOST), in any role;
   * the only way to scrape a ROLE=worker process (it has no other). Unset: none (api and all serve
   * /metrics on PORT as well).
   */
  metricsPort: number | undefined;
  /** METRICS_CACHE_MS: how long one database read of the domain gauges serves scrapes (default 5 s). */
  metricsCacheMs: number;
}

/**
 * Two connections per core and two more: on the 2-core bench host the lifecycle bench (1,000
 * machines) spent 3.06 ms of PostgreSQL CPU per step with 6 connections against 3.66 ms with 20
 * (the old fixed size), and finished sooner: the extra backends only took turns on the same two
 * cores, waiting on each other's row locks and switching in and out. Work beyond the pool waits
 * in the process, where it costs nothing.
 */
export function defaultDatabasePoolSize(cores = os.availableParallelism()): number {
  return 2 * Math.max(1, cores) + 2;
}

function intEnv(env: NodeJS.ProcessEnv, name: string, fallback: number, min = 0): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) {
    throw new Error(`${name} must be an integer >= ${min}, got "${raw}"`);
  }
  return value;
}

/** DATABASE_POOL_SIZE: 1..1000 (PostgreSQL's max_connections bounds it anyway). */
function poolSizeEnv(env: NodeJS.ProcessEnv): number {
  const value = intEnv(env, 'DATABASE_POOL_SIZE', defaultDatabasePoolSize(), 1);
  if (value > 1000) throw new Error(`DATABASE_POOL_SIZE must be an integer from 1 to 1000, got "${env.DATABASE_POOL_SIZE}"`);
  return value;
}

/** A TCP port (0: any free one, for tests). */
function portEnv(env: NodeJS.ProcessEnv, name: string): number {
  const value = intEnv(env, name, 0);
  if (value > 65535) throw new Error(`${name} must be a TCP port (0..65535), got "${env[name]}"`);
  return value;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const role = (env.ROLE ?? 'all') as Config['role'];
  if (!['api', 'worker', 'all', 'agent'].includes(role)) {
    throw new Error(`ROLE must be api, worker, all or agent, got "${env.ROLE}"`);
  }
  const engine = env.WORKFLOW_ENGINE ?? '';
  if (!['', 'on', 'off'].includes(engine)) throw new Error(`WORKFLOW_ENGINE must be on or off, got "${engine}"`);
  const leaseRaw = env.WORKFLOW_LEASE_MS;
  const workflowLeaseMs = leaseRaw === undefined || leaseRaw === '' ? undefined : Number(leaseRaw);
  if (workflowLeaseMs !== undefined && (!Number.isInteger(workflowLeaseMs) || workflowLeaseMs < 500 || workflowLeaseMs > 3_600_000)) {
    throw new Error(`WORKFLOW_LEASE_MS must be an integer 500..3600000, got "${leaseRaw}"`);
  }
  const stats = (env.PG_STAT_STATEMENTS ?? 'off').trim().toLowerCase();
  if (!['on', 'off'].includes(stats)) throw new Error(`PG_STAT_STATEMENTS must be on or off, got "${env.PG_STAT_STATEMENTS}"`);
  const netboxUrl = env.NETBOX_URL?.trim() || undefined;
  if (netboxUrl) {
    let parsed: URL | null = null;
    try {
      parsed = new URL(netboxUrl);
    } catch {
      parsed = null;
    }
    if (!parsed || !['http:', 'https:'].includes(parsed.protocol) || parsed.username || parsed.password) {
      throw new Error('NETBOX_URL must be an http(s) URL without credentials (the token goes in NETBOX_TOKEN or NETBOX_TOKEN_FILE)');
    }
  }
  if (env.NETBOX_TOKEN && env.NETBOX_TOKEN_FILE) throw new Error('set NETBOX_TOKEN or NETBOX_TOKEN_FILE, not both');
  const bmcInsecure = (env.CONTROLNODE_BMC_INSECURE ?? 'false').trim().toLowerCase();
  if (!['true', 'false', '1', '0', 'on', 'off', ''].includes(bmcInsecure)) throw new Error(`CONTROLNODE_BMC_INSECURE must be true or false, got "${env.CONTROLNODE_BMC_INSECURE}"`);
  const controlnodeBmcInsecure = ['true', '1', 'on'].includes(bmcInsecure);
  if (controlnodeBmcInsecure && env.CONTROLNODE_BMC_CA_FILE) throw new Error('set CONTROLNODE_BMC_CA_FILE or CONTROLNODE_BMC_INSECURE=true, not both');
  // A multi-host URL is parsed here (node-postgres cannot): a malformed one stops the start, naming the variable, not its value.
  if (env.DATABASE_URL) checkDatabaseUrl(env.DATABASE_URL);
  const builtin = (env.BUILTIN_AGENT ?? 'on').trim().toLowerCase();
  if (!['on', 'off', 'true', 'false', '1', '0'].includes(builtin)) throw new Error(`BUILTIN_AGENT must be on or off, got "${env.BUILTIN_AGENT}"`);
  return {
    host: env.HOST ?? '127.0.0.1',
    port: intEnv(env, 'PORT', 4000),
    dataDir: path.resolve(env.DATA_DIR ?? './.data'),
    databaseUrl: env.DATABASE_URL || undefined,
    embeddedPgPort: intEnv(env, 'EMBEDDED_PG_PORT', 54329, 1),
    databasePoolSize: poolSizeEnv(env),
    embeddedPgSystemDir: path.resolve(env.EMBEDDED_PG_SYSTEM_DIR || '/var/lib/metal-control-plane'),
    adminToken: env.ADMIN_TOKEN || undefined,
    role,
    logLevel: env.LOG_LEVEL ?? 'info',
    corsOrigins: (env.CORS_ORIGINS ?? '').split(',').map((o) => o.trim()).filter(Boolean),
    maxDepth: intEnv(env, 'GRAPHQL_MAX_DEPTH', 15, 1),
    maxCost: intEnv(env, 'GRAPHQL_MAX_COST', 100000, 1),
    maxPageSize: intEnv(env, 'MAX_PAGE_SIZE', 500, 1),
    tokenCacheMs: intEnv(env, 'TOKEN_CACHE_MS', 2000),
    eventRetentionHours: intEnv(env, 'EVENT_RETENTION_HOURS', 168, 1),
    subscriberBuffer: intEnv(env, 'SUBSCRIBER_BUFFER', 10000, 1),
    agentHeartbeatMs: intEnv(env, 'AGENT_HEARTBEAT_MS', 60000, 1),
    agentLeaseMs: intEnv(env, 'AGENT_LEASE_MS', 120000, 1000),
    builtinAgent: ['on', 'true', '1'].includes(builtin),
    agentPollMs: intEnv(env, 'AGENT_POLL_MS', 1000, 50),
    workflowEngine: engine !== 'off',
    pgStatStatements: stats === 'on',
    workflowLeaseMs,
    agentConcurrency: intEnv(env, 'AGENT_CONCURRENCY', 64, 1),
    apiUrl: env.API_URL || undefined,
    agentToken: env.AGENT_TOKEN || undefined,
    agentTokenFile: env.AGENT_TOKEN_FILE || undefined,
    responseCacheTtlMs: intEnv(env, 'RESPONSE_CACHE_TTL_MS', 10000),
    shutdownTimeoutMs: intEnv(env, 'SHUTDOWN_TIMEOUT_MS', 10000),
    secretKey: env.SECRET_KEY || undefined,
    modules: env.MODULES && env.MODULES.trim() !== 'all' ? env.MODULES.split(',').map((m) => m.trim()).filter(Boolean) : 'all',
    secretKeyFile: env.SECRET_KEY_FILE || undefined,
    bossPollSeconds: intEnv(env, 'QUEUE_POLL_SECONDS', 1, 1),
    fabricBgpWaitMs: intEnv(env, 'FABRIC_BGP_WAIT_MS', 120000, 1),
    fabricSshConnectTimeoutMs: intEnv(env, 'FABRIC_SSH_CONNECT_TIMEOUT_MS', 10000, 1),
    fabricNodeTimeoutMs: intEnv(env, 'FABRIC_NODE_TIMEOUT_MS', 900000, 1),
    publicUrl: env.PUBLIC_URL || undefined,
    ramdiskKernelUrl: env.RAMDISK_KERNEL_URL || undefined,
    ramdiskInitrdUrl: env.RAMDISK_INITRD_URL || undefined,
    ramdiskDir: env.RAMDISK_DIR ? path.resolve(env.RAMDISK_DIR) : undefined,
    netboxUrl,
    netboxToken: env.NETBOX_TOKEN?.trim() || undefined,
    netboxTokenFile: env.NETBOX_TOKEN_FILE ? path.resolve(env.NETBOX_TOKEN_FILE) : undefined,
    netboxTimeoutMs: intEnv(env, 'NETBOX_TIMEOUT_MS', 10000, 100),
    netboxCacheMs: intEnv(env, 'NETBOX_CACHE_MS', 15000),
    isoDir: path.resolve(env.ISO_DIR || path.join(env.DATA_DIR ?? './.data', 'iso')),
    controlnodePoolId: env.CONTROLNODE_POOL_ID?.trim() || undefined,
    controlnodeBmcCaFile: env.CONTROLNODE_BMC_CA_FILE ? path.resolve(env.CONTROLNODE_BMC_CA_FILE) : undefined,
    controlnodeBmcInsecure,
    controlnodeBmcCredentialsFile: env.CONTROLNODE_BMC_CREDENTIALS_FILE ? path.resolve(env.CONTROLNODE_BMC_CREDENTIALS_FILE) : undefined,
    installerBaseDir: env.INSTALLER_BASE_DIR ? path.resolve(env.INSTALLER_BASE_DIR) : undefined,
    controlnodeIsoConcurrency: intEnv(env, 'CONTROLNODE_ISO_CONCURRENCY', 2, 1),
    controlnodeInstallStuckS: intEnv(env, 'CONTROLNODE_INSTALL_STUCK_S', 1800, 10),
    bmcNetworks: parseBmcNetworksEnv(env.BMC_NETWORKS),
    isoDirMaxBytes: intEnv(env, 'ISO_DIR_MAX_BYTES', 8 * 1024 ** 3),
    metricsPort: env.METRICS_PORT ? portEnv(env, 'METRICS_PORT') : undefined,
    metricsCacheMs: intEnv(env, 'METRICS_CACHE_MS', 5000),
  };
}

export const isModuleRegistered = (config: Pick<Config, 'modules'>, module: string): boolean =>
  config.modules === 'all' || config.modules.includes(module);
