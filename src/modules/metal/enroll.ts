import { PLACEHOLDER_UUIDS } from '../../../clients/bmc/redfish/inventory';
import { isIP } from 'node:net';
import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { absent, decide } from '../../auth/decide';
import { AppError, invalidInput } from '../../errors';
import { newId } from '../../ids';
import { createNode, type Runner } from './node-store';
import type { NodeRow } from './node-rows';
import { isSecretRef } from '../../../clients/secrets/broker';
import { checkIpmiNode, IpmiConfigError } from '../../../clients/bmc/ipmi/options';
import { checkRedfishNode, isRedfishDriver, RedfishNodeError } from '../../../clients/bmc/redfish/check';
import { poolResource } from '../tenancy/resources';
import { readPolicy } from '../tenancy/pool';
import { BMC_DRIVERS, type DriverBindings } from '../tenancy/tenancy';
import { VERBS } from './states';
import type { RunParams } from './verbs';
import { MAX_MACS, lockMacs, machineMac, refuseTakenMacs } from './mac';
import { checkBmcNetwork } from './bmc-networks';

export interface EnrollInput {
  poolId: string;
  siteId?: string | null;
  name?: string | null;
  bmc: {
    address: string;
    driver: string;
    credentials: string | { username: string; password: string };
    driverOptions?: unknown;
  };
  hardwareProfile?: string | null;
  addresses?: string[] | null;
  macs?: string[] | null;
  productUuid?: string | null;
}

/** Drivers that cannot report the machine's MACs out of band. */
const NO_MAC_REPORTING = new Set(['ipmi']);
/**
 * Credential-looking driverOptions keys, matched on the key lowercased with `_` and `-` removed, so
 * `BMC_Key`, `snmp-community` and `ipmiKg` are caught as `bmcKey`, `snmpCommunity` and `kg` are.
 * Words anywhere in the key, then endings (`...key`, `...kg`: the IPMI K_g key), then beginnings.
 */
const CREDENTIAL_WORDS = ['pass', 'pwd', 'secret', 'token', 'cred', 'auth', 'login', 'user', 'community', 'psk', 'privatekey', 'privkey', 'apikey'];
const CREDENTIAL_ENDINGS = ['key', 'kg', 'pw'];
const CREDENTIAL_BEGINNINGS = ['kg', 'key'];
export function looksLikeCredential(key: string): boolean {
  const k = key.toLowerCase().replace(/[_-]/g, '');
  return CREDENTIAL_WORDS.some((w) => k.includes(w)) ||
    CREDENTIAL_ENDINGS.some((e) => k.endsWith(e)) ||
    CREDENTIAL_BEGINNINGS.some((b) => k.startsWith(b));
}
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const HOST = /^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/** host, IPv4, [IPv6], optionally with :port, or an https:// URL of the BMC. */
function checkBmcAddress(address: string): string {
  const value = address.trim();
  if (/^https?:\/\//i.test(value)) {
    try {
      return new URL(value).toString();
    } catch {
      throw invalidInput('bmc.address', 'is not a valid URL');
    }
  }
  const bracketed = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(value);
  if (bracketed && isIP(bracketed[1]!) === 6) return value;
  if (isIP(value)) return value;
  const [host, port, ...rest] = value.split(':');
  if (rest.length === 0 && HOST.test(host ?? '') && (port === undefined || (/^\d{1,5}$/.test(port) && Number(port) <= 65535))) return value;
  throw invalidInput('bmc.address', 'must be a host name, an IP literal (with an optional :port) or an http(s) URL');
}

function checkDriverOptions(options: unknown): Record<string, unknown> {
  if (options === undefined || options === null) return {};
  if (typeof options !== 'object' || Array.isArray(options)) throw invalidInput('bmc.driverOptions', 'must be a JSON object');
  // A PEM certificate (Redfish caCert) alone is over 1 KiB for an RSA key, which most BMCs have: it has a limit of its own.
  const { caCert, ...others } = options as Record<string, unknown>;
  if (typeof caCert === 'string' && Buffer.byteLength(caCert) > 16384) throw invalidInput('bmc.driverOptions.caCert', 'must be at most 16 KiB');
  if (Buffer.byteLength(JSON.stringify(typeof caCert === 'string' ? others : options)) > 1024) {
    throw invalidInput('bmc.driverOptions', 'must be at most 1 KiB as JSON (a caCert string aside)');
  }
  const walk = (value: unknown, path: string): void => {
    if (!value || typeof value !== 'object') return;
    for (const [key, inner] of Object.entries(value)) {
      if (looksLikeCredential(key)) {
        throw invalidInput(`${path}.${key}`, 'looks like a credential: credentials travel only as bmc.credentials');
      }
      walk(inner, `${path}.${key}`);
    }
  };
  walk(options, 'bmc.driverOptions');
  return options as Record<string, unknown>;
}

