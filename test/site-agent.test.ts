/**
 * The site agent protocol over the service's real GraphQL API (issue 9, item 4): keys, claims with
 * a lease, credentials sealed to the holder, structured results that wake the run, the sweep of
 * lapsed claims and expired commands. The built-in agent is off here, so only the agents of the
 * test claim anything.
 */
import { randomBytes } from 'node:crypto';
import { capturingLogger, startTestApp, type TestApp } from './helpers/app';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { newId } from '../src/ids';
import { queueCommand, type CommandKind } from '../src/modules/sites/commands';
import { generateAgentKeyPair, openSealed, parsePublicKey, seal, type AgentKeyPair, type SealedBox } from '../src/modules/sites/seal';
import { loadConfig } from '../src/config';

const PASSWORD = `pw-${randomBytes(12).toString('hex')}`;
const CLAIM = 'mutation ($m: Int) { claimCommands(max: $m) { id kind params status leaseExpiresAt } }';
const CREDENTIALS = `mutation ($c: ID!) { commandCredentials(commandId: $c) {
  commandId agentId claimDeadline kind params nodeId endpoint { address driver driverOptions driverBindings } sealed { scheme epk iv ciphertext tag } } }`;
const REPORT = 'mutation ($c: ID!, $r: CommandResultInput!) { reportCommandResult(commandId: $c, result: $r) { id status result } }';
const HEARTBEAT = 'mutation { agentReportStatus { id } }';
const REGISTER_KEY = 'mutation ($k: String!) { registerAgentKey(publicKey: $k) { id hasPublicKey } }';

interface Answer {
  status: number;
  data: Record<string, any> | null | undefined;
  errors?: { message: string; extensions?: { code?: string; details?: { field?: string } } }[];
}

