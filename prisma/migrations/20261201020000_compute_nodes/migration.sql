-- Compute nodes for the network fabric (issue 10 item 9): a deployed metal node becomes a compute
-- node when its OS address and SSH access are recorded here. The fabric's preflight and rollouts
-- reach only these rows, and only while the node is deployed.
-- ssh_host_key is the pinned SHA256 fingerprint of the node's host key (OpenSSH's "SHA256:..."
-- form); NULL means trust on first use, after which the first key seen is pinned here.
-- ssh_key_ref is a per-node private key in the secret broker, the fallback when the node does not
-- trust the service's own key pair; never a key itself.
CREATE TABLE "compute_node" (
    "node_id" TEXT NOT NULL,
    "os_ip" TEXT NOT NULL,
    "fqdn" TEXT NOT NULL DEFAULT '',
    "ssh_port" INTEGER NOT NULL DEFAULT 22,
    "ssh_user" TEXT NOT NULL DEFAULT 'root',
    "ssh_host_key" TEXT,
    "ssh_key_ref" TEXT,
    "underlay_iface" TEXT NOT NULL DEFAULT '',
    "is_gateway" BOOLEAN NOT NULL DEFAULT false,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "compute_node_pkey" PRIMARY KEY ("node_id"),
    CONSTRAINT "compute_node_node_fkey" FOREIGN KEY ("node_id") REFERENCES "node"("id") ON DELETE CASCADE,
    CONSTRAINT "compute_node_ssh_port" CHECK ("ssh_port" BETWEEN 1 AND 65535),
    CONSTRAINT "compute_node_host_key" CHECK ("ssh_host_key" IS NULL OR "ssh_host_key" LIKE 'SHA256:%'),
    CONSTRAINT "compute_node_key_ref" CHECK ("ssh_key_ref" IS NULL OR "ssh_key_ref" LIKE 'secret://%')
);
-- One OS address per machine: the fabric routes address nodes by it (/node/{node_ip}).
CREATE UNIQUE INDEX "compute_node_os_ip_key" ON "compute_node"("os_ip");
-- The gateway hosts the software route reflector (external_route_reflector false): at most one.
-- With none marked, the oldest compute node is the gateway, so the reflector never moves when
-- nodes join.
CREATE UNIQUE INDEX "compute_node_one_gateway" ON "compute_node"("is_gateway") WHERE "is_gateway";

-- The service's own SSH key pair (one row): the public key is shown to admins to put in each
-- node's authorized_keys; the private key lives in the secret broker.
CREATE TABLE "service_ssh_key" (
    "id" INTEGER NOT NULL DEFAULT 1,
    "algorithm" TEXT NOT NULL,
    "public_key" TEXT NOT NULL,
    "fingerprint" TEXT NOT NULL,
    "private_key_ref" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "service_ssh_key_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "service_ssh_key_singleton" CHECK ("id" = 1),
    CONSTRAINT "service_ssh_key_ref" CHECK ("private_key_ref" LIKE 'secret://%')
);

CREATE TRIGGER "compute_node_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "compute_node" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
