/**
 * The Redfish BMC simulator (test/sim/redfish) over real HTTP with fetch: what the Redfish drivers
 * will be tested against, so each behaviour a driver relies on, each fault and each vendor quirk is
 * pinned here.
 */
import { canConnect } from './helpers/client';
import { startRedfishSim, type BootEvent, type RedfishSim, type SimMachine } from './sim/redfish/server';
import { until } from './helpers/streams';

type Json = Record<string, any>;
interface Call { status: number; body: Json | null; headers: Headers; ms: number }

function basic(m: SimMachine, password = m.password): string {
  return `Basic ${Buffer.from(`${m.username}:${password}`).toString('base64')}`;
}

async function rf(m: SimMachine, path: string, init: { method?: string; body?: unknown; headers?: Record<string, string>; auth?: string | null; timeoutMs?: number } = {}): Promise<Call> {
  const headers: Record<string, string> = { ...init.headers };
  const auth = init.auth === undefined ? basic(m) : init.auth;
  if (auth) headers.Authorization = auth;
  if (init.body !== undefined) headers['Content-Type'] = 'application/json';
  const t0 = Date.now();
  const res = await fetch(m.url + path, { method: init.method ?? 'GET', headers, body: init.body === undefined ? undefined : JSON.stringify(init.body), signal: AbortSignal.timeout(init.timeoutMs ?? 5000) });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as Json) : null, headers: res.headers, ms: Date.now() - t0 };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The ComputerSystem's path, found by following links from the service root (never built). */
async function systemOf(m: SimMachine): Promise<string> {
  const root = await rf(m, '/redfish/v1', { auth: null });
  const systems = await rf(m, root.body!.Systems['@odata.id']);
  return systems.body!.Members[0]['@odata.id'];
}
async function resetTarget(m: SimMachine): Promise<string> {
  const sys = await rf(m, await systemOf(m));
  return sys.body!.Actions['#ComputerSystem.Reset'].target;
}
/** The first VirtualMedia's InsertMedia/EjectMedia targets, from the System's or the Manager's collection. */
async function mediaTargets(m: SimMachine): Promise<{ vm: string; insert: string; eject: string }> {
  const sys = await rf(m, await systemOf(m));
  let coll = sys.body!.VirtualMedia?.['@odata.id'] as string | undefined;
  if (!coll) {
    const mgr = await rf(m, sys.body!.Links.ManagedBy[0]['@odata.id']);
    coll = mgr.body!.VirtualMedia['@odata.id'];
  }
  const list = await rf(m, coll!);
  const cd = list.body!.Members.map((x: Json) => x['@odata.id'] as string).find((p: string) => p.endsWith('CD1'));
  const vm = await rf(m, cd);
  return { vm: cd, insert: vm.body!.Actions['#VirtualMedia.InsertMedia'].target, eject: vm.body!.Actions['#VirtualMedia.EjectMedia'].target };
}

let sim: RedfishSim;
const M: Record<string, SimMachine> = {};
const boots: (BootEvent & { id: string })[] = [];
const bootsOf = (id: string) => boots.filter((b) => b.id === id);

beforeAll(async () => {
  sim = await startRedfishSim({
    machines: [
      { id: 'plain', uuid: '11111111-2222-3333-4444-555555555555', macs: ['52:54:00:aa:00:01', '52:54:00:aa:00:02'], serial: 'SER-1' },
      { id: 'auth', password: 's3cret' },
      { id: 'slow', applyDelayMs: 1000 },
      { id: 'etag', requireEtag: true },
      { id: 'faults', applyDelayMs: 100 },
      { id: 'tele', mockup: 'public-telemetry' },
      { id: 'idrac', flavour: 'idrac', mockup: 'public-localstorage' },
      { id: 'supermicro', flavour: 'supermicro' },
      { id: 'ilo', flavour: 'ilo' },
      { id: 'ilo4', flavour: 'ilo4' },
      { id: 'xcc', flavour: 'xcc' },
      { id: 'cimc', flavour: 'cimc' },
      { id: 'counted' },
      { id: 'idrac-boot', flavour: 'idrac' },
      { id: 'ilo-boot', flavour: 'ilo' },
      { id: 'ilo4-boot', flavour: 'ilo4' },
    ],
    onBoot: (machine, boot) => { boots.push({ id: machine.id, ...boot }); },
  });
  for (const m of sim.machines) M[m.id] = m;
});
afterAll(async () => { await sim.stop(); });

