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

/**
 * Writes an event row inside the caller's transaction: it commits with the change it reports or
 * not at all. Payloads must never hold a credential (only secret:// references, and not even those).
 */
export async function publish(tx: Tx, event: OutboxEvent): Promise<bigint> {
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
