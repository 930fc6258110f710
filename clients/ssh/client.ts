import { EventEmitter } from 'node:events';
import { Client, utils, type ClientChannel } from 'ssh2';
import { SshError, type SshErrorCode } from './errors';
import { fingerprintOfKeyBlob, parseFingerprint, type HostKeyPolicy } from './host-key';

export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
export const DEFAULT_COMMAND_TIMEOUT_MS = 30_000;
/** stdout and stderr together; `ip -j addr` on a busy host is tens of kB, so 1 MiB is generous. */
export const DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024;

export interface SshTarget {
  host: string;
  port?: number;
  username: string;
  /** OpenSSH or PEM private key (the service's ed25519 key). Parsed before any socket is opened. */
  privateKey: Buffer | string;
  passphrase?: string;
  hostKey: HostKeyPolicy;
  /** Covers TCP connect, SSH handshake and authentication together. */
  connectTimeoutMs?: number;
  /** Aborting closes the connection at once, failing whatever is in flight with ABORTED. */
  signal?: AbortSignal;
}

export interface ExecOptions {
  timeoutMs?: number;
  /**
   * Also enforce the timeout on the node (default true): the command runs under coreutils
   * `timeout -s KILL`, half a second past ours. sshd ignores the SSH "signal" request for root
   * sessions (it needs post-auth privilege separation, which root logins skip), and closing a
   * channel without a pty leaves the process running, so without this a hung command outlives
   * its timeout on the node. With it the command is run by POSIX `sh`, not the login shell.
   * Turn it off only for a node without coreutils, or for a command that needs the login shell.
   */
  remoteKill?: boolean;
  maxOutputBytes?: number;
  stdin?: string | Buffer;
}

export interface ExecResult {
  /** null when the command died of a signal (then `signal` names it). */
  exitCode: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
}

export interface HostKeySeen {
  /** The negotiated host key algorithm, e.g. ssh-ed25519. */
  algorithm: string;
  fingerprint: string;
}

function positiveInt(value: number | undefined, fallback: number, field: string): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value <= 0) throw new SshError('INVALID_INPUT', `${field} must be a positive integer`);
  return value;
}

