-- Installer ISOs of control-node jobs (issue 11 item 3): the file a job built under ISO_DIR, served
-- at /boot/iso/<token>/<name>.iso to the BMC that mounts it. BMCs fetch virtual media without
-- credentials, so the URL's token is the secret: only its sha256 is kept. The URL stops working
-- when the ISO is revoked (its job ended) or expires.
CREATE TABLE "installer_iso" (
    "id" TEXT NOT NULL,
    "node_id" TEXT,
    "run_id" TEXT,
    "token_hash" TEXT NOT NULL,
    "file_name" TEXT NOT NULL,
    "bytes" BIGINT NOT NULL,
    "sha256" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "revoked_at" TIMESTAMPTZ(3),

    CONSTRAINT "installer_iso_pkey" PRIMARY KEY ("id")
);

CREATE UNIQUE INDEX "installer_iso_token_hash_key" ON "installer_iso"("token_hash");
CREATE INDEX "installer_iso_run_id_idx" ON "installer_iso"("run_id");
CREATE INDEX "installer_iso_node_id_idx" ON "installer_iso"("node_id");

ALTER TABLE "installer_iso" ADD CONSTRAINT "installer_iso_node_id_fkey" FOREIGN KEY ("node_id") REFERENCES "node"("id") ON DELETE SET NULL ON UPDATE CASCADE;
ALTER TABLE "installer_iso" ADD CONSTRAINT "installer_iso_run_id_fkey" FOREIGN KEY ("run_id") REFERENCES "workflow_run"("id") ON DELETE SET NULL ON UPDATE CASCADE;
