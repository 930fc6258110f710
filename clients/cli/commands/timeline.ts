/**
 * timeline NODE: the node's workflow runs, oldest first, each with its steps: when they started,
 * how long they took, what they are waiting for and the errors they ended with.
 */
import { Option, type Command } from 'commander';
import { MetalNodeTimelineDocument } from '../../sdk/src';
import { cli } from '../context';
import { Refusal } from '../errors';
import { took, when } from '../output';
import { nodeId, positiveInt, ref } from '../resolve';

/** CODE: message, without the code twice when the message starts with it. */
function errorText(code: string | null | undefined, message: string | null | undefined): string {
  if (!code) return message ?? '';
  if (!message) return code;
  return message.startsWith(`${code}:`) ? message : `${code}: ${message}`;
}

export function register(program: Command): void {
  program.command('timeline').description('a node\'s workflow runs and their steps, with times and errors')
    .argument('<node>', 'node id or name', ref('node'))
    .addOption(new Option('--last <n>', 'how many runs (newest; the service allows up to 50)').argParser(positiveInt(50)).default(10))
    .action(async (value: string, o: { last: number }, cmd: Command) => {
      const invocation = cli(cmd);
      const id = await nodeId(invocation.client(), value);
      const { node } = await invocation.client().request(MetalNodeTimelineDocument, { id, last: o.last });
      if (!node || !('timeline' in node)) throw new Refusal('NOT_FOUND', `node ${id} not found (or the token may not read it)`);
      const runs = [...node.timeline].reverse();
      if (invocation.out.json) return invocation.out.printJson(runs);
      if (runs.length === 0) return invocation.out.line(`${id}: no workflow runs`);
      for (const run of runs) {
        const error = run.lastError ? `  ${errorText(run.lastError.code, run.lastError.message)}` : '';
        const waiting = run.waitingFor ? `  waiting for ${run.waitingFor}${run.waitUntil ? ` until ${when(run.waitUntil)}` : ''}` : '';
        invocation.out.line(`run ${run.id}  ${run.kind}  ${run.status}  started ${when(run.startedAt ?? run.createdAt)}` +
          `${run.finishedAt ? `  took ${took(run.startedAt ?? run.createdAt, run.finishedAt)}` : ''}${run.attempt > 1 ? `  attempt ${run.attempt}` : ''}${waiting}${error}`);
        invocation.out.table(['#', 'STEP', 'STATUS', 'TRIES', 'STARTED', 'TOOK', 'ERROR'], run.steps.map((s) => [
          s.idx, `${s.title ?? s.name}${s.cleanup ? ' (cleanup)' : ''}${s.destructive ? ' !' : ''}`, s.status, s.attempts || '',
          when(s.startedAt), s.startedAt ? took(s.startedAt, s.finishedAt ?? undefined) : '',
          errorText(s.errorCode, s.message),
        ]));
        if (run.steps.some((s) => s.destructive)) invocation.out.line('(! = the step sends destructive commands)');
      }
    });
}
