-- The control-node API's facts of a node (seed 004's bmc_infos, issue 11 item 1): a node's
-- hardware identity (serial_number, which register keys on), its vendor, its OS facts and its
-- NetBox ids, and whether it is the control node (register's is_control_node). The BMC itself
-- (address, driver, credentials) stays the node's own. The OS password lives in the secret broker:
-- os_credentials_ref is a secret:// reference, never the password (the seed hex-encoded it).
CREATE TABLE "bmc_info" (
    "node_id" TEXT NOT NULL,
    "tenant_id" TEXT NOT NULL,
    "is_control_node" BOOLEAN NOT NULL DEFAULT false,
    "serial_number" TEXT,
    "vendor" TEXT,
    "os_hostname" TEXT,
    "fqdn" TEXT,
    "os_ip" TEXT,
    "os_username" TEXT,
    "os_credentials_ref" TEXT,
    "primary_mac" TEXT,
    "atlas_device_id" INTEGER,
    "atlas_location_id" INTEGER,
    "atlas_rack_id" INTEGER,
    "atlas_site_id" INTEGER,
    "version" INTEGER NOT NULL DEFAULT 1,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "bmc_info_pkey" PRIMARY KEY ("node_id")
);

-- A serial names one machine of a tenant.
CREATE UNIQUE INDEX "bmc_info_tenant_id_serial_number_key" ON "bmc_info"("tenant_id", "serial_number");

ALTER TABLE "bmc_info" ADD CONSTRAINT "bmc_info_node_id_fkey" FOREIGN KEY ("node_id") REFERENCES "node"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "bmc_info" ADD CONSTRAINT "bmc_info_tenant_id_fkey" FOREIGN KEY ("tenant_id") REFERENCES "tenant"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- Read by MetalNode.bmcInfo, which cached queries may hold.
CREATE TRIGGER "bmc_info_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "bmc_info" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
