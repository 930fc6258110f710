/**
 * The Redfish drivers a site agent registers: the generic one (`redfish`) and the vendor flavours,
 * all sharing one transport (pools, sessions, service roots per BMC). Close the transport when the
 * agent stops: it logs out of the cached sessions and closes the connections.
 */
import type { BmcDriver } from '../driver';
import { RedfishTransport, type TransportOptions } from './client';
import { RedfishDriver, redfishGeneric, type DriverTuning, type RedfishFlavour } from './driver';
import { cimc } from './cimc';
import { idrac } from './idrac';
import { ilo } from './ilo';
import { supermicro } from './supermicro';
import { xcc } from './xcc';

export { RedfishTransport, bmcOrigin, type TransportOptions } from './client';
export { RedfishDriver, POWER_PLANS, redfishGeneric, type DriverTuning, type RedfishFlavour } from './driver';

export const REDFISH_FLAVOURS: readonly RedfishFlavour[] = [redfishGeneric, idrac, ilo, xcc, cimc, supermicro];

let shared: RedfishTransport | null = null;

/** The process's own transport, for redfishDrivers() without one. */
export function sharedRedfishTransport(): RedfishTransport {
  shared ??= new RedfishTransport();
  return shared;
}

/** Closes the shared transport (agent shutdown); the next redfishDrivers() call makes a new one. */
export async function closeSharedRedfishTransport(): Promise<void> {
  const t = shared;
  shared = null;
  await t?.close();
}

export interface RedfishDriversOptions extends DriverTuning {
  transport?: RedfishTransport;
  /** Used only when no transport is given and the shared one does not exist yet. */
  transportOptions?: TransportOptions;
}

/** redfish, idrac, ilo, xcc, cimc, supermicro. */
export function redfishDrivers(opts: RedfishDriversOptions = {}): BmcDriver[] {
  const { transport, transportOptions, ...tuning } = opts;
  const t = transport ?? (shared ??= new RedfishTransport(transportOptions));
  return REDFISH_FLAVOURS.map((f) => new RedfishDriver(f, t, tuning));
}
