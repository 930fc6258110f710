import type { ExecResult, SshSession } from '../clients/ssh';
import { shQuote } from '../clients/ssh';
import { VTEP_INTERFACE } from '../src/modules/fabric/render-intent';

/**
 * What a fabric rollout runs on one node, one function per named step. Every step is idempotent:
 * run again on a node it already changed, it leaves the node as it is (the rollout's retry and
 * re-apply rely on it). Nothing here knows a secret: the rendered frr.conf reaches the node on the
 * command's stdin, never on a command line (which `ps` shows) or in a message.
 */

export const FRR_CONF = '/etc/frr/frr.conf';
/** Where dpkg-divert keeps the distribution's frr.conf while ours is in place. */
export const FRR_CONF_DISTRIB = '/etc/frr/frr.conf.distrib';
const STAGED = '/etc/frr/frr.conf.rollout';
/** Debian's frrinit starts only the daemons /etc/frr/daemons enables, and the package ships bgpd=no. */
export const FRR_DAEMONS = '/etc/frr/daemons';
/** The daemons file as it was before the first rollout, put back by a teardown. */
const DAEMONS_BASELINE = '/etc/frr/daemons.rollout-baseline';

/** A step that did not do its job; `message` is what first_fail_error and the node's error show. */
export class StepFailure extends Error {
  override readonly name = 'StepFailure';
}

const INSTALL_TIMEOUT_MS = 10 * 60_000;
const COMMAND_TIMEOUT_MS = 60_000;
/** A failed command's message quotes at most this much of its last stderr line. */
const STDERR_TAIL = 200;

function lastLine(text: string): string {
  const lines = text.split('\n').map((l) => l.trim()).filter(Boolean);
  const line = lines[lines.length - 1] ?? '';
  return line.length > STDERR_TAIL ? `${line.slice(0, STDERR_TAIL)}...` : line;
}

/** Runs `command`; a non-zero exit is a StepFailure naming `what` and the exit status. */
async function must(session: SshSession, command: string, what: string, opts: { timeoutMs?: number; stdin?: string; quiet?: boolean } = {}): Promise<ExecResult> {
  const result = await session.exec(command, { timeoutMs: opts.timeoutMs ?? COMMAND_TIMEOUT_MS, stdin: opts.stdin });
  if (result.exitCode !== 0) {
    const status = result.exitCode === null ? `died of ${result.signal ?? 'a signal'}` : `exited ${result.exitCode}`;
    // `quiet`: the command saw the rendered config (stdin), whose checker may quote its lines.
    const detail = opts.quiet ? '' : lastLine(result.stderr);
    throw new StepFailure(`${what} ${status}${detail ? `: ${detail}` : ''}`);
  }
  return result;
}

export async function installFrr(session: SshSession): Promise<string> {
  await must(session, 'DEBIAN_FRONTEND=noninteractive apt-get install -y frr', '`apt-get install -y frr`', { timeoutMs: INSTALL_TIMEOUT_MS });
  return 'frr installed';
}

/**
 * Keeps the distribution's frr.conf beside ours (dpkg-divert --rename), so a package upgrade
 * never overwrites the rendered file and a teardown can put the original back. Adding the same
 * diversion again is a no-op for dpkg-divert.
 */
export async function divertConfig(session: SshSession): Promise<string> {
  await must(session, `dpkg-divert --local --rename --divert ${FRR_CONF_DISTRIB} --add ${FRR_CONF}`, '`dpkg-divert --add`');
  return `${FRR_CONF} diverted to ${FRR_CONF_DISTRIB}`;
}

/**
 * The VTEP loopback: a bridge (this kernel, like many minimal ones, has no `dummy` type) holding
 * exactly the node's VTEP /32; an address left from an earlier pool is removed.
 */
export async function ensureVtepInterface(session: SshSession, vtepIp: string): Promise<string> {
  const dev = VTEP_INTERFACE;
  const want = `${vtepIp}/32`;
  const script = [
    `ip link show dev ${dev} >/dev/null 2>&1 || ip link add ${dev} type bridge`,
    `for a in $(ip -4 -o addr show dev ${dev} | awk '{print $4}'); do [ "$a" = ${shQuote(want)} ] || ip addr del "$a" dev ${dev}; done`,
    `ip addr replace ${shQuote(want)} dev ${dev}`,
    `ip link set dev ${dev} up`,
  ].join(' && ');
  await must(session, script, `creating ${dev}`);
  return `${dev} holds ${want}`;
}

