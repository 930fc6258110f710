-- No cached query reads fabric_preflight (the preflight is a mutation; what other reads show, the
-- FRR capability, lives on fabric_config), so its writes need not invalidate the read cache.
DROP TRIGGER IF EXISTS "fabric_preflight_cache_invalidate" ON "fabric_preflight";
