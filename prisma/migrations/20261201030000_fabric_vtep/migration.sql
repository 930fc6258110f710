-- The VTEP pool's allocations (issue 10 item 6): one VTEP loopback address per compute node, from
-- the fabric config's router_id_base / router_id_prefix_len. The primary key makes one address
-- never held twice and the unique node_id one address per node, whatever the application does;
-- allocation itself is serialised by an advisory lock (src/modules/fabric/vtep.ts) so concurrent
-- callers never race into these constraints.
-- ip is the canonical dotted quad (host(inet) prints it so), so text equality is address equality.
-- Deleting the compute node releases its address.
CREATE TABLE "fabric_vtep" (
    "ip" TEXT NOT NULL,
    "node_id" TEXT NOT NULL,
    "allocated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "fabric_vtep_pkey" PRIMARY KEY ("ip"),
    CONSTRAINT "fabric_vtep_node_fkey" FOREIGN KEY ("node_id") REFERENCES "compute_node"("node_id") ON DELETE CASCADE,
    CONSTRAINT "fabric_vtep_ip_canonical" CHECK (family("ip"::inet) = 4 AND masklen("ip"::inet) = 32 AND "ip" = host("ip"::inet))
);
CREATE UNIQUE INDEX "fabric_vtep_node_id_key" ON "fabric_vtep"("node_id");

CREATE TRIGGER "fabric_vtep_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "fabric_vtep" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
