/**
 * Issue 21 items 2-4: the built-in site agent when the database lets it down.
 *  2. A result it cannot store is tried again while the database fails, and otherwise its claim is
 *     let go for the sweep to settle: never held (and renewed) for ever.
 *  3. A database error while reading the BMC's credentials is tried again, then a retryable
 *     failure; only a real credential problem fails the command for good.
 *  4. A new process settles at start the claims of this host's dead built-in agents (a crash, a
 *     kill): not AGENT_LEASE_MS later. A live agent's claims are left alone.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import pino from 'pino';
import type { Database } from '../src/db/client';
import { KeptCredentials, startBuiltinAgent, type BuiltinAgent } from '../src/agent/builtin';
import { BuiltinSecretBroker } from '../clients/secrets/broker';
import { queueCommand, type CommandKind } from '../src/modules/sites/commands';
import { newId } from '../src/ids';
import { startTestApp, type TestApp } from './helpers/app';
import { makeTenantTree } from './helpers/fixtures';
import { SimBmcDriver, simDriverRegistry } from './helpers/sim-bmc-driver';
import { startRedfishSim, type RedfishSim } from './sim/redfish/server';

jest.setTimeout(60_000);

const PASSWORD = `pw-${randomBytes(12).toString('hex')}`;
/** Long enough that nothing in this file settles by a lease running out. */
const LEASE_MS = 120_000;

let t: TestApp;
let db: Database;
let sim: RedfishSim;
let secrets: BuiltinSecretBroker;
let tree: Awaited<ReturnType<typeof makeTenantTree>>;
let agent: BuiltinAgent | null = null;
const log = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

beforeAll(async () => {
  sim = await startRedfishSim({ machines: [{ id: 'm0', password: PASSWORD }] });
  // The service's database and queues, without its own built-in agent: the tests start theirs.
  t = await startTestApp({ role: 'all', builtinAgent: false });
  db = t.app.database;
  secrets = new BuiltinSecretBroker(db, randomBytes(32));
  tree = await makeTenantTree(db.prisma, 'bia-fail', { pools: 1, nodesPerPool: 0 });
});
afterEach(async () => {
  await agent?.stop(500);
  agent = null;
  await db.sql.query('DROP TRIGGER IF EXISTS test_block ON command');
  await db.sql.query('ALTER TABLE IF EXISTS test_secret_away RENAME TO secret');
});
afterAll(async () => {
  await t?.stop();
  await sim?.stop();
});

function start(extra: { credentialsRetryMs?: number } = {}): BuiltinAgent {
  return startBuiltinAgent({
    sql: db.sql, secrets, registry: simDriverRegistry(new SimBmcDriver()), log,
    heartbeatMs: 10_000, leaseMs: LEASE_MS, pollMs: 100, concurrency: 4, ...extra,
  });
}

async function node(credentialsRef?: string | null): Promise<string> {
  const ref = credentialsRef === undefined ? await secrets.put(tree.tenant.id, { username: sim.machines[0]!.username, password: PASSWORD }) : credentialsRef;
  const id = newId('MetalNode');
  await db.prisma.node.create({
    data: {
      id, tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id, provisionState: 'ready', bmcAddress: sim.machines[0]!.url,
      bmcDriver: 'redfish', bmcCredentialsRef: ref, driverBindings: { power: 'redfish', management: 'redfish', virtualMedia: 'redfish' },
    },
  });
  return id;
}

const queue = async (nodeId: string, kind: CommandKind, params: Record<string, unknown>) =>
  (await queueCommand(db.sql, { kind, params: params as never, nodeId, runId: null as never, stepIdx: null as never, idempotencyKey: `f-${randomBytes(6).toString('hex')}`, ttlMs: 600_000 })).id;

const row = async (id: string) => (await db.sql.query('SELECT status, claimed_by, result, lease_expires_at FROM command WHERE id = $1', [id])).rows[0]!;

