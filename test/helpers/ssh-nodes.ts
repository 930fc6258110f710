/**
 * Throwaway "compute nodes" for tests: each one a network namespace joined to the root namespace
 * by a veth pair (a /31 each), running its own real OpenSSH sshd on the namespace's address, with
 * recording stand-ins for `apt-get` and `systemctl` first on the session PATH. Everything else a
 * session runs (`ip`, the shell) is real and acts inside that namespace.
 *
 * Every namespace, veth and process is written to a registry file before it is created, so
 * stop() removes exactly those, and a later run removes what a killed run left behind (its owner
 * PID no longer alive). Names carry a random tag, so parallel jest workers never collide.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const SSHD = '/usr/sbin/sshd';
const REGISTRY = path.join(os.tmpdir(), 'ssh-nodes-registry');
const SETUP_CONCURRENCY = 6;

export type NodeKind =
  /** A real sshd. */
  | 'sshd'
  /** Namespace and address, nothing listening: connections are refused. */
  | 'no-sshd'
  /** Accepts TCP on port 22 and never says a word: a client must time out. */
  | 'silent';

export interface NodeSpec {
  kind?: NodeKind;
  /**
   * Added latency on what the node sends (so each round trip is this much longer). tc netem on
   * the node's eth0 when the kernel has it; otherwise (this machine's kernel has no sch_netem) a
   * relay inside the namespace holds every chunk sshd sends for this long, with sshd moved to
   * the namespace's loopback behind it. sshd nodes only.
   */
  delayMs?: number;
}

export interface RecordedCall {
  command: 'apt-get' | 'systemctl';
  args: string;
}

export interface SshNode {
  index: number;
  kind: NodeKind;
  netns: string;
  /** The node's address (inside its namespace), where its sshd listens on port 22. */
  address: string;
  port: number;
  /** OpenSSH's own `ssh-keygen -l -E sha256` of the node's host key; null when there is no sshd. */
  hostKeyFingerprint: string | null;
  dir: string;
  /** How delayMs was applied, if it was asked for. */
  delay: { ms: number; method: 'netem' | 'relay' } | null;
}

export interface SshNodes {
  nodes: SshNode[];
  username: 'root';
  /** The "service" key pair every node's authorized_keys trusts (OpenSSH ed25519). */
  clientPrivateKey: string;
  clientPublicKey: string;
  /** What the recording apt-get / systemctl on this node were called with, in order. */
  calls(node: SshNode): Promise<RecordedCall[]>;
  /** Makes the node's stand-in exit with `code` from now on (0 restores success). */
  setFakeExit(node: SshNode, command: RecordedCall['command'], code: number): Promise<void>;
  /** Runs a command in the node's namespace directly (not over SSH), for assertions. */
  inNode(node: SshNode, argv: string[]): Promise<string>;
  stop(): Promise<void>;
}

interface Registry {
  ownerPid: number;
  dir: string;
  netns: string[];
  links: string[];
  pids: number[];
}

async function writeRegistry(file: string, reg: Registry): Promise<void> {
  await fs.writeFile(file, JSON.stringify(reg));
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function quiet(argv: string[]): Promise<void> {
  try {
    await run(argv[0], argv.slice(1), { timeout: 10_000 });
  } catch {
    /* already gone */
  }
}

async function waitGone(pid: number, ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (!alive(pid)) return true;
    await new Promise((r) => setTimeout(r, 25));
  }
  return !alive(pid);
}

/** SIGTERM, then SIGKILL if it outlives two seconds. Only PIDs this harness recorded or found in its own namespaces. */
async function killPid(pid: number): Promise<void> {
  if (!alive(pid)) return;
  try { process.kill(pid, 'SIGTERM'); } catch { return; }
  if (await waitGone(pid, 2000)) return;
  try { process.kill(pid, 'SIGKILL'); } catch { return; }
  await waitGone(pid, 2000);
}

