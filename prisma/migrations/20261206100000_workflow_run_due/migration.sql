-- Issue 23: the engine keeps its own due-run index instead of a pg-boss queue (metal.advance).
-- due_at: when the engine should advance the run next (NULL: nothing to do until something wakes
-- it). A new run is due at once (the default). Waking a run sets due_at = LEAST(due_at, at) in the
-- statement that makes the wake-up necessary (jobs/wake.ts); the engine's fetch takes due runs
-- whose lease is free and sets due_at to the lease's end, so a run whose worker died is due again
-- when its lease runs out (jobs/due-runs.ts).
ALTER TABLE "workflow_run" ADD COLUMN "due_at" TIMESTAMPTZ(3) DEFAULT CURRENT_TIMESTAMP;
-- Existing runs: the active ones are due now (their wake-ups were metal.advance jobs), the others never.
UPDATE "workflow_run" SET "due_at" = NULL WHERE "status" NOT IN ('queued', 'running', 'waiting', 'aborting');
CREATE INDEX "workflow_run_due_idx" ON "workflow_run"("due_at") WHERE "due_at" IS NOT NULL;

-- The fetch loops LISTEN on workflow_run_due: a commit that made a run due now wakes them at once.
-- A row trigger, so every writer of workflow_run (a wake, a new run, an abort) notifies without
-- knowing of it; its WHEN is evaluated without calling the function for every other update (the
-- engine's own, which sets due_at to a lease's end or a wait's). Repeats within a transaction fold
-- into one notification at its commit. The millisecond: due_at is a timestamptz(3), so now()
-- stored there may round up past now().
CREATE FUNCTION "workflow_run_due_notify"() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN PERFORM pg_notify('workflow_run_due', ''); RETURN NULL; END $$;
CREATE TRIGGER "workflow_run_due" AFTER INSERT OR UPDATE OF "due_at" ON "workflow_run"
  FOR EACH ROW WHEN (NEW."due_at" IS NOT NULL AND NEW."due_at" <= now() + interval '1 millisecond')
  EXECUTE FUNCTION "workflow_run_due_notify"();

-- What jobs/registry.ts built on pg-boss's metal.advance partition (a lookup index and a notify
-- trigger) goes; the service purges the queue's pending jobs at start (pg-boss's purgeQueue). This
-- migration names pg-boss's table once, to drop our own objects from it; nothing under src/, jobs/
-- or clients/ names a pgboss table any more. IF EXISTS: a new database has no pgboss schema yet.
DO $$
BEGIN
  IF to_regclass('pgboss.j715b0c80fb8f69c9f4dcb66070c13d7211aa917ba1f61e1c7e9c7162') IS NOT NULL THEN
    DROP TRIGGER IF EXISTS "metal_advance_queued" ON pgboss.j715b0c80fb8f69c9f4dcb66070c13d7211aa917ba1f61e1c7e9c7162;
    DROP INDEX IF EXISTS pgboss.j715b0c80fb8f69c9f4dcb66070c13d7211aa917ba1f61e1c7e9c7162_run;
  END IF;
END $$;
DROP FUNCTION IF EXISTS public.metal_advance_queued_notify();

-- GET /controlnode/provision/queue read pgboss.job; it reads these rows instead: one per ISO build
-- the Building ISO step queued (id: its provision.iso job's id), started and ended by the worker.
CREATE TABLE "iso_build_job" (
    "id" UUID NOT NULL,
    "run_id" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "started_at" TIMESTAMPTZ(3),
    "ended_at" TIMESTAMPTZ(3),
    CONSTRAINT "iso_build_job_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "iso_build_job_open_idx" ON "iso_build_job"("run_id") WHERE "ended_at" IS NULL;
