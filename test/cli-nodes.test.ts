/**
 * metalctl against a real service (no workers: a node moves only when a verb moves it), run as a
 * child process from dist/ (npm run build first): nodes ls|get|watch, exit codes and configuration,
 * a verb on one node, bulk with batch approve.
 */
import { generateKeyPairSync } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTestApp, type TestApp } from './helpers/app';
import { gql } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { cliEnv, runCli, startCli } from './helpers/cli';
import { MetalNodesDocument } from '../src/generated/operations';

jest.setTimeout(120_000);

let t: TestApp;
let tree: Awaited<ReturnType<typeof makeTenantTree>>;
let token: string;
let env: NodeJS.ProcessEnv;
let dir: string;
const keys = [generateKeyPairSync('ed25519'), generateKeyPairSync('ed25519'), generateKeyPairSync('ed25519')];
const publicKey = (i: number) => Buffer.from(keys[i]!.publicKey.export({ format: 'jwk' }).x!, 'base64url').toString('base64');

beforeAll(async () => {
  t = await startTestApp({ role: 'api' });
  const { prisma } = t.app.database;
  tree = await makeTenantTree(prisma, 'cli', { pools: 2, nodesPerPool: 3 });
  token = await makeToken(prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
  // Pool 1 needs two of alice's and bob's signatures for destructive batches.
  await prisma.pool.update({
    where: { id: tree.pools[1]!.id },
    data: { policy: { agent: 'bcd', approverKeys: [{ id: 'alice', publicKey: publicKey(0) }, { id: 'bob', publicKey: publicKey(1) }], quorum: 2 } },
  });
  env = cliEnv({ METAL_URL: t.url, METAL_TOKEN: token });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'metalctl-'));
});
afterAll(async () => {
  fs.rmSync(dir, { recursive: true, force: true });
  await t?.stop();
});

const state = async (id: string) => (await t.app.database.prisma.node.findUniqueOrThrow({ where: { id } })).provisionState;

describe('nodes ls|get', () => {
  it('ls --json prints the nodes the API returns, field for field; filters by pool, site and state', async () => {
    const r = await runCli(['nodes', 'ls', '--json'], env);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const listed = JSON.parse(r.stdout);
    const api = await gql(t.url, token, MetalNodesDocument, { first: 100 });
    expect(listed).toEqual(api.data!.nodes.edges.map((e) => e.node));
    expect(listed).toHaveLength(6);

    const byPool = JSON.parse((await runCli(['nodes', 'ls', '--json', '--pool', tree.pools[1]!.name], env)).stdout);
    expect(byPool.map((n: { id: string }) => n.id).sort()).toEqual(tree.nodes.filter((n) => n.poolId === tree.pools[1]!.id).map((n) => n.id).sort());
    const bySite = JSON.parse((await runCli(['--json', 'nodes', 'ls', '--site', tree.site.id, '--state', 'ready'], env)).stdout);
    expect(bySite).toHaveLength(6);
    const none = JSON.parse((await runCli(['nodes', 'ls', '--json', '--state', 'deployed'], env)).stdout);
    expect(none).toEqual([]);
  });

  it('ls prints a table (plain, no terminal codes, when stdout is a pipe); get shows one node by id or name', async () => {
    const r = await runCli(['nodes', 'ls'], env);
    expect(r.code).toBe(0);
    for (const n of tree.nodes) expect(r.stdout).toContain(n.id);
    expect(r.stdout).toMatch(/STATE/);
    expect(r.stdout).toContain('6 node(s)');
    expect(r.stdout).not.toMatch(/\u001b\[/);

    const node = tree.nodes[0]!;
    const byName = await runCli(['nodes', 'get', node.name!], env);
    expect(byName.code).toBe(0);
    expect(byName.stdout).toContain(node.id);
    expect(byName.stdout).toContain('ready');
    const json = JSON.parse((await runCli(['nodes', 'get', node.id, '--json'], env)).stdout);
    expect(json).toMatchObject({ id: node.id, name: node.name, provisionState: 'ready', poolId: node.poolId, bmc: { address: node.bmcAddress, credentialsSet: true } });
  });
});

describe('exit codes and configuration', () => {
  it('0 done, 1 refused with the code on stderr, 2 usage (commander\'s errors included)', async () => {
    const missing = await runCli(['nodes', 'get', 'node_00000000-0000-7000-8000-000000000000'], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^error: NOT_FOUND: /);

    const unauthenticated = await runCli(['nodes', 'ls'], cliEnv({ METAL_URL: t.url }));
    expect(unauthenticated.code).toBe(1);
    expect(unauthenticated.stderr).toMatch(/^error: UNAUTHENTICATED: /);

    for (const args of [['nodes', 'ls', '--bogus'], ['nodes', 'ls', '--state', 'sideways'], ['nodes', 'frobnicate'], ['power', tree.nodes[0]!.id],
      ['power', tree.nodes[0]!.id, 'explode'], ['bulk', 'inspect'], ['enroll'], ['timeline', tree.nodes[0]!.id, '--last', '0'], []]) {
      const r = await runCli(args, env);
      expect({ args, code: r.code }).toEqual({ args, code: 2 });
    }
    expect((await runCli(['--help'], env)).code).toBe(0);
    for (const sub of ['nodes ls', 'nodes watch', 'enroll', 'inspect', 'bulk', 'batch approve', 'power', 'timeline']) {
      const help = await runCli([...sub.split(' '), '--help'], env);
      expect({ sub, code: help.code }).toEqual({ sub, code: 0 });
      expect(help.stdout).toContain(`Usage: metalctl ${sub}`);
    }
  });

  it('takes the token from METAL_TOKEN_FILE or --token-file, the URL from --url over METAL_URL; refuses a token over http to a remote host', async () => {
    const file = path.join(dir, 'token');
    fs.writeFileSync(file, `${token}\n`, { mode: 0o600 });
    const viaEnv = await runCli(['nodes', 'ls', '--json'], cliEnv({ METAL_URL: t.url, METAL_TOKEN_FILE: file }));
    expect(viaEnv.code).toBe(0);
    expect(JSON.parse(viaEnv.stdout)).toHaveLength(6);
    const viaFlag = await runCli(['--url', t.url, '--token-file', file, 'nodes', 'ls', '--json'], cliEnv({ METAL_URL: 'http://127.0.0.1:1', METAL_TOKEN: 'wrong' }));
    expect(viaFlag.code).toBe(0);
    expect(viaFlag.stderr).toBe('');

    const loose = path.join(dir, 'loose-token');
    fs.writeFileSync(loose, token, { mode: 0o644 });
    fs.chmodSync(loose, 0o644);
    const warned = await runCli(['nodes', 'ls', '--json', '--token-file', loose], cliEnv({ METAL_URL: t.url }));
    expect(warned.code).toBe(0);
    expect(warned.stderr).toMatch(/can be read by other users/);
    expect(warned.stderr).not.toContain(token);

    const remote = await runCli(['nodes', 'ls'], cliEnv({ METAL_URL: 'http://192.0.2.1:4000', METAL_TOKEN: token }));
    expect(remote.code).toBe(2);
    expect(remote.stderr).toMatch(/plain http/);
    expect(remote.stderr).not.toContain(token);
    expect((await runCli(['nodes', 'ls'], cliEnv({ METAL_URL: 'ftp://x', METAL_TOKEN: token }))).code).toBe(2);
    expect((await runCli(['nodes', 'ls', '--token-file', path.join(dir, 'absent')], cliEnv({ METAL_URL: t.url }))).code).toBe(2);
    const down = await runCli(['nodes', 'ls'], cliEnv({ METAL_URL: 'http://127.0.0.1:1', METAL_TOKEN: token }));
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/^error: NETWORK: /);
  });
});

