/**
 * A compute node's /etc/frr/frr.conf, rendered from the fabric intent: pure, deterministic (same
 * input, same bytes: the plan hash depends on it), no IO. Checked against real FRR 8.4 by
 * test/fabric-render.test.ts for every combination the plan can produce.
 */
import {
  bgpMode,
  hostPeeringRange,
  listenLimit,
  RenderError,
  type FabricIntent,
  type FabricNodeIntent,
  type FabricSecrets,
} from '../intent';

/** Peer groups: hosts on the route reflector, the reflector on a client, the switch on the gateway. */
export const HOSTS_PEER_GROUP = 'HOSTS';
const RR_PEER_GROUP = 'RR';
const SWITCH_PEER_GROUP = 'SWITCH';
export const OSPF_KEY_CHAIN = 'fabric-ospf';

/**
 * FRR's default profile retries a failed session only every 120 s with 60 s / 180 s timers;
 * `frr defaults datacenter` plus these explicit values keep a restarted peer's outage to seconds
 * even if a later FRR changes what "datacenter" means.
 */
export const BGP_KEEPALIVE = 3;
export const BGP_HOLD = 9;
export const BGP_CONNECT_RETRY = 10;

// Compiled once: names that end up as bare words in the file. Addresses are checked by node:net.
const NAME_TOKEN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

export function checkName(value: string, field: string): string {
  if (!NAME_TOKEN.test(value)) throw new RenderError(field, 'must be letters, digits, ".", "_" or "-" (at most 63)');
  return value;
}

/** A secret becomes one word on one line: whitespace or control characters would break the file open. */
export function checkSecret(value: string, field: string, maxLength: number): string {
  if (value.length === 0 || value.length > maxLength) throw new RenderError(field, `must be 1..${maxLength} characters`);
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c <= 0x20 || c >= 0x7f) throw new RenderError(field, 'must be printable ASCII without spaces');
  }
  return value;
}

/** FRR's `ip ospf message-digest-key` takes at most 16 characters; `neighbor password` at most 80. */
const MD5_KEY_MAX = 16;
const BGP_PASSWORD_MAX = 80;
const KEY_STRING_MAX = 80;

/** The gateway among the nodes, or a RenderError when the software route reflector has no home. */
export function findGateway(nodes: readonly FabricNodeIntent[]): FabricNodeIntent {
  let gateway: FabricNodeIntent | undefined;
  for (const node of nodes) {
    if (!node.isGateway) continue;
    if (gateway) throw new RenderError('nodes', 'more than one gateway node');
    gateway = node;
  }
  if (!gateway) throw new RenderError('nodes', 'no gateway node to host the route reflector');
  return gateway;
}

/** The address a node speaks BGP from: its VTEP loopback under OSPF, its underlay address under bgp. */
function bgpSource(intent: FabricIntent, node: FabricNodeIntent): string {
  return intent.underlay === 'bgp' ? node.underlayIp : node.vtepIp;
}

