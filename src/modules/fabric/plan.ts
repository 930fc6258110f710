import { createHash } from 'node:crypto';
import ipaddr from 'ipaddr.js';
import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { decide } from '../../auth/decide';
import { AppError, invalidInput } from '../../errors';
import { ipv4ToNumber, listenLimit, numberToIpv4, RenderError, vtepPoolCapacity, vtepPoolCidr, type SwitchNos } from './intent';
import { renderIntentOf } from './render-intent';
import { settingsOf } from './config';
import { checkMtuDrift } from './preflight';
import { renderSwitchConfig } from './render/switch';
import {
  applyFabricInput,
  bgpModeOf,
  checkFabricFields,
  checkFabricRules,
  checkSizingHint,
  DEFAULT_SETTINGS,
  EVPN_CAPABLE_NOS,
  parseIPv4Cidr,
  ROUTER_ID_PREFIX_MAX,
  ROUTER_ID_PREFIX_MIN,
  type FabricConfigInput,
  type FabricSettings,
} from './validate';

/**
 * The fabric plan (issue 10 item 4, seed POST /controlnode/fabric-config/plan): a dry run that
 * fills what the operator left to the planner, says what is risky, renders the switch's config and
 * hashes the result. Pure except for reading the stored row; nothing is written. Cheap on purpose
 * (one row read, one render): the bench's target is 50 ms.
 *
 * What the planner decides (the "0 / empty" of each request field means: the stored value when a
 * config exists, else the planner's pick; but router_id_base and router_id_prefix_len are always
 * the planner's when 0 / empty, as the seed documents them):
 * - local_as 0: 65000, the first of the 16-bit private range 64512-65534 (RFC 6996).
 * - router_id_base empty: 10.255.0.0, stored pool or not. router_id_prefix_len 0 (stored pool or
 *   not): the smallest pool (longest prefix)
 *   whose usable addresses (vtepPoolCapacity) hold expected_nodes plus the route reflector's listen
 *   headroom (intent.ts listenLimit: a quarter, at least 16) plus, under OSPF, the switch's own
 *   loopback; a /24 when expected_nodes is unset. An operator's prefix is kept verbatim (a risk
 *   says when it is too small). A plan whose pool differs from the stored one says so (a risk):
 *   POST would need the switch ack.
 * - fabric_switch_as 0: the host AS, so the fabric is iBGP: EVPN routes are reflected inside one AS
 *   with their next hops untouched, and the switch needs no per-host remote-as.
 * - fabric_switch_peering_ip empty: under OSPF the sessions run loopback to loopback, so the
 *   switch's loopback is taken from the VTEP pool: its last usable address (the allocator hands
 *   addresses out from the bottom); under the bgp underlay the session runs over the management
 *   subnet, so its first usable address (where the switch's SVI usually is).
 * - underlay_mode "" is ospf (the seed's default); "bgp" is one iBGP session per node over the
 *   management subnet carrying the loopback /32s and EVPN (stored as ospf_enabled false).
 * - deployment_mode: "dc" when external_route_reflector is set (the switch is the route reflector
 *   and a VR carries public traffic, so public_mtu is required), "cube" otherwise (the GW node's
 *   software route reflector, no VR: public_mtu is ignored). The plan request has no field for it:
 *   it comes from the stored config (POST external_route_reflector to change it).
 * - The VNI range (a note): tenant L2 VNIs from 10000, one per tenant network, sized for
 *   expected_vms networks (a VM alone on its network at worst) in blocks of 1000.
 *
 * plan_hash is the sha256 of a canonical serialisation (sorted keys, a version tag) of every planned
 * setting that POST stores, plus the switch_config text: the same intent gives the same hash
 * whatever the request's key order, any change of it a different hash. POST fabric-config with a
 * plan_hash recomputes this for the merged intent it would store (planFabric of that intent).
 */

export const DEFAULT_LOCAL_AS = 65000;
export const DEFAULT_VTEP_BASE = '10.255.0.0';
export const DEFAULT_VTEP_PREFIX = 24;
/** VXLAN over IPv4 adds 50 bytes (outer Ethernet 14, IPv4 20, UDP 8, VXLAN 8). */
export const VXLAN_OVERHEAD = 50;
export const VNI_BASE = 10000;
const VNI_BLOCK = 1000;
const PLAN_HASH_VERSION = 'fabric-plan-v1';

