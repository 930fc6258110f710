import { DriverRegistry } from './registry';

/**
 * The drivers a site agent (remote or built-in) runs unless it is given a registry: the ONE place
 * that lists them. The Redfish driver with its vendor flavours (clients/bmc/redfish) and the IPMI
 * driver (clients/bmc/ipmi) register here as they land; a node bound to a driver not registered
 * here gets BMC_UNSUPPORTED naming the binding.
 */
export function defaultDriverRegistry(): DriverRegistry {
  return new DriverRegistry();
}
