/**
 * enroll --file machines.csv|machines.yaml: enrolls many machines by their BMCs.
 *
 * The service enrolls one machine per call (enrollNode; POST /api/compute/metal/enroll), each in one
 * transaction of its own, with no idempotency key and no batch call: a file cannot be enrolled
 * atomically. "Nothing half-done" is therefore kept this way:
 *   1. every row is read and checked before any is sent: the fields (the same rules the service
 *      applies: driver, address, credentials, MACs, UUID, addresses, driverOptions), pools, sites and
 *      hardware profiles that exist, the site's BMC networks, duplicates inside the file, and MACs or
 *      BMC addresses the service already has. One bad row: every bad row is listed with its field
 *      errors and nothing is sent (exit 1).
 *   2. rows are then sent; each one is enrolled whole or not at all (the service's transaction). The
 *      first refusal stops the sending (--keep-going sends the rest); calls in flight finish.
 *   3. the CLI says exactly which rows were enrolled (with their node ids), which were refused (with
 *      the field), which were not sent, and which are unknown (the connection failed mid-call: the
 *      service may or may not have enrolled it). A re-run with --skip-existing leaves out rows whose
 *      BMC address is already a node of their pool, so the rest can be sent without duplicates.
 *
 * Columns (CSV header) or keys (YAML: a list of machines, or { machines: [...] }; nested bmc: {...}
 * also read): name, pool, site, bmc.address, bmc.driver, bmc.username, bmc.password,
 * bmc.credentialsRef (secret://...), macs (space, comma or semicolon separated in CSV), addresses,
 * productUuid, hardwareProfile, bmc.driverOptions (JSON in CSV). Spelling is loose: bmc_address,
 * BMC Address and bmcAddress are the same column. --pool gives the pool of rows that name none.
 */
import fs from 'node:fs';
import path from 'node:path';
import { BlockList, isIP } from 'node:net';
import { Option, type Command } from 'commander';
import { parse as parseCsv } from 'csv-parse/sync';
import { isMap, isSeq, LineCounter, parseDocument, type Node as YamlNode } from 'yaml';
import { EnrollDocument, HardwareProfilesDocument, MetalNodesDocument, PoolsDocument, SitesDocument, type MetalEnrollInput } from '../../sdk/src';
import { forEachLimited } from '../../concurrency';
import { cli, type Cli } from '../context';
import { oneLine, Refusal, UsageError } from '../errors';
import { isId, positiveInt, ref } from '../resolve';

