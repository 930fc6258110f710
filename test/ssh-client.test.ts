import { spawnSync } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import os from 'node:os';
import { connect, fanOut, fanOutSsh, fingerprintOfPublicKeyLine, SshError, withSession, type SshSession, type SshTarget } from '../clients/ssh';
import { leftovers, netemAvailable, startSshNodes, sweepStaleSshNodes, type SshNode, type SshNodes } from './helpers/ssh-nodes';

// Nodes 0-5 run sshd, 6 has no sshd (refused), 7 accepts TCP and never speaks SSH (hangs).
let h: SshNodes;
beforeAll(async () => {
  h = await startSshNodes('ssh-client', [{}, {}, {}, {}, {}, {}, { kind: 'no-sshd' }, { kind: 'silent' }]);
}, 60_000);
afterAll(async () => {
  await h?.stop();
});

const target = (node: SshNode, over: Partial<SshTarget> = {}): SshTarget => ({
  host: node.address,
  port: node.port,
  username: h.username,
  privateKey: h.clientPrivateKey,
  hostKey: { fingerprint: node.hostKeyFingerprint ?? 'SHA256:' + 'A'.repeat(43) },
  ...over,
});

const tcpSockets = () => process.getActiveResourcesInfo().filter((r) => r === 'TCPSocketWrap').length;
/** Socket handles close a tick or two after destroy(); wait for the count to come back before comparing. */
async function socketsSettle(baseline: number): Promise<number> {
  for (let i = 0; i < 100 && tcpSockets() > baseline; i++) await new Promise((r) => setTimeout(r, 10));
  return tcpSockets();
}

async function rejection(p: Promise<unknown>): Promise<SshError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof SshError) return err;
    throw err;
  }
  throw new Error('expected a rejection');
}

type IpAddr = Array<{ ifname: string; mtu: number; operstate: string; addr_info: Array<{ family: string; local: string; prefixlen: number }> }>;
type IpLink = Array<{ ifname: string; mtu: number; link_type: string; address: string }>;

