import { createPublicKey } from 'node:crypto';
import { invalidInput } from '../../errors';

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/** Names of tenants, sites, pools, profiles and tokens: 1-63 of letters, digits, `.`, `_`, `-`. */
export function checkName(field: string, value: string): string {
  if (!NAME.test(value)) {
    throw invalidInput(field, 'must be 1-63 letters, digits, ".", "_" or "-", starting with a letter or digit');
  }
  return value;
}

/** An Ed25519 public key as base64 of its 32 raw bytes, or as PEM (SPKI). */
export function checkEd25519PublicKey(field: string, value: string): string {
  try {
    const key = value.includes('BEGIN PUBLIC KEY')
      ? createPublicKey(value)
      : createPublicKey({
          key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(value, 'base64').toString('base64url') },
          format: 'jwk',
        });
    if (key.asymmetricKeyType !== 'ed25519') throw new Error('not ed25519');
    const raw = key.export({ format: 'jwk' }).x;
    if (!raw || Buffer.from(raw, 'base64url').length !== 32) throw new Error('bad length');
    return value;
  } catch {
    throw invalidInput(field, 'must be an Ed25519 public key (base64 of 32 bytes, or PEM)');
  }
}