/**
 * Writes the rendered frr.conf: staged, checked by the node's own FRR (`vtysh -C`, grammar), then
 * moved into place, so a config FRR refuses never replaces a working one.
 */
export async function writeConfig(session: SshSession, config: string): Promise<string> {
  await must(session, `umask 027 && cat > ${STAGED} && (chgrp frr ${STAGED} 2>/dev/null || true)`, `writing ${STAGED}`, { stdin: config, quiet: true });
  const check = await session.exec(`vtysh -C -f ${STAGED} >/dev/null 2>&1`, { timeoutMs: COMMAND_TIMEOUT_MS });
  if (check.exitCode !== 0) {
    await session.exec(`rm -f ${STAGED}`, { timeoutMs: COMMAND_TIMEOUT_MS }).catch(() => undefined);
    throw new StepFailure(`FRR refused the rendered config (vtysh -C exited ${check.exitCode ?? check.signal})`);
  }
  await must(session, `mv -f ${STAGED} ${FRR_CONF}`, `installing ${FRR_CONF}`);
  return `${FRR_CONF} written (${config.split('\n').length} lines, checked by vtysh -C)`;
}

/**
 * Enables the daemons the rendered config needs in /etc/frr/daemons (the first rollout keeps the
 * original beside it for the teardown). Without this a stock Debian node restarts frr without
 * bgpd and its sessions never come up.
 */
export async function enableDaemons(session: SshSession, daemons: readonly string[]): Promise<string> {
  const names = daemons.filter((d) => /^[a-z]+d$/.test(d));
  const script = [
    `[ -e ${FRR_DAEMONS} ] || exit 0`,
    `[ -e ${DAEMONS_BASELINE} ] || cp -p ${FRR_DAEMONS} ${DAEMONS_BASELINE}`,
    `for d in ${names.join(' ')}; do if grep -q "^$d=" ${FRR_DAEMONS}; then sed -i "s/^$d=.*/$d=yes/" ${FRR_DAEMONS}; else echo "$d=yes" >> ${FRR_DAEMONS}; fi; done`,
  ].join(' && ');
  await must(session, script, `enabling ${names.join(', ')} in ${FRR_DAEMONS}`);
  return `${names.join(', ')} enabled in ${FRR_DAEMONS}`;
}

interface IpAddrEntry {
  ifname?: string;
  mtu?: number;
  addr_info?: { family?: string; local?: string }[];
}

/** The interface holding `address`, or the named one; with its MTU. */
export async function underlayOf(session: SshSession, iface: string, address: string): Promise<{ iface: string; mtu: number }> {
  const result = await must(session, 'ip -j addr show', '`ip -j addr show`');
  let links: IpAddrEntry[];
  try {
    links = JSON.parse(result.stdout) as IpAddrEntry[];
  } catch {
    throw new StepFailure('`ip -j addr show` did not print JSON');
  }
  const found = iface
    ? links.find((l) => l.ifname === iface)
    : links.find((l) => (l.addr_info ?? []).some((a) => a.family === 'inet' && a.local === address));
  if (!found?.ifname || typeof found.mtu !== 'number') {
    throw new StepFailure(iface ? `underlay interface ${iface} not found` : `no interface holds the node's address ${address}`);
  }
  return { iface: found.ifname, mtu: found.mtu };
}

export async function setMtu(session: SshSession, iface: string, mtu: number): Promise<void> {
  await must(session, `ip link set dev ${shQuote(iface)} mtu ${mtu}`, `setting the MTU of ${iface} to ${mtu}`);
}

export async function restartFrr(session: SshSession): Promise<string> {
  await must(session, 'systemctl restart frr', '`systemctl restart frr`');
  return 'frr restarted';
}

