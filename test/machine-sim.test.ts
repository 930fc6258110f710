import pg from 'pg';
import { startTestApp, type TestApp } from './helpers/app';
import { gql, rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { issueEntry, makeRun } from './helpers/boot';
import { reportsOf, revokeNodeBoot, type BootPurpose } from '../src/modules/boot/entries';
import { startMachineSim, type MachineSim, type PxeEvent, type SimulatedMachine } from './sim/machine';

/**
 * The simulated machine end to end against the real service: a BMC client (the test, as a driver
 * would) sets a PXE boot-once override and powers the machine on through the Redfish simulator;
 * the machine fetches its iPXE script by MAC, boots the ramdisk and reports through the callback API.
 */
describe('simulated machines: Redfish power-on into PXE, iPXE fetch, ramdisk reports for the run', () => {
  let t: TestApp;
  let sql: pg.Client;
  let sim: MachineSim;
  let provision: string;
  let poolId: string;
  let tenantId: string;
  let siteId: string;
  const pxe: PxeEvent[] = [];
  const nodeOf = new Map<string, string>();

  beforeAll(async () => {
    t = await startTestApp({ role: 'api' });
    const tree = await makeTenantTree(t.app.database.prisma, 'machines', { pools: 1, nodesPerPool: 0 });
    poolId = tree.pools[0]!.id;
    tenantId = tree.tenant.id;
    siteId = tree.site.id;
    provision = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    sql = new pg.Client({ connectionString: t.app.databaseUrl });
    await sql.connect();
    sim = await startMachineSim({
      serviceUrl: t.url,
      redfish: {
        machines: [
          { id: 'plain' },
          { id: 'local', mockup: 'public-localstorage', flavour: 'idrac' },
          { id: 'flaky', mockup: 'public-localstorage' },
          { id: 'impostor', mockup: 'public-localstorage' },
          { id: 'silent' },
          { id: 'stranger', uuid: '9d3c6b1e-0f4a-4c2e-9b7d-3a5f8e1c2d41' },
          { id: 'rescue' },
          { id: 'crashes', mockup: 'public-localstorage' },
          { id: 'retiree', mockup: 'public-localstorage', flavour: 'supermicro' },
          { id: 'slow' },
          { id: 'quiet', mockup: 'public-localstorage' },
          { id: 'orphan', uuid: '5c2e9b7d-3a5f-4e1c-8d40-6b1e9d3c0f4a' },
        ],
      },
      behaviour: (id) => ({
        flaky: { dcgmFails: true, wipeUnattested: 'first' as const, wipeMissingDisk: true },
        impostor: { reportUuid: '00000000-0000-4000-8000-00000000abcd', reportMacs: ['52:54:00:66:66:66'] },
        silent: { neverCallBack: true },
        rescue: { heartbeatMs: 25 },
        crashes: { stopAfterCalls: 2 },
        slow: { delayMs: 1500 },
        quiet: { quiet: true },
      }[id] ?? {}),
      onPxe: (e) => pxe.push(e),
    });
    for (const m of sim.machines) {
      if (m.id === 'stranger' || m.id === 'orphan') continue; // never enrolled (stranger), or by its UUID only (orphan, below)
      const r = await rest(t.url, provision, 'POST', '/api/compute/metal/enroll', {
        poolId, name: m.id, macs: m.macs, bmc: { address: new URL(m.bmc.url).hostname, driver: 'redfish', credentials: { username: m.bmc.username, password: m.bmc.password } },
      });
      expect(r.status).toBe(200);
      nodeOf.set(m.id, r.body.node.id);
    }
  });
  afterAll(async () => {
    await sim?.stop();
    await sql?.end();
    await t?.stop();
  });

  /** What a Redfish driver does to boot the ramdisk: PXE boot-once, then power on (cycle when on). */
  async function bootIntoPxe(m: SimulatedMachine): Promise<void> {
    const auth = { authorization: `Basic ${Buffer.from(`${m.bmc.username}:${m.bmc.password}`).toString('base64')}` };
    const system = await fetch(`${m.bmc.url}${m.bmc.systemPath}`, { headers: auth }).then((r) => r.json()) as any;
    const boot = { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Once' };
    const patched = await fetch(`${m.bmc.url}${m.bmc.systemPath}`, { method: 'PATCH', headers: { ...auth, 'content-type': 'application/json', 'if-match': system['@odata.etag'] }, body: JSON.stringify({ Boot: boot }) });
    expect(patched.status).toBe(204);
    const reset = await fetch(`${m.bmc.url}${system.Actions['#ComputerSystem.Reset'].target}`, {
      method: 'POST', headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ ResetType: m.bmc.state().powerState === 'On' ? 'ForceRestart' : 'On' }),
    });
    expect(reset.status).toBe(204);
  }

  async function runFor(id: string, purpose: BootPurpose, params: Record<string, unknown> = {}): Promise<string> {
    const nodeId = nodeOf.get(id)!;
    const runId = await makeRun(sql, nodeId, `metal-${purpose}`);
    await issueEntry(t, nodeId, runId, purpose, params);
    return runId;
  }
  const kinds = async (runId: string) => (await reportsOf(t.app.database.sql, runId)).map((r) => r.kind);
  /** 1 when the run is due (woken), else 0. */
  const advanceJobs = async (runId: string) =>
    Number((await sql.query(`SELECT count(*) FROM workflow_run WHERE id = $1 AND due_at <= now()`, [runId])).rows[0].count);

  it('inspect: the inventory of the machine itself (its UUID and MACs, the mockup\'s CPUs, memory and drives) lands for the run', async () => {
    const m = sim.machine('local');
    const runId = await runFor('local', 'inspect');
    await bootIntoPxe(m);
    await sim.idle();
    expect(await kinds(runId)).toEqual(['heartbeat', 'step', 'inventory', 'step']);
    // Four reports, one wake-up: each report finds the run's due, unfetched job (no worker here).
    expect(await advanceJobs(runId)).toBe(1);
    const [inventory] = await reportsOf(t.app.database.sql, runId, { kind: 'inventory' });
    expect(inventory!.payload).toEqual(m.inventory());
    expect(inventory!.payload).toMatchObject({
      uuid: m.bmc.state().uuid,
      nics: m.bmc.state().macs.map((mac) => expect.objectContaining({ mac })),
      cpus: [{ model: 'Multi-Core Intel(R) Xeon(R) processor 7xxx Series', cores: 8, threads: 16 }],
      memoryMiB: 96 * 1024,
    });
    // The four drives of the mockup's Storage, with their serials.
    expect((inventory!.payload.disks as { serial: string }[]).map((d) => d.serial)).toHaveLength(4);
    expect(m.counts()).toMatchObject({ pxeBoots: 1, ipxeFetches: 1, ramdiskBoots: 1, reports: { inventory: 1, heartbeat: 1, step: 2 }, wipesPerformed: 0, refused: 0 });
    expect(sim.redfish.counts('local')).toMatchObject({ reset: 1, bootOverride: 1 });
    expect(m.boots.map((b) => b.purpose)).toEqual(['inspect']);
  });

  it('commission: DCGM and a quick wipe of every disk, each disk wiped once and reported attested', async () => {
    const m = sim.machine('plain');
    const runId = await runFor('plain', 'commission', { dcgmLevel: 2 });
    await bootIntoPxe(m);
    await sim.idle();
    const reports = await reportsOf(t.app.database.sql, runId);
    expect(reports.map((r) => r.kind)).toEqual(['heartbeat', 'step', 'dcgm', 'step', 'step', 'wipe', 'wipe', 'step']);
    expect(reports.find((r) => r.kind === 'dcgm')!.payload).toMatchObject({ passed: true, level: 2 });
    // public-rackmount1's SimpleStorage has two present devices and no serials: the machine's own.
    const wipes = reports.filter((r) => r.kind === 'wipe').flatMap((r) => r.payload.disks as { serial: string; mode: string; attested: boolean }[]);
    expect(wipes).toEqual([
      expect.objectContaining({ serial: `${m.serial}-D0`, mode: 'quick', attested: true }),
      expect.objectContaining({ serial: `${m.serial}-D1`, mode: 'quick', attested: true }),
    ]);
    expect(m.counts()).toMatchObject({ wipesPerformed: 2, cryptoErases: 0 });
    expect(m.counts().wiped.map((w) => w.serial)).toEqual([`${m.serial}-D0`, `${m.serial}-D1`]);
  });

  it('the failure switches: DCGM fails, the first wipe unattested, the last disk missing', async () => {
    const m = sim.machine('flaky');
    const runId = await runFor('flaky', 'commission');
    await bootIntoPxe(m);
    await sim.idle();
    const reports = await reportsOf(t.app.database.sql, runId);
    expect(reports.find((r) => r.kind === 'dcgm')!.payload).toMatchObject({ passed: false, tests: expect.arrayContaining([expect.objectContaining({ name: 'pcie', result: 'fail' })]) });
    expect(reports.filter((r) => r.kind === 'step').map((r) => [r.payload.name, r.payload.status])).toContainEqual(['dcgm-diag', 'failed']);
    const wipes = reports.filter((r) => r.kind === 'wipe').flatMap((r) => r.payload.disks as { serial: string; attested: boolean }[]);
    const disks = m.inventory().disks.map((d) => d.serial);
    expect(wipes.map((w) => w.serial)).toEqual(disks.slice(0, -1));
    expect(wipes.map((w) => w.attested)).toEqual([false, true, true]);
    expect(m.counts().wipesPerformed).toBe(3);
  });

  it('a different UUID and NICs reported, a ramdisk that never calls back, one that stops mid-way', async () => {
    const impostor = await runFor('impostor', 'inspect');
    const silent = await runFor('silent', 'inspect');
    const crashes = await runFor('crashes', 'inspect');
    await Promise.all(['impostor', 'silent', 'crashes'].map((id) => bootIntoPxe(sim.machine(id))));
    await sim.idle();
    const [inventory] = await reportsOf(t.app.database.sql, impostor, { kind: 'inventory' });
    expect(inventory!.payload).toMatchObject({ uuid: '00000000-0000-4000-8000-00000000abcd', nics: [{ mac: '52:54:00:66:66:66', name: 'eno1' }] });
    // The ramdisk booted (its token was minted) and said nothing.
    expect(sim.machine('silent').counts()).toMatchObject({ ipxeFetches: 1, ramdiskBoots: 1, reports: { heartbeat: 0 } });
    expect(await kinds(silent)).toEqual([]);
    expect(Number((await sql.query('SELECT count(*) FROM boot_token WHERE node_id = $1', [nodeOf.get('silent')])).rows[0].count)).toBe(1);
    // Instructions and one heartbeat, then nothing.
    expect(await kinds(crashes)).toEqual(['heartbeat']);
  });

  it('release with secure-erase and retire with crypto-erase: one wipe per disk in the mode, counted on the machine', async () => {
    const local = sim.machine('local');
    const before = local.counts().wipesPerformed;
    const release = await runFor('local', 'release', { wipe: 'secure-erase' });
    const retire = await runFor('retiree', 'retire');
    await Promise.all([bootIntoPxe(local), bootIntoPxe(sim.machine('retiree'))]);
    await sim.idle();
    const modes = async (runId: string) => (await reportsOf(t.app.database.sql, runId, { kind: 'wipe' })).flatMap((r) => (r.payload.disks as { mode: string; attested: boolean }[]).map((d) => `${d.mode}:${d.attested}`));
    expect(await modes(release)).toEqual(Array(4).fill('secure-erase:true'));
    expect(await modes(retire)).toEqual(Array(4).fill('crypto-erase:true'));
    expect(local.counts().wipesPerformed - before).toBe(4);
    expect(sim.machine('retiree').counts()).toMatchObject({ wipesPerformed: 4, cryptoErases: 4 });
    expect(local.boots.map((b) => b.purpose)).toEqual(['inspect', 'release']);
  });

  it('a machine with no entry hears exit and boots its disk; its PXE is what a site agent would report as a sighting', async () => {
    const stranger = sim.machine('stranger');
    await bootIntoPxe(stranger);
    await sim.idle();
    expect(stranger.counts()).toMatchObject({ ipxeFetches: 1, noEntryExits: 1, diskBoots: 1, ramdiskBoots: 0 });
    expect(pxe.filter((e) => e.machineId === 'stranger')).toEqual([
      { machineId: 'stranger', mac: stranger.macs[0], uuid: '9d3c6b1e-0f4a-4c2e-9b7d-3a5f8e1c2d41', dhcpUuid: '1e6b3c9d-4a0f-2e4c-9b7d-3a5f8e1c2d41', arch: 'x86_64', at: expect.any(String), outcome: 'exit' },
    ]);
    expect(pxe.filter((e) => e.machineId === 'local').map((e) => e.outcome)).toEqual(['ramdisk', 'ramdisk']);
  });

  it('a machine enrolled by its UUID only: no entry, PXE exits, its sighting becomes the candidate, confirmMac, then it boots the ramdisk', async () => {
    const orphan = sim.machine('orphan');
    const admin = await makeToken(t.app.database.prisma, tenantId, [{ permission: 'admin', scopeType: 'tenant', scopeId: tenantId }]);
    const enrolled = await rest(t.url, provision, 'POST', '/api/compute/metal/enroll', {
      poolId, name: 'orphan', productUuid: orphan.uuid, bmc: { address: '127.7.0.1', driver: 'ipmi', credentials: { username: 'u', password: 'p' } },
    });
    expect(enrolled.status).toBe(200);
    const nodeId = enrolled.body.node.id as string;
    nodeOf.set('orphan', nodeId);
    await expect(runFor('orphan', 'inspect')).rejects.toThrow(/no confirmed MAC/);
    // What the engine's PXE-once step records before it powers the machine on with no boot entry.
    await sql.query(`UPDATE node SET pxe_cycled_at = now() - interval '1 second' WHERE id = $1`, [nodeId]);
    await bootIntoPxe(orphan);
    await sim.idle();
    const seen = pxe.filter((e) => e.machineId === 'orphan');
    expect(seen.map((e) => e.outcome)).toEqual(['exit']);
    expect(orphan.counts()).toMatchObject({ noEntryExits: 1, ramdiskBoots: 0 });
    // The site agent reports what its DHCP listener saw.
    const agent = await gql(t.url, admin, 'mutation ($s: ID!) { registerSiteAgent(siteId: $s, name: "dhcp") { token } }', { s: siteId });
    const sighting = { mac: seen[0]!.mac, productUuid: seen[0]!.dhcpUuid, arch: seen[0]!.arch, firstSeen: seen[0]!.at, lastSeen: seen[0]!.at, requestCount: 1 };
    const reported = await gql(t.url, agent.data!.registerSiteAgent.token, 'mutation ($m: [SightingInput!]) { agentReportStatus(machines: $m) { id } }', { m: [sighting] });
    expect(reported.errors).toBeUndefined();
    const discovered = await rest(t.url, admin, 'POST', '/api/compute/metal/discovered', { siteId });
    expect(discovered.status).toBe(200);
    expect(discovered.body.machines.find((m: { mac: string }) => m.mac === orphan.macs[0])).toMatchObject({ candidateFor: nodeId });
    const confirmed = await rest(t.url, provision, 'POST', '/api/compute/metal/confirmMac', { nodeId, mac: orphan.macs[0] });
    expect(confirmed.body.node.macs).toEqual([orphan.macs[0]]);
    const runId = await runFor('orphan', 'inspect');
    await bootIntoPxe(orphan);
    await sim.idle();
    const [inventory] = await reportsOf(t.app.database.sql, runId, { kind: 'inventory' });
    expect(inventory!.payload).toMatchObject({ uuid: orphan.uuid, nics: orphan.macs.map((mac) => expect.objectContaining({ mac })) });
  });

  it('rescue heartbeats until the service ends the boot (revokeNodeBoot: 401), then stops', async () => {
    const m = sim.machine('rescue');
    const runId = await runFor('rescue', 'rescue');
    await bootIntoPxe(m);
    await sim.idle(); // the heartbeat loop does not count as busy
    await until(async () => (await kinds(runId)).length >= 3);
    await t.app.database.sql.transaction((tx) => revokeNodeBoot(tx, nodeOf.get('rescue')!));
    await until(async () => m.counts().refused === 1);
    const stored = (await kinds(runId)).length;
    expect(stored).toBe(m.counts().reports.heartbeat);
    expect(new Set(await kinds(runId))).toEqual(new Set(['heartbeat']));
  });

  it('a machine powered off mid-way stops its ramdisk; a quiet one reports no steps', async () => {
    const slow = sim.machine('slow');
    const slowRun = await runFor('slow', 'commission');
    const quietRun = await runFor('quiet', 'commission');
    await Promise.all([bootIntoPxe(slow), bootIntoPxe(sim.machine('quiet'))]);
    // Off while the slow machine still waits before its first call.
    const auth = { authorization: `Basic ${Buffer.from(`${slow.bmc.username}:${slow.bmc.password}`).toString('base64')}`, 'content-type': 'application/json' };
    const system = await fetch(`${slow.bmc.url}${slow.bmc.systemPath}`, { headers: auth }).then((r) => r.json()) as any;
    expect((await fetch(`${slow.bmc.url}${system.Actions['#ComputerSystem.Reset'].target}`, { method: 'POST', headers: auth, body: JSON.stringify({ ResetType: 'ForceOff' }) })).status).toBe(204);
    await sim.idle();
    expect(await kinds(slowRun)).toEqual([]);
    expect(slow.counts()).toMatchObject({ ramdiskBoots: 1, wipesPerformed: 0, refused: 0 });
    expect(await kinds(quietRun)).toEqual(['heartbeat', 'dcgm', 'wipe', 'wipe', 'wipe', 'wipe']);
  });

  it('a powered-on machine booted into its disk (no override) plays nothing', async () => {
    const m = sim.machine('plain');
    const before = m.counts();
    const auth = { authorization: `Basic ${Buffer.from(`${m.bmc.username}:${m.bmc.password}`).toString('base64')}` };
    const system = await fetch(`${m.bmc.url}${m.bmc.systemPath}`, { headers: auth }).then((r) => r.json()) as any;
    const reset = await fetch(`${m.bmc.url}${system.Actions['#ComputerSystem.Reset'].target}`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ ResetType: 'ForceRestart' }) });
    expect(reset.status).toBe(204);
    await sim.idle();
    expect(m.counts()).toMatchObject({ diskBoots: before.diskBoots + 1, ipxeFetches: before.ipxeFetches, pxeBoots: before.pxeBoots });
  });
});

