import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';
import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { decide, visibleTo } from '../../auth/decide';
import { AppError, invalidInput } from '../../errors';
import { newId } from '../../ids';
import { updateNode, type Runner } from '../metal/node-store';
import type { NodeChange } from '../metal/node-rows';
import { decideMove } from '../metal/states';
import { runMoveVerb, type VerbResult } from '../metal/verbs';
import { recordControlNodeOs } from './bmc-info';
import { nodeResource, poolResource } from '../tenancy/resources';
import { confinedPath } from './iso-store';
import { refuseFullIsoDir } from './iso-janitor';
import { renderPreseed } from './preseed';
import type { StaticAddress } from './inventory';
import { controlnodeBmcOptions, driverOfVendor } from './register';
import { enroll } from '../metal/enroll';
import { checkBmcNetwork } from '../metal/bmc-networks';
import { decideOnControlnodePool } from './controlnode-pool';
import { siteIsServed } from '../sites/agent';
import type { InstallParams } from './install-params';
import { hostnameFromDeviceName, hostnameFromSerial, type HostnameSource } from './hostname';

/**
 * POST /controlnode/provision (and /provision/<vendor>), on the one model: a metal deploy of the
 * node whose BMC has the address bmc_IP, with the control-node installer (a per-job Debian ISO
 * booted over virtual media: jobs/workflows/install.ts) instead of a PXE ramdisk. The job is the
 * run; it starts from where a deploy may (ready), and INVALID_STATE elsewhere. The vendor (the
 * path's, else the body's) picks the node's Redfish flavour. Every field is checked before anything
 * is written, as the preseed will use it (the same checks), each refusal naming the request's
 * field. The OS password goes to the broker; without one a random one is generated and kept there
 * (the seed's adminadmin default is not kept). Client paths (cache_dir, output_iso, pxe_path) must
 * stay inside ISO_DIR. Decided as compute:nodes:provision on the node.
 */

export interface ProvisionInput {
  bmcIp: string;
  vendor?: string | null;
  hostname?: string | null;
  osUsername?: string | null;
  osPassword?: string | null;
  rootPass?: string | null;
  selectedDisks?: string[] | null;
  poolType?: string | null;
  selectedNic?: string | null;
  selectedNicLegacy?: string | null;
  selectedNicMac?: string | null;
  macAddress?: string | null;
  gpuPassthrough?: unknown;
  controlnodeHost?: string | null;
  controlnodePort?: string | null;
  cacheDir?: string | null;
  outputIso?: string | null;
  pxePath?: string | null;
  /** Recorded with the job as the request gave them (NetBox, Kubernetes and placement facts). */
  deviceId?: number | null;
  prefixId?: number | null;
  networkRole?: string | null;
  kubernetesClusterName?: string | null;
  kubernetesClusterType?: string | null;
  location?: string | null;
  zone?: string | null;
  rackNumber?: string | null;
  vmSlot?: string | null;
  arch?: string | null;
  branch?: string | null;
  debianVersion?: string | null;
  pxeServer?: string | null;
  sysIuri?: string | null;
}

export interface ProvisionResult { jobId: string; nodeId: string; message: string }

type BmcNode = {
  id: string; tenantId: string; siteId: string; poolId: string; version: number; provisionState: string; failedFrom: string | null;
  bmcDriver: string; bmcCredentialsRef: string | null; osRef: string | null;
  /** The serial the BMC reported (out-of-band inventory), else the one register recorded. */
  serial: string | null;
};

/**
 * The node whose BMC has this address that the caller may provision (another tenant's is not there
 * for it; one it may only read is PERMISSION_DENIED), or undefined: the one lookup of provision and
 * unprovision.
 */
async function nodeByBmc(ctx: Context, principal: ReturnType<typeof requirePrincipal>, bmcIp: string): Promise<{ node: BmcNode | undefined; any: boolean }> {
  const nodes = await nodesWithBmc(ctx.sql, bmcIp);
  return { node: nodes.find((n) => visibleTo(principal, 'compute:nodes:provision', nodeResource(n))), any: nodes.length > 0 };
}

