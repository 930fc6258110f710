import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';
import { invalidInput } from '../../errors';

/**
 * Where a BMC may be (issue 21 item 6). The service's agent connects to every BMC address it is
 * given, from inside the control plane's network: an address is checked before anything is
 * written, so a BMC address is no way to reach (or map) what the service itself can reach.
 *
 * - A site's bmcNetworks (CIDRs), else the service-wide BMC_NETWORKS: the BMC's address must be in
 *   one of them. A host name is refused then: what a name resolves to when the agent connects
 *   (every command, for months) is not what it resolved to at enroll, so a name could never be
 *   held to the networks; an operator who lists networks gets exactly those addresses.
 * - Nothing configured: any address but loopback, link-local, unspecified, multicast and broadcast
 *   (the service's own host and the link it sits on). A host name is resolved, and refused when it
 *   does not resolve or any of its addresses is one of those; list networks to rule names out.
 * The host is read the way the agent's URL parser reads it, so `127.1`, `0x7f000001` or
 * `[::ffff:127.0.0.1]` are the loopback address they connect to.
 */

/** What is refused when no network is configured: ipaddr.js's range names. */
const REFUSED_RANGES = new Set(['loopback', 'linkLocal', 'unspecified', 'multicast', 'broadcast']);

type Cidr = [ipaddr.IPv4 | ipaddr.IPv6, number];

/** Each entry checked as a CIDR and returned in its canonical form (the network's address / length); errors name `field[i]`. */
export function parseBmcNetworks(values: readonly string[], field: string): string[] {
  if (values.length > 64) throw invalidInput(field, 'at most 64 networks');
  return values.map((raw, i) => {
    const value = typeof raw === 'string' ? raw.trim() : '';
    let cidr: Cidr;
    try {
      if (!/^[0-9a-fA-F:.]+\/\d{1,3}$/.test(value)) throw new Error('not a CIDR');
      cidr = ipaddr.parseCIDR(value);
    } catch {
      throw invalidInput(`${field}[${i}]`, 'must be a network in CIDR notation (e.g. 10.20.0.0/16 or fd00:20::/48)');
    }
    const [address, length] = cidr;
    const network = address.kind() === 'ipv4'
      ? ipaddr.IPv4.networkAddressFromCIDR(value)
      : ipaddr.IPv6.networkAddressFromCIDR(value);
    return `${network.toString()}/${length}`;
  });
}

/** BMC_NETWORKS: comma-separated CIDRs; unset or empty: none. Throws at start for a bad entry. */
export function parseBmcNetworksEnv(raw: string | undefined): string[] {
  const list = (raw ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  try {
    return parseBmcNetworks(list, 'BMC_NETWORKS');
  } catch (e) {
    throw new Error(`BMC_NETWORKS must be comma-separated CIDRs (e.g. 10.20.0.0/16,fd00:20::/48): ${(e as Error).message}`);
  }
}

/**
 * The host a BMC address names, as the agent connects to it: an IP (canonical, an IPv4-mapped IPv6
 * address as its IPv4) or a lowercased host name. The address has passed enroll's syntax check.
 */
export function bmcTarget(address: string): { ip: ipaddr.IPv4 | ipaddr.IPv6 } | { name: string } {
  let host = address.trim();
  if (/^https?:\/\//i.test(host)) {
    host = new URL(host).hostname;
  } else {
    const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(host);
    if (bracketed) host = bracketed[1]!;
    else if (!isIP(host) && /^[^:]+:\d+$/.test(host)) host = host.slice(0, host.lastIndexOf(':'));
  }
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  if (!isIP(host)) {
    // The WHATWG URL parser (undici's, the agent's) reads 127.1, 2130706433 and 0x7f.1 as IPv4.
    try {
      const parsed = new URL(`http://${host}/`).hostname;
      if (isIP(parsed)) host = parsed;
    } catch {
      // not a URL host: left as a name, and refused as one below when it cannot be checked
    }
  }
  if (isIP(host)) return { ip: ipaddr.process(host) };
  return { name: host.toLowerCase().replace(/\.$/, '') };
}

function inNetworks(ip: ipaddr.IPv4 | ipaddr.IPv6, networks: readonly string[]): boolean {
  return networks.some((n) => {
    const [net, length] = ipaddr.parseCIDR(n);
    return net.kind() === ip.kind() && ip.match([net, length] as never);
  });
}

const refusedRange = (ip: ipaddr.IPv4 | ipaddr.IPv6): string | null => (REFUSED_RANGES.has(ip.range()) ? ip.range() : null);

const RANGE_WORDS: Record<string, string> = {
  loopback: 'a loopback address', linkLocal: 'a link-local address', unspecified: 'the unspecified address',
  multicast: 'a multicast address', broadcast: 'the broadcast address',
};

/**
 * Refuses a BMC address its site may not have (INVALID_INPUT naming `field`): outside the site's
 * bmcNetworks (else the service's), or, with none, one of the refused ranges. Never repeats the
 * address (the caller sent it).
 */
export async function checkBmcNetwork(
  address: string,
  siteNetworks: readonly string[] | null | undefined,
  serviceNetworks: readonly string[],
  field: string,
  resolve: (name: string) => Promise<string[]> = resolveAll,
): Promise<void> {
  const networks = siteNetworks && siteNetworks.length ? siteNetworks : serviceNetworks;
  const from = siteNetworks && siteNetworks.length ? 'its site\'s bmcNetworks' : 'BMC_NETWORKS';
  let target: ReturnType<typeof bmcTarget>;
  try {
    target = bmcTarget(address);
  } catch {
    throw invalidInput(field, 'is not an address whose network can be checked');
  }
  if (networks.length) {
    if ('name' in target) throw invalidInput(field, `must be an IP address in ${from}: a host name cannot be held to networks`);
    if (!inNetworks(target.ip, networks)) throw invalidInput(field, `is outside ${from}`);
    return;
  }
  if ('ip' in target) {
    const range = refusedRange(target.ip);
    if (range) throw invalidInput(field, `is ${RANGE_WORDS[range]}, which no BMC has (set the site's bmcNetworks or BMC_NETWORKS to allow a network)`);
    return;
  }
  if (target.name === 'localhost' || target.name.endsWith('.localhost')) throw invalidInput(field, 'names this service\'s own host, which no BMC is');
  let addresses: string[];
  try {
    addresses = await resolve(target.name);
  } catch {
    addresses = [];
  }
  if (addresses.length === 0) throw invalidInput(field, 'is a host name that does not resolve');
  for (const a of addresses) {
    if (!isIP(a)) continue;
    let range: string | null;
    try {
      range = refusedRange(ipaddr.process(a));
    } catch {
      range = 'unspecified';
    }
    if (range) throw invalidInput(field, `is a host name that resolves to ${RANGE_WORDS[range]}, which no BMC has`);
  }
}

async function resolveAll(name: string): Promise<string[]> {
  const found = await lookup(name, { all: true, verbatim: true });
  return found.map((f) => f.address);
}
