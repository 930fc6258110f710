import fs from 'node:fs/promises';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { startTestApp, type TestApp } from './helpers/app';
import { codeOf, gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { startSshNodes, type SshNode, type SshNodes } from './helpers/ssh-nodes';
import { serviceSshIdentity } from '../src/modules/fabric/compute-nodes';
import {
  bridgeNameOf, frrVersionOf, mtuConsensus, parseFacts, resolveNode, validatePreflightInput, versionAtLeast, type PreflightNode,
} from '../src/modules/fabric/preflight';
import type { PrismaClient } from '../src/generated/prisma/client';

const run = promisify(execFile);
const PATH = '/controlnode/fabric-config/preflight';
const CIDR = '10.60.200.0/24';

/**
 * Nodes 0-2: a bridge br0 with 10.60.200.1x/24 at MTU 9000 (reuse). Node 3: the underlay address
 * on a plain veth `eth1`, no bridge (needs_override). Node 4: no sshd (refused). Node 5: accepts
 * TCP and never speaks (times out). Which of them are compute nodes in a test is chosen by
 * putting their metal node in `deployed` (listComputeNodes reads only those).
 */
const CONFIG = {
  as: 65000, router_id_cidr: '10.255.0.1/24', expected_nodes: 40, expected_vms: 800, vxlan_mtu: 9000,
};

let h: SshNodes;
let t: TestApp;
let metalIds: string[] = [];
const prisma = (): PrismaClient => t.app.services.prisma;

beforeAll(async () => {
  h = await startSshNodes('fabric-preflight', [{}, {}, {}, {}, { kind: 'no-sshd' }, { kind: 'silent' }]);
  for (const node of h.nodes.slice(0, 3)) {
    await h.inNode(node, ['ip', 'link', 'add', 'br0', 'type', 'bridge']);
    await h.inNode(node, ['ip', 'addr', 'add', `10.60.200.${10 + node.index}/24`, 'dev', 'br0']);
    await h.inNode(node, ['ip', 'link', 'set', 'br0', 'mtu', '9000', 'up']);
  }
  await h.inNode(h.nodes[3]!, ['ip', 'link', 'add', 'eth1', 'type', 'veth', 'peer', 'name', 'eth1p']);
  await h.inNode(h.nodes[3]!, ['ip', 'addr', 'add', '10.60.200.13/24', 'dev', 'eth1']);
  await h.inNode(h.nodes[3]!, ['ip', 'link', 'set', 'eth1', 'up']);

  t = await startTestApp();
  // The nodes trust the service's own key pair, as an admin would set them up.
  const identity = await serviceSshIdentity(prisma(), t.app.services.secrets);
  for (const node of h.nodes.filter((n) => n.kind === 'sshd')) {
    await fs.appendFile(path.join(node.dir, 'authorized_keys'), identity.publicKey + '\n');
  }
  const tree = await makeTenantTree(prisma(), 'preflight', { pools: 1, nodesPerPool: h.nodes.length });
  metalIds = tree.nodes.map((n) => n.id);
  for (const [i, node] of h.nodes.entries()) {
    await prisma().computeNode.create({ data: { nodeId: metalIds[i]!, osIp: node.address, fqdn: `node${i}.preflight.test` } });
  }
  // A stored config (before any preflight, so no consensus applies yet) for the probe to write to.
  const created = await rest(t.url, t.adminToken, 'POST', '/controlnode/fabric-config', CONFIG);
  if (created.status !== 200) throw new Error(`fabric config: ${JSON.stringify(created.body)}`);
}, 120_000);

afterAll(async () => {
  await t?.stop();
  await h?.stop();
});

/** Only these nodes are compute nodes (deployed) from now on. */
async function deploy(indices: number[]): Promise<void> {
  await prisma().node.updateMany({ where: { id: { in: metalIds } }, data: { provisionState: 'ready' } });
  await prisma().node.updateMany({ where: { id: { in: indices.map((i) => metalIds[i]!) } }, data: { provisionState: 'deployed' } });
}

const preflight = (body: unknown, token = t.adminToken) => rest(t.url, token, 'POST', PATH, body);
const byIp = (nodes: { node_ip: string }[], node: SshNode) => nodes.find((n) => n.node_ip === node.address) as Record<string, unknown>;
/**
 * `ip -j addr`, without the kernel's own progress on a fresh IPv6 link-local address: duplicate
 * address detection clears `tentative` a second or two after a bridge comes up, whatever the
 * preflight does.
 */
const addrOf = async (node: SshNode) => (await h.inNode(node, ['ip', '-j', 'addr'])).replace(/"tentative":true,/g, '');
// Without -d: the detailed view carries the bridge's running timers, which change by themselves.
const linkOf = (node: SshNode) => h.inNode(node, ['ip', '-j', 'link']);


describe('fabric preflight against real sshd nodes', () => {
  it('reuse and needs_override, the consensus, the capability probe (FRR 8.4.4: false), host keys pinned on first use, and nothing changed on any node', async () => {
    await deploy([0, 1, 2, 3]);
    const before = await Promise.all(h.nodes.slice(0, 4).map(async (n) => [await addrOf(n), await linkOf(n)]));
    expect((await prisma().computeNode.findMany({ where: { sshHostKey: { not: null } } })).length).toBe(0);

    const answer = await preflight({ underlay_cidr: CIDR });
    expect(answer.status).toBe(200);
    const body = answer.body;
    expect(Object.keys(body).sort()).toEqual(['matched_bridges', 'mtu_drift', 'nodes', 'ready', 'underlay_cidr', 'underlay_mtu', 'vtep_pool']);
    expect(body.underlay_cidr).toBe(CIDR);
    for (const node of h.nodes.slice(0, 3)) {
      expect(byIp(body.nodes, node)).toEqual({
        node_ip: node.address, fqdn: `node${node.index}.preflight.test`, mode: 'reuse', needs_override: false,
        bridge: 'br0', bridge_mtu: 9000, underlay_ip: `10.60.200.${10 + node.index}/24`, reason: '',
      });
    }
    const lacking = byIp(body.nodes, h.nodes[3]!);
    expect(lacking).toMatchObject({ mode: 'needs_override', needs_override: true, bridge: '', bridge_mtu: 0, underlay_ip: '' });
    expect(lacking.reason).toContain('10.60.200.13/24 is inside 10.60.200.0/24 but on eth1, which is not a bridge');
    expect(body.matched_bridges).toEqual(['br0']);
    expect(body.underlay_mtu).toBe(9000);
    expect(body.mtu_drift).toEqual([]);
    expect(body.ready).toBe(false);
    expect(body.vtep_pool).toEqual({ router_id_base: '10.255.0.1', router_id_prefix_len: 24, capacity: 254, expected_nodes: 40, headroom: 214, overalloc_warn: false });

    // Debian 12's FRR 8.4.4 cannot do OSPF hmac-sha-256: the probe's finding is stored, read-only.
    const config = await rest(t.url, t.adminToken, 'GET', '/controlnode/fabric-config');
    expect(config.body.frr_hmac_sha_capable).toBe(false);
    const row = await prisma().fabricPreflight.findUniqueOrThrow({ where: { id: 1 } });
    expect(row).toMatchObject({ underlayCidr: CIDR, underlayMtu: 9000, mtuDrift: [], ready: false, nodeCount: 4, frrHmacShaCapable: false });
    const event = await prisma().event.findFirstOrThrow({ where: { type: 'fabric.preflight.completed' }, orderBy: { id: 'desc' } });
    expect(event.payload).toEqual({
      underlayCidr: CIDR, ready: false, nodes: 4, reuse: 3, override: 0, needsOverride: 1, unreachable: 0, underlayMtu: 9000, mtuDrift: 0, frrHmacShaCapable: false,
    });

    // TOFU: the key each node presented is pinned, and it is the one ssh-keygen reports on the node.
    const pinned = await prisma().computeNode.findMany({ where: { nodeId: { in: metalIds.slice(0, 4) } } });
    for (const c of pinned) expect(c.sshHostKey).toBe(h.nodes.find((n) => n.address === c.osIp)!.hostKeyFingerprint);

    // Read-only: the kernel state is unchanged and no install or restart was asked for.
    const after = await Promise.all(h.nodes.slice(0, 4).map(async (n) => [await addrOf(n), await linkOf(n)]));
    expect(after).toEqual(before);
    for (const node of h.nodes.slice(0, 4)) expect(await h.calls(node)).toEqual([]);
  });

  it('a node_overrides entry resolves the node (mode override, derived bridge name); ready is every node reuse (an empty cluster too), and apply refuses an empty cluster', async () => {
    await deploy([0, 1, 2, 3]);
    const answer = await preflight({ underlay_cidr: CIDR, node_overrides: [{ node_ip: h.nodes[3]!.address, underlay_iface_hint: 'eth1', underlay_ip: '10.60.200.13/24' }] });
    expect(answer.status).toBe(200);
    expect(byIp(answer.body.nodes, h.nodes[3]!)).toEqual({
      node_ip: h.nodes[3]!.address, fqdn: 'node3.preflight.test', mode: 'override', needs_override: false, bridge: 'br-0a3cc800-24',
      bridge_mtu: 0, underlay_ip: '10.60.200.13/24', reason: 'operator override: bridge br-0a3cc800-24 on eth1 with 10.60.200.13/24, built by the rollout',
    });
    // The override node's bridge does not exist yet: it takes no part in the consensus.
    expect(answer.body.underlay_mtu).toBe(9000);
    expect(answer.body.ready).toBe(false);

    const named = await preflight({ underlay_cidr: CIDR, node_overrides: [{ node_ip: h.nodes[3]!.address, underlay_iface_hint: 'eth1', underlay_ip: '10.60.200.13/24', underlay_bridge_name: 'brunder' }] });
    expect(byIp(named.body.nodes, h.nodes[3]!)).toMatchObject({ mode: 'override', bridge: 'brunder' });

    const missingIface = await preflight({ underlay_cidr: CIDR, node_overrides: [{ node_ip: h.nodes[3]!.address, underlay_iface_hint: 'eth7', underlay_ip: '10.60.200.13/24' }] });
    expect(byIp(missingIface.body.nodes, h.nodes[3]!)).toMatchObject({ mode: 'needs_override', needs_override: true });
    expect(byIp(missingIface.body.nodes, h.nodes[3]!).reason).toContain('underlay_iface_hint eth7, which this node does not have');

    await deploy([0, 1, 2]);
    const allReuse = await preflight({ underlay_cidr: CIDR });
    expect(allReuse.body.ready).toBe(true);

    await deploy([]);
    const empty = await preflight({ underlay_cidr: CIDR });
    expect(empty.status).toBe(200);
    // The seed: "ready (boolean) – true ⟺ every node ∈ {reuse}": true of no node (issue 21 item 19).
    expect(empty.body).toMatchObject({ ready: true, nodes: [], underlay_mtu: 0, mtu_drift: [], matched_bridges: [] });
    // What refuses an empty cluster is apply, saying why, with nothing recorded.
    const jobs = await prisma().fabricJob.count();
    const apply = await rest(t.url, t.adminToken, 'POST', '/controlnode/fabric-config/apply');
    expect([apply.status, apply.body.error?.code]).toEqual([409, 'INVALID_STATE']);
    expect(apply.body.error.message).toMatch(/no compute node is deployed: the fabric has nothing to roll out to/);
    expect(await prisma().fabricJob.count()).toBe(jobs);
  });

  it('refuses bad input naming the field, before any node is contacted', async () => {
    await deploy([0, 1, 2, 3]);
    const stamp = (await prisma().fabricPreflight.findUniqueOrThrow({ where: { id: 1 } })).at;
    const ip3 = h.nodes[3]!.address;
    const ok = { node_ip: ip3, underlay_iface_hint: 'eth1', underlay_ip: '10.60.200.13/24' };
    const cases: [string, Record<string, unknown>, string][] = [
      ['no underlay_cidr', {}, 'body.underlay_cidr'],
      ['an underlay_cidr that is an address', { underlay_cidr: '10.60.200.0' }, 'body.underlay_cidr'],
      ['an IPv6 underlay_cidr', { underlay_cidr: 'fd00::/64' }, 'body.underlay_cidr'],
      ['expected_nodes 1001', { underlay_cidr: CIDR, expected_nodes: 1001 }, 'body.expected_nodes'],
      ['a router_id_base in hex', { underlay_cidr: CIDR, router_id_base: '0x0a.0.0.1' }, 'body.router_id_base'],
      ['router_id_prefix_len 31', { underlay_cidr: CIDR, router_id_prefix_len: 31 }, 'body.router_id_prefix_len'],
      ['an override without node_ip', { underlay_cidr: CIDR, node_overrides: [ok, { underlay_iface_hint: 'eth1', underlay_ip: '10.60.200.20/24' }] }, 'body.node_overrides[1].node_ip'],
      ['an override for an unknown node', { underlay_cidr: CIDR, node_overrides: [{ ...ok, node_ip: '192.0.2.77' }] }, 'body.node_overrides[0].node_ip'],
      ['an override for a node that is not deployed', { underlay_cidr: CIDR, node_overrides: [{ ...ok, node_ip: h.nodes[4]!.address }] }, 'body.node_overrides[0].node_ip'],
      ['two overrides for one node', { underlay_cidr: CIDR, node_overrides: [ok, { ...ok, underlay_ip: '10.60.200.30/24' }] }, 'body.node_overrides[1].node_ip'],
      ['an underlay_ip outside the CIDR', { underlay_cidr: CIDR, node_overrides: [{ ...ok, underlay_ip: '10.60.201.13/24' }] }, 'body.node_overrides[0].underlay_ip'],
      ['an underlay_ip with another prefix', { underlay_cidr: CIDR, node_overrides: [{ ...ok, underlay_ip: '10.60.200.13/16' }] }, 'body.node_overrides[0].underlay_ip'],
      ['an underlay_ip without a prefix', { underlay_cidr: CIDR, node_overrides: [{ ...ok, underlay_ip: '10.60.200.13' }] }, 'body.node_overrides[0].underlay_ip'],
      ['an underlay_ip that is the network address', { underlay_cidr: CIDR, node_overrides: [{ ...ok, underlay_ip: '10.60.200.0/24' }] }, 'body.node_overrides[0].underlay_ip'],
      ['two overrides with one underlay_ip', { underlay_cidr: CIDR, node_overrides: [ok, { ...ok, node_ip: h.nodes[0]!.address }] }, 'body.node_overrides[1].underlay_ip'],
      ['an interface hint with a slash', { underlay_cidr: CIDR, node_overrides: [{ ...ok, underlay_iface_hint: 'eth/1' }] }, 'body.node_overrides[0].underlay_iface_hint'],
      ['a bridge name longer than 15', { underlay_cidr: CIDR, node_overrides: [{ ...ok, underlay_bridge_name: 'b'.repeat(16) }] }, 'body.node_overrides[0].underlay_bridge_name'],
      ['an unknown field', { underlay_cidr: CIDR, underlay_mtu: 9000 }, 'body.underlay_mtu'],
    ];
    for (const [label, body, field] of cases) {
      const answer = await preflight(body);
      expect([label, answer.status, answer.body?.error?.code ?? answer.body?.code, answer.body?.error?.details?.field ?? answer.body?.details?.field])
        .toEqual([label, 400, 'INVALID_INPUT', field]);
    }
    // Nothing ran: the stored findings are the earlier run's.
    expect((await prisma().fabricPreflight.findUniqueOrThrow({ where: { id: 1 } })).at).toEqual(stamp);
  });

  it('MTU drift: disagreeing bridges give underlay_mtu 0 and every pair, and a fabric-config write is refused against the consensus naming body.vxlan_mtu', async () => {
    await deploy([0, 1, 2]);
    await h.inNode(h.nodes[1]!, ['ip', 'link', 'set', 'br0', 'mtu', '1500']);
    try {
      const drift = await preflight({ underlay_cidr: CIDR });
      expect(drift.body.underlay_mtu).toBe(0);
      expect(drift.body.mtu_drift).toEqual(h.nodes.slice(0, 3).map((n) => ({
        node_ip: n.address, fqdn: `node${n.index}.preflight.test`, bridge: 'br0', bridge_mtu: n.index === 1 ? 1500 : 9000,
      })));
      // No value fits nodes that disagree.
      const refused = await rest(t.url, t.adminToken, 'POST', '/controlnode/fabric-config', { vxlan_mtu: 9000 });
      expect([refused.status, refused.body.error?.details?.field ?? refused.body.details?.field]).toEqual([400, 'body.vxlan_mtu']);
      // A write that leaves the stored vxlan_mtu in place is checked too (the merged intent is).
      const other = await rest(t.url, t.adminToken, 'POST', '/controlnode/fabric-config', { bfd_enabled: true });
      expect(other.status).toBe(400);
    } finally {
      await h.inNode(h.nodes[1]!, ['ip', 'link', 'set', 'br0', 'mtu', '9000']);
    }
    const agreed = await preflight({ underlay_cidr: CIDR });
    expect([agreed.body.underlay_mtu, agreed.body.mtu_drift]).toEqual([9000, []]);
    const differs = await rest(t.url, t.adminToken, 'POST', '/controlnode/fabric-config', { vxlan_mtu: 1500 });
    expect([differs.status, differs.body.error?.details?.field ?? differs.body.details?.field]).toEqual([400, 'body.vxlan_mtu']);
    expect(JSON.stringify(differs.body)).toContain('must be 9000');
    const matches = await rest(t.url, t.adminToken, 'POST', '/controlnode/fabric-config', { vxlan_mtu: 9000, bfd_enabled: true });
    expect(matches.status).toBe(200);
  });

  it('cold start: no reuse node gives consensus 0 without drift, and any vxlan_mtu is accepted', async () => {
    await deploy([3]);
    const cold = await preflight({ underlay_cidr: CIDR });
    expect(cold.body).toMatchObject({ underlay_mtu: 0, mtu_drift: [], matched_bridges: [], ready: false });
    const write = await rest(t.url, t.adminToken, 'POST', '/controlnode/fabric-config', { vxlan_mtu: 1500 });
    expect(write.status).toBe(200);
    // Back to 9000 for the tests after this one (the consensus they find is 9000).
    expect((await rest(t.url, t.adminToken, 'POST', '/controlnode/fabric-config', { vxlan_mtu: 9000 })).status).toBe(200);
  });

  it('unreachable: refused and silent nodes are reported with their reason, never hang, and leave the capability as it was', async () => {
    await deploy([0, 4, 5]);
    const answer = await preflight({ underlay_cidr: CIDR });
    expect(answer.status).toBe(200);
    const refused = byIp(answer.body.nodes, h.nodes[4]!);
    expect(refused).toMatchObject({ mode: 'unreachable', needs_override: false, bridge: '', bridge_mtu: 0 });
    expect(refused.reason).toMatch(/^SSH refused \(CONNECTION_REFUSED\): .*connection refused/);
    const silent = byIp(answer.body.nodes, h.nodes[5]!);
    expect(silent).toMatchObject({ mode: 'unreachable' });
    expect(silent.reason).toMatch(/^SSH timed out \((CONNECT_TIMEOUT|DEADLINE)\)/);
    expect(byIp(answer.body.nodes, h.nodes[0]!)).toMatchObject({ mode: 'reuse' });
    expect(answer.body.ready).toBe(false);

    // An override cannot make a node it could not check resolved.
    await deploy([0, 4]);
    const overridden = await preflight({ underlay_cidr: CIDR, node_overrides: [{ node_ip: h.nodes[4]!.address, underlay_iface_hint: 'eth1', underlay_ip: '10.60.200.14/24' }] });
    expect(byIp(overridden.body.nodes, h.nodes[4]!)).toMatchObject({ mode: 'unreachable', needs_override: false });

    // A node that no longer trusts the service's key.
    const keys = path.join(h.nodes[0]!.dir, 'authorized_keys');
    const trusted = await fs.readFile(keys, 'utf8');
    await fs.writeFile(keys, h.clientPublicKey + '\n');
    try {
      await deploy([0]);
      const rejected = await preflight({ underlay_cidr: CIDR });
      expect(byIp(rejected.body.nodes, h.nodes[0]!)).toMatchObject({ mode: 'unreachable' });
      expect(byIp(rejected.body.nodes, h.nodes[0]!).reason).toMatch(/^SSH refused \(AUTH_FAILED\): .*rejected the key for user root/);
    } finally {
      await fs.writeFile(keys, trusted);
    }

    // Only unreachable nodes: no finding, so the stored capability is not touched.
    await prisma().fabricConfig.update({ where: { id: 1 }, data: { frrHmacShaCapable: null } });
    await deploy([4]);
    const none = await preflight({ underlay_cidr: CIDR });
    expect(none.body.nodes.map((n: { mode: string }) => n.mode)).toEqual(['unreachable']);
    expect((await prisma().fabricConfig.findUniqueOrThrow({ where: { id: 1 } })).frrHmacShaCapable).toBeNull();
    expect((await prisma().fabricPreflight.findUniqueOrThrow({ where: { id: 1 } })).frrHmacShaCapable).toBe(false);
  });

  it('a node that reports FRR 9.1 must still pass FRR\'s own checker: 8.4.4\'s vtysh refuses the snippet, so the finding is false', async () => {
    await deploy([0]);
    await prisma().fabricConfig.update({ where: { id: 1 }, data: { frrHmacShaCapable: null } });
    const fake = path.join(h.nodes[0]!.dir, 'bin', 'dpkg-query');
    const seen = path.join(h.nodes[0]!.dir, 'dpkg-query.called');
    await fs.writeFile(fake, `#!/bin/sh\necho "$*" >> '${seen}'\nprintf "9.1.0-0~deb12u1"\n`, { mode: 0o755 });
    try {
      expect(frrVersionOf((await run('ip', ['netns', 'exec', h.nodes[0]!.netns, 'env', `PATH=${path.dirname(fake)}`, 'dpkg-query'])).stdout)).toEqual([9, 1]);
      const answer = await gql(t.url, t.adminToken, 'mutation ($i: FabricPreflightInput!) { fabricPreflight(input: $i) { ready frrHmacShaCapable nodes { mode } } }', { i: { underlayCidr: CIDR } });
      expect(answer.errors).toBeUndefined();
      expect(answer.data?.fabricPreflight).toEqual({ ready: true, frrHmacShaCapable: false, nodes: [{ mode: 'reuse' }] });
      // The preflight's own session read the 9.1 version, so the version alone would have said
      // capable: false can only come from vtysh -C refusing the snippet.
      expect((await fs.readFile(seen, 'utf8')).split('\n')).toContain('-W -f ${Version} frr');
      expect((await prisma().fabricConfig.findUniqueOrThrow({ where: { id: 1 } })).frrHmacShaCapable).toBe(false);
    } finally {
      await fs.rm(fake, { force: true });
      await fs.rm(seen, { force: true });
    }
  });

  it('host keys: a pinned key is used from then on; a node whose key changed is unreachable with a host-key reason', async () => {
    await deploy([2]);
    const node = h.nodes[2]!;
    const pinned = (await prisma().computeNode.findUniqueOrThrow({ where: { nodeId: metalIds[2]! } })).sshHostKey;
    expect(pinned).toBe(node.hostKeyFingerprint);
    // A reinstalled host: new host key files; sshd re-reads them for every new connection.
    const keyFile = path.join(node.dir, 'ssh_host_ed25519_key');
    await fs.rm(keyFile);
    await fs.rm(`${keyFile}.pub`);
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', keyFile]);
    const fresh = (await run('ssh-keygen', ['-l', '-E', 'sha256', '-f', `${keyFile}.pub`])).stdout.split(/\s+/)[1];
    expect(fresh).not.toBe(pinned);
    const answer = await preflight({ underlay_cidr: CIDR });
    const row = byIp(answer.body.nodes, node);
    expect(row.mode).toBe('unreachable');
    expect(row.reason).toContain('HOST_KEY_MISMATCH');
    expect(row.reason).toContain(`host key ${fresh}`);
    expect(row.reason).toContain(`not the pinned ${pinned}`);
    // The pin is not replaced by what an impostor showed.
    expect((await prisma().computeNode.findUniqueOrThrow({ where: { nodeId: metalIds[2]! } })).sshHostKey).toBe(pinned);
  });

  it('GraphQL fabricPreflight gives what REST gives; both need platform admin; the vtep_pool follows the request over the stored config', async () => {
    await deploy([0, 1]);
    const input = { underlayCidr: CIDR, expectedNodes: 300, routerIdPrefixLen: 22 };
    const viaGql = await gql(t.url, t.adminToken, `mutation ($i: FabricPreflightInput!) { fabricPreflight(input: $i) {
      underlayCidr ready underlayMtu matchedBridges mtuDrift { nodeIp } nodes { nodeIp fqdn mode needsOverride bridge bridgeMtu underlayIp reason }
      vtepPool { routerIdBase routerIdPrefixLen capacity expectedNodes headroom overallocWarn } } }`, { i: input });
    expect(viaGql.errors).toBeUndefined();
    const viaRest = await preflight({ underlay_cidr: CIDR, expected_nodes: 300, router_id_prefix_len: 22 });
    const g = viaGql.data!.fabricPreflight;
    expect(viaRest.body).toEqual({
      underlay_cidr: g.underlayCidr, ready: g.ready, underlay_mtu: g.underlayMtu, matched_bridges: g.matchedBridges, mtu_drift: [],
      nodes: g.nodes.map((n: PreflightNode) => ({ node_ip: n.nodeIp, fqdn: n.fqdn, mode: n.mode, needs_override: n.needsOverride, bridge: n.bridge, bridge_mtu: n.bridgeMtu, underlay_ip: n.underlayIp, reason: n.reason })),
      vtep_pool: { router_id_base: '10.255.0.1', router_id_prefix_len: 22, capacity: 1016, expected_nodes: 300, headroom: 716, overalloc_warn: false },
    });
    const over = await preflight({ underlay_cidr: CIDR, expected_nodes: 300 });
    expect(over.body.vtep_pool).toMatchObject({ capacity: 254, expected_nodes: 300, headroom: -46, overalloc_warn: true });

    const reader = await makeToken(prisma(), null, [{ permission: 'compute:sites:read', scopeType: 'platform', scopeId: null }]);
    expect((await preflight({ underlay_cidr: CIDR }, reader)).status).toBe(403);
    expect(codeOf(await gql(t.url, reader, 'mutation { fabricPreflight(input: { underlayCidr: "10.60.200.0/24" }) { ready } }'))).toBe('PERMISSION_DENIED');
  });
});

describe('preflight rules (pure)', () => {
  const underlay = validatePreflightInput({ underlayCidr: '10.60.200.7/24' }).underlay;

  it('normalises the CIDR and derives a bridge name that fits IFNAMSIZ', () => {
    expect(underlay.text).toBe(CIDR);
    expect(bridgeNameOf(underlay)).toBe('br-0a3cc800-24');
    expect(bridgeNameOf(underlay).length).toBeLessThanOrEqual(15);
  });

  it('reads FRR versions (Debian epochs and revisions too) and compares them', () => {
    expect(frrVersionOf('8.4.4-1.1~deb12u2')).toEqual([8, 4]);
    expect(frrVersionOf('1:10.0.1-0~deb12u1')).toEqual([10, 0]);
    expect(frrVersionOf('')).toBeNull();
    expect(versionAtLeast([8, 4], [9, 1])).toBe(false);
    expect(versionAtLeast([9, 0], [9, 1])).toBe(false);
    expect(versionAtLeast([9, 1], [9, 1])).toBe(true);
    expect(versionAtLeast([10, 0], [9, 1])).toBe(true);
  });

  it('the consensus rules: agree -> N; disagree -> 0 and every pair; none reuse -> 0 and no drift', () => {
    const n = (ip: string, mode: PreflightNode['mode'], mtu: number): PreflightNode => ({ nodeIp: ip, fqdn: ip, mode, needsOverride: false, bridge: 'br0', bridgeMtu: mtu, underlayIp: '', reason: '' });
    expect(mtuConsensus([n('a', 'reuse', 9000), n('b', 'reuse', 9000), n('c', 'needs_override', 0)])).toEqual({ underlayMtu: 9000, mtuDrift: [] });
    expect(mtuConsensus([n('a', 'reuse', 9000), n('b', 'reuse', 1500)]).mtuDrift.map((d) => [d.nodeIp, d.bridgeMtu])).toEqual([['a', 9000], ['b', 1500]]);
    expect(mtuConsensus([n('a', 'reuse', 9000), n('b', 'reuse', 1500)]).underlayMtu).toBe(0);
    expect(mtuConsensus([n('c', 'needs_override', 0), n('d', 'unreachable', 0)])).toEqual({ underlayMtu: 0, mtuDrift: [] });
  });

  it('a bridge outside the CIDR is not a match, and the reason lists what was seen', () => {
    const facts = parseFacts([
      '@@addr', JSON.stringify([{ ifindex: 3, ifname: 'br9', mtu: 1500, addr_info: [{ family: 'inet', local: '192.168.5.1', prefixlen: 24 }] }]),
      '@@link', JSON.stringify([{ ifindex: 3, ifname: 'br9', mtu: 1500, linkinfo: { info_kind: 'bridge' } }]),
      '@@frr', '',
    ].join('\n'));
    const r = resolveNode(facts, underlay, undefined);
    expect(r.mode).toBe('needs_override');
    expect(r.reason).toContain('no bridge has an IPv4 address inside 10.60.200.0/24 (its bridges: br9 192.168.5.1/24)');
  });
});
