import { startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { profileProblems } from '../src/modules/metal/deploy-profile';

const SAVE = 'mutation ($i: DeployProfileVersionInput!) { saveDeployProfileVersion(input: $i) { id name versions { version role steps } } }';
const STEPS = [{ name: 'disk', kind: 'partition' }, { name: 'os', kind: 'image', params: { image: 'debian-12' } }];

describe('deploy profiles', () => {
  let t: TestApp;
  let admin: string;
  let otherAdmin: string;
  beforeAll(async () => {
    t = await startTestApp();
    const a = await makeTenantTree(t.app.database.prisma, 'dp-a', { pools: 1, nodesPerPool: 0 });
    const b = await makeTenantTree(t.app.database.prisma, 'dp-b', { pools: 1, nodesPerPool: 0 });
    admin = await makeToken(t.app.database.prisma, a.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: a.tenant.id }]);
    otherAdmin = await makeToken(t.app.database.prisma, b.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: b.tenant.id }]);
  });
  afterAll(() => t.stop());

  it.each([
    ['no steps', 'r', [], /at least one step/],
    ['an unknown kind', 'r', [{ name: 'x', kind: 'format-c' }, { name: 'os', kind: 'image' }], /steps\[0\]\.kind/],
    ['a name used twice', 'r', [{ name: 'os', kind: 'image' }, { name: 'os', kind: 'reboot' }], /steps\[1\]\.name/],
    ['no image step', 'r', [{ name: 'disk', kind: 'partition' }], /no image step/],
    ['an empty role', ' ', STEPS, /role/],
  ])('finds problems: %s', (_label, role, steps, problem) => {
    expect(profileProblems(role as string, steps).join('\n')).toMatch(problem as RegExp);
  });

  it('versions are immutable and numbered one after another, even when saved at once', async () => {
    const created = await gql(t.url, admin, SAVE, { i: { name: 'web', role: 'web', steps: STEPS } });
    const id = created.data!.saveDeployProfileVersion.id;
    expect(id).toMatch(/^dpr_/);
    await Promise.all(Array.from({ length: 5 }, (_, i) => gql(t.url, admin, SAVE, { i: { profileId: id, role: `web-${i}`, steps: STEPS } })));
    const profile = await gql(t.url, admin, 'query ($id: ID!) { node(id: $id) { ... on DeployProfile { versions { version } } } }', { id });
    expect(profile.data!.node.versions.map((v: { version: number }) => v.version)).toEqual([1, 2, 3, 4, 5, 6]);
    const dup = await gql(t.url, admin, SAVE, { i: { name: 'web', role: 'web', steps: STEPS } });
    expect(codeOf(dup)).toBe('CONFLICT');
    const bad = await gql(t.url, admin, SAVE, { i: { profileId: id, role: 'web', steps: [{ name: 'x', kind: 'nope' }] } });
    expect(codeOf(bad)).toBe('INVALID_INPUT');
    expect(bad.errors![0]!.extensions!.details).toMatchObject({ problems: expect.arrayContaining([expect.stringMatching(/kind/)]) });
    // Another tenant neither sees nor extends it.
    expect(codeOf(await gql(t.url, otherAdmin, SAVE, { i: { profileId: id, role: 'x', steps: STEPS } }))).toBe('NOT_FOUND');
    expect(codeOf(await gql(t.url, otherAdmin, 'query ($id: ID!) { validateProfile(profileId: $id, profileVersion: 1) { valid } }', { id }))).toBe('NOT_FOUND');
  });
});
