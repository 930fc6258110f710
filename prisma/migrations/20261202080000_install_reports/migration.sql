-- What a control-node job's installer reports (issue 11 item 5): POST /controlnode/job/{id}/step,
-- /complete and /firstboot, each with the job's callback token, which only its ISO carries (the
-- seed's "No auth required" is not kept). Only the token's sha256 is kept, on the ISO it rides in:
-- revoking the ISO (the job ended) ends the token too. An OS password a completion reports goes
-- to the secret broker, never into a payload. The ISO build's outcome is recorded here as well
-- (kind iso), for the job's Building ISO step to read.
ALTER TABLE "installer_iso" ADD COLUMN "callback_token_hash" TEXT;
CREATE UNIQUE INDEX "installer_iso_callback_token_hash_key" ON "installer_iso"("callback_token_hash");

CREATE TABLE "install_report" (
    "id" BIGSERIAL NOT NULL,
    "run_id" TEXT NOT NULL,
    "iso_id" TEXT,
    "kind" TEXT NOT NULL,
    "payload" JSONB NOT NULL DEFAULT '{}',
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "install_report_pkey" PRIMARY KEY ("id")
);

CREATE INDEX "install_report_run_kind_idx" ON "install_report"("run_id", "kind", "id");

ALTER TABLE "install_report" ADD CONSTRAINT "install_report_run_id_fkey" FOREIGN KEY ("run_id") REFERENCES "workflow_run"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "install_report" ADD CONSTRAINT "install_report_iso_id_fkey" FOREIGN KEY ("iso_id") REFERENCES "installer_iso"("id") ON DELETE SET NULL ON UPDATE CASCADE;
