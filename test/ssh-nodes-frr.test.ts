import fs from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { connect, SshError, withSession, type SshTarget } from '../clients/ssh';
import { leftovers, startSshNodes, sweepStaleSshNodes, type SshNode, type SshNodes } from './helpers/ssh-nodes';

// Three frr nodes on one lan; node 2 also sits behind the delay relay (this kernel has no netem),
// so the relay's second listener on the lan address is exercised too.
let h: SshNodes;
beforeAll(async () => {
  h = await startSshNodes('ssh-nodes-frr', [{}, {}, { delayMs: 20 }], { lan: true, frr: true });
}, 60_000);
afterAll(async () => {
  await h?.stop();
});

const target = (node: SshNode, host = node.address): SshTarget => ({
  host,
  port: 22,
  username: h.username,
  privateKey: h.clientPrivateKey,
  hostKey: { fingerprint: node.hostKeyFingerprint! },
});
const sh = (node: SshNode, command: string, host?: string) => withSession(target(node, host), (s) => s.exec(command));

const bgpConf = (me: SshNode, peer: SshNode, asn: number) => `frr defaults datacenter
hostname lab${me.index}
service integrated-vtysh-config
router bgp ${asn}
 bgp router-id ${me.lanAddress}
 no bgp ebgp-requires-policy
 neighbor ${peer.lanAddress} remote-as ${asn}
!
`;

async function bgpState(node: SshNode, peer: string): Promise<string> {
  const out = await h.inNode(node, ['vtysh', '-c', 'show bgp summary json']);
  const summary = JSON.parse(out) as { ipv4Unicast?: { peers?: Record<string, { state?: string }> } };
  return summary.ipv4Unicast?.peers?.[peer]?.state ?? 'absent';
}

