/**
 * The fabric switch's side of the fabric, per NOS, and the BGP listen-range snippet the VTEP-pool
 * ack gate shows (409 REQUIRES_SWITCH_RECONFIG_ACK). Pure and deterministic; never given a secret:
 * where a password or key belongs, a comment says which control-plane setting to copy.
 *
 * sonic and cumulus run FRR, so they get FRR's vtysh syntax (checked by real FRR in the tests);
 * Cumulus Linux 5 with NVUE rewrites frr.conf on `nv config apply`, which the header says.
 * nxos uses a peer template on a prefix neighbour (NX-OS's dynamic neighbours), eos a peer group
 * with `bgp listen range`, `other` a vendor-neutral description of the same intent.
 */
import { createHash } from 'node:crypto';
import {
  bgpMode,
  hostPeeringRange,
  listenLimit,
  parseCidr,
  type FabricIntent,
  type SwitchNos,
} from '../intent';
import { BGP_HOLD, BGP_KEEPALIVE, checkName, HOSTS_PEER_GROUP } from './host-frr';

/** NX-OS `maximum-peers` and EOS `dynamic peer max` stop at 1000. */
const VENDOR_PEER_MAX = 1000;

interface SwitchView {
  nos: SwitchNos;
  name: string;
  role: string;
  switchAs: number;
  hostAs: number;
  routerId: string;
  ebgp: boolean;
  /** The switch reflects EVPN between hosts (external RR, iBGP). */
  reflector: boolean;
  ospf: boolean;
  range: string;
  limit: number;
  intent: FabricIntent;
}

function view(intent: FabricIntent): SwitchView {
  const ebgp = bgpMode(intent) === 'ebgp';
  return {
    nos: intent.switch.nos,
    name: intent.switch.name ? checkName(intent.switch.name, 'fabric_switch_name') : '',
    role: intent.switch.role,
    switchAs: intent.switch.asn || intent.asn,
    hostAs: intent.asn,
    routerId: intent.switch.peeringIp,
    ebgp,
    reflector: intent.externalRouteReflector && !ebgp,
    ospf: intent.underlay === 'ospf',
    range: hostPeeringRange(intent),
    limit: listenLimit(intent),
    intent,
  };
}

function header(v: SwitchView, comment: string, howToApply: string, verify: string): string[] {
  const role = v.intent.externalRouteReflector
    ? (v.reflector ? 'route reflector for every host (iBGP)' : 'eBGP route server for every host')
    : 'BGP peer of the gateway node\'s software route reflector';
  return [
    `${comment} Fabric switch ${v.name || '(unnamed)'}${v.role ? ` (${v.role})` : ''}, NOS ${v.nos}: rendered by the control plane`,
    `${comment} Role: ${role}; host AS ${v.hostAs}, switch AS ${v.switchAs} (${v.ebgp ? 'ebgp' : 'ibgp'}), underlay ${v.intent.underlay}`,
    `${comment} Hosts connect from ${v.range}; MTU on host-facing ports at least ${v.intent.vxlanMtu + 50} (vxlan_mtu ${v.intent.vxlanMtu} + 50 bytes VXLAN overhead)`,
    `${comment} Apply: ${howToApply}`,
    `${comment} Verify: ${verify}`,
  ];
}

function secretReminders(v: SwitchView, comment: string, bgpLine: string, ospfLine: string | undefined): string[] {
  const out: string[] = [];
  if (v.intent.bgpPasswordSet) out.push(`${comment} BGP password: copy bgp_password from the control plane: ${bgpLine}`);
  if (v.ospf && v.intent.ospfAuthKeySet && ospfLine) out.push(`${comment} OSPF key: copy ospf_auth_key from the control plane: ${ospfLine}`);
  return out;
}

// ---- FRR (sonic, cumulus) ----