describe('a fleet in one process: forty machines inspected at once', () => {
  it('every machine reports its own inventory for its own run', async () => {
    const t = await startTestApp({ role: 'api' });
    const sql = new pg.Client({ connectionString: t.app.databaseUrl });
    await sql.connect();
    const sim = await startMachineSim({ serviceUrl: t.url, redfish: { machines: 40, defaults: { mockup: 'public-localstorage' } } });
    try {
      const tree = await makeTenantTree(t.app.database.prisma, 'fleet', { pools: 1, nodesPerPool: 0 });
      const token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
      const runs = new Map<string, string>();
      for (const m of sim.machines) {
        const r = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', { poolId: tree.pools[0]!.id, macs: m.macs, bmc: { address: '127.1.0.1', driver: 'redfish', credentials: { username: 'u', password: 'p' } } });
        expect(r.status).toBe(200);
        const runId = await makeRun(sql, r.body.node.id, 'metal-inspect');
        await issueEntry(t, r.body.node.id, runId, 'inspect');
        runs.set(m.id, runId);
      }
      // Power them all on at once, through each BMC (basic auth; the Reset target the mockup declares).
      await Promise.all(sim.machines.map(async (m) => {
        const auth = { authorization: `Basic ${Buffer.from(`${m.bmc.username}:${m.bmc.password}`).toString('base64')}`, 'content-type': 'application/json' };
        const system = await fetch(`${m.bmc.url}${m.bmc.systemPath}`, { headers: auth }).then((r) => r.json()) as any;
        await fetch(`${m.bmc.url}${m.bmc.systemPath}`, { method: 'PATCH', headers: auth, body: JSON.stringify({ Boot: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Once' } }) });
        await fetch(`${m.bmc.url}${system.Actions['#ComputerSystem.Reset'].target}`, { method: 'POST', headers: auth, body: JSON.stringify({ ResetType: 'On' }) });
      }));
      await sim.idle();
      for (const m of sim.machines) {
        const [inventory] = await reportsOf(t.app.database.sql, runs.get(m.id)!, { kind: 'inventory' });
        expect({ id: m.id, uuid: inventory?.payload.uuid, macs: (inventory?.payload.nics as { mac: string }[] | undefined)?.map((n) => n.mac) })
          .toEqual({ id: m.id, uuid: m.uuid, macs: m.macs });
      }
      expect(sim.totals()).toMatchObject({ pxeBoots: 40, ramdiskBoots: 40, reports: { inventory: 40 }, refused: 0, failedCalls: 0 });
    } finally {
      await sim.stop();
      await sql.end();
      await t.stop();
    }
  });
});

/** Waits for a condition the machines bring about on their own timers (no time is asserted). */
async function until(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('the condition did not come true in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}