async function waitFor<T>(what: string, read: () => Promise<T>, ok: (v: T) => boolean, ms: number): Promise<T> {
  const until = Date.now() + ms;
  let last = await read();
  while (!ok(last)) {
    if (Date.now() > until) throw new Error(`${what}: still ${JSON.stringify(last)} after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 250));
    last = await read();
  }
  return last;
}

describe('lan: one shared L2 segment', () => {
  test('each node has eth1 on the /24, the switch side is this process, nodes reach each other and sshd answers there', async () => {
    expect(h.lan).not.toBeNull();
    const lan = h.lan!;
    const base = lan.cidr.replace(/\.0\/24$/, '');
    expect(lan.prefixLen).toBe(24);
    expect(lan.switchAddress).toBe(`${base}.254`);
    expect(h.nodes.map((n) => n.lanAddress)).toEqual([`${base}.1`, `${base}.2`, `${base}.3`]);
    for (const node of h.nodes) {
      const addrs = JSON.parse(await h.inNode(node, ['ip', '-j', '-4', 'addr', 'show', 'dev', 'eth1'])) as Array<{ addr_info: Array<{ local: string; prefixlen: number }> }>;
      expect(addrs[0].addr_info).toEqual([expect.objectContaining({ local: node.lanAddress, prefixlen: 24 })]);
    }
    // Node 0 to node 1 directly over the segment (not through the root namespace's /31s).
    const direct = await sh(h.nodes[0], `timeout 5 bash -c '</dev/tcp/${h.nodes[1].lanAddress}/22' && ip -4 route get ${h.nodes[1].lanAddress}`);
    expect(direct.exitCode).toBe(0);
    expect(direct.stdout).toMatch(/dev eth1/);
    // This process reaches each node's sshd on its lan address, through the bridge.
    // The bridge lives in the switch namespace: this machine's firewall never sees bridged frames.
    const ports = JSON.parse(spawnSync('ip', ['-n', lan.netns, '-j', 'link', 'show', 'master', lan.bridge]).stdout.toString()) as Array<{ ifname: string }>;
    expect(ports).toHaveLength(4);
    const rootLink = JSON.parse(spawnSync('ip', ['-j', 'link', 'show', 'dev', lan.rootLink]).stdout.toString()) as Array<{ master?: string }>;
    expect(rootLink[0].master).toBeUndefined();
    const root = JSON.parse(spawnSync('ip', ['-j', '-4', 'addr', 'show', 'dev', lan.rootLink]).stdout.toString()) as Array<{ addr_info: Array<{ local: string }> }>;
    expect(root[0].addr_info.map((a) => a.local)).toEqual([lan.switchAddress]);
    expect(h.nodes[2].delay?.ms).toBe(20);
    const overLan = await sh(h.nodes[2], 'ip -j -4 addr show dev eth1', h.nodes[2].lanAddress!);
    expect(overLan.exitCode).toBe(0);
  });

  test('setLanLink cuts one node off the segment while SSH over its eth0 address still works', async () => {
    const [a, b] = h.nodes;
    const probe = `timeout 2 bash -c '</dev/tcp/${b.lanAddress}/22'`;
    await h.setLanLink(b, false);
    try {
      expect((await sh(a, probe)).exitCode).not.toBe(0);
      expect((await sh(b, 'true')).exitCode).toBe(0);
    } finally {
      await h.setLanLink(b, true);
    }
    expect((await sh(a, probe)).exitCode).toBe(0);
  });

  test('fault nodes on the lan: no-sshd refuses and silent hangs on the lan address too', async () => {
    const f = await startSshNodes('lan-faults', [{ kind: 'no-sshd' }, { kind: 'silent' }], { lan: true, frr: true });
    try {
      // Without an sshd there is no session to hold a mount namespace: no private files on these.
      expect(f.nodes.map((n) => n.frrFiles)).toEqual([null, null]);
      const code = async (node: SshNode) => {
        try {
          await connect({ host: node.lanAddress!, username: 'root', privateKey: f.clientPrivateKey, hostKey: { trustOnFirstUse: true }, connectTimeoutMs: 500 });
        } catch (err) {
          return err instanceof SshError ? err.code : String(err);
        }
        return 'connected';
      };
      expect(await code(f.nodes[0])).toBe('CONNECTION_REFUSED');
      expect(await code(f.nodes[1])).toBe('CONNECT_TIMEOUT');
    } finally {
      await f.stop();
    }
  });
});

describe('per-node FRR files', () => {
  test('/etc/frr is seeded from the package, owned frr:frr, private to each node; this machine keeps its own', async () => {
    const hostConf = readFileSync('/etc/frr/frr.conf', 'utf8');
    const [a, b] = h.nodes;
    const ls = await sh(a, 'stat -c "%n %U:%G %a" /etc/frr /etc/frr/daemons /etc/frr/frr.conf /etc/frr/vtysh.conf /run/frr');
    expect(ls.stdout.trim().split('\n')).toEqual([
      '/etc/frr frr:frr 750',
      '/etc/frr/daemons frr:frr 640',
      '/etc/frr/frr.conf frr:frr 640',
      '/etc/frr/vtysh.conf frr:frr 640',
      '/run/frr frr:frr 755',
    ]);
    expect((await sh(a, 'cat /etc/frr/frr.conf')).stdout).toBe(hostConf);
    expect((await sh(a, "printf 'hostname node-a\\n' > /etc/frr/frr.conf && touch /run/frr/mark")).exitCode).toBe(0);
    expect(await fs.readFile(path.join(a.frrFiles!.etc, 'frr.conf'), 'utf8')).toBe('hostname node-a\n');
    expect((await sh(b, 'cat /etc/frr/frr.conf; ls /run/frr')).stdout).toBe(hostConf);
    expect(readFileSync('/etc/frr/frr.conf', 'utf8')).toBe(hostConf);
    expect(spawnSync('ls', ['/run/frr']).stdout.toString()).not.toMatch(/mark/);
    await fs.copyFile('/etc/frr/frr.conf', path.join(a.frrFiles!.etc, 'frr.conf'));
    await fs.rm(path.join(a.frrFiles!.run, 'mark'));
  });

  test('dpkg-divert is recorded and moves the node file aside and back; it never touches this machine', async () => {
    const node = h.nodes[1];
    const before = spawnSync('dpkg-divert', ['--list', '/etc/frr/*']).stdout.toString();
    const add = await sh(node, 'command -v dpkg-divert && dpkg-divert --add --rename --divert /etc/frr/frr.conf.distrib /etc/frr/frr.conf');
    expect(add.exitCode).toBe(0);
    expect(add.stdout).toBe(`${path.join(node.dir, 'bin', 'dpkg-divert')}\nAdding 'local diversion of /etc/frr/frr.conf to /etc/frr/frr.conf.distrib'\n`);
    expect((await sh(node, 'ls /etc/frr')).stdout.split('\n')).toEqual(['daemons', 'frr.conf.distrib', 'vtysh.conf', '']);
    const list = await sh(node, "dpkg-divert --list '/etc/frr/*'; dpkg-divert --truename /etc/frr/frr.conf");
    expect(list.stdout).toBe('local diversion of /etc/frr/frr.conf to /etc/frr/frr.conf.distrib\n/etc/frr/frr.conf.distrib\n');
    // Adding the same diversion again is a no-op; a different target clashes, as the real one says.
    expect((await sh(node, 'dpkg-divert --add --rename --divert /etc/frr/frr.conf.distrib /etc/frr/frr.conf')).stdout).toMatch(/^Leaving/);
    expect((await sh(node, 'dpkg-divert --add --divert /etc/frr/other /etc/frr/frr.conf')).exitCode).toBe(2);
    // As dpkg's own: a rename never overwrites a file in the way (exit 2, diversion kept).
    const blocked = await sh(node, 'echo new > /etc/frr/frr.conf && dpkg-divert --remove --rename /etc/frr/frr.conf');
    expect([blocked.exitCode, blocked.stderr]).toEqual([2, "dpkg-divert: error: rename involves overwriting '/etc/frr/frr.conf' with\n  different file '/etc/frr/frr.conf.distrib', not allowed\n"]);
    expect((await sh(node, 'dpkg-divert --truename /etc/frr/frr.conf')).stdout).toBe('/etc/frr/frr.conf.distrib\n');
    // The rollout's teardown: its own file goes, then the original comes back.
    expect((await sh(node, 'rm -f /etc/frr/frr.conf && dpkg-divert --local --rename --divert /etc/frr/frr.conf.distrib --remove /etc/frr/frr.conf')).exitCode).toBe(0);
    expect((await sh(node, 'ls /etc/frr; cat /etc/frr/frr.conf')).stdout).toBe('daemons\nfrr.conf\nvtysh.conf\n' + readFileSync('/etc/frr/frr.conf', 'utf8'));
    expect((await sh(node, 'dpkg-divert --remove /etc/frr/frr.conf')).stdout).toMatch(/^No diversion/);
    expect((await h.calls(node)).filter((c) => c.command === 'dpkg-divert').map((c) => c.args)).toEqual([
      '--add --rename --divert /etc/frr/frr.conf.distrib /etc/frr/frr.conf',
      "--list /etc/frr/*",
      '--truename /etc/frr/frr.conf',
      '--add --rename --divert /etc/frr/frr.conf.distrib /etc/frr/frr.conf',
      '--add --divert /etc/frr/other /etc/frr/frr.conf',
      '--remove --rename /etc/frr/frr.conf',
      '--truename /etc/frr/frr.conf',
      '--local --rename --divert /etc/frr/frr.conf.distrib --remove /etc/frr/frr.conf',
      '--remove /etc/frr/frr.conf',
    ]);
    expect(spawnSync('dpkg-divert', ['--list', '/etc/frr/*']).stdout.toString()).toBe(before);
    await h.setFakeExit(node, 'dpkg-divert', 2);
    expect((await sh(node, 'dpkg-divert --add /etc/frr/frr.conf')).exitCode).toBe(2);
    await h.setFakeExit(node, 'dpkg-divert', 0);
  });
});

describe('frr: systemctl runs real FRR daemons per node', () => {
  test('restart starts zebra, bgpd and staticd from the node config; BGP comes up over the lan; stop kills them', async () => {
    const [a, b] = h.nodes;
    for (const [me, peer] of [[a, b], [b, a]] as const) {
      await fs.writeFile(path.join(me.frrFiles!.etc, 'frr.conf'), bgpConf(me, peer, 65010));
      expect((await sh(me, 'systemctl restart frr')).exitCode).toBe(0);
    }
    const daemons = await h.frrDaemons(a);
    expect(daemons.map((d) => d.daemon)).toEqual(['bgpd', 'staticd', 'zebra']);
    expect((await sh(a, 'systemctl is-active frr')).stdout).toBe('active\n');
    // Real vtysh in an SSH session talks to this node's daemons: the running config is its own.
    expect((await sh(a, 'vtysh -c "show running-config"')).stdout).toMatch(new RegExp(`^ bgp router-id ${a.lanAddress}$`, 'm'));
    expect((await sh(b, 'vtysh -c "show running-config"')).stdout).toMatch(new RegExp(`^ bgp router-id ${b.lanAddress}$`, 'm'));
    await waitFor('bgp a->b', () => bgpState(a, b.lanAddress!), (s) => s === 'Established', 30_000);
    await waitFor('bgp b->a', () => bgpState(b, a.lanAddress!), (s) => s === 'Established', 30_000);

    // restart = new processes; stop leaves none, and the session's systemctl says so.
    expect((await sh(a, 'systemctl restart frr.service')).exitCode).toBe(0);
    const again = await h.frrDaemons(a);
    expect(again.map((d) => d.daemon)).toEqual(['bgpd', 'staticd', 'zebra']);
    for (const d of again) expect(daemons.find((x) => x.daemon === d.daemon)?.pid).not.toBe(d.pid);
    expect((await sh(a, 'systemctl stop frr')).exitCode).toBe(0);
    expect(await h.frrDaemons(a)).toEqual([]);
    expect(await leftovers([], [], [...daemons, ...again].map((d) => d.pid))).toEqual([]);
    const inactive = await sh(a, 'systemctl is-active frr');
    expect([inactive.exitCode, inactive.stdout]).toEqual([3, 'inactive\n']);
    // The peer notices: its session to a is no longer Established.
    await waitFor('bgp b->a down', () => bgpState(b, a.lanAddress!), (s) => s !== 'Established', 30_000);
    expect((await h.calls(a)).filter((c) => c.command === 'systemctl').map((c) => c.args)).toEqual([
      'restart frr', 'is-active frr', 'restart frr.service', 'stop frr', 'is-active frr',
    ]);
  }, 90_000);
});

describe('cleanup with FRR running', () => {
  const linksOf = (set: SshNodes) => [set.lan!.rootLink, ...set.nodes.map((n) => `snh${n.netns.split('-')[1]}${n.index}`)];
  const startFrr = async (set: SshNodes) => {
    for (const node of set.nodes) {
      const r = await withSession(
        { host: node.lanAddress!, username: set.username, privateKey: set.clientPrivateKey, hostKey: { fingerprint: node.hostKeyFingerprint! } },
        (s) => s.exec('systemctl start frr && systemctl is-active frr'),
      );
      expect([r.exitCode, r.stdout]).toEqual([0, 'active\n']);
    }
    const pids = (await Promise.all(set.nodes.map((n) => set.frrDaemons(n)))).flat().map((d) => d.pid);
    expect(pids).toHaveLength(3 * set.nodes.length);
    return pids;
  };

  test('stop() kills every FRR daemon, namespace, bridge and veth; so does the sweep of a run whose owner died', async () => {
    const a = await startSshNodes('frr-cleanup', [{}, {}], { lan: true, frr: true });
    const aPids = await startFrr(a);
    await a.stop();
    expect(await leftovers([...a.nodes.map((n) => n.netns), a.lan!.netns], linksOf(a), aPids)).toEqual([]);

    const b = await startSshNodes('frr-stale', [{}], { lan: true, frr: true });
    const bPids = await startFrr(b);
    const registry = path.join(os.tmpdir(), 'ssh-nodes-registry');
    const file = path.join(registry, `${b.nodes[0].netns.split('-')[1]}.json`);
    const reg = JSON.parse(await fs.readFile(file, 'utf8')) as { ownerPid: number };
    reg.ownerPid = spawnSync('true').pid ?? 999999;
    await fs.writeFile(file, JSON.stringify(reg));
    expect(await sweepStaleSshNodes()).toBeGreaterThanOrEqual(1);
    expect(await leftovers([...b.nodes.map((n) => n.netns), b.lan!.netns], linksOf(b), bPids)).toEqual([]);
    await b.stop();
  }, 60_000);
});

describe('frr: reload and a config FRR refuses', () => {
  test('reload applies a changed frr.conf to the running daemons (same PIDs); reload of a stopped frr fails as systemd says', async () => {
    const [, , c] = h.nodes;
    const conf = bgpConf(c, h.nodes[0], 65020);
    await fs.writeFile(path.join(c.frrFiles!.etc, 'frr.conf'), conf);
    const stopped = await sh(c, 'systemctl reload frr');
    expect([stopped.exitCode, stopped.stderr]).toEqual([1, 'frr.service is not active, cannot reload.\n']);
    expect((await sh(c, 'systemctl start frr')).exitCode).toBe(0);
    const before = await h.frrDaemons(c);
    await fs.writeFile(path.join(c.frrFiles!.etc, 'frr.conf'), conf.replace('!\n', ` neighbor ${h.nodes[1].lanAddress} remote-as 65020\n!\n`));
    const reload = await sh(c, 'systemctl reload frr');
    expect(reload.exitCode).toBe(0);
    expect(await h.frrDaemons(c)).toEqual(before);
    expect((await sh(c, 'vtysh -c "show running-config"')).stdout).toContain(` neighbor ${h.nodes[1].lanAddress} remote-as 65020`);
    // `systemctl start` of a running frr changes nothing.
    expect((await sh(c, 'systemctl start frr')).exitCode).toBe(0);
    expect(await h.frrDaemons(c)).toEqual(before);
    // enable without --now only records; disable --now stops and enable --now starts.
    expect((await sh(c, 'systemctl enable frr && systemctl disable --now frr.service')).exitCode).toBe(0);
    expect(await h.frrDaemons(c)).toEqual([]);
    expect((await sh(c, 'systemctl enable --now frr && systemctl is-active frr')).stdout).toBe('active\n');
    expect((await sh(c, 'systemctl stop frr')).exitCode).toBe(0);
  }, 60_000);

  test('a frr.conf with a line FRR rejects fails the restart, with vtysh naming the line', async () => {
    const [, , c] = h.nodes;
    await fs.writeFile(path.join(c.frrFiles!.etc, 'frr.conf'), bgpConf(c, h.nodes[0], 65020) + 'router bgp 65020\n neighbour-typo 10.0.0.1\n!\n');
    const r = await sh(c, 'systemctl restart frr');
    expect(r.exitCode).toBe(1);
    expect(r.stderr).toContain('neighbour-typo');
    expect(r.stderr).toMatch(/frr: vtysh -b exited [1-9]/);
    expect((await sh(c, 'systemctl stop frr')).exitCode).toBe(0);
    expect(await h.frrDaemons(c)).toEqual([]);
  }, 60_000);
});

describe('frrDaemonsFile: Debian\'s own rule for which daemons run', () => {
  test('the package\'s daemons file (bgpd=no) starts zebra and staticd only; bgpd=yes and ospfd=yes start those', async () => {
    const d = await startSshNodes('frr-daemons-file', [{}], { frr: true, frrDaemonsFile: true });
    try {
      const node = d.nodes[0];
      const run = (cmd: string) => withSession(
        { host: node.address, username: d.username, privateKey: d.clientPrivateKey, hostKey: { fingerprint: node.hostKeyFingerprint! } },
        (s) => s.exec(cmd),
      );
      await fs.writeFile(path.join(node.frrFiles!.etc, 'frr.conf'), 'router bgp 65030\n!\nrouter ospf\n!\n');
      expect((await run('grep -E "^(bgpd|ospfd)=" /etc/frr/daemons && systemctl restart frr && systemctl is-active frr')).stdout).toBe('bgpd=no\nospfd=no\nactive\n');
      expect((await d.frrDaemons(node)).map((x) => x.daemon)).toEqual(['staticd', 'zebra']);
      expect((await run("sed -i -e 's/^bgpd=no/bgpd=yes/' -e 's/^ospfd=no/ospfd=yes/' /etc/frr/daemons && systemctl restart frr")).exitCode).toBe(0);
      expect((await d.frrDaemons(node)).map((x) => x.daemon)).toEqual(['bgpd', 'ospfd', 'staticd', 'zebra']);
      expect((await run('vtysh -c "show running-config"')).stdout).toMatch(/^router bgp 65030$[\s\S]*^router ospf$/m);
    } finally {
      await d.stop();
    }
  }, 60_000);
});
