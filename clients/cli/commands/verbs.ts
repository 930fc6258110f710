/**
 * Every metal verb on one node: manage, inspect, provide, deploy, undeploy, rescue, unrescue, abort,
 * recover, retire, and confirm-mac. Each records the move and answers with the node's view: the
 * command prints the state it is in now (exit 0) or the refusal (`error: INVALID_STATE: ...`, exit 1).
 * With --wait it then follows the node (subscription nodeUpdated) until its workflow has ended and it
 * rests in a state no workflow is driving; ending in failed is exit 1 with the node's lastError.
 */
import { Option, type Command } from 'commander';
import {
  AbortDocument, ConfirmMacDocument, DeployDocument, InspectDocument, ManageDocument, NodeUpdatedDocument, ProvideDocument,
  RecoverDocument, RescueDocument, RetireDocument, UndeployDocument, UnrescueDocument, WorkflowRunDocument,
  type MetalNodeViewFragment,
} from '../../sdk/src';
import { cli, type Cli } from '../context';
import { Refusal } from '../errors';
import { nodeId, positiveInt, ref } from '../resolve';

type Node = MetalNodeViewFragment;

/** States a workflow drives: --wait goes on while the node is in one. */
const MOVING = new Set(['adopting', 'enrolling', 'inspecting', 'commissioning', 'deploying', 'releasing', 'retiring']);
const RUN_ENDED = new Set(['succeeded', 'failed', 'aborted', 'superseded']);
export const WIPE_MODES = ['none', 'quick', 'secure-erase', 'crypto-erase'] as const;
export const wipeValue = (mode: string) => mode.replace(/-/g, '_') as 'none' | 'quick' | 'secure_erase' | 'crypto_erase';

async function settled(invocation: Cli, n: Node): Promise<boolean> {
  if (MOVING.has(n.provisionState)) return false;
  if (!n.workflowId) return true;
  const { workflowRun } = await invocation.client().request(WorkflowRunDocument, { id: n.workflowId });
  return !workflowRun || RUN_ENDED.has(workflowRun.status);
}

/** Follows the node until it rests; prints each state it passes through. */
export async function waitForNode(invocation: Cli, start: Node, timeoutS: number | undefined): Promise<Node> {
  let last = start;
  if (await settled(invocation, last)) return last;
  const stop = new AbortController();
  const interrupted = invocation.interrupted();
  const onInterrupt = () => stop.abort('interrupted');
  interrupted.addEventListener('abort', onInterrupt, { once: true });
  let timedOut = false;
  const timer = timeoutS ? setTimeout(() => { timedOut = true; stop.abort('timeout'); }, timeoutS * 1000) : undefined;
  try {
    for await (const { nodeUpdated: n } of invocation.client().subscribe(NodeUpdatedDocument, { id: start.id }, { signal: stop.signal })) {
      if (n.provisionState !== last.provisionState && !invocation.out.json) invocation.out.line(`${n.id}: ${last.provisionState} -> ${n.provisionState}`);
      last = n;
      if (await settled(invocation, n)) break;
    }
  } catch (e) {
    if (!stop.signal.aborted) throw e;
  } finally {
    clearTimeout(timer);
    interrupted.removeEventListener('abort', onInterrupt);
    stop.abort('done');
  }
  if (timedOut) throw new Refusal('TIMEOUT', `node ${start.id} still ${last.provisionState} after ${timeoutS}s`);
  if (interrupted.aborted) throw new Refusal('INTERRUPTED', `stopped waiting; node ${start.id} is ${last.provisionState}`);
  return last;
}

interface VerbSpec {
  name: string;
  summary: string;
  options?: (cmd: Command) => Command;
  call: (invocation: Cli, nodeId: string, o: Record<string, unknown>) => Promise<Node>;
}

