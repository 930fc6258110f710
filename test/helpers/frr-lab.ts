/**
 * Reading real FRR on ssh-nodes started with `{ frr: true }`: vtysh's JSON through inNode (the
 * node's own network and mount namespaces, so its own daemons), and bounded waits that fail with
 * what FRR last said rather than a bare timeout.
 */
import type { SshNode, SshNodes } from './ssh-nodes';

export interface BgpPeerState {
  /** FRR's key in `show bgp summary json`: the neighbour's address. */
  peer: string;
  /** ipv4Unicast, l2VpnEvpn, ... as FRR names the address family in its JSON. */
  afi: string;
  state: string;
  /** Prefixes received (pfxRcd) in that address family. */
  prefixes: number;
  dynamic: boolean;
}

type SummaryJson = Record<string, { peers?: Record<string, { state?: string; pfxRcd?: number; dynamicPeer?: boolean }> }>;

export async function vtyshJson<T>(h: SshNodes, node: SshNode, command: string): Promise<T> {
  const out = await h.inNode(node, ['vtysh', '-c', command]);
  try {
    return JSON.parse(out) as T;
  } catch {
    throw new Error(`node ${node.index}: vtysh -c '${command}' did not print JSON: ${out.slice(0, 300)}`);
  }
}

/** Every neighbour of every address family `show bgp summary json` lists (vtysh names the AF keys). */
export async function bgpPeers(h: SshNodes, node: SshNode): Promise<BgpPeerState[]> {
  const summary = await vtyshJson<SummaryJson>(h, node, 'show bgp summary json');
  const out: BgpPeerState[] = [];
  for (const [afi, af] of Object.entries(summary)) {
    for (const [peer, p] of Object.entries(af.peers ?? {})) {
      out.push({ peer, afi, state: p.state ?? 'unknown', prefixes: p.pfxRcd ?? 0, dynamic: p.dynamicPeer === true });
    }
  }
  return out.sort((a, b) => (a.afi + a.peer).localeCompare(b.afi + b.peer));
}

