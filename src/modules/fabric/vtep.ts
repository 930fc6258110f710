import ipaddr from 'ipaddr.js';
import { AppError } from '../../errors';
import type { Tx } from '../../db/client';
import type { PrismaClient } from '../../generated/prisma/client';
import { ipv4ToNumber, numberToIpv4, vtepPoolCapacity } from './intent';

/**
 * The VTEP pool (issue 10 item 6): every compute node gets one VTEP loopback address from the
 * fabric config's router_id_base / router_id_prefix_len, kept in `fabric_vtep`.
 *
 * - Uniqueness is the database's (ip primary key, node_id unique); allocation takes a transaction
 *   advisory lock first, so concurrent allocators queue instead of colliding on those constraints,
 *   and none of them fails for a reason a retry would not have.
 * - The lowest free usable address is taken. Usable follows the seed's total_usable rule
 *   (vtepPoolCapacity): below /24 every /24 block loses its .0 and .255; from /24 on, the subnet's
 *   network and broadcast addresses.
 * - The fabric switch's peering IP is reserved when it lies in the pool (a common layout puts the
 *   switch's loopback at the pool's top): no node gets it, and `remaining` does not count it.
 * - A node keeps its address across allocations. After a pool change (which the switch
 *   re-configuration gate made the operator acknowledge) an address outside the new pool, or one
 *   the new pool does not count as usable, is not kept: the next allocation moves the node into
 *   the new pool, since the switch's listen range no longer accepts sessions from the old address.
 *   Until then the status reports such addresses as `outsidePool` and does not count them.
 * - An exhausted pool is INVALID_STATE naming the pool: the request is well-formed, the stored
 *   configuration cannot serve it until the operator widens the pool (CONFLICT is this service's
 *   answer to a concurrent or stale write, which a retry or re-read settles; this one it does not).
 */

type Db = PrismaClient | Tx;

/** Serialises allocations cluster-wide ("vtep"); the release path needs no lock (a delete frees). */
const VTEP_LOCK = 0x76746570;

export interface VtepPool {
  routerIdBase: string;
  prefixLength: number;
  /** The pool's network, "A.B.C.D/N". */
  subnetCidr: string;
  /** Network and broadcast address as 32-bit numbers; the usable ones lie strictly between. */
  network: number;
  broadcast: number;
  totalUsable: number;
  /** Usable addresses no node may hold: the fabric switch's own loopback when it lies in the pool. */
  reserved: string[];
}

export interface VtepPoolStatus {
  routerIdBase: string;
  prefixLength: number;
  /** Empty when the fabric config has no pool yet (router_id_base unset). */
  subnetCidr: string;
  startIp: string;
  totalUsable: number;
  /** Addresses held inside the current pool. */
  allocated: number;
  remaining: number;
  exhausted: boolean;
  /** The newest allocation inside the current pool; empty when there is none. */
  lastAllocatedIp: string;
  /** Held addresses the next allocation for their node replaces: from a former pool, or the switch's own. */
  outsidePool: number;
}


/**
 * The pool the stored config describes; null when it has none (base and prefix go together).
 * The fabric switch's peering IP is often the pool's top address (10.255.0.254 in a 10.255.0.0/24
 * pool): it is reserved, or the 254th node would take the switch's address.
 */
export function poolOf(config: { routerIdBase: string; routerIdPrefixLen: number; fabricSwitchPeeringIp?: string }): VtepPool | null {
  const { routerIdBase, routerIdPrefixLen: prefixLength } = config;
  if (routerIdBase === '' || prefixLength <= 0) return null;
  if (!ipaddr.IPv4.isValidFourPartDecimal(routerIdBase) || !Number.isInteger(prefixLength) || prefixLength > 32) {
    throw new AppError('INVALID_STATE', 'the stored fabric config\'s VTEP pool (router_id_base / router_id_prefix_len) is not an IPv4 network');
  }
  const cidr = `${routerIdBase}/${prefixLength}`;
  const network = ipaddr.IPv4.networkAddressFromCIDR(cidr).toString();
  const pool = {
    routerIdBase, prefixLength, subnetCidr: `${network}/${prefixLength}`,
    network: ipv4ToNumber(network), broadcast: ipv4ToNumber(ipaddr.IPv4.broadcastAddressFromCIDR(cidr).toString()),
    totalUsable: vtepPoolCapacity(prefixLength),
    reserved: [] as string[],
  };
  const switchIp = config.fabricSwitchPeeringIp ?? '';
  if (switchIp !== '' && ipaddr.IPv4.isValidFourPartDecimal(switchIp) && isUsable(pool, ipv4ToNumber(switchIp))) pool.reserved.push(switchIp);
  return pool;
}

