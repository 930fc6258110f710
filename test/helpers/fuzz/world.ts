import fc from 'fast-check';
import type { TestApp } from '../app';
import { gql } from '../client';
import { makeTenantTree, makeToken } from '../fixtures';
import type { IdPool } from './values';

/** Who sends a request. Tokens are never part of a case: a case names its actor, the world holds the token. */
export type Actor = 'admin' | 'tenant' | 'reader' | 'agent' | 'none' | 'revoked' | 'malformed';

export interface World {
  ids: IdPool;
  /** the bearer token of each actor that has one */
  tokens: Record<'admin' | 'tenant' | 'reader' | 'agent' | 'revoked', string>;
  /** every value that must never appear in a response or a log line */
  secrets: string[];
}

const CSRF = { 'x-graphql-csrf': '1' };

async function must<T>(what: string, promise: Promise<{ data: T | null | undefined; errors?: { message: string }[] }>): Promise<T> {
  const result = await promise;
  if (result.errors?.length || !result.data) throw new Error(`fuzz world: ${what} failed: ${JSON.stringify(result.errors)}`);
  return result.data;
}

/**
 * Two tenants with sites, pools and nodes in several states, a deploy profile, a site agent, a
 * queued command, a batch and spare tokens: real ids for the fuzz to hit, its own and another
 * tenant's. The acting tokens' own ids are left out of the pool, so a generated revoke cannot
 * take the suite's credentials away.
 */
export async function buildWorld(t: TestApp): Promise<World> {
  const prisma = t.app.services.prisma;
  const a = await makeTenantTree(prisma, 'fuzz-a', { pools: 2, nodesPerPool: 4 });
  const b = await makeTenantTree(prisma, 'fuzz-b', { pools: 1, nodesPerPool: 3 });
  // Nodes in the states the verbs care about, so legal and illegal moves both occur.
  const states = ['ready', 'deployed', 'failed', 'rescue', 'enrolling', 'retired', 'ready', 'deployed'] as const;
  for (const [i, node] of a.nodes.entries()) {
    const state = states[i % states.length]!;
    await prisma.node.update({
      where: { id: node.id },
      data: { provisionState: state, ...(state === 'failed' ? { failedFrom: 'deploying', lastErrorCode: 'INTERNAL', lastErrorMessage: 'fixture' } : {}) },
    });
  }
  await prisma.node.update({ where: { id: b.nodes[1]!.id }, data: { provisionState: 'deployed' } });

  const tenant = await makeToken(prisma, a.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: a.tenant.id }]);
  const reader = await makeToken(prisma, a.tenant.id, [{ permission: 'compute:sites:read', scopeType: 'site', scopeId: a.site.id, siteId: a.site.id }]);
  const revoked = await makeToken(prisma, a.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: a.tenant.id }]);
  const spare = [
    await makeToken(prisma, a.tenant.id, [{ permission: 'compute:nodes:power', scopeType: 'pool', scopeId: a.pools[0]!.id, siteId: a.site.id, poolId: a.pools[0]!.id }]),
    await makeToken(prisma, b.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: b.tenant.id }]),
  ];

  const admin = t.adminToken;
  const profile = await must<{ saveDeployProfileVersion: { id: string } }>('saveDeployProfileVersion', gql(t.url, admin,
    'mutation($i: DeployProfileVersionInput!) { saveDeployProfileVersion(input: $i) { id } }',
    { i: { tenantId: a.tenant.id, name: 'fuzz-profile', role: 'worker', steps: [{ kind: 'image', name: 'os', params: { url: 'http://images.invalid/os.img' } }] } }, CSRF));
  const registered = await must<{ registerSiteAgent: { token: string; agent: { id: string } } }>('registerSiteAgent', gql(t.url, admin,
    'mutation($s: ID!) { registerSiteAgent(siteId: $s, name: "fuzz-agent") { token agent { id } } }', { s: a.site.id }, CSRF));
  // A heartbeat first: power is refused while no agent serves the site.
  await must('agentReportStatus', gql(t.url, registered.registerSiteAgent.token, 'mutation { agentReportStatus(machines: []) { id } }', {}, CSRF));
  const ready = a.nodes.find((_, i) => states[i % states.length] === 'ready')!;
  const power = await must<{ powerNode: { commandId: string } }>('powerNode', gql(t.url, admin,
    'mutation($i: MetalPowerInput!) { powerNode(input: $i) { commandId } }', { i: { nodeId: ready.id, action: 'on' } }, CSRF));

  const hash = (token: string) => t.app.services.tokens.authenticate(token).then((p) => p.tokenId);
  const revokedId = await hash(revoked);
  await prisma.apiToken.update({ where: { id: revokedId }, data: { revokedAt: new Date() } });
  t.app.services.tokens.forget(revokedId);
  const spareIds = await Promise.all(spare.map(hash));
  const hardwareProfiles = (await prisma.hardwareProfile.findMany({ select: { id: true } })).map((h) => h.id);

  const ids: IdPool = {
    mine: {
      ten: [a.tenant.id],
      site: [a.site.id],
      pool: a.pools.map((p) => p.id),
      node: a.nodes.map((n) => n.id),
      tok: [spareIds[0]!, revokedId],
      dpr: [profile.saveDeployProfileVersion.id],
      agt: [registered.registerSiteAgent.agent.id],
      cmd: [power.powerNode.commandId],
      hwp: hardwareProfiles,
    },
    theirs: {
      ten: [b.tenant.id],
      site: [b.site.id],
      pool: b.pools.map((p) => p.id),
      node: b.nodes.map((n) => n.id),
      tok: [spareIds[1]!],
    },
  };
  const tokens = { admin, tenant, reader, agent: registered.registerSiteAgent.token, revoked };
  return { ids, tokens, secrets: [...Object.values(tokens), ...spare] };
}

/** Most requests carry a real admin token (so they get past authentication to the inputs). */
export const actorArb: fc.Arbitrary<Actor> = fc.oneof(
  { arbitrary: fc.constant<Actor>('admin'), weight: 55 },
  { arbitrary: fc.constant<Actor>('tenant'), weight: 20 },
  { arbitrary: fc.constant<Actor>('none'), weight: 12 },
  { arbitrary: fc.constant<Actor>('reader'), weight: 4 },
  { arbitrary: fc.constant<Actor>('agent'), weight: 4 },
  { arbitrary: fc.constant<Actor>('revoked'), weight: 2 },
  { arbitrary: fc.constant<Actor>('malformed'), weight: 3 },
);

const MALFORMED_AUTH = ['Bearer', 'Bearer ', 'Basic YWRtaW46YWRtaW4=', 'Bearer a b', 'Bearer ' + 'x'.repeat(5000), 'Bearer mcp_\u00ff\u00fe', 'bearer  mcp_'];

/** The Authorization header an actor sends (the malformed one picks by the case's own number). */
export function authHeader(world: World, actor: Actor, pick = 0): Record<string, string> {
  if (actor === 'none') return {};
  if (actor === 'malformed') return { authorization: MALFORMED_AUTH[pick % MALFORMED_AUTH.length]! };
  return { authorization: `Bearer ${world.tokens[actor]}` };
}
