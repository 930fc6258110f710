import { isIP } from 'node:net';
import { BmcError } from '../driver';

/*
 * The IPMI driver's options (clients/bmc/ipmi.ts): the driver's own, and a node's driverOptions and
 * address, checked before anything is sent.
 */

export interface IpmiDriverOptions {
  /** The ipmitool binary (Debian package ipmitool); looked up on PATH by default. */
  ipmitoolPath?: string;
  /** Every ipmitool call is killed (BMC_TIMEOUT) after this long. */
  timeoutMs?: number;
  /** How often a power change is read back while it is not visible yet. */
  pollIntervalMs?: number;
  /** The read-back deadline when the call gives no verifyDeadlineMs. */
  verifyDeadlineMs?: number;
  /** ipmitool -N: seconds between retransmissions of an unanswered request. */
  retransmitSeconds?: number;
  /**
   * ipmitool -R: how many times ipmitool sends each request before it gives up (1 = once; ipmitool
   * reads 0 as its default of 4). Only for commands that do no harm twice: see REPEATABLE.
   */
  retries?: number;
}

/** How a BMC puts its 16 GUID bytes on the wire (see ipmiGuidToUuid). */
export type GuidEncoding = 'ipmi' | 'smbios';

/** The per-node driverOptions this driver reads, checked. */
export interface IpmiNodeOptions {
  cipherSuite: number;
  privilegeLevel: 'ADMINISTRATOR' | 'OPERATOR';
  guidEncoding: GuidEncoding | 'auto';
}

const DEFAULT_CIPHER_SUITE = 3;
/** IPMI 2.0 table 22-20 defines suites 0-14; errata and ipmitool add the SHA-256 ones up to 17. */
const MAX_CIPHER_SUITE = 17;
/** IPMI 2.0 RAKP carries at most 20 password bytes; ipmitool refuses longer ones itself. */
export const MAX_PASSWORD_BYTES = 20;

/**
 * A node setting this driver cannot work with, found before anything is sent: `field` is the
 * enroll input's name for it (bmc.address, bmc.driverOptions.cipherSuite, ...), so the enroll path
 * can turn it into INVALID_INPUT, and the driver's own check (for rows written before, or through
 * another path) says the same words in the run's lastError.
 */
export class IpmiConfigError extends BmcError {
  constructor(readonly field: string, readonly reason: string) {
    super('BMC_UNSUPPORTED', `${field}: ${reason}`);
    this.name = 'IpmiConfigError';
  }
}

/** Checks the node's driverOptions for this driver; unknown keys are left to other drivers. */
export function checkIpmiDriverOptions(options: Readonly<Record<string, unknown>> | null | undefined): IpmiNodeOptions {
  const o = options ?? {};
  let cipherSuite = DEFAULT_CIPHER_SUITE;
  if (o.cipherSuite !== undefined && o.cipherSuite !== null) {
    const cs = o.cipherSuite;
    if (cs === 0 || cs === '0') {
      throw new IpmiConfigError('bmc.driverOptions.cipherSuite', 'cipher suite 0 is refused: it authenticates nothing, so the BMC accepts any password. Use 3 (the default), or another suite the BMC supports');
    }
    if (typeof cs !== 'number' || !Number.isInteger(cs) || cs < 1 || cs > MAX_CIPHER_SUITE) {
      throw new IpmiConfigError('bmc.driverOptions.cipherSuite', `must be an integer from 1 to ${MAX_CIPHER_SUITE} (default ${DEFAULT_CIPHER_SUITE})`);
    }
    cipherSuite = cs;
  }
  let privilegeLevel: IpmiNodeOptions['privilegeLevel'] = 'ADMINISTRATOR';
  if (o.privilegeLevel !== undefined && o.privilegeLevel !== null) {
    const p = typeof o.privilegeLevel === 'string' ? o.privilegeLevel.toUpperCase() : '';
    // Chassis control needs OPERATOR; USER and CALLBACK could never power a machine.
    if (p !== 'ADMINISTRATOR' && p !== 'OPERATOR') throw new IpmiConfigError('bmc.driverOptions.privilegeLevel', 'must be ADMINISTRATOR or OPERATOR');
    privilegeLevel = p;
  }
  let guidEncoding: IpmiNodeOptions['guidEncoding'] = 'auto';
  if (o.guidEncoding !== undefined && o.guidEncoding !== null) {
    if (o.guidEncoding !== 'auto' && o.guidEncoding !== 'ipmi' && o.guidEncoding !== 'smbios') {
      throw new IpmiConfigError('bmc.driverOptions.guidEncoding', 'must be auto, ipmi or smbios');
    }
    guidEncoding = o.guidEncoding;
  }
  return { cipherSuite, privilegeLevel, guidEncoding };
}

const HOST_NAME = /^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/** host, IPv4, IPv6 or [IPv6], each optionally with :port (ipmi_sim and BMCs behind NAT use another port than 623). */
export function parseIpmiAddress(address: string): { host: string; port: number } {
  const value = address.trim();
  const bad = (why: string) => new IpmiConfigError('bmc.address', `the ipmi driver takes host[:port]; ${why}`);
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) throw bad('a URL is for Redfish drivers');
  const portOf = (p: string | undefined): number => {
    if (p === undefined) return 623;
    if (!/^\d{1,5}$/.test(p) || Number(p) < 1 || Number(p) > 65535) throw bad(`"${p}" is not a port`);
    return Number(p);
  };
  const bracketed = /^\[([^\]]+)\](?::([^:]*))?$/.exec(value);
  if (bracketed) {
    if (isIP(bracketed[1]!) !== 6) throw bad('the bracketed part is not an IPv6 address');
    return { host: bracketed[1]!, port: portOf(bracketed[2]) };
  }
  if (isIP(value) === 6) return { host: value, port: 623 };
  const [host, port, ...rest] = value.split(':');
  if (rest.length > 0 || !host || (!isIP(host) && !HOST_NAME.test(host))) throw bad(`"${value}" is not a host name or IP address`);
  return { host, port: portOf(port) };
}

/**
 * What enroll checks for a node any of whose bindings is `ipmi`: its address and driverOptions,
 * as IpmiConfigError naming the field, before anything is written.
 */
export function checkIpmiNode(address: string, options: Readonly<Record<string, unknown>> | null | undefined): void {
  parseIpmiAddress(address);
  checkIpmiDriverOptions(options);
}

export function positive(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0) throw new RangeError(`ipmiDriver: ${name} must be a positive number`);
  return value;
}
