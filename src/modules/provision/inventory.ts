import fs from 'node:fs/promises';
import { isIP } from 'node:net';
import type { Logger } from 'pino';
import ipaddr from 'ipaddr.js';
import { NetboxClient, NetboxError, type NetboxInventory } from '../../../clients/netbox/client';
import { AppError, invalidInput, notFound } from '../../errors';
import type { Config } from '../../config';

/**
 * The control-node inventory (seed: GET /controlnode/bmc/{bmc_ip}/disks and /gpus, "from NetBox
 * for UI selection"): the NetBox device whose BMC has that address, its disks, NICs and GPUs.
 *
 * Where each comes from in NetBox:
 * - NICs: the device's interfaces (the BMC's own interface is listed with mgmtOnly when NetBox
 *   marks it so; a UI offers the others for the OS).
 * - Disks and GPUs: inventory items and, since NetBox 4.3 gave module types profiles, modules.
 *   An inventory item is a disk or a GPU by its role (name or slug: disk, drive, ssd, hdd, nvme,
 *   storage; gpu, graphics, accelerator), or without a role by its name (nvme0n1, sda...). A
 *   module is one by its type's profile ("Hard disk", "GPU"), or before profiles by its bay's name
 *   or its type's model, the same words.
 *
 * Answers are kept for NETBOX_CACHE_MS per BMC address (and one lookup serves every request for
 * that address while it runs); failures are not kept.
 */

export interface InventoryDisk {
  name: string;
  model: string | null;
  serial: string | null;
  manufacturer: string | null;
  /** Gigabytes, from a module type's "size" attribute (NetBox 4.3+ profiles); null when NetBox does not say. */
  sizeGb: number | null;
  /** HDD, SSD, NVME... from the module type's "type" attribute, or null. */
  type: string | null;
  source: 'inventory-item' | 'module';
  netboxId: number;
}

export interface InventoryNic {
  name: string;
  label: string | null;
  macAddress: string | null;
  type: string | null;
  speedMbps: number | null;
  mgmtOnly: boolean;
  enabled: boolean;
  netboxId: number;
}

export interface InventoryGpu {
  name: string;
  model: string | null;
  serial: string | null;
  manufacturer: string | null;
  partId: string | null;
  memoryGb: number | null;
  source: 'inventory-item' | 'module';
  netboxId: number;
}

export interface ControlNodeInventory {
  bmcIp: string;
  deviceId: number;
  deviceName: string | null;
  serialNumber: string;
  /** The interface the BMC address is assigned to in NetBox. */
  bmcInterface: string | null;
  disks: InventoryDisk[];
  nics: InventoryNic[];
  gpus: InventoryGpu[];
  /** When NetBox answered this (a cached answer keeps its time). */
  fetchedAt: Date;
}

type Obj = Record<string, unknown>;

const DISK_WORDS = /\b(disk|disks|drive|drives|ssd|hdd|nvme|storage|hard[ -]?disk)\b/i;
const DISK_NAMES = /^(nvme\d+n\d+|sd[a-z]+|hd[a-z]+|vd[a-z]+|xvd[a-z]+)$/;
const GPU_WORDS = /\b(gpu|gpus|graphics|accelerator|accelerators)\b/i;

const text = (v: unknown): string | null => (typeof v === 'string' && v.trim() ? v.trim() : null);
const nameOf = (v: unknown): string | null => (v && typeof v === 'object' ? text((v as Obj).name) ?? text((v as Obj).display) : null);
const slugOf = (v: unknown): string | null => (v && typeof v === 'object' ? text((v as Obj).slug) : null);
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : typeof v === 'string' && v.trim() && Number.isFinite(Number(v)) ? Number(v) : null);

type Kind = 'disk' | 'gpu' | null;

function kindOfWords(...words: (string | null)[]): Kind {
  const all = words.filter((w): w is string => Boolean(w));
  if (all.some((w) => GPU_WORDS.test(w))) return 'gpu';
  if (all.some((w) => DISK_WORDS.test(w) || DISK_NAMES.test(w))) return 'disk';
  return null;
}

function itemKind(item: Obj): Kind {
  const role = item.role;
  if (role && typeof role === 'object') return kindOfWords(nameOf(role), slugOf(role));
  return kindOfWords(text(item.name), text(item.label));
}

