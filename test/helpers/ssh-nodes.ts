/**
 * Throwaway "compute nodes" for tests: each one a network namespace joined to the root namespace
 * by a veth pair (a /31 each), running its own real OpenSSH sshd on the namespace's address, with
 * recording stand-ins for `apt-get` and `systemctl` first on the session PATH. Everything else a
 * session runs (`ip`, the shell) is real and acts inside that namespace.
 *
 * Every namespace, veth and process is written to a registry file before it is created, so
 * stop() removes exactly those, and a later run removes what a killed run left behind (its owner
 * PID no longer alive). Names carry a random tag, so parallel jest workers never collide.
 *
 * API (all options opt-in; without them every node is exactly as before):
 *
 *   startSshNodes(label, specs: number | NodeSpec[], options?: SshNodesOptions): Promise<SshNodes>
 *     NodeSpec        { kind?: 'sshd' | 'no-sshd' | 'silent'; delayMs?: number }
 *     SshNodesOptions { lan?: boolean; frrFiles?: boolean; frr?: boolean; frrDaemonsFile?: boolean }
 *
 *   lan: true   every node also gets eth1 on one L2 segment, one /24 per lab: a bridge inside a
 *               "switch" namespace (so this machine's own firewall, e.g. Docker's FORWARD DROP
 *               with br_netfilter, never sees the lab's frames). Node i is .(i+1); the switch
 *               side, .254, sits on a veth in the root namespace, so this process reaches every
 *               lan address. sshd (and the silent listener, and the delay relay) also listen on
 *               the lan address, so a compute node's os_ip can be node.lanAddress. eth0 keeps
 *               its /31 to the root namespace as before. At most 250 nodes.
 *               SshNodes.lan = { netns, bridge, rootLink, cidr: '10.B.C.0/24', prefixLen: 24,
 *                                switchAddress: '10.B.C.254' }
 *               SshNode.lanAddress = '10.B.C.(i+1)' (null without lan)
 *               setLanLink(node, up) takes the node's switch port down / up: SSH over
 *               node.address (eth0) still works while the lan (BGP) is cut.
 *   frrFiles: true  each sshd node's sshd runs in its own mount namespace where /etc/frr and
 *               /run/frr are bind mounts of SshNode.frrFiles = { etc, run } (host-side folders a
 *               test can read). /etc/frr is seeded with Debian's daemons, frr.conf, vtysh.conf
 *               (frr:frr, 0750 / 0640). Every SSH session sees the node's own files. Nodes of
 *               kind no-sshd / silent have frrFiles null.
 *               dpkg-divert on the session PATH (every node, with or without options) is a
 *               recording stand-in: calls(node) lists it as command 'dpkg-divert'. It keeps its
 *               own diversion list per node (--add [--rename] [--divert X] F, --remove [--rename]
 *               F, --list [glob], --truename F, --test; --local/--package ignored; default
 *               divert F.distrib), and moves files only under /etc/frr and /run/frr of a
 *               frrFiles node, never this machine's. Like dpkg's own, a rename that would
 *               overwrite another file fails (exit 2) and changes nothing.
 *               setFakeExit(node, 'dpkg-divert', code) makes it fail.
 *   frr: true   implies frrFiles. The stand-in `systemctl VERB frr|frr.service` is recorded as
 *               before and then runs REAL FRR in the node (its netns and mount namespace):
 *                 start    no-op when zebra+bgpd run; else zebra, bgpd, staticd, plus ospfd when
 *                          /etc/frr/frr.conf has `router ospf`, bfdd when it mentions bfd; each
 *                          `/usr/lib/frr/D -d <D_options from the node's /etc/frr/daemons>`, then
 *                          `vtysh -b` (the integrated config). Exit 1 with vtysh's output on
 *                          stderr when a daemon fails to start (all stopped again) or vtysh -b
 *                          rejects a line (daemons keep running with what was applied, as FRR
 *                          does). Daemon startup chatter goes to <node.dir>/frr.log, not stderr.
 *                 restart  stop + start.   stop  SIGTERM (then SIGKILL) every daemon; exit 0.
 *                 reload   frr-reload.py --reload when active (Debian frr-pythontools; same
 *                          PIDs, a few seconds); "not active" exit 1 otherwise
 *                          (reload-or-restart / try-reload-or-restart as systemd's).
 *                 is-active / status  "active" exit 0 when zebra and bgpd run, else exit 3.
 *                 enable --now / disable --now  start / stop (without --now: recorded, exit 0).
 *               Other units and verbs (daemon-reload, enable...) are recorded and exit 0.
 *               setFakeExit(node, 'systemctl', code) still fails every call without acting.
 *               Daemon PIDs are kept in the node's frr.pids: stop() and the stale sweep kill them.
 *               frrDaemons(node) -> [{ daemon, pid }] alive now (from the node's pid files).
 *   frrDaemonsFile: true (with frr)  Debian's real rule instead: zebra and staticd always, bgpd /
 *               ospfd / bfdd only when the node's /etc/frr/daemons says `<d>=yes` (the package
 *               ships bgpd=no); is-active then needs zebra only. For testing that a rollout
 *               enables the daemons it needs.
 *   inNode(node, argv) on a frrFiles node enters its mount namespace too (nsenter into its sshd),
 *               so `inNode(node, ['vtysh', '-c', 'show bgp summary json'])` reads its daemons.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import { existsSync, readFileSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const SSHD = '/usr/sbin/sshd';
const REGISTRY = path.join(os.tmpdir(), 'ssh-nodes-registry');
const SETUP_CONCURRENCY = 6;
const FRR_DIR = '/usr/lib/frr';

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
  command: 'apt-get' | 'systemctl' | 'dpkg-divert';
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
  /** With `lan`: the node's address on the shared segment (eth1, a /24); sshd listens there too. */
  lanAddress: string | null;
  /**
   * With `frrFiles` / `frr` (sshd nodes): the host-side folders bind-mounted over /etc/frr and
   * /run/frr in the node's own mount namespace, so a test can read what a rollout wrote.
   */
  frrFiles: { etc: string; run: string } | null;
}