describe('SSH client against real sshd in network namespaces', () => {
  test('ip -j addr and ip -j link run inside the node and parse; the host key is the one ssh-keygen reports', async () => {
    const node = h.nodes[0];
    await withSession(target(node), async (s) => {
      expect(s.hostKey).toEqual({ algorithm: 'ssh-ed25519', fingerprint: node.hostKeyFingerprint });
      const addr = await s.exec('ip -j addr');
      expect(addr.exitCode).toBe(0);
      const addrs = JSON.parse(addr.stdout) as IpAddr;
      const eth0 = addrs.find((l) => l.ifname === 'eth0');
      expect(eth0?.addr_info).toContainEqual(expect.objectContaining({ family: 'inet', local: node.address, prefixlen: 31 }));
      // The namespace's own view, read without SSH: the session really ran on this node.
      const direct = JSON.parse(await h.inNode(node, ['ip', '-j', 'addr'])) as IpAddr;
      expect(addrs.map((l) => l.ifname).sort()).toEqual(direct.map((l) => l.ifname).sort());
      expect(addrs.map((l) => l.ifname).sort()).toEqual(['eth0', 'lo']);

      const link = await s.exec('ip -j link');
      const links = JSON.parse(link.stdout) as IpLink;
      expect(links.find((l) => l.ifname === 'eth0')).toEqual(expect.objectContaining({ mtu: 1500, link_type: 'ether' }));
      expect(links.find((l) => l.ifname === 'lo')?.link_type).toBe('loopback');
    });
  });

  test('exit code, stdout and stderr are collected; a non-zero exit is a result', async () => {
    await withSession(target(h.nodes[1]), async (s) => {
      const r = await s.exec("echo out; echo err >&2; exit 3");
      expect(r).toEqual({ exitCode: 3, signal: null, stdout: 'out\n', stderr: 'err\n' });
      // Quotes, $ and ; survive the remote-kill wrapper unchanged; POSIX sh runs the command.
      const quoted = await s.exec(`printf '%s|' "it's" '$HOME' a\\;b; echo "$0"`);
      expect(quoted.stdout).toBe(`it's|$HOME|a;b|sh\n`);
      expect((await s.exec('echo "$0"', { remoteKill: false })).stdout).toBe('bash\n');
      const stdin = await s.exec('wc -c', { stdin: 'twelve bytes' });
      expect(stdin.stdout.trim()).toBe('12');
    });
  });

  test('apt-get and systemctl are recording stand-ins on the node PATH; ip is the real one', async () => {
    const node = h.nodes[2];
    await withSession(target(node), async (s) => {
      const where = await s.exec('for c in apt-get systemctl ip; do command -v $c; done');
      expect(where.stdout.split('\n').filter(Boolean)).toEqual([
        path.join(node.dir, 'bin', 'apt-get'),
        path.join(node.dir, 'bin', 'systemctl'),
        '/usr/sbin/ip',
      ]);
      // Each node has its own HOME, so nothing of this machine's root dotfiles runs on a node.
      expect((await s.exec('echo "$HOME"')).stdout).toBe(node.dir + '\n');
      expect((await s.exec('apt-get install -y frr && systemctl restart frr')).exitCode).toBe(0);
      await h.setFakeExit(node, 'apt-get', 100);
      expect((await s.exec('apt-get install -y frr')).exitCode).toBe(100);
      await h.setFakeExit(node, 'apt-get', 0);
    });
    expect(await h.calls(node)).toEqual([
      { command: 'apt-get', args: 'install -y frr' },
      { command: 'systemctl', args: 'restart frr' },
      { command: 'apt-get', args: 'install -y frr' },
    ]);
    expect(await h.calls(h.nodes[3])).toEqual([]);
  });

  test('a wrong pinned host key is refused, naming both fingerprints, and leaves no socket open', async () => {
    const baseline = tcpSockets();
    const other = h.nodes[1].hostKeyFingerprint!;
    const err = await rejection(connect(target(h.nodes[0], { hostKey: { fingerprint: other } })));
    expect(err.code).toBe('HOST_KEY_MISMATCH');
    expect(err.message).toContain(h.nodes[0].hostKeyFingerprint);
    expect(err.message).toContain(other);
    expect(err.message).not.toContain(h.clientPrivateKey.split('\n')[1]);
    expect(await socketsSettle(baseline)).toBe(baseline);
  });

  test('trust on first use: the session reports the key it accepted, and pinning that key then works', async () => {
    const node = h.nodes[3];
    const first = await connect(target(node, { hostKey: { trustOnFirstUse: true } }));
    const learned = first.hostKey.fingerprint;
    await first.close();
    expect(learned).toBe(node.hostKeyFingerprint);
    expect(learned).toBe(fingerprintOfPublicKeyLine(await fs.readFile(path.join(node.dir, 'ssh_host_ed25519_key.pub'), 'utf8')));
    const pinned = await connect(target(node, { hostKey: { fingerprint: learned } }));
    expect((await pinned.exec('true')).exitCode).toBe(0);
    await pinned.close();
  });

  test('a key the node does not trust is AUTH_FAILED', async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'ssh-other-key-'));
    try {
      spawnSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', path.join(dir, 'k')]);
      const other = await fs.readFile(path.join(dir, 'k'), 'utf8');
      const baseline = tcpSockets();
      const err = await rejection(connect(target(h.nodes[0], { privateKey: other })));
      expect(err.code).toBe('AUTH_FAILED');
      expect(err.message).not.toContain(other.split('\n')[1]);
      expect(await socketsSettle(baseline)).toBe(baseline);
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  });

  test('a node with no sshd is CONNECTION_REFUSED', async () => {
    const baseline = tcpSockets();
    const err = await rejection(connect(target(h.nodes[6])));
    expect(err.code).toBe('CONNECTION_REFUSED');
    expect(err.message).toContain(h.nodes[6].address);
    expect(await socketsSettle(baseline)).toBe(baseline);
  });

  test('a node that accepts TCP but never speaks SSH times out at the connect deadline and its socket is closed', async () => {
    const baseline = tcpSockets();
    const err = await rejection(connect(target(h.nodes[7], { connectTimeoutMs: 700 })));
    expect(err.code).toBe('CONNECT_TIMEOUT');
    expect(await socketsSettle(baseline)).toBe(baseline);
  });

  test('a command past its timeout is killed on the node, and the session stays usable', async () => {
    const node = h.nodes[4];
    await withSession(target(node), async (s) => {
      const err = await rejection(s.exec('sleep 4242', { timeoutMs: 400 }));
      expect(err.code).toBe('COMMAND_TIMEOUT');
      expect((await s.exec('echo still here')).stdout).toBe('still here\n');
      // SIGKILL reached the remote process: it disappears rather than running on.
      let running = true;
      for (let i = 0; i < 100 && running; i++) {
        running = spawnSync('pgrep', ['-f', 'sleep 4242']).status === 0;
        if (running) await new Promise((r) => setTimeout(r, 50));
      }
      expect(running).toBe(false);
    });
  });

  test('output past the cap stops the command with OUTPUT_LIMIT', async () => {
    await withSession(target(h.nodes[5]), async (s) => {
      const err = await rejection(s.exec('head -c 500000 /dev/zero', { maxOutputBytes: 1000 }));
      expect(err.code).toBe('OUTPUT_LIMIT');
      expect((await s.exec('echo ok')).exitCode).toBe(0);
    });
  });

  test('bad inputs are refused before any socket is opened, naming the field and never echoing the key', async () => {
    const baseline = tcpSockets();
    const bad = await rejection(connect(target(h.nodes[0], { hostKey: { fingerprint: 'MD5:aa:bb' } })));
    expect(bad.code).toBe('INVALID_INPUT');
    expect(bad.message).toContain('hostKey.fingerprint');
    const garbage = '-----BEGIN OPENSSH PRIVATE KEY-----\nc2VjcmV0LWtleS1tYXRlcmlhbA==\n-----END OPENSSH PRIVATE KEY-----\n';
    const key = await rejection(connect(target(h.nodes[0], { privateKey: garbage })));
    expect(key.code).toBe('INVALID_INPUT');
    expect(key.message).toContain('privateKey');
    expect(key.message).not.toContain('c2VjcmV0');
    const pub = await rejection(connect(target(h.nodes[0], { privateKey: h.clientPublicKey })));
    expect(pub.code).toBe('INVALID_INPUT');
    expect((await rejection(connect(target(h.nodes[0], { port: 70000 })))).message).toContain('port');
    expect((await rejection(connect(target(h.nodes[0], { connectTimeoutMs: 0 })))).message).toContain('connectTimeoutMs');
    expect(tcpSockets()).toBe(baseline);
  });

  test('fan-out over 8 nodes: one refused and one hanging do not hold up the others; results in input order', async () => {
    const baseline = tcpSockets();
    const perNodeTimeoutMs = 1500;
    const concurrency = 3;
    // Everything must be back by ceil(8/3) deadlines plus slack; a node that held its slot past
    // its own deadline would push later nodes past this and come back ABORTED.
    const overall = AbortSignal.timeout(Math.ceil(8 / concurrency) * perNodeTimeoutMs + 2500);
    // The hanging and refused nodes go first, so they hold slots while the others wait.
    const order = [h.nodes[7], h.nodes[6], ...h.nodes.slice(0, 6)];
    const results = await fanOutSsh(
      order,
      (node) => target(node),
      async (s: SshSession) => {
        const r = await s.exec('ip -j addr', { timeoutMs: 1000 });
        const eth0 = (JSON.parse(r.stdout) as IpAddr).find((l) => l.ifname === 'eth0');
        return eth0?.addr_info.find((a) => a.family === 'inet')?.local;
      },
      { concurrency, perNodeTimeoutMs, signal: overall },
    );
    expect(results.map((r) => r.item)).toEqual(order);
    expect(results.map((r) => r.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    // The connect timeout is the time left before the deadline, so either timer may report it.
    expect(results[0].status).toBe('timeout');
    expect(results[0].status !== 'ok' && ['CONNECT_TIMEOUT', 'DEADLINE'].includes(results[0].code)).toBe(true);
    expect(results[1]).toEqual(expect.objectContaining({ status: 'refused', code: 'CONNECTION_REFUSED' }));
    for (const r of results.slice(2)) {
      expect(r.status).toBe('ok');
      if (r.status === 'ok') expect(r.value).toBe(r.item.address);
    }
    expect(await socketsSettle(baseline)).toBe(baseline);
  });

  test('fan-out: a host-key mismatch is refused and a hung command times out, per node', async () => {
    const results = await fanOutSsh(
      [h.nodes[0], h.nodes[1], h.nodes[2]],
      (node) => target(node, node === h.nodes[1] ? { hostKey: { fingerprint: h.nodes[2].hostKeyFingerprint! } } : {}),
      // Only the hung command gets the short timeout: `hostname` answering within 600 ms was a
      // margin of a few hundred milliseconds on a loaded machine.
      async (s, node) => (node === h.nodes[2] ? await s.exec('sleep 4343', { timeoutMs: 600 }) : await s.exec('hostname', { timeoutMs: 10_000 })).exitCode,
      { perNodeTimeoutMs: 5000 },
    );
    expect(results.map((r) => r.status)).toEqual(['ok', 'refused', 'timeout']);
    expect(results[1]).toEqual(expect.objectContaining({ code: 'HOST_KEY_MISMATCH' }));
    expect(results[2]).toEqual(expect.objectContaining({ code: 'COMMAND_TIMEOUT' }));
  });
});

