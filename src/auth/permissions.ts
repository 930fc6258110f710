/**
 * The permission names a grant can carry: the seed's, plus `admin` (everything within the scope)
 * and `site:agent` (what a site agent's token holds on its site: report status, run commands).
 * The fabric's two (platform scope): `fabric:write` changes the fabric config (the switch re-config
 * ack gate applies); `fabric:admin` holds fabric:write and may also skip that gate (the seed's
 * FABRIC_ADMIN, a lab/CI bypass). Platform `admin` holds both.
 */
export const PERMISSIONS = [
  'admin', 'compute:nodes:provision', 'compute:nodes:power', 'compute:sites:read', 'site:agent', 'fabric:write', 'fabric:admin',
] as const;
export type Permission = (typeof PERMISSIONS)[number];
/** `read` is not grantable: any grant lets its holder read its scope, what is under it and the path to it. */
export type Action = Permission | 'read';

export const SCOPE_TYPES = ['platform', 'tenant', 'site', 'pool', 'node'] as const;
export type ScopeType = (typeof SCOPE_TYPES)[number];

/** A grant with its scope's lineage resolved when it was created, so decisions need no query. */
export interface Grant {
  permission: Permission;
  scopeType: ScopeType;
  scopeId: string | null;
  siteId: string | null;
  poolId: string | null;
}

export interface Principal {
  tokenId: string;
  name: string;
  /** null only for platform tokens. */
  tenantId: string | null;
  grants: Grant[];
}

/** What a decision is about: the resource and where it sits. */
export type Resource =
  | { type: 'platform' }
  | { type: 'tenant'; id: string; tenantId: string }
  | { type: 'site'; id: string; tenantId: string }
  | { type: 'pool'; id: string; tenantId: string; siteId: string }
  | { type: 'node'; id: string; tenantId: string; siteId: string; poolId: string };
