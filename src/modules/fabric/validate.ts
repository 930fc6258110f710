import ipaddr from 'ipaddr.js';
import { invalidInput } from '../../errors';

/**
 * The fabric config's rules (issue 10 item 2, the seed's validate.go sentences), as plain
 * functions: intent in, the merged intent out or an INVALID_INPUT naming the field. Field paths
 * are the GraphQL input's (`input.fabricSwitchAs`); the REST routes rename them to the body's
 * snake_case (`body.fabric_switch_as`). No message repeats a secret's value.
 *
 * The checks come in three parts so that the plan (plan.ts) reuses them without the stored-row
 * rules: {@link checkFabricFields} (each given field alone), {@link applyFabricInput} (the input
 * onto an intent) and {@link checkFabricRules} (across fields, on the merged intent).
 * {@link checkSwitchAckFields} checks the POST's transient ack / plan_hash fields.
 *
 * MTU drift against the preflight's underlay consensus is preflight.ts's checkMtuDrift (it reads
 * the preflight's row); the write calls it on the merged intent.
 */

export const OSPF_AUTH_TYPES = ['', 'none', 'message-digest', 'hmac-sha-256'] as const;
export type OspfAuthType = (typeof OSPF_AUTH_TYPES)[number];
/** The NOSes whose BGP-EVPN route-reflector config we render (switch_templates). */
export const EVPN_CAPABLE_NOS = ['sonic', 'cumulus', 'nxos', 'eos'] as const;
/** `other` is the plan's vendor-neutral rendering: a switch we give no vendor syntax for. */
export const SWITCH_NOS = ['', ...EVPN_CAPABLE_NOS, 'other'] as const;
export const SWITCH_ROLES = ['', 'spine', 'leaf', 'border-leaf'] as const;
export const ROLLOUT_STATUSES = ['pending', 'rolling_out', 'ready', 'failed', 'degraded'] as const;
export type RolloutStatus = (typeof ROLLOUT_STATUSES)[number];

export const AS_MAX = 4294967295;
export const EXPECTED_NODES_MAX = 1000;
export const EXPECTED_VMS_MAX = 10000;
/** Jumbo frames on 100GbE top out at 9216 (the seed's plan: "9216 max"). */
export const MTU_MAX = 9216;
/** The IPv6 minimum link MTU: below it an underlay cannot carry the tenant traffic at all. */
export const MTU_MIN = 1280;
/** A VTEP pool narrower than /30 has no room for a second node; wider than /8 is a typo. */
export const ROUTER_ID_PREFIX_MIN = 8;
export const ROUTER_ID_PREFIX_MAX = 30;
/** Linux's TCP-MD5 key limit (TCP_MD5SIG_MAXKEYLEN), which is what bgpd hands the kernel. */
export const BGP_PASSWORD_MAX = 80;
/** FRR's `ip ospf message-digest-key KEYID md5 KEY` takes at most 16 characters. */
export const OSPF_MD5_KEY_MAX = 16;
/** A key-chain key-string for HMAC-SHA: FRR accepts longer keys; this bounds what a config line holds. */
export const OSPF_HMAC_KEY_MAX = 80;

/** The persisted intent, the secrets reduced to whether they are set. */
export interface FabricSettings {
  as: number;
  fabricSwitchAs: number;
  advertiseAllVni: boolean;
  bfdEnabled: boolean;
  externalRouteReflector: boolean;
  fabricSwitchName: string;
  fabricSwitchNos: string;
  fabricSwitchPeeringIp: string;
  fabricSwitchRole: string;
  managementCidr: string;
  routerIdBase: string;
  routerIdPrefixLen: number;
  ospfEnabled: boolean;
  ospfArea: string;
  ospfFabricInterface: string;
  ospfHelloInterval: number;
  ospfDeadInterval: number;
  ospfAutoRefBw: number;
  ospfAuthType: string;
  ospfAuthKeyId: number;
  expectedNodes: number;
  expectedVms: number;
  vxlanMtu: number;
  publicMtu: number;
  bgpPasswordSet: boolean;
  ospfAuthKeySet: boolean;
  /** Read-only to the API: only the preflight probe writes it. */
  frrHmacShaCapable: boolean | null;
}

