import { startTestApp, type TestApp } from './helpers/app';
import { gql } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';

const REPORT = 'mutation ($m: [SightingInput!]) { agentReportStatus(machines: $m) { id } }';
it('repro', async () => {
  const t: TestApp = await startTestApp({ responseCacheTtlMs: 60000 });
  const tree = await makeTenantTree(t.app.database.prisma, 'r', { pools: 1, nodesPerPool: 0 });
  const token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  const r = await gql(t.url, token, 'mutation ($s: ID!, $n: String!) { registerSiteAgent(siteId: $s, name: $n) { token } }', { s: tree.site.id, n: 'a' });
  const agent = r.data!.registerSiteAgent.token;
  const Q = 'query ($s: ID!) { discovered(siteId: $s) { mac } }';
  console.log(JSON.stringify((await gql(t.url, token, Q, { s: tree.site.id })).data));
  console.log(JSON.stringify((await gql(t.url, token, Q, { s: tree.site.id })).data));
  const now = new Date().toISOString();
  console.log(JSON.stringify(await gql(t.url, agent, REPORT, { m: [{ mac: '52:54:00:00:00:01', firstSeen: now, lastSeen: now, requestCount: 1 }] })));
  for (let i = 0; i < 10; i++) {
    console.log(i, JSON.stringify((await gql(t.url, token, Q, { s: tree.site.id })).data));
    await new Promise((r) => setTimeout(r, 100));
  }
  await t.stop();
});
