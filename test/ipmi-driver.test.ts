/**
 * The IPMI driver (clients/bmc/ipmi.ts) against OpenIPMI's real ipmi_sim through the real
 * ipmitool: power with read-back, boot devices, the GUID, authentication and cipher suites, a dead
 * BMC, and that the password never shows on a command line. The machine behind each BMC is the
 * helper's chassis_control hook, which records every destructive call the BMC passed on.
 */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { BmcError, type BmcDriver, type BmcEndpoint } from '../clients/bmc/driver';
import { DriverRegistry } from '../clients/bmc/registry';
import { ipmiDriver } from '../clients/bmc/ipmi';
import { checkIpmiDriverOptions, parseIpmiAddress } from '../clients/bmc/ipmi/options';
import { ipmiGuidToUuid } from '../clients/bmc/ipmi/parsing';
import { IPMITOOL, recordingIpmitool, requireIpmiTools, startIpmiSim, type IpmiBootEvent, type IpmiSim, type IpmiSimMachine, type RecordedIpmitoolCall } from './helpers/ipmi-sim';
import { failure } from './helpers/bmc';

const run = promisify(execFile);

/** Guard first: a missing ipmi_sim fails this suite with the package to install, never a skip. */
requireIpmiTools();

// Version-1 UUID (time based, as many BMCs' firmware makes them) and a Dell-style version-3 one.
const UUID_IPMI_ORDER = '7d444840-9dc0-11d1-b245-5ffdce74fad2';
const UUID_SMBIOS_ORDER = '4c4c4544-0052-3410-8036-b4c04f4d4e31';
const SENTINEL = 'IPMI_TEST_SENTINEL_SECRET';

let sim: IpmiSim;
let main: IpmiSimMachine;
let smbios: IpmiSimMachine;
let ipmi15: IpmiSimMachine;
let zeroGuid: IpmiSimMachine;
let dead: IpmiSimMachine;
let recorder: { path: string; calls(): RecordedIpmitoolCall[] };
let driver: BmcDriver;
const bootEvents: { machine: string; boot: IpmiBootEvent }[] = [];

const bmcOf = (m: IpmiSimMachine, patch: Partial<BmcEndpoint> = {}): BmcEndpoint => ({ address: m.address, username: m.user, password: m.password, options: {}, ...patch });


/** ipmitool runs the driver started from here on. */
function callsSince(before: number): RecordedIpmitoolCall[] {
  return recorder.calls().slice(before);
}

const commandOf = (c: RecordedIpmitoolCall): string => c.argv.slice(c.argv.indexOf('-v') + 1).join(' ');

/** Processes whose command line names this port: what a kill of the process group must leave none of. */
function ipmitoolsFor(port: number): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (argv.some((a) => a.endsWith('ipmitool')) && argv.includes(String(port))) pids.push(Number(entry));
    } catch {
      // Ended while we looked.
    }
  }
  return pids;
}

beforeAll(async () => {
  process.env[SENTINEL] = 'must-not-reach-ipmitool';
  sim = await startIpmiSim({
    onBoot: (machine, boot) => bootEvents.push({ machine: machine.id, boot }),
    machines: [
      { id: 'main', user: 'admin', password: 'Main-Pa55', guid: UUID_IPMI_ORDER, guidEncoding: 'ipmi' },
      { id: 'smbios', user: 'root', password: 'Smbios-Pa55', guid: UUID_SMBIOS_ORDER, guidEncoding: 'smbios', power: 'on' },
      { id: 'ipmi15', user: 'admin', password: 'Ipmi15-Pa55', guid: null },
      { id: 'zeroguid', user: 'admin', password: 'Zero-Pa55', guid: '00000000-0000-0000-0000-000000000000' },
      { id: 'dead', user: 'admin', password: 'Dead-Pa55' },
    ],
  });
  [main, smbios, ipmi15, zeroGuid, dead] = sim.machines as [IpmiSimMachine, IpmiSimMachine, IpmiSimMachine, IpmiSimMachine, IpmiSimMachine];
  recorder = await recordingIpmitool(sim.dir);
  driver = ipmiDriver({ ipmitoolPath: recorder.path, timeoutMs: 10_000, pollIntervalMs: 100, verifyDeadlineMs: 5000, retransmitSeconds: 1, retries: 1 });
}, 30_000);