/**
 * The host a node's BMC address names, as one canonical IP (or the lowercased host name): enroll
 * keeps the address as it was given (`10.20.0.11`, `10.20.0.11:443`, `https://10.20.0.11/`,
 * `[fe80::1]:8443`), and each of them is the BMC at bmc_IP 10.20.0.11.
 */
export function bmcHostOf(address: string): string {
  let host = address.trim();
  if (/^https?:\/\//i.test(host)) {
    try {
      host = new URL(host).hostname;
    } catch {
      return host.toLowerCase();
    }
  }
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(host);
  if (bracketed) host = bracketed[1]!;
  else if (!isIP(host) && /^[^:]+:\d+$/.test(host)) host = host.slice(0, host.lastIndexOf(':'));
  return ipaddr.isValid(host) && isIP(host) ? ipaddr.process(host).toString() : host.toLowerCase();
}

/** Every node (not retired, but `except`) whose BMC is at this address, in any of the forms enroll keeps, any tenant's. */
export async function nodesWithBmc(db: Pick<Runner, 'query'>, bmcIp: string, except: string | null = null): Promise<BmcNode[]> {
  const want = bmcHostOf(bmcIp);
  // An IPv4 address is in the stored text whatever its form; an IPv6 one may be written several ways.
  const v4 = isIP(want) === 4;
  const { rows } = await db.query<BmcNode & { bmcAddress: string }>(
    `SELECT n.id, n.tenant_id AS "tenantId", n.site_id AS "siteId", n.pool_id AS "poolId", n.version, n.provision_state AS "provisionState",
            n.failed_from AS "failedFrom", n.bmc_driver AS "bmcDriver", n.bmc_credentials_ref AS "bmcCredentialsRef", b.os_credentials_ref AS "osRef",
            COALESCE(NULLIF(n.inventory->'outOfBand'->>'serial', ''), b.serial_number) AS serial, n.bmc_address AS "bmcAddress"
       FROM node n LEFT JOIN bmc_info b ON b.node_id = n.id
      WHERE n.provision_state <> 'retired' AND ($2::boolean IS NOT TRUE OR strpos(n.bmc_address, $1) > 0) AND ($2::boolean OR n.bmc_address LIKE '%:%')
        AND n.id IS DISTINCT FROM $3
      ORDER BY n.id`,
    [want, v4, except],
  );
  return rows.filter((n) => bmcHostOf(n.bmcAddress) === want);
}

/** The vendors of the seed's provision/<vendor> routes. */
export const PROVISION_VENDORS = ['cisco', 'dell', 'hp', 'lenovo', 'supermicro'] as const;

const provisionField = (name: keyof ProvisionInput) => `input.${name}`;
const HOST = /^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;
const FACT = /^[\x20-\x7e]{0,128}$/;

