-- Issue 9: the MAC check of every enroll and confirmMac (refuseTakenMacs: the site's machines whose
-- macs overlap the new ones) read every node of the site, 3.3 ms each at 1,000 machines in the
-- lifecycle bench, inside the MAC locks. A GIN index answers the overlap (&&) directly. macs
-- rarely change, so node updates that leave them alone stay as cheap as before.
CREATE INDEX "node_macs_gin_idx" ON "node" USING GIN ("macs");
