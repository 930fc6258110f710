import { DriverRegistry } from './registry';
import { redfishDrivers } from './redfish';
import { ipmiDriver } from './ipmi';

/**
 * The drivers a site agent (remote or built-in) runs unless it is given a registry: the ONE place
 * that lists them: the Redfish driver with its vendor flavours (redfish, idrac, ilo, xcc, cimc,
 * supermicro; clients/bmc/redfish) and IPMI (clients/bmc/ipmi.ts). A node bound to a driver not
 * registered here gets BMC_UNSUPPORTED naming the binding.
 */
export function defaultDriverRegistry(): DriverRegistry {
  const registry = new DriverRegistry();
  for (const driver of redfishDrivers()) registry.register(driver);
  registry.register(ipmiDriver());
  return registry;
}