export async function provisionControlNode(ctx: Context, input: ProvisionInput, pathVendor: string | null = null): Promise<ProvisionResult> {
  const principal = requirePrincipal(ctx);
  if (typeof input.bmcIp !== 'string' || !isIP(input.bmcIp.trim())) throw invalidInput(provisionField('bmcIp'), 'is required: the BMC\'s IPv4 or IPv6 address');
  const bmcIp = input.bmcIp.trim().toLowerCase();
  const vendor = (pathVendor ?? input.vendor ?? '').trim().toLowerCase();
  if (!vendor) throw invalidInput(provisionField('vendor'), `is required: one of ${PROVISION_VENDORS.join(', ')} (or POST /controlnode/provision/<vendor>)`);
  if (!/^[a-z0-9 _-]{1,64}$/.test(vendor)) throw invalidInput(provisionField('vendor'), 'must be a vendor name');
  const driver = driverOfVendor(vendor);

  // Every field as the ISO build will use it, before anything is looked up or written. hostname is
  // optional (the seed marks only bmc_IP and vendor required): without it the NetBox device's name,
  // else a name from the BMC's serial (hostname.ts), once the node is known.
  const askedHostname = (input.hostname ?? '').trim();
  const osUsername = (input.osUsername ?? '').trim() || 'debian';
  const osPassword = input.osPassword ?? null;
  const nicMac = (input.selectedNicMac ?? input.macAddress ?? '').trim() || null;
  const nicName = (input.selectedNic ?? '').trim() || null;
  const fields = {
    hostname: 'input.hostname', osUsername: 'input.osUsername', osPassword: 'input.osPassword', disks: 'input.selectedDisks', poolType: 'input.poolType',
    nicMac: input.selectedNicMac ? 'input.selectedNicMac' : 'input.macAddress', nicName: 'input.selectedNic', gpuPassthrough: 'input.gpuPassthrough',
  } as const;
  renderPreseed({
    hostname: askedHostname || 'checked-placeholder', osUsername, osPassword: osPassword ?? 'a-checked-placeholder', disks: input.selectedDisks ?? [], poolType: input.poolType ?? '',
    nicMac, nicName, network: { mode: 'dhcp' }, gpuPassthrough: input.gpuPassthrough ?? null,
    callback: { baseUrl: 'http://127.0.0.1', jobId: 'check', token: 'c'.repeat(32) }, bmcIp, fields,
  });
  if (input.selectedNicLegacy != null && !/^[a-zA-Z][a-zA-Z0-9._-]{0,14}$/.test(input.selectedNicLegacy)) throw invalidInput(provisionField('selectedNicLegacy'), 'must be an interface name such as eth0');
  for (const name of ['cacheDir', 'outputIso', 'pxePath'] as const) {
    const v = input[name];
    if (v !== undefined && v !== null && v !== '') await confinedPath(provisionField(name), v, ctx.config.isoDir);
  }
  let callbackBase: string | null = null;
  if (input.controlnodeHost) {
    const host = input.controlnodeHost.trim();
    if (!HOST.test(host) && !isIP(host)) throw invalidInput(provisionField('controlnodeHost'), 'must be a host name or IP address the installer reaches the service at');
    const port = (input.controlnodePort ?? '').trim();
    if (port && (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535)) throw invalidInput(provisionField('controlnodePort'), 'must be a port 1..65535');
    callbackBase = `http://${isIP(host) === 6 ? `[${host}]` : host}${port ? `:${port}` : ''}`;
  } else if (input.controlnodePort) {
    throw invalidInput(provisionField('controlnodeHost'), 'is required with controlnode_port');
  }
  const facts: Record<string, unknown> = {};
  for (const name of ['networkRole', 'kubernetesClusterName', 'kubernetesClusterType', 'location', 'zone', 'rackNumber', 'vmSlot', 'arch', 'branch', 'debianVersion', 'pxeServer', 'sysIuri'] as const) {
    const v = input[name];
    if (v === undefined || v === null || v === '') continue;
    if (typeof v !== 'string' || !FACT.test(v)) throw invalidInput(provisionField(name), 'must be at most 128 printable characters');
    facts[name] = v;
  }
  for (const name of ['deviceId', 'prefixId'] as const) {
    const v = input[name];
    if (v === undefined || v === null) continue;
    if (!Number.isInteger(v) || v < 1) throw invalidInput(provisionField(name), 'must be a NetBox id (a positive integer)');
    facts[name] = v;
  }

  const { node, any: taken } = await nodeByBmc(ctx, principal, bmcIp);
  // The system's name, asked for once the caller may provision this node (or enroll into the pool): a default is a NetBox lookup.
  const nameIt = async (): Promise<Named> => {
    const named = askedHostname ? { hostname: askedHostname, source: 'request' as const } : await defaultHostname(ctx, bmcIp, node);
    if (named.hostname === null && node) {
      throw invalidInput(provisionField('hostname'), 'is required here: NetBox names no device for this BMC and the BMC has reported no serial to name it by');
    }
    if (named.hostname === null && input.prefixId != null) {
      throw invalidInput(provisionField('hostname'), 'is required with prefix_id for a BMC no node has yet, unless NetBox names its device: the address is allocated under the host name before the BMC\'s serial is read');
    }
    return named;
  };
  const installParams = (named: Named, generated: boolean, network: StaticAddress | null): InstallParams & Record<string, unknown> => ({
    verb: 'provision', vendor, hostname: named.hostname, hostnameSource: named.source, osUsername, disks: input.selectedDisks!, poolType: input.poolType!, nicMac, nicName,
    gpuPassthrough: input.gpuPassthrough ?? null, callbackBase, stuckSeconds: ctx.config.controlnodeInstallStuckS, role: 'controlnode-os',
    passwordGenerated: generated, ...facts, ...(network ? { network: networkOf(network), netboxIpId: network.netboxIpId } : {}),
  });
  const address = (hostname: string | null, jobId: string) => (hostname === null ? Promise.resolve(null) : staticAddressFor(ctx, input.prefixId ?? null, hostname, jobId));
  if (!node) return provisionNewBmc(ctx, { bmcIp, taken, vendor, driver, name: nameIt, osUsername, osPassword, nicMac, installParams, address, rootPass: !!input.rootPass });
  const named = await nameIt();
  const { hostname } = named;
  const move = decideMove('deploy', node.provisionState as never, node.failedFrom as never);
  if (!move.legal) {
    throw new AppError('INVALID_STATE', `node ${node.id} is ${node.provisionState}: provisioning is a deploy, legal from ${move.legalFrom.join(', ')}`, { nodeId: node.id, state: node.provisionState });
  }

  await refuseOutsideSite(ctx, node.siteId, bmcIp);
  await refuseFullIsoDir(ctx.config.isoDir, ctx.config.isoDirMaxBytes);
  await refuseUnserved(ctx, node.siteId);
  const { secrets, ref, generated } = await keepOsPassword(ctx, node.tenantId, osUsername, osPassword);
  const runId = newId('WorkflowRun');
  let network: StaticAddress | null;
  try {
    network = await address(hostname, runId);
  } catch (error) {
    await secrets.delete(ref, node.tenantId).catch(() => undefined);
    throw error;
  }
  const params = installParams(named, generated, network);
  const data: NodeChange = { provisionState: 'deploying' };
  if (node.bmcDriver !== driver) {
    data.bmcDriver = driver;
    data.driverBindings = { power: driver, management: driver, virtualMedia: driver };
  }
  try {
    await ctx.sql.transaction(async (tx) => {
      const updated = await updateNode(tx, { id: node.id, version: node.version }, {
        data, run: { id: runId, kind: 'metal-install', params },
        events: [{ type: move.event, payload: { verb: 'provision', from: node.provisionState, to: 'deploying', vendor, hostname } }],
      }, ctx.requestId);
      if (!updated) throw new AppError('CONFLICT', `node ${node.id} changed while the job was being recorded; provision again`, { nodeId: node.id });
      await recordControlNodeOs(tx, node.id, node.tenantId, vendor, hostname, osUsername, ref);
    });
  } catch (error) {
    await secrets.delete(ref, node.tenantId).catch(() => undefined);
    if (network && !network.reused) await releaseUnused(ctx, network.netboxIpId);
    throw error;
  }
  if (node.osRef) await secrets.delete(node.osRef, node.tenantId).catch(() => undefined);
  return { jobId: runId, nodeId: node.id, message: `provisioning node ${node.id} (job ${runId}): Building ISO${addressNote(network)}${notesOf(generated, !!input.rootPass)}` };
}

