-- When a destructive batch's per-node reconciler jobs were queued: at once for a batch without
-- approver keys, at its approval otherwise (the metal.batch job, src/modules/metal/bulk.ts). Set
-- in the same statement that queues them, so a second release of the batch queues nothing.
ALTER TABLE "command_batch" ADD COLUMN "released_at" TIMESTAMPTZ(3);
