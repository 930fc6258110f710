import ipaddr from 'ipaddr.js';
import { invalidInput } from '../../errors';
import type { Tx } from '../../db/client';
import type { ComputeNode } from './compute-nodes';
import { vtepPoolCapacity } from './intent';
import { EXPECTED_NODES_MAX, isIPv4, parseIPv4Cidr, ROUTER_ID_PREFIX_MAX, ROUTER_ID_PREFIX_MIN } from './validate';

/**
 * The fabric preflight (issue 10 item 7, the seed's POST /controlnode/fabric-config/preflight):
 * an SSH fan-out to every compute node that reads its interfaces and FRR, resolves how each node
 * reaches the underlay, and changes nothing on any node. This file is the pure part: the input's
 * rules, the node's answer parsed, its resolution and the consensus over all of them. The SSH
 * scan is preflight-scan.ts; the request and its workflow run are preflight-run.ts and
 * jobs/workflows/fabric-preflight.ts. What it finds is kept in the one
 * `fabric_preflight` row (the MTU consensus a fabric-config write is checked against, item 2) and
 * in fabric_config.frr_hmac_sha_capable (the capability probe).
 *
 * Decisions the seed leaves open, made here:
 * - A node named in node_overrides is resolved by the override (mode `override`, needs_override
 *   false, bridge / underlay_ip from the override): the override supplies what the node lacks, so
 *   it is no longer needs_override. It must name an interface the node has; an unreachable node
 *   stays unreachable (nothing could be checked). Override nodes take no part in the MTU
 *   consensus (their bridge does not exist yet) and report bridge_mtu 0, as the seed says for
 *   every non-reuse node.
 * - `ready` is the seed's "true ⟺ every node ∈ {reuse}", read literally: an override node is not
 *   reuse, and an empty cluster is ready (every node of none is reuse). Apply is what refuses an
 *   empty cluster (INVALID_STATE: nothing to roll out).
 * - The capability is true only when every node that answered proved FRR >= 9.1 *and* accepted
 *   the key-chain snippet under `vtysh -C`; a node without FRR has proven nothing, so it counts
 *   as not capable. With no node answering the stored value is left as it was.
 */

const MAX_OVERRIDES = EXPECTED_NODES_MAX;
/** The one fabric_preflight row. */
export const PREFLIGHT_ID = 1;

export type PreflightMode = 'reuse' | 'needs_override' | 'override' | 'unreachable';

export interface NodeOverrideInput {
  nodeIp?: string | null;
  underlayIfaceHint?: string | null;
  underlayIp?: string | null;
  underlayBridgeName?: string | null;
}

export interface PreflightInput {
  underlayCidr?: string | null;
  expectedNodes?: number | null;
  routerIdBase?: string | null;
  routerIdPrefixLen?: number | null;
  nodeOverrides?: readonly NodeOverrideInput[] | null;
}

export interface NodeOverride {
  nodeIp: string;
  underlayIfaceHint: string;
  /** host/prefix, as given (normalised dotted quad). */
  underlayIp: string;
  /** The given name, or the one derived from the underlay CIDR. */
  underlayBridgeName: string;
}

export interface PreflightNode {
  nodeIp: string;
  fqdn: string;
  mode: PreflightMode;
  needsOverride: boolean;
  bridge: string;
  bridgeMtu: number;
  underlayIp: string;
  reason: string;
}

export interface MtuDriftEntry {
  nodeIp: string;
  fqdn: string;
  bridge: string;
  bridgeMtu: number;
}

export interface VtepPoolView {
  routerIdBase: string;
  routerIdPrefixLen: number;
  capacity: number;
  expectedNodes: number;
  headroom: number;
  overallocWarn: boolean;
}

export interface PreflightResult {
  underlayCidr: string;
  ready: boolean;
  underlayMtu: number;
  matchedBridges: string[];
  mtuDrift: MtuDriftEntry[];
  nodes: PreflightNode[];
  vtepPool: VtepPoolView;
  /** What the probe concluded this run: null when no node answered (the stored value is kept). */
  frrHmacShaCapable: boolean | null;
}

