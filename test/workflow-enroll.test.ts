/**
 * enrolling -> inspecting -> commissioning -> ready, as the seed says each does, through the real
 * engine and the workflow definitions (jobs/workflows): the happy paths (a node with its MAC, a
 * node known only by its UUID that waits for confirmMac), and each failure ending in failed with
 * failedFrom and a clear lastError, then recover resuming from the stable point.
 */
import crypto from 'node:crypto';
import { startTestApp, type TestApp } from './helpers/app';
import {
  DISKS, drive, expireTimers, FakeMachine, happyRamdisk, liveEntry, makeNode, makeWorld, nodeOf, playAgent, runOf, startRun, stepsOf,
  type World,
} from './helpers/engine';
import { advanceRun, type EngineDeps } from '../jobs/engine';
import { wakeRun as queueAdvance } from '../jobs/wake';
import { updateNode } from '../src/modules/metal/node-store';
import type { CommandResult } from '../src/modules/sites/commands';

let t: TestApp;
let world: World;
let trusted: World;
let deps: EngineDeps;
beforeAll(async () => {
  t = await startTestApp({ role: 'api' });
  world = await makeWorld(t.app.services.prisma);
  trusted = await makeWorld(t.app.services.prisma, { trustProvisioningNetwork: true });
  deps = { sql: t.app.services.sql, random: () => 0.5 };
});
afterAll(async () => { await t?.stop(); });
const sql = () => t.app.services.sql;
let macByte = 0x10;
const hexByte = () => (macByte++).toString(16).padStart(2, '0');

function bmcOf(node: { productUuid: string | null; macs: string[] }, extra: Record<string, unknown> = {}): FakeMachine {
  return new FakeMachine({
    uuid: node.productUuid, macs: node.macs, cpus: [{ model: 'EPYC 9654', cores: 96, threads: 192 }], memoryMiB: 1_572_864,
    storage: DISKS.map((d) => ({ name: d.name, sizeBytes: d.sizeBytes, serial: d.serial })), manufacturer: 'Supermicro', model: 'AS-8125GS', serial: 'SM123',
    ...extra,
  });
}

async function enrolled(w: World, opts: { macs?: string[]; productUuid?: string | null } = {}) {
  const node = await makeNode(t.app.services.prisma, w, { state: 'enrolling', ...opts });
  const runId = await startRun(sql(), node.id, 'metal-enroll', { verb: 'enroll' });
  return { ...node, runId };
}

async function runsOf(nodeId: string): Promise<{ id: string; kind: string; status: string }[]> {
  return (await sql().query(`SELECT id, kind, status FROM workflow_run WHERE node_id = $1 ORDER BY created_at, id`, [nodeId])).rows as never;
}

/** recover, as the verb writes it: back to the stable point with the failure cleared and a run of it. */
async function recover(nodeId: string, to: string, kind: Parameters<typeof startRun>[2]): Promise<string> {
  return startRun(sql(), nodeId, kind, { verb: 'recover' }, { provisionState: to, failedFrom: null, lastErrorCode: null, lastErrorMessage: null });
}

