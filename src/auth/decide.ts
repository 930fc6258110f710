import { AppError, notFound } from '../errors';
import type { Action, Grant, Principal, Resource } from './permissions';

export function isPlatformAdmin(principal: Principal): boolean {
  return principal.grants.some((g) => g.scopeType === 'platform' && g.permission === 'admin');
}

/** Does the grant's scope contain the resource (the scope itself included)? */
function covers(grant: Grant, resource: Resource): boolean {
  if (grant.scopeType === 'platform') return true;
  if (resource.type === 'platform') return false;
  switch (grant.scopeType) {
    case 'tenant':
      return grant.scopeId === resource.tenantId;
    case 'site':
      return (resource.type === 'site' && resource.id === grant.scopeId) ||
        ((resource.type === 'pool' || resource.type === 'node') && resource.siteId === grant.scopeId);
    case 'pool':
      return (resource.type === 'pool' && resource.id === grant.scopeId) ||
        (resource.type === 'node' && resource.poolId === grant.scopeId);
    case 'node':
      return resource.type === 'node' && resource.id === grant.scopeId;
  }
}

/** Is the resource on the path from the tenant down to the grant's scope (so its holder may see it)? */
function isAncestorOfScope(grant: Grant, resource: Resource): boolean {
  switch (resource.type) {
    case 'tenant':
      return true; // same tenant is checked before
    case 'site':
      return grant.siteId === resource.id;
    case 'pool':
      return grant.poolId === resource.id;
    default:
      return false;
  }
}

function grants(grant: Grant, action: Action): boolean {
  return grant.permission === 'admin' || action === 'read' || grant.permission === action;
}

const DESCRIBE: Record<Resource['type'], string> = {
  platform: 'the platform',
  tenant: 'tenant',
  site: 'site',
  pool: 'pool',
  node: 'node',
};

/**
 * The one authorization decision. Throws NOT_FOUND for a resource of another tenant (existence
 * never leaks across tenants), PERMISSION_DENIED when the tenant is right but no grant allows it.
 */
export function decide(principal: Principal, action: Action, resource: Resource): void {
  if (isPlatformAdmin(principal)) return;
  const label = resource.type === 'platform' ? DESCRIBE.platform : `${DESCRIBE[resource.type]} ${resource.id}`;
  if (resource.type !== 'platform' && resource.tenantId !== principal.tenantId) {
    throw notFound(DESCRIBE[resource.type], resource.id);
  }
  const allowed = principal.grants.some(
    (g) => (covers(g, resource) && grants(g, action)) || (action === 'read' && isAncestorOfScope(g, resource)),
  );
  if (!allowed) {
    throw new AppError('PERMISSION_DENIED', `missing permission ${action} on ${label}`, {
      permission: action,
      resource: resource.type,
    });
  }
}

/**
 * May the principal read the resource? decide(principal, 'read', resource) without the exception,
 * for hot loops (a subscription checks every event it is offered).
 */
export function mayRead(principal: Principal, resource: Resource): boolean {
  if (isPlatformAdmin(principal)) return true;
  if (resource.type === 'platform' || resource.tenantId !== principal.tenantId) return false;
  return principal.grants.some((g) => covers(g, resource) || isAncestorOfScope(g, resource));
}

export function can(principal: Principal, action: Action, resource: Resource): boolean {
  try {
    decide(principal, action, resource);
    return true;
  } catch {
    return false;
  }
}

/**
 * The rows a principal may read, as a where-clause over (tenantId, siteId, poolId, id) columns.
 * `null` means everything (platform admin).
 */
export function readFilter(principal: Principal, type: 'site' | 'pool' | 'node'): Record<string, unknown> | null {
  if (isPlatformAdmin(principal)) return null;
  const tenantId = principal.tenantId ?? '__none__';
  if (principal.grants.some((g) => g.scopeType === 'tenant')) return { tenantId };
  const or: Record<string, unknown>[] = [];
  const ids = (values: (string | null)[]) => [...new Set(values.filter((v): v is string => v !== null))];
  const byScope = (scope: Grant['scopeType']) => ids(principal.grants.filter((g) => g.scopeType === scope).map((g) => g.scopeId));
  const siteScopes = byScope('site');
  const poolScopes = byScope('pool');
  const nodeScopes = byScope('node');
  if (type === 'site') {
    or.push({ id: { in: ids(principal.grants.map((g) => g.siteId)) } });
  } else if (type === 'pool') {
    if (siteScopes.length) or.push({ siteId: { in: siteScopes } });
    or.push({ id: { in: ids(principal.grants.map((g) => g.poolId)) } });
  } else {
    if (siteScopes.length) or.push({ siteId: { in: siteScopes } });
    if (poolScopes.length) or.push({ poolId: { in: poolScopes } });
    if (nodeScopes.length) or.push({ id: { in: nodeScopes } });
  }
  return { tenantId, OR: or.length ? or : [{ id: { in: [] } }] };
}