function moduleKind(m: Obj, type: Obj | undefined): Kind {
  const profile = nameOf(type?.profile ?? (m.module_type as Obj | null)?.profile);
  if (profile) return kindOfWords(profile);
  return kindOfWords(nameOf(m.module_bay), text((m.module_type as Obj | null)?.model));
}

/** The module type's 4.3+ attributes (profile schema values), whichever object carries them. */
function attributesOf(m: Obj, type: Obj | undefined): Obj {
  const a = type?.attribute_data ?? type?.attributes ?? (m.module_type as Obj | null)?.attribute_data ?? (m.module_type as Obj | null)?.attributes;
  return a && typeof a === 'object' && !Array.isArray(a) ? (a as Obj) : {};
}

export function shapeInventory(bmcIp: string, inv: NetboxInventory, fetchedAt: Date): ControlNodeInventory {
  const disks: InventoryDisk[] = [];
  const gpus: InventoryGpu[] = [];
  for (const item of inv.inventoryItems) {
    const kind = itemKind(item);
    if (!kind) continue;
    const name = text(item.name) ?? `item ${String(item.id)}`;
    const base = { name, serial: text(item.serial), manufacturer: nameOf(item.manufacturer), source: 'inventory-item' as const, netboxId: Number(item.id) };
    if (kind === 'disk') disks.push({ ...base, model: text(item.part_id), sizeGb: null, type: null });
    else gpus.push({ ...base, model: text(item.part_id), partId: text(item.part_id), memoryGb: null });
  }
  for (const m of inv.modules) {
    const typeRef = m.module_type as Obj | null;
    const type = typeof typeRef?.id === 'number' ? inv.moduleTypes.get(typeRef.id) : undefined;
    const kind = moduleKind(m, type);
    if (!kind) continue;
    const attrs = attributesOf(m, type);
    const name = nameOf(m.module_bay) ?? `module ${String(m.id)}`;
    const model = text(typeRef?.model) ?? text(type?.model);
    const manufacturer = nameOf(typeRef?.manufacturer) ?? nameOf(type?.manufacturer);
    const base = { name, model, serial: text(m.serial), manufacturer, source: 'module' as const, netboxId: Number(m.id) };
    if (kind === 'disk') disks.push({ ...base, sizeGb: num(attrs.size), type: text(attrs.type) });
    else gpus.push({ ...base, partId: text(typeRef?.part_number) ?? text(type?.part_number), memoryGb: num(attrs.memory) });
  }
  const nics: InventoryNic[] = inv.interfaces.map((i) => {
    const primary = i.primary_mac_address as Obj | null | undefined;
    const speedKbps = num(i.speed);
    return {
      name: text(i.name) ?? `interface ${String(i.id)}`,
      label: text(i.label),
      macAddress: text(primary?.mac_address) ?? text(i.mac_address),
      type: i.type && typeof i.type === 'object' ? text((i.type as Obj).value) : text(i.type),
      speedMbps: speedKbps === null ? null : Math.round(speedKbps / 1000),
      mgmtOnly: i.mgmt_only === true,
      enabled: i.enabled !== false,
      netboxId: Number(i.id),
    };
  });
  return {
    bmcIp, deviceId: inv.device.id, deviceName: inv.device.name, serialNumber: inv.device.serial, bmcInterface: inv.device.bmcInterface,
    disks, nics, gpus, fetchedAt,
  };
}

/** A static address for the installer (preseed network static), and where NetBox keeps it. */
export interface StaticAddress { address: string; prefixLength: number; gateway: string; nameservers: string[]; netboxIpId: number; prefix: string; reused: boolean }

export class InventoryService {
  private readonly cache = new Map<string, { at: number; value: Promise<ControlNodeInventory> }>();
  private client: NetboxClient | null = null;
  private clientToken: string | null = null;

  constructor(private readonly config: Pick<Config, 'netboxUrl' | 'netboxToken' | 'netboxTokenFile' | 'netboxTimeoutMs' | 'netboxCacheMs'>, private readonly log: Logger) {}

  async close(): Promise<void> {
    await this.client?.close();
    this.client = null;
  }

