import { requirePrincipal, type Context } from '../context';
import { absent, decide } from '../auth/decide';
import { notFound } from '../errors';
import { typeOfId, type IdType } from '../ids';
import type { Resource } from '../auth/permissions';

/**
 * Where a loaded object sits, by its GraphQL type. Hardware profiles are shared by all tenants;
 * tokens are read by admins of their tenant.
 */
function resourceOf(typename: string, row: Record<string, unknown>): Resource | 'public' | 'admin' {
  const id = String(row.id);
  const tenantId = String(row.tenantId ?? '');
  switch (typename) {
    case 'Tenant': return { type: 'tenant', id, tenantId: id };
    case 'Site': return { type: 'site', id, tenantId };
    case 'Pool': return { type: 'pool', id, tenantId, siteId: String(row.siteId) };
    case 'MetalNode': return { type: 'node', id, tenantId, siteId: String(row.siteId), poolId: String(row.poolId) };
    case 'DeployProfile': return { type: 'tenant', id: tenantId, tenantId };
    case 'CommandBatch': return { type: 'tenant', id: tenantId, tenantId };
    case 'SiteAgent':
    case 'Command': return { type: 'site', id: String(row.siteId), tenantId };
    case 'HardwareProfile': return 'public';
    default: return 'admin';
  }
}

const NODE_TYPES = new Set<IdType>(['Tenant', 'Site', 'Pool', 'MetalNode', 'HardwareProfile', 'ApiToken', 'DeployProfile', 'SiteAgent', 'Command', 'CommandBatch']);

/**
 * Relay's `node(id)`: the relay plugin loads the object (batched, planned by the prisma plugin),
 * then this decides whether the caller may read it. Another tenant's object is NOT_FOUND in the
 * very words of a missing one: the decision names the object, never its owner.
 */
export async function resolveNodeQuery(
    _root: unknown,
    args: { id: { id: string; typename: string } | string },
    ctx: Context,
    _info: unknown,
    resolveNode: (id: { id: string; typename: string }) => Promise<unknown>,
  ): Promise<unknown> {
    const principal = requirePrincipal(ctx);
    const raw = typeof args.id === 'string' ? args.id : args.id.id;
    const graphqlType = typeOfId(raw);
    // Not an id of a readable type: nothing to name (the text sent is not repeated).
    if (!graphqlType || !NODE_TYPES.has(graphqlType)) throw notFound('object');
    const row = (await resolveNode({ id: raw, typename: graphqlType })) as Record<string, unknown> | null;
    if (!row) throw absent(graphqlType, raw);
    const subject = { type: graphqlType, id: raw };
    const resource = resourceOf(graphqlType, row);
    if (resource === 'public') return row;
    if (resource === 'admin') {
      const tokenTenant = (row.tenantId as string | null) ?? null;
      decide(principal, 'admin', tokenTenant ? { type: 'tenant', id: tokenTenant, tenantId: tokenTenant } : { type: 'platform' }, subject);
      return row;
    }
    decide(principal, 'read', resource, subject);
    return row;
}
