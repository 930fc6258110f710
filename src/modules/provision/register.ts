import { X509Certificate } from 'node:crypto';
import fs from 'node:fs/promises';
import { isIP } from 'node:net';
import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { decide } from '../../auth/decide';
import { AppError, invalidInput } from '../../errors';
import { newId } from '../../ids';
import { createNode, updateNode } from '../metal/node-store';
import type { NodeChange } from '../metal/node-rows';
import { lockMacs, machineMac, refuseTakenMacs } from '../metal/mac';
import { poolResource } from '../tenancy/resources';
import { checkBmcNetwork } from '../metal/bmc-networks';
import { decideOnControlnodePool } from './controlnode-pool';
import { ACTIVE_RUN_STATUSES } from '../metal/states';
import type { RunParams } from '../metal/verbs';
import { bmcOrigin } from '../../../clients/bmc/redfish/client';
import { checkRedfishNode, RedfishNodeError } from '../../../clients/bmc/redfish/check';

/**
 * POST /controlnode/register (seed 004: "Registers the management/control node in the bmc_infos
 * table with is_control_node=true"), on the one model: the control node is a metal node (its BMC)
 * with a bmc_info row (its serial, vendor, OS facts and NetBox ids). `serial_number` is its
 * identity ("Used as UUID"); without one, its BMC address is ("BMC IP is the primary key").
 *
 * - A machine metal does not know yet is recorded in CONTROLNODE_POOL_ID's pool, in `adopting`:
 *   the control node already runs its OS, so its workflow (metal-adopt) verifies the BMC with the
 *   broker's credentials and reads it out of band, and touches neither power nor boot; then
 *   `adopted`. Without BMC credentials that verification fails, and the node says why.
 * - A machine already known (by serial, else by BMC address) keeps its state: its facts are
 *   updated, and its BMC too (a re-addressed BMC, new credentials) unless a workflow is running.
 * - Passwords go to the secret broker before anything else is written (the BMC's, and the OS
 *   user's, which the seed hex-encoded in its table): rows hold secret:// references, and nothing
 *   returns them. A replaced secret is deleted once the new reference is committed.
 * Decided as compute:nodes:provision on the pool.
 */

export interface RegisterInput {
  /** The BMC's IP address, optionally with a port (`127.0.0.1:8443`, `[fd00::1]:8443`), or its http(s) URL (`https://127.0.0.1:8443`). */
  bmcIp: string;
  /** For a BMC with several systems: the Id of this machine's (the node's driverOptions.systemId). */
  systemId?: string | null;
  bmcUsername?: string | null;
  bmcPassword?: string | null;
  serialNumber?: string | null;
  vendor?: string | null;
  osHostname?: string | null;
  osIp?: string | null;
  osUsername?: string | null;
  osPassword?: string | null;
  fqdn?: string | null;
  primaryMac?: string | null;
  atlasDeviceId?: number | null;
  atlasLocationId?: number | null;
  atlasRackId?: number | null;
  atlasSiteId?: number | null;
}

export interface RegisterResult {
  created: boolean;
  nodeId: string;
  hostname: string;
  nodeIp: string;
  message: string;
}

/**
 * The Redfish flavour of each vendor the control-node API names (its provision/<vendor> routes:
 * cisco, dell, hp, lenovo, supermicro), with the names operators also write and the Manufacturer
 * strings BMCs report ("Dell Inc.", "HPE", "Hewlett Packard Enterprise", "Lenovo", "Supermicro",
 * "Cisco Systems Inc"). Keys are {@link vendorKey}s. Anything else is DMTF's generic Redfish.
 */
const VENDOR_DRIVERS: Readonly<Record<string, string>> = {
  dell: 'idrac', idrac: 'idrac',
  hp: 'ilo', hpe: 'ilo', ilo: 'ilo', 'hewlett packard': 'ilo', 'hewlett packard enterprise': 'ilo',
  lenovo: 'xcc', xcc: 'xcc',
  cisco: 'cimc', 'cisco systems': 'cimc', cimc: 'cimc',
  supermicro: 'supermicro', 'super micro': 'supermicro', 'super micro computer': 'supermicro',
};

