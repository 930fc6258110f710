import { Writable } from 'node:stream';
import pg from 'pg';
import { createLogger, serializeError } from '../src/ops/log';
import { startTestApp, type TestApp } from './helpers/app';
import { gql } from './helpers/client';

interface Line {
  level: number;
  msg: string;
  code?: string;
  requestId?: string;
  err?: { type: string; message: string; code?: string; stack?: string };
  [key: string]: unknown;
}

const ERROR = 50;
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
    expect(logged.filter((l) => l.level >= ERROR)).toEqual([]);
    const refusals = logged.filter((l) => l.msg === 'GraphQL request refused');
    expect(refusals.map((l) => l.code)).toContain('CONFLICT');
    expect(refusals.map((l) => l.code)).toContain('NOT_FOUND');
    expect(refusals.filter((l) => l.code === 'NOT_FOUND')).toHaveLength(2); // GraphQL and REST, once each
    for (const l of refusals) expect(l.level).toBeLessThanOrEqual(30);
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
    const errors = lines().filter((l) => l.level >= ERROR);
    expect(errors).toHaveLength(1);
    const [line] = errors;
    expect(line.requestId).toBe('req-internal-1');
    expect(line.err).toEqual(expect.objectContaining({ type: expect.any(String), message: expect.any(String), stack: expect.any(String) }));
    expect(Object.keys(line.err!).every((k) => ['type', 'message', 'code', 'stack', 'cause'].includes(k))).toBe(true);
    const text = raw.find((l) => JSON.parse(l).level >= ERROR)!;
    for (const key of CLIENT_INTERNALS) expect(text).not.toContain(`"${key}"`);
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
