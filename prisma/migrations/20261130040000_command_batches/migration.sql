-- Quorum batches over the destructive commands of a bulk call.
CREATE TABLE "command_batch" (
    "id" TEXT NOT NULL,
    "tenant_id" TEXT NOT NULL,
    "pool_id" TEXT NOT NULL,
    "verb" TEXT NOT NULL,
    "reason" TEXT NOT NULL,
    "node_ids" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "wipe" TEXT,
    "digest" TEXT NOT NULL,
    "quorum" INTEGER NOT NULL,
    "approvals" JSONB NOT NULL DEFAULT '[]',
    "status" TEXT NOT NULL,
    "created_by" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "command_batch_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "command_batch_pool_id_created_at_idx" ON "command_batch"("pool_id", "created_at");

CREATE TRIGGER "command_batch_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "command_batch" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