function frrOspf(v: SwitchView, out: string[]): void {
  const ospf = v.intent.ospf;
  const area = checkName(ospf.area || '0.0.0.0', 'ospf_area');
  const iface = v.intent.switch.hostFacingInterface;
  const body = [` ip ospf area ${area}`, ` ip ospf hello-interval ${ospf.helloInterval}`, ` ip ospf dead-interval ${ospf.deadInterval}`];
  if (v.intent.bfdEnabled) body.push(' ip ospf bfd');
  if (ospf.authType === 'message-digest') body.push(' ip ospf authentication message-digest');
  if (ospf.authType === 'hmac-sha-256') body.push(` ip ospf authentication key-chain fabric-ospf`);
  if (iface) {
    out.push(`interface ${checkName(iface, 'fabric_switch_host_interface')}`, ...body, 'exit', '!');
  } else {
    out.push('! interface <host-facing port or SVI>: set fabric_switch_host_interface to render this block', ...body.map((l) => `!${l}`), '!');
  }
  // FRR refuses `network` statements once any interface carries `ip ospf area`: interface form only.
  out.push('interface lo', ` ip ospf area ${area}`, ' ip ospf passive', 'exit', '!');
  out.push('router ospf', ` ospf router-id ${v.routerId}`);
  if (ospf.autoRefBw > 0) out.push(` auto-cost reference-bandwidth ${ospf.autoRefBw}`);
  out.push('exit', '!');
}

function frrConfig(v: SwitchView): string {
  const shell = v.nos === 'sonic' ? 'vtysh' : 'sudo vtysh';
  const apply = v.nos === 'sonic'
    ? 'paste into `vtysh` (configure terminal) with SONiC\'s FRR in split mode, then `write memory`'
    : 'paste into `sudo vtysh` (configure terminal), then `write memory`; with NVUE (Cumulus Linux 5) set the same through `nv set` or NVUE overwrites frr.conf';
  const out = header(v, '!', apply, `${shell} -c "show bgp peer-group ${HOSTS_PEER_GROUP}" and ${shell} -c "show bgp l2vpn evpn summary"`);
  const ospfKey = v.intent.ospf.authType === 'message-digest' ? `ip ospf message-digest-key ${v.intent.ospf.authKeyId} md5 <key>`
    : `key chain fabric-ospf / key ${v.intent.ospf.authKeyId} / key-string <key> / cryptographic-algorithm hmac-sha-256`;
  out.push(...secretReminders(v, '!', `neighbor ${HOSTS_PEER_GROUP} password <password>`, ospfKey), '!');
  if (v.ospf) frrOspf(v, out);
  out.push(`router bgp ${v.switchAs}`, ` bgp router-id ${v.routerId}`, ' no bgp default ipv4-unicast');
  if (v.ebgp) out.push(' no bgp ebgp-requires-policy');
  out.push(` timers bgp ${BGP_KEEPALIVE} ${BGP_HOLD}`,
    ` neighbor ${HOSTS_PEER_GROUP} peer-group`, ` neighbor ${HOSTS_PEER_GROUP} remote-as ${v.hostAs}`,
    ` neighbor ${HOSTS_PEER_GROUP} update-source ${v.routerId}`);
  if (v.ebgp && v.ospf) out.push(` neighbor ${HOSTS_PEER_GROUP} ebgp-multihop 2`);
  if (v.intent.bfdEnabled) out.push(` neighbor ${HOSTS_PEER_GROUP} bfd`);
  out.push(...frrListenLines(v.range, v.limit));
  const af = (name: string, extra: string[]): void => {
    out.push(' !', ` address-family ${name}`, `  neighbor ${HOSTS_PEER_GROUP} activate`, ...extra, ' exit-address-family');
  };
  if (!v.ospf) af('ipv4 unicast', v.reflector ? [`  neighbor ${HOSTS_PEER_GROUP} route-reflector-client`] : []);
  // Between eBGP hosts the switch must pass EVPN next hops through: they are the hosts' VTEPs.
  af('l2vpn evpn', v.reflector ? [`  neighbor ${HOSTS_PEER_GROUP} route-reflector-client`]
    : v.ebgp ? [`  neighbor ${HOSTS_PEER_GROUP} attribute-unchanged next-hop`] : []);
  out.push('exit', '!', 'end', '');
  return out.join('\n');
}

function frrListenLines(range: string, limit: number): string[] {
  return [` bgp listen range ${range} peer-group ${HOSTS_PEER_GROUP}`, ` bgp listen limit ${limit}`];
}

// ---- NX-OS ----

