-- The write path of a verb: a bulk call over 10,000 nodes pays for every index of node and event
-- 10,000 times (npm run bench -- bulk measures it).
--
-- A state change that updates no indexed column, on a page with room for the new row version, is a
-- HOT update: no index entry is written at all (about 3.5x cheaper here). So:
-- * node.provision_state loses its index: low-cardinality, and every page query narrows by tenant,
--   pool or site first; it cost an index write per state change and served no query. Keep the
--   columns a verb changes (provision_state, version, updated_at, failed_from, last_error_*,
--   maintenance, workflow_id, profile_*) out of indexes.
-- * node pages are filled to half: node rows are few (thousands to ~100k) and small, and a bulk
--   verb changes every row of a page at once, so each row needs room for its next version.
DROP INDEX IF EXISTS "node_provision_state_idx";
ALTER TABLE "node" SET (fillfactor = 50);
-- Events are appended in time order: a BRIN index finds the ones older than the retention period
-- (the pruning job) at a fraction of a btree's write cost.
DROP INDEX IF EXISTS "event_created_at_idx";
CREATE INDEX "event_created_at_brin_idx" ON "event" USING BRIN ("created_at");
