import { Option, type Command } from 'commander';
import {
  ControlNodeJobCancelDocument,
  ControlNodeJobDocument,
  JobProgressDocument,
  type ControlNodeJobViewFragment,
} from '../../sdk/src';
import { cli, type Cli } from '../context';
import { oneLine, Refusal } from '../errors';
import { when } from '../output';
import { itemProgress } from './node-bars';

/**
 * metalctl jobs get | watch | cancel: control-node jobs (a provision or an unprovision: the node's
 * workflow runs, with their stage and the installer's percent). `watch` re-reads the job on every
 * event of it (jobProgress: every run of the job, replayed from the first, then live; the SDK
 * resumes from its cursor after a dropped connection), and after a quiet stretch (the installer's
 * percent between its reports).
 */

type Job = ControlNodeJobViewFragment;
export type Transport = 'ws' | 'sse';
const TERMINAL = new Set<string>(['COMPLETED', 'FAILED', 'CANCELLED']);
/**
 * A re-read when no event came for this long (METALCTL_WATCH_REFRESH_MS overrides it: the
 * end-to-end tests set it high, so that only the event stream can move what they watch).
 */
function quietRefreshMs(): number {
  const v = Number(process.env.METALCTL_WATCH_REFRESH_MS);
  return Number.isSafeInteger(v) && v >= 100 ? v : 5000;
}

const lower = (s: string) => s.toLowerCase();

export function printJob(invocation: Cli, job: Job): void {
  invocation.out.record([
    ['id', job.id], ['type', job.jobType], ['status', lower(job.jobStatus)], ['stage', job.status], ['progress', `${job.progress}%`],
    ['host', job.resourceName], ['bmc', job.nodeIp], ['batch', job.parentId || null], ['error', job.lastError],
    ['created', when(job.createdAt)], ['updated', when(job.updatedAt)],
  ]);
}

/** Exit 1 with the job's error code (its lastError is `CODE: message`) unless it completed. */
export function jobOutcome(job: Job): void {
  if (job.jobStatus === 'COMPLETED') return;
  const coded = /^([A-Z][A-Z0-9_]+): (.*)$/s.exec(job.lastError ?? '');
  const why = coded ? coded[2] : job.lastError;
  throw new Refusal(coded?.[1] ?? `JOB_${job.jobStatus}`, `job ${job.id} ${lower(job.jobStatus)}${why ? `: ${why}` : ''}`);
}

async function getJob(invocation: Cli, id: string): Promise<Job> {
  return (await invocation.client().request(ControlNodeJobDocument, { id })).controlNodeJob;
}

/**
 * Follows a job until it completes, fails or is cancelled; returns its last view. A bar on a
 * terminal, a line per change otherwise, one JSON line per change with --json. Ctrl-C stops
 * watching (the job goes on): INTERRUPTED.
 */
export async function watchJob(invocation: Cli, id: string, transport: Transport = 'ws'): Promise<Job> {
  let job = await getJob(invocation, id);
  const view = invocation.out.json ? null : itemProgress(invocation.out.interactive);
  let last = '';
  const render = (j: Job) => {
    const key = JSON.stringify([j.jobStatus, j.status, j.progress, j.lastError]);
    if (key === last) return;
    last = key;
    if (invocation.out.json) invocation.out.jsonLine(j);
    else view!.update(j.resourceName || j.nodeIp, j.progress, 100, `${lower(j.jobStatus)}: ${j.status}${j.lastError ? ` (${j.lastError})` : ''}`);
  };
  render(job);
  if (!TERMINAL.has(job.jobStatus)) {
    const interrupted = invocation.interrupted();
    const stop = new AbortController();
    const onInterrupt = () => stop.abort();
    interrupted.addEventListener('abort', onInterrupt, { once: true });
    let wake: () => void = () => {};
    let failure: unknown = null;
    const events = (async () => {
      try {
        for await (const _event of invocation.client().subscribe(JobProgressDocument, { jobId: id }, { transport, signal: stop.signal, cursor: (r) => r.jobProgress.cursor })) wake();
      } catch (err) {
        if (!stop.signal.aborted) failure = err;
      } finally {
        wake();
      }
    })();
    try {
      while (!TERMINAL.has(job.jobStatus) && !stop.signal.aborted) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, quietRefreshMs());
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        if (failure) throw failure;
        job = await getJob(invocation, id);
        render(job);
      }
    } finally {
      interrupted.removeEventListener('abort', onInterrupt);
      stop.abort();
      wake = () => {};
      await events;
      view?.stop();
    }
    if (interrupted.aborted && !TERMINAL.has(job.jobStatus)) throw new Refusal('INTERRUPTED', `stopped watching; job ${id} goes on (metalctl jobs watch ${id})`);
  }
  view?.stop();
  if (!invocation.out.json) invocation.out.line(oneLine(`job ${job.id} ${lower(job.jobStatus)}: ${job.status}`));
  return job;
}

export const transportOption = () => new Option('--transport <t>', 'event stream transport').choices(['ws', 'sse']).default('ws');

export function register(program: Command): void {
  const jobs = program.command('jobs').description('control-node jobs (provision, unprovision): get, watch, cancel');

  jobs.command('get')
    .description('a job: its status, stage, progress and error')
    .argument('<job-id>', 'the job id (provision prints it)')
    .action(async (id: string, _o: unknown, cmd: Command) => {
      const invocation = cli(cmd);
      const job = await getJob(invocation, id);
      if (invocation.out.json) return invocation.out.printJson(job);
      printJob(invocation, job);
    });

  jobs.command('watch')
    .description('follows a job to its end: a progress bar on a terminal, a line per change otherwise (exit 1 unless it completed)')
    .argument('<job-id>', 'the job id')
    .addOption(transportOption())
    .action(async (id: string, o: { transport: Transport }, cmd: Command) => jobOutcome(await watchJob(cli(cmd), id, o.transport)));

  jobs.command('cancel')
    .description('cancels a running job: its cleanup ejects the ISO, the node fails from deploying (ABORTED); again is a no-op')
    .argument('<job-id>', 'the job id')
    .action(async (id: string, _o: unknown, cmd: Command) => {
      const invocation = cli(cmd);
      const job = (await invocation.client().request(ControlNodeJobCancelDocument, { id })).cancelControlNodeJob;
      if (invocation.out.json) return invocation.out.printJson(job);
      invocation.out.line(oneLine(`job ${job.id} ${lower(job.jobStatus)}: ${job.status}`));
    });
}
