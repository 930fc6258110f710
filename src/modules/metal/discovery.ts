import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { absent, decide } from '../../auth/decide';
import { AppError, invalidInput } from '../../errors';
import { prismaRunner, updateNode } from './node-store';
import type { Tx } from '../../db/client';
import { nodeResource, siteResource } from '../tenancy/resources';
import { readPolicy } from '../tenancy/pool';
import { lockMacs, lockSiteMacs, machineMac, normalizeMac, notAMachineMac, refuseTakenMacs } from './mac';

export const MAX_SIGHTINGS_PER_AGENT = 256;
const WINDOW_MS = 10 * 60 * 1000;
const DAY_MS = 24 * 60 * 60 * 1000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** SMBIOS stores the UUID's first three fields byte-swapped: the other byte order of a UUID. */
export function swapUuid(uuid: string): string {
  const hex = uuid.toLowerCase();
  const rev = (s: string) => s.match(/../g)!.reverse().join('');
  const [a, b, c, d, e] = hex.split('-') as [string, string, string, string, string];
  return `${rev(a)}-${rev(b)}-${rev(c)}-${d}-${e}`;
}
const bothOrders = (uuid: string) => [uuid.toLowerCase(), swapUuid(uuid)];

export interface SightingInput {
  mac: string;
  productUuid?: string | null;
  arch?: string | null;
  firstSeen: Date;
  lastSeen: Date;
  requestCount: number;
  relays?: string[] | null;
}

/** Checks and normalises an agent's report; at most 256 machines, each MAC once. */
export function checkSightings(machines: SightingInput[]): SightingInput[] {
  if (machines.length > MAX_SIGHTINGS_PER_AGENT) throw invalidInput('machines', `at most ${MAX_SIGHTINGS_PER_AGENT} per report`);
  const seen = new Set<string>();
  return machines.map((m, i) => {
    const mac = normalizeMac(m.mac, `machines[${i}].mac`);
    if (seen.has(mac)) throw invalidInput(`machines[${i}].mac`, 'is listed twice');
    seen.add(mac);
    const productUuid = m.productUuid ? m.productUuid.toLowerCase() : null;
    if (productUuid && !UUID.test(productUuid)) throw invalidInput(`machines[${i}].productUuid`, 'must be a UUID');
    if (m.lastSeen < m.firstSeen) throw invalidInput(`machines[${i}].lastSeen`, 'is before firstSeen');
    if (!Number.isInteger(m.requestCount) || m.requestCount < 1) throw invalidInput(`machines[${i}].requestCount`, 'must be a positive integer');
    return { ...m, mac, productUuid, relays: m.relays ?? [] };
  });
}

/**
 * Proposes candidates for the site's machines enrolled without MACs, exactly as the seed words it:
 * the MAC was first seen within 10 minutes after metal power-cycled that machine into PXE, it is
 * the only MAC its product UUID (in either byte order) was seen from in 24 hours, no other machine
 * of the site shares the UUID, and the MAC is not enrolled. Publishes node.pxe-mac.discovered once
 * per candidate; a pool that trusts its provisioning network binds it at once.
 */
export async function proposeCandidates(tx: Tx, siteId: string, requestId: string): Promise<void> {
  const now = Date.now();
  // Every MAC binding of the site runs under the site's MAC lock (enroll and confirmMac take it
  // shared, with a lock per MAC; this takes it exclusive), taken before the waiting machines are
  // read so a concurrent confirmMac cannot be overwritten.
  await lockSiteMacs(tx, siteId);
  const waiting = await tx.node.findMany({
    where: { siteId, macs: { isEmpty: true }, productUuid: { not: null }, pxeCycledAt: { not: null }, provisionState: { not: 'retired' } },
  });
  if (waiting.length === 0) return;
  // Any host can claim any MAC on the wire: a sighting from a MAC no NIC has (broadcast, zero,
  // multicast) is listed by discovered but never proposed, since confirmMac would refuse it.
  const sightings = (await tx.sighting.findMany({ where: { siteId, lastSeen: { gte: new Date(now - DAY_MS) } } }))
    .filter((s) => notAMachineMac(s.mac) === null);
  const siteNodes = await tx.node.findMany({ where: { siteId }, select: { id: true, macs: true, productUuid: true, provisionState: true } });
  // The same rule as refuseTakenMacs: a retired machine's MACs are free again.
  const enrolledMacs = new Set(siteNodes.filter((n) => n.provisionState !== 'retired').flatMap((n) => n.macs));
  for (const node of waiting) {
    const uuids = bothOrders(node.productUuid!);
    const cycled = node.pxeCycledAt!.getTime();
    const sameUuid = sightings.filter((s) => s.productUuid && uuids.includes(s.productUuid));
    const macs = [...new Set(sameUuid.map((s) => s.mac))];
    if (macs.length !== 1) continue;
    const mac = macs[0]!;
    const firstSeen = Math.min(...sameUuid.map((s) => s.firstSeen.getTime()));
    if (firstSeen < cycled || firstSeen > cycled + WINDOW_MS) continue;
    if (siteNodes.some((n) => n.id !== node.id && n.productUuid && uuids.includes(n.productUuid))) continue;
    if (enrolledMacs.has(mac)) continue;
    if (node.discoveredMac === mac) continue; // already proposed: once per candidate
    const pool = await tx.pool.findUniqueOrThrow({ where: { id: node.poolId } });
    const bind = readPolicy(pool.policy).trustProvisioningNetwork;
    // No compare-and-set: every MAC writer of the site holds the lock taken above.
    await updateNode(prismaRunner(tx), { id: node.id, version: null }, {
      data: { discoveredMac: mac, ...(bind ? { macs: [mac] } : {}) },
      run: null,
      events: [
        { type: 'node.pxe-mac.discovered', payload: { mac } },
        ...(bind ? [{ type: 'node.pxe-mac.confirmed', payload: { mac, candidate: true, trustedNetwork: true } }] : []),
      ],
      // A bound MAC is what the machine's enroll run waits for: wake it.
      activeRun: bind ? 'wake' : null,
    }, requestId);
    if (bind) enrolledMacs.add(mac);
  }
}