describe('site agent protocol', () => {
  let t: TestApp;
  const lines: string[] = [];
  /** Every response body the agents and the admin received, as text: no password may be in one. */
  const bodies: string[] = [];
  let tree: Awaited<ReturnType<typeof makeTenantTree>>;
  let site2: { id: string };
  let admin: string;
  let nodeId: string;
  let node2Id: string;
  const agents: Record<'a1' | 'a2' | 'b', { token: string; id: string; keys: AgentKeyPair }> = {} as never;

  async function call(token: string | null, query: string, variables: Record<string, unknown> = {}): Promise<Answer> {
    const response = await fetch(`${t.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
      body: JSON.stringify({ query, variables }),
    });
    const text = await response.text();
    bodies.push(text);
    const body = JSON.parse(text) as Omit<Answer, 'status'>;
    return { status: response.status, ...body };
  }
  const code = (a: Answer) => a.errors?.[0]?.extensions?.code;

  let keyCounter = 0;
  async function queue(kind: CommandKind, opts: { node?: string; runId?: string; ttlMs?: number } = {}) {
    const params = kind === 'bmc.power' ? { action: 'on' as const } : {};
    keyCounter += 1;
    if (opts.runId) await waitingRun(opts.runId);
    const row = await queueCommand(t.app.services.sql, {
      kind, params: params as never, nodeId: opts.node ?? nodeId, runId: opts.runId ?? `run_${keyCounter}`, stepIdx: 0,
      idempotencyKey: `test-${keyCounter}-${randomBytes(4).toString('hex')}`, ttlMs: opts.ttlMs ?? 300000,
    });
    return row.id;
  }
  const command = (id: string) => t.app.database.prisma.command.findUniqueOrThrow({ where: { id } });
  /**
   * A run waiting for its command with nothing due (as the engine leaves it), on a node of its own
   * (one active run per node): what a result, a lapsed claim or an expiry wakes. No engine runs
   * here (WORKFLOW_ENGINE off), so a woken run stays due for the test to see.
   */
  async function waitingRun(runId: string): Promise<void> {
    const prisma = t.app.database.prisma;
    const owner = newId('MetalNode');
    await prisma.node.create({ data: { id: owner, tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id, provisionState: 'inspecting', bmcAddress: '127.9.9.11', bmcDriver: 'redfish', bmcCredentialsRef: 'secret://none' } });
    await prisma.workflowRun.create({ data: { id: runId, nodeId: owner, kind: 'metal-inspect', status: 'waiting', waitingFor: 'the command', dueAt: null } });
  }
  /** 1 when the run is due (woken), else 0. */
  async function advanceJobs(runId: string): Promise<number> {
    const { rows } = await t.app.services.sql.query('SELECT count(*)::int AS n FROM workflow_run WHERE id = $1 AND due_at <= now()', [runId]);
    return rows[0].n as number;
  }

  beforeAll(async () => {
    t = await startTestApp({ builtinAgent: false, tokenCacheMs: 0, agentLeaseMs: 20000, workflowEngine: false }, { log: capturingLogger(lines) });
    const prisma = t.app.database.prisma;
    tree = await makeTenantTree(prisma, 'sa', { pools: 1, nodesPerPool: 0 });
    site2 = await prisma.site.create({ data: { id: newId('Site'), tenantId: tree.tenant.id, name: 'sa-site-2' } });
    const pool2 = await prisma.pool.create({ data: { id: newId('Pool'), tenantId: tree.tenant.id, siteId: site2.id, name: 'sa-pool-2', policy: {} } });
    admin = await makeToken(prisma, tree.tenant.id, [{ permission: 'admin', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const ref = await t.app.services.secrets!.put(tree.tenant.id, { username: 'root', password: PASSWORD });
    const bindings = { power: 'redfish', management: 'redfish', virtualMedia: 'redfish' };
    nodeId = newId('MetalNode');
    node2Id = newId('MetalNode');
    await prisma.node.createMany({
      data: [
        { id: nodeId, tenantId: tree.tenant.id, siteId: tree.site.id, poolId: tree.pools[0]!.id, provisionState: 'ready', bmcAddress: '127.9.9.9', bmcDriver: 'redfish', bmcCredentialsRef: ref, driverBindings: bindings, bmcDriverOptions: { insecure: false } },
        { id: node2Id, tenantId: tree.tenant.id, siteId: site2.id, poolId: pool2.id, provisionState: 'ready', bmcAddress: '127.9.9.10', bmcDriver: 'redfish', bmcCredentialsRef: ref, driverBindings: bindings },
      ],
    });
    for (const [name, siteId] of [['a1', tree.site.id], ['a2', tree.site.id], ['b', site2.id]] as const) {
      const r = await call(admin, 'mutation ($s: ID!, $n: String!) { registerSiteAgent(siteId: $s, name: $n) { token agent { id } } }', { s: siteId, n: `agent-${name}` });
      agents[name] = { token: r.data!.registerSiteAgent.token, id: r.data!.registerSiteAgent.agent.id, keys: generateAgentKeyPair() };
    }
  });
  afterAll(() => t.stop());

  it('an agent must register a well-formed X25519 key before it may claim', async () => {
    const cmd = await queue('bmc.power-state');
    const before = await call(agents.a1.token, CLAIM, { m: 5 });
    expect(code(before)).toBe('INVALID_STATE');
    expect(before.errors![0]!.message).toMatch(/registerAgentKey/);
    for (const bad of ['', 'not-a-key', randomBytes(31).toString('base64url'), randomBytes(33).toString('base64url'), `${generateAgentKeyPair().publicKey}\u0000`]) {
      const r = await call(agents.a1.token, REGISTER_KEY, { k: bad });
      expect(code(r)).toBe('INVALID_INPUT');
      // The schema's input checks (NUL, length) name the variable, the domain's the argument.
      expect(['$k', 'publicKey']).toContain(r.errors![0]!.extensions!.details!.field);
    }
    expect(code(await call(admin, REGISTER_KEY, { k: agents.a1.keys.publicKey }))).toBe('PERMISSION_DENIED');
    for (const name of ['a1', 'a2', 'b'] as const) {
      const r = await call(agents[name].token, REGISTER_KEY, { k: agents[name].keys.publicKey });
      expect(r.data!.registerAgentKey).toEqual({ id: agents[name].id, hasPublicKey: true });
    }
    expect((await command(cmd)).status).toBe('queued');
    // Out of the way of the next tests' claims.
    await t.app.database.prisma.command.update({ where: { id: cmd }, data: { status: 'succeeded' } });
  });

  let held: string;
  let heldSealed: { sealed: SealedBox; claimDeadline: string };
  it('claims hold a lease; the credentials open with the holder\'s key only, bound to command, agent and deadline', async () => {
    held = await queue('bmc.power', { runId: 'run_held' });
    const other = await queue('bmc.power', { node: node2Id, runId: 'run_site2' });
    const claimed = await call(agents.a1.token, CLAIM, { m: 10 });
    expect(claimed.data!.claimCommands.map((c: { id: string }) => c.id)).toEqual([held]);
    const lease = new Date(claimed.data!.claimCommands[0].leaseExpiresAt).getTime();
    expect(lease).toBeGreaterThan(Date.now() + 10000);
    expect(lease).toBeLessThanOrEqual(Date.now() + 21000);
    expect(claimed.data!.claimCommands[0]).toMatchObject({ kind: 'bmc.power', params: { action: 'on' }, status: 'claimed' });
    // Another agent of the same site finds nothing left; the other site's agent gets only its own.
    expect((await call(agents.a2.token, CLAIM, { m: 10 })).data!.claimCommands).toEqual([]);
    const b = await call(agents.b.token, CLAIM, { m: 10 });
    expect(b.data!.claimCommands.map((c: { id: string }) => c.id)).toEqual([other]);

    const answer = await call(agents.a1.token, CREDENTIALS, { c: held });
    const creds = answer.data!.commandCredentials;
    expect(creds).toMatchObject({
      commandId: held, agentId: agents.a1.id, kind: 'bmc.power', params: { action: 'on' }, nodeId,
      endpoint: { address: '127.9.9.9', driver: 'redfish', driverOptions: { insecure: false }, driverBindings: { power: 'redfish', management: 'redfish', virtualMedia: 'redfish' } },
    });
    expect(new Date(creds.claimDeadline).getTime()).toBe(lease);
    const binding = { commandId: held, agentId: agents.a1.id, claimDeadline: creds.claimDeadline };
    expect(JSON.parse(openSealed(agents.a1.keys.privateKey, creds.sealed, binding))).toEqual({ username: 'root', password: PASSWORD });
    heldSealed = { sealed: creds.sealed, claimDeadline: creds.claimDeadline };
    // Another agent's key, another command, another agent id or another deadline: no.
    expect(() => openSealed(agents.a2.keys.privateKey, creds.sealed, binding)).toThrow();
    expect(() => openSealed(agents.b.keys.privateKey, creds.sealed, binding)).toThrow();
    expect(() => openSealed(agents.a1.keys.privateKey, creds.sealed, { ...binding, commandId: other })).toThrow();
    expect(() => openSealed(agents.a1.keys.privateKey, creds.sealed, { ...binding, agentId: agents.a2.id })).toThrow();
    expect(() => openSealed(agents.a1.keys.privateKey, creds.sealed, { ...binding, claimDeadline: new Date(lease + 1).toISOString() })).toThrow();
    // Each request seals afresh (a new ephemeral key): two answers never share a ciphertext.
    const again = (await call(agents.a1.token, CREDENTIALS, { c: held })).data!.commandCredentials;
    expect(again.sealed.epk).not.toBe(creds.sealed.epk);

    // Not its claim: the same site's other agent gets CONFLICT, the other site's agent NOT_FOUND.
    expect(code(await call(agents.a2.token, CREDENTIALS, { c: held }))).toBe('CONFLICT');
    expect(code(await call(agents.b.token, CREDENTIALS, { c: held }))).toBe('NOT_FOUND');
    expect(code(await call(agents.b.token, REPORT, { c: held, r: { ok: true, value: 'on' } }))).toBe('NOT_FOUND');
    expect(code(await call(admin, CREDENTIALS, { c: held }))).toBe('PERMISSION_DENIED');
    expect(code(await call(null, CREDENTIALS, { c: held }))).toBe('UNAUTHENTICATED');
    expect((await command(held)).status).toBe('claimed');
  });

  it('results are CommandResults: hostile input is INVALID_INPUT naming the field, with nothing written', async () => {
    // Field paths: the schema's input checks (types, NUL, string limits) name the variable ($r...),
    // the domain's checks (commands.ts) the argument (result...); either way the field itself.
    const cases: [unknown, string][] = [
      [{ ok: 'yes' }, 'ok'],
      [{ ok: true, value: 'sideways' }, 'value'],
      [{ ok: true, value: 'x'.repeat(70 * 1024) }, 'value'],
      [{ ok: true, value: { deep: [[[[[[[[[['on']]]]]]]]]] } }, 'value.deep[0][0][0][0][0][0][0][0]'],
      [{ ok: true, value: 'on', notes: ['chassis\u0000on'] }, 'notes[0]'],
      [{ ok: true, value: 'on', notes: ['n'.repeat(1001)] }, 'notes[0]'],
      [{ ok: true, value: 'on', notes: Array.from({ length: 33 }, () => 'n') }, 'notes'],
      [{ ok: true, value: 'on', message: 'extra' }, 'message'],
      [{ ok: false, code: 'NOPE', message: 'x' }, 'code'],
      [{ ok: false, code: 'EXPIRED', message: 'only the sweep says so' }, 'code'],
      [{ ok: false, code: 'BMC_ERROR' }, 'message'],
      [{ ok: false, code: 'BMC_ERROR', message: '   ' }, 'message'],
      [{ ok: false, code: 'BMC_ERROR', message: 'm'.repeat(2001) }, 'message'],
      [{ ok: false, code: 'BMC_ERROR', message: 'bad\u0000' }, 'message'],
      [{ ok: false, code: 'BMC_ERROR', message: 'x', retryable: 'no' }, 'retryable'],
      [{ ok: false, code: 'BMC_ERROR', message: 'x', value: 'on' }, 'value'],
    ];
    for (const [result, field] of cases) {
      const r = await call(agents.a1.token, REPORT, { c: held, r: result });
      expect(code(r)).toBe('INVALID_INPUT');
      expect(r.errors![0]!.extensions!.details!.field).toMatch(new RegExp(`^(\\$r|result)\\.${field.replace(/[[\]]/g, '\\$&')}$`));
      expect(r.errors![0]!.message).not.toContain('chassis');
    }
    expect((await command(held)).status).toBe('claimed');
    expect(await advanceJobs('run_held')).toBe(0);
  });

  it('a valid result is recorded and wakes the run that queued the command, once', async () => {
    const done = await call(agents.a1.token, REPORT, { c: held, r: { ok: true, value: 'on', notes: ['ResetType On; read back on'] } });
    expect(done.data!.reportCommandResult).toEqual({ id: held, status: 'succeeded', result: { ok: true, value: 'on', notes: ['ResetType On; read back on'] } });
    expect(await advanceJobs('run_held')).toBe(1);
    expect((await command(held)).leaseExpiresAt).toBeNull();
    expect(code(await call(agents.a1.token, REPORT, { c: held, r: { ok: true, value: 'on' } }))).toBe('CONFLICT');
    // The claim is over: no more credentials either.
    expect(code(await call(agents.a1.token, CREDENTIALS, { c: held }))).toBe('CONFLICT');
    const failed = await queue('bmc.inventory', { runId: 'run_fail' });
    await call(agents.a1.token, CLAIM, { m: 10 });
    const f = await call(agents.a1.token, REPORT, { c: failed, r: { ok: false, code: 'BMC_AUTH_FAILED', message: 'the BMC refused user root', retryable: false } });
    expect(f.data!.reportCommandResult).toMatchObject({ status: 'failed', result: { ok: false, code: 'BMC_AUTH_FAILED', message: 'the BMC refused user root', retryable: false } });
    expect(await advanceJobs('run_fail')).toBe(1);
  });

  it('a lapsed claim gets no credentials: a destructive command fails as AGENT_LOST, any other is queued again; runs wake', async () => {
    const destructive = await queue('bmc.power', { runId: 'run_lost' });
    const harmless = await queue('bmc.power-state', { runId: 'run_requeued' });
    const claimed = await call(agents.a1.token, CLAIM, { m: 10 });
    expect(claimed.data!.claimCommands.map((c: { id: string }) => c.id).sort()).toEqual([destructive, harmless].sort());
    await t.app.services.sql.query("UPDATE command SET lease_expires_at = now() - interval '1 second' WHERE id = ANY($1)", [[destructive, harmless]]);
    const refused = await call(agents.a1.token, CREDENTIALS, { c: destructive });
    expect(code(refused)).toBe('CONFLICT');
    expect(refused.errors![0]!.message).toMatch(/lapsed/);
    const lost = await command(destructive);
    expect(lost.status).toBe('failed');
    expect(lost.result).toMatchObject({ ok: false, code: 'AGENT_LOST', retryable: false });
    const requeued = await command(harmless);
    expect([requeued.status, requeued.claimedBy, requeued.leaseExpiresAt]).toEqual(['queued', null, null]);
    expect(await advanceJobs('run_lost')).toBe(1);
    expect(await advanceJobs('run_requeued')).toBe(0);
    expect(code(await call(agents.a1.token, REPORT, { c: destructive, r: { ok: true, value: 'on' } }))).toBe('CONFLICT');
    // The sealed answer of an earlier claim is useless once it is over: its deadline has passed,
    // and any new claim has a new deadline, so it does not open as that claim's answer.
    expect(() => openSealed(agents.a1.keys.privateKey, heldSealed.sealed, { commandId: harmless, agentId: agents.a1.id, claimDeadline: heldSealed.claimDeadline })).toThrow();
  });

  it('the heartbeat renews the leases the agent still holds', async () => {
    const again = await call(agents.a2.token, CLAIM, { m: 10 });
    const id = again.data!.claimCommands[0].id as string;
    await t.app.services.sql.query("UPDATE command SET lease_expires_at = now() + interval '2 seconds' WHERE id = $1", [id]);
    const before = (await command(id)).leaseExpiresAt!.getTime();
    await call(agents.a2.token, HEARTBEAT);
    expect((await command(id)).leaseExpiresAt!.getTime()).toBeGreaterThan(before + 10000);
    await call(agents.a2.token, REPORT, { c: id, r: { ok: true, value: 'off' } });
  });

  it('a queued command nobody claims expires as EXPIRED and wakes its run: at a claim of its site, and by the worker\'s sweep with no agent at all', async () => {
    const atClaim = await queue('bmc.power', { node: node2Id, runId: 'run_expired_claim' });
    const bySweep = await queue('bmc.power', { node: node2Id, runId: 'run_expired_sweep', ttlMs: 1 });
    await t.app.services.sql.query("UPDATE command SET created_at = now() - interval '301 seconds', expires_at = now() - interval '1 second' WHERE id = $1", [atClaim]);
    expect((await call(agents.b.token, CLAIM, { m: 10 })).data!.claimCommands).toEqual([]);
    const expired = await command(atClaim);
    expect(expired.status).toBe('expired');
    expect(expired.result).toEqual({ ok: false, code: 'EXPIRED', message: 'no site agent claimed it within 300 s' });
    expect(await advanceJobs('run_expired_claim')).toBe(1);
    // The claim above may have swept it too; make sure the sweeper alone does it for a new one.
    const lonely = await queue('bmc.power-state', { node: node2Id, runId: 'run_expired_lonely', ttlMs: 1 });
    for (let i = 0; i < 200 && (await command(lonely)).status === 'queued'; i += 1) await new Promise((r) => setTimeout(r, 100));
    expect((await command(lonely)).status).toBe('expired');
    expect(await advanceJobs('run_expired_lonely')).toBe(1);
    expect((await command(bySweep)).status).toBe('expired');
  }, 45000);

  it('a revoked agent token is UNAUTHENTICATED (401 over REST) and gets nothing: no claim, no credentials, no report', async () => {
    const cmd = await queue('bmc.power', { runId: 'run_revoked' });
    const claimed = await call(agents.a2.token, CLAIM, { m: 10 });
    expect(claimed.data!.claimCommands.map((c: { id: string }) => c.id)).toEqual([cmd]);
    const agent = await t.app.database.prisma.siteAgent.findUniqueOrThrow({ where: { id: agents.a2.id } });
    await t.app.database.prisma.apiToken.update({ where: { id: agent.tokenId }, data: { revokedAt: new Date() } });
    for (const [query, variables] of [[CREDENTIALS, { c: cmd }], [CLAIM, { m: 10 }], [HEARTBEAT, {}], [REPORT, { c: cmd, r: { ok: true, value: 'on' } }]] as const) {
      const r = await call(agents.a2.token, query, variables);
      expect([code(r), r.data ?? null]).toEqual(['UNAUTHENTICATED', null]);
      expect(JSON.stringify(r)).not.toContain(PASSWORD);
    }
    expect((await fetch(`${t.url}/api/viewer`, { headers: { authorization: `Bearer ${agents.a2.token}` } })).status).toBe(401);
    expect((await command(cmd)).status).toBe('claimed');
  });

  it('no password in any response body, event, command row or log line', async () => {
    expect(bodies.length).toBeGreaterThan(40);
    expect(bodies.filter((b) => b.includes(PASSWORD))).toEqual([]);
    const { rows: events } = await t.app.services.sql.query('SELECT payload::text AS p FROM event');
    expect(events.filter((e) => String(e.p).includes(PASSWORD))).toEqual([]);
    const { rows: commands } = await t.app.services.sql.query('SELECT row_to_json(command)::text AS r FROM command');
    expect(commands.length).toBeGreaterThan(5);
    expect(commands.filter((c) => String(c.r).includes(PASSWORD))).toEqual([]);
    expect(lines.some((l) => l.includes('sealed BMC credentials handed to the agent'))).toBe(true);
    expect(lines.filter((l) => l.includes(PASSWORD))).toEqual([]);
  });
});

describe('sealing', () => {
  it('opens only unaltered boxes, and parsePublicKey takes only 32-byte X25519 keys', () => {
    const pair = generateAgentKeyPair();
    const binding = { commandId: 'cmd_1', agentId: 'agt_1', claimDeadline: '2026-12-01T00:00:00.000Z' };
    const box = seal(parsePublicKey(pair.publicKey)!, 'secret text', binding);
    expect(openSealed(pair.privateKey, box, binding)).toBe('secret text');
    const flip = (s: string) => Buffer.from(Buffer.from(s, 'base64url').map((b, i) => (i === 0 ? b ^ 1 : b))).toString('base64url');
    for (const field of ['epk', 'iv', 'ciphertext', 'tag'] as const) expect(() => openSealed(pair.privateKey, { ...box, [field]: flip(box[field]) }, binding)).toThrow();
    expect(parsePublicKey(pair.publicKey)).not.toBeNull();
    expect(parsePublicKey(Buffer.from(pair.publicKey, 'base64url').toString('base64'))).not.toBeNull();
    expect(parsePublicKey('A'.repeat(42))).toBeNull();
    expect(parsePublicKey('%'.repeat(43))).toBeNull();
  });

  it('BUILTIN_AGENT is on by default, off with off, and anything else is refused', () => {
    expect(loadConfig({}).builtinAgent).toBe(true);
    expect(loadConfig({ BUILTIN_AGENT: 'off' }).builtinAgent).toBe(false);
    expect(() => loadConfig({ BUILTIN_AGENT: 'maybe' })).toThrow(/BUILTIN_AGENT/);
    expect(loadConfig({ ROLE: 'agent' }).role).toBe('agent');
  });
});