// ---------------------------------------------------------------------------------------------
// Input

const IFNAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$/;
const given = <T>(value: T | null | undefined): value is T => value !== undefined && value !== null;

export interface Cidr {
  network: string;
  prefixLen: number;
  text: string;
}

function cidrOf(address: string, prefixLen: number): Cidr {
  const network = ipaddr.IPv4.networkAddressFromCIDR(`${address}/${prefixLen}`).toString();
  return { network, prefixLen, text: `${network}/${prefixLen}` };
}

function inCidr(address: string, cidr: Cidr): boolean {
  return ipaddr.IPv4.parse(address).match(ipaddr.IPv4.parse(cidr.network), cidr.prefixLen);
}

/** `br-` + the network in hex + `-` + the prefix: unique per CIDR and within IFNAMSIZ (14 characters). */
export function bridgeNameOf(cidr: Cidr): string {
  const hex = ipaddr.IPv4.parse(cidr.network).octets.map((o) => o.toString(16).padStart(2, '0')).join('');
  return `br-${hex}-${cidr.prefixLen}`;
}

export interface ValidatedInput {
  underlay: Cidr;
  expectedNodes: number | null;
  routerIdBase: string | null;
  routerIdPrefixLen: number | null;
  overrides: NodeOverride[];
}

/**
 * Every field's rules that need no node list. Paths are the GraphQL input's
 * (`input.nodeOverrides[3].underlayIp`); the REST route renames them to the body's.
 */
