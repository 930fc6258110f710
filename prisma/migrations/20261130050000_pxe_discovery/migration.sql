-- PXE discovery: what site agents saw booting, and what metal proposed from it.
ALTER TABLE "node" ADD COLUMN "pxe_cycled_at" TIMESTAMPTZ(3);
ALTER TABLE "node" ADD COLUMN "discovered_mac" TEXT;

CREATE TABLE "sighting" (
    "agent_id" TEXT NOT NULL,
    "site_id" TEXT NOT NULL,
    "tenant_id" TEXT NOT NULL,
    "mac" TEXT NOT NULL,
    "product_uuid" TEXT,
    "arch" TEXT,
    "first_seen" TIMESTAMPTZ(3) NOT NULL,
    "last_seen" TIMESTAMPTZ(3) NOT NULL,
    "request_count" INTEGER NOT NULL,
    "relays" TEXT[] DEFAULT ARRAY[]::TEXT[],
    CONSTRAINT "sighting_pkey" PRIMARY KEY ("agent_id", "mac")
);
CREATE INDEX "sighting_site_id_last_seen_idx" ON "sighting"("site_id", "last_seen");

CREATE TRIGGER "sighting_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "sighting" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
