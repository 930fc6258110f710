-- The fabric job's runner heartbeat belonged to the JobRunner that carried a job out before a
-- fabric job became a workflow run (issue 23): the run's lease is the heartbeat now.
ALTER TABLE fabric_job DROP COLUMN IF EXISTS runner_heartbeat_at;