/** Polls until `read` satisfies `ok`; past `ms` it throws naming `what` and the last value read. */
export async function waitFor<T>(what: string, read: () => Promise<T>, ok: (v: T) => boolean, ms: number, everyMs = 250): Promise<T> {
  const until = Date.now() + ms;
  let last = await read();
  while (!ok(last)) {
    if (Date.now() > until) throw new Error(`${what}: not so after ${ms} ms; last: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, everyMs));
    last = await read();
  }
  return last;
}

/**
 * Waits until the node has exactly `peers` (addresses) as neighbours in every address family in
 * `afis`, all Established. The error names each neighbour's state, e.g. `10.1.2.3 l2VpnEvpn Active`.
 */
export async function waitBgpEstablished(h: SshNodes, node: SshNode, peers: readonly string[], afis: readonly string[], ms: number): Promise<BgpPeerState[]> {
  const want = [...peers].sort();
  const read = () => bgpPeers(h, node);
  const ok = (list: BgpPeerState[]) => afis.every((afi) => {
    const inAf = list.filter((p) => p.afi === afi);
    return JSON.stringify(inAf.map((p) => p.peer).sort()) === JSON.stringify(want) && inAf.every((p) => p.state === 'Established');
  });
  const until = Date.now() + ms;
  let last = await read();
  while (!ok(last)) {
    if (Date.now() > until) {
      const states = last.map((p) => `${p.peer} ${p.afi} ${p.state}`).join(', ') || 'no neighbours';
      throw new Error(`node ${node.index}: BGP not Established with ${want.join(', ')} in ${afis.join(', ')} after ${ms} ms: ${states}`);
    }
    await new Promise((r) => setTimeout(r, 250));
    last = await read();
  }
  return last;
}

/**
 * The remote VTEPs zebra floods VNI `vni` to (learned from EVPN type-3 routes); [] when the VNI is
 * unknown or has none. FRR 8.4 prints that list under "numRemoteVteps" (later releases under
 * "remoteVteps", as objects): both are read.
 */
export async function remoteVteps(h: SshNodes, node: SshNode, vni: number): Promise<string[]> {
  type Vtep = string | { ip?: string };
  const j = await vtyshJson<{ remoteVteps?: Vtep[] | unknown; numRemoteVteps?: Vtep[] | unknown }>(h, node, `show evpn vni ${vni} json`);
  const list = Array.isArray(j.remoteVteps) ? j.remoteVteps as Vtep[] : Array.isArray(j.numRemoteVteps) ? j.numRemoteVteps as Vtep[] : [];
  return list.map((v) => (typeof v === 'string' ? v : v.ip ?? '')).filter(Boolean).sort();
}

/** The kernel's head-end replication list of a vxlan device: the all-zero FDB entries' `dst`. */
export async function floodList(h: SshNodes, node: SshNode, dev: string): Promise<string[]> {
  const fdb = JSON.parse(await h.inNode(node, ['bridge', '-j', 'fdb', 'show', 'dev', dev])) as Array<{ mac: string; dst?: string }>;
  return fdb.filter((e) => e.mac === '00:00:00:00:00:00' && e.dst).map((e) => e.dst!).sort();
}

export interface ImetRoute {
  rd: string;
  /** The originating VTEP (the route's IP field). */
  vtep: string;
  ethTag: number;
  /** This node's own route (FRR: peerId "(unspec)"), else the neighbour it came from. */
  from: string;
  nexthop: string;
  /** e.g. ["65010:100"]: FRR's auto-derived RT is AS:VNI. */
  routeTargets: string[];
}

/** Type-3 (IMET) paths in the node's BGP EVPN table (`show bgp l2vpn evpn route type multicast json`). */
export async function imetRoutes(h: SshNodes, node: SshNode): Promise<ImetRoute[]> {
  type Path = { routeType?: number; ethTag?: number; ip?: string; peerId?: string; nexthops?: Array<{ ip?: string }>; extendedCommunity?: { string?: string } };
  const j = await vtyshJson<Record<string, unknown>>(h, node, 'show bgp l2vpn evpn route type multicast json');
  const out: ImetRoute[] = [];
  for (const [rd, byPrefix] of Object.entries(j)) {
    if (typeof byPrefix !== 'object' || byPrefix === null) continue;
    for (const [prefix, entry] of Object.entries(byPrefix as Record<string, unknown>)) {
      if (!prefix.startsWith('[3]') || typeof entry !== 'object' || entry === null) continue;
      for (const p of ((entry as { paths?: Path[][] }).paths ?? []).flat()) {
        out.push({
          rd,
          vtep: p.ip ?? '',
          ethTag: p.ethTag ?? 0,
          from: p.peerId === '(unspec)' ? 'local' : p.peerId ?? '',
          nexthop: p.nexthops?.[0]?.ip ?? '',
          routeTargets: (p.extendedCommunity?.string ?? '').split(/\s+/).filter((c) => c.startsWith('RT:')).map((c) => c.slice(3)).sort(),
        });
      }
    }
  }
  return out.sort((a, b) => (a.vtep + a.from).localeCompare(b.vtep + b.from));
}

/** OSPF neighbours and their state (`show ip ospf neighbor json`), e.g. { "172.30.200.2": "Full/DR" }. */
export async function ospfNeighbours(h: SshNodes, node: SshNode): Promise<Record<string, string>> {
  type N = { nbrState?: string; state?: string };
  const j = await vtyshJson<{ neighbors?: Record<string, N[]> }>(h, node, 'show ip ospf neighbor json');
  const out: Record<string, string> = {};
  for (const [id, list] of Object.entries(j.neighbors ?? {})) out[id] = list[0]?.nbrState ?? list[0]?.state ?? 'unknown';
  return out;
}