/**
 * The host name of a request that gives none: the NetBox device's name for the BMC (when NetBox is
 * configured and has one), else `node-<serial>` from the serial the node's BMC reported (or
 * register recorded). A BMC no node has yet has no serial read: null, and the install takes it
 * from the serial the enrollment reads (installHostname). A NetBox that fails is the request's
 * failure, never a silent other name.
 */
type Named = { hostname: string | null; source: HostnameSource };

async function defaultHostname(ctx: Context, bmcIp: string, node: BmcNode | undefined): Promise<Named> {
  if (ctx.inventory && ctx.config.netboxUrl) {
    try {
      const name = hostnameFromDeviceName((await ctx.inventory.forBmc(bmcIp, provisionField('bmcIp'))).deviceName);
      if (name) return { hostname: name, source: 'netbox' };
    } catch (error) {
      if (!(error instanceof AppError && error.code === 'NOT_FOUND')) throw error;
    }
  }
  return { hostname: node ? hostnameFromSerial(node.serial) : null, source: 'bmc-serial' };
}

/** The OS password (the request's, else a random one: never a default), kept in the broker; the ISO gets only its crypt hash. */
async function keepOsPassword(ctx: Context, tenantId: string, username: string, password: string | null) {
  const secrets = ctx.secrets;
  if (!secrets) throw new AppError('INVALID_CONFIG', 'no secret broker is configured: the OS password cannot be kept');
  const ref = await secrets.put(tenantId, { username, password: password ?? randomBytes(18).toString('base64url') });
  return { secrets, ref, generated: password === null };
}

