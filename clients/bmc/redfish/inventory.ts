/**
 * The out-of-band inventory of a Redfish system, read as real BMCs serve it (issue 20): only the
 * system itself must be readable. Every other part (processors, memory, NICs, storage) is read
 * where it can be; a part that answers 404, 500 or 501, times out, or serves an error body is
 * named in `unreadable` and the rest is kept. sushy-tools links a Memory that answers 404 and a
 * Storage that answers 500 (../shared/peers/README.md); trimmed real crawls do the same.
 *
 * What is taken, and from where:
 * - macs: the system's EthernetInterfaces only, never a manager's, and never the Redfish host
 *   interface the BMC lists among them (Links.HostInterface; Ids ToManager/ToHost, usb*, tmfifo*;
 *   an IPv4 address in 169.254.0.0/16): Lenovo XCC and Supermicro X13 list their `ToManager` NIC
 *   under the System (redfish-captures QUIRKS.md, "Manager EthernetInterfaces"). Any MAC spelling
 *   (Intel's hyphens, upper case) becomes lower-case colon form.
 * - uuid: lower case; all-zero, all-F, the SMBIOS placeholder 03000200-0400-0500-0006-000700080009
 *   and a MAC padded with zeros (00000000-0000-0000-0000-7cc25550a8ff) are not a machine's UUID.
 * - storage: the drives of every Storage member (each Drive link once; bays with no capacity, or
 *   Absent / UnavailableOffline, skipped) and the devices of SimpleStorage (AMI lists its NVMe only
 *   there: nvidia_viking DGX has an empty Storage collection); a SimpleStorage device is added when
 *   Storage gave no drives or its serial is new, and the BMC's own virtual media devices
 *   ("Virtual Cdrom Device", "Virtual HDisk Device") are not disks.
 */
import { BmcError, type OutOfBandInventory } from '../driver';
import { readSystem, type CallContext } from './call';
import type { Doc, RedfishClient } from './client';
import { isErrorBody, lastSegment, link, memberLinks, str } from './doc';

export interface UnreadablePart {
  /** What could not be read: Memory, Storage, Storage/1, Drive DRIVE0001, ... */
  part: string;
  /** HTTP 404, HTTP 500, timeout, error body, ... */
  reason: string;
}

export type RedfishInventory = OutOfBandInventory & { unreadable: UnreadablePart[] };

/** Firmware placeholder UUIDs that identify no machine (enroll refuses them as an operator's productUuid too). */
export const PLACEHOLDER_UUIDS: ReadonlySet<string> = new Set([
  '00000000-0000-0000-0000-000000000000',
  'ffffffff-ffff-ffff-ffff-ffffffffffff',
  '03000200-0400-0500-0006-000700080009',
]);

/** The machine's UUID as the BMC reports it, or null when it is a placeholder. */
export function machineUuid(v: unknown): { uuid: string | null; why: string | null } {
  const uuidText = str(v)?.toLowerCase() ?? null;
  if (!uuidText) return { uuid: null, why: null };
  const hex = uuidText.replace(/[{}-]/g, '');
  if (!/^[0-9a-f]{32}$/.test(hex)) return { uuid: null, why: 'the BMC reports a UUID that is not one: treated as unknown' };
  if (/^0+$/.test(hex)) return { uuid: null, why: 'the BMC reports an all-zero UUID: treated as unknown' };
  if (/^f+$/.test(hex) || PLACEHOLDER_UUIDS.has(uuidText)) return { uuid: null, why: 'the BMC reports a placeholder UUID: treated as unknown' };
  if (/^0{20}/.test(hex)) return { uuid: null, why: 'the BMC reports a UUID that is a MAC address padded with zeros: treated as unknown' };
  return { uuid: `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`, why: null };
}