/** What a caller may send (every field optional: a missing one keeps its stored value). */
export interface FabricConfigInput {
  as?: number | null;
  fabricSwitchAs?: number | null;
  advertiseAllVni?: boolean | null;
  bfdEnabled?: boolean | null;
  externalRouteReflector?: boolean | null;
  bgpPassword?: string | null;
  clearBgpPassword?: boolean | null;
  fabricSwitchName?: string | null;
  fabricSwitchNos?: string | null;
  fabricSwitchPeeringIp?: string | null;
  fabricSwitchRole?: string | null;
  managementCidr?: string | null;
  routerIdBase?: string | null;
  routerIdPrefixLen?: number | null;
  routerIdCidr?: string | null;
  ospfEnabled?: boolean | null;
  ospfArea?: string | null;
  ospfFabricInterface?: string | null;
  ospfHelloInterval?: number | null;
  ospfDeadInterval?: number | null;
  ospfAutoRefBw?: number | null;
  ospfAuthType?: string | null;
  ospfAuthKey?: string | null;
  ospfAuthKeyId?: number | null;
  clearOspfAuthKey?: boolean | null;
  expectedNodes?: number | null;
  expectedVms?: number | null;
  vxlanMtu?: number | null;
  publicMtu?: number | null;
}

/** What a new row starts from: the table's defaults (prisma/migrations/*_fabric_config). */
export const DEFAULT_SETTINGS: FabricSettings = {
  as: 0,
  fabricSwitchAs: 0,
  advertiseAllVni: true,
  bfdEnabled: false,
  externalRouteReflector: false,
  fabricSwitchName: '',
  fabricSwitchNos: '',
  fabricSwitchPeeringIp: '',
  fabricSwitchRole: '',
  managementCidr: '',
  routerIdBase: '',
  routerIdPrefixLen: 0,
  ospfEnabled: false,
  ospfArea: '0.0.0.0',
  ospfFabricInterface: '',
  ospfHelloInterval: 0,
  ospfDeadInterval: 0,
  ospfAutoRefBw: 0,
  ospfAuthType: '',
  ospfAuthKeyId: 1,
  expectedNodes: 0,
  expectedVms: 0,
  vxlanMtu: 1500,
  publicMtu: 0,
  bgpPasswordSet: false,
  ospfAuthKeySet: false,
  frrHmacShaCapable: null,
};

const f = (name: keyof FabricConfigInput) => `input.${name}`;

function integerIn(name: keyof FabricConfigInput, value: number, min: number, max: number, zeroIsUnset = false): void {
  if (!Number.isInteger(value)) throw invalidInput(f(name), 'must be an integer');
  if (zeroIsUnset && value === 0) return;
  if (value < min || value > max) throw invalidInput(f(name), `must be between ${min} and ${max}${zeroIsUnset ? ' (0 = unset)' : ''}`);
}

function oneOf(name: keyof FabricConfigInput, value: string, choices: readonly string[]): void {
  if (!choices.includes(value)) throw invalidInput(f(name), `must be one of ${choices.map((c) => (c === '' ? '""' : c)).join(', ')}`);
}

/** Strict dotted quad: ipaddr.js's own parse also takes `10.1`, `0x0a.0.0.1` and octal forms. */
export function isIPv4(value: string): boolean {
  return ipaddr.IPv4.isValidFourPartDecimal(value);
}

export function parseIPv4Cidr(value: string): { address: string; prefixLen: number } | null {
  if (!ipaddr.IPv4.isValidCIDRFourPartDecimal(value)) return null;
  const [address, prefixLen] = ipaddr.IPv4.parseCIDR(value);
  return { address: address.toString(), prefixLen };
}

function ipv4(name: keyof FabricConfigInput, value: string): void {
  if (value !== '' && !isIPv4(value)) throw invalidInput(f(name), 'must be an IPv4 address (A.B.C.D) or empty');
}

