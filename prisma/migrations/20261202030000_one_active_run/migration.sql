-- Issue 9, intent in rows: at most one active run per node (queued, running, waiting or aborting).
-- The node store marks a node's other active runs superseded in the statement that starts a new
-- one; this index is what makes two writers that race past each other fail instead of leaving two
-- runs that would both drive the machine. An aborting run is never superseded (its cleanup must
-- run), so a run started while one is aborting meets this index: CONFLICT.
--
-- Rows written before the rule: keep each node's newest active run, supersede the older ones.
UPDATE "workflow_run" AS r
   SET "status" = 'superseded', "finished_at" = now(), "updated_at" = now()
 WHERE r."status" IN ('queued', 'running', 'waiting', 'aborting')
   AND EXISTS (
     SELECT 1 FROM "workflow_run" AS n
      WHERE n."node_id" = r."node_id" AND n."status" IN ('queued', 'running', 'waiting', 'aborting')
        AND (n."created_at", n."id") > (r."created_at", r."id")
   );

CREATE UNIQUE INDEX "workflow_run_one_active" ON "workflow_run"("node_id")
  WHERE "status" IN ('queued', 'running', 'waiting', 'aborting');