/** Bindings from the BMC's driver; a hardware profile's bindings then take precedence. */
function bindingsFor(driver: string, profile: DriverBindings | null): DriverBindings {
  const fromBmc: DriverBindings = { power: driver, management: driver, virtualMedia: NO_MAC_REPORTING.has(driver) ? 'none' : driver };
  return profile ? { ...fromBmc, ...profile } : fromBmc;
}

/**
 * enroll: creates a metal node in enrolling from a BMC address, driver and credentials, in one
 * transaction with its node.enrolled event and its metal-enroll run (and the job naming it). Decided as compute:nodes:provision
 * on the pool. Inline credentials go to the secret broker before anything else is written.
 */
export interface EnrollOptions {
  /** The enroll run's id, chosen by the caller (control-node provision: its job). */
  runId?: string;
  /** More intent for the enroll run and the runs it chains to (provision's install: `then`). */
  runParams?: RunParams;
  /** Written in the node's transaction, after the node (provision's bmc_info record). */
  inTransaction?: (tx: Runner, nodeId: string) => Promise<void>;
  /** The field a refused BMC address is named as (provision: input.bmcIp). */
  addressField?: string;
}

export async function enroll(ctx: Context, input: EnrollInput, opts: EnrollOptions = {}): Promise<string> {
  return (await enrollNode(ctx, input, opts)).nodeId;
}