async function netnsPids(ns: string): Promise<number[]> {
  try {
    const { stdout } = await run('ip', ['netns', 'pids', ns], { timeout: 10_000 });
    return stdout.split(/\s+/).filter(Boolean).map(Number).filter((n) => Number.isInteger(n) && n > 1);
  } catch {
    return [];
  }
}

async function teardown(reg: Registry): Promise<void> {
  await Promise.all(reg.pids.map(killPid));
  // Session processes (a command a test left running) keep a namespace alive after `ip netns del`.
  for (const ns of reg.netns) await Promise.all((await netnsPids(ns)).map(killPid));
  for (const ns of reg.netns) await quiet(['ip', 'netns', 'del', ns]);
  // Deleting a namespace frees its veth end asynchronously; delete the root end explicitly.
  for (const link of reg.links) await quiet(['ip', 'link', 'del', link]);
  await fs.rm(reg.dir, { recursive: true, force: true });
}

/** Removes what runs that died without stop() left behind (their owner process is gone). */
export async function sweepStaleSshNodes(): Promise<number> {
  let files: string[];
  try {
    files = await fs.readdir(REGISTRY);
  } catch {
    return 0;
  }
  let swept = 0;
  for (const name of files.filter((f) => f.endsWith('.json'))) {
    const file = path.join(REGISTRY, name);
    let reg: Registry;
    try {
      reg = JSON.parse(readFileSync(file, 'utf8')) as Registry;
    } catch {
      continue; // being written by a live run
    }
    // A live owner (this process included: another suite in the same jest worker) still uses it.
    if (alive(reg.ownerPid)) continue;
    // A recorded PID may have been reused since: only kill it if it is still one of ours.
    reg.pids = reg.pids.filter((pid) => {
      try {
        const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
        return cmd.includes(reg.dir);
      } catch {
        return false;
      }
    });
    await teardown(reg);
    await fs.rm(file, { force: true });
    swept++;
  }
  return swept;
}

/** Whether `tc qdisc ... netem` works here (the module may be missing from the kernel). */
export async function netemAvailable(): Promise<boolean> {
  const ns = `sshnode-probe-${randomBytes(3).toString('hex')}`;
  try {
    await run('ip', ['netns', 'add', ns]);
    await run('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
    await run('ip', ['netns', 'exec', ns, 'tc', 'qdisc', 'add', 'dev', 'lo', 'root', 'netem', 'delay', '1ms']);
    return true;
  } catch {
    return false;
  } finally {
    await quiet(['ip', 'netns', 'del', ns]);
  }
}

/** A /22 in 10.200.0.0-10.249.255.255 that no root-namespace address uses yet. */
async function freeSubnet(): Promise<[number, number]> {
  const { stdout } = await run('ip', ['-j', '-4', 'addr']);
  const used = new Set<string>();
  for (const link of JSON.parse(stdout) as Array<{ addr_info?: Array<{ local?: string }> }>) {
    for (const a of link.addr_info ?? []) {
      const p = (a.local ?? '').split('.').map(Number);
      if (p[0] === 10) used.add(`${p[1]}.${p[2] & ~3}`);
    }
  }
  for (let i = 0; i < 100; i++) {
    const b = 200 + Math.floor(Math.random() * 50);
    const c = Math.floor(Math.random() * 64) * 4;
    if (!used.has(`${b}.${c}`)) return [b, c];
  }
  throw new Error('no free 10.x /22 for test nodes');
}

function waitForLine(child: ChildProcess, stream: 'stdout' | 'stderr', pattern: RegExp, ms: number, what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = '';
    const src = child[stream];
    const timer = setTimeout(() => done(new Error(`${what} not ready within ${ms} ms: ${seen.slice(-500)}`)), ms);
    const onData = (chunk: Buffer) => {
      seen += chunk.toString();
      if (pattern.test(seen)) done();
    };
    const onExit = (code: number | null) => done(new Error(`${what} exited (${code}) before it was ready: ${seen.slice(-500)}`));
    const done = (err?: Error) => {
      clearTimeout(timer);
      src?.off('data', onData);
      child.off('exit', onExit);
      // Keep draining so a chatty daemon never blocks on a full pipe.
      src?.resume();
      if (err) reject(err);
      else resolve();
    };
    src?.on('data', onData);
    child.on('exit', onExit);
  });
}