afterAll(async () => {
  delete process.env[SENTINEL];
  await sim?.stop();
});

afterEach(() => {
  for (const m of sim.machines) m.setFaults({});
});

describe('the driver as the registry sees it', () => {
  test('named ipmi, with the capabilities IPMI has', () => {
    const registry = new DriverRegistry().register(driver);
    expect(registry.resolve({ power: 'ipmi', management: 'ipmi', virtualMedia: 'none' }, 'power')).toBe(driver);
    expect(driver.capabilities).toEqual({ reportsMacs: false, virtualMedia: false, nmi: true, persistentBoot: true, bootMode: true });
    expect(() => registry.resolve({ power: 'ipmi', management: 'ipmi', virtualMedia: 'ipmi' }, 'virtualMedia')).toThrow(/no virtual media/);
  });
});

describe('refused before any packet is sent', () => {
  test('cipher suite 0 (it accepts any password), naming the option; ipmitool never runs', async () => {
    const before = recorder.calls().length;
    const e = await failure(driver.power(bmcOf(main, { options: { cipherSuite: 0 } }), 'on'));
    expect(e.code).toBe('BMC_UNSUPPORTED');
    expect(e.message).toMatch(/^bmc\.driverOptions\.cipherSuite: /);
    expect(e.message).toMatch(/any password/);
    expect(callsSince(before)).toEqual([]);
    expect(main.destructiveCalls()).toEqual([]);
    // And ipmi_sim really does take any password with suite 0: why it must be refused.
    const { stdout } = await run(IPMITOOL, ['-I', 'lanplus', '-H', main.host, '-p', String(main.port), '-U', main.user, '-E', '-C', '0', 'power', 'status'], { env: { PATH: process.env.PATH, IPMI_PASSWORD: 'not-the-password' } });
    expect(stdout).toMatch(/Chassis Power is (on|off)/);
  });

  test.each([[-1], [18], [2.5], ['3'], [true]])('cipherSuite %p is refused', (cs) => {
    expect(() => checkIpmiDriverOptions({ cipherSuite: cs })).toThrow(/^bmc\.driverOptions\.cipherSuite: must be an integer from 1 to 17/);
  });

  test('other driver options are checked by name', () => {
    expect(checkIpmiDriverOptions({})).toEqual({ cipherSuite: 3, privilegeLevel: 'ADMINISTRATOR', guidEncoding: 'auto' });
    expect(checkIpmiDriverOptions({ cipherSuite: 17, privilegeLevel: 'operator', guidEncoding: 'smbios' })).toEqual({ cipherSuite: 17, privilegeLevel: 'OPERATOR', guidEncoding: 'smbios' });
    expect(() => checkIpmiDriverOptions({ privilegeLevel: 'USER' })).toThrow(/driverOptions\.privilegeLevel/);
    expect(() => checkIpmiDriverOptions({ guidEncoding: 'rfc4122' })).toThrow(/driverOptions\.guidEncoding/);
  });

  test('addresses: host, IPv4, IPv6, each with an optional port; a URL is refused', () => {
    expect(parseIpmiAddress('10.0.0.5')).toEqual({ host: '10.0.0.5', port: 623 });
    expect(parseIpmiAddress('127.0.0.1:9623')).toEqual({ host: '127.0.0.1', port: 9623 });
    expect(parseIpmiAddress('bmc-7.example.net:624')).toEqual({ host: 'bmc-7.example.net', port: 624 });
    expect(parseIpmiAddress('fd00::5')).toEqual({ host: 'fd00::5', port: 623 });
    expect(parseIpmiAddress('[fd00::5]:9623')).toEqual({ host: 'fd00::5', port: 9623 });
    for (const bad of ['https://10.0.0.5', '10.0.0.5:0', '10.0.0.5:70000', '-oProxyCommand=x', '[10.0.0.5]:1', 'a:b:c']) {
      expect(() => parseIpmiAddress(bad)).toThrow(/bmc\.address/);
    }
  });

  test('a password longer than IPMI 2.0 carries, without repeating it', async () => {
    const before = recorder.calls().length;
    const long = 'x'.repeat(19) + 'SECRETTAIL';
    const e = await failure(driver.powerState(bmcOf(main, { password: long })));
    expect(e.code).toBe('BMC_AUTH_FAILED');
    expect(e.message).not.toContain('SECRETTAIL');
    expect(callsSince(before)).toEqual([]);
  });

  test('no ipmitool where the agent looks: BMC_ERROR naming the Debian package', async () => {
    const e = await failure(ipmiDriver({ ipmitoolPath: `${sim.dir}/no-such-ipmitool` }).powerState(bmcOf(main)));
    expect(e.code).toBe('BMC_ERROR');
    expect(e.message).toMatch(/Debian package ipmitool/);
  });

  test('virtual media: BMC_UNSUPPORTED, nothing run', async () => {
    const before = recorder.calls().length;
    expect((await failure(driver.insertMedia(bmcOf(main), 'http://10.0.0.1/ramdisk.iso'))).code).toBe('BMC_UNSUPPORTED');
    expect((await failure(driver.ejectMedia(bmcOf(main)))).code).toBe('BMC_UNSUPPORTED');
    expect(callsSince(before)).toEqual([]);
  });
});

