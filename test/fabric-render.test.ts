/**
 * The fabric renderers against real FRR 8.4 (Debian package `frr`, installed by .ci/run) and
 * against golden files. Golden files are written with UPDATE_GOLDEN=1 and reviewed by eye; a
 * missing golden file fails the test.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  bgpMode, listenLimit, RenderError, SWITCH_NOS, vtepPoolCapacity,
  type FabricIntent, type FabricNodeIntent, type FabricSecrets, type OspfAuthType, type UnderlayMode,
} from '../src/modules/fabric/intent';
import { hmacProbeSnippet, renderAllHostFrr, renderHostFrr } from '../src/modules/fabric/render/host-frr';
import { renderAllListenRangeSnippets, renderListenRangeSnippet, renderSwitchConfig } from '../src/modules/fabric/render/switch';

const VTYSH = '/usr/bin/vtysh';
const BGPD = '/usr/lib/frr/bgpd';
const OSPFD = '/usr/lib/frr/ospfd';
const GOLDEN_DIR = path.join(__dirname, 'fixtures', 'fabric');
const UPDATE = process.env.UPDATE_GOLDEN === '1';

function intent(over: Partial<FabricIntent> = {}): FabricIntent {
  return {
    asn: 65000,
    underlay: 'ospf',
    ospf: { area: '0.0.0.0', helloInterval: 1, deadInterval: 3, autoRefBw: 100000, fabricInterface: 'eth1', authType: 'none', authKeyId: 1 },
    bfdEnabled: false,
    advertiseAllVni: true,
    bgpPasswordSet: false,
    ospfAuthKeySet: false,
    vtepPoolBase: '10.255.0.1',
    vtepPoolPrefixLen: 24,
    managementCidr: '192.168.111.0/24',
    underlayCidr: '10.60.200.0/24',
    vtepInterface: 'vtep0',
    switch: { nos: 'sonic', name: 'leaf1', role: 'leaf', peeringIp: '10.255.0.254', asn: 65000, hostFacingInterface: 'Ethernet0' },
    externalRouteReflector: false,
    expectedNodes: 120,
    vxlanMtu: 9000,
    publicMtu: 1500,
    ...over,
  };
}

const NODES: FabricNodeIntent[] = [
  { hostname: 'gw1', vtepIp: '10.255.0.1', underlayInterface: '', underlayIp: '192.168.111.11', isGateway: true },
  { hostname: 'node2', vtepIp: '10.255.0.2', underlayInterface: 'eth2', underlayIp: '192.168.111.12', isGateway: false },
];

interface Combo {
  name: string;
  intent: FabricIntent;
  secrets: FabricSecrets;
  node: FabricNodeIntent;
}

/** Every combination the plan can produce: the cross product, with auth only where OSPF runs. */
function combos(): Combo[] {
  const out: Combo[] = [];
  for (const mode of ['ibgp', 'ebgp'] as const) {
    for (const underlay of ['ospf', 'bgp'] as UnderlayMode[]) {
      const auths: OspfAuthType[] = underlay === 'ospf' ? ['none', 'message-digest'] : ['none'];
      for (const auth of auths) {
        for (const bfd of [false, true]) {
          for (const password of [false, true]) {
            for (const external of [false, true]) {
              const i = intent({
                underlay,
                bfdEnabled: bfd,
                externalRouteReflector: external,
                bgpPasswordSet: password,
                ospfAuthKeySet: auth !== 'none',
                ospf: { ...intent().ospf, authType: auth },
                switch: { ...intent().switch, asn: mode === 'ebgp' ? 65100 : 65000 },
              });
              const secrets: FabricSecrets = {
                ...(password ? { bgpPassword: 'bgp-Secret.42' } : {}),
                ...(auth !== 'none' ? { ospfAuthKey: 'ospfKey16chars!!' } : {}),
              };
              // With the software RR both sides exist (gateway = reflector, node2 = client); with
              // the external RR every host, the gateway included, is a client.
              const roles: Array<[string, FabricNodeIntent]> = external ? [['client', NODES[1]!]] : [['rr', NODES[0]!], ['client', NODES[1]!]];
              for (const [role, node] of roles) {
                out.push({
                  name: `${mode}-${underlay}-${auth === 'none' ? 'noauth' : 'md5'}-${bfd ? 'bfd' : 'nobfd'}-${password ? 'pw' : 'nopw'}-${external ? 'extrr' : 'gwrr'}-${role}`,
                  intent: i, secrets, node,
                });
              }
            }
          }
        }
      }
    }
  }
  return out;
}

