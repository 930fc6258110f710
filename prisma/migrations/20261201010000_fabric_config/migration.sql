-- The cluster-wide network fabric configuration (issue 10, seed 004 /controlnode/fabric-config).
-- One row at most: the CHECK on id makes a second row impossible whoever writes it.
-- bgp_password_ref / ospf_auth_key_ref hold secret:// references to the broker, never a password.
-- frr_hmac_sha_capable is tri-state: NULL = never probed, set only by the preflight probe.
-- rollout_status '' reads as ready (rows that predate the column, as the seed says).
CREATE TABLE "fabric_config" (
    "id" INTEGER NOT NULL DEFAULT 1,
    "as" BIGINT NOT NULL DEFAULT 0,
    "fabric_switch_as" BIGINT NOT NULL DEFAULT 0,
    "advertise_all_vni" BOOLEAN NOT NULL DEFAULT true,
    "bfd_enabled" BOOLEAN NOT NULL DEFAULT false,
    "external_route_reflector" BOOLEAN NOT NULL DEFAULT false,
    "bgp_password_ref" TEXT,
    "fabric_switch_name" TEXT NOT NULL DEFAULT '',
    "fabric_switch_nos" TEXT NOT NULL DEFAULT '',
    "fabric_switch_peering_ip" TEXT NOT NULL DEFAULT '',
    "fabric_switch_role" TEXT NOT NULL DEFAULT '',
    "management_cidr" TEXT NOT NULL DEFAULT '',
    "router_id_base" TEXT NOT NULL DEFAULT '',
    "router_id_prefix_len" INTEGER NOT NULL DEFAULT 0,
    "ospf_enabled" BOOLEAN NOT NULL DEFAULT false,
    "ospf_area" TEXT NOT NULL DEFAULT '0.0.0.0',
    "ospf_fabric_interface" TEXT NOT NULL DEFAULT '',
    "ospf_hello_interval" INTEGER NOT NULL DEFAULT 0,
    "ospf_dead_interval" INTEGER NOT NULL DEFAULT 0,
    "ospf_auto_ref_bw" INTEGER NOT NULL DEFAULT 0,
    "ospf_auth_type" TEXT NOT NULL DEFAULT '',
    "ospf_auth_key_id" INTEGER NOT NULL DEFAULT 1,
    "ospf_auth_key_ref" TEXT,
    "expected_nodes" INTEGER NOT NULL DEFAULT 0,
    "expected_vms" INTEGER NOT NULL DEFAULT 0,
    "vxlan_mtu" INTEGER NOT NULL DEFAULT 1500,
    "public_mtu" INTEGER NOT NULL DEFAULT 0,
    "rollout_status" TEXT NOT NULL DEFAULT '',
    "frr_hmac_sha_capable" BOOLEAN,
    "version" INTEGER NOT NULL DEFAULT 1,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "fabric_config_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "fabric_config_singleton" CHECK ("id" = 1),
    CONSTRAINT "fabric_config_rollout_status" CHECK ("rollout_status" IN ('', 'pending', 'rolling_out', 'ready', 'failed', 'degraded')),
    CONSTRAINT "fabric_config_secret_refs" CHECK (("bgp_password_ref" IS NULL OR "bgp_password_ref" LIKE 'secret://%')
        AND ("ospf_auth_key_ref" IS NULL OR "ospf_auth_key_ref" LIKE 'secret://%'))
);

CREATE TRIGGER "fabric_config_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "fabric_config" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
