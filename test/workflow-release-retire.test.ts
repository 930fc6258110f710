/**
 * releasing, retiring, rescue, unrescue and deploying through the real engine and definitions:
 * happy paths, the attested-wipe rule (UNVERIFIED_WIPE), identity revocation, and recover.
 */
import { createHash, randomBytes } from 'node:crypto';
import { startTestApp, type TestApp } from './helpers/app';
import {
  commandsOf, DISKS, drive, expireTimers, FakeMachine, happyRamdisk, liveEntry, makeNode, makeWorld, nodeOf, ramdiskReport, runOf, startRun, stepsOf, type World,
} from './helpers/engine';
import { advanceRun, type EngineDeps } from '../jobs/engine';
import { newId } from '../src/ids';
import type { WorkflowKind } from '../src/modules/metal/states';

let t: TestApp;
let bcd: World;
let agentless: World;
let deps: EngineDeps;
beforeAll(async () => {
  t = await startTestApp({ role: 'api' });
  bcd = await makeWorld(t.app.services.prisma, { agent: 'bcd' });
  agentless = await makeWorld(t.app.services.prisma, { agent: 'none' });
  deps = { sql: t.app.services.sql, random: () => 0.5 };
});
afterAll(async () => { await t?.stop(); });
const sql = () => t.app.services.sql;

const INVENTORY = { ramdisk: { disks: DISKS, nics: [] }, outOfBand: { storage: DISKS } };

async function nodeIn(w: World, state: string, kind: WorkflowKind, params: Record<string, unknown> = {}, extra: Parameters<typeof makeNode>[2] extends infer O ? Partial<O> : never = {}) {
  const node = await makeNode(t.app.services.prisma, w, { state, inventory: INVENTORY, ...extra });
  const runId = await startRun(sql(), node.id, kind, params);
  return { ...node, runId, machine: new FakeMachine() };
}

async function recover(nodeId: string, to: string, kind: WorkflowKind, params: Record<string, unknown> = {}): Promise<string> {
  return startRun(sql(), nodeId, kind, { verb: 'recover', ...params }, { provisionState: to, failedFrom: null, lastErrorCode: null, lastErrorMessage: null });
}