export type DeploymentMode = 'dc' | 'cube';
export type PlanUnderlayMode = 'ospf' | 'bgp';
export const UNDERLAY_MODES = ['', 'ospf', 'bgp'] as const;

/** The plan request (GraphQL camelCase of the seed's fields); every field optional for the type system. */
export interface FabricPlanInput {
  expectedNodes?: number | null;
  expectedVms?: number | null;
  fabricSwitchAs?: number | null;
  fabricSwitchName?: string | null;
  fabricSwitchNos?: string | null;
  fabricSwitchPeeringIp?: string | null;
  fabricSwitchRole?: string | null;
  localAs?: number | null;
  managementCidr?: string | null;
  publicMtu?: number | null;
  routerIdBase?: string | null;
  routerIdPrefixLen?: number | null;
  underlayMode?: string | null;
  vxlanMtu?: number | null;
}

/** The seed's config.* of the plan response: the planned intent, never a secret. */
export interface PlannedConfig {
  advertiseAllVni: boolean;
  as: number;
  bfdEnabled: boolean;
  /** Always empty: the plan never carries a secret, even when one is stored. */
  bgpPassword: '';
  fabricSwitchAs: number;
  fabricSwitchName: string;
  fabricSwitchNos: string;
  fabricSwitchPeeringIp: string;
  fabricSwitchRole: string;
  managementCidr: string;
  ospfArea: string;
  ospfAutoRefBw: number;
  ospfDeadInterval: number;
  ospfEnabled: boolean;
  ospfFabricInterface: string;
  ospfHelloInterval: number;
  publicMtu: number;
  rolloutStatus: string;
  routerIdBase: string;
  routerIdPrefixLen: number;
  vxlanMtu: number;
}

export interface FabricPlan {
  config: PlannedConfig;
  deploymentMode: DeploymentMode;
  underlayMode: PlanUnderlayMode;
  notes: string[];
  risks: string[];
  planHash: string;
  switchConfig: string;
  vtepCapacity: number;
  /** The full planned settings (what POST would store): for the POST's plan_hash check and tests. */
  settings: FabricSettings;
}

const given = <T>(value: T | null | undefined): value is T => value !== undefined && value !== null;
const toSnake = (name: string) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
const toCamel = (name: string) => name.replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase());
/** A rule's message in the wire's words (`input.fabricSwitchNos` -> `fabric_switch_nos`). */
const wireWords = (message: string) => message.replace(/\binput\.([A-Za-z0-9]+)/g, (_m, name: string) => toSnake(name));

/** [first, last] address of a CIDR, as integers. */
function rangeOf(cidr: string): [number, number] {
  const [address, prefixLen] = ipaddr.IPv4.parseCIDR(cidr);
  const size = 2 ** (32 - prefixLen);
  const first = Math.floor(ipv4ToNumber(address.toString()) / size) * size;
  return [first, first + size - 1];
}
const inRange = (ip: string, cidr: string) => {
  const [first, last] = rangeOf(cidr);
  const n = ipv4ToNumber(ip);
  return n >= first && n <= last;
};
const overlaps = (a: string, b: string) => {
  const [a0, a1] = rangeOf(a);
  const [b0, b1] = rangeOf(b);
  return a0 <= b1 && b0 <= a1;
};
/** Hosts a subnet holds (network and broadcast excluded from /30 and wider). */
const hostsOf = (prefixLen: number) => (prefixLen >= 31 ? 2 ** (32 - prefixLen) : 2 ** (32 - prefixLen) - 2);

/** A renderer's refusal as the input field it came from (`management_cidr` -> input.managementCidr). */
function asInvalidInput(error: unknown): never {
  if (error instanceof RenderError) throw invalidInput(`input.${toCamel(error.field)}`, error.message.slice(error.field.length + 2));
  throw error;
}

/** Addresses the pool must hold: expected nodes, the listen headroom, the switch's loopback under OSPF. */
function vtepNeed(settings: FabricSettings): { need: number; headroom: number } {
  const limit = listenLimit({ expectedNodes: settings.expectedNodes, vtepPoolPrefixLen: DEFAULT_VTEP_PREFIX });
  return { need: limit + (settings.ospfEnabled ? 1 : 0), headroom: limit - settings.expectedNodes };
}

