import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { startTestApp, type TestApp } from './helpers/app';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { quickstart } from '../clients/sdk/examples/quickstart';

/**
 * The SDK as a package: another package depends on it (`file:` to clients/sdk, node_modules made
 * by a symlink as npm makes one for a `file:` dependency; no registry), requires it, and lists
 * nodes of a running service with it; its declarations type-check a consumer. And the README's
 * example is the compiled example file, which works against the service.
 */

jest.setTimeout(120_000);

const run = promisify(execFile);
const ROOT = path.join(__dirname, '..');
const SDK = path.join(ROOT, 'clients/sdk');

describe('the SDK from another package', () => {
  let t: TestApp;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let token: string;
  let dir: string;

  beforeAll(async () => {
    if (!existsSync(path.join(SDK, 'dist/index.js'))) throw new Error('clients/sdk/dist is missing: run `npm run build` first');
    t = await startTestApp({});
    tree = await makeTenantTree(t.app.database.prisma, 'sdk-pkg', { pools: 1, nodesPerPool: 3 });
    token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    dir = mkdtempSync(path.join(os.tmpdir(), 'sdk-consumer-'));
  });
  afterAll(async () => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    await t?.stop();
  });

  it('a package that depends on it (file:) requires it and lists nodes of a running service', async () => {
    const manifest = JSON.parse(readFileSync(path.join(SDK, 'package.json'), 'utf8'));
    expect(manifest).toMatchObject({ name: '@metal-control-plane/sdk', main: 'dist/index.js', types: 'dist/index.d.ts' });
    for (const dep of ['graphql', 'graphql-ws', 'graphql-sse', 'ws', '@graphql-typed-document-node/core']) expect(manifest.dependencies[dep]).toEqual(expect.any(String));

    writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'sdk-consumer', private: true, dependencies: { '@metal-control-plane/sdk': `file:${SDK}` } }, null, 2));
    mkdirSync(path.join(dir, 'node_modules/@metal-control-plane'), { recursive: true });
    symlinkSync(SDK, path.join(dir, 'node_modules/@metal-control-plane/sdk'), 'dir');
    writeFileSync(
      path.join(dir, 'list-nodes.js'),
      `const { MetalClient, MetalError, MetalNodesDocument, ViewerDocument } = require('@metal-control-plane/sdk');

async function main() {
  const client = new MetalClient({ url: process.env.METAL_URL, token: process.env.METAL_TOKEN });
  const names = [];
  for await (const node of client.paginate(MetalNodesDocument, {}, (d) => d.nodes, { pageSize: 2 })) names.push(node.name);
  let refused = null;
  try {
    await new MetalClient({ url: process.env.METAL_URL }).request(ViewerDocument);
  } catch (error) {
    refused = error instanceof MetalError ? error.code : 'not a MetalError';
  }
  // One event over graphql-ws (the ws package: Node 20 has no global WebSocket), then leave.
  const { EventsDocument } = require('@metal-control-plane/sdk');
  let event = null;
  for await (const r of client.subscribe(EventsDocument, { after: '0' })) { event = r.events.type; break; }
  await client.close();
  console.log(JSON.stringify({ names, refused, event, resolved: require.resolve('@metal-control-plane/sdk') }));
}
main().catch((error) => { console.error(error); process.exit(1); });
`,
    );
    // At least one event to read back: a verb on a node.
    await t.app.database.prisma.$executeRawUnsafe(
      `INSERT INTO event (type, tenant_id, site_id, pool_id, node_id, subject, payload) VALUES ('node.test.sdk-package', $1, $2, $3, $4, 'pkg', '{}'::jsonb)`,
      tree.tenant.id, tree.site.id, tree.pools[0]!.id, tree.nodes[0]!.id,
    );
    const { stdout } = await run(process.execPath, ['list-nodes.js'], { cwd: dir, env: { PATH: process.env.PATH, METAL_URL: t.url, METAL_TOKEN: token }, timeout: 60000 });
    const out = JSON.parse(stdout.trim());
    expect(out.names.sort()).toEqual(tree.nodes.map((n) => n.name).sort());
    expect(out.refused).toBe('UNAUTHENTICATED');
    expect(out.event).toBe('node.test.sdk-package');
    // What it loaded is the compiled package, not the repository's sources.
    expect(out.resolved).toBe(path.join(SDK, 'dist/index.js'));
  });

  it('its declarations type-check a consumer in TypeScript (typed documents, results and errors)', async () => {
    writeFileSync(
      path.join(dir, 'typed.ts'),
      `import { MetalClient, MetalError, MetalNodeDocument, type MetalNodeQuery } from '@metal-control-plane/sdk';
export async function state(client: MetalClient, id: string): Promise<string | null> {
  try {
    const data: MetalNodeQuery = await client.request(MetalNodeDocument, { id });
    return data.node && 'provisionState' in data.node ? data.node.provisionState : null;
  } catch (error) {
    if (error instanceof MetalError && error.code === 'NOT_FOUND') return null;
    throw error;
  }
}
// @ts-expect-error: the variables are typed (id is required)
export const wrong = (client: MetalClient) => client.request(MetalNodeDocument, {});
`,
    );
    writeFileSync(
      path.join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true, noEmit: true, module: 'nodenext', moduleResolution: 'nodenext', target: 'ES2023', lib: ['ES2023'],
          types: ['node'], typeRoots: [path.join(ROOT, 'node_modules/@types')], skipLibCheck: false,
        },
        files: ['typed.ts'],
      }),
    );
    const tsc = path.join(ROOT, 'node_modules/.bin/tsc');
    const result = await run(tsc, ['-p', dir], { cwd: dir, timeout: 60000 }).then(
      () => ({ code: 0, out: '' }),
      (error: { code: number; stdout: string }) => ({ code: error.code, out: error.stdout }),
    );
    expect(result).toEqual({ code: 0, out: '' });
  });

  it('the README\'s example is clients/sdk/examples/quickstart.ts, and it runs: lists, enrolls, watches the workflow', async () => {
    const readme = readFileSync(path.join(SDK, 'README.md'), 'utf8');
    const block = /## Example[\s\S]*?```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    const source = readFileSync(path.join(SDK, 'examples/quickstart.ts'), 'utf8');
    expect(block).toBe(source.replace("from '../src';", "from '@metal-control-plane/sdk';"));

    const lines: string[] = [];
    // A BMC address nothing answers at: the enroll workflow fails its verify-bmc step after its retries.
    const to = await quickstart({ url: t.url, token, siteId: tree.site.id, poolId: tree.pools[0]!.id, bmcAddress: '127.20.9.9', bmcPassword: 'Sdk-example-pw-1', print: (l) => lines.push(l) });
    expect(to).toBe('failed');
    for (const node of tree.nodes) expect(lines).toContain(`${node.name}\tready`);
    expect(lines).toContainEqual(expect.stringMatching(/^enrolled node_/));
    expect(lines).toContain('  node.enrolled');
    expect(lines).toContainEqual(expect.stringMatching(/^ {2}verify-bmc: failed \(BMC_UNREACHABLE/));
    expect(lines[lines.length - 1]).toBe('  node.provision.failed');
    expect(lines.join('\n')).not.toContain('Sdk-example-pw-1');

    const refused: string[] = [];
    expect(await quickstart({ url: t.url, token, siteId: tree.site.id, poolId: tree.pools[0]!.id, bmcAddress: 'not-an-address', bmcPassword: 'x-123456', print: (l) => refused.push(l) })).toBeUndefined();
    expect(refused[refused.length - 1]).toMatch(/^refused \(bmc\.address\): bmc\.address: /);
    expect(refused.join('\n')).not.toContain('not-an-address');
  });
});
