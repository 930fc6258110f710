import { complete, waitUntil } from '../steps';
import type { StepContext, WorkflowDef } from '../engine-types';
import { queueIsoBuild } from '../iso-build';
import { fail } from './common';
import { installReports } from '../../src/modules/provision/callbacks';
import { revokeIsos } from '../../src/modules/provision/iso-store';
import { recordInstalledOs } from '../../src/modules/provision/bmc-info';
import type { PowerState } from '../../clients/bmc/driver';
import { installHostname } from '../../src/modules/provision/hostname';
import type { InstallParams } from '../../src/modules/provision/install-params';

/**
 * deploying, the control-node API's way (POST /controlnode/provision): a metal deploy whose
 * installer is a per-job Debian ISO booted over the BMC's virtual media, not a PXE ramdisk. The
 * job is this run; its steps are the progress stages the seed names ("Building ISO", "Mounting
 * ISO", "Installing OS"). Every BMC call is a command the node's site agent runs, with the
 * vendor's flavour (iDRAC's VCD-DVD, iLO's BootOnNextServerReset, XCC's EXT slots...).
 *
 * The installer reports through the job's callbacks (src/modules/provision/callback-routes.ts):
 * steps (each resets the stuck timer: no report for `stuckSeconds` fails the job as INSTALL_STUCK,
 * naming the last step), its completion, then the installed system's first boot. The media is
 * ejected and the ISO's URL and callback token end when the job ends, however it ends.
 */

const paramsOf = (ctx: Pick<StepContext, 'run'>) => ctx.run.params as unknown as InstallParams;

interface IsoReport { ok: boolean; imageUrl?: string; bytes?: number; error?: string; code?: string; uefi?: boolean; note?: string }

async function isoOf(ctx: StepContext): Promise<IsoReport | null> {
  const last = (await installReports(ctx.db, ctx.run.id, 'iso')).at(-1);
  return last ? (last.payload as unknown as IsoReport) : null;
}

export const installWorkflow: WorkflowDef = {
  kind: 'metal-install',
  steps: [
    {
      name: 'build-iso',
      title: 'Building ISO',
      async run(ctx) {
        const iso = await isoOf(ctx);
        if (iso?.ok) return complete(`the job's installer ISO is built (${Math.round((iso.bytes ?? 0) / 1048576)} MiB, ${iso.uefi === false ? `BIOS only: ${iso.note ?? 'no EFI boot image'}` : 'BIOS and UEFI'})`);
        if (iso) fail(iso.code === 'ISO_DIR_FULL' ? 'ISO_DIR_FULL' : 'ISO_BUILD_FAILED', `the installer ISO could not be built: ${iso.error ?? 'unknown error'}`);
        if (!ctx.memo.queued) {
          await queueIsoBuild(ctx.db, ctx.run.id);
          ctx.memo.queued = true;
        }
        return ctx.waitFor('the ISO build (the ISO-build queue)');
      },
      cleanup: {
        name: 'revoke-iso',
        title: 'Ending the ISO\'s URL and callback token',
        async run(ctx) {
          const revoked = await revokeIsos(ctx.db, { runId: ctx.run.id });
          return complete(revoked ? 'the ISO\'s URL and the job\'s callback token no longer work' : 'no ISO was published');
        },
      },
    },
    {
      name: 'mount-iso',
      title: 'Mounting ISO',
      async run(ctx) {
        const iso = await isoOf(ctx);
        if (!iso?.ok || !iso.imageUrl) fail('ISO_BUILD_FAILED', 'the job has no built ISO to mount');
        await ctx.command('bmc.media-insert', { imageUrl: iso!.imageUrl! });
        return complete('the ISO is in the BMC\'s virtual CD');
      },
      cleanup: {
        name: 'eject-iso-cleanup',
        title: 'Ejecting the ISO',
        async run(ctx) {
          await ctx.command('bmc.media-eject', {});
          return complete('the virtual media is empty');
        },
      },
    },
    {
      name: 'boot-cd',
      title: 'Setting a one-time boot from the virtual CD',
      async run(ctx) {
        await ctx.command('bmc.boot-device', { device: 'cd', persistent: false });
        return complete('the next boot is from the virtual CD');
      },
    },
    {
      name: 'boot-installer',
      title: 'Booting the installer',
      destructive: true,
      async run(ctx) {
        const state = (await ctx.command('bmc.power-state', {})) as PowerState;
        const action = state === 'off' ? 'on' : 'cycle';
        await ctx.command('bmc.power', { action });
        return complete(action === 'on' ? 'powered on into the installer' : `power-cycled into the installer (it was ${state})`);
      },
    },
    {
      name: 'install-os',
      title: 'Installing OS',
      destructive: true,
      async run(ctx) {
        const params = paramsOf(ctx);
        const steps = await installReports(ctx.db, ctx.run.id, 'step');
        const failed = steps.find((s) => s.payload.state === 'failed');
        if (failed) fail('INSTALL_FAILED', `the installer's step "${String(failed.payload.step)}" failed`);
        const done = (await installReports(ctx.db, ctx.run.id, 'complete')).at(-1);
        if (done) return complete(`installed${done.payload.osIp ? `; the OS address is ${String(done.payload.osIp)}` : ''}`);
        const last = steps.at(-1);
        const since = last?.createdAt ?? ctx.step.startedAt;
        const stuckAt = new Date(since.getTime() + params.stuckSeconds * 1000);
        const at = last ? `the last step was "${String(last.payload.step)}"${last.payload.percent != null ? ` (${String(last.payload.percent)}%)` : ''}, at ${since.toISOString()}` : '';
        if (ctx.now >= stuckAt) {
          fail('INSTALL_STUCK', last
            ? `the installer reported no step for ${params.stuckSeconds} s: ${at}`
            : `the installer reported no step within ${params.stuckSeconds} s of booting`);
        }
        const until = stuckAt < ctx.step.deadline ? stuckAt : ctx.step.deadline;
        return waitUntil(until, last ? `the installer (${at})` : 'the installer\'s first step report', ctx.now);
      },
    },
    {
      name: 'first-boot',
      title: 'Waiting for the first boot',
      async run(ctx) {
        const boot = (await installReports(ctx.db, ctx.run.id, 'firstboot')).at(-1);
        if (!boot) return ctx.waitFor('the installed system\'s first boot (POST /controlnode/firstboot)');
        const osIp = String(boot.payload.osIp);
        await ctx.updateNode({ addresses: [osIp] });
        await recordInstalledOs(ctx.db, { nodeId: ctx.node.id, tenantId: ctx.node.tenantId, osIp, hostname: installHostname(paramsOf(ctx), ctx.node.inventory), osUsername: paramsOf(ctx).osUsername });
        return complete(`the installed system booted at ${osIp}`);
      },
    },
    {
      name: 'eject-iso',
      title: 'Ejecting the ISO',
      async run(ctx) {
        await ctx.command('bmc.media-eject', {});
        await revokeIsos(ctx.db, { runId: ctx.run.id });
        return complete('the virtual media is empty; the ISO\'s URL and the job\'s callback token no longer work');
      },
    },
  ],
  async finish(ctx) {
    return { data: { role: (ctx.run.params as unknown as InstallParams).role } };
  },
};