export interface SshNodesOptions {
  /** Every node also gets eth1 on one shared L2 segment (a bridge in the root namespace). */
  lan?: boolean;
  /** Per-node /etc/frr and /run/frr (sshd in its own mount namespace) and a dpkg-divert that acts on them. */
  frrFiles?: boolean;
  /** Implies frrFiles: the stand-in `systemctl ... frr` runs real FRR daemons on the node. */
  frr?: boolean;
  /**
   * With frr: start only what the node's /etc/frr/daemons enables (zebra and staticd always), as
   * Debian's frrinit does; the package ships bgpd=no, so a rollout must enable bgpd itself.
   */
  frrDaemonsFile?: boolean;
}

export interface LanSegment {
  /** The "switch": a namespace holding the bridge. */
  netns: string;
  /** The bridge inside `netns` every node's eth1 is a port of. */
  bridge: string;
  /** The root-namespace veth holding switchAddress (its peer is a port of the bridge). */
  rootLink: string;
  /** e.g. 10.213.40.0/24: the management subnet the fabric's bgp underlay runs over. */
  cidr: string;
  prefixLen: 24;
  /** The switch side's address, on this process's own namespace. */
  switchAddress: string;
}

export interface FrrDaemon {
  daemon: string;
  pid: number;
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
  /**
   * Runs a command in the node's namespace directly (not over SSH), for assertions. On a node with
   * frrFiles it also enters the node's mount namespace, so `vtysh` there talks to its own daemons.
   */
  inNode(node: SshNode, argv: string[]): Promise<string>;
  /** The shared segment, with `lan`; null otherwise. */
  lan: LanSegment | null;
  /** Sets the node's port on the lan switch down or up (a cut cable); eth0 is untouched. */
  setLanLink(node: SshNode, up: boolean): Promise<void>;
  /** FRR daemons alive on the node now, from its own /run/frr pid files (frr nodes; [] otherwise). */
  frrDaemons(node: SshNode): Promise<FrrDaemon[]>;
  stop(): Promise<void>;
}