const MAX_FILE = 16 * 1024 * 1024;
const MAX_ROWS = 20000;
const BMC_DRIVERS = ['redfish', 'ipmi', 'idrac', 'ilo', 'xcc', 'cimc', 'supermicro'];
const NO_MAC_REPORTING = new Set(['ipmi']);
const PLACEHOLDER_UUIDS = new Set(['00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '03000200-0400-0500-0006-000700080009']);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const MAC = /^([0-9a-f]{2})([:-]?)([0-9a-f]{2})\2([0-9a-f]{2})\2([0-9a-f]{2})\2([0-9a-f]{2})\2([0-9a-f]{2})$/i;
const HOST = /^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;
const CREDENTIAL_WORDS = ['pass', 'pwd', 'secret', 'token', 'cred', 'auth', 'login', 'user', 'community', 'psk', 'privatekey', 'privkey', 'apikey'];

/** Loose column names -> the row's fields. */
const COLUMNS: Record<string, string> = {
  name: 'name', hostname: 'name',
  pool: 'pool', poolid: 'pool',
  site: 'site', siteid: 'site',
  bmcaddress: 'address', bmcip: 'address', bmcurl: 'address', bmchost: 'address',
  bmcdriver: 'driver', driver: 'driver',
  bmcusername: 'username', bmcuser: 'username', bmccredentialsusername: 'username', username: 'username',
  bmcpassword: 'password', bmccredentialspassword: 'password', password: 'password',
  bmccredentialsref: 'ref', credentialsref: 'ref', bmccredentials: 'ref', bmcsecret: 'ref',
  macs: 'macs', mac: 'macs',
  addresses: 'addresses', address: 'addresses', ips: 'addresses',
  productuuid: 'productUuid', uuid: 'productUuid',
  hardwareprofile: 'hardwareProfile', profile: 'hardwareProfile',
  bmcdriveroptions: 'driverOptions', driveroptions: 'driverOptions',
};
const canonical = (key: string) => key.toLowerCase().replace(/[^a-z0-9]/g, '');

export interface FieldError { field: string; message: string }

export interface Row {
  /** 1-based position among the machines. */
  row: number;
  /** The file's line where the row starts. */
  line?: number;
  fields: Record<string, unknown>;
  errors: FieldError[];
}

interface Checked extends Row {
  input?: MetalEnrollInput;
  /** A node the service already has with this BMC address in this pool (--skip-existing). */
  existing?: string;
}

type Status = 'enrolled' | 'refused' | 'unknown' | 'not-sent' | 'skipped' | 'invalid';
interface Result { row: number; line?: number; name?: string; status: Status; nodeId?: string; code?: string; field?: string; message?: string; errors?: FieldError[] }

// ---- reading ---------------------------------------------------------------------------------

function flatten(value: Record<string, unknown>, prefix = '', into: Record<string, unknown> = {}): Record<string, unknown> {
  for (const [k, v] of Object.entries(value)) {
    const key = prefix ? `${prefix}.${k}` : k;
    const column = canonical(key);
    if (v && typeof v === 'object' && !Array.isArray(v) && COLUMNS[column] !== 'driverOptions') flatten(v as Record<string, unknown>, key, into);
    else into[key] = v;
  }
  return into;
}

/** A machine's raw keys -> fields; keys nobody knows are field errors. */
function toRow(record: Record<string, unknown>, row: number, line?: number): Row {
  const fields: Record<string, unknown> = {};
  const errors: FieldError[] = [];
  for (const [key, value] of Object.entries(flatten(record))) {
    const field = COLUMNS[canonical(key)];
    if (!field) {
      errors.push({ field: oneLine(key).slice(0, 60), message: 'is not a known column' });
      continue;
    }
    if (value === null || value === undefined || value === '') continue;
    if (field in fields) {
      errors.push({ field, message: 'is given twice (two spellings of one column)' });
      continue;
    }
    fields[field] = value;
  }
  return { row, line, fields, errors };
}

export function readMachines(file: string, text: string, format: 'csv' | 'yaml'): Row[] {
  if (format === 'csv') {
    let records: { record: Record<string, string>; info: { lines: number } }[];
    try {
      records = parseCsv(text, { columns: (h: string[]) => h.map((header) => header.trim()), bom: true, skip_empty_lines: true, trim: true, info: true, comment: '#' }) as never;
    } catch (e) {
      // The parser's message can quote the file (a password): only where and what kind.
      const err = e as { code?: string; lines?: number };
      throw new Refusal('INVALID_INPUT', `${path.basename(file)}: not valid CSV near line ${err.lines ?? '?'} (${err.code ?? 'parse error'}); nothing was sent`);
    }
    return records.map((r, i) => toRow(r.record, i + 1, r.info.lines));
  }
  const counter = new LineCounter();
  const doc = parseDocument(text, { lineCounter: counter, uniqueKeys: true, prettyErrors: false });
  if (doc.errors.length) {
    const err = doc.errors[0]!;
    const line = counter.linePos(err.pos[0]).line;
    throw new Refusal('INVALID_INPUT', `${path.basename(file)}: not valid YAML at line ${line} (${err.code}); nothing was sent`);
  }
  let seq: YamlNode | null = doc.contents as YamlNode | null;
  if (isMap(seq)) seq = (seq.get('machines', true) as YamlNode | undefined) ?? null;
  if (!isSeq(seq)) throw new Refusal('INVALID_INPUT', `${path.basename(file)}: a YAML list of machines (or machines: [...]) is needed; nothing was sent`);
  return seq.items.map((item, i) => {
    const line = (item as YamlNode).range ? counter.linePos((item as YamlNode).range![0]).line : undefined;
    const value = (item as YamlNode & { toJSON(): unknown }).toJSON();
    if (!value || typeof value !== 'object' || Array.isArray(value)) return { row: i + 1, line, fields: {}, errors: [{ field: '(row)', message: 'is not a mapping of columns' }] };
    return toRow(value as Record<string, unknown>, i + 1, line);
  });
}

// ---- checking --------------------------------------------------------------------------------

const text = (v: unknown) => (typeof v === 'string' ? v.trim() : typeof v === 'number' || typeof v === 'boolean' ? String(v) : undefined);
function list(v: unknown): string[] | null {
  if (Array.isArray(v)) return v.every((x) => typeof x === 'string' || typeof x === 'number') ? v.map((x) => String(x).trim()).filter(Boolean) : null;
  const s = text(v);
  return s === undefined ? null : s.split(/[\s,;|]+/).filter(Boolean);
}

/** host, IPv4, [IPv6], optionally :port, or an http(s) URL (the service's rule); normalized for comparing. */
function bmcAddress(value: string): { normalized: string; ip: string | null } | null {
  if (/^https?:\/\//i.test(value)) {
    try {
      const u = new URL(value);
      const host = u.hostname.replace(/^\[|\]$/g, '');
      return { normalized: u.toString().toLowerCase(), ip: isIP(host) ? host : null };
    } catch {
      return null;
    }
  }
  const bracketed = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(value);
  if (bracketed && isIP(bracketed[1]!) === 6) return { normalized: value.toLowerCase(), ip: bracketed[1]! };
  if (isIP(value)) return { normalized: value.toLowerCase(), ip: value };
  const [host, port, ...rest] = value.split(':');
  if (rest.length === 0 && HOST.test(host ?? '') && (port === undefined || (/^\d{1,5}$/.test(port) && Number(port) <= 65535))) {
    return { normalized: value.toLowerCase(), ip: isIP(host!) ? host! : null };
  }
  return null;
}

function machineMac(raw: string): string | { error: string } {
  const m = MAC.exec(raw.trim());
  if (!m) return { error: 'is not a MAC address' };
  const mac = [m[1], m[3], m[4], m[5], m[6], m[7]].join(':').toLowerCase();
  if (mac === 'ff:ff:ff:ff:ff:ff') return { error: 'is the broadcast address, which no NIC has' };
  if (mac === '00:00:00:00:00:00') return { error: 'is all zeros, which no NIC has' };
  if (parseInt(mac.slice(0, 2), 16) & 1) return { error: 'is a multicast address, which no NIC boots from' };
  return mac;
}

function looksLikeCredential(key: string): boolean {
  const k = key.toLowerCase().replace(/[_-]/g, '');
  return CREDENTIAL_WORDS.some((w) => k.includes(w)) || ['key', 'kg', 'pw'].some((e) => k.endsWith(e)) || ['kg', 'key'].some((b) => k.startsWith(b));
}

function driverOptions(v: unknown, errors: FieldError[]): Record<string, unknown> | undefined {
  let value = v;
  if (typeof v === 'string') {
    try {
      value = JSON.parse(v);
    } catch {
      errors.push({ field: 'bmc.driverOptions', message: 'is not JSON' });
      return undefined;
    }
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) {
    errors.push({ field: 'bmc.driverOptions', message: 'must be a JSON object' });
    return undefined;
  }
  const { caCert, ...others } = value as Record<string, unknown>;
  if (typeof caCert === 'string' && Buffer.byteLength(caCert) > 16384) errors.push({ field: 'bmc.driverOptions.caCert', message: 'must be at most 16 KiB' });
  if (Buffer.byteLength(JSON.stringify(typeof caCert === 'string' ? others : value)) > 1024) errors.push({ field: 'bmc.driverOptions', message: 'must be at most 1 KiB as JSON (a caCert string aside)' });
  const walk = (inner: unknown, at: string) => {
    if (!inner || typeof inner !== 'object') return;
    for (const [k, x] of Object.entries(inner)) {
      if (looksLikeCredential(k)) errors.push({ field: `${at}.${k}`, message: 'looks like a credential: credentials go in bmc.username/bmc.password or bmc.credentialsRef' });
      walk(x, `${at}.${k}`);
    }
  };
  walk(value, 'bmc.driverOptions');
  return value as Record<string, unknown>;
}

/** Everything a row can be checked for without the service. */
function checkFields(r: Row, defaultPool: string | undefined): { input: Omit<MetalEnrollInput, 'poolId'> & { pool?: string; site?: string }; address?: { normalized: string; ip: string | null }; macs: string[] } {
  const f = r.fields;
  const errors = r.errors;
  const name = text(f.name);
  const pool = text(f.pool) ?? defaultPool;
  if (!pool) errors.push({ field: 'pool', message: 'is required (a column, or --pool)' });
  const driver = text(f.driver)?.toLowerCase();
  if (!driver) errors.push({ field: 'bmc.driver', message: 'is required' });
  else if (!BMC_DRIVERS.includes(driver)) errors.push({ field: 'bmc.driver', message: `must be one of ${BMC_DRIVERS.join(', ')}` });
  const rawAddress = text(f.address);
  let address: ReturnType<typeof bmcAddress> = null;
  if (!rawAddress) errors.push({ field: 'bmc.address', message: 'is required' });
  else if (!(address = bmcAddress(rawAddress))) errors.push({ field: 'bmc.address', message: 'must be a host name, an IP literal (with an optional :port) or an http(s) URL' });

  const username = text(f.username);
  const password = text(f.password);
  const credentialsRef = text(f.ref);
  let credentials: MetalEnrollInput['bmc']['credentials'] = {};
  if (credentialsRef) {
    if (username || password) errors.push({ field: 'bmc.credentialsRef', message: 'give either a reference or a username and password, not both' });
    else if (!credentialsRef.startsWith('secret://')) errors.push({ field: 'bmc.credentialsRef', message: 'must be a secret:// reference' });
    credentials = { ref: credentialsRef };
  } else if (!username || !password) {
    errors.push({ field: username ? 'bmc.password' : 'bmc.username', message: 'is required (or bmc.credentialsRef)' });
  } else credentials = { username, password };

  const macs: string[] = [];
  const rawMacs = f.macs === undefined ? [] : list(f.macs);
  if (rawMacs === null) errors.push({ field: 'macs', message: 'must be a list of MAC addresses' });
  else rawMacs.forEach((m, i) => {
    const mac = machineMac(m);
    if (typeof mac === 'string') {
      if (!macs.includes(mac)) macs.push(mac);
    } else errors.push({ field: `macs[${i}]`, message: mac.error });
  });
  const addresses = f.addresses === undefined ? [] : list(f.addresses);
  if (addresses === null) errors.push({ field: 'addresses', message: 'must be a list of IP addresses' });
  else {
    if (addresses.length > 16) errors.push({ field: 'addresses', message: 'at most 16 addresses' });
    addresses.forEach((a, i) => {
      if (!isIP(a)) errors.push({ field: `addresses[${i}]`, message: 'is not an IP literal' });
    });
  }
  const productUuid = text(f.productUuid)?.toLowerCase();
  if (productUuid && !UUID.test(productUuid)) errors.push({ field: 'productUuid', message: 'must be a UUID' });
  if (driver && NO_MAC_REPORTING.has(driver) && macs.length === 0) {
    if (!productUuid) errors.push({ field: 'macs', message: `the ${driver} driver cannot report MACs: give macs or productUuid` });
    else if (PLACEHOLDER_UUIDS.has(productUuid)) errors.push({ field: 'productUuid', message: 'is a firmware placeholder and cannot stand in for the MACs: give macs' });
  }
  const options = f.driverOptions === undefined ? undefined : driverOptions(f.driverOptions, errors);
  const hardwareProfile = text(f.hardwareProfile);
  return {
    input: {
      ...(name ? { name } : {}), pool, site: text(f.site),
      bmc: { address: rawAddress ?? '', driver: driver ?? '', credentials, ...(options ? { driverOptions: options } : {}) },
      ...(macs.length ? { macs } : {}), ...(addresses && addresses.length ? { addresses } : {}),
      ...(productUuid ? { productUuid } : {}), ...(hardwareProfile ? { hardwareProfile } : {}),
    },
    address: address ?? undefined,
    macs,
  };
}

function inNetworks(ip: string, networks: readonly string[]): boolean {
  const list = new BlockList();
  for (const cidr of networks) {
    const [net, bits] = cidr.split('/');
    const type = isIP(net ?? '') === 6 ? 'ipv6' : 'ipv4';
    try {
      list.addSubnet(net!, Number(bits ?? (type === 'ipv6' ? 128 : 32)), type);
    } catch {
      // a network the service would not have stored
    }
  }
  return list.check(ip, isIP(ip) === 6 ? 'ipv6' : 'ipv4');
}

/** Checks every row, locally and against what the service holds; sends nothing. */
async function checkAll(invocation: Cli, rows: Row[], o: { pool?: string; skipExisting?: boolean }): Promise<Checked[]> {
  const client = invocation.client();
  const [{ pools }, { sites }, { hardwareProfiles }] = await Promise.all([
    client.request(PoolsDocument, {}), client.request(SitesDocument, {}), client.request(HardwareProfilesDocument, {}),
  ]);
  const profiles = new Set(hardwareProfiles.map((p) => p.name));
  const local = rows.map((r) => ({ r, ...checkFields(r, o.pool) }));
  const poolOf = (value: string) => {
    const found = isId(value, 'pool') ? pools.filter((p) => p.id === value) : pools.filter((p) => p.name === value);
    return found.length === 1 ? found[0]! : found.length ? 'ambiguous' as const : null;
  };
  // What the service holds in each site the file enrolls into: BMC addresses (per pool) and MACs.
  const siteIds = new Set<string>();
  for (const l of local) {
    const p = l.input.pool ? poolOf(l.input.pool) : null;
    if (p && p !== 'ambiguous') siteIds.add(p.siteId);
  }
  const takenMacs = new Map<string, Map<string, string>>();
  const knownBmcs = new Map<string, string>();
  for (const siteId of siteIds) {
    const macs = new Map<string, string>();
    for await (const n of client.paginate(MetalNodesDocument, { filter: { siteId } }, (d) => d.nodes, { pageSize: 500 })) {
      for (const m of n.macs) macs.set(m.toLowerCase(), n.id);
      const a = bmcAddress(n.bmc.address);
      if (a && n.provisionState !== 'retired') knownBmcs.set(`${n.poolId} ${a.normalized}`, n.id);
    }
    takenMacs.set(siteId, macs);
  }

  const seenBmc = new Map<string, number>();
  const seenMac = new Map<string, number>();
  return local.map(({ r, input, address, macs }) => {
    const errors = r.errors;
    const checked: Checked = { ...r };
    const pool = input.pool ? poolOf(input.pool) : null;
    if (input.pool && pool === null) errors.push({ field: 'pool', message: 'no pool the token may read has this id or name' });
    if (pool === 'ambiguous') errors.push({ field: 'pool', message: 'several pools have this name: give the id' });
    const resolved = pool && pool !== 'ambiguous' ? pool : null;
    if (resolved && input.site) {
      const site = isId(input.site, 'site') ? sites.find((s) => s.id === input.site) : sites.find((s) => s.name === input.site);
      if (!site || site.id !== resolved.siteId) errors.push({ field: 'site', message: 'is not the site of the row\'s pool' });
    }
    const profile = input.hardwareProfile ?? resolved?.policy.hardwareProfile;
    if (profile && !profiles.has(profile)) errors.push({ field: input.hardwareProfile ? 'hardwareProfile' : 'pool.policy.hardwareProfile', message: 'no hardware profile has this name' });
    if (resolved && address) {
      const site = sites.find((s) => s.id === resolved.siteId);
      const networks = site?.bmcNetworks ?? [];
      if (networks.length) {
        if (!address.ip) errors.push({ field: 'bmc.address', message: 'must be an IP address in its site\'s bmcNetworks: a host name cannot be held to networks' });
        else if (!inNetworks(address.ip, networks)) errors.push({ field: 'bmc.address', message: 'is outside its site\'s bmcNetworks' });
      }
      const key = `${resolved.id} ${address.normalized}`;
      const existing = knownBmcs.get(key);
      if (existing) {
        if (o.skipExisting) checked.existing = existing;
        else errors.push({ field: 'bmc.address', message: `is already the BMC of node ${existing} in this pool (--skip-existing leaves such rows out)` });
      }
      const twin = seenBmc.get(key);
      if (twin !== undefined) errors.push({ field: 'bmc.address', message: `is the same BMC as row ${twin}` });
      else seenBmc.set(key, r.row);
    }
    if (resolved && !checked.existing) {
      macs.forEach((mac, i) => {
        const owner = takenMacs.get(resolved.siteId)?.get(mac);
        // The node whose BMC this already is: said once, on bmc.address.
        if (owner && owner !== knownBmcs.get(`${resolved.id} ${address?.normalized}`)) errors.push({ field: `macs[${i}]`, message: `is already the MAC of node ${owner} in this site` });
        const key = `${resolved.siteId} ${mac}`;
        const twin = seenMac.get(key);
        if (twin !== undefined && twin !== r.row) errors.push({ field: `macs[${i}]`, message: `is also a MAC of row ${twin}` });
        else seenMac.set(key, r.row);
      });
    }
    if (errors.length === 0 && resolved) {
      const { pool: _p, site: _s, ...rest } = input;
      checked.input = { ...rest, poolId: resolved.id, siteId: resolved.siteId };
    }
    return checked;
  });
}

// ---- sending ---------------------------------------------------------------------------------

function where(r: { row: number; line?: number; name?: string }): string {
  return `row ${r.row}${r.line ? ` (line ${r.line})` : ''}${r.name ? ` ${oneLine(r.name)}` : ''}`;
}

function describe(r: Result): string {
  switch (r.status) {
    case 'enrolled': return `${where(r)}: enrolled as ${r.nodeId}`;
    case 'skipped': return `${where(r)}: skipped, already node ${r.nodeId}`;
    case 'refused': return `${where(r)}: refused ${r.code}: ${oneLine(r.message ?? '')}`;
    case 'unknown': return `${where(r)}: UNKNOWN ${r.code}: ${oneLine(r.message ?? '')} (the service may have enrolled it: check before re-sending)`;
    case 'not-sent': return `${where(r)}: not sent`;
    case 'invalid': return `${where(r)}: ${(r.errors ?? []).map((e) => `${e.field}: ${e.message}`).join('; ')}`;
  }
}

const rowList = (results: Result[], status: Status) => results.filter((r) => r.status === status).map((r) => r.row);
function ranges(rows: number[]): string {
  const parts: string[] = [];
  for (let i = 0; i < rows.length; i += 1) {
    let j = i;
    while (j + 1 < rows.length && rows[j + 1] === rows[j]! + 1) j += 1;
    parts.push(j > i ? `${rows[i]}-${rows[j]}` : `${rows[i]}`);
    i = j;
  }
  return parts.join(', ');
}

interface EnrollOptions { file: string; format?: 'csv' | 'yaml'; pool?: string; skipExisting?: boolean; keepGoing?: boolean; dryRun?: boolean; parallel: number }

async function enroll(invocation: Cli, o: EnrollOptions): Promise<void> {
  const format = o.format ?? (/\.ya?ml$/i.test(o.file) ? 'yaml' : /\.csv$/i.test(o.file) ? 'csv' : undefined);
  if (!format) throw new UsageError('--file must end in .csv, .yaml or .yml (or give --format)');
  let body: string;
  try {
    if (fs.statSync(o.file).size > MAX_FILE) throw new UsageError(`--file is larger than ${MAX_FILE / 1024 / 1024} MiB`);
    body = fs.readFileSync(o.file, 'utf8');
  } catch (e) {
    if (e instanceof UsageError) throw e;
    throw new UsageError(`--file: cannot read it (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  const rows = readMachines(o.file, body, format);
  if (rows.length === 0) throw new Refusal('INVALID_INPUT', `${path.basename(o.file)} lists no machine; nothing was sent`);
  if (rows.length > MAX_ROWS) throw new Refusal('INVALID_INPUT', `${path.basename(o.file)} lists ${rows.length} machines, more than ${MAX_ROWS}; nothing was sent`);

  const checked = await checkAll(invocation, rows, o);
  const nameOf = (r: Checked) => text(r.fields.name);
  const invalid = checked.filter((r) => r.errors.length);
  if (invalid.length) {
    const results: Result[] = checked.map((r) => (r.errors.length
      ? { row: r.row, line: r.line, name: nameOf(r), status: 'invalid' as const, errors: r.errors }
      : { row: r.row, line: r.line, name: nameOf(r), status: 'not-sent' as const }));
    if (invocation.out.json) invocation.out.printJson({ file: o.file, total: rows.length, enrolled: 0, rows: results });
    else for (const r of results.filter((x) => x.status === 'invalid')) invocation.out.line(describe(r));
    throw new Refusal('INVALID_INPUT', `${invalid.length} of ${rows.length} rows are invalid (rows ${ranges(invalid.map((r) => r.row))}); nothing was sent, no machine was enrolled`);
  }
  const results: Result[] = checked.map((r) => (r.existing
    ? { row: r.row, line: r.line, name: nameOf(r), status: 'skipped' as const, nodeId: r.existing }
    : { row: r.row, line: r.line, name: nameOf(r), status: 'not-sent' as const }));
  const toSend = checked.filter((r) => !r.existing);
  if (o.dryRun) {
    if (invocation.out.json) invocation.out.printJson({ file: o.file, total: rows.length, enrolled: 0, dryRun: true, rows: results });
    else invocation.out.line(`all ${rows.length} rows are valid; ${toSend.length} would be enrolled${toSend.length < rows.length ? `, ${rows.length - toSend.length} skipped (already enrolled)` : ''} (dry run: nothing was sent)`);
    return;
  }

  const client = invocation.client();
  const bar = invocation.out.progress(toSend.length, 'enroll');
  for (const r of results.filter((x) => x.status === 'skipped')) bar.note(describe(r));
  const interrupted = invocation.interrupted();
  let stopped = false;
  const send = async (row: (typeof toSend)[number]) => {
    const result = results[row.row - 1]!;
    try {
      const { enrollNode } = await client.request(EnrollDocument, { input: row.input! });
      Object.assign(result, { status: 'enrolled', nodeId: enrollNode.node.id });
    } catch (e) {
      const err = e as { code?: string; message?: string; field?: string; details?: { field?: string } };
      const code = typeof err.code === 'string' ? err.code : 'INTERNAL';
      // No answer (or a 5xx gateway answer): the call may have reached the service and committed.
      const unknown = code === 'NETWORK' || code === 'TIMEOUT' || /^HTTP_5/.test(code);
      Object.assign(result, { status: unknown ? 'unknown' : 'refused', code, field: err.field ?? err.details?.field, message: err.message ?? '' });
      if (!o.keepGoing) stopped = true;
    }
    bar.tick(describe(result));
  };
  try {
    await forEachLimited(toSend, o.parallel, send, { until: () => stopped || interrupted.aborted });
  } finally {
    bar.stop();
  }

  const enrolled = rowList(results, 'enrolled');
  const refused = rowList(results, 'refused');
  const unknown = rowList(results, 'unknown');
  const notSent = rowList(results, 'not-sent');
  const skipped = rowList(results, 'skipped');
  if (invocation.out.json) invocation.out.printJson({ file: o.file, total: rows.length, enrolled: enrolled.length, rows: results });
  else {
    invocation.out.line(`enrolled ${enrolled.length} of ${rows.length} rows${enrolled.length ? ` (rows ${ranges(enrolled)})` : ''}` +
      `${skipped.length ? `; skipped ${skipped.length} already enrolled (rows ${ranges(skipped)})` : ''}`);
    for (const r of results.filter((x) => x.status === 'refused' || x.status === 'unknown')) invocation.out.line(describe(r));
    if (notSent.length) invocation.out.line(`not sent: rows ${ranges(notSent)}${interrupted.aborted ? ' (interrupted)' : refused.length || unknown.length ? ' (stopped at the first refusal; --keep-going sends the rest)' : ''}`);
  }
  if (refused.length || unknown.length || notSent.length) {
    const parts = [`enrolled rows: ${enrolled.length ? ranges(enrolled) : 'none'}`];
    if (refused.length) parts.push(`refused: ${ranges(refused)}`);
    if (unknown.length) parts.push(`outcome unknown: ${ranges(unknown)}`);
    if (notSent.length) parts.push(`not sent: ${ranges(notSent)}`);
    const first = results.find((r) => r.status === 'refused' || r.status === 'unknown');
    throw new Refusal(first?.code ?? 'INTERRUPTED', `${parts.join('; ')}. Fix the refused rows and run again with --skip-existing to send the rest without enrolling any machine twice`);
  }
}

export function register(program: Command): void {
  program.command('enroll').description('enroll the machines of a CSV or YAML file: every row is checked before any is sent, then a result per row')
    .requiredOption('--file <file>', 'machines.csv or machines.yaml (columns: enroll --help)')
    .addOption(new Option('--format <format>', 'the file\'s format when its name does not say').choices(['csv', 'yaml']))
    .option('--pool <pool>', 'the pool of rows that name none (id or name)', ref('pool'))
    .option('--skip-existing', 'leave out rows whose BMC address is already a node of their pool (a re-run after a partial enroll)')
    .option('--keep-going', 'after a refused row, send the remaining rows anyway')
    .option('--dry-run', 'check every row (also against the service) and send nothing')
    .addOption(new Option('--parallel <n>', 'rows sent at once').argParser(positiveInt(32)).default(4))
    .addHelpText('after', `
Columns (CSV header, or YAML keys; bmc_address, "BMC address" and bmc.address are one column):
  name, pool, site, bmc.address, bmc.driver (${BMC_DRIVERS.join('|')}),
  bmc.username + bmc.password, or bmc.credentialsRef (secret://...),
  macs (CSV: separated by spaces, commas or semicolons), addresses, productUuid,
  hardwareProfile, bmc.driverOptions (CSV: a JSON object)

Nothing half-done: if any row is invalid, every invalid row is listed with its field errors and
nothing is sent. Rows are then sent; the first refusal stops the sending, and the output says which
rows were enrolled (node ids), refused, not sent, or unknown (connection lost mid-call).`)
    .action(async (o: EnrollOptions, cmd: Command) => {
      await enroll(cli(cmd), o);
    });
}
