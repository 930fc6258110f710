import { AppError, notFound } from '../errors';
import type { IdType } from '../ids';
import type { Action, Grant, Principal, Resource } from './permissions';

/** What each kind of object is called in a NOT_FOUND, whichever path looked it up. */
export const KIND: Record<IdType, string> = {
  Tenant: 'tenant',
  Site: 'site',
  Pool: 'pool',
  HardwareProfile: 'hardware profile',
  MetalNode: 'node',
  ApiToken: 'api token',
  ApiGrant: 'grant',
  Secret: 'secret',
  DeployProfile: 'deploy profile',
  WorkflowRun: 'workflow run',
  SiteAgent: 'site agent',
  Command: 'command',
  CommandBatch: 'command batch',
  BootEntry: 'boot entry',
  BootToken: 'boot token',
  InstallerIso: 'installer ISO',
};

/**
 * The one NOT_FOUND for an object looked up by id: the same bytes whether it does not exist or
 * belongs to a tenant the caller may not know of, so the answer is no existence oracle.
 */
export const absent = (type: IdType, id: string) => notFound(KIND[type], id);

/** The object a decision was asked about, when the resource decided on is its owner (a token's tenant). */
export interface Subject {
  type: IdType;
  id: string;
}

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
  tenant: KIND.Tenant,
  site: KIND.Site,
  pool: KIND.Pool,
  node: KIND.MetalNode,
};
const TYPE_OF: Record<Exclude<Resource['type'], 'platform'>, IdType> = { tenant: 'Tenant', site: 'Site', pool: 'Pool', node: 'MetalNode' };

/**
 * The one authorization decision. Throws NOT_FOUND for a resource of another tenant (existence
 * never leaks across tenants), PERMISSION_DENIED when the tenant is right but no grant allows it.
 * With a `subject` (the object looked up, when the resource is its owner), the NOT_FOUND names the
 * subject, exactly as its lookup says for a missing one, never the owner; and a platform-level
 * subject (a platform token) is another tenant's to a tenant's caller.
 */
export function decide(principal: Principal, action: Action, resource: Resource, subject?: Subject): void {
  if (isPlatformAdmin(principal)) return;
  const label = resource.type === 'platform' ? DESCRIBE.platform : `${DESCRIBE[resource.type]} ${resource.id}`;
  const hidden = resource.type === 'platform' ? subject !== undefined && principal.tenantId !== null : resource.tenantId !== principal.tenantId;
  if (hidden) {
    if (subject) throw absent(subject.type, subject.id);
    if (resource.type !== 'platform') throw absent(TYPE_OF[resource.type], resource.id);
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
  // As decide: any platform-scoped grant reads the platform's own things (the fabric's config and
  // its events); a tenant's token never does.
  if (resource.type === 'platform') return principal.tenantId === null && principal.grants.some((g) => g.scopeType === 'platform');
  if (resource.tenantId !== principal.tenantId) return false;
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

/**
 * decide for lists: false for a resource hidden from the principal (another tenant's: decide's
 * NOT_FOUND), true when allowed; PERMISSION_DENIED still throws (the caller lacks the right, and
 * should hear so rather than get an empty answer).
 */
export function visibleTo(principal: Principal, action: Action, resource: Resource, subject?: Subject): boolean {
  try {
    decide(principal, action, resource, subject);
    return true;
  } catch (error) {
    if (error instanceof AppError && error.code === 'NOT_FOUND') return false;
    throw error;
  }
}
