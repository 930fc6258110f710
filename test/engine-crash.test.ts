/**
 * Crash safety with a real process: the built service runs as ROLE=worker and advances a dozen
 * enroll -> inspect -> commission workflows; it is frozen (SIGSTOP) at a moment it holds a run's
 * lease, i.e. in the middle of advancing it, and SIGKILLed there. A second worker takes the runs
 * up again after their leases lapse. Every node reaches ready, no run is left active, and each
 * machine received each destructive BMC call exactly once. The site agent and the ramdisk are
 * played from the test, writing the rows their modules write.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { startTestApp, type TestApp } from './helpers/app';
import { DISKS, FakeMachine, happyRamdisk, makeNode, makeWorld, ramdiskReport, reportCommand, startRun } from './helpers/engine';
import { fromRoot } from '../src/paths';

jest.setTimeout(180_000);

let t: TestApp;
beforeAll(async () => { t = await startTestApp({ role: 'api' }); });
afterAll(async () => { await t?.stop(); });

const LEASE_MS = 1500;

function startWorker(databaseUrl: string): { child: ChildProcess; stderr: () => string } {
  let stderr = '';
  const child = spawn(process.execPath, [fromRoot('dist', 'src', 'main.js')], {
    env: {
      ...process.env, DATABASE_URL: databaseUrl, ROLE: 'worker', ADMIN_TOKEN: `crash-admin-${Date.now()}`, LOG_LEVEL: 'warn',
      SECRET_KEY: Buffer.alloc(32, 9).toString('base64'), WORKFLOW_LEASE_MS: String(LEASE_MS), QUEUE_POLL_SECONDS: '1',
      // The test plays the site agent: the worker's built-in one would claim the commands first.
      BUILTIN_AGENT: 'off',
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  return { child, stderr: () => stderr };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a worker SIGKILLed in the middle of running workflows', () => {
  it('every run finishes after a restart, none is stuck, and no destructive call reached a machine twice', async () => {
    const { prisma, sql } = t.app.services;
    const world = await makeWorld(prisma);
    const nodes: { id: string; machine: FakeMachine; ramdisk: ReturnType<typeof happyRamdisk> }[] = [];
    for (let i = 0; i < 12; i += 1) {
      const node = await makeNode(prisma, world, { state: 'enrolling' });
      const machine = new FakeMachine({ uuid: node.productUuid, macs: node.macs, storage: DISKS });
      await startRun(sql, node.id, 'metal-enroll', { verb: 'enroll' });
      nodes.push({ id: node.id, machine, ramdisk: happyRamdisk(node) });
    }
    const byId = new Map(nodes.map((n) => [n.id, n]));
    const reported = new Set<string>();

    /** One round of the world answering: every queued command, and each booted ramdisk once. */
    async function answer(): Promise<number> {
      let moved = 0;
      const { rows: cmds } = await sql.query(`SELECT id, node_id, kind, params FROM command WHERE status = 'queued' AND node_id = ANY($1) ORDER BY created_at`, [[...byId.keys()]]);
      for (const c of cmds) {
        await reportCommand(sql, c.id, byId.get(c.node_id)!.machine.answer(c.kind, c.params));
        moved += 1;
      }
      const { rows: entries } = await sql.query(
        `SELECT id, node_id, run_id, purpose, params FROM boot_entry WHERE revoked_at IS NULL AND node_id = ANY($1)`, [[...byId.keys()]]);
      for (const e of entries) {
        const n = byId.get(e.node_id)!;
        if (reported.has(e.id) || n.machine.power !== 'on') continue;
        reported.add(e.id);
        for (const r of n.ramdisk({ purpose: e.purpose, params: e.params }) ?? []) await ramdiskReport(sql, e.run_id, r.kind, r.payload);
        moved += 1;
      }
      return moved;
    }
    const readyCount = async () => Number((await sql.query(`SELECT count(*) FROM node WHERE id = ANY($1) AND provision_state = 'ready'`, [[...byId.keys()]])).rows[0].count);

    // The first worker's pool connections by name: what they had sent before the kill still runs.
    const firstApp = `crash-first-${process.pid}`;
    const firstUrl = `${t.app.databaseUrl}${t.app.databaseUrl.includes('?') ? '&' : '?'}application_name=${firstApp}`;
    let first = startWorker(firstUrl);
    let killedLeases: string[] = [];
    try {
      // Let the first worker get going, then catch it holding a lease: freeze it, look, kill it.
      for (let i = 0; killedLeases.length === 0; i += 1) {
        if (i > 400) throw new Error(`never caught the worker holding a lease: ${first.stderr()}`);
        await answer();
        first.child.kill('SIGSTOP');
        const { rows } = await sql.query(`SELECT id FROM workflow_run WHERE node_id = ANY($1) AND lease_until > now()`, [[...byId.keys()]]);
        if (rows.length > 0 && i > 3) {
          const exited = new Promise((resolve) => first.child.once('exit', resolve));
          first.child.kill('SIGKILL');
          await exited;
          // A message the frozen worker had already sent is still carried out (its COMMIT, maybe
          // after waiting for a lock its other transaction held until the kill rolled that one
          // back): the runs it held are those still leased once its connections are gone. (Read
          // at the freeze, a run whose last COMMIT landed after it counted as held: CI, 2026-12-07.)
          for (let wait = 0; Number((await sql.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1`, [firstApp])).rows[0].n) > 0; wait += 1) {
            if (wait > 400) throw new Error('the killed worker\'s connections did not go away');
            await sleep(25);
          }
          const { rows: held } = await sql.query(
            `SELECT id FROM workflow_run WHERE node_id = ANY($1) AND lease_until IS NOT NULL AND status IN ('queued', 'running', 'waiting', 'aborting')`, [[...byId.keys()]]);
          killedLeases = held.map((r) => r.id as string);
          // Everything it held had landed: catch another worker in the act.
          if (killedLeases.length === 0) first = startWorker(firstUrl);
        } else {
          first.child.kill('SIGCONT');
          await sleep(20);
        }
      }
      const second = startWorker(t.app.databaseUrl);
      try {
        for (let i = 0; (await readyCount()) < nodes.length; i += 1) {
          if (i > 1200) throw new Error(`not every node reached ready: ${second.stderr()}`);
          if ((await answer()) === 0) await sleep(50);
        }
      } finally {
        second.child.kill('SIGKILL');
      }
    } finally {
      if (first.child.exitCode === null && first.child.signalCode === null) first.child.kill('SIGKILL');
    }

    // None left running or waiting, and the runs the dead worker held were taken up again.
    const { rows: active } = await sql.query(`SELECT count(*)::int AS n FROM workflow_run WHERE node_id = ANY($1) AND status IN ('queued', 'running', 'waiting', 'aborting')`, [[...byId.keys()]]);
    expect(active[0]!.n).toBe(0);
    const { rows: resumed } = await sql.query(`SELECT id, resumes, status FROM workflow_run WHERE id = ANY($1)`, [killedLeases]);
    for (const r of resumed) expect(r.resumes).toBeGreaterThanOrEqual(1);
    // Each machine: inspection's power on and off, commissioning's on and off; each exactly once.
    for (const n of nodes) expect(n.machine.destructive).toEqual(['power on', 'power off', 'power on', 'power off']);
    const { rows: dupes } = await sql.query(
      `SELECT run_id, step_idx, count(*)::int AS n FROM command WHERE node_id = ANY($1) AND kind = 'bmc.power' GROUP BY run_id, step_idx HAVING count(*) > 1`, [[...byId.keys()]]);
    expect(dupes).toEqual([]);
  });
});