export function validatePreflightInput(input: PreflightInput): ValidatedInput {
  if (!given(input.underlayCidr) || input.underlayCidr === '') throw invalidInput('input.underlayCidr', 'is required: the IPv4 CIDR of the underlay, e.g. 10.60.200.0/24');
  const parsed = parseIPv4Cidr(input.underlayCidr);
  if (!parsed) throw invalidInput('input.underlayCidr', 'must be an IPv4 CIDR (A.B.C.D/N)');
  if (parsed.prefixLen < 8 || parsed.prefixLen > 31) throw invalidInput('input.underlayCidr', 'prefix length must be between 8 and 31');
  const underlay = cidrOf(parsed.address, parsed.prefixLen);

  let expectedNodes: number | null = null;
  if (given(input.expectedNodes) && input.expectedNodes !== 0) {
    if (!Number.isInteger(input.expectedNodes) || input.expectedNodes < 1 || input.expectedNodes > EXPECTED_NODES_MAX) {
      throw invalidInput('input.expectedNodes', `must be an integer between 1 and ${EXPECTED_NODES_MAX} (0 or absent = the stored value)`);
    }
    expectedNodes = input.expectedNodes;
  }
  let routerIdBase: string | null = null;
  if (given(input.routerIdBase) && input.routerIdBase !== '') {
    if (!isIPv4(input.routerIdBase)) throw invalidInput('input.routerIdBase', 'must be an IPv4 address (A.B.C.D)');
    routerIdBase = input.routerIdBase;
  }
  let routerIdPrefixLen: number | null = null;
  if (given(input.routerIdPrefixLen) && input.routerIdPrefixLen !== 0) {
    const n = input.routerIdPrefixLen;
    if (!Number.isInteger(n) || n < ROUTER_ID_PREFIX_MIN || n > ROUTER_ID_PREFIX_MAX) {
      throw invalidInput('input.routerIdPrefixLen', `must be an integer between ${ROUTER_ID_PREFIX_MIN} and ${ROUTER_ID_PREFIX_MAX} (0 or absent = the stored value)`);
    }
    routerIdPrefixLen = n;
  }

  const list = input.nodeOverrides ?? [];
  if (list.length > MAX_OVERRIDES) throw invalidInput('input.nodeOverrides', `at most ${MAX_OVERRIDES} entries`);
  const overrides: NodeOverride[] = [];
  const byNode = new Map<string, number>();
  const byIp = new Map<string, number>();
  list.forEach((o, i) => {
    const at = (name: keyof NodeOverrideInput) => `input.nodeOverrides[${i}].${name}`;
    if (!given(o.nodeIp) || o.nodeIp === '') throw invalidInput(at('nodeIp'), 'is required');
    if (!isIPv4(o.nodeIp)) throw invalidInput(at('nodeIp'), 'must be an IPv4 address (a compute node\'s OS address)');
    const twin = byNode.get(o.nodeIp);
    if (twin !== undefined) throw invalidInput(at('nodeIp'), `names the same node as input.nodeOverrides[${twin}].nodeIp`);
    byNode.set(o.nodeIp, i);
    if (!given(o.underlayIfaceHint) || o.underlayIfaceHint === '') throw invalidInput(at('underlayIfaceHint'), 'is required: the node\'s interface facing the underlay, e.g. eth1');
    if (!IFNAME.test(o.underlayIfaceHint)) throw invalidInput(at('underlayIfaceHint'), 'must be a Linux interface name (at most 15 of A-Z a-z 0-9 _ . -)');
    if (!given(o.underlayIp) || o.underlayIp === '') throw invalidInput(at('underlayIp'), `is required: host/prefix inside ${underlay.text}, e.g. ${exampleHost(underlay)}`);
    const ip = parseIPv4Cidr(o.underlayIp);
    if (!ip) throw invalidInput(at('underlayIp'), `must be host/prefix (A.B.C.D/N), e.g. ${exampleHost(underlay)}`);
    if (!inCidr(ip.address, underlay) || ip.prefixLen !== underlay.prefixLen) {
      throw invalidInput(at('underlayIp'), `must be an address of input.underlayCidr (${underlay.text}) with its prefix length /${underlay.prefixLen}`);
    }
    if (underlay.prefixLen <= 30) {
      const broadcast = ipaddr.IPv4.broadcastAddressFromCIDR(underlay.text).toString();
      if (ip.address === underlay.network || ip.address === broadcast) throw invalidInput(at('underlayIp'), `is the network or broadcast address of ${underlay.text}, not a host`);
    }
    const sameIp = byIp.get(ip.address);
    if (sameIp !== undefined) throw invalidInput(at('underlayIp'), `is also input.nodeOverrides[${sameIp}].underlayIp: two nodes cannot share an underlay address`);
    byIp.set(ip.address, i);
    let bridge = bridgeNameOf(underlay);
    if (given(o.underlayBridgeName) && o.underlayBridgeName !== '') {
      if (!IFNAME.test(o.underlayBridgeName)) throw invalidInput(at('underlayBridgeName'), 'must be a Linux interface name (at most 15 of A-Z a-z 0-9 _ . -) or empty (derived from the CIDR)');
      bridge = o.underlayBridgeName;
    }
    overrides.push({ nodeIp: o.nodeIp, underlayIfaceHint: o.underlayIfaceHint, underlayIp: `${ip.address}/${ip.prefixLen}`, underlayBridgeName: bridge });
  });
  return { underlay, expectedNodes, routerIdBase, routerIdPrefixLen, overrides };
}

function exampleHost(cidr: Cidr): string {
  const first = ipaddr.IPv4.parse(cidr.network).toByteArray();
  first[3] = (first[3]! + 5) & 255;
  return `${first.join('.')}/${cidr.prefixLen}`;
}

/** The rule that needs the node list: an override for a node that is not a compute node. */
export function checkOverrideNodes(overrides: readonly NodeOverride[], nodes: readonly ComputeNode[]): void {
  const known = new Set(nodes.map((n) => n.nodeIp));
  overrides.forEach((o, i) => {
    if (!known.has(o.nodeIp)) throw invalidInput(`input.nodeOverrides[${i}].nodeIp`, 'no deployed compute node has this address');
  });
}