/** An OSPF area id as FRR takes it: a dotted quad or a decimal 0..4294967295. */
function ospfArea(value: string): void {
  const decimal = /^(0|[1-9][0-9]{0,9})$/.test(value) && Number(value) <= AS_MAX;
  if (!decimal && !isIPv4(value)) throw invalidInput(f('ospfArea'), 'must be an area id: A.B.C.D or a decimal 0..4294967295');
}

/** A Linux interface name (IFNAMSIZ 16, so 15 characters, no '/', ':' or whitespace). */
const IFNAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$/;
/** A hostname label sequence (RFC 1123), what a switch's name is. */
const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;
/** A secret goes into an FRR config line as one token: printable ASCII without whitespace. */
const CONFIG_TOKEN = /^[\x21-\x7e]+$/;

function secret(name: 'bgpPassword' | 'ospfAuthKey', value: string, max: number): void {
  if (!CONFIG_TOKEN.test(value)) throw invalidInput(f(name), 'must be printable ASCII without spaces (it is one token of an FRR config line)');
  if (value.length > max) throw invalidInput(f(name), `must be at most ${max} characters`);
}

const given = <T>(value: T | null | undefined): value is T => value !== undefined && value !== null;

/**
 * The stored intent (null when there is none) with the input applied and every rule checked;
 * `probed` is the latest preflight's FRR capability finding, which a new row starts with.
 * `router_id_cidr` is decoded into base and prefix length here; the secrets' values are checked
 * (the caller stores them), the result only says whether each will be set.
 */
export function mergeFabricInput(stored: FabricSettings | null, input: FabricConfigInput, probed: boolean | null = null): FabricSettings {
  checkFabricFields(input);
  // A new row starts from what a preflight already proved of FRR (`probed`), never from the input.
  const next = applyFabricInput(stored ?? { ...DEFAULT_SETTINGS, frrHmacShaCapable: probed }, input);
  checkFabricRules(next, stored);
  if (given(input.bgpPassword) && input.bgpPassword !== '') secret('bgpPassword', input.bgpPassword, BGP_PASSWORD_MAX);
  if (given(input.ospfAuthKey) && input.ospfAuthKey !== '') {
    secret('ospfAuthKey', input.ospfAuthKey, next.ospfAuthType === 'hmac-sha-256' ? OSPF_HMAC_KEY_MAX : OSPF_MD5_KEY_MAX);
  }
  return next;
}

