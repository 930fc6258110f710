import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import zlib from 'node:zlib';
import path from 'node:path';
import { type Browser, type BrowserContext, type Page } from 'playwright-core';
import { launchLoopbackBrowser } from './helpers/loopback-browser';
import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { startMachineSim, type MachineSim } from './sim/machine';
import { freePort } from './helpers/ports';
import { bmcCertificates } from './helpers/tls';

/**
 * The status page (/ui) in headless Chromium with no network but loopback, against the whole
 * service and the machine simulator: the token given once in the fragment is moved into
 * sessionStorage and out of the address bar; while simulated machines enroll, inspect and
 * commission, the page's counts by state move with them (from the event stream: the page is
 * never reloaded); a machine whose BMC refuses its credentials appears among the failed nodes with
 * its error; nothing is loaded from anywhere else; a screenshot is taken.
 */

// Set it to keep the screenshots (they are written to a temporary folder and removed otherwise).
const SHOTS = process.env.BROWSER_SHOTS_DIR;

jest.setTimeout(150_000);

describe('the status page /ui (headless Chromium, loopback only, machine simulator)', () => {
  let t: TestApp;
  let sim: MachineSim;
  /** A control node's BMC: HTTPS on 443 of its own loopback address, as provisioning wants it. */
  let cnSim: MachineSim | null = null;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let shots: string;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  /** The page's token: read-only, on the tenant. */
  let token: string;
  /** Enrolls: the operator's side of the test. */
  let operator: string;
  let leftTheMachine: string[] = [];
  const pageErrors: string[] = [];
  const cspViolations: string[] = [];
  let requestUrls: string[] = [];

  beforeAll(async () => {
    shots = SHOTS ? (fs.mkdirSync(SHOTS, { recursive: true }), SHOTS) : fs.mkdtempSync(path.join(os.tmpdir(), 'metal-ui-'));
    t = await startTestApp({ role: 'all', agentPollMs: 200, isoDir: path.join(shots, 'iso') });
    // Where a control-node job's installer ISO is fetched from (the BMC simulator fetches it).
    t.app.services.config.publicUrl = t.url;
    sim = await startMachineSim({
      serviceUrl: t.url,
      redfish: { machines: [
        { id: 'ui-a' }, { id: 'ui-b', flavour: 'idrac', mockup: 'public-localstorage' }, { id: 'ui-refuses' },
        // Enrolled by its UUID only: its enroll run waits for its MAC to be confirmed (for a day).
        { id: 'ui-waits', uuid: '5b2f0c1e-7d3a-4e9b-9f10-2c4d6e8a0b1c', noEthernetInterfaces: true },
      ] },
    });
    tree = await makeTenantTree(t.app.database.prisma, 'ui', { pools: 1, nodesPerPool: 0 });
    token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:sites:read', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    operator = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);

    ({ browser, context, leftTheMachine, requestUrls } = await launchLoopbackBrowser({ width: 1400, height: 1000 }));
    context.on('page', (p) => {
      p.on('pageerror', (error) => pageErrors.push(`${p.url()}: ${error.message}`));
      p.on('console', (message) => {
        if (/Content.Security.Policy/i.test(message.text())) cspViolations.push(`${p.url()}: ${message.text()}`);
      });
    });
    page = await context.newPage();
  });

  afterAll(async () => {
    await browser?.close();
    await sim?.stop();
    await t?.stop();
    await cnSim?.stop();
    if (shots && !SHOTS) fs.rmSync(shots, { recursive: true, force: true });
    else if (shots) fs.rmSync(path.join(shots, 'iso'), { recursive: true, force: true });
  });

  afterEach(() => {
    expect(leftTheMachine).toEqual([]);
    expect(pageErrors).toEqual([]);
    expect(cspViolations).toEqual([]);
    // The token never travels in a URL (the fragment is never requested: browsers keep it).
    expect(requestUrls.filter((u) => u.includes(token) || u.includes(encodeURIComponent(token)))).toEqual([]);
  });

  /** The page's "all" row: count per state, as shown. */
  const totals = () => page.evaluate(() => {
    const out: Record<string, number> = {};
    for (const td of document.querySelectorAll<HTMLElement>('#counts tfoot td[data-state]')) out[td.dataset.state!] = Number(td.textContent);
    return out;
  });

  it('serves the page and its assets from this service with a Content-Security-Policy that names no other origin', async () => {
    const r = await fetch(`${t.url}/ui`);
    expect(r.status).toBe(200);
    const csp = r.headers.get('content-security-policy')!;
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("connect-src 'self'");
    expect(csp).not.toMatch(/https?:|\*|unsafe/);
    const html = await r.text();
    expect(html).not.toMatch(/https?:\/\//);
    const assets = [...html.matchAll(/(?:href|src)="(\/ui\/assets\/[^"]+)"/g)].map((m) => m[1]!);
    expect(assets).toHaveLength(2);
    for (const a of assets) {
      const asset = await fetch(`${t.url}${a}`);
      expect(asset.status).toBe(200);
      expect(await asset.text()).not.toMatch(/https?:\/\/(?!127\.0\.0\.1)/);
    }
    expect((await fetch(`${t.url}/ui`, { method: 'POST' })).status).toBe(405);
  });

  it('is small: the page and its assets are under 12 KiB on the wire (gzip) and 48 KiB unpacked (docs/ui.md records the figure)', async () => {
    /** The bytes as sent (no decompression, which fetch would do), and as unpacked. */
    const get = (path: string) => new Promise<{ wire: number; raw: number; encoding: string }>((resolve, reject) => {
      http.get(`${t.url}${path}`, { headers: { 'accept-encoding': 'gzip' } }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const body = Buffer.concat(chunks);
          const encoding = String(res.headers['content-encoding'] ?? 'identity');
          resolve({ wire: body.length, raw: encoding === 'gzip' ? zlib.gunzipSync(body).length : body.length, encoding });
        });
      }).on('error', reject);
    });
    const html = await (await fetch(`${t.url}/ui`)).text();
    const paths = ['/ui', ...[...html.matchAll(/(?:href|src)="(\/ui\/assets\/[^"]+)"/g)].map((m) => m[1]!)];
    const sizes = await Promise.all(paths.map(get));
    const wire = sizes.reduce((n, s) => n + s.wire, 0);
    const raw = sizes.reduce((n, s) => n + s.raw, 0);
    console.log(`/ui: ${paths.map((p, i) => `${p.replace(/\?.*/, '')} ${sizes[i]!.wire} B (${sizes[i]!.encoding}, ${sizes[i]!.raw} B unpacked)`).join('; ')}; total ${wire} B on the wire, ${raw} B unpacked`);
    expect(sizes.slice(1).every((s) => s.encoding === 'gzip')).toBe(true);
    expect(wire).toBeLessThan(12 * 1024);
    expect(raw).toBeLessThan(48 * 1024);
  });

  it('takes the token from the fragment into sessionStorage and out of the address bar', async () => {
    const response = await page.goto(`${t.url}/ui#token=${encodeURIComponent(token)}`);
    expect(response?.status()).toBe(200);
    await page.locator('#conn.live').waitFor({ timeout: 30_000 });
    expect(page.url()).toBe(`${t.url}/ui`);
    expect(await page.evaluate(() => location.hash)).toBe('');
    expect(await page.evaluate(() => sessionStorage.getItem('metal.token'))).toBe(token);
    await page.locator('#counts').getByText('no nodes').waitFor();
    // A read-only tenant token: the fabric section says why it shows nothing.
    await page.locator('#fabric').getByText('platform-scoped grant').waitFor();
  });

  it('counts move with the machines, live; a machine whose BMC refuses appears failed with its error', async () => {
    const seen: string[] = [];
    /** A row of the running workflows, as first seen: node, workflow, step, status, try, time in step. */
    let runRow: (string | null)[] | null = null;
    let polling = true;
    const poll = (async () => {
      while (polling) {
        const now = JSON.stringify(await totals().catch(() => ({})));
        if (seen.at(-1) !== now) seen.push(now);
        const runs = await page.locator('#runs tbody tr').count().catch(() => 0);
        // A row once its node's name is known (an event names a node by id: the page asks its name).
        if (runs > 0 && !runRow) {
          const rows = await page.locator('#runs tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent))).catch(() => []);
          runRow = rows.find((r) => ['ui-a', 'ui-b', 'ui-refuses'].includes(r[0] ?? '')) ?? null;
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    const ids = new Map<string, string>();
    for (const m of sim.machines.filter((x) => x.id !== 'ui-waits')) {
      const refuses = m.id === 'ui-refuses';
      const r = await rest(t.url, operator, 'POST', '/api/compute/metal/enroll', {
        poolId: tree.pools[0]!.id, name: m.id, macs: m.macs,
        bmc: { address: m.bmc.url, driver: 'redfish', credentials: { username: m.bmc.username, password: refuses ? 'not-the-password' : m.bmc.password } },
      });
      expect(r.status).toBe(200);
      ids.set(m.id, r.body.node.id);
    }
    // The failed machine, with its error, as the API says it.
    const failedRow = page.locator(`#failed tr[data-node="${ids.get('ui-refuses')}"]`);
    await failedRow.waitFor({ timeout: 90_000 });
    const { data: { node } } = await gql<any>(t.url, operator, 'query ($id: ID!) { node(id: $id) { ... on MetalNode { provisionState lastError { code message } } } }', { id: ids.get('ui-refuses') });
    expect(node.provisionState).toBe('failed');
    expect(node.lastError.code).toBe('BMC_AUTH_FAILED');
    const text = (await failedRow.textContent()) ?? '';
    expect(text).toContain('ui-refuses');
    expect(text).toContain(`${node.lastError.code}: ${node.lastError.message}`);
    expect(text).not.toContain('not-the-password');
    // The two good machines reach ready.
    await page.waitForFunction(() => document.querySelector('#counts tfoot td[data-state="ready"]')?.textContent === '2', undefined, { timeout: 120_000 });
    polling = false;
    await poll;
    seen.push(JSON.stringify(await totals()));
    expect(JSON.parse(seen.at(-1)!)).toEqual({ ready: 2, failed: 1 });
    // On the way the counts passed through the moving states, without a reload.
    // (The page reads the counts again at most every 300 ms: a state a machine passes through
    // faster may be skipped, so not every state is required, but a moving one is. Since the engine
    // takes a woken run at once (its own due-run index), a CI run saw only one of the three.)
    const states = new Set(seen.flatMap((s) => Object.entries(JSON.parse(s) as Record<string, number>).filter(([, n]) => n > 0).map(([k]) => k)));
    const moving = [...states].filter((s) => ['enrolling', 'inspecting', 'commissioning'].includes(s));
    expect(moving.length).toBeGreaterThanOrEqual(1);
    expect([...states].every((s) => ['enrolling', 'inspecting', 'commissioning', 'ready', 'failed'].includes(s))).toBe(true);
    expect(seen.length).toBeGreaterThanOrEqual(4);
    expect(runRow).not.toBeNull();
    const [runNode, kind, step, status, , inStep] = runRow!;
    expect(['ui-a', 'ui-b', 'ui-refuses']).toContain(runNode);
    expect(kind).toMatch(/^metal-(enroll|inspect|commission)$/);
    expect(step).toMatch(/\w/);
    expect(status).toMatch(/^(running|waiting|succeeded|unverified|failed)$/);
    expect(inStep).toMatch(/^\d+ s$/);
    // Settled: no run shown any more, and the pool's row names its site and pool.
    await page.locator('#runs').getByText('none').waitFor();
    const row = (await page.locator(`#counts tbody tr[data-pool="${tree.pools[0]!.id}"]`).textContent()) ?? '';
    expect(row).toContain('ui-site');
    expect(row).toContain('ui-pool-0');
    expect(await page.evaluate(() => performance.getEntriesByType('navigation').length)).toBe(1);
    // Every read the page made was answered (a refused one shows its error in the header).
    expect(await page.locator('#note').allTextContents()).toEqual([]);

    const file = path.join(shots, 'ui-status.png');
    await page.screenshot({ path: file, fullPage: true });
    const png = fs.readFileSync(file);
    expect(png.length).toBeGreaterThan(1000);
    expect(png.subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
  });

  it('a page opened while a run waits shows it from its first read (no event needed): its step, waiting, and the time in it; a run that supersedes it replaces it', async () => {
    const m = sim.machine('ui-waits');
    const r = await rest(t.url, operator, 'POST', '/api/compute/metal/enroll', {
      poolId: tree.pools[0]!.id, name: 'ui-waits', productUuid: m.uuid,
      bmc: { address: m.bmc.url, driver: 'redfish', credentials: { username: m.bmc.username, password: m.bmc.password } },
    });
    expect(r.status).toBe(200);
    const nodeId = r.body.node.id as string;
    // Until its run waits for the MAC (as the API's timeline says).
    for (let i = 0; ; i += 1) {
      const tl = await gql<any>(t.url, operator, 'query ($id: ID!) { node(id: $id) { ... on MetalNode { timeline(last: 1) { status } } } }', { id: nodeId });
      if (tl.data?.node?.timeline?.[0]?.status === 'waiting') break;
      if (i > 300) throw new Error(`the enroll run never waited: ${JSON.stringify(tl)}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const later = await context.newPage();
    try {
      await later.goto(`${t.url}/ui#token=${encodeURIComponent(token)}`);
      const row = later.locator('#runs tbody tr').filter({ hasText: 'ui-waits' });
      await row.waitFor({ timeout: 30_000 });
      const cells = await row.locator('td').allTextContents();
      expect(cells[1]).toBe('metal-enroll');
      expect(cells[3]).toBe('waiting');
      expect(cells[5]).toMatch(/^\d+ s$/);
      // The time in the step moves with the clock.
      await later.waitForFunction((before) => {
        const cell = [...document.querySelectorAll('#runs tbody tr')].find((tr) => tr.textContent?.includes('ui-waits'))?.children[5];
        return cell !== undefined && cell.textContent !== before;
      }, cells[5]);
      expect(await later.locator('#counts tfoot td[data-state="enrolling"]').textContent()).toBe('1');
      // Retired while it waits: the retire run supersedes the enroll run (the store sends no
      // workflow.finished for a superseded run), and the page shows the one run the node has.
      const retired = await gql<any>(t.url, operator, 'mutation ($i: MetalNodeVerbInput!) { retireNode(input: $i) { node { provisionState } } }', { i: { nodeId } });
      expect(retired.errors).toBeUndefined();
      await later.waitForFunction(() => ![...document.querySelectorAll('#runs tbody tr')].some((tr) => tr.textContent?.includes('ui-waits') && tr.textContent.includes('metal-enroll')), undefined, { timeout: 30_000 });
      const left = await later.locator('#runs tbody tr').filter({ hasText: 'ui-waits' }).allTextContents();
      expect(left.length).toBeLessThanOrEqual(1);
      expect(left.every((row) => row.includes('metal-retire'))).toBe(true);
      expect(await later.locator('#note').allTextContents()).toEqual([]);
    } finally {
      await later.close();
    }
  });

  it('shows a fabric rollout node by node: two compute nodes whose SSH refuses fail with their error', async () => {
    const { prisma } = t.app.database;
    const admin = t.adminToken;
    const fab = await makeTenantTree(prisma, 'uifab', { pools: 1, nodesPerPool: 2 });
    await prisma.node.updateMany({ where: { id: { in: fab.nodes.map((n) => n.id) } }, data: { provisionState: 'deployed' } });
    const saved = await rest(t.url, admin, 'POST', '/controlnode/fabric-config', {
      as: 65000, fabric_switch_as: 65000, external_route_reflector: true, fabric_switch_nos: 'sonic', fabric_switch_peering_ip: '172.30.10.254',
      fabric_switch_name: 'spine1', router_id_cidr: '10.255.0.1/24', management_cidr: '10.0.0.0/8', ospf_enabled: false,
      expected_nodes: 10, expected_vms: 100, vxlan_mtu: 9000,
    });
    expect(saved.status).toBe(200);
    // Loopback addresses on a port nobody listens on: each connect is refused at once.
    const closed = await freePort();
    const ips = ['127.0.0.2', '127.0.0.3'];
    for (const [i, node] of fab.nodes.entries()) {
      const set = await gql<any>(t.url, admin, 'mutation ($i: SetComputeNodeInput!) { setComputeNode(input: $i) { created } }', { i: { nodeId: node.id, osIp: ips[i], sshPort: closed, fqdn: `cn${i}.ui.example` } });
      expect(set.errors).toBeUndefined();
    }
    const fabricPage = await context.newPage();
    try {
      await fabricPage.goto(`${t.url}/ui#token=${encodeURIComponent(admin)}`);
      await fabricPage.locator('#fabric').getByText('no fabric rollout yet').waitFor({ timeout: 30_000 });
      await fabricPage.locator('#conn.live').waitFor();
      const applied = await gql<any>(t.url, admin, 'mutation { applyFabric { applyJobId } }');
      expect(applied.errors).toBeUndefined();
      for (const [i, ip] of ips.entries()) {
        const row = fabricPage.locator(`#fabric tr[data-fabric-node="${ip}"]`);
        await row.getByText('failed', { exact: true }).waitFor({ timeout: 60_000 });
        const text = (await row.textContent()) ?? '';
        expect(text).toContain(`cn${i}.ui.example (${ip})`);
        expect(text).toMatch(/refused/);
        // Nothing past the refused connect: no step done of the apply's eight.
        expect(text).toContain('0/8');
        expect(await row.locator('progress').count()).toBe(1);
      }
      const heading = (await fabricPage.locator('#fabric h2').textContent()) ?? '';
      expect(heading).toContain('fabric_apply failed');
      expect(heading).toMatch(/0\/2 done, 2 failed/);
      expect(await fabricPage.locator('#note').allTextContents()).toEqual([]);
      await fabricPage.screenshot({ path: path.join(shots, 'ui-fabric.png'), fullPage: true });
    } finally {
      await fabricPage.close();
    }
  });

  it('without a token, asks for one; a pasted token is kept in sessionStorage and shows the same counts', async () => {
    const fresh = await context.newPage();
    try {
      await fresh.goto(`${t.url}/ui`);
      const input = fresh.locator('#login input[type=password]');
      await input.waitFor();
      await input.fill('not-a-token');
      await fresh.locator('#login button[type=submit]').click();
      // Refused: the form again, saying so, and nothing kept.
      await fresh.locator('#login').getByText('refused this token').waitFor();
      expect(await fresh.evaluate(() => sessionStorage.getItem('metal.token'))).toBeNull();
      await fresh.locator('#login input[type=password]').fill(token);
      await fresh.locator('#login button[type=submit]').click();
      // 60 s, as the other waits here: on a loaded CI machine the page's stream and first reads once took longer than 30 s.
      await fresh.waitForFunction(() => document.querySelector('#counts tfoot td[data-state="ready"]')?.textContent === '2', undefined, { timeout: 60_000 });
      expect(await fresh.evaluate(() => sessionStorage.getItem('metal.token'))).toBe(token);
      expect(fresh.url()).toBe(`${t.url}/ui`);
    } finally {
      await fresh.close();
    }
  });

  it('shows a control-node job: its stage and progress while it installs, then how it ended once cancelled', async () => {
    const ip = '127.88.22.1';
    const certs = bmcCertificates(shots, [ip]);
    cnSim = await startMachineSim({
      serviceUrl: t.url,
      // MACs of its own: a second simulator numbers its machines from 0 again.
      redfish: { machines: [{ id: 'ui-cn', flavour: 'idrac', mockup: 'public-localstorage', listen: { host: ip, port: 443 }, macs: ['52:54:00:aa:01:01', '52:54:00:aa:01:02'] }], tls: { key: certs.key, cert: certs.cert } },
    });
    const m = cnSim.machines[0]!;
    const jobsPage = await context.newPage();
    try {
      await jobsPage.goto(`${t.url}/ui#token=${encodeURIComponent(token)}`);
      await jobsPage.locator('#conn.live').waitFor({ timeout: 30_000 });
      await jobsPage.locator('#jobs').getByText('none seen').waitFor();
      const r = await rest(t.url, operator, 'POST', '/api/compute/metal/enroll', {
        poolId: tree.pools[0]!.id, name: 'ui-cn', macs: m.macs,
        bmc: { address: ip, driver: 'redfish', driverOptions: { caCert: certs.ca }, credentials: { username: m.bmc.username, password: m.bmc.password } },
      });
      expect(r.status).toBe(200);
      await jobsPage.waitForFunction((id) => document.querySelector(`#counts tbody tr[data-pool="${id}"] td[data-state="ready"]`)?.textContent === '3', tree.pools[0]!.id, { timeout: 60_000 });
      const p = await gql<any>(t.url, operator, 'mutation ($i: ProvisionControlNodeInput!) { provisionControlNode(input: $i) { jobId } }', { i: { bmcIp: ip, vendor: 'dell', hostname: 'cn-ui', selectedDisks: ['sda'], poolType: 'single' } });
      expect(p.errors).toBeUndefined();
      const jobId = p.data.provisionControlNode.jobId as string;
      const row = jobsPage.locator(`#jobs tr[data-job="${jobId}"]`);
      // The installer is never played here: the job waits in Installing OS, part done.
      await row.getByText('Installing OS').waitFor({ timeout: 60_000 });
      let cells = await row.locator('td').allTextContents();
      expect(cells.slice(0, 4)).toEqual(['cn-ui', ip, 'provision running', 'Installing OS']);
      expect(Number(cells[4]!.match(/(\d+)%/)![1])).toBeGreaterThan(0);
      // A running workflow too, for the same node.
      await jobsPage.locator('#runs tbody tr').filter({ hasText: 'metal-install' }).waitFor();
      const cancelled = await gql<any>(t.url, operator, 'mutation ($id: ID!) { cancelControlNodeJob(id: $id) { jobStatus } }', { id: jobId });
      expect(cancelled.errors).toBeUndefined();
      await row.getByText('provision cancelled').waitFor({ timeout: 60_000 });
      cells = await row.locator('td').allTextContents();
      expect(cells[5]).toMatch(/^ABORTED: /);
      expect(await jobsPage.locator('#note').allTextContents()).toEqual([]);
      await jobsPage.screenshot({ path: path.join(shots, 'ui-jobs.png'), fullPage: true });
    } finally {
      await jobsPage.close();
    }
  });

  it('a token revoked while the page is open: the live stream ends and the page asks for a token again, keeping none', async () => {
    const created = await gql<any>(t.url, t.adminToken, 'mutation ($i: CreateApiTokenInput!) { createApiToken(input: $i) { token apiToken { id } } }', {
      i: { name: 'ui-revoked', tenantId: tree.tenant.id, grants: [{ permission: 'compute:sites:read', scopeType: 'tenant', scopeId: tree.tenant.id }] },
    });
    expect(created.errors).toBeUndefined();
    const { token: doomed, apiToken } = created.data.createApiToken;
    const doomedPage = await context.newPage();
    try {
      await doomedPage.goto(`${t.url}/ui#token=${encodeURIComponent(doomed)}`);
      await doomedPage.locator('#conn.live').waitFor({ timeout: 30_000 });
      const revoked = await gql<any>(t.url, t.adminToken, 'mutation ($id: ID!) { revokeApiToken(id: $id) { revokedAt } }', { id: apiToken.id });
      expect(revoked.errors).toBeUndefined();
      await doomedPage.locator('#login').getByText('refused this token').waitFor({ timeout: 30_000 });
      expect(await doomedPage.evaluate(() => sessionStorage.getItem('metal.token'))).toBeNull();
    } finally {
      await doomedPage.close();
    }
    expect(requestUrls.filter((u) => u.includes(doomed))).toEqual([]);
  });
});

describe('nodeCounts: what the page counts with, decided like nodes', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t?.stop());

  it('counts by site, pool and state the nodes the token may read, and no other tenant\'s', async () => {
    const { prisma } = t.app.database;
    const mine = await makeTenantTree(prisma, 'counts-a', { pools: 2, nodesPerPool: 3 });
    const theirs = await makeTenantTree(prisma, 'counts-b', { pools: 1, nodesPerPool: 4 });
    await prisma.node.update({ where: { id: mine.nodes[0]!.id }, data: { provisionState: 'failed' } });
    const query = 'query ($f: NodeFilter) { nodeCounts(filter: $f) { siteId poolId provisionState count } }';
    const tenantToken = await makeToken(prisma, mine.tenant.id, [{ permission: 'compute:sites:read', scopeType: 'tenant', scopeId: mine.tenant.id }]);
    const all = await gql<any>(t.url, tenantToken, query);
    expect(all.errors).toBeUndefined();
    const [p0, p1] = mine.pools.map((p) => p.id);
    const poolOf = (id: string) => mine.nodes.find((n) => n.id === id)!.poolId;
    const failedPool = poolOf(mine.nodes[0]!.id);
    const otherPool = failedPool === p0 ? p1! : p0!;
    expect(all.data.nodeCounts).toEqual(expect.arrayContaining([
      { siteId: mine.site.id, poolId: failedPool, provisionState: 'failed', count: 1 },
      { siteId: mine.site.id, poolId: failedPool, provisionState: 'ready', count: 2 },
      { siteId: mine.site.id, poolId: otherPool, provisionState: 'ready', count: 3 },
    ]));
    expect(all.data.nodeCounts).toHaveLength(3);
    // A filter narrows; a pool-scoped token sees its pool only.
    const filtered = await gql<any>(t.url, tenantToken, query, { f: { poolId: otherPool } });
    expect(filtered.data.nodeCounts).toEqual([{ siteId: mine.site.id, poolId: otherPool, provisionState: 'ready', count: 3 }]);
    const poolToken = await makeToken(prisma, mine.tenant.id, [{ permission: 'compute:sites:read', scopeType: 'pool', scopeId: failedPool }]);
    expect((await gql<any>(t.url, poolToken, query)).data.nodeCounts.map((c: any) => c.poolId)).toEqual([failedPool, failedPool]);
    // Another tenant's token counts its own nodes only; no token is UNAUTHENTICATED.
    const theirToken = await makeToken(prisma, theirs.tenant.id, [{ permission: 'compute:sites:read', scopeType: 'tenant', scopeId: theirs.tenant.id }]);
    expect((await gql<any>(t.url, theirToken, query)).data.nodeCounts).toEqual([{ siteId: theirs.site.id, poolId: theirs.pools[0]!.id, provisionState: 'ready', count: 4 }]);
    const anonymous = await gql<any>(t.url, null, query);
    expect(anonymous.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED');
  });
});
