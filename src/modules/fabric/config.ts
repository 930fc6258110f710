import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { decide } from '../../auth/decide';
import { AppError, notFound } from '../../errors';
import { publish } from '../../events/outbox';
import type { Tx } from '../../db/client';
import type { FabricConfig as FabricConfigRow, PrismaClient } from '../../generated/prisma/client';
import { lastJobFor } from './rollout';
import { checkMtuDrift } from './preflight';
import { bgpModeOf, mergeFabricInput, rolloutStatusOf, type FabricConfigInput, type FabricSettings, type RolloutStatus } from './validate';

/**
 * The cluster-wide fabric config (issue 10 item 1): one row, read, upserted and hard-deleted here.
 * Authorization: the fabric belongs to the platform, not to a tenant, so the decision is on the
 * platform resource: reading needs any platform-scoped grant (`read`), writing needs platform
 * `admin`. A tenant's token sees PERMISSION_DENIED (the config's existence is no tenant's secret).
 */

const SINGLETON_ID = 1;
/** Serializes every fabric config write, including the first insert, which has no row to lock. */
const WRITE_LOCK = 0x66616272; // "fabr"

/** The read view: the intent, the derived read-only fields, never a secret. */
export interface FabricConfigView extends Omit<FabricSettings, 'bgpPasswordSet' | 'ospfAuthKeySet'> {
  id: number;
  bgpMode: 'ibgp' | 'ebgp';
  /** `base/prefix`, re-emitted from the stored pair; empty when the pool is not set. */
  routerIdCidr: string;
  bgpPasswordIsSet: boolean;
  ospfAuthKeyIsSet: boolean;
  rolloutStatus: RolloutStatus;
  /** No network module exists yet, so no VXLAN physnet can: reported absent, never invented. */
  physnet: null;
  /**
   * The latest fabric_apply / fabric_teardown job when the status is failed or degraded, in the
   * wire shape of GET .../latest (rollout.ts wireJobView); null otherwise.
   */
  lastJob: Record<string, unknown> | null;
  version: number;
  createdAt: Date;
  updatedAt: Date;
}

export function settingsOf(row: FabricConfigRow): FabricSettings {
  return {
    as: Number(row.as),
    fabricSwitchAs: Number(row.fabricSwitchAs),
    advertiseAllVni: row.advertiseAllVni,
    bfdEnabled: row.bfdEnabled,
    externalRouteReflector: row.externalRouteReflector,
    fabricSwitchName: row.fabricSwitchName,
    fabricSwitchNos: row.fabricSwitchNos,
    fabricSwitchPeeringIp: row.fabricSwitchPeeringIp,
    fabricSwitchRole: row.fabricSwitchRole,
    managementCidr: row.managementCidr,
    routerIdBase: row.routerIdBase,
    routerIdPrefixLen: row.routerIdPrefixLen,
    ospfEnabled: row.ospfEnabled,
    ospfArea: row.ospfArea,
    ospfFabricInterface: row.ospfFabricInterface,
    ospfHelloInterval: row.ospfHelloInterval,
    ospfDeadInterval: row.ospfDeadInterval,
    ospfAutoRefBw: row.ospfAutoRefBw,
    ospfAuthType: row.ospfAuthType,
    ospfAuthKeyId: row.ospfAuthKeyId,
    expectedNodes: row.expectedNodes,
    expectedVms: row.expectedVms,
    vxlanMtu: row.vxlanMtu,
    publicMtu: row.publicMtu,
    bgpPasswordSet: row.bgpPasswordRef !== null,
    ospfAuthKeySet: row.ospfAuthKeyRef !== null,
    frrHmacShaCapable: row.frrHmacShaCapable,
  };
}

