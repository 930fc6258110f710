-- Fabric jobs are carried out by workflow runs (issue 23 item 2), no longer by the fabric.rollout
-- queue. A job still running when the service is upgraded gets its run here, queued: a worker's
-- first sweep wakes it (no lease, nothing to wait for) and it resumes from the job's rows, as a
-- run taken up again after a crash does. Its pg-boss job, if any, is left to nobody.
INSERT INTO "workflow_run" ("id", "node_id", "kind", "status", "params")
SELECT 'wf_' || j."id"::text, 'fabric:' || j."id"::text,
       CASE WHEN j."job_type" = 'fabric_apply' THEN 'fabric-apply' ELSE 'fabric-teardown' END,
       'queued', jsonb_build_object('fabricJobId', j."id"::text)
  FROM "fabric_job" j
 WHERE j."job_status" = 'running'
ON CONFLICT ("id") DO NOTHING;