/** Per neighbour address, its BGP state, from every address family of `show bgp summary json`. */
export function neighbourStates(json: unknown): Map<string, string> {
  const states = new Map<string, string>();
  const visit = (value: unknown) => {
    if (!value || typeof value !== 'object') return;
    const peers = (value as { peers?: unknown }).peers;
    if (peers && typeof peers === 'object') {
      for (const [address, peer] of Object.entries(peers as Record<string, unknown>)) {
        const state = (peer as { state?: unknown } | null)?.state;
        if (typeof state === 'string' && states.get(address) !== 'Established') states.set(address, state);
      }
    }
    // Per-VRF output nests one level further ({ "default": { "ipv4Unicast": ... } }).
    for (const child of Object.values(value as Record<string, unknown>)) {
      if (child && typeof child === 'object' && child !== peers) visit(child);
    }
  };
  visit(json);
  return states;
}

/**
 * Polls `show bgp summary json` until every expected neighbour is Established or `waitMs` ran
 * out; then the first one that is not names the failure ("BGP neighbor X not Established").
 * With no static neighbour (the software route reflector without a switch peer: its peers come
 * and go through the listen range) it only requires bgpd to answer.
 */
export async function verifyBgp(session: SshSession, expected: readonly string[], waitMs: number, signal: AbortSignal, pollMs = 1000): Promise<string> {
  const until = Date.now() + waitMs;
  let last = new Map<string, string>();
  let answered = false;
  for (;;) {
    const result = await session.exec(`vtysh -c ${shQuote('show bgp summary json')}`, { timeoutMs: Math.max(1000, Math.min(COMMAND_TIMEOUT_MS, waitMs)) }).catch((err: unknown) => {
      if (signal.aborted) throw err;
      return null;
    });
    if (result && result.exitCode === 0) {
      try {
        last = neighbourStates(JSON.parse(result.stdout));
        answered = true;
      } catch {
        // bgpd still starting: vtysh printed something other than JSON
      }
    }
    const pending = expected.filter((ip) => last.get(ip) !== 'Established');
    if (answered && pending.length === 0) {
      return expected.length ? `BGP neighbor${expected.length > 1 ? 's' : ''} ${expected.join(', ')} Established` : 'bgpd answers (no static neighbour)';
    }
    if (Date.now() + pollMs > until) {
      if (pending.length > 0) throw new StepFailure(`BGP neighbor ${pending[0]} not Established`);
      throw new StepFailure('bgpd did not answer `show bgp summary json`');
    }
    await new Promise<void>((resolve) => {
      const onAbort = () => { clearTimeout(timer); resolve(); };
      const timer = setTimeout(() => { signal.removeEventListener('abort', onAbort); resolve(); }, pollMs);
      signal.addEventListener('abort', onAbort, { once: true });
    });
    if (signal.aborted) throw new StepFailure('aborted while waiting for BGP');
  }
}

// Teardown: each one a no-op on a node already at baseline.

export async function stopFrr(session: SshSession): Promise<string> {
  await must(session, 'systemctl stop frr', '`systemctl stop frr`');
  return 'frr stopped';
}

/**
 * Ours goes, the distribution's comes back through dpkg-divert --remove --rename (a no-op when
 * nothing was diverted), and the daemons file as it was before the first rollout.
 */
export async function restoreConfig(session: SshSession): Promise<string> {
  const result = await must(session, [
    `if [ -e ${FRR_CONF_DISTRIB} ]; then rm -f ${FRR_CONF}; echo restored; fi`,
    `rm -f ${STAGED}`,
    `dpkg-divert --local --rename --divert ${FRR_CONF_DISTRIB} --remove ${FRR_CONF} >/dev/null`,
    `if [ -e ${DAEMONS_BASELINE} ]; then mv -f ${DAEMONS_BASELINE} ${FRR_DAEMONS}; fi`,
  ].join(' && '), '`dpkg-divert --remove`');
  return result.stdout.includes('restored') ? `${FRR_CONF} restored from ${FRR_CONF_DISTRIB}` : `${FRR_CONF} was not diverted: nothing to restore`;
}

export async function removeVtepInterface(session: SshSession): Promise<string> {
  const dev = VTEP_INTERFACE;
  await must(session, `if ip link show dev ${dev} >/dev/null 2>&1; then ip link del dev ${dev}; fi`, `removing ${dev}`);
  return `${dev} removed`;
}
