import { newId } from '../../ids';
import { absent, decide } from '../../auth/decide';
import { requirePrincipal, type Context } from '../../context';
import { AppError, invalidInput } from '../../errors';
import { checkName } from '../tenancy/validate';
import type { Runner } from './node-store';

/** What a deploy workflow can do, step by step. */
export const STEP_KINDS = ['partition', 'image', 'configure', 'script', 'reboot'] as const;
export interface ProfileStep {
  name: string;
  kind: string;
  params?: unknown;
}

/** Everything wrong with a version's role and steps (empty when it can run). */
export function profileProblems(role: string, steps: unknown): string[] {
  const problems: string[] = [];
  if (!role.trim()) problems.push('role: must not be empty');
  if (!Array.isArray(steps) || steps.length === 0) return [...problems, 'steps: at least one step is needed'];
  const names = new Set<string>();
  steps.forEach((step: ProfileStep, i) => {
    if (!step || typeof step !== 'object') return void problems.push(`steps[${i}]: must be an object`);
    if (typeof step.name !== 'string' || !step.name.trim()) problems.push(`steps[${i}].name: must not be empty`);
    else if (names.has(step.name)) problems.push(`steps[${i}].name: is used twice`);
    else names.add(step.name);
    if (!(STEP_KINDS as readonly string[]).includes(step.kind)) problems.push(`steps[${i}].kind: must be one of ${STEP_KINDS.join(', ')}`);
    if (step.params !== undefined && (typeof step.params !== 'object' || step.params === null || Array.isArray(step.params))) {
      problems.push(`steps[${i}].params: must be a JSON object`);
    }
  });
  if (!steps.some((s: ProfileStep) => s?.kind === 'image')) problems.push('steps: no image step, so nothing would be installed');
  if (Buffer.byteLength(JSON.stringify(steps)) > 64 * 1024) problems.push('steps: larger than 64 KiB');
  return problems;
}

export interface SaveProfileVersionInput {
  profileId?: string | null;
  name?: string | null;
  tenantId?: string | null;
  role: string;
  steps: ProfileStep[];
}

/**
 * Creates a deploy profile (version 1) or adds the next version; versions never change. Needs
 * admin on the tenant. Returns the profile's id.
 */
export async function saveProfileVersion(ctx: Context, input: SaveProfileVersionInput): Promise<string> {
  const principal = requirePrincipal(ctx);
  const problems = profileProblems(input.role, input.steps);
  if (problems.length) throw new AppError('INVALID_INPUT', `input.${problems[0]}`, { problems });
  let profileId = input.profileId;
  let tenantId: string;
  if (profileId) {
    const profile = await ctx.prisma.deployProfile.findUnique({ where: { id: profileId } });
    if (!profile) throw absent('DeployProfile', profileId);
    tenantId = profile.tenantId;
    decide(principal, 'admin', { type: 'tenant', id: tenantId, tenantId }, { type: 'DeployProfile', id: profileId });
  } else {
    if (!input.name) throw invalidInput('input.name', 'is required to create a profile');
    const name = checkName('input.name', input.name);
    const owner = input.tenantId ?? principal.tenantId;
    if (!owner) throw invalidInput('input.tenantId', 'is required for a platform token');
    tenantId = owner;
    decide(principal, 'admin', { type: 'tenant', id: tenantId, tenantId });
    if (await ctx.prisma.deployProfile.findUnique({ where: { tenantId_name: { tenantId, name } } })) {
      throw new AppError('CONFLICT', 'input.name: a deploy profile with this name exists: pass its profileId to add a version', { field: 'input.name' });
    }
    profileId = newId('DeployProfile');
    await ctx.prisma.deployProfile.create({ data: { id: profileId, tenantId, name } });
  }
  const id = profileId;
  // The next version number under a row lock, so two saves never take the same number.
  await ctx.prisma.$transaction(async (tx) => {
    await tx.$queryRawUnsafe('SELECT 1 FROM deploy_profile WHERE id = $1 FOR UPDATE', id);
    const last = await tx.deployProfileVersion.findFirst({ where: { profileId: id }, orderBy: { version: 'desc' } });
    await tx.deployProfileVersion.create({
      data: { profileId: id, version: (last?.version ?? 0) + 1, role: input.role, steps: input.steps.map((s) => ({ ...s })) as object },
    });
  });
  return id;
}

/** profiles.validate: the problems a deploy of this profile version would hit before its workflow starts. */
export async function validateProfile(ctx: Context, profileId: string, profileVersion: number): Promise<{ valid: boolean; problems: string[] }> {
  const principal = requirePrincipal(ctx);
  const profile = await ctx.prisma.deployProfile.findUnique({ where: { id: profileId } });
  if (!profile) throw absent('DeployProfile', profileId);
  decide(principal, 'read', { type: 'tenant', id: profile.tenantId, tenantId: profile.tenantId }, { type: 'DeployProfile', id: profileId });
  const version = await ctx.prisma.deployProfileVersion.findUnique({ where: { profileId_version: { profileId: profile.id, version: profileVersion } } });
  if (!version) return { valid: false, problems: [`profileVersion: profile ${profile.id} has no such version`] };
  const problems = profileProblems(version.role, version.steps);
  return { valid: problems.length === 0, problems };
}

/** One saved profile version as a deploy runs it: its role and steps. */
export interface ProfileVersionRow { profileId: string; version: number; role: string; steps: { name: string; kind?: string; params?: unknown }[] }

/** A saved profile version (the deploy workflow reads the one its run recorded), or null. */
export async function readProfileVersion(db: Pick<Runner, 'query'>, profileId: string, version: number): Promise<ProfileVersionRow | null> {
  const { rows } = await db.query('SELECT profile_id, version, role, steps FROM deploy_profile_version WHERE profile_id = $1 AND version = $2', [profileId, version]);
  const row = rows[0];
  if (!row) return null;
  const steps = Array.isArray(row.steps) ? (row.steps as ProfileVersionRow['steps']) : [];
  return { profileId: row.profile_id as string, version: Number(row.version), role: row.role as string, steps };
}