describe('power, each action read back', () => {
  test('power status reads the machine, and on / off change it once each', async () => {
    main.setPower('off');
    expect(await driver.powerState(bmcOf(main))).toBe('off');
    expect(await driver.power(bmcOf(main), 'on')).toEqual({ value: 'on', notes: [] });
    expect(main.power()).toBe('on');
    expect(await driver.powerState(bmcOf(main))).toBe('on');
    expect((await driver.power(bmcOf(main), 'off')).value).toBe('off');
    expect(main.destructiveCalls().map((c) => `${c.param} ${c.value}`)).toEqual(['power 1', 'power 0']);
  });

  test('cycle of a running machine: off, then ipmi_sim powers it on again', async () => {
    main.setPower('on');
    const before = main.destructiveCalls().length;
    const r = await driver.power(bmcOf(main), 'cycle');
    expect(r.value).toBe('on');
    // The off phase was seen in power status, so there is no note saying it was not.
    expect(r.notes).toEqual([]);
    expect(main.destructiveCalls().slice(before).map((c) => `${c.param} ${c.value}`)).toEqual(['power 0', 'power 1']);
  });

  test('cycle or reset of a machine that is off powers it on, and says so', async () => {
    for (const action of ['cycle', 'reset'] as const) {
      main.setPower('off');
      const before = main.destructiveCalls().length;
      const r = await driver.power(bmcOf(main), action);
      expect(r).toEqual({ value: 'on', notes: [`the machine was off: sent power on instead of ${action}`] });
      expect(main.destructiveCalls().slice(before).map((c) => `${c.param} ${c.value}`)).toEqual(['power 1']);
    }
  });

  test('reset of a running machine: one reset, on afterwards, and unverified (IPMI has no reset counter and ipmi_sim shows no off phase), never success', async () => {
    main.setPower('on');
    const before = main.destructiveCalls().length;
    const r = await driver.power(bmcOf(main), 'reset');
    expect(r.value).toBe('on');
    expect(r.notes.join()).toMatch(/no reset counter/);
    expect(r.unverified).toMatch(/no reset counter and power status showed no off phase/);
    expect(main.destructiveCalls().slice(before).map((c) => `${c.param} ${c.value}`)).toEqual(['reset 1']);
  });

  test('graceful-off is an ACPI soft-off, verified off', async () => {
    main.setPower('on');
    const before = main.destructiveCalls().length;
    expect((await driver.power(bmcOf(main), 'graceful-off')).value).toBe('off');
    expect(main.destructiveCalls().slice(before).map((c) => `${c.param} ${c.value}`)).toEqual(['shutdown 1']);
  });

  test('graceful-restart: soft-off, seen off, then on', async () => {
    main.setPower('on');
    const before = main.destructiveCalls().length;
    const r = await driver.power(bmcOf(main), 'graceful-restart');
    expect(r.value).toBe('on');
    expect(r.notes.join()).toMatch(/no graceful restart/);
    expect(main.destructiveCalls().slice(before).map((c) => `${c.param} ${c.value}`)).toEqual(['shutdown 1', 'power 1']);
  });

  test('a power change the BMC applies later is polled until it shows', async () => {
    main.setPower('off');
    // Two seconds: the first status read (an ipmitool run after the one that sent the change) comes
    // well before the change applies, even on a loaded machine; 700 ms left it about half a second.
    main.setFaults({ powerDelayMs: 2000 });
    const before = recorder.calls().length;
    expect((await driver.power(bmcOf(main), 'on', { verifyDeadlineMs: 10_000 })).value).toBe('on');
    const statusReads = callsSince(before).filter((c) => commandOf(c) === 'power status').length;
    expect(statusReads).toBeGreaterThan(1);
    expect(main.destructiveCalls().filter((c) => c.param === 'power').at(-1)?.value).toBe('1');
  });

  test('a BMC that accepts and never applies: BMC_NOT_APPLIED after the deadline, the action sent once', async () => {
    main.setPower('off');
    main.setFaults({ ignorePower: true });
    const before = main.destructiveCalls().length;
    const e = await failure(driver.power(bmcOf(main), 'on', { verifyDeadlineMs: 800 }));
    expect(e.code).toBe('BMC_NOT_APPLIED');
    expect(e.message).toMatch(/still reads off/);
    expect(main.destructiveCalls().slice(before).map((c) => `${c.param} ${c.value}`)).toEqual(['power 1']);
  });

  test('an OS that ignores the soft-off: BMC_NOT_APPLIED', async () => {
    main.setPower('on');
    main.setFaults({ ignoreSoft: true });
    const e = await failure(driver.power(bmcOf(main), 'graceful-off', { verifyDeadlineMs: 600 }));
    expect(e.code).toBe('BMC_NOT_APPLIED');
    expect(main.power()).toBe('on');
  });

  test('nmi is chassis power diag; ipmi_sim does not implement it: BMC_UNSUPPORTED, the machine untouched', async () => {
    main.setPower('on');
    const before = recorder.calls().length;
    const destructive = main.destructiveCalls().length;
    const e = await failure(driver.power(bmcOf(main), 'nmi'));
    expect(e.code).toBe('BMC_UNSUPPORTED');
    expect(e.message).toMatch(/Diag/);
    expect(callsSince(before).map(commandOf)).toEqual(['power status', 'power diag']);
    expect(main.destructiveCalls().length).toBe(destructive);
  });

  test('nmi to a machine that is off is not sent', async () => {
    main.setPower('off');
    const before = recorder.calls().length;
    expect((await failure(driver.power(bmcOf(main), 'nmi'))).code).toBe('BMC_NOT_APPLIED');
    expect(callsSince(before).map(commandOf)).toEqual(['power status']);
  });

  test('reset, cycle and diag are sent once (-R 1): a retransmitted copy could reset the machine twice', async () => {
    const patient = ipmiDriver({ ipmitoolPath: recorder.path, retries: 3, pollIntervalMs: 100 });
    main.setPower('on');
    const before = recorder.calls().length;
    await patient.power(bmcOf(main), 'cycle');
    await patient.power(bmcOf(main), 'reset');
    expect((await failure(patient.power(bmcOf(main), 'nmi'))).code).toBe('BMC_UNSUPPORTED');
    const retriesOf = (c: RecordedIpmitoolCall) => c.argv[c.argv.indexOf('-R') + 1];
    const byCommand = new Map(callsSince(before).map((c) => [commandOf(c), retriesOf(c)]));
    expect(byCommand.get('power cycle')).toBe('1');
    expect(byCommand.get('power reset')).toBe('1');
    expect(byCommand.get('power diag')).toBe('1');
    expect(byCommand.get('power status')).toBe('3');
  });
});