const VERBS: VerbSpec[] = [
  { name: 'manage', summary: 'ready -> enrolling: re-verify BMC access, then re-inspect and re-commission', call: async (invocation, id) => (await invocation.client().request(ManageDocument, { input: { nodeId: id } })).manageNode.node },
  { name: 'inspect', summary: 'ready -> inspecting: boot the ramdisk and read the inventory', call: async (invocation, id) => (await invocation.client().request(InspectDocument, { input: { nodeId: id } })).inspectNode.node },
  { name: 'provide', summary: 'ready -> commissioning: diagnostics, quick wipe, power off', call: async (invocation, id) => (await invocation.client().request(ProvideDocument, { input: { nodeId: id } })).provideNode.node },
  {
    name: 'deploy', summary: 'ready -> deploying with a deploy profile version',
    options: (cmd) => cmd
      .requiredOption('--profile <id>', 'deploy profile id', ref('profile'))
      .requiredOption('--profile-version <n>', 'deploy profile version', positiveInt()),
    call: async (invocation, id, o) => (await invocation.client().request(DeployDocument, { input: { nodeId: id, profileId: o.profile as string, profileVersion: o.profileVersion as number } })).deployNode.node,
  },
  {
    name: 'undeploy', summary: 'deployed or rescue -> releasing: wipe the disks and power off',
    options: (cmd) => cmd.addOption(new Option('--wipe <mode>', 'how the disks are wiped (service default: quick)').choices(WIPE_MODES)),
    call: async (invocation, id, o) => (await invocation.client().request(UndeployDocument, { input: { nodeId: id, ...(o.wipe ? { wipe: wipeValue(o.wipe as string) } : {}) } })).undeployNode.node,
  },
  { name: 'rescue', summary: 'deployed -> rescue: boot the rescue ramdisk', call: async (invocation, id) => (await invocation.client().request(RescueDocument, { input: { nodeId: id } })).rescueNode.node },
  { name: 'unrescue', summary: 'rescue -> deployed once the installed OS boots again', call: async (invocation, id) => (await invocation.client().request(UnrescueDocument, { input: { nodeId: id } })).unrescueNode.node },
  {
    name: 'abort', summary: 'stop the running workflow: the node fails (ABORTED), maintenance on',
    options: (cmd) => cmd.option('--reason <text>', 'recorded with the ABORTED error'),
    call: async (invocation, id, o) => (await invocation.client().request(AbortDocument, { input: { nodeId: id, ...(o.reason ? { reason: o.reason as string } : {}) } })).abortNode.node,
  },
  { name: 'recover', summary: 'failed -> the last stable point for where it failed', call: async (invocation, id) => (await invocation.client().request(RecoverDocument, { input: { nodeId: id } })).recoverNode.node },
  { name: 'retire', summary: '-> retiring: erase, power off, revoke identity; then retired (terminal)', call: async (invocation, id) => (await invocation.client().request(RetireDocument, { input: { nodeId: id } })).retireNode.node },
  {
    name: 'confirm-mac', summary: 'bind the PXE MAC of a node enrolled without MACs',
    options: (cmd) => cmd.requiredOption('--mac <mac>', 'the MAC address (e.g. the discovered candidate)', ref('MAC')),
    call: async (invocation, id, o) => (await invocation.client().request(ConfirmMacDocument, { input: { nodeId: id, mac: o.mac as string } })).confirmMac.node,
  },
];

/** What a verb's answer says, as one line. */
export function movedLine(verb: string, n: Node): string {
  return `${verb} ${n.id}${n.name ? ` (${n.name})` : ''}: now ${n.provisionState}${n.workflowId ? `, workflow ${n.workflowId}` : ''}`;
}

export function failedRefusal(n: Node): Refusal {
  return new Refusal(n.lastError?.code ?? 'FAILED', `node ${n.id} failed${n.failedFrom ? ` from ${n.failedFrom}` : ''}${n.lastError ? `: ${n.lastError.message}` : ''}`);
}

export function register(program: Command): void {
  for (const spec of VERBS) {
    let cmd = program.command(spec.name).description(`${spec.summary} (one node)`)
      .argument('<node>', 'node id or name', ref('node'));
    if (spec.options) cmd = spec.options(cmd);
    cmd
      .option('--wait', 'then follow the node until its workflow ends (exit 1 if it fails)')
      .addOption(new Option('--timeout <seconds>', 'with --wait: give up after this long (error TIMEOUT)').argParser(positiveInt(7 * 24 * 3600)))
      .action(async (value: string, o: Record<string, unknown>, self: Command) => {
        const invocation = cli(self);
        const id = await nodeId(invocation.client(), value);
        let node = await spec.call(invocation, id, o);
        if (!invocation.out.json) invocation.out.line(movedLine(spec.name, node));
        if (o.wait) {
          node = await waitForNode(invocation, node, o.timeout as number | undefined);
          if (!invocation.out.json) invocation.out.line(`${node.id}: ${node.provisionState}`);
        }
        if (invocation.out.json) invocation.out.printJson(node);
        if (o.wait && node.provisionState === 'failed') throw failedRefusal(node);
      });
  }
}
