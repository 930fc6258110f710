import type { PrismaClient } from '../../src/generated/prisma/client';
import { newId } from '../../src/ids';
import { generateToken, hashToken } from '../../src/auth/tokens';
import type { Permission, ScopeType } from '../../src/auth/permissions';
import { resolveGrant } from '../../src/modules/tenancy/token';

/**
 * Rows written straight to the real database for a test's starting point (nodes cannot be
 * enrolled through the API until the metal issue lands).
 */
/** Pools run the `bcd` agent unless `agent: 'none'` (agentless pools cannot rescue). */
export async function makeTenantTree(prisma: PrismaClient, name: string, opts: { pools?: number; nodesPerPool?: number; agent?: 'none' | 'bcd' } = {}) {
  const tenant = await prisma.tenant.create({ data: { id: newId('Tenant'), name } });
  const site = await prisma.site.create({ data: { id: newId('Site'), tenantId: tenant.id, name: `${name}-site` } });
  const pools = [];
  const nodes = [];
  for (let p = 0; p < (opts.pools ?? 2); p += 1) {
    const pool = await prisma.pool.create({
      data: { id: newId('Pool'), tenantId: tenant.id, siteId: site.id, name: `${name}-pool-${p}`, policy: { agent: opts.agent ?? 'bcd' } },
    });
    pools.push(pool);
    const batch = Array.from({ length: opts.nodesPerPool ?? 2 }, (_, i) => ({
      id: newId('MetalNode'),
      tenantId: tenant.id,
      siteId: site.id,
      poolId: pool.id,
      name: `${pool.name}-node-${i}`,
      provisionState: 'ready' as const,
      // Loopback (issue 21 item 7): a test's agent may power these, and must reach nothing but this host.
      bmcAddress: `127.10.${p}.${i + 1}`,
      bmcDriver: 'redfish',
      bmcCredentialsRef: 'secret://fixture',
    }));
    await prisma.node.createMany({ data: batch });
    nodes.push(...batch);
  }
  return { tenant, site, pools, nodes };
}

/**
 * A token with the given grants, each resolved by the same function createApiToken uses, so it
 * carries the lineage (siteId, poolId of its scope) every real token has. A lineage given by the
 * caller must agree with it.
 */
export async function makeToken(
  prisma: PrismaClient,
  tenantId: string | null,
  grants: { permission: Permission; scopeType: ScopeType; scopeId: string | null; siteId?: string | null; poolId?: string | null }[],
): Promise<string> {
  const resolved = [];
  for (const [i, g] of grants.entries()) {
    const grant = await resolveGrant({ prisma }, tenantId, { permission: g.permission, scopeType: g.scopeType, scopeId: g.scopeId }, `grants[${i}]`);
    for (const key of ['siteId', 'poolId'] as const) {
      if (g[key] !== undefined && g[key] !== grant[key]) throw new Error(`makeToken: grants[${i}].${key} is ${g[key]}, but its scope's lineage says ${grant[key]}`);
    }
    resolved.push(grant);
  }
  const token = generateToken();
  await prisma.apiToken.create({
    data: {
      id: newId('ApiToken'),
      name: 'fixture',
      tenantId,
      hash: hashToken(token),
      grants: { create: resolved.map((g) => ({ id: newId('ApiGrant'), ...g })) },
    },
  });
  return token;
}
