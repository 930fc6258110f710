import { createCipheriv, createDecipheriv, createPrivateKey, createPublicKey, diffieHellman, generateKeyPairSync, hkdfSync, randomBytes, type KeyObject } from 'node:crypto';

/**
 * Sealing a claimed command's BMC credentials to the agent that holds it (an ECIES-style box from
 * node:crypto alone): an ephemeral X25519 key pair per seal, ECDH with the agent's registered
 * public key, HKDF-SHA256 over the shared secret (salt: both public keys) for an AES-256-GCM key,
 * and the command id, agent id and claim deadline as associated data. So the blob opens only with
 * that agent's private key, and only as the answer for that command, that agent and that claim: a
 * blob replayed for another command or another claim fails authentication.
 */

export const SEAL_SCHEME = 'x25519-hkdf-sha256-aes256gcm-v1';
const INFO = Buffer.from('metal-control-plane site-agent credentials v1');

export interface SealedBox {
  scheme: typeof SEAL_SCHEME;
  /** The ephemeral public key, base64url of the raw 32 bytes. */
  epk: string;
  iv: string;
  ciphertext: string;
  tag: string;
}

/** What a seal is bound to; the agent rebuilds it from the claim it holds. */
export interface SealBinding {
  commandId: string;
  agentId: string;
  /** The claim's deadline as ISO 8601 (milliseconds), exactly as the answer carries it. */
  claimDeadline: string;
}

export const sealAad = (b: SealBinding): Buffer => Buffer.from(`${SEAL_SCHEME}\u0000${b.commandId}\u0000${b.agentId}\u0000${b.claimDeadline}`);

const b64 = (buf: Buffer) => buf.toString('base64url');

/** Parses a public key as an agent registers it (base64url or base64 of 32 raw bytes), or null. */
export function parsePublicKey(text: string): KeyObject | null {
  if (typeof text !== 'string' || !/^[A-Za-z0-9_+/-]{43}=?$/.test(text)) return null;
  const raw = Buffer.from(text.replace(/\+/g, '-').replace(/\//g, '_').replace(/=$/, ''), 'base64url');
  if (raw.length !== 32) return null;
  try {
    return createPublicKey({ key: { kty: 'OKP', crv: 'X25519', x: b64(raw) }, format: 'jwk' });
  } catch {
    return null;
  }
}

const rawPublic = (key: KeyObject): Buffer => Buffer.from(key.export({ format: 'jwk' }).x as string, 'base64url');

function boxKey(shared: Buffer, epk: Buffer, recipient: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', shared, Buffer.concat([epk, recipient]), INFO, 32));
}

export function seal(recipientPublicKey: KeyObject, plaintext: string, binding: SealBinding): SealedBox {
  const eph = generateKeyPairSync('x25519');
  const epk = rawPublic(eph.publicKey);
  const key = boxKey(diffieHellman({ privateKey: eph.privateKey, publicKey: recipientPublicKey }), epk, rawPublic(recipientPublicKey));
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(sealAad(binding));
  const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return { scheme: SEAL_SCHEME, epk: b64(epk), iv: b64(iv), ciphertext: b64(ciphertext), tag: b64(cipher.getAuthTag()) };
}

/** Throws when the box was not sealed to this key for this binding (or was altered). */
export function openSealed(privateKey: KeyObject, box: SealedBox, binding: SealBinding): string {
  if (box.scheme !== SEAL_SCHEME) throw new Error(`unknown seal scheme ${String(box.scheme)}`);
  const epkRaw = Buffer.from(box.epk, 'base64url');
  const epk = createPublicKey({ key: { kty: 'OKP', crv: 'X25519', x: b64(epkRaw) }, format: 'jwk' });
  const own = rawPublic(createPublicKey(privateKey));
  const key = boxKey(diffieHellman({ privateKey, publicKey: epk }), epkRaw, own);
  const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(box.iv, 'base64url'));
  decipher.setAAD(sealAad(binding));
  decipher.setAuthTag(Buffer.from(box.tag, 'base64url'));
  return Buffer.concat([decipher.update(Buffer.from(box.ciphertext, 'base64url')), decipher.final()]).toString('utf8');
}

/** An agent's key pair, and the public half as it registers it. */
export interface AgentKeyPair {
  privateKey: KeyObject;
  publicKey: string;
}

export function generateAgentKeyPair(): AgentKeyPair {
  const pair = generateKeyPairSync('x25519');
  return { privateKey: pair.privateKey, publicKey: b64(rawPublic(pair.publicKey)) };
}

/** The private key as PKCS#8 PEM (for the agent's key file) and back. */
export const exportPrivateKey = (key: KeyObject): string => key.export({ format: 'pem', type: 'pkcs8' }) as string;
export function importAgentKeyPair(pem: string): AgentKeyPair {
  const privateKey = createPrivateKey(pem);
  if (privateKey.asymmetricKeyType !== 'x25519') throw new Error('the agent key file does not hold an X25519 private key');
  return { privateKey, publicKey: b64(rawPublic(createPublicKey(privateKey))) };
}
