-- Deploy profiles and their immutable versions (what `deploy` records and the workflow runs).
CREATE TABLE "deploy_profile" (
    "id" TEXT NOT NULL,
    "tenant_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "deploy_profile_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "deploy_profile_tenant_id_name_key" ON "deploy_profile"("tenant_id", "name");

CREATE TABLE "deploy_profile_version" (
    "profile_id" TEXT NOT NULL,
    "version" INTEGER NOT NULL,
    "role" TEXT NOT NULL,
    "steps" JSONB NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "deploy_profile_version_pkey" PRIMARY KEY ("profile_id", "version")
);

ALTER TABLE "deploy_profile_version" ADD CONSTRAINT "deploy_profile_version_profile_id_fkey" FOREIGN KEY ("profile_id") REFERENCES "deploy_profile"("id") ON DELETE CASCADE ON UPDATE CASCADE;

CREATE TRIGGER "deploy_profile_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "deploy_profile" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
CREATE TRIGGER "deploy_profile_version_cache_invalidate" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "deploy_profile_version" FOR EACH STATEMENT EXECUTE FUNCTION "metal_cache_invalidate"();