/** Each given field on its own: type, range, syntax (IP library, not regexes, for addresses). */
export function checkFabricFields(input: FabricConfigInput): void {
  if (given(input.as)) integerIn('as', input.as, 1, AS_MAX);
  if (given(input.fabricSwitchAs)) integerIn('fabricSwitchAs', input.fabricSwitchAs, 1, AS_MAX, true);
  if (given(input.routerIdPrefixLen)) integerIn('routerIdPrefixLen', input.routerIdPrefixLen, ROUTER_ID_PREFIX_MIN, ROUTER_ID_PREFIX_MAX, true);
  if (given(input.ospfHelloInterval)) integerIn('ospfHelloInterval', input.ospfHelloInterval, 1, 65535, true);
  if (given(input.ospfDeadInterval)) integerIn('ospfDeadInterval', input.ospfDeadInterval, 1, 65535, true);
  // FRR's `auto-cost reference-bandwidth <1-4294967>` (Mbit/s).
  if (given(input.ospfAutoRefBw)) integerIn('ospfAutoRefBw', input.ospfAutoRefBw, 1, 4294967, true);
  // FRR's key ids are <1-255>.
  if (given(input.ospfAuthKeyId)) integerIn('ospfAuthKeyId', input.ospfAuthKeyId, 1, 255);
  if (given(input.expectedNodes) && !Number.isInteger(input.expectedNodes)) throw invalidInput(f('expectedNodes'), 'must be an integer');
  if (given(input.expectedVms) && !Number.isInteger(input.expectedVms)) throw invalidInput(f('expectedVms'), 'must be an integer');
  if (given(input.vxlanMtu)) integerIn('vxlanMtu', input.vxlanMtu, MTU_MIN, MTU_MAX);
  if (given(input.publicMtu)) integerIn('publicMtu', input.publicMtu, MTU_MIN, MTU_MAX, true);
  if (given(input.fabricSwitchNos)) oneOf('fabricSwitchNos', input.fabricSwitchNos, SWITCH_NOS);
  if (given(input.fabricSwitchRole)) oneOf('fabricSwitchRole', input.fabricSwitchRole, SWITCH_ROLES);
  if (given(input.ospfAuthType)) oneOf('ospfAuthType', input.ospfAuthType, OSPF_AUTH_TYPES);
  if (given(input.fabricSwitchPeeringIp)) ipv4('fabricSwitchPeeringIp', input.fabricSwitchPeeringIp);
  if (given(input.routerIdBase)) ipv4('routerIdBase', input.routerIdBase);
  if (given(input.managementCidr) && input.managementCidr !== '' && !parseIPv4Cidr(input.managementCidr)) {
    throw invalidInput(f('managementCidr'), 'must be an IPv4 CIDR (A.B.C.D/N) or empty');
  }
  if (given(input.ospfArea)) ospfArea(input.ospfArea);
  if (given(input.ospfFabricInterface) && input.ospfFabricInterface !== '' && !IFNAME.test(input.ospfFabricInterface)) {
    throw invalidInput(f('ospfFabricInterface'), 'must be a Linux interface name (at most 15 of A-Z a-z 0-9 _ . -)');
  }
  if (given(input.fabricSwitchName) && input.fabricSwitchName !== '' && !HOSTNAME.test(input.fabricSwitchName)) {
    throw invalidInput(f('fabricSwitchName'), 'must be a hostname (letters, digits, hyphens and dots) or empty');
  }
  if (input.clearBgpPassword && given(input.bgpPassword) && input.bgpPassword !== '') {
    throw invalidInput(f('clearBgpPassword'), 'cannot be true together with a new input.bgpPassword');
  }
  if (input.clearOspfAuthKey && given(input.ospfAuthKey) && input.ospfAuthKey !== '') {
    throw invalidInput(f('clearOspfAuthKey'), 'cannot be true together with a new input.ospfAuthKey');
  }
  // router_id_cidr is the one-field form of base + prefix length; both forms must agree.
  if (given(input.routerIdCidr) && input.routerIdCidr !== '') {
    const cidr = parseIPv4Cidr(input.routerIdCidr);
    if (!cidr) throw invalidInput(f('routerIdCidr'), 'must be an IPv4 CIDR (A.B.C.D/N)');
    if (cidr.prefixLen < ROUTER_ID_PREFIX_MIN || cidr.prefixLen > ROUTER_ID_PREFIX_MAX) {
      throw invalidInput(f('routerIdCidr'), `prefix length must be between ${ROUTER_ID_PREFIX_MIN} and ${ROUTER_ID_PREFIX_MAX}`);
    }
    if ((given(input.routerIdBase) && input.routerIdBase !== cidr.address) || (given(input.routerIdPrefixLen) && input.routerIdPrefixLen !== cidr.prefixLen)) {
      throw invalidInput(f('routerIdCidr'), 'disagrees with input.routerIdBase / input.routerIdPrefixLen: send one form');
    }
  }
}