// ---------------------------------------------------------------------------------------------
// What a node reports

export interface Iface {
  ifindex: number;
  ifname: string;
  mtu: number;
  kind: string;
  addresses: { address: string; prefixLen: number }[];
}

export interface NodeFacts {
  ifaces: Iface[];
  /** "8.4.4-1.1~deb12u2", or '' when FRR is not installed. */
  frrVersion: string;
}

interface IpAddrRow {
  ifindex?: number;
  ifname?: string;
  mtu?: number;
  addr_info?: { family?: string; local?: string; prefixlen?: number }[];
}
interface IpLinkRow {
  ifindex?: number;
  ifname?: string;
  mtu?: number;
  linkinfo?: { info_kind?: string };
}

export class FactsError extends Error {}

function section(text: string, name: string, next: string | null): string {
  const start = text.indexOf(`@@${name}\n`);
  if (start < 0) throw new FactsError(`the node's answer has no ${name} section`);
  const from = start + name.length + 3;
  const end = next === null ? text.length : text.indexOf(`\n@@${next}\n`, from);
  return text.slice(from, end < 0 ? text.length : end).trim();
}

function jsonArray<T>(text: string, what: string): T[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new FactsError(`${what} did not print JSON`);
  }
  if (!Array.isArray(parsed)) throw new FactsError(`${what} did not print a JSON array`);
  return parsed as T[];
}

/** The script's output as interfaces (by ifindex order) and the FRR version. */
export function parseFacts(stdout: string): NodeFacts {
  const addrs = jsonArray<IpAddrRow>(section(stdout, 'addr', 'link'), 'ip -j addr');
  const links = jsonArray<IpLinkRow>(section(stdout, 'link', 'frr'), 'ip -j -d link');
  const frrVersion = section(stdout, 'frr', null).split('\n')[0]!.trim();
  const byName = new Map<string, Iface>();
  for (const link of links) {
    if (typeof link.ifname !== 'string') continue;
    byName.set(link.ifname, {
      ifindex: typeof link.ifindex === 'number' ? link.ifindex : 0,
      ifname: link.ifname,
      mtu: typeof link.mtu === 'number' ? link.mtu : 0,
      kind: link.linkinfo?.info_kind ?? '',
      addresses: [],
    });
  }
  for (const row of addrs) {
    if (typeof row.ifname !== 'string') continue;
    let iface = byName.get(row.ifname);
    if (!iface) {
      // Listed by `ip addr` between the two reads: keep it, its kind unknown.
      iface = { ifindex: row.ifindex ?? 0, ifname: row.ifname, mtu: row.mtu ?? 0, kind: '', addresses: [] };
      byName.set(row.ifname, iface);
    }
    for (const a of row.addr_info ?? []) {
      if (a.family === 'inet' && typeof a.local === 'string' && isIPv4(a.local) && typeof a.prefixlen === 'number') {
        iface.addresses.push({ address: a.local, prefixLen: a.prefixlen });
      }
    }
  }
  return { ifaces: [...byName.values()].sort((a, b) => a.ifindex - b.ifindex || a.ifname.localeCompare(b.ifname)), frrVersion };
}

/** [major, minor] of a Debian or upstream FRR version string; null when it has none. */
export function frrVersionOf(text: string): [number, number] | null {
  const m = /^(?:\d+:)?(\d+)\.(\d+)/.exec(text.trim());
  return m ? [Number(m[1]), Number(m[2])] : null;
}

export function versionAtLeast(v: readonly [number, number], min: readonly [number, number]): boolean {
  return v[0] > min[0] || (v[0] === min[0] && v[1] >= min[1]);
}

// ---------------------------------------------------------------------------------------------
// Resolution (pure)

export interface Resolution {
  mode: PreflightMode;
  bridge: string;
  bridgeMtu: number;
  underlayIp: string;
  reason: string;
}

