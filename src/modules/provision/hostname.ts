/**
 * The installed system's host name when provision is not given one (seed 004: bmc_IP and vendor
 * are "(required)", hostname is not): the NetBox device's name for the BMC, else a name made from
 * the serial the BMC reports (`node-<serial>`). Which one a job used is recorded in its params as
 * `hostnameSource` (`request`, `netbox` or `bmc-serial`), and so in the job's metadata. Pure: no
 * lookups here.
 */

export type HostnameSource = 'request' | 'netbox' | 'bmc-serial';

const HOST = /^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;

/** One DNS label of `text`: lowercased, every run of other characters a hyphen, at most 63. */
function label(text: string, max = 63): string {
  return text.toLowerCase().replace(/[^a-z0-9]+/g, '-').slice(0, max).replace(/^-+|-+$/g, '');
}

/** A NetBox device name as a host name: as it is when it is one (lowercased), else made one; null when nothing is left. */
export function hostnameFromDeviceName(name: string | null | undefined): string | null {
  const lowered = (name ?? '').trim().toLowerCase();
  if (HOST.test(lowered)) return lowered;
  const dnsLabel = label(lowered);
  return dnsLabel === '' ? null : dnsLabel;
}

/** `node-<serial>` (a DNS label), or null for a serial with nothing usable in it. */
export function hostnameFromSerial(serial: string | null | undefined): string | null {
  const dnsLabel = label((serial ?? '').trim(), 63 - 'node-'.length);
  return dnsLabel === '' ? null : `node-${dnsLabel}`;
}

/** The serial the BMC reported (the out-of-band inventory enroll stores in node.inventory), or null. */
export function bmcSerialOf(inventory: unknown): string | null {
  const serial = (inventory as { outOfBand?: { serial?: unknown } } | null | undefined)?.outOfBand?.serial;
  return typeof serial === 'string' && serial.trim() !== '' ? serial.trim() : null;
}

/**
 * The host name an install uses: its params' (given, or defaulted when the job was recorded), else
 * (a new BMC's provision, whose serial was not known then) the one from the serial the BMC reported
 * since; null when there is none yet.
 */
export function installHostname(params: { hostname?: string | null }, inventory: unknown): string | null {
  return params.hostname || hostnameFromSerial(bmcSerialOf(inventory));
}
