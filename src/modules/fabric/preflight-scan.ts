import type { SecretBroker } from '../../../clients/secrets/broker';
import { fanOutSsh, type FanOutResult, type SshSession, type SshTarget } from '../../../clients/ssh';
import type { PrismaClient } from '../../generated/prisma/client';
import { pinHostKey, serviceSshIdentity, sshTargetOf, type ComputeNode } from './compute-nodes';
import { hmacProbeSnippet } from './render/host-frr';
import { FactsError, frrVersionOf, parseFacts, versionAtLeast, type Capability, type NodeFacts, type NodeReport, type ScanRow } from './preflight';

/**
 * The preflight's SSH scan: every compute node read over SSH (read-only: one exec for its
 * interfaces and FRR version, one `vtysh -C` dry run for the FRR probe), side by side. A node's
 * host key is pinned at its first authenticated contact (trust on first use). What it finds is
 * resolved by the pure part (preflight.ts); it runs inside the preflight's workflow run.
 */

/** Each node's budget from its start (connect, the reads, the probe); a dead node costs this much once. */
export const PREFLIGHT_NODE_DEADLINE_MS = 10_000;
export const PREFLIGHT_CONNECT_TIMEOUT_MS = 5_000;
const COMMAND_TIMEOUT_MS = 5_000;
/** FRR 9.1 brought OSPF hmac-sha-256 key chains on interfaces (FRR PR 14398). */
const HMAC_MIN_VERSION: readonly [number, number] = [9, 1];

/** One exec: addresses, links with their kind, and the FRR version, in marked sections. */
export const PREFLIGHT_SCRIPT = [
  "printf '@@addr\\n'", 'ip -j addr',
  "printf '\\n@@link\\n'", 'ip -j -d link',
  "printf '\\n@@frr\\n'",
  // dpkg's version when FRR is a Debian package, else vtysh's own banner ("... (version 8.4.4)").
  "v=$(dpkg-query -W -f '${Version}' frr 2>/dev/null); if [ -n \"$v\" ]; then echo \"$v\"; elif command -v vtysh >/dev/null 2>&1; then vtysh -h 2>&1 | sed -n 's/.*(version \\([^)]*\\)).*/\\1/p' | head -n 1; fi",
  'exit 0',
].join('; ');

/** The FRR probe on one node: the version first, then (>= 9.1 only) FRR's own checker on the snippet. */
async function probeCapability(session: SshSession, facts: NodeFacts): Promise<Capability> {
  const version = frrVersionOf(facts.frrVersion);
  if (!version || !versionAtLeast(version, HMAC_MIN_VERSION)) return 'incapable';
  // 9.1 on paper; the dry run proves the build really takes the interface key-chain line.
  const checked = await session.exec('vtysh -C -f /dev/stdin', { stdin: hmacProbeSnippet(), timeoutMs: COMMAND_TIMEOUT_MS });
  return checked.exitCode === 0 ? 'capable' : 'incapable';
}

export async function readNode(session: SshSession): Promise<NodeReport> {
  const out = await session.exec(PREFLIGHT_SCRIPT, { timeoutMs: COMMAND_TIMEOUT_MS });
  if (out.exitCode !== 0) throw new FactsError(`the interface read exited ${out.exitCode ?? out.signal}`);
  const facts = parseFacts(out.stdout);
  return { facts, capability: await probeCapability(session, facts) };
}

const FAN_OUT_WORD: Record<string, string> = { refused: 'SSH refused', timeout: 'SSH timed out', failed: 'SSH failed' };

function unreachableReason(result: Exclude<FanOutResult<unknown, unknown>, { status: 'ok' }>): string {
  return `${FAN_OUT_WORD[result.status] ?? result.status} (${result.code}): ${result.reason}`;
}

export interface ScanDeps {
  prisma: PrismaClient;
  secrets: SecretBroker | null;
}

export interface PreflightOptions {
  perNodeTimeoutMs?: number;
  connectTimeoutMs?: number;
  concurrency?: number;
}

/**
 * The broker as sshTargetOf sees it for one preflight: most nodes share the service's key, so it
 * is read (and decrypted) once, not once per node.
 */
function onceEachKey(broker: SecretBroker): SecretBroker {
  const seen = new Map<string, Promise<unknown>>();
  return {
    put: (tenantId, value, db) => broker.put(tenantId, value, db),
    delete: (ref, tenantId) => broker.delete(ref, tenantId),
    get: (ref, tenantId) => {
      const key = `${tenantId ?? ''}\u0000${ref}`;
      let value = seen.get(key);
      if (!value) {
        value = broker.get(ref, tenantId);
        seen.set(key, value);
      }
      return value;
    },
  };
}

/** Reads every node (in the nodes' order): its facts, or why it could not be read. */
export async function scanNodes(deps: ScanDeps, nodes: readonly ComputeNode[], opts: PreflightOptions = {}): Promise<ScanRow[]> {
  if (nodes.length === 0) return [];
  const identity = await serviceSshIdentity(deps.prisma, deps.secrets);
  const connectTimeoutMs = opts.connectTimeoutMs ?? PREFLIGHT_CONNECT_TIMEOUT_MS;
  const secrets = deps.secrets ? onceEachKey(deps.secrets) : null;
  const targets = await Promise.allSettled(nodes.map((n) => sshTargetOf(n, identity, secrets, { connectTimeoutMs })));
  const rows: ScanRow[] = new Array(nodes.length);
  const reachable: { node: ComputeNode; index: number; target: SshTarget }[] = [];
  targets.forEach((t, index) => {
    if (t.status === 'fulfilled') reachable.push({ node: nodes[index]!, index, target: t.value });
    else rows[index] = { ok: false, reason: 'the node\'s SSH key could not be read from the secret broker' };
  });
  const results = await fanOutSsh(
    reachable,
    (item) => item.target,
    async (session, item) => {
      // Trust on first use: the key this authenticated session saw is pinned from now on.
      if (item.node.sshHostKey === null) await pinHostKey(deps.prisma, item.node.nodeId, session.hostKey.fingerprint);
      return readNode(session);
    },
    { perNodeTimeoutMs: opts.perNodeTimeoutMs ?? PREFLIGHT_NODE_DEADLINE_MS, concurrency: opts.concurrency },
  );
  for (const r of results) {
    if (r.status === 'ok') rows[r.item.index] = { ok: true, report: r.value };
    else if (r.code === 'TASK_FAILED') rows[r.item.index] = { ok: false, reason: `reached, but its interfaces could not be read: ${r.reason}` };
    else rows[r.item.index] = { ok: false, reason: unreachableReason(r) };
  }
  return rows;
}