/**
 * The planner on a complete intent: fills what is unset, collects notes and risks, renders and
 * hashes. Deterministic, and idempotent on what it fills (planning its own output changes nothing),
 * which is what lets POST's plan_hash check recompute a reviewed plan.
 */
export function planFabric(intent: FabricSettings, stored: FabricSettings | null = null): FabricPlan {
  const planned: FabricSettings = { ...intent };
  const notes: string[] = [];
  const risks: string[] = [];

  if (planned.as === 0) {
    planned.as = DEFAULT_LOCAL_AS;
    notes.push(`local_as auto-picked: ${DEFAULT_LOCAL_AS}, from the private range 64512-65534 (RFC 6996); send local_as to use your own`);
  }

  const { need, headroom } = vtepNeed(planned);
  const sized = planned.expectedNodes > 0;
  if (planned.routerIdBase === '') {
    planned.routerIdBase = DEFAULT_VTEP_BASE;
    notes.push(`router_id_base defaulted to ${DEFAULT_VTEP_BASE}`);
  }
  if (planned.routerIdPrefixLen === 0) {
    let prefix = DEFAULT_VTEP_PREFIX;
    if (sized) {
      prefix = ROUTER_ID_PREFIX_MIN;
      for (let p = ROUTER_ID_PREFIX_MAX; p >= ROUTER_ID_PREFIX_MIN; p--) {
        if (vtepPoolCapacity(p) >= need) { prefix = p; break; }
      }
      notes.push(`VTEP pool auto-sized to /${prefix} (${vtepPoolCapacity(prefix)} usable): expected_nodes ${planned.expectedNodes} + ${headroom} headroom${planned.ospfEnabled ? ' + the switch loopback' : ''} = ${need}`);
    } else {
      notes.push(`expected_nodes unset: the VTEP pool defaulted to /${DEFAULT_VTEP_PREFIX} (${vtepPoolCapacity(DEFAULT_VTEP_PREFIX)} usable); send expected_nodes to size it`);
    }
    planned.routerIdPrefixLen = prefix;
  }
  const pool = vtepPoolCidr({ vtepPoolBase: planned.routerIdBase, vtepPoolPrefixLen: planned.routerIdPrefixLen });
  const vtepCapacity = vtepPoolCapacity(planned.routerIdPrefixLen);
  if (sized && vtepCapacity < need) {
    let fits = ROUTER_ID_PREFIX_MIN;
    for (let p = ROUTER_ID_PREFIX_MAX; p >= ROUTER_ID_PREFIX_MIN; p--) if (vtepPoolCapacity(p) >= need) { fits = p; break; }
    risks.push(`VTEP pool ${pool} holds ${vtepCapacity} addresses, fewer than the ${need} needed (expected_nodes ${planned.expectedNodes} + ${headroom} headroom${planned.ospfEnabled ? ' + the switch loopback' : ''}): use router_id_prefix_len ${fits} or shorter`);
  }
  if (stored && stored.routerIdBase !== '' && stored.routerIdPrefixLen > 0 &&
    (stored.routerIdBase !== planned.routerIdBase || stored.routerIdPrefixLen !== planned.routerIdPrefixLen)) {
    risks.push(`this changes the stored VTEP pool ${stored.routerIdBase}/${stored.routerIdPrefixLen} to ${planned.routerIdBase}/${planned.routerIdPrefixLen}: POST answers 409 REQUIRES_SWITCH_RECONFIG_ACK with the switch's listen-range snippet; paste it on the switch, then re-POST with switch_acked`);
  }

  if (planned.fabricSwitchAs === 0) {
    planned.fabricSwitchAs = planned.as;
    notes.push(`fabric_switch_as suggested: ${planned.as}, the host AS: iBGP, so EVPN routes are reflected inside one AS with their next hops kept and the switch needs no per-host remote-as; send another AS for eBGP`);
  }

  const management = planned.managementCidr !== '' ? parseIPv4Cidr(planned.managementCidr) : null;
  if (planned.fabricSwitchPeeringIp === '') {
    if (planned.ospfEnabled) {
      const [, last] = rangeOf(pool);
      // The last usable: a /24 block's .255 is never usable (vtepPoolCapacity), so step back one.
      planned.fabricSwitchPeeringIp = numberToIpv4(planned.routerIdPrefixLen >= 31 ? last : last - 1);
      notes.push(`fabric_switch_peering_ip suggested: ${planned.fabricSwitchPeeringIp}, the VTEP pool's last usable address, for the switch's loopback (OSPF carries it; sessions run loopback to loopback); the VTEP allocator reserves it`);
    } else if (management) {
      const [first] = rangeOf(`${management.address}/${management.prefixLen}`);
      planned.fabricSwitchPeeringIp = numberToIpv4(management.prefixLen >= 31 ? first : first + 1);
      notes.push(`fabric_switch_peering_ip suggested: ${planned.fabricSwitchPeeringIp}, management_cidr's first usable address (the bgp underlay's session runs over the management subnet)`);
    }
  }

  const underlayMode: PlanUnderlayMode = planned.ospfEnabled ? 'ospf' : 'bgp';
  const deploymentMode: DeploymentMode = planned.externalRouteReflector ? 'dc' : 'cube';
  notes.push(deploymentMode === 'dc'
    ? 'deployment_mode dc: external_route_reflector is set, the fabric switch reflects EVPN routes between the nodes and a VR carries public traffic'
    : 'deployment_mode cube: the gateway node runs the software route reflector (external_route_reflector false; POST it true for DC mode); public_mtu is not used (no VR)');
  notes.push(underlayMode === 'ospf'
    ? 'underlay_mode ospf: OSPF carries the VTEP loopbacks; BGP EVPN runs loopback to loopback'
    : `underlay_mode bgp: one iBGP session per node over ${planned.managementCidr || 'management_cidr'} carries the loopback /32s (ipv4-unicast) and EVPN; no OSPF`);
  const vniSize = Math.max(VNI_BLOCK, Math.ceil(planned.expectedVms / VNI_BLOCK) * VNI_BLOCK);
  notes.push(`VNI range ${VNI_BASE}-${VNI_BASE + vniSize - 1} for tenant L2 networks (${vniSize} VNIs${planned.expectedVms > 0 ? `, for expected_vms ${planned.expectedVms}` : ''})`);
  if (planned.expectedVms === 0) notes.push('expected_vms unset: the VNI range is the minimum block');

  // Operator-actionable risks.
  if (planned.vxlanMtu < 1500 + VXLAN_OVERHEAD) {
    risks.push(`vxlan_mtu ${planned.vxlanMtu} is below ${1500 + VXLAN_OVERHEAD}: over a 1500-byte underlay VXLAN's ${VXLAN_OVERHEAD} bytes of overhead leave guests ${1500 - VXLAN_OVERHEAD}, not 1500; set the switch's host-facing ports and the nodes' NICs to at least ${planned.vxlanMtu + VXLAN_OVERHEAD} (switch_config says so) or use jumbo frames (vxlan_mtu 9000)`);
  }
  if (deploymentMode === 'dc' && planned.publicMtu > planned.vxlanMtu - VXLAN_OVERHEAD) {
    risks.push(`public_mtu ${planned.publicMtu} exceeds what the overlay carries (vxlan_mtu ${planned.vxlanMtu} - ${VXLAN_OVERHEAD}): lower public_mtu or raise vxlan_mtu`);
  }
  const ebgp = bgpModeOf(planned) === 'ebgp';
  if (ebgp && !planned.bgpPasswordSet) {
    risks.push('eBGP (fabric_switch_as differs from as) without a BGP password: set bgp_password so the sessions are TCP-MD5 protected');
  }
  if (planned.externalRouteReflector && !(EVPN_CAPABLE_NOS as readonly string[]).includes(planned.fabricSwitchNos)) {
    risks.push(`external_route_reflector needs a BGP-EVPN-capable switch (${EVPN_CAPABLE_NOS.join(', ')}); ${planned.fabricSwitchNos || 'an unset NOS'} gets only a vendor-neutral reference config`);
  }
  if (management) {
    const mgmt = `${management.address}/${management.prefixLen}`;
    if (overlaps(pool, mgmt)) risks.push(`the VTEP pool ${pool} overlaps management_cidr ${mgmt}: choose a router_id_base outside it`);
    if (planned.expectedNodes > hostsOf(management.prefixLen)) {
      risks.push(`management_cidr ${mgmt} has ${hostsOf(management.prefixLen)} host addresses, fewer than expected_nodes ${planned.expectedNodes}`);
    }
    if (!planned.ospfEnabled && planned.fabricSwitchPeeringIp !== '' && !inRange(planned.fabricSwitchPeeringIp, mgmt)) {
      risks.push(`under the bgp underlay the switch session runs over the management subnet, but fabric_switch_peering_ip ${planned.fabricSwitchPeeringIp} is outside management_cidr ${mgmt}`);
    }
  }
  if (planned.ospfEnabled && planned.ospfFabricInterface === '') {
    notes.push('ospf_fabric_interface unset: each compute node\'s underlay interface must be known (its underlay_iface) for OSPF to run on it');
  }
  if (planned.ospfEnabled && (planned.ospfAuthType === '' || planned.ospfAuthType === 'none')) {
    notes.push('OSPF runs without authentication (ospf_auth_type none): set message-digest and an ospf_auth_key on a shared underlay');
  }
  if (!planned.bfdEnabled) notes.push('BFD is off: a failed link is noticed by the BGP hold timer (seconds), not BFD (milliseconds)');
  // What POST would still refuse about this plan (the same rules, not a copy).
  try {
    checkFabricRules(planned, stored);
  } catch (error) {
    if (!(error instanceof AppError) || error.code !== 'INVALID_INPUT') throw error;
    risks.push(`POST fabric-config would refuse this plan: ${wireWords(error.message)}`);
  }

  const nos = (planned.fabricSwitchNos || 'other') as SwitchNos;
  let switchConfig: string;
  try {
    switchConfig = renderSwitchConfig(renderIntentOf(planned), nos);
  } catch (error) {
    asInvalidInput(error);
  }
  return {
    config: plannedConfigOf(planned),
    deploymentMode,
    underlayMode,
    notes,
    risks,
    planHash: planHashOf(planned, switchConfig),
    switchConfig,
    vtepCapacity,
    settings: planned,
  };
}