let work: string;
beforeAll(() => {
  work = mkdtempSync(path.join(tmpdir(), 'fabric-render-'));
  // The daemons drop to the frr user before reading -f: a 0700 folder would make them read nothing
  // and report nothing (the "checks can fail" test below catches exactly that).
  chmodSync(work, 0o755);
});
afterAll(() => {
  rmSync(work, { recursive: true, force: true });
});

let fileSeq = 0;
function writeTemp(text: string): string {
  const file = path.join(work, `c${fileSeq++}.conf`);
  writeFileSync(file, text);
  return file;
}

/** `vtysh -C -f`: FRR's own grammar check of the whole file; exit 0 and nothing on stderr. */
function vtyshCheck(text: string): { ok: boolean; output: string } {
  const r = spawnSync(VTYSH, ['-C', '-f', writeTemp(text)], { encoding: 'utf8' });
  return { ok: r.status === 0, output: `${r.stdout}${r.stderr}` };
}

/**
 * A config split the way integrated vtysh hands it to each daemon: the header plus the top-level
 * blocks that daemon owns. Fed whole, a daemon stops at the first foreign block (its `exit` leaves
 * config mode), so a whole-file dry run would silently skip everything after it.
 */
function daemonPart(text: string, owns: (firstLine: string) => boolean): string {
  const lines = text.split('\n');
  const out: string[] = [];
  let keep = false;
  for (const line of lines) {
    if (line.startsWith('frr ') || line.startsWith('hostname ')) { out.push(line); continue; }
    if (line.length > 0 && line[0] !== ' ' && line[0] !== '!') {
      if (line === 'exit') { if (keep) out.push(line); keep = false; continue; }
      if (line === 'end') continue;
      keep = owns(line);
    }
    if (keep) out.push(line);
  }
  return out.join('\n') + '\n';
}

const DAEMON_ERROR = ['No such command', 'Config Failed', 'Unknown command', 'Ambiguous', 'Error'];

/** The daemon's own semantic pass (`--dryrun`): it exits 0 either way, so its complaints are read. */
function daemonCheck(daemon: string, part: string): { ok: boolean; output: string } {
  const pid = path.join(work, `${path.basename(daemon)}-${fileSeq}.pid`);
  const r = spawnSync(daemon, ['--dryrun', '-f', writeTemp(part), '-i', pid], { encoding: 'utf8' });
  const output = `${r.stdout}${r.stderr}`;
  const bad = output.split('\n').some((l) => l.startsWith('%') || DAEMON_ERROR.some((e) => l.includes(e)));
  return { ok: r.status === 0 && !bad, output };
}

const bgpOwns = (l: string): boolean => l.startsWith('router bgp');
const ospfOwns = (l: string): boolean => l.startsWith('router ospf') || l.startsWith('interface ') || l.startsWith('key chain');

/** Fails with FRR's own words, so a broken rendering shows the offending line. */
function expectFrrAccepts(name: string, text: string, withOspf: boolean): void {
  const v = vtyshCheck(text);
  if (!v.ok) throw new Error(`${name}: vtysh -C refused it:\n${v.output}\n---\n${text}`);
  const b = daemonCheck(BGPD, daemonPart(text, bgpOwns));
  if (!b.ok) throw new Error(`${name}: bgpd --dryrun refused it:\n${b.output}`);
  if (withOspf) {
    const o = daemonCheck(OSPFD, daemonPart(text, ospfOwns));
    if (!o.ok) throw new Error(`${name}: ospfd --dryrun refused it:\n${o.output}`);
  }
}

function golden(name: string, text: string): void {
  const file = path.join(GOLDEN_DIR, name);
  if (UPDATE) {
    mkdirSync(GOLDEN_DIR, { recursive: true });
    writeFileSync(file, text);
  }
  expect(existsSync(file)).toBe(true);
  expect(text).toBe(readFileSync(file, 'utf8'));
}

describe('real FRR is here', () => {
  test('vtysh, bgpd and ospfd are installed (a missing FRR fails, it does not skip)', () => {
    for (const bin of [VTYSH, BGPD, OSPFD]) expect(existsSync(bin)).toBe(true);
  });

  test('the checks can fail: FRR refuses a bad line and a bad address', () => {
    expect(vtyshCheck('router bgp 65000\n neighbor 10.0.0.1 remote-ass 65000\nexit\n').ok).toBe(false);
    // Grammar passes this address; the daemon's semantic pass does not.
    const badAddress = 'router bgp 65000\n neighbor 198.51.100.300 remote-as 65000\nexit\n';
    expect(vtyshCheck(badAddress).ok).toBe(true);
    expect(daemonCheck(BGPD, badAddress).ok).toBe(false);
    // A listen range before its peer group exists.
    expect(daemonCheck(BGPD, 'router bgp 65000\n bgp listen range 10.0.0.0/24 peer-group H\n neighbor H peer-group\nexit\n').ok).toBe(false);
  });
});