/** enroll, answering the node as its statement wrote it too (the GraphQL payload's node, with no read of its own). */
export async function enrollNode(ctx: Context, input: EnrollInput, opts: EnrollOptions = {}): Promise<{ nodeId: string; row: NodeRow }> {
  const principal = requirePrincipal(ctx);
  // Enroll is the fleet's first call (2,000 machines at once): its reads and its transaction go
  // through Sql's named statements, not Prisma (about 20 ms of CPU per enroll went to Prisma's client).
  const { rows: pools } = await ctx.sql.query<{ id: string; tenantId: string; siteId: string; policy: unknown; bmcNetworks: string[] }>(
    `SELECT p.id, p.tenant_id AS "tenantId", p.site_id AS "siteId", p.policy, s.bmc_networks AS "bmcNetworks"
       FROM pool p JOIN site s ON s.id = p.site_id WHERE p.id = $1`, [input.poolId]);
  const pool = pools[0];
  if (!pool) throw absent('Pool', input.poolId);
  decide(principal, 'compute:nodes:provision', poolResource(pool));
  if (input.siteId && input.siteId !== pool.siteId) throw invalidInput('siteId', `is not the site of pool ${pool.id}`);

  const driver = input.bmc.driver;
  if (!(BMC_DRIVERS as readonly string[]).includes(driver)) throw invalidInput('bmc.driver', `must be one of ${BMC_DRIVERS.join(', ')}`);
  const address = checkBmcAddress(input.bmc.address);
  const driverOptions = checkDriverOptions(input.bmc.driverOptions);

  const addresses = input.addresses ?? [];
  if (addresses.length > 16) throw invalidInput('addresses', 'at most 16 addresses');
  addresses.forEach((a, i) => {
    if (!isIP(a)) throw invalidInput(`addresses[${i}]`, 'is not an IP literal');
  });
  if ((input.macs?.length ?? 0) > MAX_MACS) throw invalidInput('macs', `at most ${MAX_MACS} MACs`);
  const macs = [...new Set((input.macs ?? []).map((m, i) => machineMac(m, `macs[${i}]`)))];
  let productUuid: string | null = null;
  if (input.productUuid) {
    if (!UUID.test(input.productUuid)) throw invalidInput('productUuid', 'must be a UUID');
    productUuid = input.productUuid.toLowerCase();
  }
  if (NO_MAC_REPORTING.has(driver) && macs.length === 0) {
    if (!productUuid) throw invalidInput('macs', 'this driver cannot report MACs: give macs or productUuid');
    if (PLACEHOLDER_UUIDS.has(productUuid)) {
      throw invalidInput('productUuid', 'is a firmware placeholder and cannot stand in for the MACs: give macs');
    }
  }

  const profileName = input.hardwareProfile ?? readPolicy(pool.policy).hardwareProfile;
  let profile: { id: string; driverBindings: DriverBindings } | null = null;
  if (profileName) {
    const { rows: [row] } = await ctx.sql.query<{ id: string; driverBindings: unknown }>(
      'SELECT id, driver_bindings AS "driverBindings" FROM hardware_profile WHERE name = $1', [profileName]);
    if (!row) throw invalidInput(input.hardwareProfile ? 'hardwareProfile' : 'pool.policy.hardwareProfile', 'no hardware profile has this name');
    profile = { id: row.id, driverBindings: row.driverBindings as unknown as DriverBindings };
  }

  // What the IPMI or Redfish driver could never use (a URL for IPMI, cipher suite 0, a path or a bad
  // caCert for Redfish), refused before anything is written.
  const bound = Object.values(bindingsFor(driver, profile?.driverBindings ?? null));
  if (bound.includes('ipmi')) {
    try {
      checkIpmiNode(address, driverOptions);
    } catch (e) {
      if (e instanceof IpmiConfigError) throw invalidInput(e.field, e.reason);
      throw e;
    }
  }
  if (bound.some(isRedfishDriver)) {
    try {
      checkRedfishNode(address, driverOptions);
    } catch (e) {
      if (e instanceof RedfishNodeError) throw invalidInput(e.field, e.reason);
      throw e;
    }
  }

  // Where the agent would connect: inside the site's BMC networks (issue 21 item 6).
  await checkBmcNetwork(address, pool.bmcNetworks, ctx.config.bmcNetworks, opts.addressField ?? 'bmc.address');

  // Checked before the broker is written (a refusal has no side effect), and again under the site's
  // MAC lock in the transaction, where a concurrent enroll or confirmMac of the same MAC shows.
  await refuseTakenMacs(ctx.sql, pool.siteId, macs);

  // Credentials: a reference as given, or inline ones to the broker before anything else is written.
  let credentialsRef: string;
  const credentials = input.bmc.credentials;
  if (typeof credentials === 'string') {
    if (!isSecretRef(credentials)) throw invalidInput('bmc.credentials', 'must be a secret:// reference or { username, password }');
    credentialsRef = credentials;
  } else {
    if (!credentials.username || !credentials.password) throw invalidInput('bmc.credentials', 'needs username and password');
    if (!ctx.secrets) throw new AppError('INVALID_CONFIG', 'no secret broker is configured: pass bmc.credentials as a secret:// reference');
    credentialsRef = await ctx.secrets.put(pool.tenantId, { username: credentials.username, password: credentials.password });
  }

  const owner = pool;
  const id = newId('MetalNode');
  let row: NodeRow | null = null;
  const writeNode = () =>
    ctx.sql.transaction(async (tx) => {
      if (macs.length) {
        await lockMacs(tx, owner.siteId, macs);
        await refuseTakenMacs(tx, owner.siteId, macs);
      }
      row = await createNode(tx, {
        id,
        tenantId: owner.tenantId,
        siteId: owner.siteId,
        poolId: owner.id,
        name: input.name ?? null,
        provisionState: VERBS.enroll.to,
        bmcAddress: address,
        bmcDriver: driver,
        bmcDriverOptions: driverOptions,
        bmcCredentialsRef: credentialsRef,
        addresses,
        macs,
        productUuid,
        hardwareProfileId: profile?.id ?? null,
        driverBindings: { ...bindingsFor(driver, profile?.driverBindings ?? null) },
      }, {
        // The enroll workflow's run carries the intent; its job names only the run.
        run: { id: opts.runId ?? newId('WorkflowRun'), kind: 'metal-enroll', params: { verb: 'enroll', ...opts.runParams } satisfies RunParams },
        events: [{ type: VERBS.enroll.event, payload: { verb: 'enroll', to: VERBS.enroll.to, bmc: { address, driver } } }],
      }, ctx.requestId);
      if (opts.inTransaction) await opts.inTransaction(tx, id);
    });
  const stored = typeof credentials === 'string' ? null : credentialsRef;
  try {
    await writeNode();
  } catch (error) {
    // The broker was written first, as the seed orders; a node that was never written must not
    // leave its credentials behind.
    if (stored) {
      await ctx.secrets!.delete(stored, owner.tenantId).catch((cleanup: unknown) =>
        ctx.log.error({ err: cleanup, secret: stored }, 'enroll failed and its inline credentials could not be removed'),
      );
    }
    throw error;
  }
  return { nodeId: id, row: row! };
}
