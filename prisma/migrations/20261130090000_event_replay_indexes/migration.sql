-- Replays read "the events after cursor C that this subscriber may see": without an index that
-- leads with what the subscriber filters on, a small tenant's replay (or one job's, or one node's)
-- walked every retained event after C. One index per filter a replay always has: every non-admin
-- subscriber filters by tenant; node pages by node; job and run progress by subject.
--
-- All of them are partial on `seq IS NOT NULL`, and so is the seq index itself: a row gets its
-- entries when the sequencer numbers it, not when a verb inserts it. The verb's statement (a
-- bulk call inserts 10,000 events) then pays for the primary key, the BRIN and the small
-- "unnumbered" index only, and the stream's indexes are written off the request path. Replays
-- always say `seq > C`, which implies the predicate.
DROP INDEX IF EXISTS "event_seq_key";
CREATE UNIQUE INDEX "event_seq_key" ON "event"("seq") WHERE "seq" IS NOT NULL;
CREATE INDEX "event_tenant_id_seq_idx" ON "event"("tenant_id", "seq") WHERE "seq" IS NOT NULL;
CREATE INDEX "event_node_id_seq_idx" ON "event"("node_id", "seq") WHERE "seq" IS NOT NULL;
CREATE INDEX "event_subject_seq_idx" ON "event"("subject", "seq") WHERE "seq" IS NOT NULL;