export interface DiscoveredMachine {
  mac: string;
  productUuid: string | null;
  arch: string | null;
  firstSeen: Date;
  lastSeen: Date;
  requestCount: number;
  relays: string[];
  agentNodeIds: string[];
  nodeId: string | null;
  candidateFor: string | null;
}

/** discovered: the site's PXE sightings of the last 24 hours, by MAC over all agents, newest first. */
export async function discovered(ctx: Context, siteId: string): Promise<DiscoveredMachine[]> {
  const principal = requirePrincipal(ctx);
  const site = await ctx.prisma.site.findUnique({ where: { id: siteId } });
  if (!site) throw absent('Site', siteId);
  decide(principal, 'compute:sites:read', siteResource(site));
  const sightings = await ctx.prisma.sighting.findMany({ where: { siteId, lastSeen: { gte: new Date(Date.now() - DAY_MS) } } });
  // Live machines first: a retired machine's MAC may have been enrolled again.
  const nodes = await ctx.prisma.node.findMany({ where: { siteId }, select: { id: true, macs: true, discoveredMac: true, provisionState: true } });
  nodes.sort((a, b) => Number(a.provisionState === 'retired') - Number(b.provisionState === 'retired'));
  const byMac = new Map<string, DiscoveredMachine>();
  for (const s of sightings) {
    const m = byMac.get(s.mac);
    if (!m) {
      byMac.set(s.mac, {
        mac: s.mac, productUuid: s.productUuid, arch: s.arch, firstSeen: s.firstSeen, lastSeen: s.lastSeen,
        requestCount: s.requestCount, relays: [...s.relays], agentNodeIds: [s.agentId], nodeId: null, candidateFor: null,
      });
      continue;
    }
    m.productUuid ??= s.productUuid;
    m.arch ??= s.arch;
    if (s.firstSeen < m.firstSeen) m.firstSeen = s.firstSeen;
    if (s.lastSeen > m.lastSeen) m.lastSeen = s.lastSeen;
    m.requestCount += s.requestCount;
    m.relays = [...new Set([...m.relays, ...s.relays])];
    m.agentNodeIds.push(s.agentId);
  }
  for (const m of byMac.values()) {
    m.nodeId = nodes.find((n) => n.macs.includes(m.mac))?.id ?? null;
    m.candidateFor = nodes.find((n) => n.macs.length === 0 && n.discoveredMac === m.mac)?.id ?? null;
  }
  return [...byMac.values()].sort((a, b) => b.lastSeen.getTime() - a.lastSeen.getTime() || a.mac.localeCompare(b.mac));
}

/**
 * confirmMac: binds the PXE MAC of a machine enrolled without MACs, and wakes the node's active run
 * (its enroll run waits for the MAC) in the same transaction. INVALID_STATE when it already has
 * MACs or is retired; CONFLICT when another machine of the site has the MAC.
 */
export async function confirmMac(ctx: Context, nodeId: string, rawMac: string): Promise<string> {
  const principal = requirePrincipal(ctx);
  const node = await ctx.prisma.node.findUnique({ where: { id: nodeId } });
  if (!node) throw absent('MetalNode', nodeId);
  decide(principal, 'compute:nodes:provision', nodeResource(node));
  const mac = machineMac(rawMac, 'mac');
  if (node.provisionState === 'retired') throw new AppError('INVALID_STATE', `node ${node.id} is retired`, { state: node.provisionState });
  if (node.macs.length) throw new AppError('INVALID_STATE', `node ${node.id} already has MACs (${node.macs.join(', ')})`, { state: node.provisionState });
  await ctx.prisma.$transaction(async (tx) => {
    await lockMacs(prismaRunner(tx), node.siteId, [mac]);
    await refuseTakenMacs(prismaRunner(tx), node.siteId, [mac], node.id);
    const updated = await updateNode(prismaRunner(tx), node, {
      data: { macs: [mac] },
      run: null,
      events: [{ type: 'node.pxe-mac.confirmed', payload: { mac, candidate: node.discoveredMac === mac } }],
      // "The waiting boot then goes on from that MAC": the run waiting for it is woken.
      activeRun: 'wake',
    }, ctx.requestId);
    if (!updated) throw new AppError('CONFLICT', `node ${node.id} changed concurrently; read it again and retry`);
  });
  return node.id;
}