/**
 * The netem stand-in: a TCP relay from address:22 to sshd on 127.0.0.1:22 that holds each chunk
 * from sshd for the delay (equal timeouts fire in order, so the byte stream stays in order).
 * argv: address, delay ms, node folder (only so a stale sweep can recognise the process).
 */
const RELAY = `
const net = require('net');
const [host, ms] = [process.argv[1], Number(process.argv[2])];
net.createServer((client) => {
  const sshd = net.connect(22, '127.0.0.1');
  client.setNoDelay(true);
  sshd.setNoDelay(true);
  client.on('data', (d) => sshd.write(d));
  client.on('end', () => sshd.end());
  sshd.on('data', (d) => setTimeout(() => client.write(d), ms));
  sshd.on('end', () => setTimeout(() => client.end(), ms));
  client.on('error', () => sshd.destroy());
  sshd.on('error', () => setTimeout(() => client.destroy(), ms));
  client.on('close', () => sshd.destroy());
}).listen(22, host, () => console.log('listening'));
`;

const FAKE = (dir: string, name: string) => `#!/bin/sh
# Recording stand-in for ${name} on a test node: installs and restarts are not real here.
printf '%s' '${name}' >> '${dir}/calls.log'
for a in "$@"; do printf ' %s' "$a" >> '${dir}/calls.log'; done
printf '\\n' >> '${dir}/calls.log'
if [ -f '${dir}/exit.${name}' ]; then exit "$(cat '${dir}/exit.${name}')"; fi
exit 0
`;

/**
 * Starts one node per spec (a number means that many plain sshd nodes). `label` names the temp
 * folder, for whoever looks at a leftover; uniqueness comes from a random tag.
 */
