-- Site agents and the commands metal queues for them (bmc.power first).
CREATE TABLE "site_agent" (
    "id" TEXT NOT NULL,
    "tenant_id" TEXT NOT NULL,
    "site_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "token_id" TEXT NOT NULL,
    "last_heartbeat_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "site_agent_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "site_agent_token_id_key" ON "site_agent"("token_id");
CREATE UNIQUE INDEX "site_agent_site_id_name_key" ON "site_agent"("site_id", "name");

CREATE TABLE "command" (
    "id" TEXT NOT NULL,
    "tenant_id" TEXT NOT NULL,
    "site_id" TEXT NOT NULL,
    "node_id" TEXT,
    "kind" TEXT NOT NULL,
    "params" JSONB NOT NULL DEFAULT '{}',
    "status" TEXT NOT NULL,
    "idempotency_key" TEXT,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "claimed_by" TEXT,
    "claimed_at" TIMESTAMPTZ(3),
    "result" JSONB,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "command_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "command_idempotency_key_key" ON "command"("idempotency_key");
CREATE INDEX "command_site_id_status_created_at_idx" ON "command"("site_id", "status", "created_at");

CREATE TRIGGER "site_agent_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "site_agent" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
CREATE TRIGGER "command_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "command" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
