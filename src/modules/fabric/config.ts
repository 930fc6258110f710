import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { can, decide } from '../../auth/decide';
import type { Principal } from '../../auth/permissions';
import { AppError, invalidInput, notFound } from '../../errors';
import { publish } from '../../events/outbox';
import type { Tx } from '../../db/client';
import type { FabricConfig as FabricConfigRow, PrismaClient } from '../../generated/prisma/client';
import { lastJobFor } from './rollout';
import { RenderError, type SwitchNos } from './intent';
import { planFabric } from './plan';
import { renderIntentOf } from './render-intent';
import { renderAllListenRangeSnippets } from './render/switch';
import {
  bgpModeOf, checkSwitchAckFields, mergeFabricInput, rolloutStatusOf,
  type FabricConfigInput, type FabricSettings, type FabricWriteControls, type RolloutStatus,
} from './validate';
import { checkMtuDrift } from './preflight';

/**
 * The cluster-wide fabric config (issue 10 item 1): one row, read, upserted and hard-deleted here.
 * Authorization: the fabric belongs to the platform, not to a tenant, so the decision is on the
 * platform resource: reading needs any platform-scoped grant (`read`), writing needs `fabric:write`
 * (held by `fabric:admin` and platform `admin`), skipping the switch re-config ack `fabric:admin`.
 * A tenant's token sees PERMISSION_DENIED (the config's existence is no tenant's secret).
 */

const SINGLETON_ID = 1;
const PLATFORM = { type: 'platform' } as const;

/** fabric:admin holds fabric:write (decide() matches a grant's permission exactly, admin aside). */
function decideFabric(principal: Principal, action: 'fabric:write' | 'fabric:admin'): void {
  if (action === 'fabric:write' && can(principal, 'fabric:admin', PLATFORM)) return;
  decide(principal, action, PLATFORM);
}
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
  /** The switch re-config ack gate's audit record: the latest ack ('acked') or bypass ('skipped'). */
  lastSwitchAckKind: 'acked' | 'skipped' | null;
  lastSwitchAckBy: string | null;
  lastSwitchAckAt: Date | null;
  lastSwitchAckNos: string | null;
  lastSwitchAckHash: string | null;
  version: number;
  createdAt: Date;
  updatedAt: Date;
}

/** The stored config row, or null (the rollout's plan reads it; no authorization here). */
export function fabricConfigRow(db: PrismaClient | Tx): Promise<FabricConfigRow | null> {
  return db.fabricConfig.findUnique({ where: { id: SINGLETON_ID } });
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
    lastSwitchAckKind: row.lastSwitchAckKind as FabricConfigView['lastSwitchAckKind'],
    lastSwitchAckBy: row.lastSwitchAckBy,
    lastSwitchAckAt: row.lastSwitchAckAt,
    lastSwitchAckNos: row.lastSwitchAckNos,
    lastSwitchAckHash: row.lastSwitchAckHash,
    version: row.version,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
  };
}

