-- Every event row is written twice (the insert, then the sequencer's seq update, which cannot be
-- HOT since seq is indexed), so each index on event costs two entries per event. The stream reads
-- by seq; nothing reads by (tenant_id, id) or (node_id, id). Replays filtered by tenant or node
-- walk the seq index from their cursor, bounded by retention.
DROP INDEX IF EXISTS "event_tenant_id_id_idx";
DROP INDEX IF EXISTS "event_node_id_id_idx";
