import fs from 'node:fs/promises';
import path from 'node:path';
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { PrismaClient } from '../../src/generated/prisma/client';
import type { Sql } from '../../src/db/sql';
import { AppError } from '../../src/errors';
import { newId } from '../../src/ids';

export const SECRET_SCHEME = 'secret://';

/** What the rest of the service may do with secrets: store one and get a reference, read one back. */
export interface SecretBroker {
  put(tenantId: string | null, value: unknown, db?: Pick<PrismaClient, 'secret'>): Promise<string>;
  get(ref: string, tenantId: string | null): Promise<unknown>;
  /** Removes a secret this service stored (a compensation when what was to reference it failed). */
  delete(ref: string, tenantId: string | null): Promise<void>;
}

export const isSecretRef = (value: unknown): value is string =>
  typeof value === 'string' && /^secret:\/\/[A-Za-z0-9_.:/-]{1,200}$/.test(value);

/** Parses SECRET_KEY: 32 bytes as base64 (44 chars) or hex (64 chars). */
export function parseKey(raw: string, source: string): Buffer {
  const text = raw.trim();
  const key = /^[0-9a-fA-F]{64}$/.test(text) ? Buffer.from(text, 'hex') : Buffer.from(text, 'base64');
  if (key.length !== 32) throw new AppError('INVALID_CONFIG', `${source} must be 32 bytes, as base64 or 64 hex digits`);
  return key;
}

/**
 * The built-in broker: AES-256-GCM in the `secret` table, each ciphertext bound (as associated
 * data) to its own id and tenant, so a row copied to another id or tenant does not decrypt.
 */
export class BuiltinSecretBroker implements SecretBroker {
  private prisma: PrismaClient;
  private sql: Sql;
  /**
   * Reads go through Sql (one named statement): the built-in agent reads a node's credentials for
   * every BMC command, and a Prisma findUnique cost about 1.5 ms of the agent's CPU each. So do
   * writes on their own (enroll stores every machine's inline credentials: Prisma's create was a
   * twentieth of the service's CPU in the lifecycle bench); a write in a caller's Prisma
   * transaction goes through it, so a secret commits with what refers to it.
   */
  constructor(db: { prisma: PrismaClient; sql: Sql }, private key: Buffer) {
    this.prisma = db.prisma;
    this.sql = db.sql;
  }

  private aad(id: string, tenantId: string | null): Buffer {
    return Buffer.from(`${id}\u0000${tenantId ?? ''}`);
  }

  async put(tenantId: string | null, value: unknown, db?: Pick<PrismaClient, 'secret'>): Promise<string> {
    const id = newId('Secret');
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    cipher.setAAD(this.aad(id, tenantId));
    const ciphertext = Buffer.concat([cipher.update(JSON.stringify(value), 'utf8'), cipher.final()]);
    const tag = cipher.getAuthTag();
    if (db) await db.secret.create({ data: { id, tenantId, ciphertext, iv, tag } });
    else await this.sql.query('INSERT INTO secret (id, tenant_id, ciphertext, iv, tag) VALUES ($1, $2, $3, $4, $5)', [id, tenantId, ciphertext, iv, tag]);
    return SECRET_SCHEME + id;
  }

  async get(ref: string, tenantId: string | null): Promise<unknown> {
    if (!isSecretRef(ref)) throw new AppError('INVALID_INPUT', 'not a secret:// reference');
    const id = ref.slice(SECRET_SCHEME.length);
    const { rows } = await this.sql.query<{ tenantId: string | null; ciphertext: Buffer; iv: Buffer; tag: Buffer }>(
      'SELECT tenant_id AS "tenantId", ciphertext, iv, tag FROM secret WHERE id = $1', [id]);
    const row = rows[0];
    // Another tenant's secret is as absent as a missing one.
    if (!row || row.tenantId !== tenantId) throw new AppError('NOT_FOUND', `secret ${ref} not found`);
    const decipher = createDecipheriv('aes-256-gcm', this.key, row.iv);
    decipher.setAAD(this.aad(id, row.tenantId));
    decipher.setAuthTag(row.tag);
    try {
      return JSON.parse(Buffer.concat([decipher.update(row.ciphertext), decipher.final()]).toString('utf8'));
    } catch {
      throw new AppError('INVALID_CONFIG', `secret ${ref} does not decrypt with the configured SECRET_KEY`);
    }
  }

  async delete(ref: string, tenantId: string | null): Promise<void> {
    if (!isSecretRef(ref)) throw new AppError('INVALID_INPUT', 'not a secret:// reference');
    await this.prisma.secret.deleteMany({ where: { id: ref.slice(SECRET_SCHEME.length), tenantId } });
  }
}

/**
 * The broker's key: SECRET_KEY, else SECRET_KEY_FILE, else (embedded database only) DATA_DIR/secret-key,
 * generated with mode 0600 on first start. With an external database and no key, there is no
 * broker: inline credentials are then INVALID_CONFIG.
 */
export async function loadSecretKey(opts: { secretKey?: string; secretKeyFile?: string; dataDir: string; embedded: boolean }): Promise<Buffer | null> {
  if (opts.secretKey) return parseKey(opts.secretKey, 'SECRET_KEY');
  if (opts.secretKeyFile) return parseKey(await fs.readFile(opts.secretKeyFile, 'utf8'), `SECRET_KEY_FILE (${opts.secretKeyFile})`);
  if (!opts.embedded) return null;
  const file = path.join(opts.dataDir, 'secret-key');
  try {
    return parseKey(await fs.readFile(file, 'utf8'), file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  const key = randomBytes(32);
  await fs.mkdir(opts.dataDir, { recursive: true });
  await fs.writeFile(file, key.toString('base64') + '\n', { mode: 0o600, flag: 'wx' });
  return key;
}