describe('metal-release', () => {
  it('secure-erase: every disk attested, powered off, ready; the timeline names the wipe for a human', async () => {
    const n = await nodeIn(bcd, 'releasing', 'metal-release', { verb: 'undeploy', wipe: 'secure-erase' });
    n.machine.power = 'on';
    const { outcome } = await drive(deps, n.id, n.machine, happyRamdisk(n));
    expect(outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await nodeOf(sql(), n.id)).provision_state).toBe('ready');
    const steps = await stepsOf(sql(), n.runId);
    expect(steps.map((s) => [s.title, s.status])).toEqual([
      ['Booting the wipe ramdisk', 'succeeded'], ['Securely erasing disks', 'succeeded'], ['Powering off', 'succeeded'],
    ]);
    expect(steps[1]!.message).toBe('2 of 2 disk(s) attested (secure-erase)');
    expect(n.machine.destructive).toEqual(['power cycle', 'power off']);
    const entry = (await sql().query(`SELECT purpose, params FROM boot_entry WHERE run_id = $1`, [n.runId])).rows[0]!;
    expect(entry).toEqual({ purpose: 'release', params: { wipe: 'secure-erase', disks: DISKS.map((d) => d.serial) } });
  });

  it('a disk without an attested result fails with UNVERIFIED_WIPE (failedFrom releasing); recover then reaches ready', async () => {
    const n = await nodeIn(bcd, 'releasing', 'metal-release', { verb: 'undeploy', wipe: 'quick' });
    const partial = [{ kind: 'wipe' as const, payload: { disks: [{ serial: DISKS[0]!.serial, mode: 'quick', attested: true }, { serial: DISKS[1]!.serial, mode: 'quick', attested: false }] } }];
    const { outcome } = await drive(deps, n.id, n.machine, happyRamdisk(n, DISKS, { release: partial }));
    expect(outcome).toEqual({ kind: 'finished', status: 'failed' });
    const row = await nodeOf(sql(), n.id);
    expect(row).toMatchObject({ provision_state: 'failed', failed_from: 'releasing', last_error_code: 'UNVERIFIED_WIPE' });
    expect(row.last_error_message).toBe('the wipe finished without an attested result for every disk');
    expect((await stepsOf(sql(), n.runId))[1]!.message).toBe(`1 of 2 disk(s) attested (quick); not attested: ${DISKS[1]!.serial}`);
    await recover(n.id, 'releasing', 'metal-release', { wipe: 'quick' });
    expect((await drive(deps, n.id, n.machine, happyRamdisk(n))).outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await nodeOf(sql(), n.id)).provision_state).toBe('ready');
  });

  it('a disk the ramdisk never mentions is not attested either', async () => {
    const n = await nodeIn(bcd, 'releasing', 'metal-release', { wipe: 'crypto-erase' });
    // The ramdisk wipes one disk of two, then reports its erase-devices step over.
    const one = [
      { kind: 'wipe' as const, payload: { disks: [{ serial: DISKS[0]!.serial, mode: 'crypto-erase', attested: true }] } },
      { kind: 'step' as const, payload: { name: 'erase-devices', status: 'succeeded' } },
    ];
    await drive(deps, n.id, n.machine, happyRamdisk(n, DISKS, { release: one }));
    expect(await nodeOf(sql(), n.id)).toMatchObject({ failed_from: 'releasing', last_error_code: 'UNVERIFIED_WIPE' });
  });

  it('a wipe reported disk by disk is decided once every disk has a record, not on the first one', async () => {
    const n = await nodeIn(bcd, 'releasing', 'metal-release', { wipe: 'quick' });
    const record = (i: number) => ({ kind: 'wipe' as const, payload: { disks: [{ serial: DISKS[i]!.serial, mode: 'quick', attested: true }] } });
    // Only the first disk's record so far: the ramdisk is still erasing the second.
    await drive(deps, n.id, n.machine, happyRamdisk(n, DISKS, { release: [record(0)] }));
    expect((await nodeOf(sql(), n.id)).provision_state).toBe('releasing');
    expect((await stepsOf(sql(), n.runId))[1]).toMatchObject({ name: 'wipe-disks', status: 'waiting' });
    await ramdiskReport(sql(), n.runId, 'wipe', record(1).payload);
    expect((await drive(deps, n.id, n.machine, happyRamdisk(n))).outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await nodeOf(sql(), n.id)).provision_state).toBe('ready');
  });

  it('wipe none: no ramdisk, powered off, ready', async () => {
    const n = await nodeIn(bcd, 'releasing', 'metal-release', { wipe: 'none' });
    n.machine.power = 'on';
    expect((await drive(deps, n.id, n.machine, happyRamdisk(n))).outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await nodeOf(sql(), n.id)).provision_state).toBe('ready');
    expect((await stepsOf(sql(), n.runId)).map((s) => s.status)).toEqual(['skipped', 'skipped', 'succeeded']);
    expect((await sql().query(`SELECT count(*)::int AS n FROM boot_entry WHERE run_id = $1`, [n.runId])).rows[0]!.n).toBe(0);
    expect(n.machine.destructive).toEqual(['power off']);
  });

  it('a wipe ramdisk that never reports fails with CALLBACK_TIMEOUT', async () => {
    const n = await nodeIn(bcd, 'releasing', 'metal-release', { wipe: 'quick' });
    await drive(deps, n.id, n.machine, happyRamdisk(n, DISKS, { release: null }));
    await expireTimers(sql(), n.runId, { deadlines: true });
    await drive(deps, n.id, n.machine, happyRamdisk(n));
    expect(await nodeOf(sql(), n.id)).toMatchObject({ failed_from: 'releasing', last_error_code: 'CALLBACK_TIMEOUT' });
  });
});