/**
 * A vendor string as a lookup key: trimmed, lowercased, punctuation (`.`, `,`, `-`) as spaces,
 * spaces collapsed, and a company-form suffix dropped: "Dell Inc." and " DELL " are both `dell`,
 * "Cisco Systems, Inc." is `cisco systems`, "Hewlett-Packard Enterprise" `hewlett packard enterprise`.
 */
export function vendorKey(vendor: string | null | undefined): string {
  const words = (vendor ?? '').toLowerCase().replace(/[.,\-_]+/g, ' ').trim().split(/\s+/).filter(Boolean);
  while (words.length > 1 && ['inc', 'incorporated', 'corp', 'corporation', 'co', 'company', 'ltd', 'llc', 'gmbh'].includes(words.at(-1)!)) words.pop();
  return words.join(' ');
}

export function driverOfVendor(vendor: string | null | undefined): string {
  const key = vendorKey(vendor);
  return Object.hasOwn(VENDOR_DRIVERS, key) ? VENDOR_DRIVERS[key]! : 'redfish';
}

const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;
/** A serial as vendors print them: letters, digits and a few separators, no spaces or control characters. */
const SERIAL = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/;
const NETBOX_ID_MAX = 2 ** 31 - 1;

const field = (name: keyof RegisterInput) => `input.${name}`;
const given = <T>(v: T | null | undefined): v is T => v !== null && v !== undefined;

function ipOf(name: 'bmcIp' | 'osIp', value: string): string {
  const v = value.trim();
  if (!isIP(v)) throw invalidInput(field(name), 'must be an IPv4 or IPv6 address');
  return isIP(v) === 6 ? v.toLowerCase() : v;
}

/**
 * The BMC's address as the node keeps it: a bare IP as given (its BMC on 443), else the origin of
 * `ip:port`, `[v6]:port` or an http(s) URL (`https://127.0.0.1:8443`). The host is always an IP
 * literal; the Redfish client's own rules (bmcOrigin) decide the rest, so register and the driver
 * cannot disagree.
 */
function bmcAddressOf(value: string): string {
  const v = value.trim();
  if (isIP(v)) return isIP(v) === 6 ? v.toLowerCase() : v;
  const what = 'must be the BMC\'s IP address, optionally with a :port (e.g. 127.0.0.1:8443, [fd00::1]:8443), or its http(s) URL (e.g. https://127.0.0.1:8443)';
  let origin: string;
  try {
    origin = bmcOrigin(v);
  } catch {
    throw invalidInput(field('bmcIp'), what);
  }
  if (!isIP(new URL(origin).hostname.replace(/^\[|\]$/g, ''))) throw invalidInput(field('bmcIp'), what);
  return origin;
}

/** Two BMC addresses are one BMC when their origins (scheme, host, port) are the same. */
function sameBmc(a: string, b: string): boolean {
  if (a === b) return true;
  try {
    return bmcOrigin(a) === bmcOrigin(b);
  } catch {
    return false;
  }
}

function text(name: keyof RegisterInput, value: string | null | undefined, pattern: RegExp | null, what: string): string | null {
  if (!given(value)) return null;
  const v = value.trim();
  if (v === '') return null;
  if (pattern && !pattern.test(v)) throw invalidInput(field(name), what);
  return v;
}