function isUsable(pool: Omit<VtepPool, 'reserved'>, n: number): boolean {
  if (n <= pool.network || n >= pool.broadcast) return false;
  if (pool.prefixLength >= 24) return true;
  const low = n & 255;
  return low !== 0 && low !== 255;
}

/** The usable address after `n` (n itself need not be usable); pool.broadcast when there is none. */
function nextUsable(pool: VtepPool, n: number): number {
  let next = n + 1;
  if (pool.prefixLength < 24) {
    const low = next & 255;
    if (low === 0) next += 1;
    else if (low === 255) next += 2;
  }
  return next >= pool.broadcast ? pool.broadcast : next;
}

/** Whether `ip` is one of the pool's usable addresses (reserved ones included). */
export function inPool(pool: VtepPool, ip: string): boolean {
  return ipaddr.IPv4.isValidFourPartDecimal(ip) && isUsable(pool, ipv4ToNumber(ip));
}

/** Whether a node may keep `ip`: usable in the current pool and not reserved. */
export function holdable(pool: VtepPool, ip: string): boolean {
  return inPool(pool, ip) && !pool.reserved.includes(ip);
}

async function storedPool(db: Db): Promise<VtepPool | null | undefined> {
  const config = await db.fabricConfig.findUnique({ where: { id: 1 }, select: { routerIdBase: true, routerIdPrefixLen: true, fabricSwitchPeeringIp: true } });
  return config ? poolOf(config) : undefined;
}

async function allocateIn(tx: Tx, nodeIds: string[]): Promise<Map<string, string>> {
  await tx.$executeRawUnsafe('SELECT pg_advisory_xact_lock($1)', VTEP_LOCK);
  const pool = await storedPool(tx);
  if (pool === undefined) throw new AppError('INVALID_STATE', 'no fabric config: there is no VTEP pool to allocate from');
  if (pool === null) throw new AppError('INVALID_STATE', 'the fabric config has no VTEP pool (router_id_base / router_id_prefix_len unset)');
  const known = new Set((await tx.computeNode.findMany({ where: { nodeId: { in: nodeIds } }, select: { nodeId: true } })).map((r) => r.nodeId));
  const missing = nodeIds.filter((id) => !known.has(id));
  if (missing.length > 0) throw new AppError('NOT_FOUND', `${missing.length} of the nodes are not compute nodes (details.nodeIds)`, { nodeIds: missing });

  const all = await tx.fabricVtep.findMany({ select: { ip: true, nodeId: true } });
  const taken = new Set<number>(pool.reserved.map((ip) => ipv4ToNumber(ip)));
  const result = new Map<string, string>();
  const stale: string[] = [];
  const wanted = new Set(nodeIds);
  for (const row of all) {
    if (!holdable(pool, row.ip)) {
      if (wanted.has(row.nodeId)) stale.push(row.nodeId);
      continue;
    }
    taken.add(ipv4ToNumber(row.ip));
    if (wanted.has(row.nodeId)) result.set(row.nodeId, row.ip);
  }
  const needing = nodeIds.filter((id) => !result.has(id));
  if (needing.length === 0) return result;

  const fresh: { ip: string; nodeId: string }[] = [];
  let n = nextUsable(pool, pool.network);
  for (const nodeId of needing) {
    while (n < pool.broadcast && taken.has(n)) n = nextUsable(pool, n);
    if (n >= pool.broadcast) {
      throw new AppError('INVALID_STATE',
        `the VTEP pool ${pool.subnetCidr} is exhausted: ${pool.totalUsable} usable addresses, ${taken.size - pool.reserved.length} allocated${pool.reserved.length ? `, ${pool.reserved.length} reserved (the fabric switch)` : ''}, ${needing.length} more needed; widen the pool (a shorter router_id_prefix_len)`,
        { pool: pool.subnetCidr, totalUsable: pool.totalUsable, allocated: taken.size - pool.reserved.length, reserved: pool.reserved.length, needed: needing.length });
    }
    fresh.push({ ip: numberToIpv4(n), nodeId });
    n = nextUsable(pool, n);
  }
  if (stale.length > 0) await tx.fabricVtep.deleteMany({ where: { nodeId: { in: stale } } });
  await tx.fabricVtep.createMany({ data: fresh });
  for (const row of fresh) result.set(row.nodeId, row.ip);
  return result;
}

