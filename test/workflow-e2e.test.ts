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
import { startMachineSim, type MachineSim } from './sim/machine';

jest.setTimeout(150_000);

let t: TestApp;
let sim: MachineSim;
beforeAll(async () => {
  t = await startTestApp({ role: 'all', agentPollMs: 200 });
  sim = await startMachineSim({
    serviceUrl: t.url,
    redfish: { machines: [{ id: 'plain' }, { id: 'dell', flavour: 'idrac', mockup: 'public-localstorage' }, { id: 'gpu-bad' }] },
    behaviour: (id) => (id === 'gpu-bad' ? { dcgmFails: true } : {}),
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
    for (const m of sim.machines) {
      const r = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', {
        poolId: tree.pools[0]!.id, name: m.id, macs: m.macs,
        bmc: { address: m.bmc.url, driver: 'redfish', credentials: { username: m.bmc.username, password: m.bmc.password } },
      });
      expect(r.status).toBe(200);
      nodes.set(m.id, r.body.node.id);
      // enroll's run, as the verb records it once runs carry intent (runs.md).
      await startRun(sql, r.body.node.id, 'metal-enroll', { verb: 'enroll' });
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
    await startRun(sql, dell, 'metal-release', { verb: 'recover', wipe: 'quick' }, { provisionState: 'releasing', failedFrom: null, lastErrorCode: null, lastErrorMessage: null });
    expect(await untilSettled([dell], ['releasing'])).toEqual({ [dell]: 'ready' });

    const erasesBefore = sim.machine('plain').counts().cryptoErases;
    await startRun(sql, plain, 'metal-retire', { verb: 'retire' }, { provisionState: 'retiring' });
    expect(await untilSettled([plain], ['retiring'])).toEqual({ [plain]: 'retired' });
    expect(sim.machine('plain').counts().cryptoErases - erasesBefore).toBe(disks('plain'));
    const live = (await sql.query(`SELECT (SELECT count(*) FROM boot_entry WHERE node_id = $1 AND revoked_at IS NULL)::int AS e, (SELECT count(*) FROM boot_token WHERE node_id = $1 AND revoked_at IS NULL)::int AS k`, [plain])).rows[0]!;
    expect(live).toEqual({ e: 0, k: 0 });
  });
});
