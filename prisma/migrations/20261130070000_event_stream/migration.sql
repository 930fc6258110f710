-- The event stream: every committed outbox row gets a cursor (`seq`) in the order the sequencer
-- sees commits, so a reader that has everything up to cursor C never misses a row that commits
-- later with a smaller id (bigserial ids are handed out at insert, not at commit).
-- One process at a time sequences (src/events/sequencer.ts, under an advisory lock); readers follow
-- `seq`.
ALTER TABLE "event" ADD COLUMN "seq" BIGINT;
CREATE UNIQUE INDEX "event_seq_key" ON "event"("seq");
-- What the sequencer still has to number: only the rows committed since its last pass.
CREATE INDEX "event_unsequenced_idx" ON "event"("id") WHERE "seq" IS NULL;

-- Retention: events up to `pruned_through` may have been deleted; a cursor older than that is
-- refused with a clear error instead of silently skipping what was pruned.
CREATE TABLE "event_horizon" (
    "id" INTEGER NOT NULL DEFAULT 1,
    "pruned_through" BIGINT NOT NULL DEFAULT 0,
    "pruned_at" TIMESTAMPTZ(3),
    CONSTRAINT "event_horizon_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "event_horizon_one_row" CHECK ("id" = 1)
);
INSERT INTO "event_horizon" ("id") VALUES (1);

-- Wakes the sequencer when events commit (NOTIFY is delivered at commit, once per transaction).
CREATE FUNCTION "metal_event_pending"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('metal_event_pending', '');
  RETURN NULL;
END $$;
CREATE TRIGGER "event_pending" AFTER INSERT ON "event" FOR EACH STATEMENT EXECUTE FUNCTION "metal_event_pending"();
