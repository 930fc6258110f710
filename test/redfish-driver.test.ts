/**
 * The Redfish drivers (clients/bmc/redfish) against the Redfish simulator over real HTTP: every
 * vendor flavour for power, boot override, virtual media and inventory, and each fault a real BMC
 * shows. The simulator's state, destructive-call counts and request log show what the driver did.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BmcError, type BmcDriver, type BmcEndpoint } from '../clients/bmc/driver';
import { DriverRegistry } from '../clients/bmc/registry';
import { RedfishTransport, bmcOrigin, redfishDrivers } from '../clients/bmc/redfish';
import { startRedfishSim, type MachineOptions, type RedfishSim, type SimMachine } from './sim/redfish/server';
import type { FlavourName } from './sim/redfish/flavours';
import type { BootEvent } from './sim/redfish/server';
import { failure } from './helpers/bmc';

const TUNING = { pollMs: 10, verifyDeadlineMs: 800, taskPollMaxMs: 30 };
const TRANSPORT = { connectTimeoutMs: 2000, headersTimeoutMs: 500, bodyTimeoutMs: 500, maxRetryAfterMs: 2000, defaultRetryAfterMs: 20, retries5xx: 2, retryBaseMs: 5 };

/** The driver that serves each simulator flavour (iLO 4 and 5 are one driver). */
const DRIVER_OF: Record<FlavourName, string> = { plain: 'redfish', idrac: 'idrac', supermicro: 'supermicro', ilo: 'ilo', ilo4: 'ilo', xcc: 'xcc', cimc: 'cimc' };
const FLAVOURS = Object.keys(DRIVER_OF) as FlavourName[];

let sim: RedfishSim;
let transport: RedfishTransport;
let drivers: Map<string, BmcDriver>;
const M: Record<string, SimMachine> = {};