/** The (field-checked) input onto `base`: given fields replace, secrets only say whether they will be set. */
export function applyFabricInput(base: FabricSettings, input: FabricConfigInput): FabricSettings {
  const next: FabricSettings = { ...base };
  if (given(input.routerIdCidr) && input.routerIdCidr !== '') {
    const cidr = parseIPv4Cidr(input.routerIdCidr)!;
    next.routerIdBase = cidr.address;
    next.routerIdPrefixLen = cidr.prefixLen;
  }

  // Apply the plain fields.
  const plain = [
    'as', 'fabricSwitchAs', 'advertiseAllVni', 'bfdEnabled', 'externalRouteReflector', 'fabricSwitchName', 'fabricSwitchNos',
    'fabricSwitchPeeringIp', 'fabricSwitchRole', 'managementCidr', 'routerIdBase', 'routerIdPrefixLen', 'ospfEnabled', 'ospfArea',
    'ospfFabricInterface', 'ospfHelloInterval', 'ospfDeadInterval', 'ospfAutoRefBw', 'ospfAuthType', 'ospfAuthKeyId',
    'expectedNodes', 'expectedVms', 'vxlanMtu', 'publicMtu',
  ] as const satisfies readonly (keyof FabricSettings & keyof FabricConfigInput)[];
  const target = next as unknown as Record<string, unknown>;
  for (const key of plain) if (given(input[key])) target[key] = input[key];
  // An empty secret means "unchanged" (the UI sends back what it never saw).
  if (input.clearBgpPassword) next.bgpPasswordSet = false;
  else if (given(input.bgpPassword) && input.bgpPassword !== '') next.bgpPasswordSet = true;
  if (input.clearOspfAuthKey) next.ospfAuthKeySet = false;
  else if (given(input.ospfAuthKey) && input.ospfAuthKey !== '') next.ospfAuthKeySet = true;
  return next;
}

/**
 * The rules across fields, on the merged intent (a change elsewhere cannot leave it broken).
 * `stored` is the row before the change (null for a new row): it decides the legacy exemption.
 */
export function checkFabricRules(next: FabricSettings, stored: FabricSettings | null): void {
  if (next.as === 0) throw invalidInput(f('as'), `is required (1..${AS_MAX})`);
  if ((next.routerIdBase === '') !== (next.routerIdPrefixLen === 0)) {
    throw invalidInput(next.routerIdBase === '' ? f('routerIdBase') : f('routerIdPrefixLen'),
      'router id base and prefix length go together: set both (or input.routerIdCidr) or neither');
  }
  if (next.ospfHelloInterval > 0 && next.ospfDeadInterval > 0 && next.ospfDeadInterval <= next.ospfHelloInterval) {
    throw invalidInput(f('ospfDeadInterval'), 'must be longer than input.ospfHelloInterval');
  }
  if (next.externalRouteReflector) {
    if (next.fabricSwitchPeeringIp === '') throw invalidInput(f('fabricSwitchPeeringIp'), 'is required when input.externalRouteReflector is true');
    if (next.fabricSwitchAs === 0) throw invalidInput(f('fabricSwitchAs'), 'is required when input.externalRouteReflector is true');
    if (!(EVPN_CAPABLE_NOS as readonly string[]).includes(next.fabricSwitchNos)) {
      throw invalidInput(f('fabricSwitchNos'), `must be a BGP-EVPN-capable NOS (${EVPN_CAPABLE_NOS.join(', ')}) when input.externalRouteReflector is true`);
    }
  }
  const authOn = next.ospfAuthType !== '' && next.ospfAuthType !== 'none';
  if (authOn) {
    // FRR OSPF authentication is per interface: there is no interface to put it on otherwise.
    if (next.ospfFabricInterface === '') throw invalidInput(f('ospfFabricInterface'), `is required when input.ospfAuthType is ${next.ospfAuthType}`);
    if (next.ospfAuthType === 'hmac-sha-256' && next.frrHmacShaCapable !== true) {
      throw invalidInput(f('ospfAuthType'), next.frrHmacShaCapable === false
        ? 'hmac-sha-256 is refused: the preflight probe found the nodes\' FRR cannot do it (needs FRR 9.1 or later)'
        : 'hmac-sha-256 is refused until the preflight FRR capability probe has proven it (never probed)');
    }
    if (!next.ospfAuthKeySet) throw invalidInput(f('ospfAuthKey'), `is required when input.ospfAuthType is ${next.ospfAuthType}`);
  }

  // Sizing hints: 0 = unset is accepted only from a row that predates them (both still 0), which
  // skips the check; every other row needs both in range.
  const legacy = stored !== null && stored.expectedNodes === 0 && stored.expectedVms === 0;
  for (const name of ['expectedNodes', 'expectedVms'] as const) {
    if (legacy && next[name] === 0) continue;
    checkSizingHint(name, next[name], false);
  }
}

