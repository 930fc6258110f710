/**
 * The whole line, with nothing played by the test: nodes enrolled over REST with Redfish BMCs of
 * the simulator, the engine's metal.advance worker, the worker's built-in site agent running the
 * real Redfish driver against the simulator, and simulated machines that PXE-boot, fetch their
 * iPXE script by MAC and play the ramdisk against the real callback API. enroll -> inspect ->
 * commission -> ready; a machine whose DCGM fails ends in failed from commissioning.
 */
import { startTestApp, type TestApp } from './helpers/app';
import { rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { startRun, stepsOf } from './helpers/engine';
import { startMachineSim, type MachineSim, type PxeEvent } from './sim/machine';
import { gql } from './helpers/client';

jest.setTimeout(150_000);

let t: TestApp;
let sim: MachineSim;
const pxe: PxeEvent[] = [];
beforeAll(async () => {
  t = await startTestApp({ role: 'all', agentPollMs: 200 });
  sim = await startMachineSim({
    serviceUrl: t.url,
    redfish: { machines: [{ id: 'plain' }, { id: 'dell', flavour: 'idrac', mockup: 'public-localstorage' }, { id: 'gpu-bad' }, { id: 'orphan', uuid: '7a1c3e5f-2b4d-4f6a-8c0e-1d3f5b7a9c2e', noEthernetInterfaces: true }] },
    behaviour: (id) => (id === 'gpu-bad' ? { dcgmFails: true } : {}),
    onPxe: (e) => pxe.push(e),
  });
});
afterAll(async () => {
  await sim?.stop();
  await t?.stop();
});

async function untilSettled(nodeIds: string[], moving: string[]): Promise<Record<string, string>> {
  const { sql } = t.app.services;
  const read = async (): Promise<Record<string, string>> => Object.fromEntries(await Promise.all(nodeIds.map(async (id): Promise<[string, string]> =>
    [id, (await sql.query('SELECT provision_state FROM node WHERE id = $1', [id])).rows[0]!.provision_state as string])));
  let now = await read();
  for (let i = 0; Object.values(now).some((s) => moving.includes(s)); i += 1) {
    if (i > 1200) throw new Error(`still moving: ${JSON.stringify(now)}`);
    await new Promise((r) => setTimeout(r, 100));
    now = await read();
  }
  return now;
}

describe('enroll to ready through the real agent, drivers, boot API and simulated machines', () => {
  const nodes = new Map<string, string>();

  it('every machine is verified, inspected and commissioned; a DCGM failure fails commissioning', async () => {
    const { prisma, sql } = t.app.services;
    const tree = await makeTenantTree(prisma, 'e2e', { pools: 1, nodesPerPool: 0 });
    const token = await makeToken(prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    for (const m of sim.machines.filter((x) => x.id !== 'orphan')) {
      const r = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', {
        poolId: tree.pools[0]!.id, name: m.id, macs: m.macs,
        bmc: { address: m.bmc.url, driver: 'redfish', credentials: { username: m.bmc.username, password: m.bmc.password } },
      });
      expect(r.status).toBe(200);
      nodes.set(m.id, r.body.node.id);
      // enroll recorded its metal-enroll run and queued its metal.advance: the worker takes it from here.
      expect(r.body.node.workflowId).toEqual(expect.any(String));
    }
    const states = async () => Object.fromEntries(await Promise.all([...nodes].map(async ([id, nodeId]) =>
      [id, (await sql.query('SELECT provision_state FROM node WHERE id = $1', [nodeId])).rows[0]!.provision_state as string])));
    let now = await states();
    for (let i = 0; Object.values(now).some((s) => s !== 'ready' && s !== 'failed'); i += 1) {
      if (i > 1200) throw new Error(`not done: ${JSON.stringify(now)}`);
      await new Promise((r) => setTimeout(r, 100));
      now = await states();
    }
    expect(now).toEqual({ plain: 'ready', dell: 'ready', 'gpu-bad': 'failed' });
    const bad = (await sql.query('SELECT failed_from, last_error_code, last_error_message FROM node WHERE id = $1', [nodes.get('gpu-bad')])).rows[0]!;
    expect(bad).toMatchObject({ failed_from: 'commissioning', last_error_code: 'DCGM_FAILED' });

    for (const id of ['plain', 'dell']) {
      const nodeId = nodes.get(id)!;
      const runs = (await sql.query(`SELECT id, kind, status FROM workflow_run WHERE node_id = $1 ORDER BY created_at`, [nodeId])).rows;
      expect(runs.map((r) => [r.kind, r.status])).toEqual([['metal-enroll', 'succeeded'], ['metal-inspect', 'succeeded'], ['metal-commission', 'succeeded']]);
      const inventory = (await sql.query('SELECT inventory FROM node WHERE id = $1', [nodeId])).rows[0]!.inventory;
      // The BMC's facts and the ramdisk's, each the machine's own.
      expect(inventory.outOfBand.uuid?.toLowerCase()).toBe(sim.machine(id).uuid.toLowerCase());
      expect(inventory.ramdisk).toEqual(sim.machine(id).inventory());
      for (const run of runs) for (const s of await stepsOf(sql, run.id)) expect(['succeeded', 'skipped']).toContain(s.status);
      // Two ramdisk boots (inspect, commission), each from one PXE boot; the quick wipe ran once per disk.
      expect(sim.machine(id).counts()).toMatchObject({ pxeBoots: 2, ramdiskBoots: 2 });
      // Every power command was run once: its reset count is what the BMC received.
      const power = (await sql.query(`SELECT count(*)::int AS n FROM command WHERE node_id = $1 AND kind = 'bmc.power' AND status = 'succeeded'`, [nodeId])).rows[0]!.n;
      expect(power).toBe(4);
      expect((await sql.query(`SELECT count(*)::int AS n FROM boot_entry WHERE node_id = $1 AND revoked_at IS NULL`, [nodeId])).rows[0]!.n).toBe(0);
    }
  });

  it('release with secure-erase returns to ready; an unattested wipe is UNVERIFIED_WIPE until recover; retire crypto-erases on a bcd pool', async () => {
    const { sql } = t.app.services;
    const plain = nodes.get('plain')!;
    const dell = nodes.get('dell')!;
    const disks = (id: string) => sim.machine(id).inventory().disks.length;
    const before = sim.machine('plain').counts();
    await startRun(sql, plain, 'metal-release', { verb: 'undeploy', wipe: 'secure-erase' }, { provisionState: 'releasing' });
    sim.setBehaviour('dell', { wipeUnattested: 'first' });
    await startRun(sql, dell, 'metal-release', { verb: 'undeploy', wipe: 'quick' }, { provisionState: 'releasing' });
    expect(await untilSettled([plain, dell], ['releasing'])).toEqual({ [plain]: 'ready', [dell]: 'failed' });
    expect(sim.machine('plain').counts().wipesPerformed - before.wipesPerformed).toBe(disks('plain'));
    const failed = (await sql.query('SELECT failed_from, last_error_code FROM node WHERE id = $1', [dell])).rows[0]!;
    expect(failed).toEqual({ failed_from: 'releasing', last_error_code: 'UNVERIFIED_WIPE' });

    sim.setBehaviour('dell', {});
    // The failed run still powers the machine off (its cleanup): recover is CONFLICT until it ends.
    for (let i = 0; (await sql.query(`SELECT count(*)::int AS n FROM workflow_run WHERE node_id = $1 AND status = 'aborting'`, [dell])).rows[0]!.n > 0; i += 1) {
      if (i > 300) throw new Error('the failed release never finished its cleanup');
      await new Promise((r) => setTimeout(r, 100));
    }
    await startRun(sql, dell, 'metal-release', { verb: 'recover', wipe: 'quick' }, { provisionState: 'releasing', failedFrom: null, lastErrorCode: null, lastErrorMessage: null });
    expect(await untilSettled([dell], ['releasing'])).toEqual({ [dell]: 'ready' });

    const erasesBefore = sim.machine('plain').counts().cryptoErases;
    await startRun(sql, plain, 'metal-retire', { verb: 'retire' }, { provisionState: 'retiring' });
    expect(await untilSettled([plain], ['retiring'])).toEqual({ [plain]: 'retired' });
    expect(sim.machine('plain').counts().cryptoErases - erasesBefore).toBe(disks('plain'));
    const live = (await sql.query(`SELECT (SELECT count(*) FROM boot_entry WHERE node_id = $1 AND revoked_at IS NULL)::int AS e, (SELECT count(*) FROM boot_token WHERE node_id = $1 AND revoked_at IS NULL)::int AS k`, [plain])).rows[0]!;
    expect(live).toEqual({ e: 0, k: 0 });
  });

  it('a machine known only by its UUID, whose BMC reports no NIC: PXE-booted once with no entry, its sighting discovered, confirmMac, then on to ready', async () => {
    const { prisma, sql } = t.app.services;
    // A site of its own: the DHCP listener's agent registered there steps the built-in agent aside.
    const tree = await makeTenantTree(prisma, 'e2e-uuid', { pools: 1, nodesPerPool: 0 });
    const provision = await makeToken(prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const admin = await makeToken(prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const orphan = sim.machine('orphan');
    const enrolled = await rest(t.url, provision, 'POST', '/api/compute/metal/enroll', {
      poolId: tree.pools[0]!.id, name: 'orphan', productUuid: orphan.uuid,
      bmc: { address: orphan.bmc.url, driver: 'redfish', credentials: { username: orphan.bmc.username, password: orphan.bmc.password } },
    });
    expect(enrolled.status).toBe(200);
    const nodeId = enrolled.body.node.id as string;
    const runId = enrolled.body.node.workflowId as string;
    for (let i = 0; !pxe.some((e) => e.machineId === 'orphan'); i += 1) {
      if (i > 600) throw new Error('the UUID-only machine never PXE-booted');
      await new Promise((r) => setTimeout(r, 100));
    }
    const seen = pxe.find((e) => e.machineId === 'orphan')!;
    expect(seen.outcome).toBe('exit');
    expect(orphan.counts()).toMatchObject({ noEntryExits: 1, ramdiskBoots: 0 });
    // The machine booted as soon as the BMC applied the power-on; the run goes on once the agent reports it.
    const waitingFor = async () => (await sql.query('SELECT waiting_for FROM workflow_run WHERE id = $1', [runId])).rows[0]!.waiting_for as string | null;
    for (let i = 0; (await waitingFor()) !== 'its MAC address to be confirmed (confirmMac)'; i += 1) {
      if (i > 600) throw new Error(`the run never waited for its MAC: ${await waitingFor()}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect((await sql.query('SELECT pxe_cycled_at FROM node WHERE id = $1', [nodeId])).rows[0]!.pxe_cycled_at).toBeInstanceOf(Date);
    expect((await sql.query('SELECT count(*)::int AS n FROM boot_entry WHERE node_id = $1', [nodeId])).rows[0]!.n).toBe(0);

    const agent = await gql(t.url, admin, 'mutation ($s: ID!) { registerSiteAgent(siteId: $s, name: "dhcp") { agent { id } token } }', { s: tree.site.id });
    const sighting = { mac: seen.mac, productUuid: seen.dhcpUuid, arch: seen.arch, firstSeen: seen.at, lastSeen: seen.at, requestCount: 1 };
    expect((await gql(t.url, agent.data!.registerSiteAgent.token, 'mutation ($m: [SightingInput!]) { agentReportStatus(machines: $m) { id } }', { m: [sighting] })).errors).toBeUndefined();
    const discovered = await rest(t.url, admin, 'POST', '/api/compute/metal/discovered', { siteId: tree.site.id });
    expect(discovered.body.machines.find((m: { mac: string }) => m.mac === orphan.macs[0])).toMatchObject({ candidateFor: nodeId });
    const confirmed = await rest(t.url, provision, 'POST', '/api/compute/metal/confirmMac', { nodeId, mac: orphan.macs[0] });
    expect(confirmed.status).toBe(200);
    // confirmMac woke the enroll run waiting for the MAC; the DHCP listener goes quiet, so the
    // built-in agent serves the site again for the rest of the lifecycle.
    await sql.query(`UPDATE site_agent SET last_heartbeat_at = now() - interval '1 day' WHERE id = $1`, [agent.data!.registerSiteAgent.agent.id]);
    expect(await untilSettled([nodeId], ['enrolling', 'inspecting', 'commissioning'])).toEqual({ [nodeId]: 'ready' });
    expect(orphan.counts()).toMatchObject({ ramdiskBoots: 2 });
    const inventory = (await sql.query('SELECT inventory FROM node WHERE id = $1', [nodeId])).rows[0]!.inventory;
    expect(inventory.ramdisk).toEqual(orphan.inventory());
  });
});