  /** The inventory of the device whose BMC has this address (field: the input's name, for errors). */
  async forBmc(bmcIp: string, field = 'bmcIp'): Promise<ControlNodeInventory> {
    if (!isIP(bmcIp)) throw invalidInput(field, 'must be an IPv4 or IPv6 address (the BMC\'s, as NetBox records it)');
    const key = bmcIp.toLowerCase();
    const hit = this.cache.get(key);
    if (hit && Date.now() - hit.at < this.config.netboxCacheMs) return hit.value;
    const value = this.lookup(key);
    this.cache.set(key, { at: Date.now(), value });
    try {
      return await value;
    } catch (error) {
      if (this.cache.get(key)?.value === value) this.cache.delete(key);
      throw error;
    } finally {
      if (this.cache.size > 10_000) this.prune();
    }
  }

  private prune(): void {
    const now = Date.now();
    for (const [k, v] of this.cache) if (now - v.at >= this.config.netboxCacheMs) this.cache.delete(k);
  }

  private async lookup(bmcIp: string): Promise<ControlNodeInventory> {
    const client = await this.clientFor();
    try {
      const inv = await client.inventoryByBmcIp(bmcIp);
      if (!inv) throw notFound('NetBox device with BMC address', bmcIp);
      return shapeInventory(bmcIp, inv, new Date());
    } catch (error) {
      if (!(error instanceof NetboxError)) throw error;
      this.log.warn({ netbox: client.where, kind: error.kind, status: error.status, bmcIp }, 'NetBox lookup failed');
      throw this.mapped(error);
    }
  }

  /**
   * The installed system's static IPv4 address from NetBox's prefix `prefixId` (the provision
   * request's prefix_id): the address NetBox already holds for `hostname` in that prefix (its DNS
   * name: a retried job keeps its address), else the next available one, allocated by NetBox
   * itself (POST available-ips, under NetBox's own lock) as active with that DNS name. The gateway
   * is the prefix's `gateway` custom field, else its first host; the nameservers its `dns_servers`
   * custom field, else the gateway. `field` names the request's field in refusals.
   */
  async staticAddress(prefixId: number, hostname: string, description: string, field: string): Promise<StaticAddress> {
    const client = await this.clientFor();
    try {
      const prefix = await client.prefix(prefixId);
      if (!prefix) throw invalidInput(field, 'names no NetBox prefix');
      const [net, lenText] = prefix.prefix.split('/');
      const prefixLength = Number(lenText);
      if (!net || !ipaddr.IPv4.isValidFourPartDecimal(net) || !(prefixLength >= 8 && prefixLength <= 30)) {
        throw invalidInput(field, `names NetBox's prefix ${prefix.prefix}, which is not an IPv4 subnet of /8 to /30: the installer's static addressing is IPv4`);
      }
      const base = ipaddr.IPv4.parse(net);
      const inPrefix = (ip: string) => ipaddr.IPv4.isValidFourPartDecimal(ip) && ipaddr.IPv4.parse(ip).match(base, prefixLength);
      const custom = prefix.customFields;
      const hostOf = (v: unknown) => (typeof v === 'string' ? v : v && typeof v === 'object' && typeof (v as { address?: unknown }).address === 'string' ? (v as { address: string }).address : '').split('/')[0]!.trim();
      const firstHost = ipaddr.fromByteArray(ipaddr.IPv4.networkAddressFromCIDR(prefix.prefix).toByteArray().map((b, i) => (i === 3 ? b + 1 : b))).toString();
      const configured = hostOf(custom.gateway);
      const gateway = configured || firstHost;
      if (!inPrefix(gateway)) throw new AppError('INVALID_CONFIG', `NetBox's prefix ${prefixId} (${prefix.prefix}) has a gateway custom field outside it (${configured})`);
      const last = ipaddr.IPv4.broadcastAddressFromCIDR(prefix.prefix).toString();
      if (gateway === net || gateway === last) throw new AppError('INVALID_CONFIG', `NetBox's prefix ${prefixId} (${prefix.prefix}) has its network or broadcast address as gateway (${gateway})`);
      const listed = Array.isArray(custom.dns_servers) ? custom.dns_servers.map(hostOf) : typeof custom.dns_servers === 'string' ? custom.dns_servers.split(/[\s,]+/) : [];
      // Four-part decimal only (ipaddr.isValid takes 010.0.0.1 and 10.1, which resolvers read otherwise).
      const nameservers = listed.filter((x) => x && (ipaddr.IPv4.isValidFourPartDecimal(x) || (isIP(x) === 6))).map((x) => ipaddr.parse(x).toString()).slice(0, 3);
      // NetBox keeps DNS names lowercased.
      const dnsName = hostname.toLowerCase();
      const existing = (await client.addressesNamed(prefix.prefix, dnsName)).find((a) => inPrefix(a.address.split('/')[0]!));
      const ip = existing ?? await client.allocateIp(prefixId, { status: 'active', dns_name: dnsName, description: description.slice(0, 200) });
      const address = ip.address.split('/')[0]!;
      if (!inPrefix(address) || address === gateway) {
        if (!existing) await client.deleteIp(ip.id).catch(() => undefined);
        throw new AppError('INVALID_CONFIG', address === gateway
          ? `NetBox's prefix ${prefixId} (${prefix.prefix}) gave out ${address}, its gateway: set the prefix's gateway custom field, or record the gateway's address in NetBox`
          : `NetBox gave out ${ip.address}, outside its prefix ${prefix.prefix}`);
      }
      return { address, prefixLength, gateway, nameservers: nameservers.length ? nameservers : [gateway], netboxIpId: ip.id, prefix: prefix.prefix, reused: !!existing };
    } catch (error) {
      if (!(error instanceof NetboxError)) throw error;
      this.log.warn({ netbox: client.where, kind: error.kind, status: error.status, prefixId }, 'NetBox address allocation failed');
      if (error.kind === 'exhausted') throw new AppError('CONFLICT', `${error.message}: free an address or choose another prefix`, { field });
      // NetBox refused the request itself (400: its validation of the new address): the request's to fix.
      if (error.kind === 'status' && error.status === 400) throw invalidInput(field, `NetBox refused to allocate from that prefix: ${error.message}`);
      throw this.mapped(error);
    }
  }

