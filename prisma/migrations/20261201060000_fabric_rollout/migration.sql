-- Fabric rollouts (issue 10 item 8): apply and teardown jobs over the compute nodes, run by the
-- pg-boss queue fabric.rollout. The queued job names only the fabric_job id: everything the
-- worker needs (scope, target, strict, which nodes, what each has done) is in these rows, so a
-- retry after a crash resumes from them.
-- job_status keeps the seed's four values; a cancelled apply ends 'failed' with state
-- 'apply_cancelled' (the state column says why, so a UI that knows the four values still works).
CREATE TABLE "fabric_job" (
    "id" UUID NOT NULL,
    "job_type" TEXT NOT NULL,
    "scope" TEXT NOT NULL,
    "target_node_ip" TEXT,
    "strict" BOOLEAN NOT NULL DEFAULT false,
    "job_status" TEXT NOT NULL DEFAULT 'running',
    "state" TEXT NOT NULL,
    "progress" INTEGER NOT NULL DEFAULT 0,
    "total_nodes" INTEGER NOT NULL DEFAULT 0,
    "completed_nodes" INTEGER NOT NULL DEFAULT 0,
    "failed_nodes" INTEGER NOT NULL DEFAULT 0,
    "first_fail_node" TEXT NOT NULL DEFAULT '',
    "first_fail_error" TEXT NOT NULL DEFAULT '',
    "error" TEXT NOT NULL DEFAULT '',
    -- The fabric_config version the job rolls out: a config saved meanwhile is not "ready" after it.
    "config_version" INTEGER NOT NULL DEFAULT 0,
    "requested_by" TEXT NOT NULL DEFAULT '',
    "cancel_requested_at" TIMESTAMPTZ(3),
    -- The worker running the job touches this every few seconds: a second delivery of the job (a
    -- pg-boss expiry while the first worker still runs) finds it fresh and backs off.
    "runner_heartbeat_at" TIMESTAMPTZ(3),
    "finished_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "fabric_job_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "fabric_job_type" CHECK ("job_type" IN ('fabric_apply', 'fabric_teardown')),
    CONSTRAINT "fabric_job_scope" CHECK ("scope" IN ('all', 'node') AND ("scope" = 'all') = ("target_node_ip" IS NULL)),
    CONSTRAINT "fabric_job_status" CHECK ("job_status" IN ('running', 'completed', 'failed', 'partial')),
    CONSTRAINT "fabric_job_progress" CHECK ("progress" BETWEEN 0 AND 100),
    CONSTRAINT "fabric_job_counts" CHECK ("completed_nodes" >= 0 AND "failed_nodes" >= 0 AND "completed_nodes" + "failed_nodes" <= "total_nodes")
);
-- One fabric job in flight, apply or teardown: two would change the same nodes at once.
CREATE UNIQUE INDEX "fabric_job_one_running" ON "fabric_job" ((true)) WHERE "job_status" = 'running';
-- GET .../latest: the newest job.
CREATE INDEX "fabric_job_created_at" ON "fabric_job" ("created_at" DESC, "id" DESC);

-- Each node of a job: its outcome and the steps it ran (name, phase apply|teardown, status,
-- message, times), in order. node_id has no foreign key: a job's history outlives the node.
CREATE TABLE "fabric_job_node" (
    "job_id" UUID NOT NULL,
    "node_id" TEXT NOT NULL,
    "position" INTEGER NOT NULL,
    "node_ip" TEXT NOT NULL,
    "fqdn" TEXT NOT NULL DEFAULT '',
    "vtep_ip" TEXT NOT NULL DEFAULT '',
    "finished" BOOLEAN NOT NULL DEFAULT false,
    "ok" BOOLEAN NOT NULL DEFAULT false,
    "reachable" BOOLEAN NOT NULL DEFAULT true,
    -- true once a step that changes the node started: strict rollback and cancel tear these down.
    "touched" BOOLEAN NOT NULL DEFAULT false,
    "rolled_back" BOOLEAN NOT NULL DEFAULT false,
    "error" TEXT NOT NULL DEFAULT '',
    "steps" JSONB NOT NULL DEFAULT '[]',
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "fabric_job_node_pkey" PRIMARY KEY ("job_id", "node_id"),
    CONSTRAINT "fabric_job_node_job_fkey" FOREIGN KEY ("job_id") REFERENCES "fabric_job"("id") ON DELETE CASCADE
);
-- Post-deploy checklists: a node's latest job.
CREATE INDEX "fabric_job_node_node" ON "fabric_job_node" ("node_id", "created_at" DESC);

-- What a node looked like before the fabric first touched it, so a teardown can put it back:
-- the underlay interface and its MTU. Written once (a re-apply keeps the first baseline), removed
-- when the node is back to baseline.
CREATE TABLE "fabric_node_baseline" (
    "node_id" TEXT NOT NULL,
    "underlay_iface" TEXT NOT NULL,
    "underlay_mtu" INTEGER NOT NULL,
    "captured_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "fabric_node_baseline_pkey" PRIMARY KEY ("node_id"),
    CONSTRAINT "fabric_node_baseline_node_fkey" FOREIGN KEY ("node_id") REFERENCES "compute_node"("node_id") ON DELETE CASCADE,
    CONSTRAINT "fabric_node_baseline_mtu" CHECK ("underlay_mtu" BETWEEN 68 AND 65535)
);
-- No cache trigger on these tables: no cached GraphQL result reads them (rollout views are never
-- cached: see NEVER_CACHED_FIELDS in src/graphql/cache-dependencies.ts).
