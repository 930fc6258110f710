import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type Browser, type BrowserContext, type Page, type Request } from 'playwright-core';
import { routes } from '../src/rest/routes';
import { bootOpenApiPaths } from '../src/modules/boot/openapi';
import { installerOpenApiPaths } from '../src/modules/provision/callback-openapi';
import { launchLoopbackBrowser } from './helpers/loopback-browser';
import { startTestApp, type TestApp } from './helpers/app';
import { makeTenantTree } from './helpers/fixtures';

/**
 * GraphiQL (/graphql) and the API reference (/docs) in a real browser that has no network but
 * loopback: Debian's headless Chromium, every request that is not for 127.0.0.1, localhost or
 * [::1] aborted and recorded. The pages must load, render and work from this service alone.
 */

// Set it to keep the screenshots (they are written to a temporary folder and removed otherwise).
const SHOTS = process.env.BROWSER_SHOTS_DIR;

jest.setTimeout(90_000);

/** Monaco draws spaces as no-break spaces. */
const plain = (text: string | null) => (text ?? '').replace(/\u00a0/g, ' ');

describe('browser pages with no network but loopback (headless Chromium)', () => {
  let t: TestApp;
  let browser: Browser;
  let context: BrowserContext;
  let shots: string;
  /** Every request (and WebSocket) for a host other than loopback: the tests fail on any. */
  let leftTheMachine: string[] = [];
  const pageErrors: string[] = [];
  const cspViolations: string[] = [];
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let token: string;
  let tokenId: string;

  beforeAll(async () => {
    shots = SHOTS ? (fs.mkdirSync(SHOTS, { recursive: true }), SHOTS) : fs.mkdtempSync(path.join(os.tmpdir(), 'metal-browser-'));
    t = await startTestApp();
    tree = await makeTenantTree(t.app.database.prisma, 'browser', { pools: 1, nodesPerPool: 1 });
    // A real token with a tenant grant, made through the API as an operator would.
    const created = await fetch(`${t.url}/api/tokens`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'browser', tenantId: tree.tenant.id, grants: [{ permission: 'compute:sites:read', scopeType: 'tenant', scopeId: tree.tenant.id }] }),
    });
    expect(created.status).toBe(201);
    const body = (await created.json()) as { token: string; apiToken: { id: string } };
    token = body.token;
    tokenId = body.apiToken.id;

    ({ browser, context, leftTheMachine } = await launchLoopbackBrowser({ width: 1400, height: 900 }));
    context.on('page', (page) => {
      page.on('pageerror', (error) => pageErrors.push(`${page.url()}: ${error.message}`));
      page.on('console', (message) => {
        if (/Content.Security.Policy/i.test(message.text())) cspViolations.push(`${page.url()}: ${message.text()}`);
      });
    });
  });

  afterAll(async () => {
    await browser?.close();
    await t?.stop();
    if (shots && !SHOTS) fs.rmSync(shots, { recursive: true, force: true });
  });

  afterEach(() => {
    expect(leftTheMachine).toEqual([]);
    expect(pageErrors).toEqual([]);
    expect(cspViolations).toEqual([]);
  });

  describe('GraphiQL at /graphql', () => {
    let page: Page;
    const graphqlRequests: Request[] = [];

    beforeAll(async () => {
      page = await context.newPage();
      page.on('request', (request) => {
        if (new URL(request.url()).pathname === '/graphql' && request.resourceType() !== 'document') graphqlRequests.push(request);
      });
    });
    afterAll(() => page?.close());

    /**
     * Replaces the whole text of a Monaco editor as a user would: focus, select all, paste (typed
     * text would get Monaco's closing brackets and quotes added).
     */
    async function setEditor(selector: string, text: string) {
      await page.locator(`${selector} .view-lines`).click();
      await page.keyboard.press('ControlOrMeta+A');
      await page.evaluate((pasted) => {
        const data = new DataTransfer();
        data.setData('text/plain', pasted);
        document.activeElement!.dispatchEvent(new ClipboardEvent('paste', { clipboardData: data, bubbles: true, cancelable: true }));
      }, text);
      await page.waitForFunction(
        ([sel, want]) => (document.querySelector(`${sel} .view-lines`)?.textContent ?? '').replace(/\u00a0/g, ' ').replace(/\s+/g, '') === want,
        [selector, text.replace(/\s+/g, '')] as const,
      );
    }

    const QUERY_EDITOR = 'section[aria-label="Operation Editor"]';
    const HEADERS_EDITOR = 'section[aria-label="Headers"] .graphiql-editor:not(.hidden)';
    const RESULT = 'section[aria-label="Result Window"]';

    async function run(query: string, expected: string): Promise<string> {
      await setEditor(QUERY_EDITOR, query);
      await page.locator('button.graphiql-execute-button').click();
      await page.waitForFunction(
        ([sel, want]) => (document.querySelector(sel)?.textContent ?? '').includes(want),
        [RESULT, expected] as const,
        { timeout: 30_000 },
      );
      return plain(await page.locator(RESULT).textContent());
    }

    it('is served by this service: the page, its scripts, styles and workers come from loopback only', async () => {
      const response = await page.goto(`${t.url}/graphql`);
      expect(response?.status()).toBe(200);
      expect(response?.headers()['content-type']).toMatch(/^text\/html/);
      await page.locator(QUERY_EDITOR).locator('.monaco-editor').waitFor();
      await page.locator(HEADERS_EDITOR).locator('.monaco-editor').waitFor();
      // The page loaded something from this service beyond itself (else offline would mean nothing).
      const resources = await page.evaluate(() => performance.getEntriesByType('resource').map((e) => e.name));
      expect(resources.some((u) => u.includes('/graphiql/assets/graphiql.js'))).toBe(true);
      expect(await page.title()).toBe('Metal control plane');
      // The default headers editor holds the CSRF header, and no placeholder token that would be sent.
      const headers = plain(await page.locator(HEADERS_EDITOR).locator('.view-lines').textContent());
      expect(headers).toContain('"x-graphql-csrf":"1"');
      expect(headers.toLowerCase()).not.toContain('authorization');
    });

    it('first screen: the docs pane lists Query (the schema loads without a token) and the page says where the token goes', async () => {
      await page.locator('button[aria-label="Show Documentation Explorer"]').click();
      const docs = page.locator('.graphiql-doc-explorer');
      await docs.getByText('Root Types').waitFor({ timeout: 30_000 });
      await docs.getByText('Query', { exact: true }).first().waitFor();
      expect(await docs.textContent()).not.toContain('Error fetching schema');
      // It came from an introspection without any Authorization header, answered 200.
      await page.waitForTimeout(1500); // longer than the page waits before fetching it again
      const introspections = graphqlRequests.filter((r) => (r.postData() ?? '').includes('__schema'));
      expect(introspections.length).toBe(1); // once: the page does not fetch it again for nothing
      const introspection = introspections[0];
      expect(await introspection!.headerValue('authorization')).toBeNull();
      expect((await introspection!.response())?.status()).toBe(200);
      await page.screenshot({ path: path.join(shots, 'graphiql-first-screen.png') });
      await page.locator('button[aria-label="Hide Documentation Explorer"]').click();
      // The query editor's first lines tell where the token goes.
      const query = plain(await page.locator(`${QUERY_EDITOR} .view-lines`).textContent());
      expect(query).toContain('Headers tab');
      expect(query).toContain('"authorization": "Bearer <your token>"');
    });

    it('fetches the schema again, with the token, once the headers change (no button pressed)', async () => {
      const refetched = page.waitForRequest(
        (r) => (r.postData() ?? '').includes('__schema') && r.headers().authorization === `Bearer ${token}`,
        { timeout: 15_000 },
      );
      await setEditor(HEADERS_EDITOR, JSON.stringify({ 'x-graphql-csrf': '1', Authorization: `Bearer ${token}` }));
      const request = await refetched;
      expect((await request.response())?.status()).toBe(200);
    });

    it('runs { viewer { tokenId } } with the token typed into the headers editor', async () => {
      await setEditor(HEADERS_EDITOR, JSON.stringify({ 'x-graphql-csrf': '1', Authorization: `Bearer ${token}` }));
      const before = graphqlRequests.length;
      const result = await run('{ viewer { tokenId } }', tokenId);
      expect(result).toMatch(new RegExp(`"tokenId":\\s*"${tokenId}"`));
      expect(result).not.toContain('"errors"');
      // GraphiQL sent the token it was given, and the service answered it.
      const sent = graphqlRequests.slice(before).find((r) => (r.postData() ?? '').includes('viewer'));
      expect(sent).toBeDefined();
      expect(await sent!.headerValue('authorization')).toBe(`Bearer ${token}`);
      expect((await sent!.response())?.status()).toBe(200);
      await page.screenshot({ path: path.join(shots, 'graphiql.png') });
    });

    it('re-fetches the schema with the token (introspection works from the page)', async () => {
      const before = graphqlRequests.length;
      await page.locator('button[aria-label^="Re-fetch GraphQL schema"]').click();
      await page.locator('button[aria-label="Show Documentation Explorer"]').click();
      await page.locator('.graphiql-doc-explorer').getByText('Root Types').waitFor();
      const introspection = graphqlRequests.slice(before).find((r) => (r.postData() ?? '').includes('__schema'));
      expect(introspection).toBeDefined();
      expect(await introspection!.headerValue('authorization')).toBe(`Bearer ${token}`);
      expect((await introspection!.response())?.status()).toBe(200);
      await page.locator('button[aria-label="Hide Documentation Explorer"]').click();
    });

    it('runs a subscription over SSE with the token (nodeUpdated gives the node at once)', async () => {
      const nodeId = tree.nodes[0]!.id;
      const before = graphqlRequests.length;
      const result = await run(`subscription { nodeUpdated(id: "${nodeId}") { id provisionState } }`, nodeId);
      expect(result).toMatch(/"provisionState":\s*"ready"/);
      // GraphiQL streams subscriptions as GET /graphql?query=... with Accept: text/event-stream.
      const stream = graphqlRequests.slice(before).find((r) => `${r.url()} ${r.postData() ?? ''}`.includes('nodeUpdated'));
      expect(stream).toBeDefined();
      expect(await stream!.headerValue('accept')).toMatch(/text\/event-stream/);
      expect(await stream!.headerValue('authorization')).toBe(`Bearer ${token}`);
      await page.screenshot({ path: path.join(shots, 'graphiql-subscription.png') });
      // Stop it, as a user would: the execute button is the stop button while it runs.
      await page.locator('button.graphiql-execute-button').click();
    });
  });

  describe('the API reference at /docs', () => {
    let page: Page;
    let doc: { paths: Record<string, Record<string, any>> };

    beforeAll(async () => {
      page = await context.newPage();
      doc = (await (await fetch(`${t.url}/openapi.json`)).json()) as typeof doc;
    });
    afterAll(() => page?.close());

    it('renders every route of /openapi.json, from this service alone', async () => {
      const response = await page.goto(`${t.url}/docs`);
      expect(response?.status()).toBe(200);
      const boot = Object.entries({ ...bootOpenApiPaths(), ...installerOpenApiPaths() }).flatMap(([path, item]) => Object.keys(item).map((method) => `${method.toUpperCase()} ${path}`));
      const expected = [...routes.map((r) => `${r.method} ${r.path}`), 'GET /api/events', ...boot].sort();
      await page.waitForFunction((n) => document.querySelectorAll('.opblock').length >= n, expected.length, { timeout: 60_000 });
      const shown = await page.locator('.opblock').evaluateAll((blocks) =>
        blocks.map((b) => `${b.querySelector('.opblock-summary-method')?.textContent} ${b.querySelector('.opblock-summary-path')?.getAttribute('data-path')}`),
      );
      expect(shown.sort()).toEqual(expected);
      const resources = await page.evaluate(() => performance.getEntriesByType('resource').map((e) => e.name));
      expect(resources.some((u) => u.includes('/docs/assets/swagger-ui-bundle.js'))).toBe(true);
      expect(resources.some((u) => u.endsWith('/openapi.json'))).toBe(true);
    });

    it('shows an operation\'s request example, its response example and schema, and every error status', async () => {
      const route = routes.find((r) => r.operation === 'Enroll')!;
      const operation = doc.paths[route.path]!.post;
      const block = page.locator('#operations-metal-Enroll');
      await block.locator('.opblock-summary-control').click();
      const requestExample = block.locator('.opblock-section-request-body .microlight');
      await requestExample.waitFor();
      expect(JSON.parse(plain(await requestExample.textContent()))).toEqual(route.example!.body);

      const ok = block.locator('tr.response[data-code="200"]');
      expect(JSON.parse(plain(await ok.locator('.microlight').textContent()))).toEqual(route.example!.response);
      const codes = await block.locator('tr.response').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-code')));
      expect(codes).toEqual(Object.keys(operation.responses));
      expect(codes).toEqual(expect.arrayContaining(['200', '400', '401', '403', '404', '409', '413', '422', '500']));
      // An error status shows the error envelope.
      const notFound = plain(await block.locator('tr.response[data-code="404"] .microlight').textContent());
      expect(JSON.parse(notFound)).toEqual({ error: { code: 'NOT_FOUND', message: expect.any(String), requestId: expect.any(String) } });
      await requestExample.scrollIntoViewIfNeeded();
      await page.screenshot({ path: path.join(shots, 'docs-enroll.png'), fullPage: false });

      // The schema tab of the success response names the entity and its fields.
      await ok.locator('button[data-name="model"]').click();
      const model = ok.locator('.model-box');
      await model.waitFor();
      await model.getByRole('button', { name: 'Expand all' }).first().click();
      await model.getByText('provisionState').first().waitFor();
      const text = (await model.textContent()) ?? '';
      expect(text).toContain('The metal view of a node'); // the $ref to MetalNode, resolved
      for (const field of ['provisionState', 'bmc', 'credentialsSet', 'macs', 'version']) expect(text).toContain(field);
      await ok.scrollIntoViewIfNeeded();
      await page.screenshot({ path: path.join(shots, 'docs-enroll-schema.png'), fullPage: false });
    });
  });
});
