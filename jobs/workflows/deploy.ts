import { complete } from '../steps';
import type { StepContext, WorkflowDef } from '../engine-types';
import type { Runner } from '../../src/modules/metal/node-store';
import { readProfileVersion, type ProfileVersionRow } from '../../src/modules/metal/deploy-profile';
import { bootInstalledOs, bootRamdisk, fail, type StepReport } from './common';

/** The profile version the deploy recorded (run params first, as the verb wrote them, else the node's). */
async function profileOf(db: Runner, ctx: { run: StepContext['run']; node: StepContext['node'] }): Promise<ProfileVersionRow> {
  const profileId = ctx.run.params.profileId ?? ctx.node.profileId;
  const version = ctx.run.params.profileVersion ?? ctx.node.profileVersion;
  if (!profileId || version == null) fail('INVALID_CONFIG', 'the deploy recorded no profile version');
  const profile = await readProfileVersion(db, profileId!, version!);
  if (!profile) fail('INVALID_CONFIG', `deploy profile ${profileId} has no version ${version}`);
  return profile!;
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