/** The BMC address inside its site's networks (issue 21 item 6), before anything is written. */
async function refuseOutsideSite(ctx: Context, siteId: string, bmcIp: string): Promise<void> {
  const { rows: [site] } = await ctx.sql.query<{ bmcNetworks: string[] }>('SELECT bmc_networks AS "bmcNetworks" FROM site WHERE id = $1', [siteId]);
  await checkBmcNetwork(bmcIp, site?.bmcNetworks ?? [], ctx.config.bmcNetworks, provisionField('bmcIp'));
}

/**
 * Every BMC call of the job runs through the site's agent: with none serving the site, the job
 * would only wait for its commands to expire, so it is refused now, as power is.
 */
async function refuseUnserved(ctx: Context, siteId: string): Promise<void> {
  if (!(await siteIsServed(ctx, siteId))) {
    throw new AppError('INVALID_STATE', `no site agent serves site ${siteId} (no heartbeat within ${ctx.config.agentHeartbeatMs / 1000} s): the job's BMC calls would never run`, { siteId });
  }
}

/**
 * Releases an address this request allocated when its job was not recorded, unless a recorded job
 * uses it after all: a concurrent provision of the same host name found it in NetBox (by its DNS
 * name) and won the race this request lost.
 */
async function releaseUnused(ctx: Context, netboxIpId: number): Promise<void> {
  const { rows: [used] } = await ctx.sql.query(
    `SELECT 1 FROM workflow_run WHERE status IN ('queued', 'running', 'waiting', 'aborting', 'succeeded')
        AND (params->>'netboxIpId' = $1 OR params->'then'->'params'->>'netboxIpId' = $1) LIMIT 1`,
    [String(netboxIpId)],
  );
  if (!used) await ctx.inventory?.releaseAddress(netboxIpId);
}

/** The preseed's static network of an address from NetBox. */
const networkOf = (allocated: StaticAddress) => ({ mode: 'static' as const, address: allocated.address, prefixLength: allocated.prefixLength, gateway: allocated.gateway, nameservers: allocated.nameservers });
const addressNote = (allocated: StaticAddress | null) => (allocated ? `; OS address ${allocated.address}/${allocated.prefixLength} from NetBox's prefix ${allocated.prefix}${allocated.reused ? ' (the one it already holds for this host name)' : ''}, gateway ${allocated.gateway}` : '');

