import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { fromRoot } from '../src/paths';
import pg from 'pg';
import { createLogger, serializeError, TurnBatchedOutput } from '../src/ops/log';
import { startTestApp, type TestApp } from './helpers/app';
import { gql } from './helpers/client';

interface Line {
  level: string;
  msg: string;
  code?: string;
  requestId?: string;
  err?: { type: string; message: string; code?: string; stack?: string };
  [key: string]: unknown;
}

/** pino's levels, as words: the service's lines say "level":"info", never a number. */
const LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'];
const atLeast = (level: string, floor: string) => LEVELS.indexOf(level) >= LEVELS.indexOf(floor);
/** Properties of a pg client or pool: a line that holds any of them dumped one. */
const CLIENT_INTERNALS = ['connectionParameters', '_connecting', '_queryable', 'activeQuery', '_Promise', 'binary', 'ssl'];

/**
 * Client refusals are not errors of the service: they log at info with their code, once. Only an
 * INTERNAL logs at error, with the request id, and an error object is its type, message, code and
 * stack, never the client or pool a pg error drags along.
 */
describe('log levels and error lines', () => {
  const raw: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      raw.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  const log = createLogger('debug', sink);
  const lines = () => raw.map((l) => JSON.parse(l) as Line);
  let t: TestApp;

  beforeAll(async () => {
    t = await startTestApp({}, { log });
  });
  afterAll(async () => {
    await t?.stop();
  });

  it('logs 404 and 409 refusals below error level, with their code', async () => {
    const profile = 'mutation { createHardwareProfile(input: {name: "dup", driverBindings: {power: "redfish", management: "redfish", virtualMedia: "redfish"}}) { id } }';
    expect((await gql(t.url, t.adminToken, profile)).errors).toBeUndefined();
    raw.length = 0;
    const conflict = await gql(t.url, t.adminToken, profile);
    expect(conflict.errors?.[0]?.extensions?.code).toBe('CONFLICT');
    const missingId = 'node_0190a4c2-0000-7000-8000-000000000000';
    const missing = await gql(t.url, t.adminToken, `{ node(id: "${missingId}") { id } }`);
    expect(missing.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    const rest = await fetch(`${t.url}/api/compute/metal/nodes/${missingId}`, { headers: { authorization: `Bearer ${t.adminToken}` } });
    expect(rest.status).toBe(404);
    const logged = lines();
    expect(logged.filter((l) => atLeast(l.level, 'error'))).toEqual([]);
    const refusals = logged.filter((l) => l.msg === 'GraphQL request refused');
    expect(refusals.map((l) => l.code)).toContain('CONFLICT');
    expect(refusals.map((l) => l.code)).toContain('NOT_FOUND');
    expect(refusals.filter((l) => l.code === 'NOT_FOUND')).toHaveLength(2); // GraphQL and REST, once each
    for (const l of refusals) expect(['debug', 'info']).toContain(l.level);
    // No line repeats a refusal's message (it may quote input), not even at debug.
    expect(raw.join('\n')).not.toContain('already exists');
    expect(raw.join('\n')).not.toContain(`${missingId} not found`);
  });

  it('logs an INTERNAL once at error, with the request id and the error as type, message, code and stack', async () => {
    const admin = new pg.Client({ connectionString: t.app.databaseUrl });
    await admin.connect();
    try {
      // A broken table: every read of it fails inside PostgreSQL, as a real outage would.
      await admin.query('ALTER TABLE hardware_profile RENAME TO hardware_profile_gone');
      raw.length = 0;
      const broken = await gql(t.url, t.adminToken, '{ hardwareProfiles { id } }', undefined, { 'x-request-id': 'req-internal-1' });
      expect(broken.errors?.[0]?.extensions?.code).toBe('INTERNAL');
    } finally {
      await admin.query('ALTER TABLE hardware_profile_gone RENAME TO hardware_profile');
      await admin.end();
    }
    const errors = lines().filter((l) => atLeast(l.level, 'error'));
    expect(errors).toHaveLength(1);
    const [line] = errors;
    expect(line.requestId).toBe('req-internal-1');
    expect(line.err).toEqual(expect.objectContaining({ type: expect.any(String), message: expect.any(String), stack: expect.any(String) }));
    expect(Object.keys(line.err!).every((k) => ['type', 'message', 'code', 'stack', 'cause'].includes(k))).toBe(true);
    const text = raw.find((l) => atLeast(JSON.parse(l).level, 'error'))!;
    for (const key of CLIENT_INTERNALS) expect(text).not.toContain(`"${key}"`);
  });

  it('every line is one JSON object whose level is a word, fatal included', async () => {
    await fetch(`${t.url}/healthz`);
    await gql(t.url, t.adminToken, '{ viewer { platformAdmin } }');
    log.trace('a trace line');
    log.fatal({ err: new Error('boom') }, 'a fatal line');
    expect(raw.length).toBeGreaterThan(3);
    const seen = new Set<string>();
    for (const text of raw) {
      const line = JSON.parse(text) as Line;
      expect(typeof line.level).toBe('string');
      expect(LEVELS).toContain(line.level);
      expect(text).toMatch(/^\{"level":"[a-z]+",/);
      seen.add(line.level);
    }
    expect([...seen]).toEqual(expect.arrayContaining(['info', 'fatal']));
    expect(lines().find((l) => l.msg === 'a fatal line')).toMatchObject({ level: 'fatal', service: 'metal-control-plane', err: { type: 'Error', message: 'boom' } });
  });

  it('probes (/readyz, /healthz, /metrics) log their request line at debug; other requests at info', async () => {
    raw.length = 0;
    for (const path of ['/readyz', '/healthz', '/metrics']) expect((await fetch(`${t.url}${path}`, { headers: { 'x-request-id': `probe${path.replace('/', '-')}` } })).status).toBe(200);
    await fetch(`${t.url}/openapi.json`, { headers: { 'x-request-id': 'not-a-probe' } });
    const requests = lines().filter((l) => l.msg === 'request');
    for (const path of ['/readyz', '/healthz', '/metrics']) {
      expect(requests.find((l) => l.requestId === `probe${path.replace('/', '-')}`)).toMatchObject({ level: 'debug', path, status: 200 });
    }
    expect(requests.find((l) => l.requestId === 'not-a-probe')).toMatchObject({ level: 'info', path: '/openapi.json' });
  });

  it('never walks into a pg client an error carries', async () => {
    const client = new pg.Client({ connectionString: t.app.databaseUrl });
    const error = Object.assign(new Error('connection terminated unexpectedly'), { code: '57P01', client, pool: { clients: [client] } });
    raw.length = 0;
    log.error({ err: error, requestId: 'r1' }, 'database error');
    const [text] = raw;
    expect(JSON.parse(text).err).toEqual({ type: 'Error', message: 'connection terminated unexpectedly', code: '57P01', stack: error.stack });
    for (const key of CLIENT_INTERNALS) expect(text).not.toContain(`"${key}"`);
    // Whatever was thrown, not only Errors.
    expect(serializeError('boom')).toEqual({ type: 'string', message: 'boom' });
    expect(serializeError(undefined)).toEqual({ type: 'undefined', message: 'undefined' });
    expect(serializeError(Object.create(null))).toEqual({ type: 'object', message: '{}' });
  });
});

describe('the remote site agent process (ROLE=agent)', () => {
  it('writes JSON lines with word levels, its stop included, when the service refuses its token', async () => {
    if (!fs.existsSync(fromRoot('dist', 'src', 'main.js'))) throw new Error('run `npm run build` first (npm test does)');
    // A stand-in for the service's agent API on loopback: it takes the key and the heartbeat, then
    // refuses the token at the first claim (a revoked token), which ends the agent with exit 1.
    const server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const query = (JSON.parse(body) as { query: string }).query;
        res.setHeader('content-type', 'application/json');
        if (query.includes('registerAgentKey')) return res.end(JSON.stringify({ data: { registerAgentKey: { id: 'agent_1' } } }));
        if (query.includes('agentReportStatus')) return res.end(JSON.stringify({ data: { agentReportStatus: { id: 'agent_1' } } }));
        res.end(JSON.stringify({ errors: [{ message: 'the token was revoked', extensions: { code: 'UNAUTHENTICATED' } }] }));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const env: NodeJS.ProcessEnv = { ...process.env, ROLE: 'agent', API_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, AGENT_TOKEN: 'agent-token-for-the-test', LOG_LEVEL: 'debug' };
      delete env.DATABASE_URL;
      const child = spawn(process.execPath, [fromRoot('dist', 'src', 'main.js')], { env, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
      clearTimeout(timer);
      expect(code).toBe(1);
      const lines = out.trim().split('\n');
      expect(lines.length).toBeGreaterThanOrEqual(2);
      for (const text of lines) {
        expect(text).toMatch(/^\{"level":"(trace|debug|info|warn|error|fatal)",/);
        expect(JSON.parse(text)).toEqual(expect.objectContaining({ service: 'metal-control-plane', msg: expect.any(String) }));
      }
      const parsed = lines.map((l) => JSON.parse(l) as Line);
      expect(parsed.find((l) => /registered its key/.test(l.msg))?.level).toBe('info');
      // (Not necessarily the last line: pino's asynchronous writes and the flush at exit can swap
      // the last two.)
      expect(parsed.find((l) => l.msg === 'site agent stopped: the service refused its token')?.level).toBe('error');
      expect(out).not.toContain('agent-token-for-the-test');
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

/**
 * The service's standard output (TurnBatchedOutput): the lines of one event-loop turn in one
 * write, in their order; nothing lost at the turn's end, past the size bound, at flush or at exit.
 */
describe('log lines written together per event-loop turn', () => {
  it('one write per turn, in order; at once past 64 KiB; flush writes what waits', async () => {
    const writes: string[] = [];
    const out = new TurnBatchedOutput({ write: (text: string) => writes.push(text) });
    out.write('a\n');
    out.write('b\n');
    out.write('c\n');
    expect(writes).toEqual([]);
    await new Promise((resolve) => setImmediate(resolve));
    expect(writes).toEqual(['a\nb\nc\n']);
    const big = `${'x'.repeat(40 * 1024)}\n`;
    out.write(big);
    out.write(big);
    // Past the bound within the turn: written at once, the two together.
    expect(writes).toEqual(['a\nb\nc\n', big + big]);
    out.write('d\n');
    let flushed = false;
    out.flush(() => { flushed = true; });
    expect(flushed).toBe(true);
    expect(writes.at(-1)).toBe('d\n');
    await new Promise((resolve) => setImmediate(resolve));
    expect(writes).toHaveLength(3);
  });

  it('a process that exits in the same turn as its last lines still writes them all (a real child on a pipe)', async () => {
    if (!fs.existsSync(fromRoot('dist', 'src', 'ops', 'log.js'))) throw new Error('run `npm run build` first (npm test does)');
    const script = `const { createLogger } = require(${JSON.stringify(fromRoot('dist', 'src', 'ops', 'log.js'))});
      const log = createLogger('info');
      for (let i = 0; i < 2000; i += 1) log.info({ i }, 'line');
      process.exit(3);`;
    const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
    expect(code).toBe(3);
    const lines = out.trim().split('\n').map((l) => JSON.parse(l) as Line);
    expect(lines.map((l) => l.i)).toEqual(Array.from({ length: 2000 }, (_, i) => i));
  });
});
