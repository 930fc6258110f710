import { BmcError, type PowerState } from '../driver';
import type { GuidEncoding } from './options';

/* What ipmitool prints, read: the System GUID, power status, boot flags, and its errors. */

function hex(bytes: ArrayLike<number>, from: number, to: number): string {
  let s = '';
  for (let i = from; i < to; i++) s += bytes[i]!.toString(16).padStart(2, '0');
  return s;
}

function canonical(b: readonly number[]): string {
  return `${hex(b, 0, 4)}-${hex(b, 4, 6)}-${hex(b, 6, 8)}-${hex(b, 8, 10)}-${hex(b, 10, 16)}`;
}

/** An RFC 4122 UUID: variant bits 10, version 1 to 5 (what firmware generates; SMBIOS 2.6 says RFC 4122). */
function isRfc4122(b: readonly number[]): boolean {
  const version = b[6]! >> 4;
  return (b[8]! & 0xc0) === 0x80 && version >= 1 && version <= 5;
}

/**
 * The machine's UUID from the 16 bytes of Get System GUID (NetFn App, cmd 0x37; what `ipmitool mc
 * guid` sends), as the canonical lower-case string that SMBIOS-reading software prints: the OS
 * (/sys/class/dmi/id/product_uuid, dmidecode), the ramdisk's report and Redfish's UUID.
 *
 * Canonical order is u0..u15, as printed. SMBIOS 2.6+ stores u3 u2 u1 u0 u5 u4 u7 u6 u8..u15 (the
 * first three fields little-endian) and every reader swaps those back. The IPMI spec (2.0, section
 * 20.8, and Get System GUID) stores the whole GUID least-significant byte first, u15..u0: that is
 * `ipmi`. Many BMCs instead hand out the SMBIOS bytes unchanged: that is `smbios`. `auto` decodes
 * both ways and takes the one that is an RFC 4122 UUID when exactly one is; when both or neither
 * are, it follows the spec (`ipmi`) and says so in the note, and driverOptions.guidEncoding fixes
 * it for such a BMC. ipmitool's own `mc guid` output is not parsed: its decoding is a heuristic of
 * its own that changed between versions (1.8.18 printed the bytes as they came).
 *
 * All-zero and all-FF GUIDs are firmware placeholders that identify no machine: null.
 */
export function ipmiGuidToUuid(wire: readonly number[], encoding: GuidEncoding | 'auto' = 'auto'): { uuid: string | null; encoding: GuidEncoding; note: string | null } {
  if (wire.length !== 16 || wire.some((b) => !Number.isInteger(b) || b < 0 || b > 255)) {
    throw new BmcError('BMC_ERROR', `Get System GUID returned ${wire.length} bytes, not 16`);
  }
  if (wire.every((b) => b === 0) || wire.every((b) => b === 0xff)) {
    return { uuid: null, encoding: encoding === 'smbios' ? 'smbios' : 'ipmi', note: `the BMC reports a placeholder GUID (${hex(wire, 0, 16)}): no UUID` };
  }
  const asIpmi = [...wire].reverse();
  const w = wire;
  const asSmbios = [w[3]!, w[2]!, w[1]!, w[0]!, w[5]!, w[4]!, w[7]!, w[6]!, ...w.slice(8)];
  if (encoding === 'ipmi') return { uuid: canonical(asIpmi), encoding, note: null };
  if (encoding === 'smbios') return { uuid: canonical(asSmbios), encoding, note: null };
  const ipmiOk = isRfc4122(asIpmi);
  const smbiosOk = isRfc4122(asSmbios);
  if (ipmiOk && !smbiosOk) return { uuid: canonical(asIpmi), encoding: 'ipmi', note: 'GUID read in IPMI byte order (the spec\'s)' };
  if (smbiosOk && !ipmiOk) return { uuid: canonical(asSmbios), encoding: 'smbios', note: 'GUID read in SMBIOS byte order (the BMC sends the SMBIOS bytes as they are)' };
  return {
    uuid: canonical(asIpmi),
    encoding: 'ipmi',
    note: `GUID byte order is ambiguous (${ipmiOk ? 'both' : 'neither'} order gives an RFC 4122 UUID): read in IPMI byte order; set driverOptions.guidEncoding if the OS reports ${canonical(asSmbios)}`,
  };
}

/** The 16 bytes of `ipmitool raw 0x06 0x37` output (" a1 23 ... ef", possibly over several lines). */
export function parseRawBytes(stdout: string): number[] {
  const tokens = stdout.trim().split(/\s+/).filter(Boolean);
  if (tokens.length === 0 || tokens.some((t) => !/^[0-9a-f]{2}$/i.test(t))) throw new BmcError('BMC_ERROR', 'ipmitool raw printed something that is not hex bytes');
  return tokens.map((t) => parseInt(t, 16));
}