describe('host frr.conf', () => {
  const all = combos();

  test('the combinations cover iBGP/eBGP, OSPF/BGP underlay, none/MD5, BFD, RR and RR client', () => {
    const names = all.map((c) => c.name);
    for (const part of ['ibgp-', 'ebgp-', '-ospf-', '-bgp-', '-noauth-', '-md5-', '-bfd-', '-nobfd-', '-extrr-', '-gwrr-', '-rr', '-client']) {
      expect(names.some((n) => n.includes(part))).toBe(true);
    }
    expect(all.length).toBe(72);
  });

  test.each(combos().map((c) => [c.name, c] as const))('%s is accepted by vtysh -C, bgpd and ospfd --dryrun', (_name, c) => {
    const gateway = c.intent.externalRouteReflector ? undefined : NODES[0];
    const text = renderHostFrr(c.intent, c.node, c.secrets, gateway);
    expectFrrAccepts(c.name, text, c.intent.underlay === 'ospf');
  });

  test('golden files for representative combinations', () => {
    const picks = [
      'ibgp-ospf-noauth-nobfd-nopw-gwrr-rr',
      'ibgp-ospf-noauth-nobfd-nopw-gwrr-client',
      'ibgp-ospf-md5-bfd-pw-extrr-client',
      'ebgp-ospf-md5-bfd-pw-gwrr-rr',
      'ebgp-ospf-noauth-nobfd-nopw-extrr-client',
      'ibgp-bgp-noauth-bfd-pw-gwrr-rr',
      'ibgp-bgp-noauth-nobfd-nopw-gwrr-client',
      'ebgp-bgp-noauth-nobfd-pw-extrr-client',
    ];
    for (const pick of picks) {
      const c = all.find((x) => x.name === pick);
      if (!c) throw new Error(`no combination ${pick}`);
      golden(`host-${pick}.conf`, renderHostFrr(c.intent, c.node, c.secrets, c.intent.externalRouteReflector ? undefined : NODES[0]));
    }
  });

  test('the software RR listens on the VTEP pool (OSPF) or the management subnet (bgp) with a limit above expected_nodes', () => {
    const ospf = renderHostFrr(intent(), NODES[0]!, {}, NODES[0]);
    expect(ospf).toContain(' bgp listen range 10.255.0.0/24 peer-group HOSTS\n');
    const limit = listenLimit(intent());
    expect(limit).toBeGreaterThan(120);
    expect(ospf).toContain(` bgp listen limit ${limit}\n`);
    const bgp = renderHostFrr(intent({ underlay: 'bgp' }), NODES[0]!, {}, NODES[0]);
    expect(bgp).toContain(' bgp listen range 192.168.111.0/24 peer-group HOSTS\n');
    expect(bgp).toContain('  network 10.255.0.1/32\n');
    expect(bgp).not.toContain('router ospf');
    // Legacy rows without expected_nodes: the whole pool can connect.
    expect(listenLimit({ expectedNodes: 0, vtepPoolPrefixLen: 22 })).toBeGreaterThanOrEqual(vtepPoolCapacity(22));
    // A client never listens.
    expect(renderHostFrr(intent(), NODES[1]!, {}, NODES[0])).not.toContain('bgp listen');
  });

  test('datacenter timers: the 120 s default retry never applies', () => {
    const text = renderHostFrr(intent(), NODES[1]!, {}, NODES[0]);
    expect(text).toContain('frr defaults datacenter\n');
    expect(text).toContain(' timers bgp 3 9\n');
    expect(text).toContain(' neighbor RR timers connect 10\n');
  });

  test('a client peers with the gateway (software RR) or the switch (external RR)', () => {
    expect(renderHostFrr(intent(), NODES[1]!, {}, NODES[0])).toContain(' neighbor 10.255.0.1 peer-group RR\n');
    expect(renderHostFrr(intent({ underlay: 'bgp' }), NODES[1]!, {}, NODES[0])).toContain(' neighbor 192.168.111.11 peer-group RR\n');
    const ext = renderHostFrr(intent({ externalRouteReflector: true }), NODES[0]!, {});
    expect(ext).toContain(' neighbor 10.255.0.254 peer-group RR\n');
    expect(ext).not.toContain('route-reflector-client');
  });

  test('hmac-sha-256 is rendered, and this FRR 8.4 refuses it (the capability probe answers false)', () => {
    const i = intent({ ospf: { ...intent().ospf, authType: 'hmac-sha-256' }, ospfAuthKeySet: true });
    const text = renderHostFrr(i, NODES[1]!, { ospfAuthKey: 'a-long-hmac-key' }, NODES[0]);
    expect(text).toContain(' ip ospf authentication key-chain fabric-ospf\n');
    expect(text).toContain('  cryptographic-algorithm hmac-sha-256\n');
    golden('host-ibgp-ospf-hmac-client.conf', text);
    const v = vtyshCheck(text);
    expect(v.ok).toBe(false);
    expect(v.output).toContain('ip ospf authentication key-chain');
    expect(vtyshCheck(hmacProbeSnippet('eth1')).ok).toBe(false);
  });

  test('deterministic: same input, same bytes; a changed input changes the bytes', () => {
    const a = renderAllHostFrr(intent(), NODES, { bgpPassword: 'pw' });
    const b = renderAllHostFrr(intent(), NODES.map((n) => ({ ...n })), { bgpPassword: 'pw' });
    expect([...a.entries()]).toEqual([...b.entries()]);
    const c = renderAllHostFrr(intent({ expectedNodes: 121 }), NODES, { bgpPassword: 'pw' });
    expect(c.get('gw1')).not.toBe(a.get('gw1'));
  });

  test('bad input is a RenderError naming the field, never repeating a secret', () => {
    const secret = 'has space';
    let err: unknown;
    try { renderHostFrr(intent(), NODES[1]!, { bgpPassword: secret }, NODES[0]); } catch (e) { err = e; }
    expect(err).toBeInstanceOf(RenderError);
    expect((err as RenderError).field).toBe('bgp_password');
    expect((err as Error).message).not.toContain(secret);
    const md5 = intent({ ospf: { ...intent().ospf, authType: 'message-digest' } });
    expect(() => renderHostFrr(md5, NODES[1]!, {}, NODES[0])).toThrow('ospf_auth_key');
    expect(() => renderHostFrr(md5, NODES[1]!, { ospfAuthKey: 'x'.repeat(17) }, NODES[0])).toThrow('ospf_auth_key');
    expect(() => renderHostFrr(intent(), { ...NODES[1]!, hostname: 'bad\nline' }, {}, NODES[0])).toThrow('hostname');
    expect(() => renderHostFrr(intent(), NODES[1]!, {})).toThrow('nodes');
    expect(() => renderAllHostFrr(intent(), [NODES[1]!], {})).toThrow('nodes');
    expect(() => renderHostFrr(intent({ externalRouteReflector: true, switch: { ...intent().switch, peeringIp: '' } }), NODES[1]!, {}))
      .toThrow('fabric_switch_peering_ip');
    expect(() => renderHostFrr(intent({ vtepPoolBase: '10.255.0.300' }), NODES[0]!, {}, NODES[0])).toThrow('router_id_base');
  });

  test('1,000 nodes render (a correctness check at scale: every node gets its own router id)', () => {
    const nodes: FabricNodeIntent[] = [];
    for (let k = 0; k < 1000; k++) {
      nodes.push({ hostname: `n${k}`, vtepIp: `10.255.${k >> 8}.${(k & 255) || 1}`, underlayInterface: '', underlayIp: `192.168.${k >> 8}.${k & 255}`, isGateway: k === 0 });
    }
    const out = renderAllHostFrr(intent({ vtepPoolPrefixLen: 22, expectedNodes: 1000 }), nodes, {});
    expect(out.size).toBe(1000);
    expect(out.get('n300')).toContain(' bgp router-id 10.255.1.44\n');
    expect(out.get('n0')).toContain(` bgp listen limit ${listenLimit({ expectedNodes: 1000, vtepPoolPrefixLen: 22 })}\n`);
  });
});

