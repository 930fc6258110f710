import type { Resource } from '../../auth/permissions';

/** Where each row sits, for `decide()`. */
export const tenantResource = (t: { id: string }): Resource => ({ type: 'tenant', id: t.id, tenantId: t.id });
export const siteResource = (s: { id: string; tenantId: string }): Resource => ({ type: 'site', id: s.id, tenantId: s.tenantId });
export const poolResource = (p: { id: string; tenantId: string; siteId: string }): Resource =>
  ({ type: 'pool', id: p.id, tenantId: p.tenantId, siteId: p.siteId });
export const nodeResource = (n: { id: string; tenantId: string; siteId: string; poolId: string }): Resource =>
  ({ type: 'node', id: n.id, tenantId: n.tenantId, siteId: n.siteId, poolId: n.poolId });
