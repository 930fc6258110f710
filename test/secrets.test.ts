import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { createTestDatabase } from './helpers/app';
import { connectDatabase, type Database } from '../src/db/client';
import { BuiltinSecretBroker, isSecretRef, loadSecretKey, parseKey } from '../clients/secrets/broker';
import { newId } from '../src/ids';

describe('the built-in secret broker', () => {
  let db: Database;
  let url: string;
  const key = randomBytes(32);
  beforeAll(async () => {
    url = await createTestDatabase();
    db = connectDatabase(url);
  });
  afterAll(() => db.close());

  it('stores AES-256-GCM ciphertext and gives back only a secret:// reference', async () => {
    const broker = new BuiltinSecretBroker(db, key);
    const ref = await broker.put('ten_x', { username: 'root', password: 'calvin-Sup3r' });
    expect(isSecretRef(ref)).toBe(true);
    const raw = new pg.Client({ connectionString: url });
    await raw.connect();
    const dump = await raw.query('SELECT * FROM secret');
    await raw.end();
    expect(JSON.stringify(dump.rows)).not.toContain('calvin-Sup3r');
    expect(dump.rows[0].ciphertext.toString()).not.toContain('calvin');
    expect(await broker.get(ref, 'ten_x')).toEqual({ username: 'root', password: 'calvin-Sup3r' });
  });

  it('another tenant, a wrong key, or a row moved to another id cannot read it', async () => {
    const broker = new BuiltinSecretBroker(db, key);
    const ref = await broker.put('ten_a', { password: 'p' });
    await expect(broker.get(ref, 'ten_b')).rejects.toMatchObject({ code: 'NOT_FOUND' });
    await expect(new BuiltinSecretBroker(db, randomBytes(32)).get(ref, 'ten_a')).rejects.toMatchObject({ code: 'INVALID_CONFIG' });
    const row = await db.prisma.secret.findUniqueOrThrow({ where: { id: ref.slice('secret://'.length) } });
    const moved = newId('Secret');
    await db.prisma.secret.create({ data: { ...row, id: moved } });
    await expect(broker.get(`secret://${moved}`, 'ten_a')).rejects.toMatchObject({ code: 'INVALID_CONFIG' });
  });

  it('keys: SECRET_KEY as base64 or hex; the embedded default generates DATA_DIR/secret-key (0600) once; none for an external database', async () => {
    expect(parseKey(key.toString('base64'), 'x')).toEqual(key);
    expect(parseKey(key.toString('hex'), 'x')).toEqual(key);
    expect(() => parseKey('c2hvcnQ=', 'SECRET_KEY')).toThrow(/SECRET_KEY must be 32 bytes/);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'metal-key-'));
    const first = await loadSecretKey({ dataDir: dir, embedded: true });
    expect(fs.statSync(path.join(dir, 'secret-key')).mode & 0o777).toBe(0o600);
    expect(await loadSecretKey({ dataDir: dir, embedded: true })).toEqual(first);
    expect(await loadSecretKey({ dataDir: dir, embedded: false })).toBeNull();
    expect(await loadSecretKey({ dataDir: dir, embedded: false, secretKey: key.toString('hex') })).toEqual(key);
    fs.rmSync(dir, { recursive: true, force: true });
  });
});
