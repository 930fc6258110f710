-- Site agents run the BMC I/O (issue 9, item 4). An agent registers an X25519 public key; the
-- credentials of a command it holds are sealed to that key at the moment it asks for them, so
-- they are never stored or sent in a form another agent, a log or an event could read.
ALTER TABLE "site_agent" ADD COLUMN "public_key" TEXT;
ALTER TABLE "site_agent" ADD COLUMN "key_registered_at" TIMESTAMPTZ(3);

-- A claim holds until its lease lapses (renewed by the agent's heartbeat); the sweep turns a lapsed
-- claim into AGENT_LOST (destructive kinds) or back into queued (the others).
ALTER TABLE "command" ADD COLUMN "lease_expires_at" TIMESTAMPTZ(3);
CREATE INDEX "command_claimed_lease_idx" ON "command" ("lease_expires_at") WHERE "status" = 'claimed';
CREATE INDEX "command_queued_expiry_idx" ON "command" ("expires_at") WHERE "status" = 'queued';

-- Wakes the built-in agents the moment a command is queued (at commit), instead of at their next
-- poll. INSERT only: a claim or a result is an UPDATE, and waking on those would make each claim
-- that finds nothing wake the next one.
CREATE FUNCTION "command_queued_notify"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('metal_command_queued', '');
  RETURN NULL;
END $$;
CREATE TRIGGER "command_queued_notify" AFTER INSERT ON "command" FOR EACH STATEMENT EXECUTE FUNCTION "command_queued_notify"();
