/**
 * Issue 21 item 12: installer ISOs (about 54 MiB each, holding the OS password's crypt hash) leave
 * ISO_DIR when their job ends (succeeded, failed, cancelled), what a crash left is swept when a
 * worker starts, and ISO_DIR_MAX_BYTES caps the folder with a refusal that says what is full.
 * No address here is connected to (the nodes are loopback, and no run of theirs starts).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { createTestDatabase, startTestApp, type TestApp } from './helpers/app';
import { rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { newId } from '../src/ids';
import { sweepIsoDir } from '../src/modules/provision/iso-janitor';
import { buildRunIso } from '../jobs/iso-build';
import { loadConfig } from '../src/config';
import { connectDatabase } from '../src/db/client';

const silent = pino({ level: 'silent' });
const isoName = (runId: string) => `${runId}-${randomBytes(4).toString('hex')}.iso`;

describe('the ISO_DIR sweep and cap', () => {
  let t: TestApp;
  let dir: string;
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'iso-janitor-'));
    t = await startTestApp({ role: 'api', isoDir: dir });
    tree = await makeTenantTree(t.app.database.prisma, 'iso-janitor', { pools: 1, nodesPerPool: 12 });
  });
  afterAll(async () => {
    await t?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  const sql = () => t.app.services.sql;
  let nodeIndex = 0;
  async function run(status: string): Promise<string> {
    const id = newId('WorkflowRun');
    await t.app.database.prisma.workflowRun.create({ data: { id, nodeId: tree.nodes[nodeIndex++]!.id, kind: 'metal-install', status, params: { verb: 'provision' } } });
    return id;
  }
  async function iso(runId: string | null, opts: { revoked?: boolean; expired?: boolean } = {}): Promise<string> {
    const name = isoName(runId ?? newId('WorkflowRun'));
    fs.writeFileSync(path.join(dir, name), 'iso bytes');
    if (runId) {
      await sql().query(
        `INSERT INTO installer_iso (id, run_id, token_hash, file_name, bytes, sha256, expires_at, revoked_at)
         VALUES ($1, $2, $3, $4, 9, $5, now() + ($6::int * interval '1 hour'), CASE WHEN $7 THEN now() END)`,
        [newId('InstallerIso'), runId, randomBytes(16).toString('hex'), name, '0'.repeat(64), opts.expired ? -1 : 6, !!opts.revoked],
      );
    }
    return name;
  }
  const files = () => fs.readdirSync(dir).sort();

  it('deletes the ISOs of ended jobs (succeeded, failed, cancelled, revoked, expired) and keeps what a live job needs', async () => {
    const live = await iso(await run('waiting'));
    const liveButExpired = await iso(await run('running'), { expired: true });
    const succeeded = await iso(await run('succeeded'));
    const failed = await iso(await run('failed'));
    const cancelled = await iso(await run('aborted'));
    const revoked = await iso(await run('running'), { revoked: true });
    // No row: one being built (its run active), one a crash left (its run ended), one this database does not know.
    const building = isoName(await run('running'));
    fs.writeFileSync(path.join(dir, building), 'half an iso');
    const crashed = isoName(await run('failed'));
    fs.writeFileSync(path.join(dir, crashed), 'half an iso');
    const foreign = await iso(null);
    fs.writeFileSync(path.join(dir, 'README.txt'), 'not ours');

    const deleted = await sweepIsoDir(sql(), dir, silent);
    expect(deleted.sort()).toEqual([liveButExpired, succeeded, failed, cancelled, revoked, crashed].sort());
    expect(files()).toEqual([live, building, foreign, 'README.txt'].sort());
    // Every row whose file is gone is revoked: its URL no longer works.
    const { rows } = await sql().query(`SELECT file_name FROM installer_iso WHERE revoked_at IS NULL`);
    expect(rows.map((r) => r.file_name)).toEqual([live]);
    expect(await sweepIsoDir(sql(), dir, silent)).toEqual([]);
  });

  it('ISO_DIR_MAX_BYTES: provision refuses a job whose ISO would not fit (INVALID_STATE, reason ISO_DIR_FULL), writing nothing', async () => {
    const node = tree.nodes[nodeIndex++]!;
    await sql().query(`UPDATE node SET bmc_address = '127.62.0.1', provision_state = 'ready' WHERE id = $1`, [node.id]);
    const token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const body = { bmc_IP: '127.62.0.1', hostname: 'cn-full', os_password: 'Os-pa55-word', selected_disks: ['sda'], pool_type: 'single' };
    const count = async () => (await sql().query(`SELECT (SELECT count(*) FROM workflow_run WHERE node_id = $1)::int AS runs, (SELECT count(*) FROM secret)::int AS secrets`, [node.id])).rows[0];
    const before = await count();
    t.app.services.config.isoDirMaxBytes = 100 * 1024 * 1024;
    const big = path.join(dir, 'big.bin');
    fs.writeFileSync(big, '');
    fs.truncateSync(big, 50 * 1024 * 1024); // sparse: 50 MiB as the folder counts it, nothing on disk
    try {
      const full = await rest(t.url, token, 'POST', '/controlnode/provision/dell', body);
      expect(full.status).toBe(409);
      expect(full.body.error).toMatchObject({ code: 'INVALID_STATE', details: { reason: 'ISO_DIR_FULL' }, message: expect.stringMatching(/^ISO_DIR_FULL: .*ISO_DIR_MAX_BYTES/) });
      expect(await count()).toEqual(before);
      // Room again: the refusal is now another one (this service runs no site agent).
      fs.rmSync(big);
      const room = await rest(t.url, token, 'POST', '/controlnode/provision/dell', body);
      expect(room.body.error?.details?.reason).toBeUndefined();
    } finally {
      fs.rmSync(big, { force: true });
      t.app.services.config.isoDirMaxBytes = loadConfig().isoDirMaxBytes;
    }
  });

  it('the ISO build refuses too, and the job fails with ISO_DIR_FULL', async () => {
    const runId = await run('waiting');
    const before = files();
    const result = await buildRunIso({ sql: sql(), log: silent, isoDir: dir, publicUrl: () => 'http://127.0.0.1:1', secrets: null, maxBytes: 1024 }, runId);
    expect(result).toBe('failed');
    const { rows } = await sql().query(`SELECT payload FROM install_report WHERE run_id = $1 AND kind = 'iso'`, [runId]);
    expect(rows.map((r) => r.payload)).toEqual([expect.objectContaining({ ok: false, code: 'ISO_DIR_FULL' })]);
    expect(files()).toEqual(before);
  });

  it('ISO_DIR_MAX_BYTES is read from the environment (0: no cap)', () => {
    expect(loadConfig({ ISO_DIR_MAX_BYTES: '1073741824' }).isoDirMaxBytes).toBe(1073741824);
    expect(loadConfig({}).isoDirMaxBytes).toBe(8 * 1024 ** 3);
    expect(() => loadConfig({ ISO_DIR_MAX_BYTES: '-1' })).toThrow(/ISO_DIR_MAX_BYTES/);
  });
});

describe('a worker sweeps what a crash left when it starts', () => {
  it('an ended job\'s ISO is gone once the service is up', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'iso-janitor-start-'));
    const databaseUrl = await createTestDatabase();
    const db = connectDatabase(databaseUrl);
    let left: string;
    let kept: string;
    try {
      const tree = await makeTenantTree(db.prisma, 'iso-start', { pools: 1, nodesPerPool: 2 });
      const ended = newId('WorkflowRun');
      const active = newId('WorkflowRun');
      await db.prisma.workflowRun.create({ data: { id: ended, nodeId: tree.nodes[0]!.id, kind: 'metal-install', status: 'failed', params: { verb: 'provision' } } });
      // Parked (waiting on nothing due): the engine does not pick it up while the test looks.
      await db.prisma.workflowRun.create({ data: { id: active, nodeId: tree.nodes[1]!.id, kind: 'metal-install', status: 'waiting', params: { verb: 'provision' }, waitUntil: new Date(Date.now() + 3_600_000), dueAt: new Date(Date.now() + 3_600_000) } });
      left = isoName(ended);
      kept = isoName(active);
      fs.writeFileSync(path.join(dir, left), 'x');
      fs.writeFileSync(path.join(dir, kept), 'x');
    } finally {
      await db.close();
    }
    const t = await startTestApp({ databaseUrl, isoDir: dir, builtinAgent: false });
    try {
      expect(fs.readdirSync(dir)).toEqual([kept]);
    } finally {
      await t.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
