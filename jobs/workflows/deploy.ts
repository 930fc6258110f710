import { complete } from '../steps';
import type { StepContext, WorkflowDef } from '../engine-types';
import type { Runner } from '../../src/modules/metal/node-store';
import { bootInstalledOs, bootRamdisk, fail, type StepReport } from './common';

interface ProfileVersion { profileId: string; version: number; role: string; steps: { name: string; kind?: string; params?: unknown }[] }

/** The profile version the deploy recorded (run params first, as the verb wrote them, else the node's). */
async function profileOf(db: Runner, ctx: { run: StepContext['run']; node: StepContext['node'] }): Promise<ProfileVersion> {
  const profileId = ctx.run.params.profileId ?? ctx.node.profileId;
  const version = ctx.run.params.profileVersion ?? ctx.node.profileVersion;
  if (!profileId || version == null) fail('INVALID_CONFIG', 'the deploy recorded no profile version');
  const { rows } = await db.query('SELECT profile_id, version, role, steps FROM deploy_profile_version WHERE profile_id = $1 AND version = $2', [profileId, version]);
  if (!rows[0]) fail('INVALID_CONFIG', `deploy profile ${profileId} has no version ${version}`);
  const steps = Array.isArray(rows[0]!.steps) ? (rows[0]!.steps as ProfileVersion['steps']) : [];
  return { profileId: rows[0]!.profile_id as string, version: Number(rows[0]!.version), role: rows[0]!.role as string, steps };
}

/**
 * deploying: the recorded profile version's steps run in the deploy ramdisk (they travel as the
 * boot entry's params); each step reports; all succeeded -> deployed with the profile's role.
 */
export const deployWorkflow: WorkflowDef = {
  kind: 'metal-deploy',
  steps: [
    bootRamdisk({
      name: 'boot-deploy-ramdisk',
      title: 'Booting the deploy ramdisk',
      purpose: 'deploy',
      params: async (ctx) => {
        const profile = await profileOf(ctx.db, ctx);
        return { profileId: profile.profileId, profileVersion: profile.version, steps: profile.steps };
      },
    }),
    {
      name: 'run-profile',
      title: "Running the deploy profile's steps",
      destructive: true,
      async run(ctx) {
        const profile = await profileOf(ctx.db, ctx);
        const latest = new Map<string, StepReport>();
        for (const report of await ctx.reports('step')) {
          const stepReport = report.payload as unknown as StepReport;
          latest.set(stepReport.name, stepReport);
        }
        const failedStep = profile.steps.map((s) => latest.get(s.name)).find((s) => s?.status === 'failed');
        if (failedStep) fail('DEPLOY_STEP_FAILED', `profile step "${failedStep.name}" failed${failedStep.message ? `: ${failedStep.message}` : ''}`);
        const done = profile.steps.filter((s) => latest.get(s.name)?.status === 'succeeded').length;
        if (done < profile.steps.length) {
          const next = profile.steps.find((s) => latest.get(s.name)?.status !== 'succeeded')!;
          return ctx.waitFor(`the installer to report profile step "${next.name}" (${done} of ${profile.steps.length} done)`);
        }
        return complete(`${done} profile step(s) succeeded`);
      },
    },
    bootInstalledOs,
  ],
  async finish(ctx) {
    const profile = await profileOf(ctx.db, ctx);
    return { data: { role: profile.role } };
  },
};