function nxosConfig(v: SwitchView): string {
  const out = header(v, '!', 'paste in configure terminal, then `copy running-config startup-config`',
    'show bgp l2vpn evpn summary; show running-config bgp');
  const ospf = v.intent.ospf;
  out.push(...secretReminders(v, '!', `template peer ${HOSTS_PEER_GROUP} / password 0 <password>`,
    ospf.authType === 'message-digest' ? `ip ospf message-digest-key ${ospf.authKeyId} md5 0 <key>` : `key chain fabric-ospf / key ${ospf.authKeyId} / key-string <key> / cryptographic-algorithm HMAC-SHA-256`), '!');
  out.push('feature bgp', 'feature nv overlay', 'nv overlay evpn');
  if (v.ospf) out.push('feature ospf');
  if (v.intent.bfdEnabled) out.push('feature bfd');
  out.push('!');
  if (v.ospf) {
    const area = checkName(ospf.area || '0.0.0.0', 'ospf_area');
    out.push('router ospf UNDERLAY', `  router-id ${v.routerId}`);
    if (ospf.autoRefBw > 0) out.push(`  auto-cost reference-bandwidth ${ospf.autoRefBw} Mbps`);
    out.push('!', 'interface loopback0', `  ip address ${v.routerId}/32`, `  ip router ospf UNDERLAY area ${area}`, '!');
    const body = [`  ip router ospf UNDERLAY area ${area}`, `  ip ospf hello-interval ${ospf.helloInterval}`, `  ip ospf dead-interval ${ospf.deadInterval}`];
    if (v.intent.bfdEnabled) body.push('  ip ospf bfd');
    if (ospf.authType === 'message-digest') body.push('  ip ospf authentication message-digest');
    if (ospf.authType === 'hmac-sha-256') body.push('  ip ospf authentication key-chain fabric-ospf');
    const iface = v.intent.switch.hostFacingInterface;
    if (iface) out.push(`interface ${checkName(iface, 'fabric_switch_host_interface')}`, ...body, '!');
    else out.push('! interface <host-facing port or SVI>: set fabric_switch_host_interface to render this block', ...body.map((l) => `!${l}`), '!');
  }
  if (v.ebgp) {
    out.push('route-map EVPN-NH-UNCHANGED permit 10', '  set ip next-hop unchanged', '!');
  }
  out.push(`router bgp ${v.switchAs}`, `  router-id ${v.routerId}`, `  timers bgp ${BGP_KEEPALIVE} ${BGP_HOLD}`);
  if (v.ebgp) out.push('  address-family l2vpn evpn', '    retain route-target all');
  out.push(`  template peer ${HOSTS_PEER_GROUP}`, `    remote-as ${v.hostAs}`);
  if (v.ospf) out.push('    update-source loopback0');
  if (v.ebgp && v.ospf) out.push('    ebgp-multihop 2');
  if (v.intent.bfdEnabled) out.push('    bfd');
  if (!v.ospf) {
    out.push('    address-family ipv4 unicast');
    if (v.reflector) out.push('      route-reflector-client');
  }
  out.push('    address-family l2vpn evpn', '      send-community', '      send-community extended');
  if (v.reflector) out.push('      route-reflector-client');
  if (v.ebgp) out.push('      route-map EVPN-NH-UNCHANGED out');
  out.push(...nxosNeighbourLines(v.range, v.limit), '');
  return out.join('\n');
}

function nxosNeighbourLines(range: string, limit: number): string[] {
  return [`  neighbor ${range}`, `    inherit peer ${HOSTS_PEER_GROUP}`, `    maximum-peers ${Math.min(limit, VENDOR_PEER_MAX)}`];
}

// ---- EOS ----

