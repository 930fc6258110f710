/**
 * What enroll checks for a node any of whose bindings is a Redfish driver, before anything is
 * written: the address and driverOptions the driver would otherwise refuse at its first call, long
 * after the node was stored (a workflow failing with BMC_TLS or BMC_UNREACHABLE for a typo). The
 * address and TLS rules are client.ts's own (bmcOrigin, tlsOf), so enroll and the driver cannot
 * disagree; this file only turns their RedfishConfigError into the field enroll names.
 */
import { bmcOrigin, RedfishConfigError, tlsOf } from './client';

/** The Redfish driver names (REDFISH_FLAVOURS' names; a test keeps the two equal). */
export const REDFISH_DRIVER_NAMES: readonly string[] = ['redfish', 'idrac', 'ilo', 'xcc', 'cimc', 'supermicro'];

export function isRedfishDriver(name: string): boolean {
  return REDFISH_DRIVER_NAMES.includes(name);
}

export class RedfishNodeError extends Error {
  /** `bmc.address` or `bmc.driverOptions.<key>`, as enroll's INVALID_INPUT names it. */
  constructor(readonly field: string, readonly reason: string) {
    super(`${field}: ${reason}`);
    this.name = 'RedfishNodeError';
  }
}

// A ComputerSystem Id is one segment of its URI (Redfish: the last segment of @odata.id).
const SYSTEM_ID = /^[^/?#\s]{1,255}$/;

/** Throws RedfishNodeError naming the first field the Redfish drivers would refuse. */
export function checkRedfishNode(address: string, options: Readonly<Record<string, unknown>> | null | undefined): void {
  const o = options ?? {};
  try {
    bmcOrigin(address);
    tlsOf(o);
  } catch (e) {
    if (e instanceof RedfishConfigError) throw new RedfishNodeError(`bmc.${e.field}`, e.message);
    throw e;
  }
  if (o.systemId !== undefined && (typeof o.systemId !== 'string' || !SYSTEM_ID.test(o.systemId))) {
    throw new RedfishNodeError('bmc.driverOptions.systemId', 'must be the Id of one member of the BMC\'s Systems: a non-empty string of at most 255 characters, with no /, ?, # or space');
  }
}
