-- Foundation: tenancy, sites, pools, hardware profiles, metal nodes, API tokens, outbox, secrets.

CREATE TYPE "ProvisionState" AS ENUM ('adopting', 'adopted', 'enrolling', 'inspecting', 'ready', 'commissioning', 'deploying', 'deployed', 'releasing', 'rescue', 'failed', 'retiring', 'retired');

CREATE TYPE "ScopeType" AS ENUM ('platform', 'tenant', 'site', 'pool', 'node');

CREATE TABLE "tenant" (
    "id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "tenant_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "tenant_name_key" ON "tenant"("name");

CREATE TABLE "site" (
    "id" TEXT NOT NULL,
    "tenant_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "site_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "site_tenant_id_name_key" ON "site"("tenant_id", "name");

CREATE TABLE "pool" (
    "id" TEXT NOT NULL,
    "tenant_id" TEXT NOT NULL,
    "site_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "policy" JSONB NOT NULL DEFAULT '{}',
    "version" INTEGER NOT NULL DEFAULT 1,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "pool_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "pool_site_id_name_key" ON "pool"("site_id", "name");
CREATE INDEX "pool_tenant_id_idx" ON "pool"("tenant_id");

CREATE TABLE "hardware_profile" (
    "id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "driver_bindings" JSONB NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "hardware_profile_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "hardware_profile_name_key" ON "hardware_profile"("name");

CREATE TABLE "node" (
    "id" TEXT NOT NULL,
    "tenant_id" TEXT NOT NULL,
    "site_id" TEXT NOT NULL,
    "pool_id" TEXT NOT NULL,
    "name" TEXT,
    "provision_state" "ProvisionState" NOT NULL,
    "failed_from" "ProvisionState",
    "last_error_code" TEXT,
    "last_error_message" TEXT,
    "maintenance" BOOLEAN NOT NULL DEFAULT false,
    "bmc_address" TEXT NOT NULL,
    "bmc_driver" TEXT NOT NULL,
    "bmc_driver_options" JSONB NOT NULL DEFAULT '{}',
    "bmc_credentials_ref" TEXT,
    "addresses" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "macs" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "product_uuid" UUID,
    "hardware_profile_id" TEXT,
    "driver_bindings" JSONB NOT NULL DEFAULT '{}',
    "inventory" JSONB,
    "profile_id" TEXT,
    "profile_version" INTEGER,
    "role" TEXT,
    "workflow_id" TEXT,
    "version" INTEGER NOT NULL DEFAULT 1,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "node_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "node_tenant_id_id_idx" ON "node"("tenant_id", "id");
CREATE INDEX "node_pool_id_id_idx" ON "node"("pool_id", "id");
CREATE INDEX "node_site_id_id_idx" ON "node"("site_id", "id");
CREATE INDEX "node_provision_state_idx" ON "node"("provision_state");

CREATE TABLE "api_token" (
    "id" TEXT NOT NULL,
    "tenant_id" TEXT,
    "name" TEXT NOT NULL,
    "hash" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" TIMESTAMPTZ(3),
    "revoked_at" TIMESTAMPTZ(3),
    "created_by" TEXT,
    CONSTRAINT "api_token_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "api_token_hash_key" ON "api_token"("hash");
CREATE INDEX "api_token_tenant_id_idx" ON "api_token"("tenant_id");

CREATE TABLE "api_grant" (
    "id" TEXT NOT NULL,
    "token_id" TEXT NOT NULL,
    "permission" TEXT NOT NULL,
    "scope_type" "ScopeType" NOT NULL,
    "scope_id" TEXT,
    "site_id" TEXT,
    "pool_id" TEXT,
    CONSTRAINT "api_grant_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "api_grant_token_id_idx" ON "api_grant"("token_id");

CREATE TABLE "event" (
    "id" BIGSERIAL NOT NULL,
    "type" TEXT NOT NULL,
    "tenant_id" TEXT,
    "site_id" TEXT,
    "pool_id" TEXT,
    "node_id" TEXT,
    "subject" TEXT NOT NULL,
    "payload" JSONB NOT NULL DEFAULT '{}',
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "event_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "event_tenant_id_id_idx" ON "event"("tenant_id", "id");
CREATE INDEX "event_node_id_id_idx" ON "event"("node_id", "id");
CREATE INDEX "event_created_at_idx" ON "event"("created_at");

CREATE TABLE "secret" (
    "id" TEXT NOT NULL,
    "tenant_id" TEXT,
    "ciphertext" BYTEA NOT NULL,
    "iv" BYTEA NOT NULL,
    "tag" BYTEA NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "secret_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "secret_tenant_id_idx" ON "secret"("tenant_id");

ALTER TABLE "site" ADD CONSTRAINT "site_tenant_id_fkey" FOREIGN KEY ("tenant_id") REFERENCES "tenant"("id") ON DELETE RESTRICT ON UPDATE CASCADE;
ALTER TABLE "pool" ADD CONSTRAINT "pool_tenant_id_fkey" FOREIGN KEY ("tenant_id") REFERENCES "tenant"("id") ON DELETE RESTRICT ON UPDATE CASCADE;
ALTER TABLE "pool" ADD CONSTRAINT "pool_site_id_fkey" FOREIGN KEY ("site_id") REFERENCES "site"("id") ON DELETE RESTRICT ON UPDATE CASCADE;
ALTER TABLE "node" ADD CONSTRAINT "node_tenant_id_fkey" FOREIGN KEY ("tenant_id") REFERENCES "tenant"("id") ON DELETE RESTRICT ON UPDATE CASCADE;
ALTER TABLE "node" ADD CONSTRAINT "node_site_id_fkey" FOREIGN KEY ("site_id") REFERENCES "site"("id") ON DELETE RESTRICT ON UPDATE CASCADE;
ALTER TABLE "node" ADD CONSTRAINT "node_pool_id_fkey" FOREIGN KEY ("pool_id") REFERENCES "pool"("id") ON DELETE RESTRICT ON UPDATE CASCADE;
ALTER TABLE "node" ADD CONSTRAINT "node_hardware_profile_id_fkey" FOREIGN KEY ("hardware_profile_id") REFERENCES "hardware_profile"("id") ON DELETE SET NULL ON UPDATE CASCADE;
ALTER TABLE "api_token" ADD CONSTRAINT "api_token_tenant_id_fkey" FOREIGN KEY ("tenant_id") REFERENCES "tenant"("id") ON DELETE RESTRICT ON UPDATE CASCADE;
ALTER TABLE "api_grant" ADD CONSTRAINT "api_grant_token_id_fkey" FOREIGN KEY ("token_id") REFERENCES "api_token"("id") ON DELETE CASCADE ON UPDATE CASCADE;
