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