describe('metal-retire', () => {
  it('a bcd pool: crypto-erased, powered off, its boot entries and tokens revoked, retired', async () => {
    const n = await nodeIn(bcd, 'retiring', 'metal-retire', { verb: 'retire' });
    // An entry and token left from an earlier boot of the node: retire revokes its identity.
    const entryId = newId('BootEntry');
    await sql().query(`INSERT INTO boot_entry (id, node_id, mac, purpose, expires_at) VALUES ($1, $2, '52:54:00:dd:dd:01', 'rescue', now() + interval '1 hour')`, [entryId, n.id]);
    await sql().query(`INSERT INTO boot_token (id, boot_entry_id, node_id, hash, expires_at) VALUES ($1, $2, $3, $4, now() + interval '1 hour')`,
      [newId('BootToken'), entryId, n.id, createHash('sha256').update(randomBytes(8)).digest('hex')]);
    const { outcome } = await drive(deps, n.id, n.machine, happyRamdisk(n));
    expect(outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await nodeOf(sql(), n.id)).provision_state).toBe('retired');
    expect((await stepsOf(sql(), n.runId)).map((s) => [s.title, s.status])).toEqual([
      ['Booting the crypto-erase ramdisk', 'succeeded'], ['Crypto-erasing disks', 'succeeded'], ['Powering off', 'succeeded'], ["Revoking the node's identity", 'succeeded'],
    ]);
    const live = await sql().query(
      `SELECT (SELECT count(*) FROM boot_entry WHERE node_id = $1 AND revoked_at IS NULL)::int AS entries,
              (SELECT count(*) FROM boot_token WHERE node_id = $1 AND revoked_at IS NULL)::int AS tokens`, [n.id]);
    expect(live.rows[0]).toEqual({ entries: 0, tokens: 0 });
  });

  it('a pool without bcd: no crypto-erase, powered off, retired', async () => {
    const n = await nodeIn(agentless, 'retiring', 'metal-retire');
    n.machine.power = 'on';
    expect((await drive(deps, n.id, n.machine, happyRamdisk(n))).outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await nodeOf(sql(), n.id)).provision_state).toBe('retired');
    expect((await stepsOf(sql(), n.runId)).map((s) => s.status)).toEqual(['skipped', 'skipped', 'succeeded', 'succeeded']);
  });

  it('an unattested crypto-erase fails retiring with UNVERIFIED_WIPE; recover retires it', async () => {
    const n = await nodeIn(bcd, 'retiring', 'metal-retire');
    const bad = [{ kind: 'wipe' as const, payload: { disks: DISKS.map((d) => ({ serial: d.serial, mode: 'crypto-erase', attested: false })) } }];
    await drive(deps, n.id, n.machine, happyRamdisk(n, DISKS, { retire: bad }));
    const row = await nodeOf(sql(), n.id);
    expect(row).toMatchObject({ provision_state: 'failed', failed_from: 'retiring', last_error_code: 'UNVERIFIED_WIPE' });
    expect(row.last_error_message).toContain('no attested crypto-erase for');
    await recover(n.id, 'retiring', 'metal-retire');
    expect((await drive(deps, n.id, n.machine, happyRamdisk(n))).outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await nodeOf(sql(), n.id)).provision_state).toBe('retired');
  });
});

