import { createHash } from 'node:crypto';
import { SshError } from './errors';

/**
 * OpenSSH's fingerprint format, `SHA256:` plus unpadded base64 of the SHA-256 of the key blob, so
 * an admin can compare it with `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on the node.
 */
export function fingerprintOfKeyBlob(blob: Buffer): string {
  return 'SHA256:' + createHash('sha256').update(blob).digest('base64').replace(/=+$/, '');
}

const FINGERPRINT = /^SHA256:[A-Za-z0-9+/]{43}$/;

/** Accepts `SHA256:<43 base64 chars>` (what ssh-keygen -l prints); anything else is a 4xx-class input error. */
export function parseFingerprint(value: string, field = 'hostKey.fingerprint'): string {
  const text = value.trim();
  if (!FINGERPRINT.test(text)) {
    throw new SshError('INVALID_INPUT', `${field} must be an OpenSSH SHA-256 fingerprint (SHA256: and 43 base64 characters)`);
  }
  return text;
}

/** The fingerprint of a public key line such as `ssh-ed25519 AAAAC3... comment` (a node's host .pub file). */
export function fingerprintOfPublicKeyLine(line: string): string {
  const parts = line.trim().split(/\s+/);
  if (parts.length < 2 || !/^[A-Za-z0-9+/]+=*$/.test(parts[1])) {
    throw new SshError('INVALID_INPUT', 'not an OpenSSH public key line (type and base64 blob)');
  }
  return fingerprintOfKeyBlob(Buffer.from(parts[1], 'base64'));
}

/**
 * How a connection decides whether to trust the server. There is no "accept anything": a first
 * contact must say so (`trustOnFirstUse`), and then the caller records `session.hostKey` (for
 * instance on the node row) and pins it from then on.
 */
export type HostKeyPolicy = { fingerprint: string } | { trustOnFirstUse: true };
