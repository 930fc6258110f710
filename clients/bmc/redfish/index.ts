/**
 * The Redfish drivers a site agent registers: the generic one (`redfish`) and the vendor flavours,
 * all sharing one transport (pools, sessions, service roots per BMC). Close the transport when the
 * agent stops: it logs out of the cached sessions and closes the connections.
 */
import type { BmcDriver } from '../driver';
import { RedfishTransport, type TransportOptions } from './client';
import type { DriverTuning } from './call';
import { RedfishDriver } from './driver';
import { redfishGeneric, type RedfishFlavour } from './flavour';
import { cimc } from './cimc';
import { idrac } from './idrac';
import { ilo } from './ilo';
import { supermicro } from './supermicro';
import { xcc } from './xcc';

export { RedfishTransport, bmcOrigin, type TransportOptions } from './client';
export type { DriverTuning } from './call';
export { RedfishDriver } from './driver';
export { redfishGeneric, type RedfishFlavour } from './flavour';
export { POWER_PLANS } from './power';

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