function ospfLines(out: string[], intent: FabricIntent, node: FabricNodeIntent, secrets: FabricSecrets): void {
  const ospf = intent.ospf;
  const fabricIf = checkName(node.underlayInterface || ospf.fabricInterface, 'ospf_fabric_interface');
  const vtepIf = checkName(intent.vtepInterface, 'vtep_interface');
  const area = checkName(ospf.area || '0.0.0.0', 'ospf_area');
  let key: string | undefined;
  if (ospf.authType !== 'none') {
    if (!secrets.ospfAuthKey) throw new RenderError('ospf_auth_key', `required by ospf_auth_type ${ospf.authType}`);
    key = checkSecret(secrets.ospfAuthKey, 'ospf_auth_key', ospf.authType === 'message-digest' ? MD5_KEY_MAX : KEY_STRING_MAX);
    if (!Number.isInteger(ospf.authKeyId) || ospf.authKeyId < 1 || ospf.authKeyId > 255) {
      throw new RenderError('ospf_auth_key_id', 'must be 1..255');
    }
  }
  if (ospf.authType === 'hmac-sha-256' && key) {
    // FRR >= 9.1 (PR 14398); 8.4 refuses the interface line, which the preflight probe relies on.
    out.push(`key chain ${OSPF_KEY_CHAIN}`, ` key ${ospf.authKeyId}`, `  key-string ${key}`,
      '  cryptographic-algorithm hmac-sha-256', ' exit', 'exit', '!');
  }
  out.push(`interface ${fabricIf}`, ` ip ospf area ${area}`,
    ` ip ospf hello-interval ${ospf.helloInterval}`, ` ip ospf dead-interval ${ospf.deadInterval}`);
  if (intent.bfdEnabled) out.push(' ip ospf bfd');
  if (ospf.authType === 'message-digest' && key) {
    out.push(' ip ospf authentication message-digest', ` ip ospf message-digest-key ${ospf.authKeyId} md5 ${key}`);
  } else if (ospf.authType === 'hmac-sha-256') {
    out.push(` ip ospf authentication key-chain ${OSPF_KEY_CHAIN}`);
  }
  // The VTEP loopback is advertised but never forms an adjacency.
  out.push('exit', '!', `interface ${vtepIf}`, ` ip ospf area ${area}`, ' ip ospf passive', 'exit', '!');
  out.push('router ospf', ` ospf router-id ${node.vtepIp}`);
  if (ospf.autoRefBw > 0) out.push(` auto-cost reference-bandwidth ${ospf.autoRefBw}`);
  out.push('exit', '!');
}

function peerGroupLines(out: string[], group: string, remoteAs: number, source: string,
  multihop: boolean, intent: FabricIntent, password: string | undefined): void {
  out.push(` neighbor ${group} peer-group`, ` neighbor ${group} remote-as ${remoteAs}`,
    ` neighbor ${group} update-source ${source}`, ` neighbor ${group} timers connect ${BGP_CONNECT_RETRY}`);
  // Loopback-to-loopback eBGP is two hops away: the OSPF underlay routes the loopbacks.
  if (multihop) out.push(` neighbor ${group} ebgp-multihop 2`);
  if (intent.bfdEnabled) out.push(` neighbor ${group} bfd`);
  if (password) out.push(` neighbor ${group} password ${password}`);
}

/**
 * The frr.conf of one node. `gateway` is the node hosting the software route reflector; it is
 * required unless externalRouteReflector is true (the switch reflects then).
 */