describe('fanOut scheduling', () => {
  test('bounded concurrency, input order, and a task that ignores its signal is cut off at its deadline', async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    const items = Array.from({ length: 20 }, (_, i) => i);
    const results = await fanOut(
      items,
      async (i, ctx) => {
        if (i === 3) return new Promise<number>(() => {}); // never settles, never looks at its signal
        if (i === 4) throw new Error('step failed on node 4');
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        await new Promise((r) => setTimeout(r, (20 - i) * 3));
        inFlight--;
        expect(ctx.signal.aborted).toBe(false);
        return i * 10;
      },
      { concurrency: 4, perNodeTimeoutMs: 800 },
    );
    expect(maxInFlight).toBeLessThanOrEqual(4);
    expect(maxInFlight).toBeGreaterThan(1);
    expect(results.map((r) => r.item)).toEqual(items);
    expect(results[3]).toEqual(expect.objectContaining({ status: 'timeout', code: 'DEADLINE' }));
    expect(results[4]).toEqual(expect.objectContaining({ status: 'failed', code: 'TASK_FAILED', reason: 'step failed on node 4' }));
    for (const r of results.filter((x) => x.index !== 3 && x.index !== 4)) expect(r).toEqual(expect.objectContaining({ status: 'ok', value: r.item * 10 }));
  });

  test('cancelling the fan-out aborts running tasks and reports items not started as ABORTED', async () => {
    const controller = new AbortController();
    const seen: boolean[] = [];
    const results = await fanOut(
      [0, 1, 2, 3],
      (i, ctx) => new Promise<number>((resolve, reject) => {
        if (i === 0) setTimeout(() => controller.abort(), 20);
        ctx.signal.addEventListener('abort', () => {
          seen.push(true);
          reject(new SshError('ABORTED', `node ${i}: aborted`));
        });
      }),
      { concurrency: 2, perNodeTimeoutMs: 10_000, signal: controller.signal },
    );
    expect(results.map((r) => r.status)).toEqual(['failed', 'failed', 'failed', 'failed']);
    expect(results.every((r) => r.status !== 'ok' && r.code === 'ABORTED')).toBe(true);
    expect(seen.length).toBe(2);
  });
});

