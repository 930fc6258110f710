import { withSession, type SshTarget } from '../clients/ssh';
import type { ComputeNode } from '../src/modules/fabric/compute-nodes';
import { renderAllHostFrr } from '../src/modules/fabric/render/host-frr';
import type { FabricSecrets } from '../src/modules/fabric/intent';
import { nodeIntentsOf, renderIntentOf, VTEP_INTERFACE } from '../src/modules/fabric/render-intent';
import { DEFAULT_SETTINGS, type FabricSettings } from '../src/modules/fabric/validate';
import { bgpPeers, floodList, imetRoutes, ospfNeighbours, remoteVteps, vtyshJson, waitBgpEstablished, waitFor } from './helpers/frr-lab';
import { startSshNodes, type SshNode, type SshNodes } from './helpers/ssh-nodes';

/**
 * The "at least one test runs real FRR daemons": three compute nodes on one management
 * segment, the gateway running the fabric's software route reflector and two hosts, each with
 * the VTEP loopback on vtep0 and VNI 100 on a vxlan device. Their frr.conf is exactly what the
 * control plane renders (renderIntentOf + renderAllHostFrr), written over real SSH and started by
 * `systemctl restart frr` (the lab's stand-in that runs real bgpd/zebra in the node).
 */
const VNI = 100;
const ESTABLISHED_MS = 60_000;

let h: SshNodes;
beforeAll(async () => {
  h = await startSshNodes('fabric-evpn-lab', 3, { lan: true, frr: true });
}, 60_000);
afterAll(async () => {
  await h?.stop();
});

const target = (node: SshNode): SshTarget => ({
  host: node.lanAddress!,
  username: h.username,
  privateKey: h.clientPrivateKey,
  hostKey: { fingerprint: node.hostKeyFingerprint! },
});

/** ComputeNode rows as the compute_node table would hold them for these lab nodes: the OS address is the lan one. */
const computeNodes = (): ComputeNode[] => h.nodes.map((n) => ({
  nodeId: `lab-node-${n.index}`,
  nodeIp: n.lanAddress!,
  fqdn: n.index === 0 ? 'lab-gw.example.test' : `lab-host${n.index}.example.test`,
  sshPort: 22,
  sshUser: 'root',
  sshHostKey: n.hostKeyFingerprint,
  sshKeyRef: null,
  underlayIface: 'eth1',
  isGateway: n.index === 0,
}));

/** The lab's VTEP pool: node i gets .(i+1). Only the nodes' own namespaces ever see these addresses. */
const VTEP_BASE = '172.30.200.0';
const vtepOf = (n: SshNode) => `172.30.200.${n.index + 1}`;

function settingsFor(over: Partial<FabricSettings>): FabricSettings {
  return {
    ...DEFAULT_SETTINGS,
    as: 65010,
    managementCidr: h.lan!.cidr,
    routerIdBase: VTEP_BASE,
    routerIdPrefixLen: 24,
    expectedNodes: 3,
    advertiseAllVni: true,
    externalRouteReflector: false,
    ...over,
  };
}

/** What a rollout does on each node before FRR: the VTEP loopback, VNI 100 in its bridge. */
const NODE_SETUP = (vtep: string) => [
  `ip link add ${VTEP_INTERFACE} type bridge`,
  `ip addr add ${vtep}/32 dev ${VTEP_INTERFACE}`,
  `ip link set ${VTEP_INTERFACE} up`,
  `ip link add br${VNI} type bridge`,
  `ip link add vxlan${VNI} type vxlan id ${VNI} local ${vtep} dstport 4789 nolearning`,
  `ip link set vxlan${VNI} master br${VNI}`,
  `ip link set br${VNI} up`,
  `ip link set vxlan${VNI} up`,
].join(' && ');

async function deploy(settings: FabricSettings, secrets: FabricSecrets = {}): Promise<Map<string, string>> {
  const intent = renderIntentOf(settings);
  const nodes = nodeIntentsOf(computeNodes(), new Map(h.nodes.map((n) => [`lab-node-${n.index}`, vtepOf(n)])));
  const configs = renderAllHostFrr(intent, nodes, secrets);
  // The reflector first: clients that find it down would wait out their connect retry.
  for (const [i, node] of h.nodes.entries()) {
    const conf = configs.get(nodes[i].hostname)!;
    const r = await withSession(target(node), async (s) => {
      const setup = await s.exec(`ip link show ${VTEP_INTERFACE} >/dev/null 2>&1 || { ${NODE_SETUP(vtepOf(node))}; }`);
      if (setup.exitCode !== 0) return setup;
      const write = await s.exec('cat > /etc/frr/frr.conf', { stdin: conf });
      if (write.exitCode !== 0) return write;
      return s.exec('systemctl restart frr');
    });
    expect({ node: i, exitCode: r.exitCode, stderr: r.stderr }).toEqual({ node: i, exitCode: 0, stderr: '' });
  }
  return configs;
}