function eosConfig(v: SwitchView): string {
  const out = header(v, '!', 'paste in configure (multi-agent routing model), then `write memory`',
    'show bgp evpn summary; show running-config section router bgp');
  const ospf = v.intent.ospf;
  out.push(...secretReminders(v, '!', `neighbor ${HOSTS_PEER_GROUP} password 0 <password>`,
    ospf.authType === 'message-digest' ? `ip ospf message-digest-key ${ospf.authKeyId} md5 0 <key>` : 'hmac-sha-256: set the same key on the interface in the form your EOS release documents'), '!');
  out.push('service routing protocols model multi-agent', 'ip routing', '!');
  if (v.ospf) {
    const area = checkName(ospf.area || '0.0.0.0', 'ospf_area');
    out.push('interface Loopback0', `   ip address ${v.routerId}/32`, '!');
    const body = [`   ip ospf hello-interval ${ospf.helloInterval}`, `   ip ospf dead-interval ${ospf.deadInterval}`];
    if (v.intent.bfdEnabled) body.push('   ip ospf neighbor bfd');
    if (ospf.authType === 'message-digest') body.push('   ip ospf authentication message-digest');
    const iface = v.intent.switch.hostFacingInterface;
    if (iface) out.push(`interface ${checkName(iface, 'fabric_switch_host_interface')}`, ...body, '!');
    else out.push('! interface <host-facing port or SVI>: set fabric_switch_host_interface to render this block', ...body.map((l) => `!${l}`), '!');
    out.push('router ospf 1', `   router-id ${v.routerId}`);
    if (ospf.autoRefBw > 0) out.push(`   auto-cost reference-bandwidth ${ospf.autoRefBw}`);
    out.push(`   network ${parseCidr(v.intent.underlayCidr || v.intent.managementCidr, 'underlay_cidr')} area ${area}`,
      `   network ${v.routerId}/32 area ${area}`, '!');
  }
  out.push(`router bgp ${v.switchAs}`, `   router-id ${v.routerId}`, '   no bgp default ipv4-unicast',
    `   timers bgp ${BGP_KEEPALIVE} ${BGP_HOLD}`, `   neighbor ${HOSTS_PEER_GROUP} peer group`,
    `   neighbor ${HOSTS_PEER_GROUP} remote-as ${v.hostAs}`);
  if (v.ospf) out.push(`   neighbor ${HOSTS_PEER_GROUP} update-source Loopback0`);
  if (v.ebgp && v.ospf) out.push(`   neighbor ${HOSTS_PEER_GROUP} ebgp-multihop 2`);
  if (v.intent.bfdEnabled) out.push(`   neighbor ${HOSTS_PEER_GROUP} bfd`);
  if (v.reflector) out.push(`   neighbor ${HOSTS_PEER_GROUP} route-reflector-client`);
  out.push(`   neighbor ${HOSTS_PEER_GROUP} send-community extended`, ...eosListenLines(v.range, v.hostAs, v.limit), '   !',
    '   address-family evpn', `      neighbor ${HOSTS_PEER_GROUP} activate`);
  if (v.ebgp) out.push(`      neighbor ${HOSTS_PEER_GROUP} next-hop-unchanged`);
  if (!v.ospf) out.push('   !', '   address-family ipv4', `      neighbor ${HOSTS_PEER_GROUP} activate`);
  out.push('!', '');
  return out.join('\n');
}

function eosListenLines(range: string, hostAs: number, limit: number): string[] {
  return [`   bgp listen range ${range} peer-group ${HOSTS_PEER_GROUP} remote-as ${hostAs}`,
    `   dynamic peer max ${Math.min(limit, VENDOR_PEER_MAX)}`];
}

// ---- vendor-neutral ----

function otherConfig(v: SwitchView): string {
  const i = v.intent;
  const out = header(v, '#', 'translate each line into your NOS\'s syntax', `list the BGP sessions accepted from ${v.range} and their EVPN prefixes`);
  out.push(...secretReminders(v, '#', 'TCP-MD5 password on the host sessions', i.ospf.authType === 'none' ? undefined : `OSPF ${i.ospf.authType} key id ${i.ospf.authKeyId}`));
  out.push('#', `bgp.local_as: ${v.switchAs}`, `bgp.router_id: ${v.routerId}`, `bgp.peer_group: ${HOSTS_PEER_GROUP}`,
    `bgp.peer_group.remote_as: ${v.hostAs}`, `bgp.peer_group.session: ${v.ebgp ? 'ebgp' : 'ibgp'}`,
    `bgp.peer_group.update_source: ${v.ospf ? 'loopback' : 'management interface'}`,
    `bgp.peer_group.route_reflector_client: ${v.reflector}`,
    `bgp.peer_group.evpn_next_hop_unchanged: ${v.ebgp}`,
    `bgp.peer_group.ebgp_multihop: ${v.ebgp && v.ospf ? 2 : 'off'}`,
    `bgp.peer_group.bfd: ${i.bfdEnabled}`,
    `bgp.peer_group.address_families: ${v.ospf ? 'l2vpn-evpn' : 'ipv4-unicast, l2vpn-evpn'}`,
    `bgp.timers: keepalive ${BGP_KEEPALIVE}, hold ${BGP_HOLD}`,
    `bgp.dynamic_neighbors.listen_range: ${v.range}`, `bgp.dynamic_neighbors.limit: ${v.limit}`);
  if (v.ospf) {
    out.push(`ospf.router_id: ${v.routerId}`, `ospf.area: ${i.ospf.area || '0.0.0.0'}`,
      `ospf.networks: ${parseCidr(i.underlayCidr || i.managementCidr, 'underlay_cidr')}, ${v.routerId}/32`,
      `ospf.interface: ${i.switch.hostFacingInterface || '(host-facing port or SVI)'}`,
      `ospf.hello_interval: ${i.ospf.helloInterval}`, `ospf.dead_interval: ${i.ospf.deadInterval}`,
      `ospf.authentication: ${i.ospf.authType}`, `ospf.bfd: ${i.bfdEnabled}`);
    if (i.ospf.autoRefBw > 0) out.push(`ospf.auto_cost_reference_bandwidth_mbps: ${i.ospf.autoRefBw}`);
  }
  out.push(`mtu.host_facing_min: ${i.vxlanMtu + 50}`, '');
  return out.join('\n');
}