interface Registry {
  ownerPid: number;
  dir: string;
  /** Slot i is node i's namespace. */
  netns: string[];
  /** Namespaces that are not nodes (the lan switch); absent in older registries. */
  extraNetns?: string[];
  links: string[];
  pids: number[];
}

async function writeRegistry(file: string, reg: Registry): Promise<void> {
  await fs.writeFile(file, JSON.stringify(reg));
}

/**
 * A zombie counts as gone: daemons (FRR's -d) are reparented to this machine's PID 1, which may
 * reap them only some time after they exited, and a zombie holds nothing but its PID.
 */
const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
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

/** The inode of a network namespace (its /run/netns file, or a process's /proc/PID/ns/net). */
function netnsInode(file: string): number | null {
  try {
    return statSync(file).ino;
  } catch {
    return null;
  }
}

/**
 * FRR daemons the stand-in systemctl started (each node's frr.pids). A recorded PID counts only
 * while it is still an FRR daemon in that node's namespace: PIDs are reused after an exit.
 */
function frrPidsOf(reg: Registry): number[] {
  const pids: number[] = [];
  for (const [i, ns] of reg.netns.entries()) {
    if (typeof ns !== 'string') continue;
    const nsIno = netnsInode(`/run/netns/${ns}`);
    let text = '';
    try {
      text = readFileSync(path.join(reg.dir, `node${i}`, 'frr.pids'), 'utf8');
    } catch {
      continue;
    }
    for (const pid of new Set(text.split(/\s+/).filter(Boolean).map(Number))) {
      if (!Number.isInteger(pid) || pid <= 1) continue;
      try {
        if (!readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith(`${FRR_DIR}/`)) continue;
      } catch {
        continue;
      }
      if (nsIno !== null && netnsInode(`/proc/${pid}/ns/net`) === nsIno) pids.push(pid);
    }
  }
  return pids;
}

async function teardown(reg: Registry): Promise<void> {
  await Promise.all(reg.pids.map(killPid));
  await Promise.all(frrPidsOf(reg).map(killPid));
  // Session processes (a command a test left running) keep a namespace alive after `ip netns del`.
  // Slots of nodes whose setup never began are holes (null once written).
  const namespaces = [...reg.netns, ...(reg.extraNetns ?? [])].filter((ns): ns is string => typeof ns === 'string');
  for (const ns of namespaces) await Promise.all((await netnsPids(ns)).map(killPid));
  for (const ns of namespaces) await quiet(['ip', 'netns', 'del', ns]);
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
 * argv: addresses (comma-separated), delay ms, node folder (only so a stale sweep can recognise the process).
 */
const RELAY = `
const net = require('net');
const [hosts, ms] = [process.argv[1].split(','), Number(process.argv[2])];
let up = 0;
for (const host of hosts) net.createServer((client) => {
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
}).listen(22, host, () => { if (++up === hosts.length) console.log('listening'); });
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
 * The stand-in dpkg-divert: records its args like the other stand-ins (the real one would change
 * this machine's dpkg database) and keeps the node's diversions in its own folder. It renames
 * files only under /etc/frr and /run/frr, and only when they are the node's private copies:
 * anywhere else the file is this machine's own.
 */
const DPKG_DIVERT = (dir: string, privateFiles: boolean) => `#!/bin/sh
printf '%s' 'dpkg-divert' >> '${dir}/calls.log'
for a in "$@"; do printf ' %s' "$a" >> '${dir}/calls.log'; done
printf '\\n' >> '${dir}/calls.log'
if [ -f '${dir}/exit.dpkg-divert' ]; then exit "$(cat '${dir}/exit.dpkg-divert')"; fi
DB='${dir}/diversions'
touch "$DB"
mode=add; rename=0; divert=''; file=''; dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --add) mode=add ;;
    --remove) mode=remove ;;
    --list) mode=list ;;
    --listpackage) mode=listpackage ;;
    --truename) mode=truename ;;
    --rename) rename=1 ;;
    --no-rename) rename=0 ;;
    --test) dry=1 ;;
    --divert) shift; divert="$1" ;;
    --divert=*) divert="\${1#--divert=}" ;;
    --package|--admindir|--instdir|--root) shift ;;
    --) shift; file="$1"; break ;;
    -*) ;;
    *) file="$1" ;;
  esac
  shift