async function until<T>(what: string, read: () => Promise<T>, done: (v: T) => boolean, ms = 20_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`no ${what} within ${ms} ms: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('item 2: a result that cannot be stored', () => {
  it('is stored once the database writes again (disk full twice, then fine)', async () => {
    // Counted by a sequence: nextval is not rolled back with the failing statement.
    await db.sql.query('DROP SEQUENCE IF EXISTS test_attempt_seq');
    await db.sql.query('CREATE SEQUENCE test_attempt_seq');
    await db.sql.query(`CREATE OR REPLACE FUNCTION test_block() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF nextval('test_attempt_seq') <= 2 THEN RAISE EXCEPTION 'No space left on device' USING ERRCODE = 'disk_full'; END IF;
        RETURN NEW;
      END $$`);
    await db.sql.query(`CREATE TRIGGER test_block BEFORE UPDATE ON command FOR EACH ROW WHEN (NEW.status = 'succeeded') EXECUTE FUNCTION test_block()`);
    const id = await queue(await node(), 'bmc.power-state', {});
    agent = start();
    const done = await until('the result stored', () => row(id), (r) => r.status !== 'queued' && r.status !== 'claimed');
    expect(done).toMatchObject({ status: 'succeeded', result: { ok: true }, lease_expires_at: null });
    // Sequences are not rolled back: three attempts reached the trigger.
    expect(Number((await db.sql.query('SELECT last_value FROM test_attempt_seq')).rows[0].last_value)).toBe(3);
  });

  it('that the database refuses for itself is replaced by a failure saying so (AGENT_LOST for a destructive command that ran)', async () => {
    // As the lone-surrogate case did (22P02): the same statement fails every time.
    await db.sql.query(`CREATE OR REPLACE FUNCTION test_block() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'invalid input syntax for type json' USING ERRCODE = '22P02'; END $$`);
    await db.sql.query(`CREATE TRIGGER test_block BEFORE UPDATE ON command FOR EACH ROW WHEN (NEW.status = 'succeeded') EXECUTE FUNCTION test_block()`);
    const power = await queue(await node(), 'bmc.power', { action: 'on' });
    const query = await queue(await node(), 'bmc.power-state', {});
    agent = start();
    // Long before their 120 s leases.
    const lost = await until('the power command settled', () => row(power), (r) => r.status !== 'queued' && r.status !== 'claimed', 10_000);
    expect(lost).toMatchObject({ status: 'failed', result: { ok: false, code: 'AGENT_LOST', retryable: false, message: expect.stringContaining('could not be stored') } });
    // Not destructive: retryable, and not claimed and run again in a loop by the same agent.
    const failed = await until('the query settled', () => row(query), (r) => r.status !== 'queued' && r.status !== 'claimed', 10_000);
    expect(failed).toMatchObject({ status: 'failed', result: { ok: false, code: 'AGENT_ERROR', retryable: true } });
  });

  it('that cannot be stored at all lets its claim go: the sweep settles it at once, lease or not', async () => {
    // Every result of the agent refused; only the sweep's AGENT_LOST goes through.
    await db.sql.query(`CREATE OR REPLACE FUNCTION test_block() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'invalid input syntax for type json' USING ERRCODE = '22P02'; END $$`);
    await db.sql.query(`CREATE TRIGGER test_block BEFORE UPDATE ON command FOR EACH ROW
      WHEN (OLD.status = 'claimed' AND NEW.status IN ('succeeded', 'failed') AND coalesce(NEW.result->>'message', '') NOT LIKE 'the site agent''s claim lapsed%') EXECUTE FUNCTION test_block()`);
    const id = await queue(await node(), 'bmc.power', { action: 'on' });
    agent = start();
    const done = await until('the claim settled', () => row(id), (r) => r.status !== 'queued' && r.status !== 'claimed', 10_000);
    expect(done).toMatchObject({ status: 'failed', result: { ok: false, code: 'AGENT_LOST', retryable: false, message: expect.stringContaining('claim lapsed') } });
  });
});

describe('item 3: reading the BMC credentials', () => {
  it('a database error is tried again: the command runs once the read works', async () => {
    const nodeId = await node();
    await db.sql.query('ALTER TABLE secret RENAME TO test_secret_away');
    const id = await queue(nodeId, 'bmc.power-state', {});
    agent = start({ credentialsRetryMs: 20_000 });
    await until('the claim', () => row(id), (r) => r.status === 'claimed');
    await new Promise((r) => setTimeout(r, 700));
    await db.sql.query('ALTER TABLE test_secret_away RENAME TO secret');
    const done = await until('the command to finish', () => row(id), (r) => r.status !== 'claimed');
    expect(done).toMatchObject({ status: 'succeeded', result: { ok: true } });
  });

  it('a database error that lasts fails the command as retryable, nothing sent to the BMC', async () => {
    const nodeId = await node();
    await db.sql.query('ALTER TABLE secret RENAME TO test_secret_away');
    const resets = sim.counts('m0').reset;
    const id = await queue(nodeId, 'bmc.power', { action: 'on' });
    agent = start({ credentialsRetryMs: 500 });
    const done = await until('the command to finish', () => row(id), (r) => r.status !== 'queued' && r.status !== 'claimed');
    expect(done).toMatchObject({ status: 'failed', result: { ok: false, code: 'AGENT_ERROR', retryable: true, message: expect.stringContaining('nothing was sent') } });
    expect(sim.counts('m0').reset).toBe(resets);
  });

  it("a node's credentials are read once for its commands while kept; new credentials (a new reference) are read anew", async () => {
    const nodeId = await node();
    const reads = jest.spyOn(secrets, 'get');
    try {
      agent = start();
      for (let i = 0; i < 3; i += 1) {
        const id = await queue(nodeId, 'bmc.power-state', {});
        expect(await until('the command to finish', () => row(id), (r) => r.status !== 'queued' && r.status !== 'claimed')).toMatchObject({ status: 'succeeded' });
      }
      expect(reads).toHaveBeenCalledTimes(1);
      const rotated = await secrets.put(tree.tenant.id, { username: sim.machines[0]!.username, password: PASSWORD });
      await db.sql.query('UPDATE node SET bmc_credentials_ref = $2 WHERE id = $1', [nodeId, rotated]);
      const id = await queue(nodeId, 'bmc.power-state', {});
      expect(await until('the command to finish', () => row(id), (r) => r.status !== 'queued' && r.status !== 'claimed')).toMatchObject({ status: 'succeeded' });
      expect(reads.mock.calls.map(([ref]) => ref)).toEqual([expect.any(String), rotated]);
    } finally {
      reads.mockRestore();
    }
  });

  it('kept credentials: per reference and tenant, for their time, the oldest read dropped past the limit', () => {
    let now = 1_000;
    const kept = new KeptCredentials(60_000, 2, () => now);
    const creds = { username: 'u', password: 'p' };
    kept.keep('secret://a', 't1', creds);
    expect(kept.get('secret://a', 't1')).toEqual(creds);
    expect(kept.get('secret://a', 't2')).toBeNull();
    expect(kept.get('secret://a', null)).toBeNull();
    now += 60_000;
    expect(kept.get('secret://a', 't1')).toBeNull();
    expect(kept.size).toBe(0);
    kept.keep('secret://a', 't1', creds);
    kept.keep('secret://b', 't1', creds);
    kept.get('secret://a', 't1');
    kept.keep('secret://c', 't1', creds);
    expect([kept.get('secret://a', 't1'), kept.get('secret://b', 't1'), kept.get('secret://c', 't1')]).toEqual([null, creds, creds]);
  });

  it('a real credential problem (no such secret) still fails for good', async () => {
    const id = await queue(await node(`secret://${newId('Secret')}`), 'bmc.power-state', {});
    agent = start();
    const done = await until('the command to finish', () => row(id), (r) => r.status !== 'queued' && r.status !== 'claimed');
    expect(done).toMatchObject({ status: 'failed', result: { ok: false, code: 'AGENT_ERROR', retryable: false } });
  });
});