const addrText = (a: { address: string; prefixLen: number }) => `${a.address}/${a.prefixLen}`;

/** How one reachable node reaches the underlay: its own bridge, the operator's override, or neither. */
export function resolveNode(facts: NodeFacts, underlay: Cidr, override: NodeOverride | undefined): Resolution {
  if (override) {
    const hint = facts.ifaces.find((i) => i.ifname === override.underlayIfaceHint);
    if (!hint) {
      return {
        mode: 'needs_override', bridge: '', bridgeMtu: 0, underlayIp: '',
        reason: `the override names underlay_iface_hint ${override.underlayIfaceHint}, which this node does not have (interfaces: ${facts.ifaces.map((i) => i.ifname).join(', ') || 'none'})`,
      };
    }
    return {
      mode: 'override', bridge: override.underlayBridgeName, bridgeMtu: 0, underlayIp: override.underlayIp,
      reason: `operator override: bridge ${override.underlayBridgeName} on ${override.underlayIfaceHint} with ${override.underlayIp}, built by the rollout`,
    };
  }
  for (const iface of facts.ifaces) {
    if (iface.kind !== 'bridge') continue;
    const hit = iface.addresses.find((a) => inCidr(a.address, underlay));
    if (hit) return { mode: 'reuse', bridge: iface.ifname, bridgeMtu: iface.mtu, underlayIp: addrText(hit), reason: '' };
  }
  const elsewhere = facts.ifaces.flatMap((i) => i.addresses.filter((a) => inCidr(a.address, underlay)).map((a) => ({ iface: i, a })))[0];
  if (elsewhere) {
    return {
      mode: 'needs_override', bridge: '', bridgeMtu: 0, underlayIp: '',
      reason: `${addrText(elsewhere.a)} is inside ${underlay.text} but on ${elsewhere.iface.ifname}, which is not a bridge: add a node_overrides entry (underlay_iface_hint ${elsewhere.iface.ifname}) so the rollout builds the bridge`,
    };
  }
  const bridges = facts.ifaces.filter((i) => i.kind === 'bridge');
  const seen = bridges.length === 0 ? 'the node has no bridge'
    : `its bridges: ${bridges.map((b) => `${b.ifname} ${b.addresses.map(addrText).join(' ') || '(no IPv4)'}`).join(', ')}`;
  return {
    mode: 'needs_override', bridge: '', bridgeMtu: 0, underlayIp: '',
    reason: `no bridge has an IPv4 address inside ${underlay.text} (${seen}): add a node_overrides entry with the underlay interface and address`,
  };
}

/**
 * The seed's resolution rules: every reuse node agrees on N > 0 -> N and no drift; they disagree ->
 * 0 and every observed (node, mtu) pair; no reuse node (a cold start) -> 0 and no drift.
 */
export function mtuConsensus(nodes: readonly PreflightNode[]): { underlayMtu: number; mtuDrift: MtuDriftEntry[] } {
  const reuse = nodes.filter((n) => n.mode === 'reuse');
  const mtus = new Set(reuse.map((n) => n.bridgeMtu));
  if (reuse.length === 0) return { underlayMtu: 0, mtuDrift: [] };
  const [only] = [...mtus];
  if (mtus.size === 1 && only! > 0) return { underlayMtu: only!, mtuDrift: [] };
  return { underlayMtu: 0, mtuDrift: reuse.map((n) => ({ nodeIp: n.nodeIp, fqdn: n.fqdn, bridge: n.bridge, bridgeMtu: n.bridgeMtu })) };
}

export function vtepPoolView(routerIdBase: string, routerIdPrefixLen: number, expectedNodes: number): VtepPoolView {
  const capacity = routerIdBase !== '' && routerIdPrefixLen > 0 ? vtepPoolCapacity(routerIdPrefixLen) : 0;
  const headroom = capacity - expectedNodes;
  return { routerIdBase, routerIdPrefixLen, capacity, expectedNodes, headroom, overallocWarn: headroom < 0 };
}