  /** Releases an address staticAddress allocated and nothing used (a job that was never recorded). */
  async releaseAddress(netboxIpId: number): Promise<void> {
    // Never throws: it runs on a failure path, whose own error is the one to report.
    try {
      await (await this.clientFor()).deleteIp(netboxIpId);
    } catch (error) {
      this.log.warn({ err: error, netboxIpId }, 'an unused NetBox address could not be released');
    }
  }

  private mapped(error: NetboxError): AppError {
    if (error.kind === 'unauthorized') {
      // A token file may have been rotated: the next lookup reads it again.
      this.clientToken = null;
      return new AppError('INVALID_CONFIG', `${error.message}: check NETBOX_TOKEN / NETBOX_TOKEN_FILE`);
    }
    return new AppError('UPSTREAM_UNAVAILABLE', error.message, { upstream: 'netbox' });
  }

  private async clientFor(): Promise<NetboxClient> {
    const { netboxUrl, netboxToken, netboxTokenFile } = this.config;
    if (!netboxUrl) {
      throw new AppError('INVALID_CONFIG', 'NetBox is not configured: set NETBOX_URL and NETBOX_TOKEN (or NETBOX_TOKEN_FILE) for the control-node inventory');
    }
    let token = netboxToken ?? null;
    if (!token && netboxTokenFile) {
      if (this.client && this.clientToken) return this.client;
      token = await fs.readFile(netboxTokenFile, 'utf8').then((t) => t.split('\n')[0]!.trim(), () => null);
      if (!token) throw new AppError('INVALID_CONFIG', `NETBOX_TOKEN_FILE (${netboxTokenFile}) cannot be read or is empty`);
    }
    if (!token) throw new AppError('INVALID_CONFIG', 'NetBox has no token: set NETBOX_TOKEN or NETBOX_TOKEN_FILE');
    if (this.client && this.clientToken === token) return this.client;
    await this.client?.close();
    this.client = new NetboxClient({ url: netboxUrl, token, timeoutMs: this.config.netboxTimeoutMs, deadlineMs: this.config.netboxTimeoutMs * 3 });
    this.clientToken = token;
    return this.client;
  }
}
