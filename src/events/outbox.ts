import type { Tx } from '../db/client';

export interface OutboxEvent {
  type: string;
  tenantId: string | null;
  siteId?: string | null;
  poolId?: string | null;
  nodeId?: string | null;
  /** What the event is about, e.g. the node id. */
  subject: string;
  payload: Record<string, unknown>;
}

/** Keys that name a credential; an event may say that one is set (`bgpPasswordIsSet`), never carry it. */
const CREDENTIAL_KEY = /^(password|passphrase|secret|credentials?|private_?key|token|bmc_?password|os_?password|bgp_?password|ospf_?auth_?key)$/i;
const MAX_DEPTH = 16;

/**
 * The outbox's one rule, enforced for every writer (publish and the node store's statements):
 * no payload holds a credential, a secret:// reference or a PEM/OpenSSH private key. Events are
 * streamed to every subscriber of their channel and kept for replay, so a leak there is forever.
 * Throws (a programming error, never the caller's input) naming the path, never the value.
 */
export function checkEventPayload(value: unknown, path = 'payload', depth = 0): void {
  if (depth > MAX_DEPTH) throw new Error(`event ${path}: nested deeper than ${MAX_DEPTH}`);
  if (typeof value === 'string') {
    if (value.startsWith('secret://') || value.includes('PRIVATE KEY-----')) throw new Error(`event ${path}: holds a secret reference or a private key`);
    return;
  }
  if (value === null || typeof value !== 'object') return;
  if (Array.isArray(value)) {
    value.forEach((v, i) => checkEventPayload(v, `${path}[${i}]`, depth + 1));
    return;
  }
  for (const [key, v] of Object.entries(value as Record<string, unknown>)) {
    if (CREDENTIAL_KEY.test(key) && v !== null && v !== undefined && typeof v !== 'boolean') {
      throw new Error(`event ${path}.${key}: a credential never goes into an event`);
    }
    checkEventPayload(v, `${path}.${key}`, depth + 1);
  }
}

/**
 * Writes an event row inside the caller's transaction: it commits with the change it reports or
 * not at all. Node events are written by the node store (src/modules/metal/node-store.ts), with
 * the change they report; this is for the others (the fabric's, ...).
 */
export async function publish(tx: Tx, event: OutboxEvent): Promise<bigint> {
  checkEventPayload(event.payload);
  const row = await tx.event.create({
    data: {
      type: event.type,
      tenantId: event.tenantId,
      siteId: event.siteId ?? null,
      poolId: event.poolId ?? null,
      nodeId: event.nodeId ?? null,
      subject: event.subject,
      payload: event.payload as object,
    },
    select: { id: true },
  });
  return row.id;
}
