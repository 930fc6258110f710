-- The switch re-configuration ack gate's audit record (issue 10 item 3): who last acknowledged
-- (or, holding fabric:admin, skipped) a VTEP pool change, when, for which NOS and snippet hash.
-- Only the latest is kept on the row; every ack is also in the fabric.config.updated event.
-- kind 'acked': by = the operator's acked_by; 'skipped': by = the token's name, nos/hash NULL.
ALTER TABLE "fabric_config"
    ADD COLUMN "last_switch_ack_kind" TEXT,
    ADD COLUMN "last_switch_ack_by" TEXT,
    ADD COLUMN "last_switch_ack_at" TIMESTAMPTZ(3),
    ADD COLUMN "last_switch_ack_nos" TEXT,
    ADD COLUMN "last_switch_ack_hash" TEXT,
    ADD CONSTRAINT "fabric_config_switch_ack" CHECK (
        ("last_switch_ack_kind" IS NULL AND "last_switch_ack_by" IS NULL AND "last_switch_ack_at" IS NULL)
        OR ("last_switch_ack_kind" = 'acked' AND "last_switch_ack_by" IS NOT NULL AND "last_switch_ack_at" IS NOT NULL
            AND "last_switch_ack_nos" IS NOT NULL AND "last_switch_ack_hash" IS NOT NULL)
        OR ("last_switch_ack_kind" = 'skipped' AND "last_switch_ack_by" IS NOT NULL AND "last_switch_ack_at" IS NOT NULL));
