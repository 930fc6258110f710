import type { Logger } from 'pino';
import type { PrismaClient } from './generated/prisma/client';
import type { Principal } from './auth/permissions';
import type { TokenStore } from './auth/tokens';
import type { Config } from './config';
import type { Sql } from './db/sql';
import type { Queues } from '../jobs/registry';
import { unauthenticated } from './errors';
import type { SecretBroker } from '../clients/secrets/broker';
import type { EventHub } from './events/hub';
import type { InventoryService } from './modules/provision/inventory';
import type { DomainCounters } from './ops/metrics';

/** Long-lived services every request can use. */
export interface Services {
  config: Config;
  prisma: PrismaClient;
  /** Plain SQL on Prisma's pool, for the hot paths (see src/db/sql.ts). */
  sql: Sql;
  tokens: TokenStore;
  queues: Queues | null;
  /** null when no secret broker is configured (inline credentials are then INVALID_CONFIG). */
  secrets: SecretBroker | null;
  /** The process's event stream (null in worker-only processes: they serve no subscriptions). */
  events: EventHub | null;
  /** The control-node inventory from NetBox (NETBOX_URL); null in processes that serve no API. */
  inventory: InventoryService | null;
  log: Logger;
  /** The process's metrics (src/ops/metrics.ts): what the agent API counts (command results, sweeps). */
  metrics?: DomainCounters | null;
}

/** Per request (or per subscription) context. */
export interface Context extends Services {
  requestId: string;
  principal: Principal | null;
  /** The bearer token the principal came from: streams re-check it and end when it is revoked. */
  token: string | null;
  /** Set by streaming transports that can report how much they have not sent yet (WebSocket). */
  transport?: { backlog(): number };
}

/** The authenticated principal, or UNAUTHENTICATED. */
export function requirePrincipal(ctx: Context): Principal {
  if (!ctx.principal) throw unauthenticated();
  return ctx.principal;
}
