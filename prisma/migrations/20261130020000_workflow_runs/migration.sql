-- Workflow runs: what a node's workflow is doing (status queued, running, succeeded, failed, cancelled).
CREATE TABLE "workflow_run" (
    "id" TEXT NOT NULL,
    "node_id" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "finished_at" TIMESTAMPTZ(3),
    CONSTRAINT "workflow_run_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "workflow_run_node_id_created_at_idx" ON "workflow_run"("node_id", "created_at");