describe('switch config', () => {
  const variants: Array<[string, FabricIntent]> = [
    ['ibgp-extrr-ospf-md5-bfd', intent({ externalRouteReflector: true, bfdEnabled: true, bgpPasswordSet: true, ospfAuthKeySet: true, ospf: { ...intent().ospf, authType: 'message-digest' } })],
    ['ebgp-extrr-ospf', intent({ externalRouteReflector: true, switch: { ...intent().switch, asn: 65100 } })],
    ['ibgp-gwrr-bgp', intent({ underlay: 'bgp', switch: { ...intent().switch, peeringIp: '192.168.111.254' } })],
    ['ebgp-gwrr-ospf-nointerface', intent({ switch: { ...intent().switch, asn: 65100, hostFacingInterface: '' } })],
  ];

  test.each(SWITCH_NOS.flatMap((nos) => variants.map(([name, i]) => [nos, name, i] as const)))('%s %s matches its golden file', (nos, name, i) => {
    golden(`switch-${nos}-${name}.txt`, renderSwitchConfig(i, nos));
  });

  test.each(variants)('sonic and cumulus (FRR) %s are accepted by real FRR', (name, i) => {
    for (const nos of ['sonic', 'cumulus'] as const) expectFrrAccepts(`${nos}-${name}`, renderSwitchConfig(i, nos), i.underlay === 'ospf');
  });

  test('the switch side never carries a secret, only a reminder of which setting to copy', () => {
    const i = variants[0]![1];
    for (const nos of SWITCH_NOS) {
      const text = renderSwitchConfig(i, nos);
      expect(text).not.toContain('bgp-Secret.42');
      expect(text).toContain('copy bgp_password from the control plane');
    }
  });

  test('roles: RR client config only for the iBGP external RR; eBGP keeps EVPN next hops', () => {
    const [rr, ebgp, gw] = [variants[0]![1], variants[1]![1], variants[2]![1]];
    expect(bgpMode(ebgp)).toBe('ebgp');
    expect(renderSwitchConfig(rr, 'sonic')).toContain('  neighbor HOSTS route-reflector-client\n');
    expect(renderSwitchConfig(gw, 'sonic')).not.toContain('route-reflector-client');
    expect(renderSwitchConfig(ebgp, 'sonic')).toContain('  neighbor HOSTS attribute-unchanged next-hop\n');
    expect(renderSwitchConfig(ebgp, 'eos')).toContain('      neighbor HOSTS next-hop-unchanged\n');
    expect(renderSwitchConfig(ebgp, 'nxos')).toContain('  set ip next-hop unchanged\n');
    expect(renderSwitchConfig(gw, 'eos')).toContain('   bgp listen range 192.168.111.0/24 peer-group HOSTS remote-as 65000\n');
  });
});