/** Every field checked before anything is written, each refusal naming its field. */
function check(input: RegisterInput) {
  if (given(input.bmcIp) && typeof input.bmcIp !== 'string') throw invalidInput(field('bmcIp'), 'must be a string: the BMC\'s IP address or URL');
  if (!given(input.bmcIp) || input.bmcIp.trim() === '') throw invalidInput(field('bmcIp'), 'is required: the control node\'s BMC address');
  const bmcIp = bmcAddressOf(input.bmcIp);
  if (given(input.systemId) && typeof input.systemId !== 'string') throw invalidInput(field('systemId'), 'must be a string: the Id of one of the BMC\'s systems');
  const systemId = text('systemId', input.systemId, null, '');
  if (systemId !== null) {
    try {
      checkRedfishNode(bmcIp, { systemId });
    } catch (e) {
      if (e instanceof RedfishNodeError) throw invalidInput(field('systemId'), e.field === 'bmc.driverOptions.systemId' ? 'must be the Id of one of the BMC\'s systems: at most 255 characters, with no /, ?, # or space' : e.reason);
      throw e;
    }
  }
  const bmcUsername = text('bmcUsername', input.bmcUsername, null, '');
  const bmcPassword = given(input.bmcPassword) && input.bmcPassword !== '' ? input.bmcPassword : null;
  if ((bmcUsername === null) !== (bmcPassword === null)) {
    throw invalidInput(field(bmcUsername === null ? 'bmcUsername' : 'bmcPassword'), 'the BMC credentials are a pair: give bmc_username and bmc_password together');
  }
  const osPassword = given(input.osPassword) && input.osPassword !== '' ? input.osPassword : null;
  for (const name of ['atlasDeviceId', 'atlasLocationId', 'atlasRackId', 'atlasSiteId'] as const) {
    const v = input[name];
    if (given(v) && (!Number.isInteger(v) || v < 1 || v > NETBOX_ID_MAX)) throw invalidInput(field(name), 'must be a NetBox id (a positive integer)');
  }
  return {
    bmcIp,
    systemId,
    bmc: bmcUsername !== null && bmcPassword !== null ? { username: bmcUsername, password: bmcPassword } : null,
    serialNumber: text('serialNumber', input.serialNumber, SERIAL, 'must be a serial number: letters, digits and . _ : / -, at most 128'),
    vendor: text('vendor', input.vendor, /^[\x20-\x7e]{1,64}$/, 'must be at most 64 printable characters'),
    osHostname: text('osHostname', input.osHostname, HOSTNAME, 'must be a host name (e.g. mgmt-01)'),
    fqdn: text('fqdn', input.fqdn, HOSTNAME, 'must be a fully qualified domain name'),
    osIp: given(input.osIp) && input.osIp.trim() !== '' ? ipOf('osIp', input.osIp) : null,
    // The seed's default user is root; it applies only when the OS password comes without one.
    osUsername: text('osUsername', input.osUsername, /^[a-z_][a-z0-9_.-]{0,31}$/, 'must be a POSIX user name (e.g. root)') ?? (osPassword ? 'root' : null),
    osPassword,
    primaryMac: given(input.primaryMac) && input.primaryMac.trim() !== '' ? machineMac(input.primaryMac.trim(), field('primaryMac')) : null,
    atlas: {
      deviceId: input.atlasDeviceId ?? null, locationId: input.atlasLocationId ?? null,
      rackId: input.atlasRackId ?? null, siteId: input.atlasSiteId ?? null,
    },
  };
}

interface Known {
  id: string;
  version: number;
  bmcAddress: string;
  bmcCredentialsRef: string | null;
  bmcDriver: string;
  bmcDriverOptions: Record<string, unknown> | null;
  name: string | null;
  activeRun: string | null;
  infoVersion: number | null;
  serialNumber: string | null;
  osCredentialsRef: string | null;
}

const KNOWN_COLUMNS = `n.id, n.version, n.bmc_address AS "bmcAddress", n.bmc_credentials_ref AS "bmcCredentialsRef", n.bmc_driver AS "bmcDriver",
       n.bmc_driver_options AS "bmcDriverOptions", n.name,
       (SELECT w.id FROM workflow_run w WHERE w.node_id = n.id AND w.status = ANY($3::text[]) LIMIT 1) AS "activeRun",
       b.version AS "infoVersion", b.serial_number AS "serialNumber", b.os_credentials_ref AS "osCredentialsRef"`;

const systemIdOf = (n: Known): string | null => (typeof n.bmcDriverOptions?.systemId === 'string' ? n.bmcDriverOptions.systemId : null);

/**
 * The tenant's node whose BMC this is (the same origin, whatever form either address was written
 * in): with a system id, the node of that system, else the one node of that BMC without one; with
 * none, the BMC's one node (a BMC several nodes share needs system_id to say which).
 */
