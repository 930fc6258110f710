import type { RestCase } from './rest';
import type { EnvelopeCase, GraphqlCase } from './graphql';
import { Raw, SECRET_MARKER, type Val } from './values';
import type { World } from './world';

/**
 * The requests issue 8 names, run first on every run of their target (fast-check's `examples`),
 * so each stays covered whatever the seed draws.
 */
export function knownCases(world: World) {
  const node = world.ids.mine.node![0]!;
  const pool = world.ids.mine.pool![0]!;
  const secret = `${SECRET_MARKER}S3cret`;
  const rest = (partial: Partial<RestCase> & Pick<RestCase, 'body'>): RestCase => ({
    actor: 'admin', authPick: 0, method: 'POST', params: {}, query: [], headers: {}, input: 'issue 8 example', ...partial,
  });
  const json = (value: Val): RestCase['body'] => ({ kind: 'json', value, mutations: [] });
  const bmc = { address: '127.0.0.5', driver: 'redfish', credentials: { username: 'root', password: secret } };
  const restCases: Record<string, RestCase[]> = {
    'POST /api/compute/metal/manage': [rest({ body: json({ nodeId: 'a\u0000b' }), input: 'issue 8: nodeId with NUL' })],
    'GET /api/compute/pools': [rest({ method: 'GET', body: { kind: 'none' }, query: [['siteId', { raw: '%00' }]], input: 'issue 8: siteId=%00' })],
    'DELETE /api/tokens/{id}': [rest({ method: 'DELETE', body: { kind: 'none' }, params: { id: { raw: '%00' } }, input: 'issue 8: id %00' })],
    'PATCH /api/compute/pools/{id}/policy': [rest({ method: 'PATCH', params: { id: { raw: '%00' } }, body: json({ policy: {} }), input: 'issue 8: id %00' })],
    'POST /api/compute/metal/enroll': [
      rest({ body: json({ poolId: pool, name: 'a\u0000b', bmc }), input: 'issue 8: name with NUL, inline credentials' }),
      rest({ body: json({ poolId: pool, bmc: { ...bmc, driverOptions: Raw.text('{"a":'.repeat(10_000) + '1' + '}'.repeat(10_000), '{10000 deep}') } }), input: 'issue 8: driverOptions 10,000 deep' }),
      rest({ actor: 'none', body: json({}), input: 'issue 8: anonymous, empty body' }),
    ],
    'POST /api/compute/metal/abort': [rest({ body: json({ nodeId: node, reason: '\ud800' }), input: 'issue 8: reason lone surrogate' })],
    'POST /api/compute/metal/bulk': [rest({ body: json({ poolId: pool, verb: 'retire', nodeIds: [node], reason: '\ud800' }), input: 'issue 8: reason lone surrogate' })],
    'GET /api/compute/metal/nodes/{id}': [rest({ actor: 'none', method: 'GET', body: { kind: 'none' }, params: { id: { value: 'not-an-id' } }, input: 'issue 8: anonymous, malformed id' })],
  };
  const gql = (variables: Val, input: string): GraphqlCase => ({ actor: 'admin', authPick: 0, mode: 'variables', variables, mutations: [], csrf: true, requestId: {}, input });
  const graphqlCases: Record<string, GraphqlCase[]> = {
    'mutation enrollNode': [
      gql({ input: { bmc } }, 'issue 8: poolId missing, inline password'),
      gql({ input: { poolId: pool, bmc: { address: '127.0.0.5', credentials: { username: 'root', password: secret } } } }, 'issue 8: bmc.driver missing'),
      gql({ input: { poolId: pool, bmc: { ...bmc, credentials: { ...bmc.credentials, extra: 1 } } } }, 'issue 8: extra key in credentials'),
      gql({ input: { poolId: pool, name: 'a\u0000b', bmc } }, 'issue 8: name with NUL, inline credentials'),
    ],
  };
  // Valid creates whose second copy, sent at the same moment, hits the unique index after the check.
  const site = world.ids.mine.site![0]!;
  const tenant = world.ids.mine.ten![0]!;
  const bindings = { power: 'redfish', management: 'redfish', virtualMedia: 'redfish' };
  const races: Record<string, GraphqlCase[]> = {
    'mutation createSite': [gql({ input: { tenantId: tenant, name: 'race-site' } }, 'race: same site name')],
    'mutation createTenant': [gql({ input: { name: 'race-tenant' } }, 'race: same tenant name')],
    'mutation createPool': [gql({ input: { siteId: site, name: 'race-pool' } }, 'race: same pool name')],
    'mutation registerSiteAgent': [gql({ siteId: site, name: 'race-agent' }, 'race: same agent name')],
    'mutation createHardwareProfile': [gql({ input: { name: 'race-profile', driverBindings: bindings } }, 'race: same profile name')],
    'mutation enrollNode': [gql({ input: { poolId: pool, bmc: { ...bmc, credentials: { ref: 'secret://fixture' } }, macs: ['52:54:00:aa:bb:01'] } }, 'race: same MAC')],
  };
  const envelope: EnvelopeCase[] = [
    {
      actor: 'none', authPick: 0, label: 'issue 8: 10,000-deep variables, no token', method: 'POST', path: '/graphql', contentType: 'application/json',
      body: Buffer.from(`{"query":"query($f: NodeFilter) { nodes(filter: $f) { edges { cursor } } }","variables":{"f":${'{"a":'.repeat(10_000)}1${'}'.repeat(10_000)}}}`),
    },
  ];
  return { rest: restCases, graphql: graphqlCases, races, envelope };
}