export function parsePowerStatus(stdout: string): PowerState {
  const m = /Chassis Power is (on|off)\b/i.exec(stdout);
  if (!m) throw new BmcError('BMC_ERROR', 'ipmitool power status printed no "Chassis Power is on|off"');
  return m[1]!.toLowerCase() as PowerState;
}

/** Boot flags (chassis boot option parameter 5, IPMI 2.0 table 28-14) from `chassis bootparam get 5`. */
export interface BootFlags {
  valid: boolean;
  persistent: boolean;
  efi: boolean;
  /** Boot device selector, bits 5:2 of data byte 2. */
  selector: number;
}

export function parseBootFlags(stdout: string): BootFlags {
  const m = /Boot parameter data:\s*([0-9a-f]+)/i.exec(stdout);
  if (!m || m[1]!.length < 4) throw new BmcError('BMC_ERROR', 'ipmitool chassis bootparam get 5 printed no boot parameter data');
  const b0 = parseInt(m[1]!.slice(0, 2), 16);
  const b1 = parseInt(m[1]!.slice(2, 4), 16);
  return { valid: (b0 & 0x80) !== 0, persistent: (b0 & 0x40) !== 0, efi: (b0 & 0x20) !== 0, selector: (b1 >> 2) & 0x0f };
}

/** Lines ipmitool -v prints on every call, noise in an error message. */
const NOISE = [/^Loading IANA PEN Registry/, /^Running Get VSO Capabilities/, /^Discovered IPMB address/, /^Invalid completion code received: Invalid command$/, /^RAW (REQ|RSP)\b/];

/** ipmitool's stderr for a message: without the -v chatter, without the password, short. */
function scrub(stderr: string, password: string): string {
  let lines = stderr.split('\n').map((l) => l.trim().replace(/^>\s*/, '')).filter((l) => l && !NOISE.some((n) => n.test(l)));
  if (password) lines = lines.map((l) => l.split(password).join('***'));
  const text = lines.join('; ');
  return text.length > 400 ? `${text.slice(0, 400)}...` : text || '(no output)';
}

/**
 * What a failed ipmitool run means. The RAKP messages come from the RMCP+ handshake (IPMI 2.0
 * section 13.31): status 0x0d "unauthorized name" for an unknown user, an invalid RAKP 2 HMAC for
 * a wrong password (the BMC's HMAC is keyed with the password we hold).
 */
export function classify(what: string, address: string, cipherSuite: number, stderr: string, password: string, repeatable: boolean): BmcError {
  const text = scrub(stderr, password);
  const has = (re: RegExp) => re.test(stderr);
  // Before the credentials: a BMC out of sessions says so in its RAKP or open-session answer.
  if (has(/insufficient resources|Node busy|Out of space|Command response could not be provided|Timeout while processing command|temporarily unavailable/i)) {
    return new BmcError('BMC_BUSY', `${what}: the BMC at ${address} is busy (${text})`, true);
  }
  if (has(/RAKP \d+ HMAC is invalid|unauthorized name|invalid (user ?name|password)|unauthorized role|invalid role|Insufficient privilege|privilege level (not authorized|exceeds)|RAKP \d+ message indicates an error/i)) {
    return new BmcError('BMC_AUTH_FAILED', `${what}: the BMC at ${address} refused the credentials (${text})`);
  }
  if (has(/invalid (authentication|integrity|confidentiality) algorithm|no matching cipher suite|cipher suite .*(not|un)supported/i)) {
    return new BmcError('BMC_UNSUPPORTED', `${what}: the BMC at ${address} does not support cipher suite ${cipherSuite} (bmc.driverOptions.cipherSuite): ${text}`);
  }
  // The session was made and the command sent, and no answer came back: it may have been applied.
  if (has(/Unable to set Chassis Power Control/i)) {
    return new BmcError('BMC_TIMEOUT', `${what}: sent, and the BMC at ${address} never answered${repeatable ? '' : '; whether it acted on it is unknown'} (${text})`, repeatable);
  }
  if (has(/does not support IPMI v2 \/ RMCP\+/i)) {
    return new BmcError('BMC_UNSUPPORTED', `${what}: the BMC at ${address} speaks only IPMI 1.5; the ipmi driver needs IPMI 2.0 (RMCP+, lanplus)`);
  }
  if (has(/Address lookup for .* failed|Could not open socket|Get Auth Capabilities error|Error issuing Get Channel Authentication Capabilities|No response from remote controller|Network is unreachable|Connection refused/i)) {
    return new BmcError('BMC_UNREACHABLE', `${what}: no IPMI answer from ${address} (${text})`, true);
  }
  if (has(/Invalid data field in request|Invalid command\b|Command not supported|Parameter not supported|Request data field length limit exceeded/i)) {
    return new BmcError('BMC_UNSUPPORTED', `${what}: the BMC at ${address} does not support it (${text})`);
  }
  return new BmcError('BMC_ERROR', `${what}: ipmitool failed against ${address} (${text})`);
}
