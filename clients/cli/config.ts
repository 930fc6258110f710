/**
 * Where the service is and who we are.
 *
 * URL: --url, else METAL_URL, else http://127.0.0.1:4000 (the service's default PORT on this host).
 * Token: --token-file, else METAL_TOKEN_FILE, else METAL_TOKEN.
 *
 * There is deliberately no `--token <value>` flag: a value on the command line lands in the shell's
 * history and, while the command runs, in every local user's `ps` and /proc/<pid>/cmdline. An
 * environment variable is readable only by the same user (/proc/<pid>/environ is 0400) and a file
 * can be 0600, so the token comes from one of those. A token file readable by group or others is
 * used but warned about, as ssh does for keys it still accepts.
 *
 * A token is never sent over plain http to a host other than loopback (anyone on the path could
 * read it): that is a usage error unless --insecure-http is given.
 */
import fs from 'node:fs';
import { isIP } from 'node:net';
import { UsageError } from './errors';

export const DEFAULT_URL = 'http://127.0.0.1:4000';
const MAX_TOKEN_FILE = 4096;

export interface GlobalOptions {
  url?: string;
  tokenFile?: string;
  insecureHttp?: boolean;
  json?: boolean;
}

export interface CliConfig {
  url: string;
  token?: string;
  /** Where the token came from, for messages (never the token itself). */
  tokenSource?: string;
}

function isLoopback(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '');
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  if (isIP(host) === 6) return host === '::1';
  return false;
}

function readTokenFile(file: string, from: string, warn: (text: string) => void): string {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(file);
  } catch (e) {
    throw new UsageError(`${from}: cannot read the token file (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  if (!stat.isFile()) throw new UsageError(`${from}: the token file is not a regular file`);
  if (stat.size > MAX_TOKEN_FILE) throw new UsageError(`${from}: the token file is larger than ${MAX_TOKEN_FILE} bytes`);
  if ((stat.mode & 0o077) !== 0) warn(`warning: ${from}: the token file can be read by other users (mode ${(stat.mode & 0o777).toString(8)}); chmod 600 it\n`);
  const token = fs.readFileSync(file, 'utf8').trim();
  if (!token) throw new UsageError(`${from}: the token file is empty`);
  if (/\s/.test(token)) throw new UsageError(`${from}: the token file must hold one token on one line`);
  return token;
}

export function resolveConfig(opts: GlobalOptions, env: NodeJS.ProcessEnv = process.env, warn: (text: string) => void = (t) => process.stderr.write(t)): CliConfig {
  const rawUrl = opts.url ?? env.METAL_URL ?? DEFAULT_URL;
  const from = opts.url !== undefined ? '--url' : env.METAL_URL !== undefined ? 'METAL_URL' : 'the default URL';
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    throw new UsageError(`${from} is not a URL (e.g. https://metal.example.com)`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError(`${from} must be an http:// or https:// URL`);
  if (url.username || url.password) throw new UsageError(`${from} must not carry credentials: use a token file or METAL_TOKEN`);
  if (url.search || url.hash) throw new UsageError(`${from} must be the service's base URL, without a query or fragment`);
  const base = `${url.origin}${url.pathname.replace(/\/+$/, '').replace(/\/graphql$/, '')}`;

  let token: string | undefined;
  let tokenSource: string | undefined;
  if (opts.tokenFile !== undefined) {
    token = readTokenFile(opts.tokenFile, '--token-file', warn);
    tokenSource = '--token-file';
  } else if (env.METAL_TOKEN_FILE) {
    if (env.METAL_TOKEN) throw new UsageError('both METAL_TOKEN and METAL_TOKEN_FILE are set: unset one (or pass --token-file)');
    token = readTokenFile(env.METAL_TOKEN_FILE, 'METAL_TOKEN_FILE', warn);
    tokenSource = 'METAL_TOKEN_FILE';
  } else if (env.METAL_TOKEN !== undefined) {
    token = env.METAL_TOKEN.trim();
    if (!token) throw new UsageError('METAL_TOKEN is set but empty');
    tokenSource = 'METAL_TOKEN';
  }
  if (token && url.protocol === 'http:' && !isLoopback(url.hostname) && !opts.insecureHttp) {
    throw new UsageError(`${from} is plain http:// to a host that is not loopback: the token would cross the network unencrypted (use https://, or --insecure-http)`);
  }
  return { url: base, token, tokenSource };
}