export function viewOf(row: FabricConfigRow, lastJob: Record<string, unknown> | null = null): FabricConfigView {
  const { bgpPasswordSet, ospfAuthKeySet, ...intent } = settingsOf(row);
  return {
    id: row.id,
    ...intent,
    bgpMode: bgpModeOf(intent),
    routerIdCidr: intent.routerIdBase !== '' && intent.routerIdPrefixLen > 0 ? `${intent.routerIdBase}/${intent.routerIdPrefixLen}` : '',
    bgpPasswordIsSet: bgpPasswordSet,
    ospfAuthKeyIsSet: ospfAuthKeySet,
    rolloutStatus: rolloutStatusOf(row.rolloutStatus),
    physnet: null,
    lastJob,
    version: row.version,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
  };
}

export async function getFabricConfig(ctx: Context): Promise<FabricConfigView | null> {
  decide(requirePrincipal(ctx), 'read', { type: 'platform' });
  const row = await ctx.prisma.fabricConfig.findUnique({ where: { id: SINGLETON_ID } });
  return row ? viewOf(row, await lastJobFor(ctx.prisma, rolloutStatusOf(row.rolloutStatus))) : null;
}

/** The fields whose value changed, by name only (an event never carries a secret or its reference). */
function changedFields(before: FabricSettings | null, after: FabricSettings, input: FabricConfigInput): string[] {
  const changed: string[] = [];
  for (const key of Object.keys(after) as (keyof FabricSettings)[]) {
    if (key === 'bgpPasswordSet' || key === 'ospfAuthKeySet' || key === 'frrHmacShaCapable') continue;
    if (!before || before[key] !== after[key]) changed.push(key);
  }
  // A new password differs from the old one even when both are "set".
  if (input.clearBgpPassword ? before?.bgpPasswordSet : input.bgpPassword) changed.push('bgpPassword');
  if (input.clearOspfAuthKey ? before?.ospfAuthKeySet : input.ospfAuthKey) changed.push('ospfAuthKey');
  return changed;
}

export interface UpsertResult {
  created: boolean;
  config: FabricConfigView;
}

/**
 * Creates the row on the first call, updates it afterwards; a field left out keeps its value, an
 * empty secret keeps the stored one, `clear*` removes it. Every rule is checked on the merged
 * intent before anything is written; the row, its new secrets and the event commit together.
 */
export async function upsertFabricConfig(ctx: Context, input: FabricConfigInput): Promise<UpsertResult> {
  decide(requirePrincipal(ctx), 'admin', { type: 'platform' });
  const wantsSecret = Boolean(input.bgpPassword) || Boolean(input.ospfAuthKey);
  if (wantsSecret && !ctx.secrets) {
    throw new AppError('INVALID_CONFIG', 'no secret broker is configured (SECRET_KEY): a fabric password cannot be stored');
  }
  const retired: string[] = [];
  const result = await ctx.prisma.$transaction(async (tx) => {
    await tx.$executeRawUnsafe('SELECT pg_advisory_xact_lock($1)', WRITE_LOCK);
    const row = await tx.fabricConfig.findUnique({ where: { id: SINGLETON_ID } });
    const before = row ? settingsOf(row) : null;
    const next = mergeFabricInput(before, input);
    await checkMtuDrift(tx, next.vxlanMtu);

    let bgpPasswordRef = row?.bgpPasswordRef ?? null;
    let ospfAuthKeyRef = row?.ospfAuthKeyRef ?? null;
    if (input.clearBgpPassword || input.bgpPassword) {
      if (bgpPasswordRef) retired.push(bgpPasswordRef);
      bgpPasswordRef = input.bgpPassword ? await ctx.secrets!.put(null, input.bgpPassword, tx) : null;
    }
    if (input.clearOspfAuthKey || input.ospfAuthKey) {
      if (ospfAuthKeyRef) retired.push(ospfAuthKeyRef);
      ospfAuthKeyRef = input.ospfAuthKey ? await ctx.secrets!.put(null, input.ospfAuthKey, tx) : null;
    }
    const { bgpPasswordSet: _b, ospfAuthKeySet: _o, frrHmacShaCapable: _c, as, fabricSwitchAs, ...plain } = next;
    const changed = changedFields(before, next, input);
    // A saved change is not on the nodes until a rollout carries it (the rollout compares versions).
    const rolloutStatus = changed.length > 0 ? { rolloutStatus: 'pending' } : {};
    const data = { ...plain, as: BigInt(as), fabricSwitchAs: BigInt(fabricSwitchAs), bgpPasswordRef, ospfAuthKeyRef, ...rolloutStatus };
    const saved = row
      ? await tx.fabricConfig.update({ where: { id: SINGLETON_ID }, data: { ...data, version: { increment: 1 }, updatedAt: new Date() } })
      : await tx.fabricConfig.create({ data: { id: SINGLETON_ID, ...data } });
    await publish(tx, {
      type: row ? 'fabric.config.updated' : 'fabric.config.created',
      tenantId: null,
      subject: 'fabric-config',
      payload: { version: saved.version, changed, bgpPasswordIsSet: bgpPasswordRef !== null, ospfAuthKeyIsSet: ospfAuthKeyRef !== null },
    });
    return { created: row === null, config: viewOf(saved, await lastJobFor(tx, rolloutStatusOf(saved.rolloutStatus))) };
  });
  await retireSecrets(ctx, retired);
  return result;
}

