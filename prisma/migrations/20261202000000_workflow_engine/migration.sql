-- Issue 9: the workflow engine's rows. A run carries its intent (params) and its progress (the
-- step it is at, attempts, lease, wait, abort request, last error); its steps are rows of their
-- own (the operator's timeline), each destructive one with the idempotency key recorded when it
-- started. Commands name the run step that queued them. Boot entries and ramdisk reports are the
-- ramdisk callback API's rows.
ALTER TABLE "workflow_run"
    ADD COLUMN "params" JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN "step_index" INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN "attempt" INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN "resumes" INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN "lease_until" TIMESTAMPTZ(3),
    ADD COLUMN "wait_until" TIMESTAMPTZ(3),
    ADD COLUMN "waiting_for" TEXT,
    ADD COLUMN "abort_requested_at" TIMESTAMPTZ(3),
    ADD COLUMN "last_error_code" TEXT,
    ADD COLUMN "last_error_message" TEXT,
    ADD COLUMN "started_at" TIMESTAMPTZ(3),
    ADD COLUMN "batch_id" TEXT,
    ADD COLUMN "version" INTEGER NOT NULL DEFAULT 1;

CREATE TABLE "workflow_step" (
    "run_id" TEXT NOT NULL,
    "idx" INTEGER NOT NULL,
    "name" TEXT NOT NULL,
    "title" TEXT NOT NULL,
    "cleanup" BOOLEAN NOT NULL DEFAULT false,
    "destructive" BOOLEAN NOT NULL DEFAULT false,
    "status" TEXT NOT NULL DEFAULT 'pending',
    "attempts" INTEGER NOT NULL DEFAULT 0,
    "idempotency_key" TEXT,
    "state" JSONB NOT NULL DEFAULT '{}',
    "message" TEXT,
    "error_code" TEXT,
    "started_at" TIMESTAMPTZ(3),
    "finished_at" TIMESTAMPTZ(3),
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "workflow_step_pkey" PRIMARY KEY ("run_id", "idx"),
    CONSTRAINT "workflow_step_run_fkey" FOREIGN KEY ("run_id") REFERENCES "workflow_run"("id") ON DELETE CASCADE
);
CREATE UNIQUE INDEX "workflow_step_idempotency_key_key" ON "workflow_step"("idempotency_key");

ALTER TABLE "command" ADD COLUMN "run_id" TEXT, ADD COLUMN "step_idx" INTEGER;
CREATE INDEX "command_run_id_idx" ON "command"("run_id") WHERE "run_id" IS NOT NULL;

CREATE TABLE "boot_entry" (
    "id" TEXT NOT NULL,
    "node_id" TEXT NOT NULL,
    "run_id" TEXT,
    "mac" TEXT NOT NULL,
    "purpose" TEXT NOT NULL,
    "params" JSONB NOT NULL DEFAULT '{}',
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "revoked_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "boot_entry_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "boot_entry_node_fkey" FOREIGN KEY ("node_id") REFERENCES "node"("id") ON DELETE CASCADE
);
-- One live entry per MAC: the iPXE script a MAC fetches is never ambiguous.
CREATE UNIQUE INDEX "boot_entry_live_mac" ON "boot_entry"("mac") WHERE "revoked_at" IS NULL;
CREATE INDEX "boot_entry_node_id_idx" ON "boot_entry"("node_id");

-- A token minted for one boot of one entry (each iPXE fetch is a boot); only its hash is kept.
CREATE TABLE "boot_token" (
    "id" TEXT NOT NULL,
    "boot_entry_id" TEXT NOT NULL,
    "node_id" TEXT NOT NULL,
    "hash" TEXT NOT NULL,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "revoked_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "boot_token_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "boot_token_entry_fkey" FOREIGN KEY ("boot_entry_id") REFERENCES "boot_entry"("id") ON DELETE CASCADE
);
CREATE UNIQUE INDEX "boot_token_hash_key" ON "boot_token"("hash");
CREATE INDEX "boot_token_node_id_idx" ON "boot_token"("node_id");

CREATE TABLE "ramdisk_report" (
    "id" BIGSERIAL NOT NULL,
    "boot_entry_id" TEXT NOT NULL,
    "boot_token_id" TEXT NOT NULL,
    "node_id" TEXT NOT NULL,
    "run_id" TEXT,
    "kind" TEXT NOT NULL,
    "payload" JSONB NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "ramdisk_report_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "ramdisk_report_entry_fkey" FOREIGN KEY ("boot_entry_id") REFERENCES "boot_entry"("id") ON DELETE CASCADE
);
CREATE INDEX "ramdisk_report_run_kind_idx" ON "ramdisk_report"("run_id", "kind", "id");
