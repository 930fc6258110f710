/**
 * The renderers' input: the fabric intent after validation, in camelCase, with no database and no
 * HTTP types in it. The stored FabricConfig row (snake_case, secrets encrypted) is mapped onto this
 * by the config module; the renderers trust that mapping to have validated addresses and ranges and
 * only refuse what would corrupt a rendered file (RenderError, naming the field, never the value).
 *
 * Secrets travel apart from the intent (FabricSecrets) so that what the API may show (plan,
 * switch_config, snippets) is rendered from an object that cannot contain them.
 */
import { isIPv4 } from 'node:net';

export type SwitchNos = 'sonic' | 'cumulus' | 'nxos' | 'eos' | 'other';
export const SWITCH_NOS: readonly SwitchNos[] = ['sonic', 'cumulus', 'nxos', 'eos', 'other'];

export type UnderlayMode = 'ospf' | 'bgp';
export type BgpMode = 'ibgp' | 'ebgp';
export type OspfAuthType = 'none' | 'message-digest' | 'hmac-sha-256';

export interface OspfIntent {
  /** Dotted area id or a plain number, as the operator gave it ("0.0.0.0", "0"). */
  area: string;
  helloInterval: number;
  deadInterval: number;
  /** Mbit/s for `auto-cost reference-bandwidth`; 0 leaves FRR's default. */
  autoRefBw: number;
  /** Interface facing the fabric switch; a node's own underlayInterface overrides it. */
  fabricInterface: string;
  authType: OspfAuthType;
  authKeyId: number;
}

export interface FabricSwitchIntent {
  nos: SwitchNos;
  name: string;
  role: 'spine' | 'leaf' | 'border-leaf' | '';
  /** The switch's BGP address (its loopback). */
  peeringIp: string;
  asn: number;
  /** The switch port or SVI facing the hosts (OSPF timers and auth are per interface); empty = rendered as a commented template. */
  hostFacingInterface: string;
}

export interface FabricNodeIntent {
  hostname: string;
  /** This node's VTEP loopback (/32) from the pool: router id, EVPN next hop, BGP source under OSPF. */
  vtepIp: string;
  /** Interface towards the fabric; empty = the cluster-wide ospf.fabricInterface. */
  underlayInterface: string;
  /** The node's address on the underlay (the management subnet when underlay is bgp). */
  underlayIp: string;
  /** The gateway node: the software route reflector when externalRouteReflector is false. */
  isGateway: boolean;
}

export interface FabricIntent {
  /** Local (host) AS. */
  asn: number;
  underlay: UnderlayMode;
  ospf: OspfIntent;
  bfdEnabled: boolean;
  advertiseAllVni: boolean;
  /** Whether a BGP password / OSPF key is configured: the switch side renders a reminder, never the value. */
  bgpPasswordSet: boolean;
  ospfAuthKeySet: boolean;
  /** VTEP pool: router_id_base and router_id_prefix_len. */
  vtepPoolBase: string;
  vtepPoolPrefixLen: number;
  /** The management subnet (CIDR); under the bgp underlay the BGP sessions run over it. */
  managementCidr: string;
  /** The OSPF underlay subnet the switch runs OSPF on; empty = managementCidr. */
  underlayCidr: string;
  /** Interface on the host carrying the VTEP loopback (the machine has no `dummy`, so a bridge). */
  vtepInterface: string;
  switch: FabricSwitchIntent;
  externalRouteReflector: boolean;
  /** Sizing hint, 0 = unset (legacy rows): the listen limit then falls back to the pool capacity. */
  expectedNodes: number;
  vxlanMtu: number;
  publicMtu: number;
}

export interface FabricSecrets {
  bgpPassword?: string;
  ospfAuthKey?: string;
}

/** ibgp when the switch shares the host AS (or there is no switch AS yet), ebgp otherwise. */
export function bgpMode(intent: Pick<FabricIntent, 'asn' | 'switch'>): BgpMode {
  return intent.switch.asn === 0 || intent.switch.asn === intent.asn ? 'ibgp' : 'ebgp';
}

/** A rendered file would be wrong or unsafe with this input; `field` names the input, never its value. */
export class RenderError extends Error {
  constructor(readonly field: string, reason: string) {
    super(`${field}: ${reason}`);
    this.name = 'RenderError';
  }
}

/** A dotted-quad IPv4 address as an unsigned 32-bit number (the fabric's one conversion). */
export function ipv4ToNumber(ip: string): number {
  const parts = ip.split('.');
  return ((Number(parts[0]) << 24) | (Number(parts[1]) << 16) | (Number(parts[2]) << 8) | Number(parts[3])) >>> 0;
}

export function numberToIpv4(n: number): string {
  return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

function ipv4ToInt(ip: string, field: string): number {
  if (!isIPv4(ip)) throw new RenderError(field, 'not an IPv4 address');
  return ipv4ToNumber(ip);
}

/** The network of `base/prefixLen` as "A.B.C.D/N" (the base may be any address inside it). */
export function networkCidr(base: string, prefixLen: number, field: string): string {
  if (!Number.isInteger(prefixLen) || prefixLen < 8 || prefixLen > 32) throw new RenderError(field, 'prefix length must be 8..32');
  const mask = (0xffffffff << (32 - prefixLen)) >>> 0;
  return `${numberToIpv4((ipv4ToInt(base, field) & mask) >>> 0)}/${prefixLen}`;
}

/** "A.B.C.D/N" checked and normalised to its network address. */
export function parseCidr(cidr: string, field: string): string {
  const slash = cidr.indexOf('/');
  if (slash < 0) throw new RenderError(field, 'not a CIDR');
  const len = Number(cidr.slice(slash + 1));
  return networkCidr(cidr.slice(0, slash), len, field);
}

export function vtepPoolCidr(intent: Pick<FabricIntent, 'vtepPoolBase' | 'vtepPoolPrefixLen'>): string {
  return networkCidr(intent.vtepPoolBase, intent.vtepPoolPrefixLen, 'router_id_base');
}

/** Usable VTEP addresses: every /24 block loses its .0 and .255 (the seed's total_usable rule). */
export function vtepPoolCapacity(prefixLen: number): number {
  if (prefixLen >= 24) return Math.max(0, 2 ** (32 - prefixLen) - 2);
  return 2 ** (24 - prefixLen) * 254;
}

/**
 * `bgp listen limit` for a route reflector: expected nodes plus a quarter (at least 16) of headroom,
 * so nodes that join before the operator raises expected_nodes still get a session. Legacy rows
 * (expected_nodes 0) fall back to the pool's capacity. FRR's own default is 100.
 */
export function listenLimit(intent: Pick<FabricIntent, 'expectedNodes' | 'vtepPoolPrefixLen'>): number {
  const base = intent.expectedNodes > 0 ? intent.expectedNodes : vtepPoolCapacity(intent.vtepPoolPrefixLen);
  return Math.min(65535, base + Math.max(16, Math.ceil(base / 4)));
}

/**
 * The range the route reflector accepts host sessions from: the VTEP pool under OSPF (sessions run
 * loopback to loopback), the management subnet under the bgp underlay (sessions run over it).
 */
export function hostPeeringRange(intent: FabricIntent): string {
  return intent.underlay === 'bgp' ? parseCidr(intent.managementCidr, 'management_cidr') : vtepPoolCidr(intent);
}
