import { createHash, randomBytes } from 'node:crypto';

/**
 * SHA-512 crypt (`$6$`, Ulrich Drepper's "Unix crypt using SHA-256 and SHA-512", the scheme glibc's
 * crypt(3), `openssl passwd -6` and `mkpasswd -m sha-512` write): the only form an installer
 * preseed carries a password in (`passwd/user-password-crypted`). Written here because Node has
 * no crypt(3); test/provision-iso.test.ts checks it against `openssl passwd -6` and the spec's
 * own test vectors.
 */

const ALPHABET = './0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const ROUNDS_DEFAULT = 5000;
const ROUNDS_MIN = 1000;
const ROUNDS_MAX = 999_999_999;
const SALT_MAX = 16;

const sha512 = (...parts: Buffer[]) => {
  const h = createHash('sha512');
  for (const p of parts) h.update(p);
  return h.digest();
};

/** `n` bytes of `source` repeated (the spec's "sequence of bytes, repeated"). */
function repeatTo(source: Buffer, n: number): Buffer {
  const out = Buffer.alloc(n);
  for (let i = 0; i < n; i += source.length) source.copy(out, i, 0, Math.min(source.length, n - i));
  return out;
}

/** A random salt of 16 characters from the crypt alphabet. */
export function randomSalt(): string {
  const bytes = randomBytes(SALT_MAX);
  return [...bytes].map((b) => ALPHABET[b & 63]).join('');
}

/**
 * `$6$[rounds=N$]salt$hash` for the password. Rounds outside 1000..999999999 are clamped as the
 * spec says; the salt is cut at 16 characters and may not hold `$` or a newline.
 */
export function sha512Crypt(password: string, salt = randomSalt(), rounds?: number): string {
  if (/[$:\n]/.test(salt)) throw new Error('a crypt salt may not hold $, : or a newline');
  const saltText = salt.slice(0, SALT_MAX);
  const explicitRounds = rounds !== undefined;
  const r = Math.min(ROUNDS_MAX, Math.max(ROUNDS_MIN, Math.floor(rounds ?? ROUNDS_DEFAULT)));
  const key = Buffer.from(password, 'utf8');
  const s = Buffer.from(saltText, 'utf8');

  // B: key, salt, key.
  const b = sha512(key, s, key);
  // A: key, salt, B repeated to the key's length, then B or key by the key length's bits.
  const a = createHash('sha512').update(key).update(s).update(repeatTo(b, key.length));
  for (let n = key.length; n > 0; n >>= 1) a.update(n & 1 ? b : key);
  const aDigest = a.digest();
  // DP: the key, key-length times; P: DP repeated to the key's length.
  const dpHash = createHash('sha512');
  for (let i = 0; i < key.length; i += 1) dpHash.update(key);
  const p = repeatTo(dpHash.digest(), key.length);
  // DS: the salt, 16 + A[0] times; S: DS repeated to the salt's length.
  const dsHash = createHash('sha512');
  for (let i = 0; i < 16 + aDigest[0]!; i += 1) dsHash.update(s);
  const sBytes = repeatTo(dsHash.digest(), s.length);

  let c = aDigest;
  for (let i = 0; i < r; i += 1) {
    const h = createHash('sha512');
    h.update(i & 1 ? p : c);
    if (i % 3) h.update(sBytes);
    if (i % 7) h.update(p);
    h.update(i & 1 ? c : p);
    c = h.digest();
  }

  const order = [
    [0, 21, 42], [22, 43, 1], [44, 2, 23], [3, 24, 45], [25, 46, 4], [47, 5, 26], [6, 27, 48], [28, 49, 7], [50, 8, 29], [9, 30, 51],
    [31, 52, 10], [53, 11, 32], [12, 33, 54], [34, 55, 13], [56, 14, 35], [15, 36, 57], [37, 58, 16], [59, 17, 38], [18, 39, 60], [40, 61, 19],
    [62, 20, 41],
  ];
  let out = '';
  const b64 = (b2: number, b1: number, b0: number, chars: number) => {
    let w = (b2 << 16) | (b1 << 8) | b0;
    for (let i = 0; i < chars; i += 1) {
      out += ALPHABET[w & 63];
      w >>= 6;
    }
  };
  for (const [x, y, z] of order) b64(c[x!]!, c[y!]!, c[z!]!, 4);
  b64(0, 0, c[63]!, 2);
  return `$6$${explicitRounds ? `rounds=${r}$` : ''}${saltText}$${out}`;
}
