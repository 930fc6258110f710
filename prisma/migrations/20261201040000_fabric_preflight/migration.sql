-- The latest fabric preflight's findings (issue 10 item 7 and item 2's MTU-drift rule), one row.
-- underlay_mtu is the consensus MTU of the reuse-mode nodes' underlay bridges (0 = none: a cold
-- start, or the nodes disagree); mtu_drift lists every (node, bridge, mtu) seen when they disagree.
-- A fabric-config write is checked against this row: the vxlan_mtu must be the consensus.
-- frr_hmac_sha_capable keeps the capability probe's finding also when no fabric_config row exists
-- yet (the probe writes fabric_config's column when there is one).
CREATE TABLE "fabric_preflight" (
    "id" INTEGER NOT NULL DEFAULT 1,
    "underlay_cidr" TEXT NOT NULL,
    "underlay_mtu" INTEGER NOT NULL,
    "mtu_drift" JSONB NOT NULL DEFAULT '[]',
    "ready" BOOLEAN NOT NULL,
    "node_count" INTEGER NOT NULL,
    "frr_hmac_sha_capable" BOOLEAN,
    "at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "fabric_preflight_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "fabric_preflight_singleton" CHECK ("id" = 1),
    CONSTRAINT "fabric_preflight_mtu" CHECK ("underlay_mtu" >= 0),
    CONSTRAINT "fabric_preflight_drift_array" CHECK (jsonb_typeof("mtu_drift") = 'array')
);

CREATE TRIGGER "fabric_preflight_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "fabric_preflight" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