export async function getFabricConfig(ctx: Context): Promise<FabricConfigView | null> {
  decide(requirePrincipal(ctx), 'read', PLATFORM);
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
export async function upsertFabricConfig(ctx: Context, input: FabricConfigInput & FabricWriteControls): Promise<UpsertResult> {
  const principal = requirePrincipal(ctx);
  decideFabric(principal, 'fabric:write');
  checkSwitchAckFields(input);
  if (input.skipSwitchAck) decideFabric(principal, 'fabric:admin');
  const wantsSecret = Boolean(input.bgpPassword) || Boolean(input.ospfAuthKey);
  if (wantsSecret && !ctx.secrets) {
    throw new AppError('INVALID_CONFIG', 'no secret broker is configured (SECRET_KEY): a fabric password cannot be stored');
  }
  const retired: string[] = [];
  const result = await ctx.prisma.$transaction(async (tx) => {
    await tx.$executeRawUnsafe('SELECT pg_advisory_xact_lock($1)', WRITE_LOCK);
    const row = await tx.fabricConfig.findUnique({ where: { id: SINGLETON_ID } });
    const before = row ? settingsOf(row) : null;
    // A preflight that ran before any config existed recorded its FRR finding in fabric_preflight.
    const probed = row ? null : ((await tx.fabricPreflight.findUnique({ where: { id: 1 }, select: { frrHmacShaCapable: true } }))?.frrHmacShaCapable ?? null);
    const next = mergeFabricInput(before, input, probed);
    await checkMtuDrift(tx, next.vxlanMtu);
    if (input.planHash) checkPlanHash(next, before, input.planHash);
    const ack = before ? switchAckGate(before, next, input, principal) : null;

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
    const audit = ack
      ? { lastSwitchAckKind: ack.kind, lastSwitchAckBy: ack.by, lastSwitchAckAt: new Date(), lastSwitchAckNos: ack.nos, lastSwitchAckHash: ack.hash }
      : {};
    const data = { ...plain, as: BigInt(as), fabricSwitchAs: BigInt(fabricSwitchAs), bgpPasswordRef, ospfAuthKeyRef, ...audit, ...rolloutStatus };
    const saved = row
      ? await tx.fabricConfig.update({ where: { id: SINGLETON_ID }, data: { ...data, version: { increment: 1 }, updatedAt: new Date() } })
      : await tx.fabricConfig.create({ data: { id: SINGLETON_ID, ...data, frrHmacShaCapable: probed } });
    await publish(tx, {
      type: row ? 'fabric.config.updated' : 'fabric.config.created',
      tenantId: null,
      subject: 'fabric-config',
      payload: {
        version: saved.version, changed, bgpPasswordIsSet: bgpPasswordRef !== null, ospfAuthKeyIsSet: ospfAuthKeyRef !== null,
        ...(ack ? { switchAck: { ...ack, principal: principal.name } } : {}),
        ...(input.planHash ? { planHash: input.planHash } : {}),
      },
    });
    return { created: row === null, config: viewOf(saved, await lastJobFor(tx, rolloutStatusOf(saved.rolloutStatus))) };
  });
  await retireSecrets(ctx, retired);
  return result;
}

/** A renderer's refusal as the input field it came from (`management_cidr` -> input.managementCidr). */
function renderOrInvalid<T>(render: () => T): T {
  try {
    return render();
  } catch (error) {
    if (error instanceof RenderError) {
      const field = `input.${error.field.replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase())}`;
      throw invalidInput(field, `${error.message.slice(error.field.length + 2)} (needed to render the switch config)`);
    }
    throw error;
  }
}

/**
 * "Apply what you saw, or nothing": the plan of the intent this POST would store must still have
 * the hash the operator reviewed. CONFLICT otherwise (the stored config or the request moved on);
 * the current hash is not given back, so the way forward is a fresh plan, reviewed.
 */
function checkPlanHash(next: FabricSettings, before: FabricSettings | null, reviewed: string): void {
  const plan = renderOrInvalid(() => planFabric(next, before));
  if (plan.planHash !== reviewed) {
    throw new AppError('CONFLICT',
      'input.planHash: the plan of the config this POST would store no longer has the hash that was reviewed; plan again (POST /controlnode/fabric-config/plan), review it, then POST with its plan_hash',
      { field: 'input.planHash' });
  }
}

export interface SwitchAck {
  kind: 'acked' | 'skipped';
  /** acked: the operator's acked_by; skipped: the token's name. */
  by: string;
  nos: SwitchNos | null;
  hash: string | null;
}

const poolOf = (s: FabricSettings) => (s.routerIdBase !== '' && s.routerIdPrefixLen > 0 ? `${s.routerIdBase}/${s.routerIdPrefixLen}` : null);

/**
 * The switch re-config gate (seed: 409 REQUIRES_SWITCH_RECONFIG_ACK). A change of a set VTEP pool
 * (base or prefix length) changes the range the switch accepts BGP sessions from, so it goes
 * through only with the operator's ack of that exact change: the sha256 of the snippet rendered
 * for this before/after and the NOS acked. A hash that does not match answers the same 409 again,
 * with the fresh snippets, rather than a 400: it is well-formed, and the usual cause is that the
 * change (or the stored config) differs from the one whose snippet was pasted, so what the
 * operator needs next is the snippet for this change. A first pool needs no ack (no switch has the
 * old range); skip_switch_ack (fabric:admin, checked before) bypasses the gate, recorded as such.
 */
function switchAckGate(before: FabricSettings, next: FabricSettings, input: FabricWriteControls, principal: Principal): SwitchAck | null {
  const oldPool = poolOf(before);
  const newPool = poolOf(next);
  if (oldPool === null || oldPool === newPool) return null;
  if (newPool === null) {
    throw invalidInput('input.routerIdBase', 'a set VTEP pool cannot be unset (nodes hold addresses from it): change it, or DELETE the fabric config');
  }
  if (input.skipSwitchAck) return { kind: 'skipped', by: principal.name, nos: null, hash: null };
  const snippets = renderOrInvalid(() => renderAllListenRangeSnippets(renderIntentOf(before), renderIntentOf(next)));
  const defaultNos: SwitchNos = (snippets.find((s) => s.nos === next.fabricSwitchNos)?.nos) ?? 'other';
  const details = {
    pool_before: oldPool,
    pool_after: newPool,
    default_nos: defaultNos,
    snippets: snippets.map((s) => ({ nos: s.nos, snippet: s.snippet, verify_command: s.verifyCommand, sha256: s.sha256 })),
  };
  const how = `paste details.snippets[] for your NOS (default ${defaultNos}) on the fabric switch, run its verify_command, then re-POST with switch_acked true, switch_snippet_hash (its sha256), switch_nos and acked_by`;
  if (!input.switchAcked) {
    throw new AppError('REQUIRES_SWITCH_RECONFIG_ACK', `the VTEP pool changes (details.pool_before to details.pool_after), so the fabric switch's BGP listen range must change with it: ${how}`, details);
  }
  const nos = (input.switchNos || defaultNos) as SwitchNos;
  const snippet = snippets.find((s) => s.nos === nos)!;
  if (input.switchSnippetHash !== snippet.sha256) {
    throw new AppError('REQUIRES_SWITCH_RECONFIG_ACK',
      `input.switchSnippetHash: is not the sha256 of the ${nos} snippet for this change (${oldPool} to ${newPool}); ${how}`,
      { ...details, field: 'input.switchSnippetHash' });
  }
  return { kind: 'acked', by: input.ackedBy!, nos, hash: snippet.sha256 };
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
  decideFabric(requirePrincipal(ctx), 'fabric:write');
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