export async function startSshNodes(label: string, specs: number | NodeSpec[]): Promise<SshNodes> {
  const list: NodeSpec[] = typeof specs === 'number' ? Array.from({ length: specs }, () => ({})) : specs;
  if (list.length > 500) throw new Error('at most 500 nodes (a /22 of /31s)');
  await sweepStaleSshNodes();
  await fs.mkdir(REGISTRY, { recursive: true });
  await fs.mkdir('/run/sshd', { recursive: true, mode: 0o755 });

  const tag = randomBytes(3).toString('hex');
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), `ssh-nodes-${label.replace(/[^A-Za-z0-9_-]/g, '').slice(0, 30)}-${tag}-`));
  const regFile = path.join(REGISTRY, `${tag}.json`);
  const reg: Registry = { ownerPid: process.pid, dir, netns: [], links: [], pids: [] };
  await writeRegistry(regFile, reg);
  const children: ChildProcess[] = [];

  try {
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', `service-${tag}`, '-f', path.join(dir, 'client_key')]);
    const clientPrivateKey = await fs.readFile(path.join(dir, 'client_key'), 'utf8');
    const clientPublicKey = (await fs.readFile(path.join(dir, 'client_key.pub'), 'utf8')).trim();
    const [b, c] = await freeSubnet();

    // Registry writes are chained so nodes set up side by side never interleave one file.
    let saving: Promise<void> = Promise.resolve();
    const save = () => (saving = saving.then(() => writeRegistry(regFile, reg)));
    const nodes: SshNode[] = new Array(list.length);
    const setUp = async (i: number): Promise<void> => {
      const spec = list[i];
      const kind = spec.kind ?? 'sshd';
      const netns = `sshnode-${tag}-${i}`;
      const rootLink = `snh${tag}${i}`; // at most 15 characters (IFNAMSIZ)
      const peerLink = `snp${tag}${i}`;
      const third = c + Math.floor((2 * i) / 256);
      const rootAddr = `10.${b}.${third}.${(2 * i) % 256}`;
      const address = `10.${b}.${third}.${(2 * i) % 256 + 1}`;
      const nodeDir = path.join(dir, `node${i}`);
      await fs.mkdir(path.join(nodeDir, 'bin'), { recursive: true });
      reg.netns.push(netns);
      reg.links.push(rootLink, peerLink);
      await save();

      await run('ip', ['netns', 'add', netns]);
      await run('ip', ['link', 'add', rootLink, 'type', 'veth', 'peer', 'name', peerLink]);
      await run('ip', ['link', 'set', peerLink, 'netns', netns]);
      await run('ip', ['-n', netns, 'link', 'set', peerLink, 'name', 'eth0']);
      await run('ip', ['-n', netns, 'addr', 'add', `${address}/31`, 'dev', 'eth0']);
      await run('ip', ['-n', netns, 'link', 'set', 'eth0', 'up']);
      await run('ip', ['-n', netns, 'link', 'set', 'lo', 'up']);
      await run('ip', ['addr', 'add', `${rootAddr}/31`, 'dev', rootLink]);
      await run('ip', ['link', 'set', rootLink, 'up']);
      let delay: SshNode['delay'] = null;
      if (spec.delayMs !== undefined) {
        if (!Number.isInteger(spec.delayMs) || spec.delayMs <= 0 || spec.delayMs > 10_000) throw new Error('delayMs must be 1 to 10000');
        if (kind !== 'sshd') throw new Error('delayMs applies to sshd nodes only');
        try {
          await run('ip', ['netns', 'exec', netns, 'tc', 'qdisc', 'add', 'dev', 'eth0', 'root', 'netem', 'delay', `${spec.delayMs}ms`]);
          delay = { ms: spec.delayMs, method: 'netem' };
        } catch {
          delay = { ms: spec.delayMs, method: 'relay' };
        }
      }

      for (const name of ['apt-get', 'systemctl'] as const) {
        await fs.writeFile(path.join(nodeDir, 'bin', name), FAKE(nodeDir, name), { mode: 0o755 });
      }

      let hostKeyFingerprint: string | null = null;
      if (kind === 'sshd') {
        const hostKey = path.join(nodeDir, 'ssh_host_ed25519_key');
        await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', `node${i}`, '-f', hostKey]);
        const { stdout } = await run('ssh-keygen', ['-l', '-E', 'sha256', '-f', `${hostKey}.pub`]);
        hostKeyFingerprint = stdout.split(/\s+/)[1];
        await fs.writeFile(path.join(nodeDir, 'authorized_keys'), clientPublicKey + '\n', { mode: 0o600 });
        const config = [
          // Behind the delay relay sshd listens on the namespace's loopback only.
          `ListenAddress ${delay?.method === 'relay' ? '127.0.0.1' : address}`,
          'Port 22',
          `HostKey ${hostKey}`,
          `PidFile ${path.join(nodeDir, 'sshd.pid')}`,
          `AuthorizedKeysFile ${path.join(nodeDir, 'authorized_keys')}`,
          'PermitRootLogin prohibit-password',
          'PubkeyAuthentication yes',
          'PasswordAuthentication no',
          'KbdInteractiveAuthentication no',
          'UsePAM no',
          // The temp folder is not root-only, which StrictModes would refuse.
          'StrictModes no',
          'MaxStartups 200',
          'MaxSessions 64',
          'LogLevel INFO',
          // HOME is the node's own folder: bash under sshd sources ~/.bashrc, and this machine's
          // root one (pyenv init) costs ~150 ms of CPU per command and rewrites PATH.
          `SetEnv PATH=${path.join(nodeDir, 'bin')}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=${nodeDir}`,
        ].join('\n');
        const configFile = path.join(nodeDir, 'sshd_config');
        await fs.writeFile(configFile, config + '\n');
        // `ip netns exec` execs sshd in place, so the child's PID is sshd's own; -D keeps it from forking.
        const child = spawn('ip', ['netns', 'exec', netns, SSHD, '-D', '-e', '-f', configFile], { stdio: ['ignore', 'ignore', 'pipe'] });
        children.push(child);
        if (child.pid) reg.pids.push(child.pid);
        await save();
        await waitForLine(child, 'stderr', /Server listening on/, 10_000, `sshd of node ${i}`);
        if (delay?.method === 'relay') {
          const relay = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', RELAY, address, String(delay.ms), nodeDir], { stdio: ['ignore', 'pipe', 'ignore'] });
          children.push(relay);
          if (relay.pid) reg.pids.push(relay.pid);
          await save();
          await waitForLine(relay, 'stdout', /listening/, 10_000, `delay relay of node ${i}`);
        }
      } else if (kind === 'silent') {
        const script = `require('net').createServer((s) => s.on('error', () => {})).listen(22, ${JSON.stringify(address)}, () => console.log('listening ' + ${JSON.stringify(nodeDir)}))`;
        const child = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', script, nodeDir], { stdio: ['ignore', 'pipe', 'ignore'] });
        children.push(child);
        if (child.pid) reg.pids.push(child.pid);
        await save();
        await waitForLine(child, 'stdout', /listening/, 10_000, `silent listener of node ${i}`);
      }
      nodes[i] = { index: i, kind, netns, address, port: 22, hostKeyFingerprint, dir: nodeDir, delay };
    };
    // A few at a time: a 100-node bench starts in seconds, and 2 cores are not swamped.
    let next = 0;
    const errors: unknown[] = [];
    await Promise.all(Array.from({ length: Math.min(SETUP_CONCURRENCY, list.length) }, async () => {
      while (next < list.length && errors.length === 0) {
        const i = next++;
        try {
          await setUp(i);
        } catch (err) {
          errors.push(err);
        }
      }
    }));
    await saving;
    if (errors.length > 0) throw errors[0];

    let stopped = false;
    return {
      nodes,
      username: 'root',
      clientPrivateKey,
      clientPublicKey,
      async calls(node) {
        let text = '';
        try {
          text = await fs.readFile(path.join(node.dir, 'calls.log'), 'utf8');
        } catch {
          return [];
        }
        return text.split('\n').filter(Boolean).map((line) => {
          const space = line.indexOf(' ');
          const command = (space < 0 ? line : line.slice(0, space)) as RecordedCall['command'];
          return { command, args: space < 0 ? '' : line.slice(space + 1) };
        });
      },
      async setFakeExit(node, command, code) {
        const file = path.join(node.dir, `exit.${command}`);
        if (code === 0) await fs.rm(file, { force: true });
        else await fs.writeFile(file, String(code));
      },
      async inNode(node, argv) {
        const { stdout } = await run('ip', ['netns', 'exec', node.netns, ...argv], { timeout: 10_000 });
        return stdout;
      },
      async stop() {
        if (stopped) return;
        stopped = true;
        await teardown(reg);
        await fs.rm(regFile, { force: true });
      },
    };
  } catch (err) {
    await teardown(reg);
    await fs.rm(regFile, { force: true });
    throw err;
  }
}

/** For a test that wants to know nothing of its own is left: namespaces, links and PIDs still present. */
export async function leftovers(netns: string[], links: string[], pids: number[]): Promise<string[]> {
  const left: string[] = [];
  const { stdout } = await run('ip', ['netns', 'list']);
  for (const ns of netns) if (stdout.split('\n').some((l) => l.split(' ')[0] === ns)) left.push(`netns ${ns}`);
  for (const link of links) if (existsSync(`/sys/class/net/${link}`)) left.push(`link ${link}`);
  for (const pid of pids) if (alive(pid)) left.push(`pid ${pid}`);
  return left;
}