// ---------------------------------------------------------------------------------------------
// The findings (pure): each node's scan row, resolved, and the consensus over them

export type Capability = 'capable' | 'incapable';

export interface NodeReport {
  facts: NodeFacts;
  capability: Capability;
}

/** What the SSH scan (preflight-scan.ts) found on one node: its facts, or why it could not be read. */
export type ScanRow = { ok: true; report: NodeReport } | { ok: false; reason: string };

/** The preflight's answer from the nodes' scan rows (in the nodes' order). */
export function findingsOf(nodes: readonly Pick<ComputeNode, 'nodeIp' | 'fqdn'>[], rows: readonly ScanRow[], underlay: Cidr,
  overrides: readonly NodeOverride[], vtepPool: VtepPoolView): PreflightResult {
  const overrideOf = new Map(overrides.map((o) => [o.nodeIp, o]));
  const reports: PreflightNode[] = [];
  const capabilities: Capability[] = [];
  nodes.forEach((node, i) => {
    const row = rows[i]!;
    const base = { nodeIp: node.nodeIp, fqdn: node.fqdn };
    if (!row.ok) {
      reports.push({ ...base, mode: 'unreachable', needsOverride: false, bridge: '', bridgeMtu: 0, underlayIp: '', reason: row.reason });
      return;
    }
    capabilities.push(row.report.capability);
    const r = resolveNode(row.report.facts, underlay, overrideOf.get(node.nodeIp));
    reports.push({ ...base, ...r, needsOverride: r.mode === 'needs_override' });
  });
  const { underlayMtu, mtuDrift } = mtuConsensus(reports);
  const matchedBridges = [...new Set(reports.filter((n) => n.mode === 'reuse').map((n) => n.bridge))].sort();
  // The seed's "true ⟺ every node ∈ {reuse}": true of an empty cluster too (apply refuses that one).
  const ready = reports.every((n) => n.mode === 'reuse');
  const frrHmacShaCapable = capabilities.length === 0 ? null : capabilities.every((c) => c === 'capable');
  return { underlayCidr: underlay.text, ready, underlayMtu, matchedBridges, mtuDrift, nodes: reports, vtepPool, frrHmacShaCapable };
}

// ---------------------------------------------------------------------------------------------
// Item 2: MTU drift

/**
 * The fabric config's vxlan_mtu against the latest preflight (the seed: underlay_mtu is "the value
 * the backend rejects drift against"). Refused: any value other than the consensus, and any value
 * at all while the nodes' bridges disagree (there is no value that fits them all). Accepted: no
 * preflight yet, or a cold start (no reuse node, consensus 0). Called on the merged intent, so a
 * write that leaves a drifting vxlan_mtu in place is refused too.
 */
export async function checkMtuDrift(db: Pick<Tx, 'fabricPreflight'>, vxlanMtu: number): Promise<void> {
  const row = await db.fabricPreflight.findUnique({ where: { id: PREFLIGHT_ID } });
  if (!row) return;
  const drift = Array.isArray(row.mtuDrift) ? (row.mtuDrift as unknown as MtuDriftEntry[]) : [];
  if (drift.length > 0) {
    const seen = drift.slice(0, 8).map((d) => `${d.fqdn} ${d.bridge} ${d.bridgeMtu}`).join(', ');
    throw invalidInput('input.vxlanMtu', `refused: the latest preflight found the nodes' underlay bridges disagree on MTU (${seen}${drift.length > 8 ? ', ...' : ''}); make them agree and run the preflight again`);
  }
  if (row.underlayMtu > 0 && vxlanMtu !== row.underlayMtu) {
    throw invalidInput('input.vxlanMtu', `must be ${row.underlayMtu}, the underlay MTU the latest preflight found on every node's bridge`);
  }
}