/** A sizing hint's range (1..1000 nodes, 1..10000 VMs); `zeroIsUnset` lets 0 through (the plan's "unset"). */
export function checkSizingHint(name: 'expectedNodes' | 'expectedVms', value: number, zeroIsUnset: boolean): void {
  integerIn(name, value, 1, name === 'expectedNodes' ? EXPECTED_NODES_MAX : EXPECTED_VMS_MAX, zeroIsUnset);
}

/**
 * The POST's transient fields: the switch re-config ack (seed: switch_acked, switch_nos,
 * switch_snippet_hash, acked_by, skip_switch_ack) and the plan_hash the operator reviewed. Never
 * stored, except the ack's audit record (who, when, which NOS and hash).
 */
export interface FabricWriteControls {
  switchAcked?: boolean | null;
  switchNos?: string | null;
  switchSnippetHash?: string | null;
  ackedBy?: string | null;
  skipSwitchAck?: boolean | null;
  planHash?: string | null;
}

/** The NOSes a snippet is rendered for (intent.ts's SWITCH_NOS; `other` = vendor-neutral). */
export const SNIPPET_NOS = [...EVPN_CAPABLE_NOS, 'other'] as const;
/** An operator identity for the audit record: a name or an e-mail, not a document. */
export const ACKED_BY_MAX = 128;
const SHA256_HEX = /^[0-9a-f]{64}$/;
/** No control or format characters (an audit line must print as one line, as it was typed). */
const PRINTABLE_LINE = /^[^\p{Cc}\p{Cf}\p{Zl}\p{Zp}]+$/u;

const w = (name: keyof FabricWriteControls) => `input.${name}`;

export function checkSwitchAckFields(input: FabricWriteControls): void {
  if (given(input.switchNos) && input.switchNos !== '' && !(SNIPPET_NOS as readonly string[]).includes(input.switchNos)) {
    throw invalidInput(w('switchNos'), `must be one of ${SNIPPET_NOS.join(', ')} (empty = fabric_switch_nos)`);
  }
  for (const name of ['switchSnippetHash', 'planHash'] as const) {
    const value = input[name];
    if (given(value) && value !== '' && !SHA256_HEX.test(value)) throw invalidInput(w(name), 'must be a sha256 in lowercase hex (64 characters)');
  }
  if (given(input.ackedBy) && input.ackedBy !== '') {
    if (input.ackedBy.length > ACKED_BY_MAX) throw invalidInput(w('ackedBy'), `must be at most ${ACKED_BY_MAX} characters`);
    if (!PRINTABLE_LINE.test(input.ackedBy) || input.ackedBy.trim() === '') throw invalidInput(w('ackedBy'), 'must be a printable name on one line');
  }
  if (input.switchAcked && input.skipSwitchAck) throw invalidInput(w('skipSwitchAck'), 'cannot be true together with input.switchAcked: ack or skip');
  if (input.switchAcked) {
    if (!input.ackedBy) throw invalidInput(w('ackedBy'), 'is required when input.switchAcked is true (who re-configured the switch, for the audit record)');
    if (!input.switchSnippetHash) throw invalidInput(w('switchSnippetHash'), 'is required when input.switchAcked is true (the sha256 of the snippet that was applied)');
  }
}

/** ibgp when the switch shares the core AS (or has none of its own), ebgp otherwise. */
export function bgpModeOf(intent: Pick<FabricSettings, 'as' | 'fabricSwitchAs'>): 'ibgp' | 'ebgp' {
  return intent.fabricSwitchAs === 0 || intent.fabricSwitchAs === intent.as ? 'ibgp' : 'ebgp';
}

/** The stored status, an empty one (rows that predate the column) reading as ready. */
export function rolloutStatusOf(stored: string): RolloutStatus {
  return stored === '' ? 'ready' : (stored as RolloutStatus);
}