function plannedConfigOf(s: FabricSettings): PlannedConfig {
  return {
    advertiseAllVni: s.advertiseAllVni,
    as: s.as,
    bfdEnabled: s.bfdEnabled,
    bgpPassword: '',
    fabricSwitchAs: s.fabricSwitchAs,
    fabricSwitchName: s.fabricSwitchName,
    fabricSwitchNos: s.fabricSwitchNos,
    fabricSwitchPeeringIp: s.fabricSwitchPeeringIp,
    fabricSwitchRole: s.fabricSwitchRole,
    managementCidr: s.managementCidr,
    ospfArea: s.ospfArea,
    ospfAutoRefBw: s.ospfAutoRefBw,
    ospfDeadInterval: s.ospfDeadInterval,
    ospfEnabled: s.ospfEnabled,
    ospfFabricInterface: s.ospfFabricInterface,
    ospfHelloInterval: s.ospfHelloInterval,
    publicMtu: s.publicMtu,
    // A plan is not rolled out: what POST would leave it as (a new config starts pending its rollout).
    rolloutStatus: 'pending',
    routerIdBase: s.routerIdBase,
    routerIdPrefixLen: s.routerIdPrefixLen,
    vxlanMtu: s.vxlanMtu,
  };
}

/** JSON with every object's keys sorted: the same value always serialises to the same bytes. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/**
 * sha256 over the planned settings POST stores (frr_hmac_sha_capable left out: only the probe
 * writes it) and the rendered switch config. A secret is in it only as "is set".
 */