const others = (me: SshNode) => h.nodes.filter((n) => n !== me);

/** Each node learns every other node's IMET route for the VNI, and zebra and the kernel flood to exactly those VTEPs. */
async function expectEvpnMesh(members: readonly SshNode[]): Promise<void> {
  for (const node of members) {
    const want = members.filter((n) => n !== node).map(vtepOf).sort();
    await waitFor(`node ${node.index}: remote VTEPs of VNI ${VNI}`, () => remoteVteps(h, node, VNI), (v) => JSON.stringify(v) === JSON.stringify(want), ESTABLISHED_MS);
    const imet = await imetRoutes(h, node);
    // Its own route, and one from each other node, reflected by the gateway, with RT AS:VNI.
    expect(imet.filter((r) => r.from === 'local').map((r) => r.vtep)).toEqual([vtepOf(node)]);
    const learned = imet.filter((r) => r.from !== 'local');
    expect(learned.map((r) => r.vtep).sort()).toEqual(expect.arrayContaining(want));
    for (const r of learned.filter((x) => want.includes(x.vtep))) {
      expect(r).toEqual(expect.objectContaining({ ethTag: 0, nexthop: r.vtep, routeTargets: [`65010:${VNI}`] }));
    }
    // The data plane: vxlan100's head-end replication list in the kernel.
    expect(await floodList(h, node, `vxlan${VNI}`)).toEqual(want);
  }
}