describe('item 4: the claims of a dead built-in agent of this host', () => {
  it('are settled when a new one starts, not a lease later; a live agent\'s are not', async () => {
    const host = os.hostname();
    // A pid that no process has now: one that ran and exited.
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))']).stdout.toString();
    const claim = async (kind: CommandKind, params: Record<string, unknown>, by: string) => {
      const id = await queue(await node(), kind, params);
      await db.sql.query(`UPDATE command SET status = 'claimed', claimed_by = $2, claimed_at = now(), lease_expires_at = now() + interval '120 seconds' WHERE id = $1`, [id, by]);
      return id;
    };
    const deadDestructive = await claim('bmc.power', { action: 'on' }, `builtin:${host}:${gone}:dead0001`);
    // A predecessor that had this very pid (a container's restart): dead too, as this process runs no agent of that id.
    const samePid = await claim('bmc.power', { action: 'off' }, `builtin:${host}:${process.pid}:dead0002`);
    const deadQuery = await claim('bmc.power-state', {}, `builtin:${host}:${gone}:dead0001`);
    // pid 1 is alive; another host's agent is not ours to judge.
    const live = await claim('bmc.power', { action: 'on' }, `builtin:${host}:1:live0001`);
    const elsewhere = await claim('bmc.power', { action: 'on' }, `builtin:another-host.example:${gone}:far00001`);
    agent = start();
    await until('the dead claims settled', () => row(deadDestructive), (r) => r.status !== 'claimed', 10_000);
    expect(await row(deadDestructive)).toMatchObject({ status: 'failed', result: { code: 'AGENT_LOST' } });
    expect(await row(samePid)).toMatchObject({ status: 'failed', result: { code: 'AGENT_LOST' } });
    // Not destructive: queued again, and this agent runs it.
    const rerun = await until('the query run again', () => row(deadQuery), (r) => r.status === 'succeeded');
    expect(rerun.claimed_by).toBe(agent.agentId);
    for (const id of [live, elsewhere]) expect(await row(id)).toMatchObject({ status: 'claimed', result: null });
  });
});
