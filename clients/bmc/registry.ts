import { BmcError, type BmcDriver } from './driver';

/**
 * Which driver serves which interface of a node: its driver bindings (power, management,
 * virtualMedia; set at enroll from the BMC driver and the hardware profile) resolved against the
 * drivers this process registered. An interface bound to `none`, or to a driver this process does
 * not have, is BMC_UNSUPPORTED naming the binding, before anything is sent.
 */
export type DriverInterface = 'power' | 'management' | 'virtualMedia';

export interface NodeBindings {
  power: string;
  management: string;
  virtualMedia: string;
}

export class DriverRegistry {
  private drivers = new Map<string, BmcDriver>();

  register(driver: BmcDriver): this {
    if (this.drivers.has(driver.name)) throw new Error(`BMC driver ${driver.name} is registered twice`);
    this.drivers.set(driver.name, driver);
    return this;
  }

  names(): string[] {
    return [...this.drivers.keys()].sort();
  }

  /** The driver bound to `iface` for a node with these bindings. */
  resolve(bindings: Partial<NodeBindings> | null | undefined, iface: DriverInterface): BmcDriver {
    const name = bindings?.[iface];
    if (!name || name === 'none') throw new BmcError('BMC_UNSUPPORTED', `the node has no ${iface} driver (driverBindings.${iface} is ${name ?? 'unset'})`);
    const driver = this.drivers.get(name);
    if (!driver) throw new BmcError('BMC_UNSUPPORTED', `driverBindings.${iface}: no BMC driver "${name}" here (have: ${this.names().join(', ') || 'none'})`);
    if (iface === 'virtualMedia' && !driver.capabilities.virtualMedia) {
      throw new BmcError('BMC_UNSUPPORTED', `driverBindings.virtualMedia: driver ${name} has no virtual media`);
    }
    return driver;
  }
}