describe('fabric EVPN over real FRR: software route reflector on the gateway and two hosts', () => {
  test('bgp underlay: every session Established, VTEP /32s routed over the lan, each node learns the others\' IMET routes for VNI 100', async () => {
    const configs = await deploy(settingsFor({ ospfEnabled: false }));
    const [gw, h1, h2] = h.nodes;
    // What ran is the control plane's rendering: the reflector's listen range is the lan.
    expect(configs.get('lab-gw')).toContain(` bgp listen range ${h.lan!.cidr} peer-group HOSTS`);
    expect(configs.get('lab-host1')).toContain(` neighbor ${gw.lanAddress} peer-group RR`);
    expect(await h.frrDaemons(gw)).toEqual([expect.objectContaining({ daemon: 'bgpd' }), expect.objectContaining({ daemon: 'staticd' }), expect.objectContaining({ daemon: 'zebra' })]);

    const afis = ['ipv4Unicast', 'l2VpnEvpn'];
    const rr = await waitBgpEstablished(h, gw, [h1.lanAddress!, h2.lanAddress!], afis, ESTABLISHED_MS);
    expect(rr.every((p) => p.dynamic)).toBe(true);
    for (const host of [h1, h2]) await waitBgpEstablished(h, host, [gw.lanAddress!], afis, ESTABLISHED_MS);

    // The underlay: every other node's VTEP loopback is a BGP route via its lan address.
    for (const node of h.nodes) {
      for (const other of others(node)) {
        await waitFor(`node ${node.index}: route to ${vtepOf(other)}`, async () => (await h.inNode(node, ['ip', '-4', 'route', 'show', `${vtepOf(other)}/32`])).trim(),
          (r) => r.includes(`via ${other.lanAddress} dev eth1 proto bgp`), ESTABLISHED_MS);
      }
    }
    await expectEvpnMesh(h.nodes);

    // The checks can fail: a host whose VNI goes away is withdrawn from every other flood list...
    await h.inNode(h2, ['ip', 'link', 'del', `vxlan${VNI}`]);
    for (const node of [gw, h1]) {
      await waitFor(`node ${node.index}: ${vtepOf(h2)} withdrawn`, () => remoteVteps(h, node, VNI), (v) => !v.includes(vtepOf(h2)), ESTABLISHED_MS);
    }
    expect(await floodList(h, h1, `vxlan${VNI}`)).toEqual([vtepOf(gw)]);
    // ...and a host whose FRR stops is no longer an Established neighbour of the reflector.
    expect((await withSession(target(h1), (s) => s.exec('systemctl stop frr'))).exitCode).toBe(0);
    await expect(waitBgpEstablished(h, gw, [h1.lanAddress!, h2.lanAddress!], afis, 2_000))
      .rejects.toThrow(new RegExp(`node 0: BGP not Established with ${h1.lanAddress}, ${h2.lanAddress} in ipv4Unicast, l2VpnEvpn after 2000 ms: (?!.*${h1.lanAddress!.replace(/\./g, '\\.')} \\S+ Established)`));

    // Recovery: FRR back on h1 and the VNI back on h2, and the mesh is whole again.
    expect((await withSession(target(h1), (s) => s.exec('systemctl start frr'))).exitCode).toBe(0);
    await h.inNode(h2, ['sh', '-c', `ip link add vxlan${VNI} type vxlan id ${VNI} local ${vtepOf(h2)} dstport 4789 nolearning && ip link set vxlan${VNI} master br${VNI} && ip link set vxlan${VNI} up`]);
    await waitBgpEstablished(h, gw, [h1.lanAddress!, h2.lanAddress!], afis, ESTABLISHED_MS);
    await expectEvpnMesh(h.nodes);
  }, 180_000);

  test('ospf underlay: ospfd adjacencies over the lan, iBGP EVPN between VTEP loopbacks, the same IMET mesh', async () => {
    const configs = await deploy(settingsFor({ ospfEnabled: true, ospfFabricInterface: 'eth1' }));
    const [gw, h1, h2] = h.nodes;
    expect(configs.get('lab-gw')).toContain(' bgp listen range 172.30.200.0/24 peer-group HOSTS');
    for (const node of h.nodes) {
      expect((await h.frrDaemons(node)).map((d) => d.daemon)).toEqual(['bgpd', 'ospfd', 'staticd', 'zebra']);
    }
    for (const node of h.nodes) {
      const want = others(node).map(vtepOf).sort();
      await waitFor(`node ${node.index}: OSPF neighbours Full`, () => ospfNeighbours(h, node),
        (n) => JSON.stringify(Object.keys(n).sort()) === JSON.stringify(want) && Object.values(n).every((s) => s.startsWith('Full')), ESTABLISHED_MS);
      for (const other of others(node)) {
        await waitFor(`node ${node.index}: route to ${vtepOf(other)}`, async () => (await h.inNode(node, ['ip', '-4', 'route', 'show', `${vtepOf(other)}/32`])).trim(),
          (r) => r.includes(`via ${other.lanAddress} dev eth1 proto ospf`), ESTABLISHED_MS);
      }
    }
    // Only EVPN rides BGP here; the sessions run loopback to loopback.
    const rr = await waitBgpEstablished(h, gw, [vtepOf(h1), vtepOf(h2)], ['l2VpnEvpn'], ESTABLISHED_MS);
    expect(rr.map((p) => p.afi)).toEqual(['l2VpnEvpn', 'l2VpnEvpn']);
    for (const host of [h1, h2]) await waitBgpEstablished(h, host, [vtepOf(gw)], ['l2VpnEvpn'], ESTABLISHED_MS);
    await expectEvpnMesh(h.nodes);
  }, 180_000);

  test('bgp underlay with BFD and a BGP password: bfdd runs, BFD sessions up, TCP-MD5 sessions Established, the same mesh', async () => {
    const configs = await deploy(settingsFor({ ospfEnabled: false, bfdEnabled: true, bgpPasswordSet: true }), { bgpPassword: 'lab-secret-1' });
    const [gw, h1, h2] = h.nodes;
    expect(configs.get('lab-gw')).toContain(' neighbor HOSTS bfd');
    expect(configs.get('lab-gw')).toContain(' neighbor HOSTS password lab-secret-1');
    for (const node of h.nodes) {
      expect((await h.frrDaemons(node)).map((d) => d.daemon)).toEqual(['bfdd', 'bgpd', 'staticd', 'zebra']);
    }
    const afis = ['ipv4Unicast', 'l2VpnEvpn'];
    await waitBgpEstablished(h, gw, [h1.lanAddress!, h2.lanAddress!], afis, ESTABLISHED_MS);
    for (const host of [h1, h2]) await waitBgpEstablished(h, host, [gw.lanAddress!], afis, ESTABLISHED_MS);
    const bfdUp = async (node: SshNode) => (await vtyshJson<Array<{ peer: string; status: string }>>(h, node, 'show bfd peers json'))
      .map((p) => `${p.peer} ${p.status}`).sort();
    await waitFor('gateway BFD peers up', () => bfdUp(gw), (v) => JSON.stringify(v) === JSON.stringify([`${h1.lanAddress} up`, `${h2.lanAddress} up`].sort()), ESTABLISHED_MS);
    await waitFor('host1 BFD peer up', () => bfdUp(h1), (v) => JSON.stringify(v) === JSON.stringify([`${gw.lanAddress} up`]), ESTABLISHED_MS);
    await expectEvpnMesh(h.nodes);

    // The password is real TCP-MD5: host2 with another one never gets a session; host1 keeps its own.
    const wrong = configs.get('lab-host2')!.replace('password lab-secret-1', 'password lab-secret-2');
    expect(wrong).not.toBe(configs.get('lab-host2'));
    const r = await withSession(target(h2), (s) => s.exec('cat > /etc/frr/frr.conf && systemctl restart frr', { stdin: wrong }));
    expect(r.exitCode).toBe(0);
    await expect(waitBgpEstablished(h, h2, [gw.lanAddress!], afis, 15_000)).rejects.toThrow(/node 2: BGP not Established/);
    expect((await bgpPeers(h, gw)).filter((p) => p.state === 'Established').map((p) => p.peer)).toEqual([h1.lanAddress, h1.lanAddress]);
  }, 180_000);
});
