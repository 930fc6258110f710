import { isIP } from 'node:net';
import type { ComputeNode } from './compute-nodes';
import { SWITCH_NOS, type FabricIntent, type FabricNodeIntent, type FabricSwitchIntent, type OspfAuthType, type SwitchNos } from './intent';
import type { FabricSettings } from './validate';

/**
 * The one mapping from the stored settings (validated by validate.ts) to the renderers' intent
 * (intent.ts). The plan, the ack gate's snippets, the preflight and the rollouts all render through
 * it, so what an operator reviewed is what a node receives.
 */

/** The host's VTEP loopback lives on a bridge: this kernel has no `dummy` device type. */
export const VTEP_INTERFACE = 'vtep0';
/** Datacenter OSPF timers when the operator left them 0 (FRR's own 10 s / 40 s are campus values). */
export const DEFAULT_OSPF_HELLO = 1;
export const DEFAULT_OSPF_DEAD = 4;

const ROLES: readonly FabricSwitchIntent['role'][] = ['spine', 'leaf', 'border-leaf', ''];

export interface RenderIntentOptions {
  /** The OSPF underlay subnet a preflight resolved; empty = the management subnet. */
  underlayCidr?: string;
  /** The switch's host-facing port or SVI, when known; empty renders a commented template. */
  hostFacingInterface?: string;
}

/**
 * Settings -> intent. The stored row has no underlay mode of its own: `ospf_enabled` true is the
 * OSPF underlay, false the seed's "bgp" underlay (one iBGP session over the management subnet
 * carrying the loopback /32s and EVPN). An unset NOS renders as the vendor-neutral `other`.
 */
export function renderIntentOf(settings: FabricSettings, opts: RenderIntentOptions = {}): FabricIntent {
  const nos: SwitchNos = (SWITCH_NOS as readonly string[]).includes(settings.fabricSwitchNos) ? (settings.fabricSwitchNos as SwitchNos) : 'other';
  const role = (ROLES as readonly string[]).includes(settings.fabricSwitchRole) ? (settings.fabricSwitchRole as FabricSwitchIntent['role']) : '';
  const hello = settings.ospfHelloInterval > 0 ? settings.ospfHelloInterval : DEFAULT_OSPF_HELLO;
  const dead = settings.ospfDeadInterval > 0 ? settings.ospfDeadInterval : Math.max(DEFAULT_OSPF_DEAD, hello * 4);
  return {
    asn: settings.as,
    underlay: settings.ospfEnabled ? 'ospf' : 'bgp',
    ospf: {
      area: settings.ospfArea || '0.0.0.0',
      helloInterval: hello,
      deadInterval: dead,
      autoRefBw: settings.ospfAutoRefBw,
      fabricInterface: settings.ospfFabricInterface,
      authType: (settings.ospfAuthType || 'none') as OspfAuthType,
      authKeyId: settings.ospfAuthKeyId,
    },
    bfdEnabled: settings.bfdEnabled,
    advertiseAllVni: settings.advertiseAllVni,
    bgpPasswordSet: settings.bgpPasswordSet,
    ospfAuthKeySet: settings.ospfAuthKeySet,
    vtepPoolBase: settings.routerIdBase,
    vtepPoolPrefixLen: settings.routerIdPrefixLen,
    managementCidr: settings.managementCidr,
    underlayCidr: opts.underlayCidr ?? '',
    vtepInterface: VTEP_INTERFACE,
    switch: {
      nos,
      name: settings.fabricSwitchName,
      role,
      peeringIp: settings.fabricSwitchPeeringIp,
      asn: settings.fabricSwitchAs,
      hostFacingInterface: opts.hostFacingInterface ?? '',
    },
    externalRouteReflector: settings.externalRouteReflector,
    expectedNodes: settings.expectedNodes,
    vxlanMtu: settings.vxlanMtu,
    publicMtu: settings.publicMtu,
  };
}

/** FRR's hostname: the FQDN's first label (what `hostname -s` prints); an address-only node gets node-A-B-C-D. */
export function hostnameOf(node: Pick<ComputeNode, 'fqdn' | 'nodeIp'>): string {
  if (node.fqdn && !isIP(node.fqdn)) return node.fqdn.split('.')[0]!;
  return `node-${node.nodeIp.replace(/[.:]/g, '-')}`;
}

/**
 * Compute nodes -> node intents. `vteps` maps a node id to its VTEP loopback (the VTEP pool's
 * allocation); `underlayIps` to the node's address on the underlay (a preflight's reuse match),
 * defaulting to its OS address, which is on the management subnet. A node with no VTEP is left
 * out: it cannot be rendered, and the caller reports it.
 */
export function nodeIntentsOf(nodes: readonly ComputeNode[], vteps: ReadonlyMap<string, string>,
  underlayIps: ReadonlyMap<string, string> = new Map()): FabricNodeIntent[] {
  const out: FabricNodeIntent[] = [];
  for (const node of nodes) {
    const vtepIp = vteps.get(node.nodeId);
    if (!vtepIp) continue;
    out.push({
      hostname: hostnameOf(node),
      vtepIp,
      underlayInterface: node.underlayIface,
      underlayIp: underlayIps.get(node.nodeId) ?? node.nodeIp,
      isGateway: node.isGateway,
    });
  }
  return out;
}