describe('a verb on one node', () => {
  it('inspect moves a ready node to inspecting (exit 0); again it is refused with INVALID_STATE (exit 1); abort --json answers the node', async () => {
    const node = tree.nodes[2]!;
    const r = await runCli(['inspect', node.id], env);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`inspect ${node.id} (${node.name}): now inspecting`);
    expect(await state(node.id)).toBe('inspecting');

    const again = await runCli(['inspect', node.name!], env);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/^error: INVALID_STATE: /);
    expect(await state(node.id)).toBe('inspecting');

    const aborted = await runCli(['abort', node.id, '--reason', 'wrong rack', '--json'], env);
    expect(aborted.code).toBe(0);
    expect(JSON.parse(aborted.stdout)).toMatchObject({ id: node.id, provisionState: 'failed', failedFrom: 'inspecting', lastError: { code: 'ABORTED' } });
  });
});

describe('nodes watch', () => {
  it('prints a move from the event stream, and ends with exit 0 on SIGINT', async () => {
    const node = tree.nodes[1]!;
    const watch = startCli(['nodes', 'watch', '--pool', tree.pools[0]!.id], env);
    try {
      await watch.waitFor(/watching 3 node\(s\)/, 20_000);
      // Give the subscription a moment to open; a move before it would still show at the re-read.
      await new Promise((r) => setTimeout(r, 1500));
      expect((await runCli(['provide', node.id], env)).code).toBe(0);
      await watch.waitFor(new RegExp(`${node.id}.*ready -> commissioning`), 20_000);
      watch.proc.kill('SIGINT');
      const end = await watch.done;
      expect(end.code).toBe(0);
      expect(end.stderr).toBe('');
    } finally {
      watch.proc.kill('SIGKILL');
    }
  });

  it('--until ends once every watched node is there; --timeout without it ends with exit 0, with it TIMEOUT exit 1; --json prints one object per move', async () => {
    const node = tree.nodes[1]!; // commissioning since the test above
    const watch = startCli(['nodes', 'watch', node.id, '--until', 'failed', '--timeout', '30', '--json'], env);
    await new Promise((r) => setTimeout(r, 2000));
    expect((await runCli(['abort', node.id], env)).code).toBe(0);
    const end = await watch.done;
    expect(end.stderr).toBe('');
    expect(end.code).toBe(0);
    const lines = end.stdout.trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.at(-1)).toMatchObject({ nodeId: node.id, from: 'commissioning', to: 'failed', lastError: { code: 'ABORTED' } });

    const quiet = await runCli(['nodes', 'watch', '--pool', tree.pools[0]!.id, '--timeout', '2'], env);
    expect(quiet.code).toBe(0);
    const late = await runCli(['nodes', 'watch', tree.nodes[0]!.id, '--until', 'deployed', '--timeout', '2'], env);
    expect(late.code).toBe(1);
    expect(late.stderr).toMatch(/^error: TIMEOUT: /);
  });
});