/** POSIX single-quoting: the text reaches the inner shell byte for byte. */
export function shQuote(text: string): string {
  return "'" + text.replace(/'/g, "'\\''") + "'";
}

/**
 * The command runs in POSIX `sh` as a child of `timeout`, which kills the whole process group
 * when time is up. Not `"$SHELL"`: bash started under sshd sources the bashrc files (about
 * 150 ms per command on Debian, measured), and commands this service sends are POSIX sh anyway.
 */
function withRemoteKill(command: string, timeoutMs: number): string {
  return `exec timeout -s KILL ${(timeoutMs / 1000 + 0.5).toFixed(1)} sh -c ${shQuote(command)}`;
}

/** The key type name is the first SSH string of the blob (RFC 4253 section 6.6). */
function keyAlgorithm(blob: Buffer): string {
  if (blob.length < 4) return 'unknown';
  const len = blob.readUInt32BE(0);
  return len > 0 && len < 64 && blob.length >= 4 + len ? blob.subarray(4, 4 + len).toString('ascii') : 'unknown';
}

interface Validated {
  host: string;
  port: number;
  username: string;
  privateKey: Buffer | string;
  passphrase?: string;
  pinned: string | null;
  connectTimeoutMs: number;
}

function validate(target: SshTarget): Validated {
  if (typeof target.host !== 'string' || target.host.length === 0 || target.host.length > 253 || /\s/.test(target.host)) {
    throw new SshError('INVALID_INPUT', 'host must be a non-empty host name or address');
  }
  const port = target.port ?? 22;
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new SshError('INVALID_INPUT', 'port must be an integer from 1 to 65535');
  if (typeof target.username !== 'string' || !/^[A-Za-z0-9._-]{1,64}$/.test(target.username)) {
    throw new SshError('INVALID_INPUT', 'username must be 1 to 64 letters, digits, dot, underscore or dash');
  }
  if (!target.privateKey || target.privateKey.length === 0) throw new SshError('INVALID_INPUT', 'privateKey is required');
  // The parser's own message can quote the input, so only the fact of failure is reported.
  const parsed = utils.parseKey(target.privateKey, target.passphrase);
  if (parsed instanceof Error || (Array.isArray(parsed) && parsed.length === 0)) {
    throw new SshError('INVALID_INPUT', 'privateKey could not be parsed (an OpenSSH or PEM private key, with its passphrase if it has one)');
  }
  const one = Array.isArray(parsed) ? parsed[0] : parsed;
  if (!one.isPrivateKey()) throw new SshError('INVALID_INPUT', 'privateKey is a public key, not a private key');
  let pinned: string | null;
  if ('fingerprint' in target.hostKey) pinned = parseFingerprint(target.hostKey.fingerprint);
  else if (target.hostKey.trustOnFirstUse === true) pinned = null;
  else throw new SshError('INVALID_INPUT', 'hostKey must give a fingerprint or say trustOnFirstUse');
  return {
    host: target.host,
    port,
    username: target.username,
    privateKey: target.privateKey,
    passphrase: target.passphrase,
    pinned,
    connectTimeoutMs: positiveInt(target.connectTimeoutMs, DEFAULT_CONNECT_TIMEOUT_MS, 'connectTimeoutMs'),
  };
}

const UNREACHABLE_ERRNO = new Set(['EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ETIMEDOUT', 'ENOTFOUND', 'EAI_AGAIN', 'EADDRNOTAVAIL']);

interface LibError extends Error {
  level?: string;
  code?: string;
}

/**
 * Opens an authenticated session. Every failure destroys the socket before the promise rejects,
 * so a caller that only handles the rejection leaks nothing.
 */
export function connect(target: SshTarget): Promise<SshSession> {
  let checked: Validated;
  try {
    checked = validate(target);
  } catch (err) {
    return Promise.reject(err);
  }
  const where = `${checked.host}:${checked.port}`;
  if (target.signal?.aborted) return Promise.reject(new SshError('ABORTED', `${where}: aborted before connecting`));

  return new Promise<SshSession>((resolve, reject) => {
    const client = new Client();
    let seen: HostKeySeen | null = null;
    let mismatch = false;
    let settled = false;

    const fail = (code: SshErrorCode, message: string, detail?: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      target.signal?.removeEventListener('abort', onAbort);
      client.removeAllListeners('ready');
      // Late errors from the dying socket must not become unhandled 'error' events.
      client.on('error', () => {});
      client.destroy();
      reject(new SshError(code, message, detail));
    };
    const onAbort = () => fail('ABORTED', `${where}: aborted while connecting`);
    const timer = setTimeout(
      () => fail('CONNECT_TIMEOUT', `${where}: no SSH session within ${checked.connectTimeoutMs} ms (connect, handshake and authentication)`),
      checked.connectTimeoutMs,
    );
    target.signal?.addEventListener('abort', onAbort, { once: true });

    client.on('ready', () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      target.signal?.removeEventListener('abort', onAbort);
      resolve(new SshSession(client, where, seen ?? { algorithm: 'unknown', fingerprint: 'unknown' }, target.signal));
    });
    client.on('error', (err: LibError) => {
      if (mismatch && seen) {
        fail('HOST_KEY_MISMATCH', `${where}: host key ${seen.fingerprint} (${seen.algorithm}) is not the pinned ${checked.pinned}; refusing to connect`, err.level);
      } else if (err.level === 'client-authentication') {
        fail('AUTH_FAILED', `${where}: the server rejected the key for user ${checked.username}`, err.level);
      } else if (err.code === 'ECONNREFUSED') {
        fail('CONNECTION_REFUSED', `${where}: connection refused (no SSH server listening)`, err.code);
      } else if (err.level === 'client-dns' || (err.code && UNREACHABLE_ERRNO.has(err.code))) {
        fail('UNREACHABLE', `${where}: unreachable (${err.code ?? err.level})`, err.code ?? err.level);
      } else if (err.level === 'client-socket') {
        fail('CLOSED', `${where}: the connection failed (${err.code ?? 'socket error'})`, err.code);
      } else {
        fail('PROTOCOL', `${where}: SSH handshake failed (${err.level ?? 'protocol error'})`, err.level);
      }
    });
    client.on('close', () => fail('CLOSED', `${where}: the server closed the connection before the session was ready`));

    client.connect({
      host: checked.host,
      port: checked.port,
      username: checked.username,
      privateKey: checked.privateKey,
      passphrase: checked.passphrase,
      // Our own timer covers connect + handshake + auth; ssh2's would only cover part of it.
      readyTimeout: 0,
      // No agent, no password, no keyboard-interactive: only the key we were given.
      tryKeyboard: false,
      hostVerifier: (key: Buffer): boolean => {
        // Commands and their small replies are request/response: Nagle plus the server's delayed
        // ACK would add about 40 ms to each exchange (measured: 195 ms per `ip -j addr` without it).
        client.setNoDelay(true);
        seen = { algorithm: keyAlgorithm(key), fingerprint: fingerprintOfKeyBlob(key) };
        if (checked.pinned !== null && seen.fingerprint !== checked.pinned) {
          mismatch = true;
          return false;
        }
        return true;
      },
    });
  });
}

/** One authenticated connection. Commands may run one after another or side by side. */
export class SshSession {
  private closed = false;
  private readonly dead = new EventEmitter();
  private deathReason: SshError | null = null;

