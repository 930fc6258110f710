import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import pino from 'pino';
import { capturingLogger, startTestApp, type TestApp } from './helpers/app';
import { rest } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { issueEntry, makeRun, parseIpxeScript, type IpxeBoot } from './helpers/boot';
import { hashToken } from '../src/auth/tokens';
import { reportWakesRun } from '../src/modules/boot/reports';
import { MAX_BOOTS_PER_ENTRY, NoConfirmedMac, reportsOf, revokeNodeBoot, issueBootEntry } from '../src/modules/boot/entries';
import { BootHttp, NO_ENTRY_SCRIPT } from '../src/modules/boot/routes';

const MAC_A = ['52:54:00:b0:00:01', '52:54:00:b0:00:02'];
const MAC_B = '52:54:00:b0:01:01';
const MAC_C = '52:54:00:b0:02:01';

describe('boot entries over HTTP: iPXE scripts and the ramdisk callbacks', () => {
  let t: TestApp;
  let sql: pg.Client;
  let provision: string;
  const logLines: string[] = [];
  /** Every token any script carried: none may appear in a log line (checked last). */
  const minted: string[] = [];
  const nodes: Record<'a' | 'b' | 'c' | 'uuidOnly', string> = { a: '', b: '', c: '', uuidOnly: '' };

  beforeAll(async () => {
    // ROLE=api: no worker takes the metal.advance jobs, so the test reads each one the callbacks queue.
    t = await startTestApp({ role: 'api' }, { log: capturingLogger(logLines) });
    const tree = await makeTenantTree(t.app.database.prisma, 'boot', { pools: 1, nodesPerPool: 0 });
    provision = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    sql = new pg.Client({ connectionString: t.app.databaseUrl });
    await sql.connect();
    const enroll = async (bmc: string, extra: Record<string, unknown>, driver = 'redfish') => {
      const r = await rest(t.url, provision, 'POST', '/api/compute/metal/enroll', {
        poolId: tree.pools[0]!.id, bmc: { address: bmc, driver, credentials: { username: 'root', password: 'calvin-bmc' } }, ...extra,
      });
      expect(r.status).toBe(200);
      return r.body.node.id as string;
    };
    nodes.a = await enroll('127.9.0.1', { macs: MAC_A });
    nodes.b = await enroll('127.9.0.2', { macs: [MAC_B] });
    nodes.c = await enroll('127.9.0.3', { macs: [MAC_C] });
    nodes.uuidOnly = await enroll('127.9.0.4', { productUuid: '6b1e9d3c-0f4a-4c2e-9b7d-3a5f8e1c2d40' }, 'ipmi');
  });
  afterAll(async () => {
    await sql.end();
    await t.stop();
  });

  async function ipxe(mac: string): Promise<{ status: number; text: string; headers: Headers }> {
    const response = await fetch(`${t.url}/boot/ipxe?mac=${encodeURIComponent(mac)}`);
    return { status: response.status, text: await response.text(), headers: response.headers };
  }
  async function boot(mac: string): Promise<IpxeBoot> {
    const r = await ipxe(mac);
    expect(r.status).toBe(200);
    const parsed = parseIpxeScript(r.text);
    if (!parsed) throw new Error(`not a ramdisk script: ${r.text}`);
    minted.push(parsed.token);
    return parsed;
  }
  const post = (b: Pick<IpxeBoot, 'callback' | 'token'>, what: string, body: unknown, headers: Record<string, string> = {}) =>
    rest(t.url, b.token, 'POST', `${new URL(b.callback).pathname}/${what}`, body, headers);
  const counts = async () => {
    const { rows } = await sql.query(`SELECT (SELECT count(*)::int FROM ramdisk_report) AS reports,
      (SELECT count(*)::int FROM workflow_run WHERE due_at <= now()) AS jobs`);
    return rows[0] as { reports: number; jobs: number };
  };
  const liveTokens = async (entryId: string) =>
    Number((await sql.query('SELECT count(*) FROM boot_token WHERE boot_entry_id = $1 AND revoked_at IS NULL', [entryId])).rows[0].count);

  it('a MAC with no entry hears "exit", like any unknown MAC, and gets no token; a bad MAC is a 400 that does not echo it', async () => {
    const unknown = await ipxe('02:00:00:00:00:99');
    expect(unknown).toMatchObject({ status: 200, text: NO_ENTRY_SCRIPT });
    // An enrolled node with no entry says exactly the same: nothing tells the asker the MAC is known.
    expect((await ipxe(MAC_C)).text).toBe(NO_ENTRY_SCRIPT);
    expect(unknown.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(Number((await sql.query('SELECT count(*) FROM boot_token')).rows[0].count)).toBe(0);

    const bad = await rest(t.url, null, 'GET', '/boot/ipxe?mac=not-a-mac<script>');
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'query.mac' } });
    expect(JSON.stringify(bad.body)).not.toContain('script>');
    expect((await rest(t.url, null, 'GET', '/boot/ipxe')).body.error.details.field).toBe('query.mac');
    expect((await rest(t.url, null, 'GET', `/boot/ipxe?mac=${MAC_C}&mac=${MAC_B}`)).body.error.details.field).toBe('query.mac');
    expect((await rest(t.url, null, 'GET', `/boot/ipxe?mac=${MAC_C}&node=x`)).body.error.details.field).toBe('query.node');
    const posted = await rest(t.url, null, 'POST', `/boot/ipxe?mac=${MAC_C}`, {});
    expect(posted.status).toBe(405);
    expect(posted.headers.get('allow')).toBe('GET');
  });

  it('a machine known only by its UUID never gets a boot entry, so never a token', async () => {
    const run = await makeRun(sql, nodes.uuidOnly, 'metal-enroll');
    await expect(issueEntry(t, nodes.uuidOnly, run, 'inspect')).rejects.toBeInstanceOf(NoConfirmedMac);
    expect(Number((await sql.query('SELECT count(*) FROM boot_entry WHERE node_id = $1', [nodes.uuidOnly])).rows[0].count)).toBe(0);
  });

  it('serves the live entry as a ramdisk script with a fresh token per fetch, and revokes the last boot\'s token', async () => {
    const run = await makeRun(sql, nodes.a, 'metal-inspect');
    const [entryA1, entryA2] = await issueEntry(t, nodes.a, run, 'inspect', { dcgmLevel: 1 });
    const first = await ipxe('52-54-00-B0-00-01'); // any notation iPXE or an operator writes
    expect(first.headers.get('cache-control')).toBe('no-store');
    const one = parseIpxeScript(first.text)!;
    minted.push(one.token);
    expect(one).toMatchObject({
      entryId: entryA1,
      callback: `${t.url}/boot/v1/entries/${entryA1}`,
      kernelUrl: `${t.url}/boot/ramdisk/vmlinuz`,
      initrdUrl: `${t.url}/boot/ramdisk/initrd.img`,
    });
    expect(one.token).toMatch(/^mbt_[A-Za-z0-9_-]{43}$/);
    // Nothing about the node or its tenant beyond what the ramdisk needs.
    expect(first.text).not.toContain(nodes.a);
    // (The random token is taken out first: its base64url can spell 'wf_' by chance, one fetch in a few hundred.)
    expect(first.text.replace(one.token, '<token>')).not.toMatch(/\b(ten|pool|site|wf)_/);
    // Only the hash is stored, expiring with the entry.
    const { rows } = await sql.query(`SELECT t.*, e.expires_at AS entry_expires FROM boot_token t JOIN boot_entry e ON e.id = t.boot_entry_id WHERE t.boot_entry_id = $1`, [entryA1]);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ node_id: nodes.a, hash: hashToken(one.token), revoked_at: null });
    expect(rows[0].expires_at).toEqual(rows[0].entry_expires);
    expect(JSON.stringify((await sql.query('SELECT * FROM boot_token')).rows)).not.toContain(one.token);

    const ok = await post(one, 'heartbeat', {});
    expect(ok.status).toBe(201);
    // A second fetch is a second boot: a new token, and the first one no longer reports.
    const two = await boot(MAC_A[0]!);
    expect(two.token).not.toBe(one.token);
    expect(two.entryId).toBe(entryA1);
    expect(await liveTokens(entryA1)).toBe(1);
    expect((await post(one, 'heartbeat', {})).status).toBe(401);
    expect((await post(two, 'heartbeat', {})).status).toBe(201);
    // The node's other MAC has its own entry for the same run.
    const other = await boot(MAC_A[1]!);
    expect(other.entryId).toBe(entryA2);
    expect((await post(two, 'heartbeat', {})).status).toBe(201);
  });

  it('fetches at the same moment leave exactly one live token', async () => {
    const run = await makeRun(sql, nodes.b, 'metal-inspect');
    const [entry] = await issueEntry(t, nodes.b, run, 'inspect');
    const scripts = await Promise.all(Array.from({ length: 5 }, () => ipxe(MAC_B)));
    const boots = scripts.map((s) => parseIpxeScript(s.text)!);
    minted.push(...boots.map((b) => b.token));
    expect(new Set(boots.map((b) => b.token)).size).toBe(5);
    expect(await liveTokens(entry!)).toBe(1);
    const answers = await Promise.all(boots.map((b) => post(b, 'heartbeat', {})));
    expect(answers.map((a) => a.status).sort()).toEqual([201, 401, 401, 401, 401]);
  });

  it('reports racing new fetches of the same entry: each is stored or refused (401), never an error, and the last token is the one that works', async () => {
    const run = await makeRun(sql, nodes.b, 'metal-rescue');
    const [entry] = await issueEntry(t, nodes.b, run, 'rescue');
    const statuses: number[] = [];
    let current = await boot(MAC_B);
    // Under the cap: the first boot and seven more.
    for (let round = 0; round < MAX_BOOTS_PER_ENTRY - 1; round += 1) {
      const [fetched, ...answers] = await Promise.all([ipxe(MAC_B), ...Array.from({ length: 4 }, () => post(current, 'heartbeat', {}))]);
      statuses.push(...answers.map((a) => a.status));
      expect({ status: fetched.status, ramdisk: parseIpxeScript(fetched.text) !== null, text: parseIpxeScript(fetched.text) ? '' : fetched.text }).toEqual({ status: 200, ramdisk: true, text: '' });
      current = parseIpxeScript(fetched.text)!;
      minted.push(current.token);
    }
    expect(statuses.filter((s) => s !== 201 && s !== 401)).toEqual([]);
    expect(await liveTokens(entry!)).toBe(1);
    expect((await post(current, 'heartbeat', {})).status).toBe(201);
    // ...and racing the revocation of the node's boot (a run's end): stored before it, or 401 after.
    for (let round = 0; round < 3; round += 1) {
      await issueEntry(t, nodes.b, run, 'rescue');
      const b = await boot(MAC_B);
      const [, ...answers] = await Promise.all([
        t.app.database.sql.transaction((tx) => revokeNodeBoot(tx, nodes.b)),
        ...Array.from({ length: 4 }, () => post(b, 'heartbeat', {})),
      ]);
      expect(answers.filter((a) => a.status !== 201 && a.status !== 401)).toEqual([]);
      expect((await post(b, 'heartbeat', {})).status).toBe(401);
    }
    // A fetch racing the revocation: a boot before it (its token then revoked) or the no-entry script after.
    for (let round = 0; round < 5; round += 1) {
      await issueEntry(t, nodes.b, run, 'rescue');
      await boot(MAC_B);
      const [fetched] = await Promise.all([ipxe(MAC_B), t.app.database.sql.transaction((tx) => revokeNodeBoot(tx, nodes.b))]);
      expect(fetched.status).toBe(200);
      const raced = parseIpxeScript(fetched.text);
      if (raced) {
        minted.push(raced.token);
        expect((await post(raced, 'heartbeat', {})).status).toBe(401);
      } else expect(fetched.text).toBe(NO_ENTRY_SCRIPT);
    }
  });

  it(`an entry boots at most ${MAX_BOOTS_PER_ENTRY} times; past that its MAC hears the no-entry script`, async () => {
    const run = await makeRun(sql, nodes.c, 'metal-inspect');
    const [entry] = await issueEntry(t, nodes.c, run, 'inspect');
    for (let i = 0; i < MAX_BOOTS_PER_ENTRY; i += 1) await boot(MAC_C);
    const over = await ipxe(MAC_C);
    expect(over.text).toBe(NO_ENTRY_SCRIPT);
    expect(Number((await sql.query('SELECT count(*) FROM boot_token WHERE boot_entry_id = $1', [entry])).rows[0].count)).toBe(MAX_BOOTS_PER_ENTRY);
    // The last token minted still works: the cap refuses new boots, it does not end the current one.
    expect((await post({ callback: `${t.url}/boot/v1/entries/${entry}`, token: minted.at(-1)! }, 'heartbeat', {})).status).toBe(201);
  });

  describe('callbacks: 401 and no change without a valid token for that node and that boot', () => {
    let runA: string;
    let bootA: IpxeBoot;
    let bootB: IpxeBoot;
    beforeAll(async () => {
      runA = await makeRun(sql, nodes.a, 'metal-inspect');
      await issueEntry(t, nodes.a, runA, 'inspect');
      bootA = await boot(MAC_A[0]!);
      await issueEntry(t, nodes.b, await makeRun(sql, nodes.b, 'metal-inspect'), 'inspect');
      bootB = await boot(MAC_B);
    });

    async function refused(send: () => Promise<{ status: number; body: any; headers: Headers }>) {
      const before = await counts();
      const answer = await send();
      expect(answer.status).toBe(401);
      expect(answer.body.error).toMatchObject({ code: 'UNAUTHENTICATED', message: 'a valid boot token for this boot entry is required' });
      expect(answer.headers.get('www-authenticate')).toBe('Bearer realm="boot"');
      expect(await counts()).toEqual(before);
    }
    const path = (b: IpxeBoot, what: string) => `${new URL(b.callback).pathname}/${what}`;

    it('no token, another scheme, a wrong token: even a hostile body is never looked at', async () => {
      await refused(() => rest(t.url, null, 'POST', path(bootA, 'heartbeat'), {}));
      await refused(() => rest(t.url, null, 'POST', path(bootA, 'heartbeat'), {}, { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` }));
      await refused(() => rest(t.url, `mbt_${'x'.repeat(43)}`, 'POST', path(bootA, 'inventory'), '{"uuid": "\\u0000"'));
      await refused(() => rest(t.url, t.adminToken, 'GET', path(bootA, 'instructions')));
      await refused(() => rest(t.url, null, 'POST', path(bootA, 'wipe'), 'x'.repeat(2 * 1024 * 1024), { 'content-type': 'application/json' }));
    });

    it("another node's token, or a token for an entry that does not exist", async () => {
      await refused(() => rest(t.url, bootB.token, 'POST', path(bootA, 'heartbeat'), {}));
      await refused(() => rest(t.url, bootB.token, 'GET', path(bootA, 'instructions')));
      await refused(() => rest(t.url, bootA.token, 'POST', '/boot/v1/entries/boot_00000000-0000-7000-8000-000000000000/heartbeat', {}));
      await refused(() => rest(t.url, bootA.token, 'POST', '/boot/v1/entries/%E0%A4%A/heartbeat', {}));
    });

    it('an expired token, and a token of an expired entry', async () => {
      const b = await boot(MAC_A[0]!);
      bootA = b;
      await sql.query(`UPDATE boot_token SET expires_at = now() - interval '1 second' WHERE hash = $1`, [hashToken(b.token)]);
      await refused(() => post(b, 'heartbeat', {}));
      const fresh = await boot(MAC_A[0]!);
      expect((await post(fresh, 'heartbeat', {})).status).toBe(201);
      await sql.query(`UPDATE boot_entry SET expires_at = now() - interval '1 second' WHERE id = $1`, [fresh.entryId]);
      await refused(() => post(fresh, 'heartbeat', {}));
      // ...and an expired entry boots nothing.
      expect((await ipxe(MAC_A[0]!)).text).toBe(NO_ENTRY_SCRIPT);
    });

    it('a token revoked by a newer entry, and by revokeNodeBoot (a run\'s end, retire)', async () => {
      await issueEntry(t, nodes.a, runA, 'inspect');
      const b = await boot(MAC_A[0]!);
      expect((await post(b, 'heartbeat', {})).status).toBe(201);
      await issueEntry(t, nodes.a, runA, 'inspect');
      await refused(() => post(b, 'heartbeat', {}));
      const c = await boot(MAC_A[0]!);
      expect((await rest(t.url, c.token, 'GET', path(c, 'instructions'))).status).toBe(200);
      expect(await t.app.database.sql.transaction((tx) => revokeNodeBoot(tx, nodes.a))).toBeGreaterThan(0);
      await refused(() => post(c, 'heartbeat', {}));
      await refused(() => rest(t.url, c.token, 'GET', path(c, 'instructions')));
      expect((await ipxe(MAC_A[0]!)).text).toBe(NO_ENTRY_SCRIPT);
    });
  });

  describe('reports: validated, stored with the run, and the run woken in the same transaction', () => {
    let inspectRun: string;
    let inspect: IpxeBoot;
    let commissionRun: string;
    let commission: IpxeBoot;
    beforeAll(async () => {
      inspectRun = await makeRun(sql, nodes.a, 'metal-inspect');
      await issueEntry(t, nodes.a, inspectRun, 'inspect');
      inspect = await boot(MAC_A[0]!);
      commissionRun = await makeRun(sql, nodes.b, 'metal-commission');
      await issueEntry(t, nodes.b, commissionRun, 'commission', { dcgmLevel: 2, wipe: 'quick', disks: ['S1', 'S2'] });
      commission = await boot(MAC_B);
    });

    const inventory = (over: Record<string, unknown> = {}) => ({
      uuid: '3A8F2C71-5B0D-4E6A-9C13-7D2E4F8A1B06',
      nics: [{ mac: '52:54:00:B0:00:01', name: 'eno1', speedMbps: 25000 }, { mac: '52-54-00-b0-00-02' }],
      cpus: [{ model: 'Xeon 7xxx', cores: 8, threads: 16 }],
      memoryMiB: 32768,
      disks: [{ name: 'sda', serial: 'S1', sizeBytes: 8_000_000_000_000, model: '3000GT8' }, { name: 'sdb', serial: 'S2', sizeBytes: 4_000_000_000_000 }],
      ...over,
    });

    it('GET instructions: the purpose and params of this boot', async () => {
      const r = await rest(t.url, commission.token, 'GET', `${new URL(commission.callback).pathname}/instructions`);
      expect(r.status).toBe(200);
      expect(r.body).toEqual({
        entryId: commission.entryId, purpose: 'commission', params: { dcgmLevel: 2, wipe: 'quick', disks: ['S1', 'S2'] },
        expiresAt: expect.any(String), reports: ['heartbeat', 'step', 'inventory', 'dcgm', 'wipe'], heartbeatSeconds: 60,
      });
      expect((await rest(t.url, commission.token, 'GET', `${new URL(commission.callback).pathname}/instructions?x=1`)).body.error.details.field).toBe('query.x');
      expect((await rest(t.url, commission.token, 'POST', `${new URL(commission.callback).pathname}/instructions`, {})).status).toBe(405);
    });

    it('each kind lands in ramdisk_report with the run, its token and node, and queues metal.advance for the run', async () => {
      const before = await counts();
      const sent: [IpxeBoot, string, unknown][] = [
        [inspect, 'inventory', inventory()],
        [commission, 'heartbeat', {}],
        [commission, 'steps', { name: 'dcgm-diag', status: 'started' }],
        [commission, 'dcgm', { passed: false, level: 2, tests: [{ name: 'memory', result: 'pass' }, { name: 'pcie', result: 'fail', details: 'link width x8, expected x16' }] }],
        [commission, 'wipe', { disks: [{ serial: 'S1', mode: 'quick', attested: true, method: 'blkdiscard' }, { serial: 'S2', name: 'sdb', mode: 'quick', attested: false, method: 'dd-zero', evidence: 'no sanitize support' }] }],
        [commission, 'steps', { name: 'dcgm-diag', status: 'failed', message: 'pcie failed' }],
      ];
      for (const [b, what, body] of sent) {
        const r = await post(b, what, body);
        expect({ what, status: r.status }).toEqual({ what, status: 201 });
        expect(r.body.report).toEqual({ id: expect.stringMatching(/^\d+$/), kind: what === 'steps' ? 'step' : what, createdAt: expect.any(String) });
      }
      // A report wakes its run (the heartbeat and the step's start need not: reportWakesRun); a run
      // woken again stays due once (no worker runs here): two runs due, six reports.
      expect(await counts()).toEqual({ reports: before.reports + sent.length, jobs: before.jobs + 2 });
      const due = async (runId: string) => Number((await sql.query(`SELECT count(*) FROM workflow_run WHERE id = $1 AND due_at <= now()`, [runId])).rows[0].count);
      expect([await due(inspectRun), await due(commissionRun)]).toEqual([1, 1]);
      const stored = (await reportsOf(t.app.database.sql, inspectRun)).map((r) => r.payload);
      // MACs and the UUID as the node holds them.
      expect(stored).toEqual([{ ...inventory(), uuid: '3a8f2c71-5b0d-4e6a-9c13-7d2e4f8a1b06', nics: [{ mac: '52:54:00:b0:00:01', name: 'eno1', speedMbps: 25000 }, { mac: '52:54:00:b0:00:02' }] }]);
      expect((await reportsOf(t.app.database.sql, commissionRun)).map((r) => r.kind)).toEqual(['heartbeat', 'step', 'dcgm', 'wipe', 'step']);
      expect((await reportsOf(t.app.database.sql, commissionRun, { kind: 'wipe' }))[0]!.payload).toEqual(sent[4]![2]);
      const rows = (await sql.query('SELECT * FROM ramdisk_report WHERE run_id = $1 ORDER BY id', [commissionRun])).rows;
      const token = (await sql.query('SELECT id FROM boot_token WHERE hash = $1', [hashToken(commission.token)])).rows[0].id;
      expect(rows.every((r) => r.node_id === nodes.b && r.boot_entry_id === commission.entryId && r.boot_token_id === token)).toBe(true);
    });

    it('a good report is one statement (authenticated, stored and its run woken together); a refused body costs one more, the lookup that decides 401 or 400', async () => {
      const statements = async (send: () => Promise<{ status: number }>) => {
        const before = t.app.database.statements.count;
        const { status } = await send();
        return { status, statements: t.app.database.statements.count - before };
      };
      expect(await statements(() => post(commission, 'heartbeat', {}))).toEqual({ status: 201, statements: 1 });
      expect(await statements(() => post(commission, 'steps', { name: 'dcgm-diag', status: 'succeeded' }))).toEqual({ status: 201, statements: 1 });
      expect(await statements(() => post(commission, 'heartbeat', { extra: 1 }))).toEqual({ status: 400, statements: 1 });
      expect(await statements(() => post({ ...commission, token: `mbt_${'x'.repeat(43)}` }, 'heartbeat', { extra: 1 }))).toEqual({ status: 401, statements: 1 });
    });

    it('reports of several machines that wait for a connection go in one message (one transaction), each answered as it would be alone', async () => {
      const pool = t.app.database.sql.pool;
      const held = await Promise.all(Array.from({ length: pool.options.max ?? 10 }, () => pool.connect()));
      const before = Number((await sql.query('SELECT coalesce(max(id), 0) AS id FROM ramdisk_report')).rows[0].id);
      const answers = Promise.all([
        post(inspect, 'heartbeat', {}),
        post(commission, 'heartbeat', {}),
        post({ ...commission, token: `mbt_${'y'.repeat(43)}` }, 'heartbeat', {}),
        post(inspect, 'wipe', { disks: [{ serial: 'S1', mode: 'quick', attested: true, method: 'blkdiscard' }] }),
      ]);
      await new Promise((resolve) => setTimeout(resolve, 200));
      for (const client of held) client.release();
      expect((await answers).map((r) => r.status)).toEqual([201, 201, 401, 409]);
      const rows = (await sql.query('SELECT node_id, xmin::text AS tx FROM ramdisk_report WHERE id > $1 ORDER BY id', [before])).rows;
      expect(rows.map((r) => r.node_id).sort()).toEqual([nodes.a, nodes.b].sort());
      expect(new Set(rows.map((r) => r.tx)).size).toBe(1);
    });

    it('a report nothing waits for is stored without waking the run: a heartbeat (but for rescue), a step that started, and the end of a step no workflow reads', async () => {
      const jobsOf = async (runId: string) => Number((await sql.query(`SELECT count(*) FROM workflow_run WHERE id = $1 AND due_at <= now()`, [runId])).rows[0].count);
      // The engine took the run (none runs here: as its fetch leaves it, due at its lease's end).
      await sql.query(`UPDATE workflow_run SET due_at = now() + interval '1 minute' WHERE id = $1`, [commissionRun]);
      expect((await post(commission, 'heartbeat', { message: 'still erasing' })).status).toBe(201);
      expect((await post(commission, 'steps', { name: 'erase-devices', status: 'started' })).status).toBe(201);
      // The DCGM step reads the dcgm report, never the ramdisk's dcgm-diag step: its end wakes nothing.
      expect((await post(commission, 'steps', { name: 'dcgm-diag', status: 'succeeded' })).status).toBe(201);
      expect(await jobsOf(commissionRun)).toBe(0);
      expect((await post(commission, 'steps', { name: 'erase-devices', status: 'succeeded' })).status).toBe(201);
      expect(await jobsOf(commissionRun)).toBe(1);
      expect([
        reportWakesRun('rescue', 'heartbeat', {}), reportWakesRun('inspect', 'heartbeat', {}), reportWakesRun('deploy', 'step', { name: 'os', status: 'started' }),
        reportWakesRun('deploy', 'step', { name: 'os', status: 'succeeded' }), reportWakesRun('deploy', 'step', { name: 'os', status: 'failed' }),
        reportWakesRun('inspect', 'inventory', {}), reportWakesRun('commission', 'dcgm', {}), reportWakesRun('release', 'wipe', {}),
        // The wipe's end ends a wipe step's wait (wipeOver), whatever the purpose that wipes.
        reportWakesRun('commission', 'step', { name: 'erase-devices', status: 'succeeded' }), reportWakesRun('release', 'step', { name: 'erase-devices', status: 'failed' }),
        reportWakesRun('retire', 'step', { name: 'erase-devices', status: 'succeeded' }), reportWakesRun('release', 'step', { name: 'erase-devices', status: 'started' }),
        // Steps no workflow reads: the inventory and the DCGM report are what their steps wait for.
        reportWakesRun('inspect', 'step', { name: 'inspect-hardware', status: 'succeeded' }), reportWakesRun('commission', 'step', { name: 'dcgm-diag', status: 'failed' }),
        reportWakesRun('rescue', 'step', { name: 'shell', status: 'succeeded' }),
      ]).toEqual([true, false, false, true, true, true, true, true, true, true, true, false, false, false, false]);
    });

    it("a boot's purpose decides which reports it takes (409, nothing stored)", async () => {
      const before = await counts();
      const r = await post(inspect, 'wipe', { disks: [{ serial: 'S1', mode: 'quick', attested: true, method: 'blkdiscard' }] });
      expect(r.status).toBe(409);
      expect(r.body.error).toMatchObject({ code: 'INVALID_STATE', details: { purpose: 'inspect', reports: ['heartbeat', 'step', 'inventory'] } });
      expect(await counts()).toEqual(before);
    });

    const deep = (n: number): unknown => (n === 0 ? 'x' : { a: deep(n - 1) });
    it.each([
      ['no Content-Type', 'heartbeat', '{}', { 'content-type': 'text/plain' }, 'body'],
      ['malformed JSON', 'heartbeat', '{"message": ', {}, 'body'],
      ['an array', 'heartbeat', '[]', {}, 'body'],
      ['an unknown field', 'heartbeat', { colour: 'blue' }, {}, 'body.colour'],
      ['a NUL character', 'inventory', inventory({ nics: [{ mac: '52:54:00:b0:00:01', name: 'eno\u00001' }] }), {}, 'body.nics[0].name'],
      ['a lone surrogate', 'inventory', JSON.stringify(inventory()).replace('"3000GT8"', '"3000\\ud800GT8"'), {}, 'body.disks[0].model'],
      ['nesting past 32 levels', 'heartbeat', { message: deep(40) }, {}, 'body'],
      ['a string where a number goes', 'inventory', inventory({ memoryMiB: 'lots' }), {}, 'body.memoryMiB'],
      ['a missing field', 'inventory', inventory({ nics: undefined }), {}, 'body.nics'],
      ['no NIC at all', 'inventory', inventory({ nics: [] }), {}, 'body.nics'],
      ['a UUID that is none', 'inventory', inventory({ uuid: 'not-a-uuid' }), {}, 'body.uuid'],
      ['a MAC that is none', 'inventory', inventory({ nics: [{ mac: 'zz:54:00:b0:00:01' }] }), {}, 'body.nics[0].mac'],
      ['a multicast MAC', 'inventory', inventory({ nics: [{ mac: '01:00:5e:00:00:01' }] }), {}, 'body.nics[0].mac'],
      ['the same MAC twice', 'inventory', inventory({ nics: [{ mac: '52:54:00:b0:00:01' }, { mac: '52-54-00-B0-00-01' }] }), {}, 'body.nics[1].mac'],
      ['the same disk twice', 'inventory', inventory({ disks: [{ name: 'a', serial: 'S1', sizeBytes: 1 }, { name: 'b', serial: 'S1', sizeBytes: 1 }] }), {}, 'body.disks[1].serial'],
      ['fewer threads than cores', 'inventory', inventory({ cpus: [{ model: 'x', cores: 8, threads: 4 }] }), {}, 'body.cpus[0].threads'],
      ['a negative size', 'inventory', inventory({ disks: [{ name: 'a', serial: 'S1', sizeBytes: -1 }] }), {}, 'body.disks[0].sizeBytes'],
      ['a name over 256 characters', 'inventory', inventory({ disks: [{ name: 'a'.repeat(257), serial: 'S1', sizeBytes: 1 }] }), {}, 'body.disks[0].name'],
      ['a step status it does not know', 'steps', { name: 'x', status: 'done' }, {}, 'body.status'],
      ['DCGM passed with a failed test', 'dcgm', { passed: true, level: 1, tests: [{ name: 'pcie', result: 'fail' }] }, {}, 'body.passed'],
      ['a DCGM level past 4', 'dcgm', { passed: true, level: 9, tests: [{ name: 'pcie', result: 'pass' }] }, {}, 'body.level'],
      ['a wipe with mode none', 'wipe', { disks: [{ serial: 'S1', mode: 'none', attested: true, method: 'x' }] }, {}, 'body.disks[0].mode'],
      ['attested as a string', 'wipe', { disks: [{ serial: 'S1', mode: 'quick', attested: 'yes', method: 'x' }] }, {}, 'body.disks[0].attested'],
      ['a wipe of no disk', 'wipe', { disks: [] }, {}, 'body.disks'],
      ['the same disk wiped twice', 'wipe', { disks: [{ serial: 'S1', mode: 'quick', attested: true, method: 'x' }, { serial: 'S1', mode: 'quick', attested: true, method: 'x' }] }, {}, 'body.disks[1].serial'],
      ['evidence over 4096 characters', 'wipe', { disks: [{ serial: 'S1', mode: 'quick', attested: true, method: 'x', evidence: 'e'.repeat(4097) }] }, {}, 'body.disks[0].evidence'],
    ])('%s (a %s report): 400 naming the field, nothing stored', async (_what, kind, body, headers, field) => {
      const target = kind === 'inventory' ? inspect : commission;
      const before = await counts();
      const r = await post(target, kind, body, { 'content-type': 'application/json', ...headers });
      expect(r.status).toBe(400);
      expect(r.body.error).toMatchObject({ code: 'INVALID_INPUT', details: { field } });
      expect(r.body.error.message.startsWith(`${field}:`)).toBe(true);
      expect(await counts()).toEqual(before);
    });

    it('a body over 1 MiB is 413, nothing stored', async () => {
      const before = await counts();
      const r = await post(inspect, 'inventory', inventory({ disks: Array.from({ length: 20000 }, (_, i) => ({ name: `d${i}`, serial: `SERIAL-${'x'.repeat(40)}-${i}`, sizeBytes: i })) }));
      expect(r.status).toBe(413);
      expect(r.body.error.details.field).toBe('body');
      expect(await counts()).toEqual(before);
    });
  });

  it('refuses settings that would break an iPXE script line', () => {
    const log = pino({ level: 'silent' });
    const sqlOfApp = t.app.database.sql;
    expect(() => new BootHttp(sqlOfApp, log, { publicUrl: 'http://boot.example/${net0/mac}' })).toThrow(/PUBLIC_URL/);
    expect(() => new BootHttp(sqlOfApp, log, { ramdiskKernelUrl: 'http://x/vmlinuz console=ttyS0' })).toThrow(/RAMDISK_KERNEL_URL/);
    expect(() => new BootHttp(sqlOfApp, log, { ramdiskInitrdUrl: 'tftp://x/initrd' })).toThrow(/RAMDISK_INITRD_URL/);
    expect(() => new BootHttp(sqlOfApp, log, { publicUrl: 'https://boot.example:8443/' })).not.toThrow();
  });

  it('no boot token appears in any log line, while the boots and reports are logged', () => {
    expect(minted.length).toBeGreaterThan(20);
    const all = logLines.join('');
    for (const token of minted) expect(all).not.toContain(token);
    for (const token of minted) expect(all).not.toContain(hashToken(token));
    expect(logLines.some((l) => l.includes('"boot script served"'))).toBe(true);
    expect(logLines.some((l) => l.includes('"ramdisk report stored"'))).toBe(true);
  });

  it('issueBootEntry is unchanged: one live entry per MAC', async () => {
    const run = await makeRun(sql, nodes.c, 'metal-inspect');
    await t.app.database.sql.transaction((tx) => issueBootEntry(tx, { nodeId: nodes.c, runId: run, purpose: 'rescue', params: {}, ttlMs: 60_000 }));
    expect(Number((await sql.query('SELECT count(*) FROM boot_entry WHERE mac = $1 AND revoked_at IS NULL', [MAC_C])).rows[0].count)).toBe(1);
  });
});

describe('PUBLIC_URL in the scripts, and the ramdisk files served from RAMDISK_DIR', () => {
  let t: TestApp;
  let dir: string;
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ramdisk-'));
    fs.writeFileSync(path.join(dir, 'vmlinuz'), Buffer.from('kernel bytes'));
    fs.writeFileSync(path.join(dir, 'secret.txt'), 'not served');
    t = await startTestApp({ role: 'api', publicUrl: 'https://boot.example:8443/', ramdiskDir: dir });
  });
  afterAll(async () => {
    await t.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('the callback and the ramdisk URLs are under PUBLIC_URL', async () => {
    const tree = await makeTenantTree(t.app.database.prisma, 'boot-public', { pools: 1, nodesPerPool: 0 });
    const token = await makeToken(t.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const r = await rest(t.url, token, 'POST', '/api/compute/metal/enroll', { poolId: tree.pools[0]!.id, macs: ['52:54:00:b1:00:01'], bmc: { address: '127.9.1.1', driver: 'redfish', credentials: { username: 'u', password: 'p' } } });
    const sql = new pg.Client({ connectionString: t.app.databaseUrl });
    await sql.connect();
    try {
      const [entry] = await issueEntry(t, r.body.node.id, await makeRun(sql, r.body.node.id, 'metal-inspect'), 'inspect');
      const script = parseIpxeScript(await (await fetch(`${t.url}/boot/ipxe?mac=52:54:00:b1:00:01`)).text())!;
      expect(script).toMatchObject({
        callback: `https://boot.example:8443/boot/v1/entries/${entry}`,
        kernelUrl: 'https://boot.example:8443/boot/ramdisk/vmlinuz',
        initrdUrl: 'https://boot.example:8443/boot/ramdisk/initrd.img',
      });
    } finally {
      await sql.end();
    }
  });

  it('serves vmlinuz and initrd.img from RAMDISK_DIR, and nothing else', async () => {
    const kernel = await fetch(`${t.url}/boot/ramdisk/vmlinuz`);
    expect(kernel.status).toBe(200);
    expect(kernel.headers.get('content-type')).toBe('application/octet-stream');
    expect(Buffer.from(await kernel.arrayBuffer()).toString()).toBe('kernel bytes');
    const head = await fetch(`${t.url}/boot/ramdisk/vmlinuz`, { method: 'HEAD' });
    expect(head.headers.get('content-length')).toBe(String('kernel bytes'.length));
    // Not installed yet: a 404 that says so.
    const initrd = await rest(t.url, null, 'GET', '/boot/ramdisk/initrd.img');
    expect(initrd.status).toBe(404);
    expect(initrd.body.error.code).toBe('NOT_FOUND');
    for (const other of ['/boot/ramdisk/secret.txt', '/boot/ramdisk/../ramdisk/secret.txt', '/boot/ramdisk/%2e%2e%2fsecret.txt', '/boot/ramdisk/']) {
      const answer = await rest(t.url, null, 'GET', other);
      expect({ other, status: answer.status }).toEqual({ other, status: 404 });
      expect(JSON.stringify(answer.body)).not.toContain('not served');
    }
    expect((await rest(t.url, null, 'POST', '/boot/ramdisk/vmlinuz', {})).status).toBe(405);
  });
});