/** switch_config of the plan, for the requested NOS. */
export function renderSwitchConfig(intent: FabricIntent, nos: SwitchNos = intent.switch.nos): string {
  const v = view({ ...intent, switch: { ...intent.switch, nos } });
  switch (nos) {
    case 'sonic':
    case 'cumulus':
      return frrConfig(v);
    case 'nxos':
      return nxosConfig(v);
    case 'eos':
      return eosConfig(v);
    case 'other':
      return otherConfig(v);
  }
}

export interface ListenRangeSnippet {
  nos: SwitchNos;
  /** The lines to paste on the switch: remove the old range, add the new one. */
  snippet: string;
  /** The command whose output shows the new range in effect. */
  verifyCommand: string;
  /** sha256 (hex) of `snippet`: the re-POST echoes it as switch_snippet_hash. */
  sha256: string;
}

/**
 * The ack gate's per-NOS diff for a changed host peering range (the VTEP pool under OSPF). `before`
 * and `after` are the stored and the requested intent; the AS and limit come from `after`.
 */
export function renderListenRangeSnippet(before: FabricIntent, after: FabricIntent, nos: SwitchNos): ListenRangeSnippet {
  const oldRange = hostPeeringRange(before);
  const newRange = hostPeeringRange(after);
  const switchAs = after.switch.asn || after.asn;
  const limit = listenLimit(after);
  const same = oldRange === newRange;
  let lines: string[];
  let verifyCommand: string;
  switch (nos) {
    case 'sonic':
    case 'cumulus': {
      lines = [`router bgp ${switchAs}`];
      if (!same) lines.push(` no bgp listen range ${oldRange} peer-group ${HOSTS_PEER_GROUP}`);
      lines.push(...frrListenLines(newRange, limit), 'exit');
      verifyCommand = `${nos === 'sonic' ? 'vtysh' : 'sudo vtysh'} -c "show bgp peer-group ${HOSTS_PEER_GROUP}"`;
      break;
    }
    case 'nxos':
      lines = [`router bgp ${switchAs}`];
      if (!same) lines.push(`  no neighbor ${oldRange}`);
      lines.push(...nxosNeighbourLines(newRange, limit));
      verifyCommand = `show running-config bgp | include "neighbor ${newRange}"`;
      break;
    case 'eos':
      lines = [`router bgp ${switchAs}`];
      if (!same) lines.push(`   no bgp listen range ${oldRange} peer-group ${HOSTS_PEER_GROUP} remote-as ${after.asn}`);
      lines.push(...eosListenLines(newRange, after.asn, limit));
      verifyCommand = 'show running-config section router bgp';
      break;
    case 'other':
      lines = [`# dynamic BGP neighbours of peer group ${HOSTS_PEER_GROUP} (AS ${switchAs})`];
      if (!same) lines.push(`remove listen range: ${oldRange}`);
      lines.push(`add listen range: ${newRange} (remote AS ${after.asn})`, `dynamic neighbour limit: ${limit}`);
      verifyCommand = `list the BGP dynamic-neighbour ranges of peer group ${HOSTS_PEER_GROUP}: only ${newRange}`;
      break;
  }
  const snippet = lines.join('\n') + '\n';
  return { nos, snippet, verifyCommand, sha256: createHash('sha256').update(snippet).digest('hex') };
}

/** The 409 body's snippets: one per NOS, in SWITCH_NOS order. */
export function renderAllListenRangeSnippets(before: FabricIntent, after: FabricIntent): ListenRangeSnippet[] {
  const nosList: SwitchNos[] = ['sonic', 'cumulus', 'nxos', 'eos', 'other'];
  return nosList.map((nos) => renderListenRangeSnippet(before, after, nos));
}
