/**
 * power NODE ACTION: queues a bmc.power command for the node's site agent (the provision state does
 * not change) and prints its command id; --wait follows the command until the agent reports it.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Argument, Option, type Command } from 'commander';
import { PowerDocument } from '../../sdk/src';
import { cli } from '../context';
import { Refusal } from '../errors';
import { CommandByIdDocument, type CommandView } from '../operations';
import { nodeId, positiveInt, ref } from '../resolve';

/** The seed's spelling (graceful-off) and the schema's (graceful_off) are both taken. */
export const POWER_ACTIONS = ['on', 'off', 'graceful-off', 'reset', 'graceful-restart', 'cycle', 'nmi'] as const;
const ENDED = new Set(['succeeded', 'unverified', 'failed', 'expired']);

export function register(program: Command): void {
  program.command('power').description('queue a BMC power action for one node (on, off, graceful-off, reset, graceful-restart, cycle, nmi)')
    .argument('<node>', 'node id or name', ref('node'))
    .addArgument(new Argument('<action>', 'the power action').choices([...POWER_ACTIONS, 'graceful_off', 'graceful_restart']))
    .option('--wait', 'follow the command until the site agent reports it (exit 1 if it failed or expired)')
    .addOption(new Option('--timeout <seconds>', 'with --wait: give up after this long (error TIMEOUT)').argParser(positiveInt(3600)).default(330))
    .action(async (value: string, action: string, o: { wait?: boolean; timeout: number }, cmd: Command) => {
      const invocation = cli(cmd);
      const client = invocation.client();
      const id = await nodeId(client, value);
      const answer = (await client.request(PowerDocument, { input: { nodeId: id, action: action.replace(/-/g, '_') as 'on' } })).powerNode;
      if (!invocation.out.json) invocation.out.line(`power ${action} ${id}: queued as command ${answer.commandId}`);
      let command: Partial<CommandView> | undefined;
      if (o.wait) {
        const deadline = Date.now() + o.timeout * 1000;
        const interrupted = invocation.interrupted();
        for (;;) {
          const { node } = await client.request(CommandByIdDocument, { id: answer.commandId });
          command = node ?? undefined;
          if (command?.status && ENDED.has(command.status)) break;
          if (interrupted.aborted) throw new Refusal('INTERRUPTED', `stopped waiting; command ${answer.commandId} is ${command?.status ?? 'unknown'}`);
          if (Date.now() > deadline) throw new Refusal('TIMEOUT', `command ${answer.commandId} still ${command?.status ?? 'unknown'} after ${o.timeout}s`);
          await sleep(500);
        }
        if (!invocation.out.json) invocation.out.line(`command ${answer.commandId}: ${command.status}`);
      }
      if (invocation.out.json) invocation.out.printJson({ commandId: answer.commandId, node: answer.node, ...(command ? { command } : {}) });
      if (command && (command.status === 'failed' || command.status === 'expired')) {
        const error = (command.result as { error?: { code?: string; message?: string } } | null)?.error;
        throw new Refusal(error?.code ?? `COMMAND_${command.status.toUpperCase()}`, `power ${action} on ${id}: command ${answer.commandId} ${command.status}${error?.message ? `: ${error.message}` : ''}`);
      }
    });
}