async function knownByAddress(ctx: Context, tenantId: string, wanted: { bmcIp: string; systemId: string | null }): Promise<Known | undefined> {
  const host = (() => {
    try {
      return new URL(bmcOrigin(wanted.bmcIp)).hostname.replace(/^\[|\]$/g, '');
    } catch {
      return wanted.bmcIp;
    }
  })();
  const { rows } = await ctx.sql.query<Known>(
    `SELECT ${KNOWN_COLUMNS} FROM node n LEFT JOIN bmc_info b ON b.node_id = n.id
      WHERE n.tenant_id = $1 AND n.provision_state <> 'retired' AND (strpos(lower(n.bmc_address), $2) > 0 OR n.bmc_address LIKE '%:%:%')
      ORDER BY n.id`,
    [tenantId, host, ACTIVE_RUN_STATUSES],
  );
  const same = rows.filter((n) => sameBmc(n.bmcAddress, wanted.bmcIp));
  if (wanted.systemId !== null) {
    const unset = same.filter((n) => systemIdOf(n) === null);
    return same.find((n) => systemIdOf(n) === wanted.systemId) ?? (unset.length === 1 ? unset[0] : undefined);
  }
  if (same.length > 1) {
    throw invalidInput(field('systemId'), `is required: ${same.length} nodes have this BMC (systems ${same.map((n) => systemIdOf(n) ?? '(none)').join(', ')}): name the one this is`);
  }
  return same[0];
}

