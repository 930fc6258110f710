-- Two lookups the engine makes at each ramdisk boot and at each run's end, given an index that
-- matches both their key and their predicate (issue 23). Without one, a planner whose statistics
-- lag the tables' growth (1,000 machines enrolled within a minute of a fresh database: autovacuum
-- has analyzed nothing yet) scanned the whole of another partial index with the same predicate,
-- dead entries included: 1.5-1.9 ms a call instead of a few hundredths. An index with the key as
-- its condition and the same predicate always costs less than a scan of one without, whatever the
-- statistics say.
-- A node's live boot entries (issueBootEntry revokes them before a new one).
CREATE INDEX "boot_entry_live_node_idx" ON "boot_entry"("node_id") WHERE "revoked_at" IS NULL;
-- A run's queued commands (withdrawn at the run's end).
CREATE INDEX "command_queued_run_idx" ON "command"("run_id") WHERE "status" = 'queued';