describe('the harness cleans up after itself', () => {
  test('stop() removes every namespace, veth and process; a killed run is swept by the next one', async () => {
    const a = await startSshNodes('cleanup', [{}, { kind: 'silent' }]);
    const links = (n: SshNode) => {
      const tag = n.netns.split('-')[1];
      return [`snh${tag}${n.index}`];
    };
    const pidsOf = (n: SshNode) => spawnSync('ip', ['netns', 'pids', n.netns]).stdout.toString().split(/\s+/).filter(Boolean).map(Number);
    const aPids = a.nodes.flatMap(pidsOf);
    expect(aPids.length).toBe(2);
    // Starting another set sweeps only dead owners' leftovers: this file's own nodes keep running.
    const other = await startSshNodes('alongside', [{ kind: 'no-sshd' }]);
    expect(await leftovers([], [], [...aPids, ...h.nodes.flatMap(pidsOf)])).toHaveLength(aPids.length + 7);
    expect((await withSession(target(h.nodes[0]), (s) => s.exec('true'))).exitCode).toBe(0);
    await other.stop();
    await a.stop();
    expect(await leftovers(a.nodes.map((n) => n.netns), a.nodes.flatMap(links), aPids)).toEqual([]);

    // A run whose owner died: rewrite its registry's owner to a PID that has exited, then sweep.
    const b = await startSshNodes('stale', [{}]);
    const bPids = b.nodes.flatMap(pidsOf);
    const dead = spawnSync('true').pid ?? 999999;
    const registry = path.join(os.tmpdir(), 'ssh-nodes-registry');
    const tag = b.nodes[0].netns.split('-')[1];
    const file = path.join(registry, `${tag}.json`);
    const reg = JSON.parse(await fs.readFile(file, 'utf8')) as { ownerPid: number };
    reg.ownerPid = dead;
    await fs.writeFile(file, JSON.stringify(reg));
    expect(await sweepStaleSshNodes()).toBeGreaterThanOrEqual(1);
    expect(await leftovers(b.nodes.map((n) => n.netns), b.nodes.flatMap(links), bPids)).toEqual([]);
    await b.stop(); // already gone: must not throw
  }, 60_000);
});