/**
 * prefix_id's static address (issue 11: "static addressing from the IPAM fields"), from NetBox;
 * null without prefix_id (DHCP on the chosen NIC). Taken after every other check, so a refused
 * request allocates nothing; the caller releases a new one when the job is not recorded.
 */
async function staticAddressFor(ctx: Context, prefixId: number | null, hostname: string, jobId: string): Promise<StaticAddress | null> {
  if (prefixId === null) return null;
  if (!ctx.inventory) throw new AppError('INVALID_CONFIG', 'input.prefixId: this process has no NetBox client (ROLE=worker): send provision to an api process', { field: 'input.prefixId' });
  try {
    return await ctx.inventory.staticAddress(prefixId, hostname, `control node ${hostname} (metal job ${jobId})`, 'input.prefixId');
  } catch (error) {
    if (error instanceof AppError && error.code === 'INVALID_CONFIG' && !ctx.config.netboxUrl) {
      throw new AppError('INVALID_CONFIG', `input.prefixId: the static address comes from NetBox, which is not configured (NETBOX_URL, NETBOX_TOKEN or NETBOX_TOKEN_FILE)`, { field: 'input.prefixId' });
    }
    throw error;
  }
}

const notesOf = (generated: boolean, rootPass: boolean) => {
  const notes = [
    generated ? 'no os_password was given: a random one was generated and kept in the secret broker' : null,
    rootPass ? 'root_pass is not used: root\'s login is disabled and the user gets sudo' : null,
  ].filter(Boolean);
  return notes.length ? `; ${notes.join('; ')}` : '';
};

/** The default BMC user and password for new BMC addresses (CONTROLNODE_BMC_CREDENTIALS_FILE: `user:password`), read at each use. */
export async function defaultBmcCredentials(file: string): Promise<{ username: string; password: string }> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch {
    throw new AppError('INVALID_CONFIG', `CONTROLNODE_BMC_CREDENTIALS_FILE (${file}) cannot be read`);
  }
  const line = text.split(/\r?\n/).find((l) => l.trim() !== '') ?? '';
  const colon = line.indexOf(':');
  const username = colon > 0 ? line.slice(0, colon).trim() : '';
  const password = colon > 0 ? line.slice(colon + 1) : '';
  // Never the file's content in the message: it is a password.
  if (!username || !password || /[\x00-\x1f]/.test(username + password)) throw new AppError('INVALID_CONFIG', `CONTROLNODE_BMC_CREDENTIALS_FILE (${file}) must hold one line user:password`);
  return { username, password };
}

interface NewBmc {
  bmcIp: string;
  /** Whether a node (any tenant's) already has this BMC address. */
  taken: boolean;
  vendor: string; driver: string;
  /** The system's name, asked for once the caller may enroll into the pool (its hostname null: from the serial the enrollment reads). */
  name: () => Promise<Named>;
  osUsername: string; osPassword: string | null; nicMac: string | null; rootPass: boolean;
  installParams: (named: Named, generated: boolean, network: StaticAddress | null) => InstallParams & Record<string, unknown>;
  address: (hostname: string | null, jobId: string) => Promise<StaticAddress | null>;
}

/**
 * Provision of a BMC address no node has (issue 11: "a BMC address not yet known is enrolled into
 * a configured default site and pool with the vendor's Redfish flavour first"): a metal enroll
 * into CONTROLNODE_POOL_ID's pool (and site) with the vendor's driver, the site's BMC TLS trust and
 * the default credentials of CONTROLNODE_BMC_CREDENTIALS_FILE (into the broker), and the
 * installer NIC's MAC as the machine's (without one it waits for confirmMac). Its run is the
 * job: enroll, inspect and commission chain as for any node, and the install is its `then`, which
 * the engine starts when the chain reaches ready. Without both settings such an address is
 * NOT_FOUND, as is one a node the caller cannot see has (it is not enrolled twice).
 */