export async function registerControlNode(ctx: Context, input: RegisterInput): Promise<RegisterResult> {
  const principal = requirePrincipal(ctx);
  const poolId = ctx.config.controlnodePoolId;
  if (!poolId) throw new AppError('INVALID_CONFIG', 'CONTROLNODE_POOL_ID is not set: the control-node API has no pool to record machines in');
  const { rows: [pool] } = await ctx.sql.query<{ id: string; tenantId: string; siteId: string; bmcNetworks: string[] }>(
    'SELECT p.id, p.tenant_id AS "tenantId", p.site_id AS "siteId", s.bmc_networks AS "bmcNetworks" FROM pool p JOIN site s ON s.id = p.site_id WHERE p.id = $1', [poolId]);
  if (!pool) throw new AppError('INVALID_CONFIG', `CONTROLNODE_POOL_ID names no pool (${poolId})`);
  decideOnControlnodePool(principal, pool);
  const checked = check(input);
  // The BMC's address inside its site's networks, before anything is written (issue 21 item 6).
  await checkBmcNetwork(checked.bmcIp, pool.bmcNetworks, ctx.config.bmcNetworks, field('bmcIp'));

  // The node: by its serial within the tenant, else the one whose BMC has this address.
  const bySerial = checked.serialNumber
    ? (await ctx.sql.query<Known>(
        `SELECT ${KNOWN_COLUMNS} FROM bmc_info b JOIN node n ON n.id = b.node_id WHERE b.tenant_id = $1 AND b.serial_number = $2`,
        [pool.tenantId, checked.serialNumber, ACTIVE_RUN_STATUSES])).rows[0]
    : undefined;
  const byAddress = await knownByAddress(ctx, pool.tenantId, checked);
  if (bySerial && byAddress && bySerial.id !== byAddress.id) {
    throw new AppError('CONFLICT', `serial_number ${checked.serialNumber} is node ${bySerial.id}'s, but bmc_ip ${checked.bmcIp} is the BMC of node ${byAddress.id}: one machine cannot be both`, { nodeId: bySerial.id, otherNodeId: byAddress.id });
  }
  if (!bySerial && byAddress?.serialNumber && checked.serialNumber) {
    throw new AppError('CONFLICT', `bmc_ip ${checked.bmcIp} is the BMC of node ${byAddress.id}, whose serial is ${byAddress.serialNumber}, not ${checked.serialNumber}`, { nodeId: byAddress.id });
  }
  const known = bySerial ?? byAddress;
  // What the call does not give is kept: without a vendor a known node keeps its flavour, without a system id its system.
  const driver = checked.vendor !== null || !known ? driverOfVendor(checked.vendor) : known.bmcDriver;
  const systemChanges = !!known && checked.systemId !== null && checked.systemId !== systemIdOf(known);
  if (known) {
    const bmcChanges = !sameBmc(known.bmcAddress, checked.bmcIp) || checked.bmc !== null || known.bmcDriver !== driver || systemChanges;
    if (bmcChanges && known.activeRun) {
      throw new AppError('CONFLICT', `node ${known.id} is running workflow ${known.activeRun}: its BMC cannot change under it; register again when it ends`, { nodeId: known.id, workflowId: known.activeRun });
    }
  }

  // A new node's TLS trust, from the configuration (an unreadable CA file is refused before any write).
  const driverOptions = known ? {} : { ...(await controlnodeBmcOptions(ctx.config)), ...(checked.systemId !== null ? { systemId: checked.systemId } : {}) };

  // Secrets first, as enroll does; removed again if nothing is written.
  const stored: string[] = [];
  const put = async (secret: Record<string, string>) => {
    if (!ctx.secrets) throw new AppError('INVALID_CONFIG', 'no secret broker is configured: register cannot keep the BMC or OS password');
    const ref = await ctx.secrets.put(pool.tenantId, secret);
    stored.push(ref);
    return ref;
  };
  const bmcRef = checked.bmc ? await put(checked.bmc) : null;
  const osRef = checked.osPassword ? await put({ username: checked.osUsername ?? 'root', password: checked.osPassword }) : null;
  const info = [
    pool.tenantId, checked.serialNumber, checked.vendor, checked.osHostname, checked.fqdn, checked.osIp, checked.osUsername, osRef, checked.primaryMac,
    checked.atlas.deviceId, checked.atlas.locationId, checked.atlas.rackId, checked.atlas.siteId,
  ];
  const name = checked.osHostname ?? checked.fqdn ?? null;
  const nodeId = known?.id ?? newId('MetalNode');
  const replaced: string[] = [];
  try {
    await ctx.sql.transaction(async (tx) => {
      if (!known) {
        const macs = checked.primaryMac ? [checked.primaryMac] : [];
        if (macs.length) {
          await lockMacs(tx, pool.siteId, macs);
          await refuseTakenMacs(tx, pool.siteId, macs);
        }
        const bindings = { power: driver, management: driver, virtualMedia: driver };
        await createNode(tx, {
          id: nodeId, tenantId: pool.tenantId, siteId: pool.siteId, poolId: pool.id, name, provisionState: 'adopting',
          bmcAddress: checked.bmcIp, bmcDriver: driver, bmcDriverOptions: driverOptions, bmcCredentialsRef: bmcRef,
          addresses: checked.osIp ? [checked.osIp] : [], macs, productUuid: null,
          hardwareProfileId: null, driverBindings: bindings,
        }, {
          run: { id: newId('WorkflowRun'), kind: 'metal-adopt', params: { verb: 'register' } satisfies RunParams },
          events: [{ type: 'node.registered', payload: { verb: 'register', to: 'adopting', created: true, controlNode: true, bmc: { address: checked.bmcIp, driver, ...(checked.systemId !== null ? { systemId: checked.systemId } : {}) } } }],
        }, ctx.requestId);
      } else {
        const data: NodeChange = {};
        if (!sameBmc(known.bmcAddress, checked.bmcIp)) data.bmcAddress = checked.bmcIp;
        if (systemChanges) data.bmcDriverOptions = { ...(known.bmcDriverOptions ?? {}), systemId: checked.systemId };
        if (known.bmcDriver !== driver) {
          data.bmcDriver = driver;
          data.driverBindings = { power: driver, management: driver, virtualMedia: driver };
        }
        if (bmcRef) data.bmcCredentialsRef = bmcRef;
        if (name && name !== known.name) data.name = name;
        const updated = await updateNode(tx, { id: known.id, version: known.version }, {
          data, run: null,
          events: [{ type: 'node.registered', payload: { verb: 'register', created: false, controlNode: true, bmc: { address: data.bmcAddress ?? known.bmcAddress, driver, ...(checked.systemId !== null ? { systemId: checked.systemId } : {}) } } }],
        }, ctx.requestId);
        if (!updated) throw new AppError('CONFLICT', `node ${known.id} changed while it was registered; register again`, { nodeId: known.id });
        if (bmcRef && known.bmcCredentialsRef) replaced.push(known.bmcCredentialsRef);
        if (osRef && known.osCredentialsRef) replaced.push(known.osCredentialsRef);
      }
      // Facts not given keep what an earlier register recorded; the row's version is the compare-and-set.
      const { rowCount } = await tx.query(
        `INSERT INTO bmc_info (node_id, tenant_id, is_control_node, serial_number, vendor, os_hostname, fqdn, os_ip, os_username, os_credentials_ref, primary_mac,
                               atlas_device_id, atlas_location_id, atlas_rack_id, atlas_site_id)
         VALUES ($1, $2, true, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
         ON CONFLICT (node_id) DO UPDATE SET is_control_node = true,
           serial_number = COALESCE(EXCLUDED.serial_number, bmc_info.serial_number), vendor = COALESCE(EXCLUDED.vendor, bmc_info.vendor),
           os_hostname = COALESCE(EXCLUDED.os_hostname, bmc_info.os_hostname), fqdn = COALESCE(EXCLUDED.fqdn, bmc_info.fqdn),
           os_ip = COALESCE(EXCLUDED.os_ip, bmc_info.os_ip), os_username = COALESCE(EXCLUDED.os_username, bmc_info.os_username),
           os_credentials_ref = COALESCE(EXCLUDED.os_credentials_ref, bmc_info.os_credentials_ref), primary_mac = COALESCE(EXCLUDED.primary_mac, bmc_info.primary_mac),
           atlas_device_id = COALESCE(EXCLUDED.atlas_device_id, bmc_info.atlas_device_id), atlas_location_id = COALESCE(EXCLUDED.atlas_location_id, bmc_info.atlas_location_id),
           atlas_rack_id = COALESCE(EXCLUDED.atlas_rack_id, bmc_info.atlas_rack_id), atlas_site_id = COALESCE(EXCLUDED.atlas_site_id, bmc_info.atlas_site_id),
           version = bmc_info.version + 1, updated_at = now()
         WHERE bmc_info.version IS NOT DISTINCT FROM $15::int`,
        [nodeId, ...info, known?.infoVersion ?? null],
      );
      if (rowCount !== 1) throw new AppError('CONFLICT', `node ${nodeId}'s control-node record changed while it was registered; register again`, { nodeId });
    });
  } catch (error) {
    for (const ref of stored) {
      await ctx.secrets!.delete(ref, pool.tenantId).catch((cleanup: unknown) =>
        ctx.log.error({ err: cleanup, secret: ref }, 'register failed and a password it stored could not be removed'));
    }
    if (isUniqueViolation(error, 'bmc_info_tenant_id_serial_number_key')) {
      throw new AppError('CONFLICT', `serial_number ${checked.serialNumber} was registered for another node concurrently; register again`);
    }
    throw error;
  }
  for (const ref of replaced) {
    await ctx.secrets!.delete(ref, pool.tenantId).catch((cleanup: unknown) =>
      ctx.log.warn({ err: cleanup, secret: ref }, 'a replaced password could not be removed from the broker'));
  }
  const notes: string[] = [];
  if (!known && !checked.bmc) notes.push('no BMC credentials were given, so its BMC cannot be verified: register again with bmc_username and bmc_password');
  if (driver === 'redfish' && checked.vendor) notes.push(`vendor "${checked.vendor}" has no Redfish flavour here: the generic Redfish driver is used`);
  const message = known
    ? `control node ${nodeId} updated${notes.length ? `; ${notes.join('; ')}` : ''}`
    : `control node ${nodeId} registered: adopting (its BMC is verified and read out of band; its OS is left as it is)${notes.length ? `; ${notes.join('; ')}` : ''}`;
  return { created: !known, nodeId, hostname: checked.osHostname ?? checked.fqdn ?? '', nodeIp: checked.osIp ?? '', message };
}

/**
 * The driverOptions of a BMC the control-node API records: the site's BMC CA
 * (CONTROLNODE_BMC_CA_FILE) or an explicit insecure: true (CONTROLNODE_BMC_INSECURE); else none,
 * and the system's CAs verify it.
 */
export async function controlnodeBmcOptions(config: Pick<Context['config'], 'controlnodeBmcCaFile' | 'controlnodeBmcInsecure'>): Promise<Record<string, unknown>> {
  if (config.controlnodeBmcInsecure) return { insecure: true };
  if (!config.controlnodeBmcCaFile) return {};
  let pem: string;
  try {
    pem = await fs.readFile(config.controlnodeBmcCaFile, 'utf8');
    new X509Certificate(pem);
  } catch {
    throw new AppError('INVALID_CONFIG', `CONTROLNODE_BMC_CA_FILE (${config.controlnodeBmcCaFile}) is not a readable PEM certificate`);
  }
  return { caCert: pem };
}

function isUniqueViolation(error: unknown, constraint: string): boolean {
  const e = error as { code?: unknown; constraint?: unknown } | null;
  return !!e && e.code === '23505' && e.constraint === constraint;
}
