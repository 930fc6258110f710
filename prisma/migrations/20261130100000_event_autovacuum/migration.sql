-- event is written like a queue: every row is inserted, then updated once by the sequencer, which
-- leaves a dead version and a dead entry in the small "unnumbered" index that its next pass has to
-- step over until a vacuum removes them. With the default thresholds (20 % of the table) that
-- backlog grew with the table and slowed every pass; vacuum it after every 1 % instead.
ALTER TABLE "event" SET (
  autovacuum_vacuum_scale_factor = 0.01,
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_insert_scale_factor = 0.01,
  autovacuum_analyze_scale_factor = 0.02
);