describe('added latency per node', () => {
  test('delayMs: netem on the node link when the kernel has it, else a relay in front of sshd; SSH works either way', async () => {
    const d = await startSshNodes('delay', [{ delayMs: 50 }]);
    try {
      const node = d.nodes[0];
      const qdisc = await d.inNode(node, ['tc', 'qdisc', 'show', 'dev', 'eth0']);
      const listening = await d.inNode(node, ['ss', '-Htlnp', 'sport', '=', ':22']);
      if (await netemAvailable()) {
        expect(node.delay).toEqual({ ms: 50, method: 'netem' });
        expect(qdisc).toMatch(/netem .*delay 50ms/);
      } else {
        expect(node.delay).toEqual({ ms: 50, method: 'relay' });
        expect(qdisc).not.toMatch(/netem/);
        // The relay owns the node address, sshd only the namespace's loopback.
        expect(listening).toMatch(new RegExp(`${node.address.replace(/\./g, '\\.')}:22 .*"node"`));
        expect(listening).toMatch(/127\.0\.0\.1:22 .*"sshd"/);
      }
      const r = await withSession(
        { host: node.address, username: d.username, privateKey: d.clientPrivateKey, hostKey: { fingerprint: node.hostKeyFingerprint! } },
        (s) => s.exec('ip -j addr'),
      );
      expect((JSON.parse(r.stdout) as IpAddr).find((l) => l.ifname === 'eth0')?.addr_info[0]?.local).toBe(node.address);
    } finally {
      await d.stop();
    }
  }, 30_000);
});