async function provisionNewBmc(ctx: Context, newBmc: NewBmc): Promise<ProvisionResult> {
  const { controlnodeBmcCredentialsFile: file, controlnodePoolId: poolId } = ctx.config;
  const unknown = () => new AppError('NOT_FOUND', `no node has this BMC address (bmc_IP): register it (POST /controlnode/register) or enroll it (POST /api/compute/metal/enroll) first${file && poolId ? '' : ', or set CONTROLNODE_POOL_ID and CONTROLNODE_BMC_CREDENTIALS_FILE so provision enrolls new BMC addresses'}`, { field: provisionField('bmcIp') });
  if (!file || !poolId) throw unknown();
  // The caller must be allowed to enroll into that pool before anything is read, written or told.
  const { rows: [pool] } = await ctx.sql.query<{ id: string; tenantId: string; siteId: string }>('SELECT id, tenant_id AS "tenantId", site_id AS "siteId" FROM pool WHERE id = $1', [poolId]);
  if (!pool) throw new AppError('INVALID_CONFIG', `CONTROLNODE_POOL_ID names no pool (${poolId})`);
  decideOnControlnodePool(requirePrincipal(ctx), pool);
  // A node any tenant has at this address, in any of the forms enroll keeps, is never enrolled twice.
  if (newBmc.taken) throw unknown();
  await refuseOutsideSite(ctx, pool.siteId, newBmc.bmcIp);
  const named = await newBmc.name();
  if (!ctx.secrets) throw new AppError('INVALID_CONFIG', 'no secret broker is configured: the OS password cannot be kept');
  const credentials = await defaultBmcCredentials(file);
  const driverOptions = await controlnodeBmcOptions(ctx.config);
  await refuseFullIsoDir(ctx.config.isoDir, ctx.config.isoDirMaxBytes);
  await refuseUnserved(ctx, pool.siteId);
  const { secrets, ref, generated } = await keepOsPassword(ctx, pool.tenantId, newBmc.osUsername, newBmc.osPassword);
  const jobId = newId('WorkflowRun');
  let nodeId: string;
  let network: StaticAddress | null = null;
  try {
    network = await newBmc.address(named.hostname, jobId);
    nodeId = await enroll(ctx, {
      // The installer's NIC (selected_nic_mac / mac_address) is the operator's word for the machine's
      // MAC, as enroll's macs are; without one the enrollment waits for confirmMac like any other.
      poolId, name: named.hostname, bmc: { address: newBmc.bmcIp, driver: newBmc.driver, credentials, driverOptions }, macs: newBmc.nicMac ? [newBmc.nicMac] : [],
    }, {
      runId: jobId, addressField: provisionField('bmcIp'),
      runParams: { verb: 'enroll', jobId, then: { kind: 'metal-install', params: newBmc.installParams(named, generated, network) } },
      inTransaction: async (tx, id) => {
        // One node per BMC address (locked by its canonical host): a concurrent provision of the same new address loses here.
        await tx.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`bmc-address:${bmcHostOf(newBmc.bmcIp)}`]);
        if ((await nodesWithBmc(tx, newBmc.bmcIp, id)).length) {
          throw new AppError('CONFLICT', 'this BMC address (bmc_IP) was enrolled concurrently; provision again', { field: provisionField('bmcIp') });
        }
        await recordControlNodeOs(tx, id, pool.tenantId, newBmc.vendor, named.hostname, newBmc.osUsername, ref);
      },
    });
  } catch (error) {
    await secrets.delete(ref, pool.tenantId).catch(() => undefined);
    if (network && !network.reused) await releaseUnused(ctx, network.netboxIpId);
    throw error;
  }
  return {
    jobId, nodeId,
    message: `enrolling the new BMC ${newBmc.bmcIp} as node ${nodeId} (job ${jobId}): it is verified, inspected and commissioned, then installed${named.hostname === null ? ' (its host name from the serial the BMC reports)' : ''}${addressNote(network)}${notesOf(generated, newBmc.rootPass)}`,
  };
}