const isClient = (db: Db): db is PrismaClient => '$transaction' in db;

/**
 * A VTEP address for each node (nodeId -> ip), allocating the lowest free ones for nodes without
 * one (or with one outside the current pool). Idempotent: a node keeps its address. Inside a
 * caller's transaction the lock is held until that transaction ends, so its allocations commit
 * or vanish with the rest of its work.
 */
export async function allocateVteps(db: Db, nodeIds: string[]): Promise<Map<string, string>> {
  const ids = [...new Set(nodeIds)];
  if (ids.length === 0) return new Map();
  if (!isClient(db)) return allocateIn(db, ids);
  // Waiting on the lock counts towards the transaction's timeout: allow for a queue of allocators.
  return db.$transaction((tx) => allocateIn(tx, ids), { maxWait: 10_000, timeout: 60_000 });
}

/** Releases a node's VTEP address (teardown); true when it held one. */
export async function releaseVtep(db: Db, nodeId: string): Promise<boolean> {
  const { count } = await db.fabricVtep.deleteMany({ where: { nodeId } });
  return count > 0;
}

/** The stored addresses (nodeId -> ip) of the given nodes, or of every node; no allocation. */
export async function vtepsOf(db: Db, nodeIds?: string[]): Promise<Map<string, string>> {
  const rows = await db.fabricVtep.findMany({ where: nodeIds ? { nodeId: { in: nodeIds } } : {}, select: { ip: true, nodeId: true } });
  return new Map(rows.map((r) => [r.nodeId, r.ip]));
}

/** The pool's capacity and use; null when there is no fabric config. */
export async function vtepPoolStatus(db: Db): Promise<VtepPoolStatus | null> {
  const config = await db.fabricConfig.findUnique({ where: { id: 1 }, select: { routerIdBase: true, routerIdPrefixLen: true, fabricSwitchPeeringIp: true } });
  if (!config) return null;
  const pool = poolOf(config);
  const rows = await db.fabricVtep.findMany({ select: { ip: true, allocatedAt: true } });
  if (!pool) {
    return {
      routerIdBase: config.routerIdBase, prefixLength: config.routerIdPrefixLen, subnetCidr: '', startIp: '', totalUsable: 0,
      allocated: 0, remaining: 0, exhausted: true, lastAllocatedIp: '', outsidePool: rows.length,
    };
  }
  const inside = rows.filter((r) => holdable(pool, r.ip)).map((r) => ({ n: ipv4ToNumber(r.ip), at: r.allocatedAt.getTime(), ip: r.ip }));
  // Newest first; within one allocation (one timestamp) the addresses were handed out upwards.
  inside.sort((x, y) => y.at - x.at || y.n - x.n);
  const remaining = Math.max(0, pool.totalUsable - pool.reserved.length - inside.length);
  return {
    routerIdBase: pool.routerIdBase,
    prefixLength: pool.prefixLength,
    subnetCidr: pool.subnetCidr,
    startIp: pool.totalUsable > 0 ? numberToIpv4(nextUsable(pool, pool.network)) : '',
    totalUsable: pool.totalUsable,
    allocated: inside.length,
    remaining,
    exhausted: remaining === 0,
    lastAllocatedIp: inside[0]?.ip ?? '',
    outsidePool: rows.length - inside.length,
  };
}
