/**
 * The crash test of the issue, with nothing played: the service's API in this process (REST,
 * the iPXE and ramdisk callback routes), the worker (the engine and the built-in site agent with
 * the real Redfish driver) in a child process, simulated Redfish machines that PXE-boot and play
 * the ramdisk. The worker is SIGKILLed while it holds runs and claimed commands, a second one
 * takes over: every node reaches ready, no run is left active, and no machine accepted a
 * destructive call twice under one idempotency key (the simulator's count).
 */
import { randomBytes } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import { startTestApp, type TestApp } from './helpers/app';
import { rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { startMachineSim, type MachineSim } from './sim/machine';
import { fromRoot } from '../src/paths';

jest.setTimeout(240_000);

const SECRET_KEY = randomBytes(32).toString('base64');
let t: TestApp;
let sim: MachineSim;
beforeAll(async () => {
  // The same secret key as the workers: they open the BMC credentials this process sealed.
  t = await startTestApp({ role: 'api', secretKey: SECRET_KEY });
  sim = await startMachineSim({ serviceUrl: t.url, redfish: { machines: 10 }, behaviour: { quiet: true } });
});
afterAll(async () => {
  await sim?.stop();
  await t?.stop();
});

function startWorker(): { child: ChildProcess; stderr: () => string } {
  let stderr = '';
  const child = spawn(process.execPath, [fromRoot('dist', 'src', 'main.js')], {
    env: {
      ...process.env, DATABASE_URL: t.app.databaseUrl, ROLE: 'worker', ADMIN_TOKEN: `crash-${randomBytes(6).toString('hex')}`, LOG_LEVEL: 'warn',
      SECRET_KEY, WORKFLOW_LEASE_MS: '2000', AGENT_LEASE_MS: '3000', AGENT_POLL_MS: '200', QUEUE_POLL_SECONDS: '1',
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  return { child, stderr: () => stderr };
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('the worker SIGKILLed in the middle of running workflows, against the simulators', () => {
  it('all finish after a restart, none is stuck, and no destructive call was accepted twice', async () => {
    const { prisma, sql } = t.app.services;
    const tree = await makeTenantTree(prisma, 'crash-e2e', { pools: 1, nodesPerPool: 0 });
    const token = await makeToken(prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const ids: string[] = [];
    for (const m of sim.machines) {
      const r = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', {
        poolId: tree.pools[0]!.id, name: m.id, macs: m.macs,
        bmc: { address: m.bmc.url, driver: 'redfish', credentials: { username: m.bmc.username, password: m.bmc.password } },
      });
      expect(r.status).toBe(200);
      ids.push(r.body.node.id);
    }
    const first = startWorker();
    let caught = { leases: 0, claims: 0 };
    try {
      for (let i = 0; ; i += 1) {
        if (i > 600) throw new Error(`never caught the worker mid-work: ${first.stderr()}`);
        await sleep(50);
        first.child.kill('SIGSTOP');
        const { rows } = await sql.query(
          `SELECT (SELECT count(*) FROM workflow_run WHERE node_id = ANY($1) AND lease_until > now())::int AS leases,
                  (SELECT count(*) FROM command WHERE node_id = ANY($1) AND status = 'claimed')::int AS claims,
                  (SELECT count(*) FROM node WHERE id = ANY($1) AND provision_state <> 'enrolling')::int AS moved`, [ids]);
        // Mid-way: some nodes past enrolling, and the frozen worker holding work.
        if (rows[0].moved > 0 && rows[0].leases + rows[0].claims > 0) {
          caught = { leases: rows[0].leases, claims: rows[0].claims };
          const exited = new Promise((resolve) => first.child.once('exit', resolve));
          first.child.kill('SIGKILL');
          await exited;
          break;
        }
        first.child.kill('SIGCONT');
      }
    } finally {
      if (first.child.exitCode === null && first.child.signalCode === null) first.child.kill('SIGKILL');
    }
    expect(caught.leases + caught.claims).toBeGreaterThan(0);
    const second = startWorker();
    try {
      const settled = async () => Number((await sql.query(`SELECT count(*) FROM node WHERE id = ANY($1) AND provision_state IN ('ready', 'failed')`, [ids])).rows[0].count);
      for (let i = 0; (await settled()) < ids.length; i += 1) {
        if (i > 1800) throw new Error(`not every node settled: ${second.stderr()}`);
        await sleep(100);
      }
    } finally {
      second.child.kill('SIGKILL');
    }
    // Ready, or failed cleanly: a power command whose agent died with it is never sent again:
    // read back as not applied (AGENT_LOST), or a restart no read-back can prove (OUTCOME_UNKNOWN);
    // recover takes the node on from there.
    const nodes = (await sql.query(`SELECT id, provision_state, last_error_code, last_error_message FROM node WHERE id = ANY($1)`, [ids])).rows;
    for (const n of nodes) {
      if (n.provision_state === 'ready') expect(n.last_error_code).toBeNull();
      else expect(n).toMatchObject({ provision_state: 'failed', last_error_code: expect.stringMatching(/^(AGENT_LOST|OUTCOME_UNKNOWN)$/), last_error_message: expect.stringContaining('not sent again') });
    }
    expect(nodes.filter((n) => n.provision_state === 'ready').length).toBeGreaterThan(0);
    const active = (await sql.query(`SELECT count(*)::int AS n FROM workflow_run WHERE node_id = ANY($1) AND status IN ('queued', 'running', 'waiting', 'aborting')`, [ids])).rows[0]!.n;
    expect(active).toBe(0);
    for (const m of sim.machines) {
      const counts = sim.redfish.counts(m.id);
      // No request accepted twice under one command's key (the agent sends the command id) ...
      expect(counts.duplicateKeys).toEqual([]);
      const accepted = counts.calls.filter((c) => c.kind === 'reset' && c.status >= 200 && c.status < 300);
      expect(accepted.every((c) => c.idempotencyKey !== null)).toBe(true);
      // ... and no power action beyond the lifecycle's four (inspect on and off, commission on and off).
      expect(new Set(accepted.map((c) => c.idempotencyKey!.split(':')[0])).size).toBeLessThanOrEqual(4);
    }
  });
});