describe('boot device', () => {
  test('once: chassis bootdev with no options; the BMC got the device', async () => {
    const before = recorder.calls().length;
    const r = await driver.setBootDevice(bmcOf(main), 'pxe', { persistent: false });
    expect(main.bootDevice()).toBe('pxe');
    expect(callsSince(before).map(commandOf)).toEqual(['chassis bootdev pxe', 'chassis bootparam get 5']);
    // ipmi_sim keeps only the device selector: the driver says what it could not verify.
    expect(r.notes.join()).toMatch(/without valid/);
    expect(r.notes.join()).not.toMatch(/persistent/);
  });

  test('persistent UEFI disk: options=persistent,efiboot; ipmi_sim records disk as "default"', async () => {
    const before = recorder.calls().length;
    const r = await driver.setBootDevice(bmcOf(main), 'disk', { persistent: true, uefi: true });
    expect(main.bootDevice()).toBe('default');
    expect(callsSince(before).map(commandOf)[0]).toBe('chassis bootdev disk options=persistent,efiboot');
    expect(r.notes.join()).toMatch(/persistent, efiboot/);
  });

  test('cd and bios map to cdrom and bios', async () => {
    await driver.setBootDevice(bmcOf(main), 'cd', { persistent: false });
    expect(main.bootDevice()).toBe('cdrom');
    await driver.setBootDevice(bmcOf(main), 'bios', { persistent: true });
    expect(main.bootDevice()).toBe('bios');
    expect(main.calls().filter((c) => c.param === 'boot').map((c) => c.value).slice(-2)).toEqual(['cdrom', 'bios']);
  });
});