describe('bulk and batch approve', () => {
  const pool1 = () => tree.nodes.filter((n) => n.poolId === tree.pools[1]!.id);

  it('a refused bulk lists every refused node and changes nothing', async () => {
    const file = path.join(dir, 'mixed.txt');
    fs.writeFileSync(file, `# two of pool 1 and one of pool 0\n${pool1()[0]!.id}\n${pool1()[1]!.name}\n${tree.nodes[0]!.id}\n`);
    const r = await runCli(['bulk', 'inspect', '--pool', tree.pools[1]!.name, '--nodes', file, '--reason', 'reinventory'], env);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: INVALID_INPUT: bulk inspect refused for 1 of 3 nodes; nothing changed/);
    expect(r.stderr).toContain(`  ${tree.nodes[0]!.id}: INVALID_INPUT`);
    for (const n of pool1()) expect(await state(n.id)).toBe('ready');
  });

  it('bulk retire --state prints the batch awaiting approval; batch approve signs with each key until approved', async () => {
    const r = await runCli(['bulk', 'retire', '--pool', tree.pools[1]!.id, '--state', 'ready', '--reason', 'decommission rack 7'], env);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('bulk retire: 3 node(s), now 3 retiring');
    const batchId = /batch\s*│?\s*(bat_[0-9a-f-]+)/.exec(r.stdout)?.[1] ?? /(bat_[0-9a-f-]{36})/.exec(r.stdout)![1]!;
    expect(r.stdout).toContain('awaiting-approval');
    const row = await t.app.database.prisma.commandBatch.findUniqueOrThrow({ where: { id: batchId } });
    expect(r.stdout).toContain(row.digest);

    const keyFile = (i: number) => {
      const f = path.join(dir, `key-${i}.pem`);
      fs.writeFileSync(f, keys[i]!.privateKey.export({ format: 'pem', type: 'pkcs8' }), { mode: 0o600 });
      return f;
    };
    // Not an approver of the pool: refused before anything is sent.
    const stranger = await runCli(['batch', 'approve', batchId, '--key', keyFile(2)], env);
    expect(stranger.code).toBe(1);
    expect(stranger.stderr).toMatch(/^error: INVALID_INPUT: --key: its public key is not one of pool/);
    // The approver expects other nodes: the digest differs, nothing is signed.
    const wrong = path.join(dir, 'wrong.txt');
    fs.writeFileSync(wrong, pool1().slice(0, 2).map((n) => n.id).join('\n'));
    const mismatch = await runCli(['batch', 'approve', batchId, '--key', keyFile(0), '--nodes', wrong], env);
    expect(mismatch.code).toBe(1);
    expect(mismatch.stderr).toMatch(/^error: DIGEST_MISMATCH: /);
    expect((await t.app.database.prisma.commandBatch.findUniqueOrThrow({ where: { id: batchId } })).approvals).toEqual([]);

    const right = path.join(dir, 'right.txt');
    fs.writeFileSync(right, pool1().map((n) => n.id).reverse().join('\n'));
    const first = await runCli(['batch', 'approve', batchId, '--key', keyFile(0), '--nodes', right], env);
    expect(first.stderr).toBe('');
    expect(first.code).toBe(0);
    expect(first.stdout).toContain(`approved batch ${batchId} as alice: awaiting-approval (1 of 2)`);
    const twice = await runCli(['batch', 'approve', batchId, '--key', keyFile(0)], env);
    expect(twice.code).toBe(1);
    expect(twice.stderr).toMatch(/^error: CONFLICT: /);
    const second = await runCli(['batch', 'approve', batchId, '--key', keyFile(1), '--json'], env);
    expect(second.code).toBe(0);
    expect(JSON.parse(second.stdout)).toMatchObject({ id: batchId, status: 'approved', quorum: 2 });
    const stored = await t.app.database.prisma.commandBatch.findUniqueOrThrow({ where: { id: batchId } });
    expect(stored.status).toBe('approved');
    expect((stored.approvals as { keyId: string }[]).map((a) => a.keyId)).toEqual(['alice', 'bob']);

    const shown = JSON.parse((await runCli(['batch', 'get', batchId, '--json'], env)).stdout);
    expect(shown).toMatchObject({ id: batchId, verb: 'retire', reason: 'decommission rack 7', nodeCount: 3, status: 'approved', digest: row.digest });
  });
});