export function planHashOf(planned: FabricSettings, switchConfig: string): string {
  const { frrHmacShaCapable: _probe, ...stored } = planned;
  return createHash('sha256').update(canonical({ version: PLAN_HASH_VERSION, settings: stored, switchConfig })).digest('hex');
}

const p = (name: keyof FabricPlanInput) => `input.${name}`;

/**
 * The plan request checked and laid over the stored intent (or the defaults): the field checks are
 * validate.ts's (local_as is checked as `as` and named local_as), plus the plan's own: the
 * required fields, underlay_mode, the sizing hints in range (0 = unset), public_mtu in DC mode.
 */
export function planIntentOf(stored: FabricSettings | null, request: FabricPlanInput): FabricSettings {
  if (!given(request.fabricSwitchNos) || request.fabricSwitchNos === '') {
    throw invalidInput(p('fabricSwitchNos'), 'is required: sonic, cumulus, nxos, eos or other');
  }
  if (!given(request.managementCidr) || request.managementCidr === '') throw invalidInput(p('managementCidr'), 'is required, e.g. 192.168.111.0/24');
  if (!given(request.vxlanMtu)) throw invalidInput(p('vxlanMtu'), 'is required (1500 default, 9216 max)');
  if (given(request.underlayMode) && !(UNDERLAY_MODES as readonly string[]).includes(request.underlayMode)) {
    throw invalidInput(p('underlayMode'), 'must be one of "", ospf, bgp');
  }
  const input: FabricConfigInput = {
    fabricSwitchAs: request.fabricSwitchAs,
    fabricSwitchName: request.fabricSwitchName,
    fabricSwitchNos: request.fabricSwitchNos,
    fabricSwitchPeeringIp: request.fabricSwitchPeeringIp,
    fabricSwitchRole: request.fabricSwitchRole,
    managementCidr: request.managementCidr,
    publicMtu: request.publicMtu,
    routerIdBase: request.routerIdBase,
    routerIdPrefixLen: request.routerIdPrefixLen,
    vxlanMtu: request.vxlanMtu,
    expectedNodes: request.expectedNodes,
    expectedVms: request.expectedVms,
    ospfEnabled: request.underlayMode !== 'bgp',
    // 0 = "auto-pick" here, not a refusal: the field check sees only a real AS.
    as: given(request.localAs) && request.localAs !== 0 ? request.localAs : undefined,
  };
  try {
    checkFabricFields(input);
  } catch (error) {
    // The AS's rule is the stored `as`'s; the request calls it local_as.
    if (error instanceof AppError && (error.extensions.details as { field?: string } | undefined)?.field === 'input.as') {
      throw invalidInput(p('localAs'), error.message.slice('input.as: '.length));
    }
    throw error;
  }
  for (const name of ['expectedNodes', 'expectedVms'] as const) if (given(request[name])) checkSizingHint(name, request[name], true);
  // "0 / empty" in the request = the stored value (or the planner's pick): only real values replace.
  for (const key of ['fabricSwitchAs', 'routerIdPrefixLen', 'publicMtu', 'expectedNodes', 'expectedVms'] as const) {
    if (input[key] === 0) delete input[key];
  }
  for (const key of ['fabricSwitchPeeringIp', 'routerIdBase', 'fabricSwitchName', 'fabricSwitchRole'] as const) {
    if (input[key] === '') delete input[key];
  }
  const intent = applyFabricInput(stored ?? DEFAULT_SETTINGS, input);
  // The VTEP pool is what the body asks, as the seed documents it, stored config or not:
  // "router_id_base – empty => 10.255.0.0 default", "router_id_prefix_len – 0 => auto-size".
  // planFabric fills what is left '' / 0 (and says so when that changes a stored pool).
  intent.routerIdBase = input.routerIdBase ?? '';
  intent.routerIdPrefixLen = input.routerIdPrefixLen ?? 0;
  if (intent.externalRouteReflector && intent.publicMtu === 0) {
    throw invalidInput(p('publicMtu'), 'is required in DC mode (external_route_reflector is set: the VR\'s public side needs an MTU)');
  }
  return intent;
}

/** POST /controlnode/fabric-config/plan: any platform-scoped grant may plan (nothing is written). */
export async function planFabricConfig(ctx: Context, request: FabricPlanInput): Promise<FabricPlan> {
  decide(requirePrincipal(ctx), 'read', { type: 'platform' });
  const row = await ctx.prisma.fabricConfig.findUnique({ where: { id: 1 } });
  const stored = row ? settingsOf(row) : null;
  const plan = planFabric(planIntentOf(stored, request), stored);
  // The preflight's MTU consensus is cluster state, not intent: a risk here, a refusal on POST.
  try {
    await checkMtuDrift(ctx.prisma, plan.settings.vxlanMtu);
  } catch (error) {
    if (!(error instanceof AppError) || error.code !== 'INVALID_INPUT') throw error;
    plan.risks.push(`POST fabric-config would refuse this plan: ${wireWords(error.message)}`);
  }
  return plan;
}