describe('what the machine boots from (the helper\'s onBoot, for a simulated machine)', () => {
  test('a once PXE override is used by the next start, then the machine boots its own order', async () => {
    main.setPower('off');
    const before = main.boots().length;
    await driver.setBootDevice(bmcOf(main), 'pxe', { persistent: false });
    await driver.power(bmcOf(main), 'on');
    await driver.power(bmcOf(main), 'cycle');
    expect(main.boots().slice(before).map((b) => b.override)).toEqual(['pxe', null]);
    expect(main.bootDevice()).toBe('none');
    // The same starts reach onBoot (fs.watch delivers them a moment later).
    while (bootEvents.filter((e) => e.machine === 'main').length < main.boots().length) await new Promise((r) => setTimeout(r, 20));
    expect(bootEvents.filter((e) => e.machine === 'main').map((e) => e.boot)).toEqual(main.boots());
  });

  test('a reset of a running machine is a start; a reset of one that is off is not', async () => {
    main.setPower('on');
    await driver.setBootDevice(bmcOf(main), 'disk', { persistent: false });
    const before = main.boots().length;
    await driver.power(bmcOf(main), 'reset');
    expect(main.boots().slice(before).map((b) => b.override)).toEqual(['disk']);
    // The driver never resets a machine that is off; a plain ipmitool does, and nothing starts.
    main.setPower('off');
    const resets = main.calls().filter((c) => c.param === 'reset').length;
    await run(IPMITOOL, ['-I', 'lanplus', '-H', main.host, '-p', String(main.port), '-U', main.user, '-E', '-C', '3', 'power', 'reset'], { env: { PATH: process.env.PATH, IPMI_PASSWORD: main.password } });
    expect(main.calls().filter((c) => c.param === 'reset').length).toBe(resets + 1);
    expect(main.boots().length).toBe(before + 1);
    expect(main.power()).toBe('off');
  });
});