describe('service root and links', () => {
  it('serves the root without auth and every other resource only with it; links lead to the Reset target', async () => {
    const m = M.plain!;
    const root = await rf(m, '/redfish/v1/', { auth: null });
    expect(root.status).toBe(200);
    expect(root.body!['@odata.type']).toMatch(/^#ServiceRoot\./);
    expect((await rf(m, root.body!.Systems['@odata.id'], { auth: null })).status).toBe(401);
    const target = await resetTarget(m);
    expect(target).toBe('/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset');
  });

  it('overlays the machine own UUID, MACs and serial on the mockup', async () => {
    const m = M.plain!;
    const sys = await rf(m, await systemOf(m));
    expect(sys.body!.UUID).toBe('11111111-2222-3333-4444-555555555555');
    expect(sys.body!.SerialNumber).toBe('SER-1');
    const nics = await rf(m, sys.body!.EthernetInterfaces['@odata.id']);
    const macs = [];
    for (const n of nics.body!.Members) macs.push((await rf(m, n['@odata.id'])).body!.MACAddress);
    expect(macs.slice(0, 2)).toEqual(['52:54:00:aa:00:01', '52:54:00:aa:00:02']);
    // Another machine of the same mockup has its own identity.
    expect((await rf(M.auth!, await systemOf(M.auth!), { auth: basic(M.auth!) })).body!.UUID).not.toBe(sys.body!.UUID);
  });
});

describe('auth', () => {
  it('basic auth: the right password reads, a wrong one gets 401 with a Redfish error body', async () => {
    const m = M.auth!;
    expect((await rf(m, '/redfish/v1/Systems')).status).toBe(200);
    const bad = await rf(m, '/redfish/v1/Systems', { auth: basic(m, 'password') });
    expect(bad.status).toBe(401);
    expect(bad.body!.error['@Message.ExtendedInfo'][0].MessageId).toMatch(/Unauthorized/);
  });

  it('sessions: POST Sessions gives X-Auth-Token and Location; the token reads; DELETE logs out', async () => {
    const m = M.auth!;
    const root = await rf(m, '/redfish/v1', { auth: null });
    const sessionsUrl = root.body!.Links.Sessions['@odata.id'];
    const wrong = await rf(m, sessionsUrl, { method: 'POST', auth: null, body: { UserName: m.username, Password: 'nope' } });
    expect(wrong.status).toBe(401);
    expect(wrong.body!.error['@Message.ExtendedInfo']).toHaveLength(1);
    const made = await rf(m, sessionsUrl, { method: 'POST', auth: null, body: { UserName: m.username, Password: m.password } });
    expect(made.status).toBe(201);
    const token = made.headers.get('x-auth-token')!;
    const location = made.headers.get('location')!;
    expect(token).toBeTruthy();
    expect(location).toMatch(/^\/redfish\/v1\/SessionService\/Sessions\/\w+$/);
    const tok = { 'X-Auth-Token': token };
    expect((await rf(m, '/redfish/v1/Systems', { auth: null, headers: tok })).status).toBe(200);
    expect((await rf(m, sessionsUrl, { auth: null, headers: tok })).body!.Members).toEqual([{ '@odata.id': location }]);
    expect((await rf(m, location, { method: 'DELETE', auth: null, headers: tok })).status).toBe(204);
    expect((await rf(m, '/redfish/v1/Systems', { auth: null, headers: tok })).status).toBe(401);
    expect((await rf(m, '/redfish/v1/Systems', { auth: null, headers: { 'X-Auth-Token': 'forged' } })).status).toBe(401);
  });
});

describe('Reset', () => {
  it('applies the power change only after applyDelayMs, so a client must read back', async () => {
    const m = M.slow!;
    const sysPath = await systemOf(m);
    expect((await rf(m, sysPath)).body!.PowerState).toBe('Off');
    expect((await rf(m, await resetTarget(m), { method: 'POST', body: { ResetType: 'On' } })).status).toBe(204);
    expect((await rf(m, sysPath)).body!.PowerState).toBe('PoweringOn');
    await until(() => m.state().powerState === 'On', 5000);
    expect((await rf(m, sysPath)).body!.PowerState).toBe('On');
    expect((await rf(m, await resetTarget(m), { method: 'POST', body: { ResetType: 'ForceOff' } })).status).toBe(204);
    expect((await rf(m, sysPath)).body!.PowerState).toBe('PoweringOff');
    await until(() => m.state().powerState === 'Off', 5000);
    expect(m.state().resetsApplied).toBe(2);
  });

  it('refuses a ResetType outside AllowableValues with 400 naming ResetType (inline list and ActionInfo)', async () => {
    for (const m of [M.plain!, M.tele!]) {
      const before = m.state().powerState;
      const r = await rf(m, await resetTarget(m), { method: 'POST', body: { ResetType: 'PowerCycle' } });
      expect(r.status).toBe(400);
      const info = r.body!.error['@Message.ExtendedInfo'][0];
      expect(info.MessageId).toMatch(/ActionParameterValueNotInList/);
      expect(info.MessageArgs).toEqual(['PowerCycle', 'ResetType', 'ComputerSystem.Reset']);
      expect(m.state().powerState).toBe(before);
      expect((await rf(m, await resetTarget(m), { method: 'POST', body: {} })).status).toBe(400);
    }
  });
});

describe('boot override and etag', () => {
  it('PATCH Boot needs If-Match with the current @odata.etag when requireEtag: 428 without, 412 stale, 204 current', async () => {
    const m = M.etag!;
    const sysPath = await systemOf(m);
    const sys = await rf(m, sysPath);
    const etag = sys.body!['@odata.etag'];
    expect(etag).toBe(sys.headers.get('etag'));
    const patch = { Boot: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Once', BootSourceOverrideMode: 'UEFI' } };
    expect((await rf(m, sysPath, { method: 'PATCH', body: patch })).status).toBe(428);
    expect((await rf(m, sysPath, { method: 'PATCH', body: patch, headers: { 'If-Match': 'W/"999"' } })).status).toBe(412);
    expect(m.state().boot).toEqual({ target: 'None', enabled: 'Disabled', mode: 'UEFI' });
    expect((await rf(m, sysPath, { method: 'PATCH', body: patch, headers: { 'If-Match': etag } })).status).toBe(204);
    expect(m.state().boot).toEqual({ target: 'Pxe', enabled: 'Once', mode: 'UEFI' });
    // The etag moved on: the old one is now stale.
    expect((await rf(m, sysPath, { method: 'PATCH', body: patch, headers: { 'If-Match': etag } })).status).toBe(412);
    const bad = await rf(m, sysPath, { method: 'PATCH', body: { Boot: { BootSourceOverrideTarget: 'Floppy' } }, headers: { 'If-Match': (await rf(m, sysPath)).body!['@odata.etag'] } });
    expect(bad.status).toBe(400);
    expect(bad.body!.error['@Message.ExtendedInfo'][0].MessageArgs).toEqual(['Floppy', 'BootSourceOverrideTarget']);
  });
});

describe('faults', () => {
  afterEach(() => sim.setFault('faults', {}));

  it('added latency', async () => {
    sim.setFault('faults', { latencyMs: 250 });
    const r = await rf(M.faults!, '/redfish/v1', { auth: null });
    expect(r.status).toBe(200);
    expect(r.ms).toBeGreaterThanOrEqual(240);
  });

  it('the next N requests answer 500, then it recovers', async () => {
    sim.setFault('faults', { fail500Next: 2 });
    const st = [];
    for (let i = 0; i < 3; i++) st.push((await rf(M.faults!, '/redfish/v1/Systems')).status);
    expect(st).toEqual([500, 500, 200]);
  });

  it('503 with Retry-After', async () => {
    sim.setFault('faults', { unavailable: { retryAfterS: 3, count: 1 } });
    const r = await rf(M.faults!, '/redfish/v1/Systems');
    expect(r.status).toBe(503);
    expect(r.headers.get('retry-after')).toBe('3');
    expect((await rf(M.faults!, '/redfish/v1/Systems')).status).toBe(200);
  });

  it('lies: Reset and InsertMedia answer 204 and nothing changes', async () => {
    const m = M.faults!;
    sim.setFault('faults', { lies: true });
    const before = m.state();
    expect((await rf(m, await resetTarget(m), { method: 'POST', body: { ResetType: 'On' } })).status).toBe(204);
    const { insert, vm } = await mediaTargets(m);
    expect((await rf(m, insert, { method: 'POST', body: { Image: 'http://x/a.iso' } })).status).toBe(204);
    await sleep(200);
    expect((await rf(m, await systemOf(m))).body!.PowerState).toBe(before.powerState);
    expect((await rf(m, vm)).body!.Inserted).toBe(false);
  });

  it('501 for a ResetType that AllowableValues lists', async () => {
    const m = M.faults!;
    sim.setFault('faults', { notImplementedResetTypes: ['GracefulRestart'] });
    const sys = await rf(m, await systemOf(m));
    expect(sys.body!.Actions['#ComputerSystem.Reset']['ResetType@Redfish.AllowableValues']).toContain('GracefulRestart');
    expect((await rf(m, await resetTarget(m), { method: 'POST', body: { ResetType: 'GracefulRestart' } })).status).toBe(501);
    expect((await rf(m, await resetTarget(m), { method: 'POST', body: { ResetType: 'ForceRestart' } })).status).toBe(204);
  });

  it('asyncTasks: Reset answers 202 with a task monitor that runs until the change applies', async () => {
    const m = M.faults!;
    await rf(m, await resetTarget(m), { method: 'POST', body: { ResetType: 'ForceOff' } });
    await until(() => m.state().powerState === 'Off');
    // A second of apply delay: the task is still running when the monitor is first read, even on a
    // loaded machine (100 ms was not, once, under the full suite).
    sim.setFault('faults', { asyncTasks: true, applyDelayMs: 1000 });
    const r = await rf(m, await resetTarget(m), { method: 'POST', body: { ResetType: 'On' } });
    expect(r.status).toBe(202);
    const monitor = r.headers.get('location')!;
    expect(monitor).toMatch(/^\/redfish\/v1\/TaskService\/TaskMonitors\//);
    const running = await rf(m, monitor);
    expect(running.status).toBe(202);
    expect(running.body!.TaskState).toBe('Running');
    expect(m.state().powerState).toBe('PoweringOn');
    const deadline = Date.now() + 5000;
    let st = running.status;
    while (st === 202 && Date.now() < deadline) { await sleep(100); st = (await rf(m, monitor)).status; }
    expect(st).toBe(204);
    expect((await rf(m, r.body!['@odata.id'])).body!.TaskState).toBe('Completed');
    expect(m.state().powerState).toBe('On');
  });

  it('hang: a request is never answered, and stop() still leaves nothing listening', async () => {
    const own = await startRedfishSim({ machines: 1 });
    const m = own.machines[0]!;
    let stopped = false;
    try {
      own.setFault(m.id, { hang: true });
      await expect(rf(m, '/redfish/v1', { auth: null, timeoutMs: 300 })).rejects.toThrow(/timeout|aborted/i);
      const pending = fetch(m.url + '/redfish/v1').then(() => 'answered', () => 'failed');
      await sleep(50);
      await own.stop();
      stopped = true;
      expect(await pending).toBe('failed');
    } finally {
      // A failed assertion must not leave the server listening (jest would never exit).
      if (!stopped) await own.stop();
    }
    for (const url of [m.url, own.url]) expect(await canConnect(url)).toBe(false);
  });
});


describe('virtual media at the targets the mockup declares', () => {
  it('public-telemetry: InsertMedia/EjectMedia at its non-standard VM.* targets, the guessed standard URL is 404', async () => {
    const m = M.tele!;
    const t = await mediaTargets(m);
    expect(t.insert).toBe('/redfish/v1/Managers/1/VirtualMedia/CD1/Actions/VM.InsertMedia');
    expect((await rf(m, '/redfish/v1/Managers/1/VirtualMedia/CD1/Actions/VirtualMedia.InsertMedia', { method: 'POST', body: { Image: 'http://x/a.iso' } })).status).toBe(404);
    expect((await rf(m, t.insert, { method: 'POST', body: { Image: 'http://x/a.iso' } })).status).toBe(204);
    const vm = (await rf(m, t.vm)).body!;
    expect([vm.Image, vm.Inserted, vm.ConnectedVia]).toEqual(['http://x/a.iso', true, 'URI']);
    expect((await rf(m, t.eject, { method: 'POST', body: {} })).status).toBe(204);
    expect((await rf(m, t.vm)).body!.Inserted).toBe(false);
  });
});

describe('vendor flavours', () => {
  it('idrac: VirtualMedia under the System (moved from the Manager), InsertMedia refused while connected', async () => {
    const m = M.idrac!;
    const sysPath = await systemOf(m);
    const t = await mediaTargets(m);
    expect(t.insert.startsWith(`${sysPath}/VirtualMedia/`)).toBe(true);
    const mgr = await rf(m, '/redfish/v1/Managers/BMC');
    expect(mgr.body!.VirtualMedia).toBeUndefined();
    expect((await rf(m, t.insert, { method: 'POST', body: { Image: 'http://x/a.iso' } })).status).toBe(204);
    const again = await rf(m, t.insert, { method: 'POST', body: { Image: 'http://x/b.iso' } });
    expect(again.status).toBe(500);
    expect(again.body!.error.message).toMatch(/already connected/);
    expect((await rf(m, t.eject, { method: 'POST', body: {} })).status).toBe(204);
    expect((await rf(m, t.insert, { method: 'POST', body: { Image: 'http://x/b.iso' } })).status).toBe(204);
    expect(m.state().virtualMedia.find((v) => v.id === 'CD1')!.image).toBe('http://x/b.iso');
  });

  it('supermicro: no BootSourceOverrideMode, a PATCH naming it is refused; InsertMedia refused while Image is set', async () => {
    const m = M.supermicro!;
    const sysPath = await systemOf(m);
    expect((await rf(m, sysPath)).body!.Boot).not.toHaveProperty('BootSourceOverrideMode');
    expect((await rf(m, sysPath, { method: 'PATCH', body: { Boot: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideMode: 'UEFI' } } })).status).toBe(400);
    expect((await rf(m, sysPath, { method: 'PATCH', body: { Boot: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Once' } } })).status).toBe(204);
    const t = await mediaTargets(m);
    expect((await rf(m, t.insert, { method: 'POST', body: { Image: 'http://x/a.iso', Inserted: false } })).status).toBe(204);
    expect((await rf(m, t.insert, { method: 'POST', body: { Image: 'http://x/b.iso' } })).status).toBe(400);
    await rf(m, t.eject, { method: 'POST', body: {} });
    expect((await rf(m, t.insert, { method: 'POST', body: { Image: 'http://x/b.iso' } })).status).toBe(204);
  });

  it('ilo: EjectMedia with nothing inserted is an error; ilo4: InsertMedia accepts only Image', async () => {
    const ilo = M.ilo!;
    const t = await mediaTargets(ilo);
    expect((await rf(ilo, t.eject, { method: 'POST', body: {} })).status).toBe(400);
    expect((await rf(ilo, t.insert, { method: 'POST', body: { Image: 'http://x/a.iso', Inserted: true } })).status).toBe(204);
    expect((await rf(ilo, t.eject, { method: 'POST', body: {} })).status).toBe(204);
    const ilo4 = M.ilo4!;
    const t4 = await mediaTargets(ilo4);
    const extra = await rf(ilo4, t4.insert, { method: 'POST', body: { Image: 'http://x/a.iso', Inserted: true } });
    expect(extra.status).toBe(400);
    expect(extra.body!.error['@Message.ExtendedInfo'][0].MessageArgs[0]).toBe('Inserted');
    expect((await rf(ilo4, t4.insert, { method: 'POST', body: { Image: 'http://x/a.iso' } })).status).toBe(204);
  });

  it('xcc: a Continuous disk override is accepted and recorded, a Once one is not', async () => {
    const m = M.xcc!;
    const sysPath = await systemOf(m);
    expect((await rf(m, sysPath, { method: 'PATCH', body: { Boot: { BootSourceOverrideTarget: 'Hdd', BootSourceOverrideEnabled: 'Once' } } })).status).toBe(204);
    expect(m.state().continuousDiskOverrides).toBe(0);
    expect((await rf(m, sysPath, { method: 'PATCH', body: { Boot: { BootSourceOverrideTarget: 'Hdd', BootSourceOverrideEnabled: 'Continuous' } } })).status).toBe(204);
    expect(m.state().continuousDiskOverrides).toBe(1);
    expect(m.state().boot.enabled).toBe('Continuous');
  });

  it('cimc: with two CD slots, InsertMedia on the first answers 405; the second takes an image, and an insert over it replaces it', async () => {
    const m = M.cimc!;
    const first = await mediaTargets(m);
    expect((await rf(m, first.insert, { method: 'POST', body: { Image: 'http://x/a.iso', Inserted: true } })).status).toBe(405);
    expect((await rf(m, first.vm)).body!.Image).toBeNull();
    const cd2 = first.vm.replace(/CD1$/, 'CD2');
    const t = (await rf(m, cd2)).body!.Actions;
    expect((await rf(m, t['#VirtualMedia.EjectMedia'].target, { method: 'POST', body: {} })).status).toBe(204);
    expect((await rf(m, t['#VirtualMedia.InsertMedia'].target, { method: 'POST', body: { Image: 'http://x/a.iso', Inserted: true } })).status).toBe(204);
    expect((await rf(m, t['#VirtualMedia.InsertMedia'].target, { method: 'POST', body: { Image: 'http://x/b.iso' } })).status).toBe(204);
    expect((await rf(m, cd2)).body!.Image).toBe('http://x/b.iso');
    // Machines of one mockup share its read-only resources but never each other's state.
    expect((await rf(M.plain!, cd2)).body!.Image).toBeNull();
    expect(M.plain!.state().virtualMedia.every((v) => !v.inserted)).toBe(true);
  });

  it('idrac: a Cd override boots the physical drive; the DellAttributes first boot device VCD-DVD boots the virtual CD, once', async () => {
    const m = M['idrac-boot']!;
    const sysPath = await systemOf(m);
    const reset = await resetTarget(m);
    const mgr = await rf(m, (await rf(m, sysPath)).body!.Links.ManagedBy[0]['@odata.id']);
    const attrs = mgr.body!.Links.Oem.Dell.DellAttributes[0]['@odata.id'] as string;
    expect((await rf(m, attrs)).body!.Attributes).toMatchObject({ 'ServerBoot.1.FirstBootDevice': 'Normal', 'VirtualMedia.1.BootOnce': 'Disabled' });
    const t = await mediaTargets(m);
    expect((await rf(m, t.insert, { method: 'POST', body: { Image: 'http://x/install.iso' } })).status).toBe(204);
    expect((await rf(m, sysPath, { method: 'PATCH', body: { Boot: { BootSourceOverrideTarget: 'Cd', BootSourceOverrideEnabled: 'Once' } } })).status).toBe(204);
    expect((await rf(m, reset, { method: 'POST', body: { ResetType: 'On' } })).status).toBe(204);
    expect(bootsOf(m.id).at(-1)).toMatchObject({ target: 'Cd', image: null });
    expect((await rf(m, reset, { method: 'POST', body: { ResetType: 'ForceOff' } })).status).toBe(204);
    // Unknown attributes and values are refused, naming them; nothing changes.
    const bad = await rf(m, attrs, { method: 'PATCH', body: { Attributes: { 'ServerBoot.1.FirstBootDevice': 'Cd' } } });
    expect(bad.status).toBe(400);
    expect(bad.body!.error['@Message.ExtendedInfo'][0].Message).toContain('ServerBoot.1.FirstBootDevice');
    expect((await rf(m, attrs, { method: 'PATCH', body: { Attributes: { 'Nope.1.X': 'Y' } } })).status).toBe(400);
    expect((await rf(m, attrs, { method: 'PATCH', body: { Attributes: { 'ServerBoot.1.FirstBootDevice': 'VCD-DVD', 'VirtualMedia.1.BootOnce': 'Enabled' } } })).status).toBe(204);
    expect(m.state().dell).toEqual({ firstBootDevice: 'VCD-DVD', bootOnce: 'Enabled' });
    expect((await rf(m, reset, { method: 'POST', body: { ResetType: 'On' } })).status).toBe(204);
    expect(bootsOf(m.id).at(-1)).toMatchObject({ target: 'Cd', image: 'http://x/install.iso' });
    // Once: the next boot is the machine's own again.
    expect(m.state().dell).toEqual({ firstBootDevice: 'Normal', bootOnce: 'Disabled' });
    expect((await rf(m, reset, { method: 'POST', body: { ResetType: 'ForceRestart' } })).status).toBe(204);
    expect(bootsOf(m.id).at(-1)).toMatchObject({ target: 'Hdd', image: null });
  });

  it('ilo: BootOnNextServerReset on an inserted slot boots it at the next reset, then clears; refused with no media; iLO 4 under Oem.Hp', async () => {
    for (const [id, vendor] of [['ilo-boot', 'Hpe'], ['ilo4-boot', 'Hp']] as const) {
      const m = M[id]!;
      const reset = await resetTarget(m);
      const t = await mediaTargets(m);
      expect((await rf(m, t.vm)).body!.Oem).toEqual({ [vendor]: { BootOnNextServerReset: false } });
      const empty = await rf(m, t.vm, { method: 'PATCH', body: { Oem: { [vendor]: { BootOnNextServerReset: true } } } });
      expect(empty.status).toBe(400);
      expect(empty.body!.error['@Message.ExtendedInfo'][0].Message).toMatch(/no media is inserted/);
      expect((await rf(m, t.insert, { method: 'POST', body: { Image: 'http://x/install.iso' } })).status).toBe(204);
      expect((await rf(m, t.vm, { method: 'PATCH', body: { Oem: { Other: { BootOnNextServerReset: true } } } })).status).toBe(400);
      expect((await rf(m, t.vm, { method: 'PATCH', body: { Oem: { [vendor]: { BootOnNextServerReset: true } } } })).status).toBe(204);
      expect(m.state().virtualMedia.find((v) => v.id === 'CD1')!.bootOnNextServerReset).toBe(true);
      expect((await rf(m, reset, { method: 'POST', body: { ResetType: 'On' } })).status).toBe(204);
      expect(bootsOf(m.id).at(-1)).toMatchObject({ target: 'Cd', image: 'http://x/install.iso' });
      expect(m.state().virtualMedia.find((v) => v.id === 'CD1')!.bootOnNextServerReset).toBe(false);
      expect((await rf(m, reset, { method: 'POST', body: { ResetType: 'ForceRestart' } })).status).toBe(204);
      expect(bootsOf(m.id).at(-1)).toMatchObject({ target: 'Hdd', image: null });
    }
  });

  it('xcc: the CD slots are EXT1 and EXT2 with no actions; a PATCH of the slot mounts an image and one with Image null clears it', async () => {
    const m = M.xcc!;
    const sys = await rf(m, await systemOf(m));
    const list = await rf(m, sys.body!.VirtualMedia['@odata.id']);
    const ids = list.body!.Members.map((x: Json) => (x['@odata.id'] as string).split('/').pop());
    expect(ids).toEqual(['Floppy1', 'EXT1', 'EXT2']);
    const ext1 = list.body!.Members[1]['@odata.id'] as string;
    const slot = (await rf(m, ext1)).body!;
    expect(slot.Id).toBe('EXT1');
    expect(slot.Actions).toBeUndefined();
    expect((await rf(m, `${ext1}/Actions/VirtualMedia.InsertMedia`, { method: 'POST', body: { Image: 'http://x/a.iso' } })).status).toBe(404);
    expect((await rf(m, ext1, { method: 'PATCH', body: { Image: 'http://x/a.iso', Inserted: true, WriteProtected: true, Bogus: 1 } })).status).toBe(400);
    expect((await rf(m, ext1, { method: 'PATCH', body: { Image: 'http://x/a.iso', Inserted: true, WriteProtected: true } })).status).toBe(204);
    expect((await rf(m, ext1)).body!).toMatchObject({ Image: 'http://x/a.iso', Inserted: true, ConnectedVia: 'URI' });
    expect((await rf(m, ext1, { method: 'PATCH', body: { Image: null, Inserted: false } })).status).toBe(204);
    expect((await rf(m, ext1)).body!).toMatchObject({ Image: null, Inserted: false });
    expect(sim.counts(m.id).calls.filter((c) => c.kind === 'insertMedia' || c.kind === 'ejectMedia').map((c) => [c.kind, c.status]))
      .toEqual([['insertMedia', 400], ['insertMedia', 204], ['ejectMedia', 204]]);
  });
});

describe('destructive-call counts', () => {
  it('counts Reset (not Nmi), InsertMedia, EjectMedia and boot PATCH with their idempotency keys; GETs are not counted', async () => {
    const m = M.counted!;
    const sysPath = await systemOf(m);
    const reset = await resetTarget(m);
    const t = await mediaTargets(m);
    expect(sim.counts(m.id).total).toBe(0);
    await rf(m, reset, { method: 'POST', body: { ResetType: 'On' }, headers: { 'Idempotency-Key': 'k-on' } });
    await rf(m, reset, { method: 'POST', body: { ResetType: 'Nmi' } });
    await rf(m, sysPath, { method: 'PATCH', body: { Boot: { BootSourceOverrideTarget: 'Cd', BootSourceOverrideEnabled: 'Once' } }, headers: { 'Idempotency-Key': 'k-boot' } });
    await rf(m, t.insert, { method: 'POST', body: { Image: 'http://x/a.iso' }, headers: { 'Idempotency-Key': 'k-ins' } });
    await rf(m, t.eject, { method: 'POST', body: {}, headers: { 'Idempotency-Key': 'k-ins' } });
    await rf(m, sysPath);
    const c = sim.counts(m.id);
    expect({ reset: c.reset, insertMedia: c.insertMedia, ejectMedia: c.ejectMedia, bootOverride: c.bootOverride, total: c.total }).toEqual({ reset: 1, insertMedia: 1, ejectMedia: 1, bootOverride: 1, total: 4 });
    expect(c.calls.map((x) => [x.kind, x.idempotencyKey, x.status])).toEqual([
      ['reset', 'k-on', 204], ['bootOverride', 'k-boot', 204], ['insertMedia', 'k-ins', 204], ['ejectMedia', 'k-ins', 204],
    ]);
    expect(c.duplicateKeys).toEqual(['k-ins']);
    expect(m.state().nmis).toBe(1);
  });

  it('the admin route shows every machine state and counts, and sets faults', async () => {
    const list = (await (await fetch(`${sim.url}/sim/machines`)).json()) as Json[];
    expect(list.map((x) => x.id)).toEqual(sim.machines.map((x) => x.id));
    const counted = list.find((x) => x.id === 'counted')!;
    expect(counted.counts.total).toBe(sim.counts('counted').total);
    expect(counted.state.uuid).toBe(M.counted!.state().uuid);
    const set = await fetch(`${sim.url}/sim/machines/counted/faults`, { method: 'POST', body: JSON.stringify({ fail500Next: 1 }) });
    expect(set.status).toBe(204);
    expect((await rf(M.counted!, '/redfish/v1/Systems')).status).toBe(500);
    expect((await rf(M.counted!, '/redfish/v1/Systems')).status).toBe(200);
    expect((await fetch(`${sim.url}/sim/machines/nope`)).status).toBe(404);
  });
});

describe('what the driver tests rely on', () => {
  let own: RedfishSim;
  const N: Record<string, SimMachine> = {};
  beforeAll(async () => {
    own = await startRedfishSim({
      machines: [
        { id: 'nos', noSessions: true },
        { id: 'keys', powerState: 'On' },
        { id: 'types', resetTypes: ['On', 'ForceOff', 'PowerCycle'], powerState: 'On' },
      ],
    });
    for (const m of own.machines) N[m.id] = m;
  });
  afterAll(async () => { await own.stop(); });

  it('noSessions: no Links.Sessions in the root, POST Sessions is 405, basic auth reads', async () => {
    const m = N.nos!;
    const root = await rf(m, '/redfish/v1', { auth: null });
    expect(root.body!.Links?.Sessions).toBeUndefined();
    expect(root.body!.SessionService).toBeUndefined();
    expect((await rf(m, '/redfish/v1/SessionService/Sessions', { method: 'POST', auth: null, body: { UserName: m.username, Password: m.password } })).status).toBe(405);
    expect((await rf(m, '/redfish/v1/Systems')).status).toBe(200);
  });

  it('duplicateKeys counts a key only when the BMC accepted it twice; a 503 or a 500 on a destructive call is counted as received', async () => {
    const m = N.keys!;
    const target = await resetTarget(m);
    own.setFault('keys', { unavailable: { retryAfterS: 1, count: 1, destructiveOnly: true } });
    // Reads pass while destructive calls get the 503.
    expect((await rf(m, '/redfish/v1/Systems')).status).toBe(200);
    expect((await rf(m, target, { method: 'POST', body: { ResetType: 'ForceOff' }, headers: { 'Idempotency-Key': 'd1' } })).status).toBe(503);
    expect((await rf(m, target, { method: 'POST', body: { ResetType: 'ForceOff' }, headers: { 'Idempotency-Key': 'd1' } })).status).toBe(204);
    expect(own.counts('keys').duplicateKeys).toEqual([]);
    own.setFault('keys', { fail500Destructive: 1 });
    expect((await rf(m, '/redfish/v1/Systems')).status).toBe(200);
    expect((await rf(m, target, { method: 'POST', body: { ResetType: 'On' }, headers: { 'Idempotency-Key': 'd2' } })).status).toBe(500);
    own.setFault('keys', {});
    expect((await rf(m, target, { method: 'POST', body: { ResetType: 'ForceOff' }, headers: { 'Idempotency-Key': 'd1' } })).status).toBe(204);
    expect(own.counts('keys').calls.map((c) => [c.detail, c.status])).toEqual([['fault:503', 503], ['ForceOff', 204], ['fault:500', 500], ['ForceOff', 204]]);
    expect(own.counts('keys').duplicateKeys).toEqual(['d1']);
  });

  it('LastResetTime moves when a reset applies and not when the BMC lies; redirects answer 308; the request log and connection count', async () => {
    const m = N.keys!;
    const sysPath = await systemOf(m);
    const target = await resetTarget(m);
    const t0 = (await rf(m, sysPath)).body!.LastResetTime;
    own.setFault('keys', { lies: true });
    await rf(m, target, { method: 'POST', body: { ResetType: 'On' } });
    expect((await rf(m, sysPath)).body!.LastResetTime).toBe(t0);
    own.setFault('keys', { redirects: { [sysPath]: `${sysPath}/` } });
    const moved = await fetch(m.url + sysPath, { redirect: 'manual', headers: { Authorization: basic(m) } });
    expect([moved.status, moved.headers.get('location')]).toEqual([308, `${sysPath}/`]);
    own.setFault('keys', {});
    await rf(m, target, { method: 'POST', body: { ResetType: 'On' } });
    expect((await rf(m, sysPath)).body!.LastResetTime).not.toBe(t0);
    const log = own.requests('keys');
    expect(log.at(-1)).toMatchObject({ method: 'GET', path: sysPath, status: 200 });
    expect(log.some((r) => r.status === 308 && r.path === sysPath)).toBe(true);
    expect(m.state().connections).toBeGreaterThan(0);
  });

  it('resetTypes replaces the AllowableValues: a listed PowerCycle applies, an unlisted ForceRestart is 400', async () => {
    const m = N.types!;
    const sys = await rf(m, await systemOf(m));
    expect(sys.body!.Actions['#ComputerSystem.Reset']['ResetType@Redfish.AllowableValues']).toEqual(['On', 'ForceOff', 'PowerCycle']);
    expect((await rf(m, await resetTarget(m), { method: 'POST', body: { ResetType: 'ForceRestart' } })).status).toBe(400);
    expect((await rf(m, await resetTarget(m), { method: 'POST', body: { ResetType: 'PowerCycle' } })).status).toBe(204);
    expect(m.state().resetsApplied).toBe(1);
    // Another machine of the same mockup keeps the mockup's list.
    expect((await rf(N.keys!, await systemOf(N.keys!))).body!.Actions['#ComputerSystem.Reset']['ResetType@Redfish.AllowableValues']).not.toContain('PowerCycle');
  });

  it('hangDestructive: a Reset is received and counted and never answered; reads still answer', async () => {
    const m = N.types!;
    own.setFault('types', { hangDestructive: true });
    expect((await rf(m, '/redfish/v1/Systems')).status).toBe(200);
    await expect(rf(m, await resetTarget(m), { method: 'POST', body: { ResetType: 'ForceOff' }, timeoutMs: 300 })).rejects.toThrow(/timeout|aborted/i);
    expect(own.counts('types').calls.at(-1)).toMatchObject({ kind: 'reset', detail: 'fault:hang', status: 0 });
    expect(m.state().powerState).toBe('On');
    own.setFault('types', {});
  });
});