  constructor(
    private readonly client: Client,
    readonly where: string,
    /** What the server presented; a trust-on-first-use caller records this fingerprint. */
    readonly hostKey: HostKeySeen,
    private readonly signal?: AbortSignal,
  ) {
    this.dead.setMaxListeners(0);
    client.on('error', (err: LibError) => this.die(new SshError('CLOSED', `${where}: connection error (${err.code ?? err.level ?? 'unknown'})`, err.code ?? err.level)));
    client.on('close', () => this.die(new SshError('CLOSED', `${where}: the connection closed`)));
    signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  private readonly onAbort = () => this.die(new SshError('ABORTED', `${this.where}: aborted`));

  private die(reason: SshError): void {
    if (this.deathReason) return;
    this.deathReason = reason;
    this.closed = true;
    this.signal?.removeEventListener('abort', this.onAbort);
    this.client.destroy();
    this.dead.emit('dead', reason);
  }

  get isOpen(): boolean {
    return !this.closed;
  }

  /**
   * Runs one command. Past `timeoutMs` or `maxOutputBytes` the remote process is sent SIGKILL and
   * the channel closed, and the call rejects (COMMAND_TIMEOUT / OUTPUT_LIMIT); the session itself
   * stays usable. A non-zero exit is a result, not an error.
   */
  exec(command: string, options: ExecOptions = {}): Promise<ExecResult> {
    let timeoutMs: number;
    let maxOutputBytes: number;
    try {
      if (typeof command !== 'string' || command.length === 0) throw new SshError('INVALID_INPUT', 'command must be a non-empty string');
      timeoutMs = positiveInt(options.timeoutMs, DEFAULT_COMMAND_TIMEOUT_MS, 'timeoutMs');
      maxOutputBytes = positiveInt(options.maxOutputBytes, DEFAULT_MAX_OUTPUT_BYTES, 'maxOutputBytes');
    } catch (err) {
      return Promise.reject(err);
    }
    if (this.deathReason) return Promise.reject(this.deathReason);

    return new Promise<ExecResult>((resolve, reject) => {
      let channel: ClientChannel | null = null;
      let settled = false;
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      let bytes = 0;
      let exitCode: number | null = null;
      let exitSignal: string | null = null;

      const finish = (error: SshError | null) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.dead.off('dead', onDead);
        if (error) {
          if (channel) {
            // Honoured for non-root users; for root the remote `timeout` does it (see remoteKill).
            try { channel.signal('KILL'); } catch { /* channel already gone */ }
            try { channel.close(); } catch { /* channel already gone */ }
          }
          reject(error);
        } else {
          resolve({ exitCode, signal: exitSignal, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') });
        }
      };
      const onDead = (reason: SshError) => finish(reason);
      this.dead.on('dead', onDead);
      const timer = setTimeout(() => finish(new SshError('COMMAND_TIMEOUT', `${this.where}: command did not finish within ${timeoutMs} ms and was killed`)), timeoutMs);

      const collect = (sink: Buffer[]) => (chunk: Buffer) => {
        if (settled) return;
        bytes += chunk.length;
        if (bytes > maxOutputBytes) {
          finish(new SshError('OUTPUT_LIMIT', `${this.where}: command wrote more than ${maxOutputBytes} bytes and was stopped`));
          return;
        }
        sink.push(chunk);
      };

      const remote = options.remoteKill === false ? command : withRemoteKill(command, timeoutMs);
      this.client.exec(remote, (openErr, stream) => {
        if (openErr) {
          finish(new SshError('PROTOCOL', `${this.where}: the server would not open a channel for the command`, (openErr as LibError).level));
          return;
        }
        channel = stream;
        if (settled) {
          // Timed out or died while the channel was opening.
          try { stream.close(); } catch { /* ignore */ }
          return;
        }
        stream.on('data', collect(out));
        stream.stderr.on('data', collect(err));
        stream.on('exit', (code: number | null, signalName?: string) => {
          exitCode = typeof code === 'number' ? code : null;
          exitSignal = signalName ?? null;
        });
        stream.on('close', () => finish(null));
        stream.on('error', () => finish(new SshError('CLOSED', `${this.where}: the command's channel failed`)));
        if (options.stdin !== undefined) stream.end(options.stdin);
        else stream.end();
      });
    });
  }

  /** Ends the connection politely, then forcibly if the server does not close within a second. */
  close(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.closed = true;
    this.signal?.removeEventListener('abort', this.onAbort);
    return new Promise<void>((resolve) => {
      const force = setTimeout(() => {
        this.client.destroy();
        resolve();
      }, 1000);
      this.client.once('close', () => {
        clearTimeout(force);
        resolve();
      });
      this.client.end();
    });
  }
}

/** connect, run `fn`, close: the session is closed whether `fn` resolves or throws. */
export async function withSession<R>(target: SshTarget, fn: (session: SshSession) => Promise<R>): Promise<R> {
  const session = await connect(target);
  try {
    return await fn(session);
  } finally {
    await session.close();
  }
}