describe('inventory: the GUID as the OS prints the UUID', () => {
  test('a BMC that follows the spec (bytes reversed): the UUID, and ipmitool\'s own decoding agrees', async () => {
    const r = await driver.inventory(bmcOf(main));
    expect(r.value).toEqual({ uuid: UUID_IPMI_ORDER, macs: [], cpus: null, memoryMiB: null, storage: null, manufacturer: null, model: null, serial: null });
    const { stdout } = await run(IPMITOOL, ['-I', 'lanplus', '-H', main.host, '-p', String(main.port), '-U', main.user, '-E', '-C', '3', 'mc', 'guid', 'ipmi'], { env: { PATH: process.env.PATH, IPMI_PASSWORD: main.password } });
    expect(stdout).toContain(`System GUID   : ${UUID_IPMI_ORDER}`);
  });

  test('a BMC that sends the SMBIOS bytes: auto finds the order; forcing the other order shows why it matters', async () => {
    const r = await driver.inventory(bmcOf(smbios));
    expect(r.value.uuid).toBe(UUID_SMBIOS_ORDER);
    expect(r.notes.join()).toMatch(/SMBIOS byte order/);
    const { stdout } = await run(IPMITOOL, ['-I', 'lanplus', '-H', smbios.host, '-p', String(smbios.port), '-U', smbios.user, '-E', '-C', '3', 'mc', 'guid', 'smbios'], { env: { PATH: process.env.PATH, IPMI_PASSWORD: smbios.password } });
    expect(stdout).toContain(`System GUID   : ${UUID_SMBIOS_ORDER}`);
    const forced = await driver.inventory(bmcOf(smbios, { options: { guidEncoding: 'ipmi' } }));
    expect(forced.value.uuid).not.toBe(UUID_SMBIOS_ORDER);
  });

  test('a firmware placeholder GUID (all zero): uuid null, with a note', async () => {
    const r = await driver.inventory(bmcOf(zeroGuid));
    expect(r.value.uuid).toBeNull();
    expect(r.notes.join()).toMatch(/placeholder GUID/);
  });

  test('a BMC with no GUID speaks no IPMI 2.0 (ipmi_sim refuses RMCP+ then): BMC_UNSUPPORTED saying so', async () => {
    const e = await failure(driver.inventory(bmcOf(ipmi15)));
    expect(e.code).toBe('BMC_UNSUPPORTED');
    expect(e.message).toMatch(/IPMI 1\.5/);
  });

  test('byte orders, against what ipmitool 1.8.19 printed for a123456789abcdef a123456789abcdef', () => {
    const wire = [0xa1, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xa1, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef];
    expect(ipmiGuidToUuid(wire, 'ipmi').uuid).toBe('efcdab89-6745-23a1-efcd-ab89674523a1');
    expect(ipmiGuidToUuid(wire, 'smbios').uuid).toBe('674523a1-ab89-efcd-a123-456789abcdef');
    // Neither order is an RFC 4122 UUID: the spec's order, said to be a guess.
    const auto = ipmiGuidToUuid(wire);
    expect(auto).toMatchObject({ uuid: 'efcdab89-6745-23a1-efcd-ab89674523a1', encoding: 'ipmi' });
    expect(auto.note).toMatch(/ambiguous .*674523a1-ab89-efcd-a123-456789abcdef/);
    expect(ipmiGuidToUuid(new Array(16).fill(0)).uuid).toBeNull();
    expect(ipmiGuidToUuid(new Array(16).fill(0xff)).uuid).toBeNull();
    expect(() => ipmiGuidToUuid([1, 2, 3])).toThrow(/16/);
  });
});