/** A MAC in any spelling (aa:bb.., AA-BB-.., aabb.ccdd.eeff) as lower-case colon form; null if none. */
export function normaliseMac(v: unknown): string | null {
  const macText = str(v);
  if (!macText) return null;
  const hex = macText.toLowerCase().replace(/[:.\-]/g, '');
  if (!/^[0-9a-f]{12}$/.test(hex) || /^0{12}$/.test(hex) || /^f{12}$/.test(hex)) return null;
  return hex.match(/../g)!.join(':');
}

/** Why a system EthernetInterface is the BMC's host interface rather than a machine NIC, or null. */
export function hostInterfaceWhy(nic: Doc): string | null {
  const links = (nic.Links ?? {}) as Doc;
  if (links.HostInterface !== undefined && links.HostInterface !== null) return 'it links a HostInterface';
  const id = `${str(nic.Id) ?? ''} ${str(nic.Name) ?? ''}`;
  if (/\b(ToManager|ToHost)\b/i.test(id) || /\b(usb\d*|tmfifo\w*)\b/i.test(id)) return `it is named ${str(nic.Id) ?? str(nic.Name)}`;
  const v4 = Array.isArray(nic.IPv4Addresses) ? (nic.IPv4Addresses as Doc[]) : [];
  if (v4.some((a) => typeof a?.Address === 'string' && a.Address.startsWith('169.254.'))) return 'its address is link-local (169.254.0.0/16)';
  return null;
}

function gone(resource: Doc): boolean {
  const state = ((resource.Status ?? {}) as Doc).State;
  return state === 'Absent' || state === 'UnavailableOffline';
}

class Reader {
  readonly unreadable: UnreadablePart[] = [];
  constructor(private readonly client: RedfishClient) {}

  /** A resource, or null (named in unreadable) when the BMC does not serve it. Aborts and auth failures propagate. */
  async get(path: string, part: string): Promise<Doc | null> {
    try {
      const res = await this.client.request('GET', path, { repeatable: true, what: part });
      if (res.status !== 200) return this.miss(part, `HTTP ${res.status}`);
      if (isErrorBody(res.body)) return this.miss(part, 'an error body');
      return res.body;
    } catch (error) {
      if (this.client.signal?.aborted) throw error;
      if (error instanceof BmcError && (error.code === 'BMC_AUTH_FAILED' || error.code === 'BMC_TLS')) throw error;
      return this.miss(part, error instanceof BmcError && error.code === 'BMC_TIMEOUT' ? 'timeout' : 'no answer');
    }
  }

  private miss(part: string, reason: string): null {
    if (!this.unreadable.some((u) => u.part === part)) this.unreadable.push({ part, reason });
    return null;
  }

  /** The members of a linked collection that could be read, each once. */
  async members(l: unknown, part: string): Promise<{ path: string; doc: Doc }[]> {
    const coll = link(l);
    if (!coll) return [];
    const doc = await this.get(coll, part);
    if (!doc) return [];
    const out: { path: string; doc: Doc }[] = [];
    for (const memberPath of memberLinks(doc)) {
      const member = await this.get(memberPath, `${part}/${lastSegment(memberPath)}`);
      if (member) out.push({ path: memberPath, doc: member });
    }
    return out;
  }
}

