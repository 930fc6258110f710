/**
 * Issue 20: the Redfish driver proves a change by its effect and never reports success without
 * evidence. Against the Redfish simulator over real HTTP, each case a real BMC shows (the peers
 * and captures the interop suite runs are the other half: npm run test:interop):
 * - a BMC with no LastResetTime (DMTF public-localstorage, HPE, Lenovo, Supermicro) whose restart
 *   shows no power transition: unverified, never success; with a transition: proven;
 * - a static BMC that accepts a Reset and changes nothing: BMC_NOT_APPLIED or unverified;
 * - a Reset task that ends Exception: judged by the power read back;
 * - a BMC that reads Continuous whatever was sent: the override is in place, noted.
 */
import { type BmcDriver, type BmcEndpoint } from '../clients/bmc/driver';
import { RedfishTransport, redfishDrivers } from '../clients/bmc/redfish';
import { startRedfishSim, type RedfishSim, type SimMachine } from './sim/redfish/server';
import { failure } from './helpers/bmc';

const TUNING = { pollMs: 10, verifyDeadlineMs: 600, taskPollMaxMs: 30 };
let sim: RedfishSim;
let transport: RedfishTransport;
let generic: BmcDriver;
const machine = (id: string): SimMachine => sim.machines.find((m) => m.id === id)!;
const ep = (m: SimMachine): BmcEndpoint => ({ address: m.url, username: m.username, password: m.password, options: {} });

beforeAll(async () => {
  sim = await startRedfishSim({
    machines: [
      // No LastResetTime, and the restart applies at once: nothing the BMC shows changes.
      { id: 'no-reset-time', mockup: 'public-localstorage', powerState: 'On', applyDelayMs: 0 },
      // No LastResetTime, but the restart shows PoweringOn on the way.
      { id: 'transition', mockup: 'public-localstorage', powerState: 'On', applyDelayMs: 60 },
      // LastResetTime (rackmount1): a restart moves it.
      { id: 'reset-time', powerState: 'On', applyDelayMs: 0 },
      { id: 'static', mockup: 'public-localstorage', powerState: 'On' },
      { id: 'static-rt', powerState: 'On' },
      { id: 'task', powerState: 'Off', applyDelayMs: 30 },
      { id: 'continuous' },
    ],
  });
  transport = new RedfishTransport({ connectTimeoutMs: 2000, headersTimeoutMs: 1000, bodyTimeoutMs: 1000, retries5xx: 0 });
  generic = redfishDrivers({ transport, ...TUNING }).find((d) => d.name === 'redfish')!;
});
afterAll(async () => {
  await transport.close();
  await sim.stop();
});

describe('restarts', () => {
  it('no LastResetTime and no transition seen: unverified with the reason, never success; the Reset was sent once', async () => {
    const m = machine('no-reset-time');
    const r = await generic.power(ep(m), 'cycle');
    expect(r.unverified).toMatch(/no usable LastResetTime and showed no power transition/);
    expect(r.notes.join(' ')).toMatch(/not verifiable on this BMC/);
    expect(sim.counts('no-reset-time').calls.filter((c) => c.kind === 'reset')).toHaveLength(1);
  });

  it('no LastResetTime but a transition seen (PoweringOn on the way): proven', async () => {
    const r = await generic.power(ep(machine('transition')), 'reset');
    expect(r.unverified).toBeUndefined();
    expect(r.value).toBe('on');
  });

  it('LastResetTime moving proves a restart that shows no transition', async () => {
    const r = await generic.power(ep(machine('reset-time')), 'cycle');
    expect(r.unverified).toBeUndefined();
  });

  it('a static BMC (accepts every Reset, changes nothing): a restart without LastResetTime is unverified, with one BMC_NOT_APPLIED, an off BMC_NOT_APPLIED', async () => {
    sim.setFault('static', { lies: true });
    sim.setFault('static-rt', { lies: true });
    expect((await generic.power(ep(machine('static')), 'cycle')).unverified).toBeDefined();
    expect((await failure(generic.power(ep(machine('static-rt')), 'cycle'))).code).toBe('BMC_NOT_APPLIED');
    expect((await failure(generic.power(ep(machine('static')), 'off'))).code).toBe('BMC_NOT_APPLIED');
  });

  it('an NMI is sent and said unverified: nothing the BMC shows changes', async () => {
    const r = await generic.power(ep(machine('transition')), 'nmi');
    expect(r.unverified).toMatch(/NMI/);
  });
});

describe('a Reset task that ends Exception', () => {
  it('is judged by the power read back: applied is done (noted), not applied is BMC_ERROR with the task\'s message id', async () => {
    const m = machine('task');
    sim.setFault('task', { asyncTasks: true, taskEnds: { state: 'Exception', applied: true } });
    const done = await generic.power(ep(m), 'on');
    expect(done.value).toBe('on');
    expect(done.notes.join(' ')).toMatch(/task ended Exception.*yet the machine shows the On: taken as done/);
    sim.setFault('task', { asyncTasks: true, taskEnds: { state: 'Exception', applied: false } });
    const e = await failure(generic.power(ep(m), 'off'));
    expect(e.code).toBe('BMC_ERROR');
    expect(e.message).toMatch(/task ended Exception: TaskEvent.1.0.TaskAborted \[/);
    expect(e.message).not.toMatch(/has been aborted/);
    expect(m.state().powerState).toBe('On');
  });
});

describe('a BMC that reads Continuous whatever is sent', () => {
  it('a PXE-once override is in place when the target reads back: done, and the note says it stays', async () => {
    const m = machine('continuous');
    sim.setFault('continuous', { overrideReadsContinuous: true });
    const r = await generic.setBootDevice(ep(m), 'pxe', { persistent: false });
    expect(m.state().boot).toMatchObject({ target: 'Pxe', enabled: 'Continuous' });
    expect(r.notes.join(' ')).toMatch(/reads the override back as Continuous: it stays until the next override replaces it/);
    // Set again: already in place, nothing sent.
    const before = sim.counts('continuous').calls.filter((c) => c.kind === 'bootOverride').length;
    const again = await generic.setBootDevice(ep(m), 'pxe', { persistent: false });
    expect(again.notes.join(' ')).toMatch(/already Pxe Once: nothing sent/);
    expect(sim.counts('continuous').calls.filter((c) => c.kind === 'bootOverride')).toHaveLength(before);
  });
});
