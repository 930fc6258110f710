import { AppError, invalidInput } from '../../errors';
import type { Tx } from '../../db/client';
import type { Runner } from './node-store';

/**
 * The one MAC rule of a machine's identity: enroll's `macs`, confirmMac's `mac` and the candidates
 * PXE discovery binds on a trusted network all go through here, so the three can never disagree.
 */

const MAC = /^([0-9a-f]{2})([:-]?)([0-9a-f]{2})\2([0-9a-f]{2})\2([0-9a-f]{2})\2([0-9a-f]{2})\2([0-9a-f]{2})$/i;

/** aa:bb:cc:dd:ee:ff from colon, dash or bare hex notation, any case, or null. Syntax only. */
export function parseMac(mac: string): string | null {
  const m = MAC.exec(mac.trim());
  return m ? [m[1], m[3], m[4], m[5], m[6], m[7]].join(':').toLowerCase() : null;
}

/** parseMac, or INVALID_INPUT naming the field. */
export function normalizeMac(mac: string, field: string): string {
  const parsed = parseMac(mac);
  if (!parsed) throw invalidInput(field, 'is not a MAC address');
  return parsed;
}

/**
 * Why a well-formed MAC cannot be one machine's NIC, or null when it can. Broadcast and all-zero
 * address no NIC, and a multicast address (low bit of the first octet set) is a group: a DHCP
 * request never comes from one, so a boot entry keyed on it would match nothing or everything.
 */
export function notAMachineMac(mac: string): string | null {
  if (mac === 'ff:ff:ff:ff:ff:ff') return 'is the broadcast address, which no NIC has';
  if (mac === '00:00:00:00:00:00') return 'is all zeros, which no NIC has';
  if (parseInt(mac.slice(0, 2), 16) & 1) return 'is a multicast address (low bit of the first octet set), which no NIC boots from';
  return null;
}

/** A MAC a machine can have: normalised, and unicast (INVALID_INPUT naming the field otherwise). */
export function machineMac(raw: string, field: string): string {
  const mac = normalizeMac(raw, field);
  const why = notAMachineMac(mac);
  if (why) throw invalidInput(field, why);
  return mac;
}

/** The advisory lock classes of site MAC bindings (the other locks of the service use the one-key form). */
/**
 * MACs one machine may have: enroll refuses more, and a BMC that reports more is not taken at its
 * word. Each MAC takes one lock in the enrolling transaction (lockMacs), and an unbounded list ran
 * PostgreSQL's lock table out (46,000 MACs in one 0.9 MB body), which failed every other writer.
 * The largest servers have a few dozen NIC ports; 64 leaves room.
 */
export const MAX_MACS = 64;

export const SITE_MAC_LOCK_CLASS = 72439161;
const MAC_LOCK_CLASS = 72439162;

/**
 * Serialises every MAC binding of one site, for the rest of the transaction: PXE discovery's
 * proposals, which bind MACs they choose after reading every waiting machine of the site.
 */
export async function lockSiteMacs(tx: Tx, siteId: string): Promise<void> {
  await tx.$executeRaw`SELECT pg_advisory_xact_lock(${SITE_MAC_LOCK_CLASS}::int, hashtext(${siteId}))`;
}

/**
 * Serialises the bindings of these MACs in the site, for the rest of the transaction: without it
 * two enrolls (or an enroll and a confirmMac) of the same MAC would both pass refuseTakenMacs and
 * both commit. The site's lock is taken shared (a discovery proposal, which takes it exclusive,
 * waits for them and they for it), then one lock per MAC in sorted order, so two bindings of
 * different MACs go side by side (one site-wide lock made 1,000 enrolls wait 0.4 s each in the
 * lifecycle bench) and two with MACs in common cannot deadlock. A hash collision of two MACs only
 * makes their bindings wait for each other.
 */
export async function lockMacs(tx: Runner, siteId: string, macs: readonly string[]): Promise<void> {
  const sorted = [...new Set(macs)].sort();
  // count() around each lock: a void column is not something every runner reads back.
  await tx.query(`SELECT (SELECT count(pg_advisory_xact_lock_shared($1::int, hashtext($2::text))))::int AS site,
    (SELECT count(pg_advisory_xact_lock($3::int, hashtext($2::text || '|' || m.mac)))
       FROM (SELECT mac FROM unnest($4::text[]) WITH ORDINALITY AS u(mac, n) ORDER BY n) m)::int AS macs`,
  [SITE_MAC_LOCK_CLASS, siteId, MAC_LOCK_CLASS, sorted]);
}

/**
 * The MACs already bound to another machine of the site: CONFLICT naming the first. A retired
 * machine no longer counts: retire revokes its identity, so its hardware may be enrolled again.
 */
export async function refuseTakenMacs(db: Runner, siteId: string, macs: readonly string[], exceptNodeId: string | null = null): Promise<void> {
  if (macs.length === 0) return;
  const { rows } = await db.query<{ id: string; macs: string[] }>(
    // The nodes holding any of the MACs come from the GIN index on macs (the only index of the
    // MATERIALIZED part's one condition); the site and state are checked on those few. As one
    // WHERE, a planner with statistics older than the table's growth started at the site's index
    // and filtered every node of the site (0.7-1.8 ms a call at 1,000 nodes). Planned at every
    // call: a generic plan made while node was nearly empty (a bulk enroll's first minute, before
    // any autoanalyze) is a seq scan, and a named statement kept it for the connection's life:
    // every sampled call of the lifecycle bench read the whole table (auto_explain, 0.05 -> 0.66 ms
    // as it grew to 1,000 rows).
    `WITH holders AS MATERIALIZED (SELECT id, macs, site_id, provision_state FROM node WHERE macs && $2::text[])
     SELECT id, macs FROM holders WHERE site_id = $1 AND provision_state <> 'retired'
        AND ($3::text IS NULL OR id <> $3::text) ORDER BY id LIMIT 1`,
    [siteId, [...macs], exceptNodeId], { planEachTime: true });
  const clash = rows[0];
  if (!clash) return;
  const mac = macs.find((m) => clash.macs.includes(m))!;
  throw new AppError('CONFLICT', `the MAC address belongs to node ${clash.id} of the same site`, { mac });
}