describe('authentication and cipher suites', () => {
  test('a wrong password: BMC_AUTH_FAILED without the password in the message, nothing done', async () => {
    const destructive = main.destructiveCalls().length;
    const e = await failure(driver.power(bmcOf(main, { password: 'Wrong-Pa55-Guess' }), 'on'));
    expect(e.code).toBe('BMC_AUTH_FAILED');
    expect(e.retryable).toBe(false);
    expect(e.message).not.toContain('Wrong-Pa55-Guess');
    expect(e.message).not.toContain(main.password);
    expect(main.destructiveCalls().length).toBe(destructive);
  });

  test('an unknown user: BMC_AUTH_FAILED', async () => {
    const e = await failure(driver.powerState(bmcOf(main, { username: 'nobody' })));
    expect(e.code).toBe('BMC_AUTH_FAILED');
    expect(e.message).toMatch(/unauthorized name/);
  });

  test('-C 3 by default; another supported suite works; a suite the BMC lacks is BMC_UNSUPPORTED naming it', async () => {
    const before = recorder.calls().length;
    await driver.powerState(bmcOf(main));
    const argv = callsSince(before)[0]!.argv;
    expect(argv.slice(argv.indexOf('-C'), argv.indexOf('-C') + 2)).toEqual(['-C', '3']);
    expect(await driver.powerState(bmcOf(main, { options: { cipherSuite: 1 } }))).toMatch(/^(on|off)$/);
    // ipmi_sim has none of the SHA-256 suites (15-17) many current BMCs default to.
    const e = await failure(driver.powerState(bmcOf(main, { options: { cipherSuite: 17 } })));
    expect(e.code).toBe('BMC_UNSUPPORTED');
    expect(e.message).toMatch(/cipher suite 17/);
  });
});

describe('a BMC that does not answer', () => {
  beforeAll(async () => {
    await dead.stop();
  });

  test('ipmitool gives up on its own: BMC_UNREACHABLE, retryable', async () => {
    const e = await failure(driver.powerState(bmcOf(dead)));
    expect(e.code).toBe('BMC_UNREACHABLE');
    expect(e.retryable).toBe(true);
    expect(e.message).not.toContain(dead.password);
  });

  test('the call timeout kills ipmitool first: BMC_TIMEOUT, and no ipmitool is left running', async () => {
    // ipmitool alone would retry for 3 x 5 s; the driver's 500 ms kill is what ends it.
    const impatient = ipmiDriver({ ipmitoolPath: recorder.path, timeoutMs: 500, retransmitSeconds: 5, retries: 3 });
    const e = await failure(impatient.powerState(bmcOf(dead)));
    expect(e.code).toBe('BMC_TIMEOUT');
    // A read that timed out changed nothing: worth retrying.
    expect(e.retryable).toBe(true);
    expect(ipmitoolsFor(dead.port)).toEqual([]);
  });

  test('an abort kills ipmitool too', async () => {
    const slow = ipmiDriver({ ipmitoolPath: recorder.path, timeoutMs: 30_000, retransmitSeconds: 5, retries: 3 });
    const controller = new AbortController();
    const pending = failure(slow.power(bmcOf(dead), 'cycle', { signal: controller.signal }));
    setTimeout(() => controller.abort(), 300);
    const e = await pending;
    expect(e.code).toBe('BMC_ERROR');
    expect(e.message).toMatch(/aborted/);
    expect(ipmitoolsFor(dead.port)).toEqual([]);
  });

  test('the BMC back: the same address answers again', async () => {
    await dead.start();
    expect(await driver.powerState(bmcOf(dead))).toBe('off');
  });
});

describe('the password never on a command line', () => {
  test('every ipmitool the driver ran: not in its argv nor in the running process\'s cmdline; only IPMI_PASSWORD carried it', () => {
    const calls = recorder.calls();
    expect(calls.length).toBeGreaterThan(30);
    const passwords = sim.machines.map((m) => m.password).concat(['Wrong-Pa55-Guess', 'Wrong-Pa55']);
    const seenCmdlines = calls.filter((c) => c.cmdline !== null);
    expect(seenCmdlines.length).toBeGreaterThan(calls.length / 2);
    for (const c of calls) {
      const words = [...c.argv, ...(c.cmdline ?? [])];
      for (const pw of passwords) expect(words.some((w) => w.includes(pw))).toBe(false);
      expect(c.argv).toContain('-E');
      expect(c.argv).not.toContain('-P');
      expect(c.envNames).toContain('IPMI_PASSWORD');
      // A minimal environment: nothing else of this process (its other secrets) goes along.
      expect(c.envNames).not.toContain(SENTINEL);
      expect(c.envNames).not.toContain('DATABASE_URL');
    }
  });
});
