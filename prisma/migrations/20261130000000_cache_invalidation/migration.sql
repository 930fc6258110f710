-- Every committed change to a table the GraphQL read cache serves notifies the channel
-- "metal_cache" with the table's name, so each process drops cached results holding that type,
-- whoever wrote the change (a resolver, a worker, another process, an operator with psql).
CREATE FUNCTION "metal_cache_invalidate"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('metal_cache', TG_TABLE_NAME);
  RETURN NULL;
END;
$$;

CREATE TRIGGER "tenant_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "tenant" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
CREATE TRIGGER "site_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "site" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
CREATE TRIGGER "pool_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "pool" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
CREATE TRIGGER "hardware_profile_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "hardware_profile" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
CREATE TRIGGER "node_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "node" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
CREATE TRIGGER "api_token_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "api_token" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
CREATE TRIGGER "api_grant_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "api_grant" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
