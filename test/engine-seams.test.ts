/**
 * The two interfaces the workflow engine stands on (issue 9): the BMC driver registry resolved
 * from a node's driver bindings, and the step result type with its guards.
 */
import { BmcError, type BmcDriver, type DriverCapabilities } from '../clients/bmc/driver';
import { DriverRegistry } from '../clients/bmc/registry';
import { complete, continueAfter, failed, MAX_CONTINUE_MS, retryDelayMs, waitUntil } from '../jobs/steps';

function driver(name: string, caps: Partial<DriverCapabilities> = {}): BmcDriver {
  const refuse = async (): Promise<never> => { throw new BmcError('BMC_ERROR', 'not used by this test'); };
  return {
    name,
    capabilities: { reportsMacs: true, virtualMedia: true, nmi: true, persistentBoot: true, bootMode: true, ...caps },
    powerState: refuse, power: refuse, setBootDevice: refuse, insertMedia: refuse, ejectMedia: refuse, inventory: refuse,
  };
}

describe('the BMC driver registry', () => {
  const registry = new DriverRegistry().register(driver('redfish')).register(driver('ipmi', { reportsMacs: false, virtualMedia: false }));

  it('resolves each interface from the node\'s bindings', () => {
    expect(registry.resolve({ power: 'ipmi', management: 'redfish', virtualMedia: 'redfish' }, 'power').name).toBe('ipmi');
    expect(registry.resolve({ power: 'ipmi', management: 'redfish', virtualMedia: 'redfish' }, 'management').name).toBe('redfish');
  });

  it.each([
    [{ power: 'redfish', management: 'redfish', virtualMedia: 'none' }, 'virtualMedia', 'driverBindings.virtualMedia is none'],
    [{ power: 'idrac', management: 'redfish', virtualMedia: 'none' }, 'power', 'driverBindings.power: no BMC driver "idrac"'],
    [{ power: 'ipmi', management: 'ipmi', virtualMedia: 'ipmi' }, 'virtualMedia', 'driver ipmi has no virtual media'],
    [null, 'power', 'driverBindings.power is unset'],
  ] as const)('%j for %s is BMC_UNSUPPORTED naming the binding', (bindings, iface, message) => {
    let error: unknown;
    try { registry.resolve(bindings, iface); } catch (e) { error = e; }
    expect(error).toBeInstanceOf(BmcError);
    expect((error as BmcError).code).toBe('BMC_UNSUPPORTED');
    expect((error as Error).message).toContain(message);
  });

  it('refuses a driver registered twice', () => {
    expect(() => new DriverRegistry().register(driver('redfish')).register(driver('redfish'))).toThrow('registered twice');
  });
});

describe('step results', () => {
  it('builds each kind', () => {
    expect(complete()).toEqual({ kind: 'complete' });
    expect(continueAfter(1500.2, 'power change not visible yet')).toEqual({ kind: 'continue', afterMs: 1501, message: 'power change not visible yet' });
    const until = new Date(Date.now() + 60_000);
    expect(waitUntil(until, 'the ramdisk inventory')).toEqual({ kind: 'wait', until, for: 'the ramdisk inventory' });
    expect(failed('BMC_TIMEOUT', 'no answer in 30 s', true)).toEqual({ kind: 'failed', code: 'BMC_TIMEOUT', message: 'no answer in 30 s', retryable: true });
  });

  it.each([0, -1, Number.NaN, Number.POSITIVE_INFINITY, MAX_CONTINUE_MS + 1])('continueAfter(%p) is refused', (ms) => {
    expect(() => continueAfter(ms)).toThrow(RangeError);
  });

  it('a wait needs a future deadline and a failure an error code', () => {
    expect(() => waitUntil(new Date(Date.now() - 1), 'x')).toThrow(RangeError);
    expect(() => waitUntil(new Date(Number.NaN), 'x')).toThrow(RangeError);
    expect(() => failed('bmc timeout', 'x')).toThrow(RangeError);
  });

  it('retry delays double from 2 s to a 5 min cap, with bounded jitter', () => {
    const mid = () => 0.5;
    expect([1, 2, 3, 4].map((a) => retryDelayMs(a, mid))).toEqual([2000, 4000, 8000, 16000]);
    expect(retryDelayMs(30, mid)).toBe(300000);
    expect(retryDelayMs(1, () => 0)).toBe(1500);
    expect(retryDelayMs(1, () => 0.999999)).toBeLessThanOrEqual(2500);
  });
});