describe('listen-range snippet for the VTEP-pool ack gate', () => {
  const before = intent();
  const after = intent({ vtepPoolBase: '10.254.0.0', vtepPoolPrefixLen: 22, expectedNodes: 700 });

  test.each(SWITCH_NOS.map((n) => [n] as const))('%s snippet matches its golden file and its sha256', (nos) => {
    const s = renderListenRangeSnippet(before, after, nos);
    golden(`snippet-${nos}.txt`, `${s.snippet}# verify: ${s.verifyCommand}\n`);
    expect(s.sha256).toBe(createHash('sha256').update(s.snippet).digest('hex'));
    expect(s.snippet).toContain('10.254.0.0/22');
    expect(s.snippet).toContain('10.255.0.0/24');
  });

  test('the FRR snippet (sonic, cumulus) is accepted by real FRR after the switch config it changes', () => {
    for (const nos of ['sonic', 'cumulus'] as const) {
      const s = renderListenRangeSnippet(before, after, nos);
      const base = renderSwitchConfig(intent({ externalRouteReflector: true }), nos).replace(/end\n$/, '');
      expectFrrAccepts(`${nos}-snippet`, `${base}${s.snippet}end\n`, false);
    }
  });

  test('one snippet per NOS; the hash follows the pool, and is stable for the same change', () => {
    const all = renderAllListenRangeSnippets(before, after);
    expect(all.map((s) => s.nos)).toEqual([...SWITCH_NOS]);
    // sonic and cumulus both run FRR: the same lines, the same hash; every other syntax differs.
    expect(all[0]!.sha256).toBe(all[1]!.sha256);
    expect(all[0]!.verifyCommand).not.toBe(all[1]!.verifyCommand);
    expect(new Set(all.map((s) => s.sha256)).size).toBe(SWITCH_NOS.length - 1);
    expect(renderAllListenRangeSnippets(before, after)).toEqual(all);
    const other = renderListenRangeSnippet(before, intent({ vtepPoolBase: '10.254.0.0', vtepPoolPrefixLen: 23, expectedNodes: 700 }), 'eos');
    expect(other.sha256).not.toBe(all[3]!.sha256);
  });
});