done
movable() {
  [ '${privateFiles ? 1 : 0}' = 1 ] || return 1
  case "$1" in /etc/frr/*|/run/frr/*) return 0 ;; esac
  return 1
}
entry() { awk -F '\\t' -v f="$1" '$1 == f { print $2; exit }' "$DB"; }
# As dpkg's own check_rename: nothing to do without a source; never overwrite another file.
renamable() {
  [ -e "$1" ] || return 1
  [ "$1" -ef "$2" ] && return 1
  if [ -e "$2" ]; then
    echo "dpkg-divert: error: rename involves overwriting '$2' with" >&2
    echo "  different file '$1', not allowed" >&2
    exit 2
  fi
  return 0
}
case "$mode" in
  list)
    while IFS="$(printf '\\t')" read -r f d; do
      case "$f" in $file) echo "local diversion of $f to $d" ;; esac
    done < "$DB"
    [ -n "$file" ] || while IFS="$(printf '\\t')" read -r f d; do echo "local diversion of $f to $d"; done < "$DB"
    exit 0 ;;
  listpackage) [ -n "$(entry "$file")" ] && echo LOCAL; exit 0 ;;
  truename) d="$(entry "$file")"; echo "\${d:-$file}"; exit 0 ;;
esac
[ -n "$file" ] || { echo "dpkg-divert: error: --$mode needs a single argument" >&2; exit 2; }
case "$file" in /*) ;; *) echo "dpkg-divert: error: filename '$file' is not absolute" >&2; exit 2 ;; esac
old="$(entry "$file")"
if [ "$mode" = add ]; then
  [ -n "$divert" ] || divert="$file.distrib"
  if [ -n "$old" ]; then
    if [ "$old" = "$divert" ]; then echo "Leaving 'local diversion of $file to $divert'"; exit 0; fi
    echo "dpkg-divert: error: 'local diversion of $file to $divert' clashes with 'local diversion of $file to $old'" >&2; exit 2
  fi
  move=0
  if [ "$rename" = 1 ] && movable "$file" && movable "$divert" && renamable "$file" "$divert"; then move=1; fi
  echo "Adding 'local diversion of $file to $divert'"
  [ "$dry" = 1 ] && exit 0
  printf '%s\\t%s\\n' "$file" "$divert" >> "$DB"
  [ $move = 1 ] && mv "$file" "$divert"
  exit 0
fi
if [ -z "$old" ]; then echo "No diversion 'any diversion of $file', none removed."; exit 0; fi
if [ -n "$divert" ] && [ "$divert" != "$old" ]; then
  echo "dpkg-divert: error: mismatch on divert-to: when removing 'diversion of $file to $divert' found 'local diversion of $file to $old'" >&2; exit 2
fi
move=0
if [ "$rename" = 1 ] && movable "$file" && movable "$old" && renamable "$old" "$file"; then move=1; fi
echo "Removing 'local diversion of $file to $old'"
[ "$dry" = 1 ] && exit 0
awk -F '\\t' -v f="$file" '$1 != f' "$DB" > "$DB.new" && mv "$DB.new" "$DB"
[ $move = 1 ] && mv "$old" "$file"
exit 0
`;

/**
 * The stand-in systemctl on an frr node: records like the plain one, and `frr` / `frr.service`
 * runs real FRR through frrctl (the session is already in the node's network and mount
 * namespaces, so the daemons get the node's addresses and its own /etc/frr and /run/frr).
 */
const FRR_SYSTEMCTL = (dir: string) => `#!/bin/sh
printf '%s' 'systemctl' >> '${dir}/calls.log'
for a in "$@"; do printf ' %s' "$a" >> '${dir}/calls.log'; done
printf '\\n' >> '${dir}/calls.log'
if [ -f '${dir}/exit.systemctl' ]; then exit "$(cat '${dir}/exit.systemctl')"; fi
verb=''; frr=0; now=0
for a in "$@"; do
  case "$a" in
    --now) now=1 ;;
    -*) ;;
    *) if [ -z "$verb" ]; then verb="$a"; elif [ "$a" = frr ] || [ "$a" = frr.service ]; then frr=1; fi ;;
  esac
done
[ "$frr" = 1 ] || exit 0
# enable / disable act only with --now (unit files are not modelled), as start / stop.
case "$verb" in
  enable) [ $now = 1 ] && verb=start ;;
  disable|mask) [ $now = 1 ] && verb=stop ;;
esac
exec /bin/sh '${dir}/frrctl' "$verb"
`;

/**
 * Real FRR for one node, the way Debian's frrinit.sh does it with the integrated config: start
 * the daemons (-d, as the frr user: the build's default), wait for each one's vty socket, then
 * `vtysh -b` sends /etc/frr/frr.conf to all of them. zebra, bgpd and staticd always (frrinit
 * always runs zebra and staticd; the fabric always needs bgpd), ospfd for `router ospf`, bfdd for
 * bfd. Every PID goes to frr.pids so the harness kills them even after a killed run.
 * `daemonsFile`: as Debian really does, only zebra, staticd and the daemons the node's
 * /etc/frr/daemons sets to yes (bgpd=no as the package ships it), and active means zebra runs.
 */
const FRRCTL = (dir: string, daemonsFile: boolean) => `#!/bin/sh
STRICT=${daemonsFile ? 1 : 0}
D='${FRR_DIR}'
V=/run/frr
C=/etc/frr/frr.conf
PIDS='${dir}/frr.pids'
LOG='${dir}/frr.log'
zebra_options='-A 127.0.0.1 -s 90000000'; bgpd_options='-A 127.0.0.1'; ospfd_options='-A 127.0.0.1'
bfdd_options='-A 127.0.0.1'; staticd_options='-A 127.0.0.1'
# The node's own daemons file (a rollout may edit it) supplies each daemon's options, as in frrinit.
[ -r /etc/frr/daemons ] && . /etc/frr/daemons
wanted() {
  if [ $STRICT = 1 ]; then
    echo zebra
    [ "$bgpd" = yes ] && echo bgpd
    echo staticd
    [ "$ospfd" = yes ] && echo ospfd
    [ "$bfdd" = yes ] && echo bfdd
    return 0
  fi
  echo zebra; echo bgpd; echo staticd
  [ -r "$C" ] || return 0
  grep -Eq '^[[:space:]]*router ospf([[:space:]]|$)' "$C" && echo ospfd
  grep -Eq '(^|[[:space:]])bfd([[:space:]]|$)' "$C" && echo bfdd
  return 0
}
pid_of() {
  [ -r "$V/$1.pid" ] || return 1
  p="$(cat "$V/$1.pid" 2>/dev/null)"
  [ -n "$p" ] && tr '\\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q "^$D/$1 " && echo "$p"
}
active() { pid_of zebra >/dev/null && { [ $STRICT = 1 ] || pid_of bgpd >/dev/null; }; }
stop_all() {
  for f in "$V"/*.pid; do
    [ -e "$f" ] || continue
    d="$(basename "$f" .pid)"
    p="$(pid_of "$d")" && kill -TERM "$p" 2>/dev/null
  done
  n=0
  while [ $n -lt 100 ]; do
    left=0
    for f in "$V"/*.pid; do [ -e "$f" ] || continue; pid_of "$(basename "$f" .pid)" >/dev/null && left=1; done
    [ $left = 0 ] && break
    sleep 0.05; n=$((n + 1))
  done
  for f in "$V"/*.pid; do [ -e "$f" ] || continue; p="$(pid_of "$(basename "$f" .pid)")" && kill -KILL "$p" 2>/dev/null; done
  rm -f "$V"/*.pid "$V"/*.vty "$V"/zserv.api
  return 0
}
start_all() {
  for d in $(wanted); do
    eval opts="\\$\${d}_options"
    # What a daemon prints while starting goes to the journal under systemd: here, frr.log.
    "$D/$d" -d $opts >> "$LOG" 2>&1 || { tail -n 20 "$LOG" >&2; echo "frr: $d failed to start" >&2; stop_all; return 1; }
    n=0
    until [ -S "$V/$d.vty" ] && p="$(pid_of "$d")"; do
      n=$((n + 1))
      [ $n -gt 200 ] && { tail -n 20 "$LOG" >&2; echo "frr: $d did not come up" >&2; stop_all; return 1; }
      sleep 0.05
    done
    echo "$p" >> "$PIDS"
  done
  [ -r "$C" ] || return 0
  out="$(vtysh -b 2>&1)"; rc=$?
  [ $rc = 0 ] || { printf '%s\\n' "$out" >&2; echo "frr: vtysh -b exited $rc" >&2; return 1; }
  return 0
}
case "$1" in
  start) active && exit 0; stop_all; start_all ;;
  restart) stop_all; start_all ;;
  stop) stop_all ;;
  reload|try-reload-or-restart|reload-or-restart)
    if ! active; then
      [ "$1" = reload ] && { echo "frr.service is not active, cannot reload." >&2; exit 1; }
      [ "$1" = try-reload-or-restart ] && exit 0
      stop_all; start_all; exit $?
    fi
    ${FRR_DIR}/frr-reload.py --reload "$C" >&2 ;;
  is-active) if active; then echo active; exit 0; else echo inactive; exit 3; fi ;;
  status)
    if active; then echo "frr.service - FRRouting (lab stand-in): active (running)"; for d in $(wanted); do p="$(pid_of "$d")" && echo "  $d $p"; done; exit 0; fi
    echo "frr.service - FRRouting (lab stand-in): inactive (dead)"; exit 3 ;;
  *) exit 0 ;;
esac
`;

/**
 * Starts one node per spec (a number means that many plain sshd nodes). `label` names the temp
 * folder, for whoever looks at a leftover; uniqueness comes from a random tag.
 */
export async function startSshNodes(label: string, specs: number | NodeSpec[], options: SshNodesOptions = {}): Promise<SshNodes> {
  const list: NodeSpec[] = typeof specs === 'number' ? Array.from({ length: specs }, () => ({})) : specs;
  if (list.length > 500) throw new Error('at most 500 nodes (a /22 of /31s)');
  const withLan = options.lan === true;
  const withFrr = options.frr === true;
  const withFrrFiles = withFrr || options.frrFiles === true;
  if (withLan && list.length > 250) throw new Error('at most 250 nodes on a lan (one /24)');
  let frrOwner: { uid: number; gid: number } | null = null;
  if (withFrrFiles) {
    try {
      const [u, g] = await Promise.all([run('id', ['-u', 'frr']), run('id', ['-g', 'frr'])]);
      frrOwner = { uid: Number(u.stdout.trim()), gid: Number(g.stdout.trim()) };
    } catch {
      throw new Error('frrFiles / frr need the Debian package frr (no frr user here)');
    }
  }
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
    let lan: LanSegment | null = null;
    let lanBase = '';
    if (withLan) {
      let [lb, lc] = await freeSubnet();
      for (let i = 0; i < 20 && lb === b && lc === c; i++) [lb, lc] = await freeSubnet();
      if (lb === b && lc === c) throw new Error('no second free 10.x /22 for the lan');
      lanBase = `10.${lb}.${lc}`;
      lan = { netns: `sshnode-${tag}-sw`, bridge: 'br0', rootLink: `snb${tag}`, cidr: `${lanBase}.0/24`, prefixLen: 24, switchAddress: `${lanBase}.254` };
      reg.extraNetns = [lan.netns];
      reg.links.push(lan.rootLink);
      await writeRegistry(regFile, reg);
      const sw = lan.netns;
      await run('ip', ['netns', 'add', sw]);
      await run('ip', ['-n', sw, 'link', 'add', lan.bridge, 'type', 'bridge']);
      await run('ip', ['-n', sw, 'link', 'set', lan.bridge, 'up']);
      await run('ip', ['link', 'add', lan.rootLink, 'type', 'veth', 'peer', 'name', `snc${tag}`]);
      await run('ip', ['link', 'set', `snc${tag}`, 'netns', sw]);
      await run('ip', ['-n', sw, 'link', 'set', `snc${tag}`, 'master', lan.bridge]);
      await run('ip', ['-n', sw, 'link', 'set', `snc${tag}`, 'up']);
      await run('ip', ['addr', 'add', `${lan.switchAddress}/24`, 'dev', lan.rootLink]);
      await run('ip', ['link', 'set', lan.rootLink, 'up']);
    }
    const sshdPids = new Map<number, number>();

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
      // Registry slot i is node i: frrPidsOf() pairs each namespace with its node folder by index.
      reg.netns[i] = netns;
      reg.links.push(rootLink, peerLink);
      const lanLink = `snl${tag}${i}`;
      const lanAddress = lan ? `${lanBase}.${i + 1}` : null;
      if (lan) reg.links.push(lanLink, `snm${tag}${i}`);
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
      if (lan && lanAddress) {
        const lanPeer = `snm${tag}${i}`;
        await run('ip', ['link', 'add', lanLink, 'type', 'veth', 'peer', 'name', lanPeer]);
        await run('ip', ['link', 'set', lanPeer, 'netns', netns]);
        await run('ip', ['-n', netns, 'link', 'set', lanPeer, 'name', 'eth1']);
        await run('ip', ['-n', netns, 'addr', 'add', `${lanAddress}/24`, 'dev', 'eth1']);
        await run('ip', ['-n', netns, 'link', 'set', 'eth1', 'up']);
        await run('ip', ['link', 'set', lanLink, 'netns', lan.netns]);
        await run('ip', ['-n', lan.netns, 'link', 'set', lanLink, 'master', lan.bridge]);
        await run('ip', ['-n', lan.netns, 'link', 'set', lanLink, 'up']);
      }
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

      const ownFiles = withFrrFiles && kind === 'sshd';
      await fs.writeFile(path.join(nodeDir, 'bin', 'apt-get'), FAKE(nodeDir, 'apt-get'), { mode: 0o755 });
      await fs.writeFile(path.join(nodeDir, 'bin', 'systemctl'), withFrr && ownFiles ? FRR_SYSTEMCTL(nodeDir) : FAKE(nodeDir, 'systemctl'), { mode: 0o755 });
      await fs.writeFile(path.join(nodeDir, 'bin', 'dpkg-divert'), DPKG_DIVERT(nodeDir, ownFiles), { mode: 0o755 });
      if (withFrr && ownFiles) await fs.writeFile(path.join(nodeDir, 'frrctl'), FRRCTL(nodeDir, options.frrDaemonsFile === true), { mode: 0o755 });
      let frrFiles: SshNode['frrFiles'] = null;
      if (ownFiles && frrOwner) {
        frrFiles = { etc: path.join(nodeDir, 'etc-frr'), run: path.join(nodeDir, 'run-frr') };
        // As the package has them: /etc/frr frr:frr 0750 with 0640 files, /run/frr frr:frr 0755.
        await fs.mkdir(frrFiles.etc, { mode: 0o750 });
        await fs.mkdir(frrFiles.run, { mode: 0o755 });
        for (const name of ['daemons', 'frr.conf', 'vtysh.conf']) {
          const to = path.join(frrFiles.etc, name);
          await fs.copyFile(path.join('/etc/frr', name), to);
          await fs.chmod(to, 0o640);
          await fs.chown(to, frrOwner.uid, frrOwner.gid);
        }
        await fs.chmod(frrFiles.etc, 0o750);
        await fs.chown(frrFiles.etc, frrOwner.uid, frrOwner.gid);
        await fs.chown(frrFiles.run, frrOwner.uid, frrOwner.gid);
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
          ...(delay?.method === 'relay' ? ['127.0.0.1'] : [address, ...(lanAddress ? [lanAddress] : [])]).map((a) => `ListenAddress ${a}`),
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
        // With own FRR files, unshare and sh exec in place too: sshd, and every session under it,
        // lives in a private mount namespace where /etc/frr and /run/frr are the node's folders.
        const argv = frrFiles
          ? ['netns', 'exec', netns, 'unshare', '--mount', '--propagation', 'private', 'sh', '-c',
            'mount --bind "$1" /etc/frr && mount --bind "$2" /run/frr && exec "$3" -D -e -f "$4"', 'sh', frrFiles.etc, frrFiles.run, SSHD, configFile]
          : ['netns', 'exec', netns, SSHD, '-D', '-e', '-f', configFile];
        const child = spawn('ip', argv, { stdio: ['ignore', 'ignore', 'pipe'] });
        children.push(child);
        if (child.pid) {
          reg.pids.push(child.pid);
          sshdPids.set(i, child.pid);
        }
        await save();
        // sshd binds its ListenAddresses in order and says so for each: wait for the last one.
        const lastListen = delay?.method === 'relay' ? '127.0.0.1' : (lanAddress ?? address);
        await waitForLine(child, 'stderr', new RegExp(`Server listening on ${lastListen.replace(/\./g, '\\.')} port 22`), 10_000, `sshd of node ${i}`);
        if (delay?.method === 'relay') {
          const hosts = [address, ...(lanAddress ? [lanAddress] : [])].join(',');
          const relay = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', RELAY, hosts, String(delay.ms), nodeDir], { stdio: ['ignore', 'pipe', 'ignore'] });
          children.push(relay);
          if (relay.pid) reg.pids.push(relay.pid);
          await save();
          await waitForLine(relay, 'stdout', /listening/, 10_000, `delay relay of node ${i}`);
        }
      } else if (kind === 'silent') {
        const hosts = [address, ...(lanAddress ? [lanAddress] : [])];
        const script = `let n = 0; for (const h of ${JSON.stringify(hosts)}) require('net').createServer((s) => s.on('error', () => {})).listen(22, h, () => { if (++n === ${hosts.length}) console.log('listening ' + ${JSON.stringify(nodeDir)}); })`;
        const child = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', script, nodeDir], { stdio: ['ignore', 'pipe', 'ignore'] });
        children.push(child);
        if (child.pid) reg.pids.push(child.pid);
        await save();
        await waitForLine(child, 'stdout', /listening/, 10_000, `silent listener of node ${i}`);
      }
      nodes[i] = { index: i, kind, netns, address, port: 22, hostKeyFingerprint, dir: nodeDir, delay, lanAddress, frrFiles };
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
        const sshd = sshdPids.get(node.index);
        const { stdout } = node.frrFiles && sshd !== undefined
          ? await run('nsenter', ['-t', String(sshd), '-m', '-n', '--', ...argv], { timeout: 10_000 })
          : await run('ip', ['netns', 'exec', node.netns, ...argv], { timeout: 10_000 });
        return stdout;
      },
      lan,
      async setLanLink(node, up) {
        if (!lan || !node.lanAddress) throw new Error('setLanLink needs a lan');
        await run('ip', ['-n', lan.netns, 'link', 'set', `snl${tag}${node.index}`, up ? 'up' : 'down']);
      },
      async frrDaemons(node) {
        if (!node.frrFiles) return [];
        let files: string[];
        try {
          files = (await fs.readdir(node.frrFiles.run)).filter((f) => f.endsWith('.pid'));
        } catch {
          return [];
        }
        const out: FrrDaemon[] = [];
        for (const f of files.sort()) {
          const daemon = f.slice(0, -4);
          const pid = Number((await fs.readFile(path.join(node.frrFiles.run, f), 'utf8').catch(() => '')).trim());
          let cmd = '';
          try {
            cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
          } catch {
            continue;
          }
          if (cmd.startsWith(`${FRR_DIR}/${daemon}\0`)) out.push({ daemon, pid });
        }
        return out;
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
