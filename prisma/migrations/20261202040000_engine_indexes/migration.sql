-- Issue 9, the lifecycle bench's statements that read whole tables once a thousand machines move
-- (pg_stat_statements over 300 machines enrolled to ready):
-- * a run's end revokes its boot entries by run (endRun), then their tokens by entry; a new boot
--   token counts its entry's tokens: each read every row of boot_entry / boot_token;
-- * a run's first step withdraws the queued commands of the node's older runs (createSteps): it
--   read every queued command of the service (about 900 under the bench's backlog), 0.5 ms each.
CREATE INDEX "boot_entry_live_run_idx" ON "boot_entry"("run_id") WHERE "revoked_at" IS NULL;
CREATE INDEX "boot_token_boot_entry_id_idx" ON "boot_token"("boot_entry_id");
CREATE INDEX "command_queued_node_idx" ON "command"("node_id") WHERE "status" = 'queued';
-- * an agent's claim takes the oldest queued commands: it sorted every queued command first.
CREATE INDEX "command_queued_created_idx" ON "command"("created_at") WHERE "status" = 'queued';