describe('metal-enroll, metal-inspect, metal-commission', () => {
  it('a node with its MAC: BMC verified, inventory read out of band, inspected, commissioned, ready', async () => {
    const node = await enrolled(world);
    const bmc = bmcOf(node, { addresses: ['10.30.0.7', 'not-an-ip'] });
    const { outcome, runs } = await drive(deps, node.id, bmc, happyRamdisk(node));
    expect(outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await runsOf(node.id)).map((r) => [r.kind, r.status])).toEqual([
      ['metal-enroll', 'succeeded'], ['metal-inspect', 'succeeded'], ['metal-commission', 'succeeded'],
    ]);
    expect(runs).toHaveLength(3);
    const row = await nodeOf(sql(), node.id);
    expect(row.provision_state).toBe('ready');
    // Addresses replaced by what the BMC reported (IP literals only); both inventories kept.
    expect(row.addresses).toEqual(['10.30.0.7']);
    expect(row.inventory!.outOfBand).toMatchObject({ uuid: node.productUuid, manufacturer: 'Supermicro', macs: node.macs });
    expect(row.inventory!.ramdisk!.disks).toEqual(DISKS);
    expect(row.pxe_cycled_at).toBeNull();
    expect((await stepsOf(sql(), runs[0]!)).map((s) => [s.name, s.status])).toEqual([
      ['verify-bmc', 'succeeded'], ['inspect-out-of-band', 'succeeded'], ['pxe-discovery-boot', 'skipped'], ['await-mac', 'succeeded'],
    ]);
    expect((await stepsOf(sql(), runs[1]!)).map((s) => s.title)).toEqual([
      'Booting the inspection ramdisk', 'Waiting for the inspection ramdisk to report its inventory', 'Powering off',
    ]);
    // Inspection powered it on and off, commissioning again: four destructive calls, each once.
    expect(bmc.destructive).toEqual(['power on', 'power off', 'power on', 'power off']);
    // No boot entry outlives its run.
    expect((await sql().query(`SELECT count(*)::int AS n FROM boot_entry WHERE node_id = $1 AND revoked_at IS NULL`, [node.id])).rows[0]!.n).toBe(0);
  });

  it('addresses stay as enrolled when the BMC reports none', async () => {
    const node = await enrolled(world);
    await sql().query(`UPDATE node SET addresses = '{10.9.9.9}' WHERE id = $1`, [node.id]);
    const bmc = bmcOf(node);
    await drive(deps, node.id, bmc, happyRamdisk(node));
    expect((await nodeOf(sql(), node.id)).addresses).toEqual(['10.9.9.9']);
  });

  it('a node known only by its UUID is PXE-booted once with no boot entry, waits for confirmMac, then goes on to ready', async () => {
    const node = await enrolled(world, { macs: [] });
    const bmc = bmcOf(node);
    const first = await drive(deps, node.id, bmc, happyRamdisk(node));
    expect(first.outcome).toMatchObject({ kind: 'waiting', for: 'its MAC address to be confirmed (confirmMac)' });
    const row = await nodeOf(sql(), node.id);
    expect(row.pxe_cycled_at).toBeInstanceOf(Date);
    expect(bmc.bootOverride).toBe('pxe');
    expect(bmc.destructive).toEqual(['power on']);
    // Never a boot entry (nor a token) for a machine whose MAC is not confirmed.
    expect((await sql().query(`SELECT count(*)::int AS n FROM boot_entry WHERE node_id = $1`, [node.id])).rows[0]!.n).toBe(0);
    // confirmMac, as mac.ts writes it: the MAC on the node and a wake-up for its active run.
    const mac = '52:54:00:aa:00:01';
    await sql().transaction(async (tx) => {
      await updateNode(tx, { id: node.id, version: null }, { data: { macs: [mac], discoveredMac: null }, run: null, events: [{ type: 'node.mac.confirmed', payload: { mac } }] }, null);
      await queueAdvance(tx, node.runId);
    });
    bmc.inventory.macs = [mac];
    const rest = await drive(deps, node.id, bmc, happyRamdisk({ productUuid: node.productUuid, macs: [mac] }));
    expect(rest.outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await nodeOf(sql(), node.id)).provision_state).toBe('ready');
    expect((await stepsOf(sql(), node.runId)).map((s) => [s.name, s.status])).toEqual([
      ['verify-bmc', 'succeeded'], ['inspect-out-of-band', 'succeeded'], ['pxe-discovery-boot', 'succeeded'], ['await-mac', 'succeeded'],
    ]);
  });

  it('a node enrolled without MACs or UUID takes the ones its BMC reports (any spelling): no discovery boot, on to ready', async () => {
    const node = await enrolled(world, { macs: [], productUuid: null });
    const uuid = crypto.randomUUID();
    const macs = [`52:54:00:${hexByte()}:00:01`, `52:54:00:${hexByte()}:00:02`];
    const bmc = bmcOf(node, { uuid, macs: [macs[0]!.toUpperCase(), macs[1]!.replace(/:/g, '-')] });
    const seen = { productUuid: uuid, macs };
    const { outcome, runs } = await drive(deps, node.id, bmc, happyRamdisk(seen));
    expect(outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    const row = await nodeOf(sql(), node.id);
    expect(row).toMatchObject({ provision_state: 'ready', macs, product_uuid: uuid, pxe_cycled_at: null });
    const steps = await stepsOf(sql(), runs[0]!);
    expect(steps.map((s) => [s.name, s.status])).toEqual([
      ['verify-bmc', 'succeeded'], ['inspect-out-of-band', 'succeeded'], ['pxe-discovery-boot', 'skipped'], ['await-mac', 'succeeded'],
    ]);
    expect(steps[1]!.message).toContain(`MACs from the BMC: ${macs.join(', ')}`);
    expect(steps[1]!.message).toContain('UUID from the BMC');
    // No PXE discovery boot: the first power-on is the inspection's.
    expect(bmc.destructive[0]).toBe('power on');
    expect(bmc.destructive).toHaveLength(4);
  });

  it('a MAC the BMC reports that another machine of the site has fails enrolling CONFLICT, and nothing is written', async () => {
    const taken = await makeNode(t.app.services.prisma, world, { state: 'ready' });
    const node = await enrolled(world, { macs: [], productUuid: null });
    const bmc = bmcOf(node, { uuid: crypto.randomUUID(), macs: [taken.macs[0]!] });
    await drive(deps, node.id, bmc, happyRamdisk(node));
    const row = await nodeOf(sql(), node.id);
    expect(row).toMatchObject({ provision_state: 'failed', failed_from: 'enrolling', last_error_code: 'CONFLICT', macs: [], product_uuid: null });
    expect(row.last_error_message).toContain(`belongs to node ${taken.id}`);
    expect(bmc.destructive).toEqual([]);
  });

  it('operator-given MACs and UUID are never replaced: what the BMC reports otherwise is a note', async () => {
    const node = await enrolled(world);
    const other = crypto.randomUUID();
    const bmc = bmcOf(node, { uuid: other, macs: ['52:54:00:fe:fe:fe'] });
    const { runs } = await drive(deps, node.id, bmc, happyRamdisk(node));
    const row = await nodeOf(sql(), node.id);
    expect(row).toMatchObject({ provision_state: 'ready', macs: node.macs, product_uuid: node.productUuid });
    const message = (await stepsOf(sql(), runs[0]!))[1]!.message!;
    expect(message).toContain(`the BMC reports no NIC with the enrolled MAC ${node.macs[0]}`);
    expect(message).toContain(`the BMC reports UUID ${other}`);
  });

  it('a PXE override the BMC holds Continuous is set back to the disk before the inspection powers off', async () => {
    const node = await enrolled(world);
    const bmc = bmcOf(node);
    const agent = (c: { kind: string; params: Record<string, unknown> }): CommandResult => {
      const r = bmc.answer(c.kind, c.params);
      return c.kind === 'bmc.boot-device' && c.params.device === 'pxe' ? { ...r, value: { enabled: 'Continuous' } } as CommandResult : r;
    };
    const { runs } = await drive(deps, node.id, bmc, happyRamdisk(node), { agent });
    expect((await nodeOf(sql(), node.id)).provision_state).toBe('ready');
    const inspect = (await sql().query(`SELECT kind, params FROM command WHERE run_id = $1 ORDER BY created_at, idempotency_key`, [runs[1]])).rows.map((r) => [r.kind, r.params.device ?? r.params.action ?? null]);
    expect(inspect).toEqual([['bmc.boot-device', 'pxe'], ['bmc.power-state', null], ['bmc.power', 'on'], ['bmc.boot-device', 'disk'], ['bmc.power', 'off']]);
    expect((await stepsOf(sql(), runs[1]!))[2]!.message).toContain('set back to the disk');
  });

  it('a UUID-only node whose MAC is never confirmed fails with CALLBACK_TIMEOUT', async () => {
    const node = await enrolled(world, { macs: [] });
    await drive(deps, node.id, bmcOf(node), happyRamdisk(node));
    await expireTimers(sql(), node.runId, { deadlines: true });
    expect(await advanceRun(deps, node.runId)).toEqual({ kind: 'finished', status: 'failed' });
    const row = await nodeOf(sql(), node.id);
    expect(row).toMatchObject({ provision_state: 'failed', failed_from: 'enrolling', last_error_code: 'CALLBACK_TIMEOUT' });
    expect(row.last_error_message).toContain('its MAC address to be confirmed');
  });

  it('wrong credentials (BMC_AUTH_FAILED) fail enrolling at once; recover then reaches ready', async () => {
    const node = await enrolled(world);
    const bmc = bmcOf(node);
    const refused: CommandResult = { ok: false, code: 'BMC_AUTH_FAILED', message: 'the BMC refused the credentials (401)', retryable: false };
    const { outcome } = await drive(deps, node.id, bmc, happyRamdisk(node), { agent: () => refused });
    expect(outcome).toEqual({ kind: 'finished', status: 'failed' });
    const row = await nodeOf(sql(), node.id);
    expect(row).toMatchObject({ provision_state: 'failed', failed_from: 'enrolling', last_error_code: 'BMC_AUTH_FAILED', maintenance: true });
    expect(row.last_error_message).toBe('Verifying BMC access: bmc.power-state: the BMC refused the credentials (401)');
    expect(await runOf(sql(), node.runId)).toMatchObject({ status: 'failed', lastErrorCode: 'BMC_AUTH_FAILED' });
    expect((await stepsOf(sql(), node.runId))[0]).toMatchObject({ status: 'failed', attempts: 1, errorCode: 'BMC_AUTH_FAILED' });
    await recover(node.id, 'enrolling', 'metal-enroll');
    expect((await drive(deps, node.id, bmc, happyRamdisk(node))).outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect(await nodeOf(sql(), node.id)).toMatchObject({ provision_state: 'ready', failed_from: null, last_error_code: null });
  });

  it('a BMC that times out is retried with backoff, then the run fails with BMC_TIMEOUT', async () => {
    const node = await enrolled(world);
    const timeout: CommandResult = { ok: false, code: 'BMC_TIMEOUT', message: 'no answer from 10.20.0.1 within 15 s', retryable: true };
    for (let i = 0; i < 3; i += 1) {
      await advanceRun(deps, node.runId);
      await playAgent(sql(), node.runId, () => timeout);
      await advanceRun(deps, node.runId);
      await expireTimers(sql(), node.runId);
    }
    const row = await nodeOf(sql(), node.id);
    expect(row).toMatchObject({ provision_state: 'failed', failed_from: 'enrolling', last_error_code: 'BMC_TIMEOUT' });
    expect((await stepsOf(sql(), node.runId))[0]).toMatchObject({ status: 'failed', attempts: 3 });
  });

  it('with trustProvisioningNetwork, a ramdisk reporting another UUID fails inspecting before anything is written', async () => {
    const node = await enrolled(trusted);
    const bmc = bmcOf(node);
    const other = { kind: 'inventory' as const, payload: { uuid: crypto.randomUUID(), nics: node.macs.map((mac) => ({ mac })), disks: DISKS } };
    const { outcome, runs } = await drive(deps, node.id, bmc, happyRamdisk(node, DISKS, { inspect: [other] }));
    expect(outcome).toEqual({ kind: 'finished', status: 'failed' });
    const row = await nodeOf(sql(), node.id);
    expect(row).toMatchObject({ provision_state: 'failed', failed_from: 'inspecting', last_error_code: 'INVENTORY_MISMATCH' });
    expect(row.last_error_message).toContain(`the ramdisk reported UUID ${other.payload.uuid}, the node is ${node.productUuid}`);
    expect(row.inventory?.ramdisk).toBeUndefined();
    // The cleanup revoked the entry and powered the machine off.
    expect(await liveEntry(sql(), runs[1]!)).toBeNull();
    expect(bmc.power).toBe('off');
    expect((await stepsOf(sql(), runs[1]!)).map((s) => [s.name, s.status])).toEqual([
      ['boot-inspection-ramdisk', 'succeeded'], ['await-inventory', 'failed'], ['power-off', 'skipped'], ['boot-inspection-ramdisk.cleanup', 'succeeded'],
    ]);
  });

  it('with trustProvisioningNetwork, a ramdisk without the node\'s NIC fails with INVENTORY_MISMATCH; recover resumes from enrolling', async () => {
    const node = await enrolled(trusted);
    const bmc = bmcOf(node);
    const other = { kind: 'inventory' as const, payload: { uuid: node.productUuid, nics: [{ mac: '52:54:00:ff:ff:01' }], disks: DISKS } };
    await drive(deps, node.id, bmc, happyRamdisk(node, DISKS, { inspect: [other] }));
    const row = await nodeOf(sql(), node.id);
    expect(row).toMatchObject({ failed_from: 'inspecting', last_error_code: 'INVENTORY_MISMATCH' });
    expect(row.last_error_message).toContain(`no NIC with the node's MAC ${node.macs[0]}`);
    await recover(node.id, 'enrolling', 'metal-enroll');
    expect((await drive(deps, node.id, bmc, happyRamdisk(node))).outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await nodeOf(sql(), node.id)).provision_state).toBe('ready');
  });

  it('an inspection ramdisk that never calls back fails with CALLBACK_TIMEOUT and the machine is powered off', async () => {
    const node = await enrolled(world);
    const bmc = bmcOf(node);
    const { runs } = await drive(deps, node.id, bmc, happyRamdisk(node, DISKS, { inspect: null }));
    const inspectRun = runs[1]!;
    expect(await runOf(sql(), inspectRun)).toMatchObject({ status: 'waiting', waitingFor: 'the inspection ramdisk to report its inventory' });
    await expireTimers(sql(), inspectRun, { deadlines: true });
    await drive(deps, node.id, bmc, happyRamdisk(node));
    const row = await nodeOf(sql(), node.id);
    expect(row).toMatchObject({ provision_state: 'failed', failed_from: 'inspecting', last_error_code: 'CALLBACK_TIMEOUT' });
    expect(row.last_error_message).toContain('the inspection ramdisk to report its inventory');
    expect(await runOf(sql(), inspectRun)).toMatchObject({ status: 'failed' });
    expect(bmc.power).toBe('off');
  });

  it('a DCGM failure fails commissioning with DCGM_FAILED; recover goes back through enrolling to ready', async () => {
    const node = await enrolled(world);
    const bmc = bmcOf(node);
    const dcgm = [{ kind: 'dcgm' as const, payload: { passed: false, level: 3, tests: [{ name: 'memory', result: 'pass' }, { name: 'pcie', result: 'fail', details: 'GPU 3 link width x8' }] } }];
    const { outcome } = await drive(deps, node.id, bmc, happyRamdisk(node, DISKS, { commission: dcgm }));
    expect(outcome).toEqual({ kind: 'finished', status: 'failed' });
    const row = await nodeOf(sql(), node.id);
    expect(row).toMatchObject({ provision_state: 'failed', failed_from: 'commissioning', last_error_code: 'DCGM_FAILED' });
    expect(row.last_error_message).toBe('Running DCGM diagnostics: DCGM level 3 failed (pcie: fail)');
    await recover(node.id, 'enrolling', 'metal-enroll');
    expect((await drive(deps, node.id, bmc, happyRamdisk(node))).outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await nodeOf(sql(), node.id)).provision_state).toBe('ready');
  });

  it('abort during inspection: the boot entry is revoked and the machine powered off, the run ends aborted', async () => {
    const node = await enrolled(world);
    const bmc = bmcOf(node);
    const { runs } = await drive(deps, node.id, bmc, happyRamdisk(node, DISKS, { inspect: null }));
    const inspectRun = runs[1]!;
    expect(await liveEntry(sql(), inspectRun)).not.toBeNull();
    await sql().transaction(async (tx) => {
      await tx.query(`UPDATE node SET provision_state = 'failed', failed_from = 'inspecting', last_error_code = 'ABORTED', last_error_message = 'aborted', maintenance = true WHERE id = $1`, [node.id]);
      await tx.query(`UPDATE workflow_run SET status = 'aborting', abort_requested_at = now() WHERE id = $1`, [inspectRun]);
      await queueAdvance(tx, inspectRun);
    });
    await drive(deps, node.id, bmc, happyRamdisk(node));
    expect(await runOf(sql(), inspectRun)).toMatchObject({ status: 'aborted' });
    expect(await liveEntry(sql(), inspectRun)).toBeNull();
    expect(bmc.power).toBe('off');
    expect((await stepsOf(sql(), inspectRun)).map((s) => [s.name, s.status])).toEqual([
      ['boot-inspection-ramdisk', 'succeeded'], ['await-inventory', 'failed'], ['power-off', 'skipped'], ['boot-inspection-ramdisk.cleanup', 'succeeded'],
    ]);
  });
});

describe('metal-adopt', () => {
  it('verifies the BMC and reads its inventory without touching the machine; then adopted', async () => {
    const node = await makeNode(t.app.services.prisma, world, { state: 'adopting' });
    const runId = await startRun(sql(), node.id, 'metal-adopt', { verb: 'adopt' });
    const bmc = bmcOf(node);
    bmc.power = 'on';
    expect((await drive(deps, node.id, bmc, happyRamdisk(node))).outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect(await nodeOf(sql(), node.id)).toMatchObject({ provision_state: 'adopted' });
    expect(bmc.destructive).toEqual([]);
    expect(bmc.bootOverride).toBeNull();
    expect((await stepsOf(sql(), runId)).map((s) => s.name)).toEqual(['verify-bmc', 'inspect-out-of-band']);
  });
});