/** Reads the inventory of a system whose document `sys` is already read. */
export async function readInventory(client: RedfishClient, sys: Doc, notes: string[]): Promise<RedfishInventory> {
  const reader = new Reader(client);
  const { uuid, why } = machineUuid(sys.UUID);
  if (why) notes.push(why);
  const inventory: RedfishInventory = {
    uuid, macs: [], cpus: null, memoryMiB: null, storage: null,
    manufacturer: str(sys.Manufacturer), model: str(sys.Model), serial: str(sys.SerialNumber), unreadable: reader.unreadable,
  };

  const macs = new Set<string>();
  for (const { doc: nic } of await reader.members(sys.EthernetInterfaces, 'EthernetInterfaces')) {
    const mac = normaliseMac(nic.PermanentMACAddress) ?? normaliseMac(nic.MACAddress);
    if (!mac) continue;
    const host = hostInterfaceWhy(nic);
    if (host) {
      notes.push(`NIC ${str(nic.Id) ?? mac} left out: the BMC's host interface (${host})`);
      continue;
    }
    macs.add(mac);
  }
  inventory.macs = [...macs];

  if (link(sys.Processors)) {
    const procs = await reader.members(sys.Processors, 'Processors');
    if (procs.length || !reader.unreadable.some((u) => u.part === 'Processors')) {
      inventory.cpus = procs.map((processor) => processor.doc)
        .filter((processor) => !gone(processor) && (processor.ProcessorType === undefined || processor.ProcessorType === 'CPU'))
        .map((processor) => ({ model: str(processor.Model) ?? 'unknown', cores: count(processor.TotalCores), threads: count(processor.TotalThreads ?? processor.TotalCores) }));
    }
  }

  const gib = ((sys.MemorySummary ?? {}) as Doc).TotalSystemMemoryGiB;
  if (typeof gib === 'number' && Number.isFinite(gib) && gib > 0) inventory.memoryMiB = Math.round(gib * 1024);
  else if (link(sys.Memory)) {
    const dimms = await reader.members(sys.Memory, 'Memory');
    const total = dimms.map((dimm) => dimm.doc).filter((dimm) => !gone(dimm)).reduce((sum, dimm) => sum + count(dimm.CapacityMiB), 0);
    if (total > 0) inventory.memoryMiB = total;
  }

  if (link(sys.Storage) || link(sys.SimpleStorage)) inventory.storage = await readDisks(reader, sys);
  return inventory;
}

function count(v: unknown): number {
  const value = Number(v ?? 0);
  return Number.isFinite(value) && value > 0 ? Math.floor(value) : 0;
}

async function readDisks(reader: Reader, sys: Doc): Promise<NonNullable<OutOfBandInventory['storage']>> {
  const disks: NonNullable<OutOfBandInventory['storage']> = [];
  const seenDrives = new Set<string>();
  const serials = new Set<string>();
  for (const { doc: storage } of await reader.members(sys.Storage, 'Storage')) {
    const drives = (Array.isArray(storage.Drives) ? storage.Drives : []) as unknown[];
    for (const drivePath of drives.map(link)) {
      if (!drivePath || seenDrives.has(drivePath)) continue;
      seenDrives.add(drivePath);
      const drive = await reader.get(drivePath, `Drive ${lastSegment(drivePath)}`);
      if (!drive || gone(drive)) continue;
      const size = count(drive.CapacityBytes);
      if (!size) continue;
      const serial = str(drive.SerialNumber);
      if (serial) serials.add(serial);
      disks.push({ name: str(drive.Name) ?? lastSegment(drivePath), sizeBytes: size, serial });
    }
  }
  const fromStorage = disks.length;
  for (const { doc: simpleStorage } of await reader.members(sys.SimpleStorage, 'SimpleStorage')) {
    for (const device of (Array.isArray(simpleStorage.Devices) ? simpleStorage.Devices : []) as Doc[]) {
      if (!device || typeof device !== 'object' || gone(device)) continue;
      const size = count(device.CapacityBytes);
      if (!size || /\bvirtual\b/i.test(`${str(device.Model) ?? ''} ${str(device.Name) ?? ''}`)) continue;
      const serial = str(device.SerialNumber);
      if (fromStorage && (!serial || serials.has(serial))) continue;
      if (serial) serials.add(serial);
      disks.push({ name: str(device.Name) ?? 'device', sizeBytes: size, serial });
    }
  }
  return disks;
}

/** The node's system's inventory within a driver call (its notes name the parts read without). */
export async function readSystemInventory(call: CallContext): Promise<RedfishInventory> {
  const inventory = await readInventory(call.client, (await readSystem(call)).doc, call.notes);
  if (inventory.unreadable.length) call.notes.push(`read without ${inventory.unreadable.map((part) => `${part.part} (${part.reason})`).join(', ')}`);
  return inventory;
}