function ep(m: SimMachine, over: Partial<BmcEndpoint> = {}): BmcEndpoint {
  return { address: m.url, username: m.username, password: m.password, options: {}, ...over };
}
function drv(name: string): BmcDriver {
  return drivers.get(name)!;
}
/** Raw call to a simulated machine, for setting up a state the driver must cope with. */
async function raw(m: SimMachine, p: string, method = 'GET', body?: unknown): Promise<Record<string, any>> {
  const res = await fetch(m.url + p, {
    method,
    headers: { Authorization: `Basic ${Buffer.from(`${m.username}:${m.password}`).toString('base64')}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return text ? (JSON.parse(text) as Record<string, any>) : {};
}
const resets = (id: string) => sim.counts(id).calls.filter((c) => c.kind === 'reset').map((c) => [c.detail, c.status]);
const kinds = (id: string, kind: string) => sim.counts(id).calls.filter((c) => c.kind === kind);

const machines: MachineOptions[] = [
  ...FLAVOURS.map((f): MachineOptions => ({ id: `f-${f}`, flavour: f, mockup: 'public-localstorage', applyDelayMs: 30, uuid: `0000000${FLAVOURS.indexOf(f)}-1111-2222-3333-444444444444`, serial: `SER-${f}` })),
  { id: 'rack', uuid: 'AAAAAAAA-1111-2222-3333-444444444444', macs: ['52:54:00:00:00:01', '52:54:00:00:00:02', '52:54:00:00:00:03', '52:54:00:00:00:04'] },
  { id: 'tele', mockup: 'public-telemetry', uuid: '00000000-0000-0000-0000-000000000000' },
  { id: 'auth', password: 'Sup3r-S3cret!' },
  { id: 'basic', noSessions: true, password: 'basic-pass' },
  { id: 'faults' },
  { id: 'lies', applyDelayMs: 20 },
  { id: 'slow', applyDelayMs: 300 },
  { id: 'etag', requireEtag: true },
  { id: 'async', applyDelayMs: 40 },
  { id: 'cycle501', resetTypes: ['On', 'ForceOff', 'GracefulShutdown', 'GracefulRestart', 'ForceRestart', 'PowerCycle', 'Nmi'], powerState: 'On' },
  { id: 'cycle501b', resetTypes: ['On', 'ForceOff', 'ForceRestart', 'PowerCycle'], powerState: 'On' },
  { id: 'redirect' },
  { id: 'other' },
  { id: 'pool' },
  // Booting the virtual CD: rackmount1 has two CD slots (a CIMC blade refuses the first); every
  // one of these BMCs refuses a PATCH without If-Match.
  ...FLAVOURS.map((f): MachineOptions => ({ id: `vb-${f}`, flavour: f, requireEtag: true })),
  { id: 'vb-idrac-generic', flavour: 'idrac' },
];
const boots: (BootEvent & { id: string })[] = [];

beforeAll(async () => {
  sim = await startRedfishSim({ machines, onBoot: (machine, boot) => { boots.push({ id: machine.id, ...boot }); } });
  for (const m of sim.machines) M[m.id] = m;
  transport = new RedfishTransport(TRANSPORT);
  drivers = new Map(redfishDrivers({ transport, ...TUNING }).map((d) => [d.name, d]));
});
afterAll(async () => {
  await transport.close();
  await sim.stop();
});

describe('the drivers and their capabilities', () => {
  it('registers redfish, idrac, ilo, xcc, cimc and supermicro, with each flavour its capability flags', () => {
    const reg = new DriverRegistry();
    for (const d of drivers.values()) reg.register(d);
    expect(reg.names()).toEqual(['cimc', 'idrac', 'ilo', 'redfish', 'supermicro', 'xcc']);
    const caps = Object.fromEntries([...drivers.values()].map((d) => [d.name, d.capabilities]));
    for (const c of Object.values(caps)) expect([c.reportsMacs, c.virtualMedia]).toEqual([true, true]);
    expect(caps.xcc!.persistentBoot).toBe(false);
    // Supermicro sends a Mode where the BMC shows one (X12, X13, HGX B200 do): the property decides, not the flavour.
    expect(caps.supermicro!.bootMode).toBe(true);
    expect(caps.redfish).toEqual({ reportsMacs: true, virtualMedia: true, nmi: true, persistentBoot: true, bootMode: true });
    expect(reg.resolve({ power: 'idrac', management: 'idrac', virtualMedia: 'idrac' }, 'virtualMedia').name).toBe('idrac');
  });
});

describe.each(FLAVOURS)('flavour %s', (flavour) => {
  const id = `f-${flavour}`;
  const d = () => drv(DRIVER_OF[flavour]);

  it('power on, off and cycle, each read back before it returns', async () => {
    const m = M[id]!;
    expect(await d().powerState(ep(m))).toBe('off');
    const on = await d().power(ep(m), 'on', { idempotencyKey: `${id}-on` });
    // applyDelayMs 30: without the read-back the machine would still be PoweringOn here.
    expect(on.value).toBe('on');
    expect(m.state().powerState).toBe('On');
    const again = await d().power(ep(m), 'on');
    expect(again.notes).toContain('the machine was already on: nothing sent');
    const cycled = await d().power(ep(m), 'cycle');
    expect(cycled.value).toBe('on');
    // localstorage lists no PowerCycle: the table's next choice, said in the notes.
    expect(cycled.notes).toContain("PowerCycle is not in the BMC's ResetType AllowableValues; used ForceRestart");
    const off = await d().power(ep(m), 'off');
    expect(off.value).toBe('off');
    expect(m.state().powerState).toBe('Off');
    expect(resets(id)).toEqual([['On', 204], ['ForceRestart', 204], ['ForceOff', 204]]);
    expect(m.state().resetsApplied).toBe(3);
    expect(sim.counts(id).calls[0]!.idempotencyKey).toBe(`${id}-on:On`);
  });

  it('boot device once and persistent', async () => {
    const m = M[id]!;
    const once = await d().setBootDevice(ep(m), 'pxe', { persistent: false, uefi: true });
    if (flavour === 'supermicro') {
      expect(m.state().boot).toEqual({ target: 'Pxe', enabled: 'Once', mode: null });
      expect(once.notes).toContain('the BMC shows no BootSourceOverrideMode: the boot mode was left as the firmware has it');
      expect(kinds(id, 'bootOverride').at(-1)!.detail).not.toContain('BootSourceOverrideMode');
    } else {
      expect(m.state().boot).toEqual({ target: 'Pxe', enabled: 'Once', mode: 'UEFI' });
    }
    const persistent = await d().setBootDevice(ep(m), 'disk', { persistent: true });
    if (flavour === 'xcc') {
      expect(m.state().boot).toMatchObject({ target: 'Hdd', enabled: 'Once' });
      expect(persistent.notes.join(' ')).toMatch(/Continuous disk boot override can boot-loop/);
    } else {
      expect(m.state().boot).toMatchObject({ target: 'Hdd', enabled: 'Continuous' });
    }
    expect(m.state().continuousDiskOverrides).toBe(flavour === 'xcc' ? 0 : 1);
    expect(kinds(id, 'bootOverride').map((c) => c.status)).toEqual([204, 204]);
    // The same override again sends nothing.
    await d().setBootDevice(ep(m), 'disk', { persistent: true });
    expect(kinds(id, 'bootOverride')).toHaveLength(2);
  });

  it('insert and eject virtual media, with the flavour quirks', async () => {
    const m = M[id]!;
    // XCC's CD slots are its EXT ones, mounted by PATCH (no InsertMedia action).
    const slotId = flavour === 'xcc' ? 'EXT1' : 'CD1';
    const cd = () => m.state().virtualMedia.find((v) => v.id === slotId)!;
    const ins = () => kinds(id, 'insertMedia');
    const ej = () => kinds(id, 'ejectMedia');
    // Nothing inserted: an eject is not sent (iLO would answer 400).
    const none = await d().ejectMedia(ep(m));
    expect(none.notes).toContain('no virtual media was inserted: nothing sent');
    expect(ej()).toHaveLength(0);
    await d().insertMedia(ep(m), 'http://images.example/a.iso');
    expect(cd()).toMatchObject({ image: 'http://images.example/a.iso', inserted: true });
    // VirtualMedia under the System for idrac (moved there by 6.00.02), under the Manager otherwise.
    expect(cd().path.startsWith(flavour === 'idrac' ? m.systemPath : '/redfish/v1/Managers/')).toBe(true);
    expect(ins()[0]!.status).toBe(204);
    // Idempotent: the same image again is no call.
    const same = await d().insertMedia(ep(m), 'http://images.example/a.iso');
    expect(same.notes).toContain('the image was already inserted: nothing sent');
    expect(ins()).toHaveLength(1);
    // Another image: ejected first (iDRAC "already connected", Supermicro "Image set").
    const other = await d().insertMedia(ep(m), 'http://images.example/b.iso');
    expect(other.notes.join(' ')).toMatch(new RegExp(`^ejected ${slotId} first`));
    if (flavour === 'xcc') expect(other.notes.join(' ')).toContain('xcc: EXT1 has no InsertMedia action; mounted by a PATCH of the slot');
    expect(cd().image).toBe('http://images.example/b.iso');
    expect(ins().map((c) => c.status)).toEqual([204, 204]);
    expect(ej().map((c) => c.status)).toEqual([204]);
    await d().ejectMedia(ep(m));
    expect(cd()).toMatchObject({ image: null, inserted: false });
    expect(ej().map((c) => c.status)).toEqual([204, 204]);
  });

  it('inventory: UUID, MACs, CPUs, memory, storage, manufacturer, model, serial', async () => {
    const m = M[id]!;
    const inv = await d().inventory(ep(m));
    expect(inv.value.uuid).toBe(m.state().uuid.toLowerCase());
    expect(inv.value.macs).toEqual([...new Set(m.state().macs.map((x) => x.toLowerCase()))]);
    expect(inv.value.macs.length).toBeGreaterThan(0);
    // CPU2 is Absent.
    expect(inv.value.cpus).toEqual([{ model: 'Multi-Core Intel(R) Xeon(R) processor 7xxx Series', cores: 8, threads: 16 }]);
    expect(inv.value.memoryMiB).toBe(96 * 1024);
    // localstorage: Storage -> its Drives links (under the Chassis).
    expect(inv.value.storage!.map((s) => s.serial).sort()).toEqual(['1234567', '1234568', '1234569', '1234570']);
    expect(inv.value.storage!.every((s) => s.sizeBytes === 899527000064)).toBe(true);
    expect([inv.value.manufacturer, inv.value.model, inv.value.serial]).toEqual(['Contoso', '3500RX', `SER-${flavour}`]);
  });
});

describe('quirks the generic driver meets', () => {
  it('iLO 4 refuses the generic InsertMedia body: sent again with Image only, the refusal\'s id and MessageArgs noted; supermicro refuses an insert while Image is set and not inserted', async () => {
    const ilo4 = M['f-ilo4']!;
    const r = await drv('redfish').insertMedia(ep(ilo4), 'http://images.example/g.iso');
    expect(r.notes.join(' ')).toContain('refused a parameter (Base.1.8.ActionParameterNotSupported ["Inserted", "VirtualMedia.InsertMedia"]): sent again with Image only');
    expect(ilo4.state().virtualMedia.find((v) => v.image === 'http://images.example/g.iso')).toBeTruthy();
    await drv('ilo').ejectMedia(ep(ilo4));
    const sm = M['f-supermicro']!;
    const cd1 = sm.state().virtualMedia.find((v) => v.id === 'CD1')!;
    await raw(sm, (await raw(sm, cd1.path)).Actions['#VirtualMedia.InsertMedia'].target, 'POST', { Image: 'http://images.example/staged.iso', Inserted: false });
    const g = await failure(drv('redfish').insertMedia(ep(sm), 'http://images.example/c.iso'));
    expect(g.message).toMatch(/Base.1.8.ActionNotSupported \["VirtualMedia.InsertMedia"\]/);
    // The BMC's own words never reach lastError, only the registry id and its arguments (issue 21 item 6).
    expect(g.message).not.toMatch(/eject the current image first/);
    const ok = await drv('supermicro').insertMedia(ep(sm), 'http://images.example/c.iso');
    expect(ok.notes.join(' ')).toMatch(/Image is set to http:\/\/images.example\/staged.iso/);
    expect(sm.state().virtualMedia.find((v) => v.id === 'CD1')).toMatchObject({ image: 'http://images.example/c.iso', inserted: true });
    await drv('supermicro').ejectMedia(ep(sm));
  });
});

describe('links, not guesses', () => {
  it('rackmount1: VirtualMedia under the System, SimpleStorage, present CPUs only, every requested path linked', async () => {
    const m = M.rack!;
    const inv = await drv('redfish').inventory(ep(m));
    expect(inv.value.uuid).toBe('aaaaaaaa-1111-2222-3333-444444444444');
    // The fourth NIC is DMTF's ToManager (Links.HostInterface): the BMC's host interface, no machine NIC.
    expect(inv.value.macs).toEqual(['52:54:00:00:00:01', '52:54:00:00:00:02', '52:54:00:00:00:03']);
    expect(inv.notes.join(' ')).toMatch(/NIC ToManager left out: the BMC's host interface \(it links a HostInterface\)/);
    // CPU2 is Absent and FPGA1 is no CPU.
    expect(inv.value.cpus).toEqual([{ model: 'Multi-Core Intel(R) Xeon(R) processor 7xxx Series', cores: 8, threads: 16 }]);
    expect(inv.value.storage).toEqual([
      { name: 'SATA Bay 1', sizeBytes: 8000000000000, serial: null },
      { name: 'SATA Bay 2', sizeBytes: 4000000000000, serial: null },
    ]);
    await drv('redfish').insertMedia(ep(m), 'http://images.example/r.iso');
    expect(kinds('rack', 'insertMedia')[0]!.detail).toBe('http://images.example/r.iso');
    expect(m.state().virtualMedia.find((v) => v.inserted)!.path).toBe(`${m.systemPath}/VirtualMedia/CD1`);
    expect(sim.requests('rack').filter((r) => r.status >= 400)).toEqual([]);
  });

  it('telemetry: ResetType from the ActionInfo, InsertMedia at its non-standard target, an all-zero UUID is unknown', async () => {
    const m = M.tele!;
    const inv = await drv('redfish').inventory(ep(m));
    expect(inv.value.uuid).toBeNull();
    expect(inv.notes).toContain('the BMC reports an all-zero UUID: treated as unknown');
    expect(inv.value.storage).toBeNull();
    await drv('redfish').insertMedia(ep(m), 'http://images.example/t.iso');
    expect(m.state().virtualMedia.find((v) => v.id === 'CD1')!.image).toBe('http://images.example/t.iso');
    expect(sim.requests('tele').some((r) => r.path === '/redfish/v1/Managers/1/VirtualMedia/CD1/Actions/VM.InsertMedia' && r.status === 204)).toBe(true);
    expect((await drv('redfish').power(ep(m), 'on')).value).toBe('on');
    expect(sim.requests('tele').some((r) => r.path === '/redfish/v1/Systems/1/ResetActionInfo')).toBe(true);
    expect(sim.requests('tele').filter((r) => r.status >= 400)).toEqual([]);
  });

  it('follows redirects (method and body kept) on the same origin, and refuses one to another origin', async () => {
    const m = M.redirect!;
    const sys = m.systemPath;
    const target = `${sys}/Actions/ComputerSystem.Reset`;
    sim.setFault('redirect', { redirects: { [sys]: `${sys}/`, [target]: `${target}/` } });
    expect((await drv('redfish').power(ep(m), 'on')).value).toBe('on');
    const log = sim.requests('redirect');
    expect(log.some((r) => r.method === 'POST' && r.path === target && r.status === 308)).toBe(true);
    expect(resets('redirect')).toEqual([['On', 204]]);
    const other = M.other!;
    const before = sim.requests('other').length;
    sim.setFault('redirect', { redirects: { [sys]: `${other.url}${other.systemPath}` } });
    const e = await failure(drv('redfish').powerState(ep(m)));
    expect(e.code).toBe('BMC_ERROR');
    expect(e.message).toMatch(/redirected to another origin/);
    expect(sim.requests('other')).toHaveLength(before);
    sim.setFault('redirect', {});
  });

  it('one pool per BMC: many calls, few connections', async () => {
    const m = M.pool!;
    for (let i = 0; i < 10; i++) await drv('redfish').powerState(ep(m));
    await Promise.all(Array.from({ length: 6 }, () => drv('redfish').powerState(ep(m))));
    expect(m.state().connections).toBeLessThanOrEqual(2);
    expect(sim.requests('pool').length).toBeGreaterThan(16);
  });

  it('a connection idle for up to a second less than the keep-alive timeout the BMC advertises is used again, not dialled anew', async () => {
    const m = M.pool!;
    await drv('redfish').powerState(ep(m));
    const before = m.state().connections;
    // The simulated BMC says Keep-Alive: timeout=5 (as Node's server does). undici's default margin
    // of 2 s closed it after 3 s: at 1,000 machines, most commands of a BMC came more than 3 s apart.
    await new Promise((resolve) => setTimeout(resolve, 3500));
    await drv('redfish').powerState(ep(m));
    expect(m.state().connections).toBe(before);
  });

  it('driverOptions.systemId must name one of the BMC systems', async () => {
    const m = M.pool!;
    const e = await failure(drv('redfish').powerState(ep(m, { options: { systemId: 'nope' } })));
    expect(e.code).toBe('BMC_UNSUPPORTED');
    expect(e.message).toMatch(/driverOptions.systemId "nope" is not among the BMC's systems \(437XR1138R2\)/);
  });
});

describe('auth', () => {
  it('wrong credentials: BMC_AUTH_FAILED, not retryable, not retried, password never in the message', async () => {
    const m = M.auth!;
    const before = sim.requests('auth').length;
    const e = await failure(drv('idrac').powerState(ep(m, { password: 'Wr0ng-Pa55word' })));
    expect(e.code).toBe('BMC_AUTH_FAILED');
    expect(e.retryable).toBe(false);
    expect(e.message).toContain('"admin"');
    expect(e.message).not.toContain('Wr0ng-Pa55word');
    const logins = sim.requests('auth').slice(before).filter((r) => r.method === 'POST');
    expect(logins).toEqual([expect.objectContaining({ path: '/redfish/v1/SessionService/Sessions', status: 401 })]);
    expect(m.state().sessions).toBe(0);
  });

  it('one session per BMC, reused; an expired session logs in again; close() logs out', async () => {
    const m = M.auth!;
    const own = new RedfishTransport(TRANSPORT);
    const d = redfishDrivers({ transport: own, ...TUNING }).find((x) => x.name === 'redfish')!;
    const logins = () => sim.requests('auth').filter((r) => r.method === 'POST' && r.path === '/redfish/v1/SessionService/Sessions' && r.status === 201).length;
    const start = logins();
    for (let i = 0; i < 3; i++) await d.powerState(ep(m));
    expect(logins() - start).toBe(1);
    expect(m.state().sessions).toBe(1);
    sim.expireSessions('auth');
    expect(await d.powerState(ep(m))).toBe('off');
    expect(logins() - start).toBe(2);
    await own.close();
    expect(m.state().sessions).toBe(0);
    await expect(d.powerState(ep(m))).rejects.toThrow(/transport is closed/);
  });

  it('basic auth when the BMC has no sessions; a wrong password there is BMC_AUTH_FAILED too', async () => {
    const m = M.basic!;
    expect(await drv('redfish').powerState(ep(m))).toBe('off');
    const on = await drv('redfish').power(ep(m), 'on');
    expect(on.notes).toContain('the BMC offers no SessionService (no Links.Sessions): used basic auth');
    expect(m.state().powerState).toBe('On');
    const e = await failure(drv('redfish').powerState(ep(m, { password: 'not-basic-pass' })));
    expect(e.code).toBe('BMC_AUTH_FAILED');
    expect(e.message).not.toContain('not-basic-pass');
  });
});

describe('faults', () => {
  afterEach(() => sim.setFault('faults', {}));
  const m = () => M.faults!;

  it('500s: reads and the boot PATCH are retried a bounded number of times; a Reset never is', async () => {
    sim.setFault('faults', { fail500Next: 2 });
    expect(await drv('redfish').powerState(ep(m()))).toBe('off');
    sim.setFault('faults', { fail500Next: 5 });
    const e = await failure(drv('redfish').powerState(ep(m())));
    expect([e.code, e.retryable]).toEqual(['BMC_ERROR', true]);
    sim.setFault('faults', { fail500Destructive: 1 });
    await drv('redfish').setBootDevice(ep(m()), 'pxe', { persistent: false });
    expect(kinds('faults', 'bootOverride').map((c) => c.status)).toEqual([500, 204]);
    sim.setFault('faults', { fail500Destructive: 1 });
    const r = await failure(drv('redfish').power(ep(m()), 'on', { idempotencyKey: 'k500' }));
    expect([r.code, r.retryable]).toEqual(['BMC_ERROR', false]);
    expect(r.message).toMatch(/Reset \(On\).*HTTP 500/);
    expect(resets('faults')).toEqual([['fault:500', 500]]);
  });

  it('503 with Retry-After: waits as asked and sends again (a Reset too, it was not acted on); too long a wait is BMC_BUSY', async () => {
    sim.setFault('faults', { unavailable: { retryAfterS: 1, count: 1, destructiveOnly: true } });
    const on = await drv('redfish').power(ep(m()), 'on', { idempotencyKey: 'k503' });
    expect(on.value).toBe('on');
    const calls = kinds('faults', 'reset').filter((c) => c.idempotencyKey === 'k503:On');
    expect(calls.map((c) => c.status)).toEqual([503, 204]);
    expect(calls[1]!.at - calls[0]!.at).toBeGreaterThanOrEqual(990);
    expect(on.notes).toContain('the BMC answered 503; waited 1000 ms as its Retry-After asked');
    // The same key twice, but only once accepted: not a duplicate.
    expect(sim.counts('faults').duplicateKeys).toEqual([]);
    sim.setFault('faults', { unavailable: { retryAfterS: 120 } });
    const before = sim.requests('faults').length;
    const e = await failure(drv('redfish').powerState(ep(m())));
    expect([e.code, e.retryable]).toEqual(['BMC_BUSY', true]);
    expect(e.message).toMatch(/Retry-After 120/);
    expect(sim.requests('faults').length - before).toBe(1);
    sim.setFault('faults', {});
    await drv('redfish').power(ep(m()), 'off');
    expect(m().state().powerState).toBe('Off');
  });

  it('hang: a read times out (retryable); a Reset that reached the BMC and got no answer is BMC_TIMEOUT and not sent again', async () => {
    sim.setFault('faults', { hang: true });
    const e = await failure(drv('redfish').powerState(ep(m())));
    expect([e.code, e.retryable]).toEqual(['BMC_TIMEOUT', true]);
    sim.setFault('faults', { hangDestructive: true });
    const before = kinds('faults', 'reset').length;
    const r = await failure(drv('redfish').power(ep(m()), 'on'));
    expect([r.code, r.retryable]).toEqual(['BMC_TIMEOUT', false]);
    expect(r.message).toMatch(/may or may not have acted, so it was not sent again/);
    expect(kinds('faults', 'reset').slice(before).map((c) => c.detail)).toEqual(['fault:hang']);
  });

  it('unreachable: nothing listens at the address', async () => {
    const e = await failure(drv('redfish').powerState({ address: 'http://127.0.0.1:1', username: 'admin', password: 'x', options: {} }));
    expect([e.code, e.retryable]).toEqual(['BMC_UNREACHABLE', true]);
  });

  it('an action or boot device outside the interface is BMC_UNSUPPORTED before anything is sent', async () => {
    const before = sim.requests('faults').length;
    const a = await failure(drv('redfish').power(ep(m()), 'explode' as never));
    expect([a.code, a.message]).toEqual(['BMC_UNSUPPORTED', expect.stringMatching(/power action "explode"/)]);
    const b = await failure(drv('redfish').setBootDevice(ep(m()), 'floppy' as never, { persistent: false }));
    expect([b.code, b.message]).toEqual(['BMC_UNSUPPORTED', expect.stringMatching(/boot device "floppy"/)]);
    expect(sim.requests('faults')).toHaveLength(before);
  });

  it('an aborted call stops at once', async () => {
    const e = await failure(drv('redfish').powerState(ep(m()), { signal: AbortSignal.abort() }));
    expect(e.message).toMatch(/aborted/);
  });
});

describe('read-back', () => {
  it('lies: a Reset, a restart, an insert and a boot override that answer 204 and do nothing are BMC_NOT_APPLIED', async () => {
    const m = M.lies!;
    sim.setFault('lies', { lies: true });
    const short = { verifyDeadlineMs: 200 };
    const on = await failure(drv('redfish').power(ep(m), 'on', short));
    expect(on.code).toBe('BMC_NOT_APPLIED');
    expect(on.message).toMatch(/accepted ResetType On but the power state was still off after 200 ms/);
    const vm = await failure(drv('redfish').insertMedia(ep(m), 'http://images.example/l.iso', short));
    expect(vm.code).toBe('BMC_NOT_APPLIED');
    const boot = await failure(drv('redfish').setBootDevice(ep(m), 'cd', { persistent: false }, short));
    expect(boot.code).toBe('BMC_NOT_APPLIED');
    sim.setFault('lies', {});
    await drv('redfish').power(ep(m), 'on');
    sim.setFault('lies', { lies: true });
    // rackmount1 reports LastResetTime: a restart that never happened shows.
    const cyc = await failure(drv('redfish').power(ep(m), 'cycle', short));
    expect(cyc.code).toBe('BMC_NOT_APPLIED');
    expect(cyc.message).toMatch(/ForceRestart but showed no restart/);
    sim.setFault('lies', {});
    const real = await drv('redfish').power(ep(m), 'cycle');
    expect(real.value).toBe('on');
    expect(m.state().resetsApplied).toBe(2);
  });

  it('applyDelayMs: a change slower than the deadline is BMC_NOT_APPLIED; a deadline long enough waits for it', async () => {
    const m = M.slow!;
    // Two seconds of apply delay against a 100 ms deadline: the change is still in flight when the
    // driver gives up, even on a loaded machine (with the machine's own 300 ms, a stall of 200 ms
    // between the Reset and the last read-back would let the driver see it applied).
    sim.setFault('slow', { applyDelayMs: 2000 });
    try {
      const e = await failure(drv('redfish').power(ep(m), 'on', { verifyDeadlineMs: 100 }));
      expect(e.code).toBe('BMC_NOT_APPLIED');
      expect(e.message).toMatch(/still powering-on/);
      // Still powering on: nothing more is sent, the driver waits for it.
      const on = await drv('redfish').power(ep(m), 'on', { verifyDeadlineMs: 10_000 });
      expect([on.value, m.state().powerState]).toEqual(['on', 'On']);
      expect(resets('slow')).toEqual([['On', 204]]);
    } finally {
      sim.setFault('slow', {});
    }
    const off = await drv('redfish').power(ep(m), 'off', { verifyDeadlineMs: 10_000 });
    expect(off.value).toBe('off');
    expect(m.state().powerState).toBe('Off');
  });

  it('202 with a task monitor: polled until it completes, then read back', async () => {
    const m = M.async!;
    // A second of apply delay: the task is still running at the driver's first poll of its monitor,
    // even on a loaded machine (the machine's own 40 ms was gone by one stalled round trip). The
    // deadline leaves the task that second and more.
    sim.setFault('async', { asyncTasks: true, applyDelayMs: 1000 });
    const on = await drv('redfish').power(ep(m), 'on', { verifyDeadlineMs: 10_000 });
    expect(on.value).toBe('on');
    const polls = sim.requests('async').filter((r) => r.path.startsWith('/redfish/v1/TaskService/TaskMonitors/'));
    expect(polls.map((r) => r.status)).toContain(202);
    expect(polls.at(-1)!.status).toBe(204);
  });

  it('If-Match: a 428 fetches the etag and sends once more; the BMC is then known to want it', async () => {
    const m = M.etag!;
    const r = await drv('redfish').setBootDevice(ep(m), 'pxe', { persistent: false, uefi: true });
    expect(m.state().boot).toEqual({ target: 'Pxe', enabled: 'Once', mode: 'UEFI' });
    expect(kinds('etag', 'bootOverride').map((c) => c.status)).toEqual([428, 204]);
    expect(r.notes.join(' ')).toMatch(/answered 428 to the boot override; sent it again with If-Match W\/"\d+"/);
    await drv('redfish').setBootDevice(ep(m), 'cd', { persistent: false });
    expect(kinds('etag', 'bootOverride').map((c) => c.status)).toEqual([428, 204, 204]);
  });
});

describe('ResetType fallback', () => {
  it('501 for a listed ResetType: the next choice, said in the notes', async () => {
    const m = M.cycle501!;
    sim.setFault('cycle501', { notImplementedResetTypes: ['PowerCycle'] });
    const r = await drv('redfish').power(ep(m), 'cycle', { idempotencyKey: 'c1' });
    expect(r.value).toBe('on');
    expect(r.notes).toContain('ResetType PowerCycle answered 501; used ForceRestart');
    expect(resets('cycle501')).toEqual([['PowerCycle', 501], ['ForceRestart', 204]]);
    expect(sim.counts('cycle501').calls.map((c) => c.idempotencyKey)).toEqual(['c1:PowerCycle', 'c1:ForceRestart']);
  });

  it('PowerCycle and ForceRestart both 501: ForceOff then On, each read back', async () => {
    const m = M.cycle501b!;
    sim.setFault('cycle501b', { notImplementedResetTypes: ['PowerCycle', 'ForceRestart'] });
    const r = await drv('redfish').power(ep(m), 'cycle');
    expect(r.value).toBe('on');
    expect(r.notes).toContain('ResetType PowerCycle answered 501; ResetType ForceRestart answered 501; used ForceOff then On');
    expect(resets('cycle501b')).toEqual([['PowerCycle', 501], ['ForceRestart', 501], ['ForceOff', 204], ['On', 204]]);
    expect(m.state().powerState).toBe('On');
    // No Nmi listed here: refused before anything is sent.
    const e = await failure(drv('redfish').power(ep(m), 'nmi'));
    expect(e.code).toBe('BMC_UNSUPPORTED');
    expect(resets('cycle501b')).toHaveLength(4);
  });

  it('nmi where listed; a cycle of a machine that is off powers it on', async () => {
    const m = M.cycle501!;
    const n = await drv('redfish').power(ep(m), 'nmi');
    expect(m.state().nmis).toBe(1);
    expect(n.notes.join(' ')).toMatch(/NMI sent/);
    await drv('redfish').power(ep(m), 'off');
    const c = await drv('redfish').power(ep(m), 'cycle');
    expect(c.notes).toContain('the machine was off: powered it on instead of cycle');
    expect(resets('cycle501').slice(-2)).toEqual([['ForceOff', 204], ['On', 204]]);
  });
});

describe('addresses', () => {
  it('maps a BMC address to one origin, https unless http:// is written', () => {
    expect(bmcOrigin('10.0.0.5')).toBe('https://10.0.0.5');
    expect(bmcOrigin('bmc-7.example:8443')).toBe('https://bmc-7.example:8443');
    expect(bmcOrigin('fe80::1')).toBe('https://[fe80::1]');
    expect(bmcOrigin('[2001:db8::5]:444')).toBe('https://[2001:db8::5]:444');
    expect(bmcOrigin('http://127.0.0.1:8000/')).toBe('http://127.0.0.1:8000');
    expect(bmcOrigin('https://bmc.example:443')).toBe('https://bmc.example');
    expect(() => bmcOrigin('https://bmc.example/redfish/v1')).toThrow(/has a path/);
    expect(() => bmcOrigin('ftp://bmc.example')).toThrow(/scheme ftp:/);
    let msg = '';
    try { bmcOrigin('https://root:hunter22@bmc.example'); } catch (e) { msg = (e as Error).message; }
    expect(msg).toMatch(/carries credentials/);
    expect(msg).not.toContain('hunter22');
  });
});

describe('TLS', () => {
  let tlsSim: RedfishSim;
  let dir: string;
  let ca: string;
  let otherCa: string;
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redfish-tls-'));
    fs.writeFileSync(path.join(dir, 'ext.cnf'), 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n');
    openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=test BMC CA');
    openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'other.key', '-out', 'other.pem', '-days', '2', '-subj', '/CN=another CA');
    openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'bmc.key', '-out', 'bmc.csr', '-subj', '/CN=127.0.0.1');
    openssl('x509', '-req', '-in', 'bmc.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'bmc.pem', '-days', '2', '-extfile', 'ext.cnf');
    ca = fs.readFileSync(path.join(dir, 'ca.pem'), 'utf8');
    otherCa = fs.readFileSync(path.join(dir, 'other.pem'), 'utf8');
    tlsSim = await startRedfishSim({ machines: [{ id: 'tls' }], tls: { key: fs.readFileSync(path.join(dir, 'bmc.key')), cert: fs.readFileSync(path.join(dir, 'bmc.pem')) } });
  });
  afterAll(async () => {
    await tlsSim?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('verifies by default; a per-node CA or an explicit insecure: true; anything else is refused before a request', async () => {
    const m = tlsSim.machines[0]!;
    expect(m.url.startsWith('https://')).toBe(true);
    const d = drv('redfish');
    const e = await failure(d.powerState(ep(m)));
    expect(e.code).toBe('BMC_TLS');
    expect(e.message).toMatch(/driverOptions.caCert/);
    const wrong = await failure(d.powerState(ep(m, { options: { caCert: otherCa } })));
    expect(wrong.code).toBe('BMC_TLS');
    expect(tlsSim.requests('tls')).toHaveLength(0);
    expect(await d.powerState(ep(m, { options: { caCert: ca } }))).toBe('off');
    expect(await d.powerState(ep(m, { options: { insecure: true } }))).toBe('off');
    const n = tlsSim.requests('tls').length;
    for (const options of [{ insecure: 'true' }, { insecure: 1 }, { caCert: 'not a pem' }, { caCert: ca, insecure: true }]) {
      const bad = await failure(d.powerState(ep(m, { options })));
      expect(bad.code).toBe('BMC_TLS');
      expect(bad.message).toMatch(/driverOptions\./);
    }
    expect(tlsSim.requests('tls')).toHaveLength(n);
  });
});

describe.each(FLAVOURS)('booting the virtual CD on %s: insert, boot once from it, power on, eject', (flavour) => {
  const id = `vb-${flavour}`;
  const image = 'http://images.example/install.iso';

  it('the machine boots the inserted image, set the vendor\'s way, each PATCH with If-Match once the BMC asks for it', async () => {
    const m = M[id]!;
    const d = drv(DRIVER_OF[flavour]);
    const slotId = flavour === 'xcc' ? 'EXT1' : flavour === 'cimc' ? 'CD2' : 'CD1';
    const inserted = await d.insertMedia(ep(m), image);
    if (flavour === 'cimc') expect(inserted.notes).toContain('InsertMedia answered 405 on CD1; mounted on CD2 instead');
    if (flavour === 'xcc') expect(inserted.notes.join(' ')).toMatch(/answered 428 to the image of EXT1; sent it again with If-Match/);
    expect(m.state().virtualMedia.find((v) => v.id === slotId)).toMatchObject({ image, inserted: true });
    const boot = await d.setBootDevice(ep(m), 'cd', { persistent: false });
    const notes = boot.notes.join(' ');
    if (flavour === 'idrac') {
      expect(notes).toContain("idrac: set Dell's first boot device VCD-DVD once (a Cd override would boot the physical drive)");
      expect(m.state().dell).toEqual({ firstBootDevice: 'VCD-DVD', bootOnce: 'Enabled' });
      expect(m.state().boot.target).toBe('None');
    } else if (flavour === 'ilo' || flavour === 'ilo4') {
      expect(notes).toContain(`ilo: set CD1 to boot on the next server reset (Oem.${flavour === 'ilo' ? 'Hpe' : 'Hp'}.BootOnNextServerReset)`);
      expect(m.state().virtualMedia.find((v) => v.id === 'CD1')!.bootOnNextServerReset).toBe(true);
      expect(m.state().boot.target).toBe('None');
    } else {
      expect(m.state().boot).toMatchObject({ target: 'Cd', enabled: 'Once' });
    }
    // Set again: nothing more is sent.
    const patches = sim.counts(id).calls.filter((c) => c.kind === 'bootOverride').length;
    await d.setBootDevice(ep(m), 'cd', { persistent: false });
    expect(sim.counts(id).calls.filter((c) => c.kind === 'bootOverride')).toHaveLength(patches);
    await d.power(ep(m), 'on');
    expect(boots.filter((b) => b.id === id).at(-1)).toMatchObject({ target: 'Cd', image });
    await d.ejectMedia(ep(m));
    expect(m.state().virtualMedia.every((v) => !v.inserted && v.image === null)).toBe(true);
    // Every change was accepted once it carried If-Match (428 first, where the BMC asked for it).
    const statuses = sim.counts(id).calls.filter((c) => c.kind !== 'reset').map((c) => c.status);
    expect(statuses.every((st) => st === 204 || st === 428 || (flavour === 'cimc' && st === 405))).toBe(true);
    await d.power(ep(m), 'off');
  });

  if (flavour === 'idrac') {
    it('the generic driver\'s Cd override on an iDRAC boots the physical drive, not the image: why the flavour uses VCD-DVD', async () => {
      const m = M['vb-idrac-generic']!;
      const d = drv('redfish');
      await d.insertMedia(ep(m), image);
      await d.setBootDevice(ep(m), 'cd', { persistent: false });
      await d.power(ep(m), 'on');
      expect(boots.filter((b) => b.id === m.id).at(-1)).toMatchObject({ target: 'Cd', image: null });
    });
  }
});