describe('metal-rescue and metal-unrescue', () => {
  it('rescue succeeds when the rescue ramdisk calls back; the node stays in rescue with its entry live; unrescue boots the OS and the node is deployed', async () => {
    const n = await nodeIn(bcd, 'rescue', 'metal-rescue', { verb: 'rescue' });
    n.machine.power = 'on';
    expect((await drive(deps, n.id, n.machine, happyRamdisk(n))).outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await nodeOf(sql(), n.id)).provision_state).toBe('rescue');
    expect(await liveEntry(sql(), n.runId)).not.toBeNull();
    const unrescue = await startRun(sql(), n.id, 'metal-unrescue', { verb: 'unrescue' });
    expect((await drive(deps, n.id, n.machine, happyRamdisk(n))).outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await nodeOf(sql(), n.id)).provision_state).toBe('deployed');
    expect(await liveEntry(sql(), n.runId)).toBeNull();
    expect(n.machine.bootOverride).toBe('disk');
    expect((await commandsOf(sql(), unrescue)).map((c) => [c.kind, c.params])).toEqual([['bmc.boot-device', { device: 'disk', persistent: false }], ['bmc.power', { action: 'cycle' }]]);
  });

  it('a rescue ramdisk that never comes up fails rescue with CALLBACK_TIMEOUT (failedFrom rescue)', async () => {
    const n = await nodeIn(bcd, 'rescue', 'metal-rescue');
    await drive(deps, n.id, n.machine, happyRamdisk(n, DISKS, { rescue: null }));
    await expireTimers(sql(), n.runId, { deadlines: true });
    await advanceRun(deps, n.runId);
    await drive(deps, n.id, n.machine, happyRamdisk(n));
    expect(await nodeOf(sql(), n.id)).toMatchObject({ provision_state: 'failed', failed_from: 'rescue', last_error_code: 'CALLBACK_TIMEOUT' });
    expect(await runOf(sql(), n.runId)).toMatchObject({ status: 'failed' });
  });
});

describe('metal-deploy', () => {
  async function profile(steps: { name: string; kind: string }[], role = 'gpu-worker') {
    const prisma = t.app.services.prisma;
    const p = await prisma.deployProfile.create({ data: { id: newId('DeployProfile'), tenantId: bcd.tenantId, name: `p-${randomBytes(3).toString('hex')}` } });
    await prisma.deployProfileVersion.create({ data: { profileId: p.id, version: 1, role, steps } });
    return { profileId: p.id, profileVersion: 1 };
  }

  it("runs the recorded profile version's steps and ends deployed with the profile's role", async () => {
    const prof = await profile([{ name: 'partition', kind: 'script' }, { name: 'image', kind: 'image' }]);
    const n = await nodeIn(bcd, 'deploying', 'metal-deploy', { verb: 'deploy', ...prof }, { profile: prof });
    expect((await drive(deps, n.id, n.machine, happyRamdisk(n))).outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect(await nodeOf(sql(), n.id)).toMatchObject({ provision_state: 'deployed', role: 'gpu-worker' });
    expect((await stepsOf(sql(), n.runId))[1]!.message).toBe('2 profile step(s) succeeded');
  });

  it('a profile step that fails fails deploying with DEPLOY_STEP_FAILED; recover goes to releasing', async () => {
    const prof = await profile([{ name: 'partition', kind: 'script' }, { name: 'image', kind: 'image' }]);
    const n = await nodeIn(bcd, 'deploying', 'metal-deploy', { verb: 'deploy', ...prof }, { profile: prof });
    const reports = [
      { kind: 'step' as const, payload: { name: 'partition', status: 'succeeded' } },
      { kind: 'step' as const, payload: { name: 'image', status: 'failed', message: 'checksum mismatch' } },
    ];
    await drive(deps, n.id, n.machine, happyRamdisk(n, DISKS, { deploy: reports }));
    const row = await nodeOf(sql(), n.id);
    expect(row).toMatchObject({ provision_state: 'failed', failed_from: 'deploying', last_error_code: 'DEPLOY_STEP_FAILED', role: null });
    expect(row.last_error_message).toBe('Running the deploy profile\'s steps: profile step "image" failed: checksum mismatch');
    await recover(n.id, 'releasing', 'metal-release', { wipe: 'quick' });
    expect((await drive(deps, n.id, n.machine, happyRamdisk(n))).outcome).toEqual({ kind: 'finished', status: 'succeeded' });
    expect((await nodeOf(sql(), n.id)).provision_state).toBe('ready');
  });
});