/**
 * Replaced secrets are removed after the commit: a rollback must not leave the row pointing at a
 * deleted secret. A crash in between leaves an unreferenced ciphertext, never a dangling reference.
 */
async function retireSecrets(ctx: Context, refs: string[]): Promise<void> {
  for (const ref of refs) {
    try {
      await ctx.secrets?.delete(ref, null);
    } catch (error) {
      ctx.log.warn({ err: { message: (error as Error).message }, ref }, 'fabric config: a replaced secret could not be removed');
    }
  }
}

/** Hard delete: the row and its secrets. NOT_FOUND when there is no config. */
export async function deleteFabricConfig(ctx: Context): Promise<void> {
  decide(requirePrincipal(ctx), 'admin', { type: 'platform' });
  const retired = await ctx.prisma.$transaction(async (tx) => {
    await tx.$executeRawUnsafe('SELECT pg_advisory_xact_lock($1)', WRITE_LOCK);
    const row = await tx.fabricConfig.findUnique({ where: { id: SINGLETON_ID } });
    if (!row) throw notFound('fabric config');
    await tx.fabricConfig.delete({ where: { id: SINGLETON_ID } });
    await publish(tx, { type: 'fabric.config.deleted', tenantId: null, subject: 'fabric-config', payload: { version: row.version } });
    return [row.bgpPasswordRef, row.ospfAuthKeyRef].filter((r): r is string => r !== null);
  });
  await retireSecrets(ctx, retired);
}

/**
 * The seed's VXLAN gate (CheckVXLANAllowed): a VXLAN physnet or L2 guest network may be created
 * only when the fabric exists and its rollout status is ready. For other modules; no
 * authorization here (the caller decided on its own resource).
 */
export async function fabricReady(ctx: { prisma: PrismaClient | Tx }): Promise<boolean> {
  const row = await ctx.prisma.fabricConfig.findUnique({ where: { id: SINGLETON_ID }, select: { rolloutStatus: true } });
  return row !== null && rolloutStatusOf(row.rolloutStatus) === 'ready';
}

/** {@link fabricReady} as a refusal, for a mutation that needs the fabric. */
export async function requireFabricReady(ctx: { prisma: PrismaClient | Tx }): Promise<void> {
  const row = await ctx.prisma.fabricConfig.findUnique({ where: { id: SINGLETON_ID }, select: { rolloutStatus: true } });
  if (!row) throw new AppError('INVALID_STATE', 'no network fabric is configured (POST /controlnode/fabric-config)', { fabric: null });
  const status = rolloutStatusOf(row.rolloutStatus);
  if (status !== 'ready') {
    throw new AppError('INVALID_STATE', `the network fabric is ${status}, not ready: VXLAN needs a ready fabric`, { fabric: status });
  }
}