export function renderHostFrr(intent: FabricIntent, node: FabricNodeIntent, secrets: FabricSecrets,
  gateway?: FabricNodeIntent): string {
  const hostname = checkName(node.hostname, 'hostname');
  const mode = bgpMode(intent);
  const password = secrets.bgpPassword ? checkSecret(secrets.bgpPassword, 'bgp_password', BGP_PASSWORD_MAX) : undefined;
  const source = bgpSource(intent, node);
  const isReflector = !intent.externalRouteReflector && node.isGateway;
  const switchAs = intent.switch.asn || intent.asn;
  const switchPeer = intent.switch.peeringIp;
  const ospfUnderlay = intent.underlay === 'ospf';

  const out: string[] = [
    `! frr.conf for ${hostname}: rendered from the fabric intent by the control plane; the next rollout replaces it`,
    'frr version 8.4',
    'frr defaults datacenter',
    `hostname ${hostname}`,
    'log syslog informational',
    'service integrated-vtysh-config',
    '!',
  ];
  if (ospfUnderlay) ospfLines(out, intent, node, secrets);

  out.push(`router bgp ${intent.asn}`, ` bgp router-id ${node.vtepIp}`, ' no bgp default ipv4-unicast');
  // FRR refuses to exchange eBGP routes without a policy unless told otherwise; the fabric has no policy.
  if (mode === 'ebgp') out.push(' no bgp ebgp-requires-policy');
  out.push(` timers bgp ${BGP_KEEPALIVE} ${BGP_HOLD}`);

  // [peer group, ebgp towards it, route-reflector client]
  const groups: Array<{ name: string; ebgp: boolean; client: boolean }> = [];
  if (isReflector) {
    peerGroupLines(out, HOSTS_PEER_GROUP, intent.asn, source, false, intent, password);
    out.push(` bgp listen range ${hostPeeringRange(intent)} peer-group ${HOSTS_PEER_GROUP}`,
      ` bgp listen limit ${listenLimit(intent)}`);
    groups.push({ name: HOSTS_PEER_GROUP, ebgp: false, client: true });
    if (switchPeer) {
      const ebgp = mode === 'ebgp';
      peerGroupLines(out, SWITCH_PEER_GROUP, switchAs, source, ebgp && ospfUnderlay, intent, password);
      out.push(` neighbor ${switchPeer} peer-group ${SWITCH_PEER_GROUP}`);
      groups.push({ name: SWITCH_PEER_GROUP, ebgp, client: !ebgp });
    }
  } else {
    let reflector: string;
    let remoteAs: number;
    if (intent.externalRouteReflector) {
      if (!switchPeer) throw new RenderError('fabric_switch_peering_ip', 'required by external_route_reflector');
      reflector = switchPeer;
      remoteAs = switchAs;
    } else {
      if (!gateway) throw new RenderError('nodes', 'no gateway node to host the route reflector');
      reflector = bgpSource(intent, gateway);
      remoteAs = intent.asn;
    }
    const ebgp = remoteAs !== intent.asn;
    peerGroupLines(out, RR_PEER_GROUP, remoteAs, source, ebgp && ospfUnderlay, intent, password);
    out.push(` neighbor ${reflector} peer-group ${RR_PEER_GROUP}`);
    groups.push({ name: RR_PEER_GROUP, ebgp, client: false });
  }

  if (!ospfUnderlay) {
    // The bgp underlay: the same session carries every VTEP loopback /32 next to EVPN.
    out.push(' !', ' address-family ipv4 unicast', `  network ${node.vtepIp}/32`);
    afNeighbourLines(out, groups);
    out.push(' exit-address-family');
  }
  out.push(' !', ' address-family l2vpn evpn');
  afNeighbourLines(out, groups);
  if (intent.advertiseAllVni) out.push('  advertise-all-vni');
  out.push(' exit-address-family', 'exit', '!', 'end', '');
  return out.join('\n');
}

function afNeighbourLines(out: string[], groups: ReadonlyArray<{ name: string; ebgp: boolean; client: boolean }>): void {
  for (const g of groups) {
    out.push(`  neighbor ${g.name} activate`);
    if (g.client) out.push(`  neighbor ${g.name} route-reflector-client`);
    // Every host shares one AS: routes of a sibling come back through the eBGP switch with our AS in the path.
    if (g.ebgp && g.name === RR_PEER_GROUP) out.push(`  neighbor ${g.name} allowas-in 1`);
  }
}

/** Every node's frr.conf, keyed by hostname in input order; the gateway is looked up once. */
export function renderAllHostFrr(intent: FabricIntent, nodes: readonly FabricNodeIntent[],
  secrets: FabricSecrets): Map<string, string> {
  const gateway = intent.externalRouteReflector ? undefined : findGateway(nodes);
  const out = new Map<string, string>();
  for (const node of nodes) out.set(node.hostname, renderHostFrr(intent, node, secrets, gateway));
  return out;
}

/**
 * The capability probe's snippet (issue item 7): an interface using an hmac-sha-256 key chain.
 * FRR >= 9.1 accepts it under `vtysh -C`; 8.4 refuses the interface line.
 */
export function hmacProbeSnippet(interfaceName = 'lo'): string {
  const ifName = checkName(interfaceName, 'interface');
  return [`key chain ${OSPF_KEY_CHAIN}-probe`, ' key 1', '  key-string probe', '  cryptographic-algorithm hmac-sha-256',
    ' exit', 'exit', `interface ${ifName}`, ` ip ospf authentication key-chain ${OSPF_KEY_CHAIN}-probe`, 'exit', ''].join('\n');
}