export interface UnprovisionInput { bmcIp: string; bmcUser?: string | null; bmcPass?: string | null; vendor?: string | null }

/**
 * POST /controlnode/unprovision: the metal undeploy of the node whose BMC has this address (legal
 * from deployed): its release workflow wipes the disks (a quick wipe, attested per disk by the
 * ramdisk; an unattested wipe ends UNVERIFIED_WIPE, as the metal group's rule says) and powers off,
 * then ready. bmc_user/bmc_pass, when given, replace the node's BMC credentials first (in the
 * broker), and vendor its Redfish flavour. Decided as compute:nodes:provision on the node.
 */
export async function unprovisionControlNode(ctx: Context, input: UnprovisionInput): Promise<ProvisionResult> {
  const principal = requirePrincipal(ctx);
  if (typeof input.bmcIp !== 'string' || !isIP(input.bmcIp.trim())) throw invalidInput(unprovisionField('bmcIp'), 'is required: the BMC\'s IPv4 or IPv6 address');
  const bmcIp = input.bmcIp.trim().toLowerCase();
  const user = (input.bmcUser ?? '').trim() || null;
  const pass = input.bmcPass ? input.bmcPass : null;
  if ((user === null) !== (pass === null)) throw invalidInput(unprovisionField(user === null ? 'bmcUser' : 'bmcPass'), 'the BMC credentials are a pair: give bmc_user and bmc_pass together');
  const vendor = (input.vendor ?? '').trim().toLowerCase();
  if (vendor && !/^[a-z0-9 _-]{1,64}$/.test(vendor)) throw invalidInput(unprovisionField('vendor'), 'must be a vendor name');
  const { node } = await nodeByBmc(ctx, principal, bmcIp);
  if (!node) throw new AppError('NOT_FOUND', 'no node has this BMC address (bmc_IP)', { field: unprovisionField('bmcIp') });
  const move = decideMove('undeploy', node.provisionState as never);
  if (!move.legal) throw new AppError('INVALID_STATE', `node ${node.id} is ${node.provisionState}: unprovisioning is an undeploy, legal from ${move.legalFrom.join(', ')}`, { nodeId: node.id, state: node.provisionState });
  const data: NodeChange = {};
  const driver = vendor ? driverOfVendor(vendor) : node.bmcDriver;
  if (driver !== node.bmcDriver) {
    data.bmcDriver = driver;
    data.driverBindings = { power: driver, management: driver, virtualMedia: driver };
  }
  let ref: string | null = null;
  if (user && pass) {
    if (!ctx.secrets) throw new AppError('INVALID_CONFIG', 'no secret broker is configured: the BMC credentials cannot be kept');
    ref = await ctx.secrets.put(node.tenantId, { username: user, password: pass });
    data.bmcCredentialsRef = ref;
  }
  // The new credentials and driver are written in the undeploy's own commit: all of it or nothing.
  let result: VerbResult;
  try {
    result = await runMoveVerb(ctx, 'undeploy', node.id, { wipe: 'quick', nodeChange: data, expectedVersion: node.version });
  } catch (error) {
    if (ref) await ctx.secrets!.delete(ref, node.tenantId).catch(() => undefined);
    throw error;
  }
  if (ref && node.bmcCredentialsRef) await ctx.secrets!.delete(node.bmcCredentialsRef, node.tenantId).catch(() => undefined);
  const jobId = result.row?.workflowId;
  if (!jobId) throw new Error(`undeploy of node ${node.id} recorded no run`);
  return { jobId, nodeId: node.id, message: `unprovisioning node ${node.id} (job ${jobId}): wiping its disks (quick, attested per disk), then powering off` };
}

const unprovisionField = (name: keyof UnprovisionInput) => `input.${name}`;
