import fs from 'node:fs';
import { InvalidArgumentError, Option, type Command } from 'commander';
import YAML from 'yaml';
import {
  ApplyFabricDocument,
  ApplyFabricNodeDocument,
  CancelFabricApplyDocument,
  TeardownFabricNodeDocument,
  FabricJobDocument,
  FabricLatestJobDocument,
  FabricPlanDocument,
  FabricPreflightDocument,
  FabricRolloutDocument,
  type FabricJobViewFragment,
  type FabricPlanInput,
  type FabricPreflightInput,
} from '../../sdk/src';
import { cli, type Cli } from '../context';
import { oneLine, Refusal, UsageError } from '../errors';
import { when } from '../output';
import { itemProgress } from './node-bars';

/**
 * metalctl fabric plan | preflight | apply [--watch] | teardown [--watch] | watch | job | cancel:
 * the EVPN fabric's dry run, its read-only check of every compute node, and its rollout, followed
 * live from the fabricRollout subscription (a bar per node on a terminal, plain lines otherwise).
 */

const APPLY_STEPS = 8;
const TEARDOWN_STEPS = 6;

const int = (name: string) => (value: string): number => {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError(`${name} must be a whole number`);
  return Number(value);
};

/** A plan input from a YAML or JSON file: camelCase or snake_case keys of FabricPlanInput. */
function readPlanFile(file: string): FabricPlanInput {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new UsageError(`--file: cannot read it (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  let parsed: unknown;
  try {
    parsed = YAML.parse(text);
  } catch {
    throw new UsageError('--file: not YAML or JSON');
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new UsageError('--file: must hold one mapping of plan fields');
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(parsed)) out[key.replace(/_([a-z0-9])/g, (_m, letter: string) => letter.toUpperCase())] = value;
  return out as FabricPlanInput;
}

interface PlanOpts {
  file?: string; managementCidr?: string; nos?: string; vxlanMtu?: number; publicMtu?: number; expectedNodes?: number; expectedVms?: number;
  localAs?: number; switchAs?: number; switchName?: string; switchPeeringIp?: string; switchRole?: string; routerIdBase?: string;
  routerIdPrefixLen?: number; underlayMode?: string; switchConfig?: boolean;
}

async function plan(invocation: Cli, opts: PlanOpts): Promise<void> {
  const input: FabricPlanInput = opts.file ? readPlanFile(opts.file) : {};
  const flags: [keyof FabricPlanInput, unknown][] = [
    ['managementCidr', opts.managementCidr], ['fabricSwitchNos', opts.nos], ['vxlanMtu', opts.vxlanMtu], ['publicMtu', opts.publicMtu],
    ['expectedNodes', opts.expectedNodes], ['expectedVms', opts.expectedVms], ['localAs', opts.localAs], ['fabricSwitchAs', opts.switchAs],
    ['fabricSwitchName', opts.switchName], ['fabricSwitchPeeringIp', opts.switchPeeringIp], ['fabricSwitchRole', opts.switchRole],
    ['routerIdBase', opts.routerIdBase], ['routerIdPrefixLen', opts.routerIdPrefixLen], ['underlayMode', opts.underlayMode],
  ];
  for (const [key, value] of flags) if (value !== undefined) (input as Record<string, unknown>)[key] = value;
  const { fabricPlan: p } = await invocation.client().request(FabricPlanDocument, { input });
  if (invocation.out.json) return invocation.out.printJson(p);
  // The switch's text as rendered, lines kept; no control character that could drive the terminal.
  if (opts.switchConfig) return invocation.out.line(p.switchConfig.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g, '').replace(/\n$/, ''));
  invocation.out.table(['setting', 'planned'], [
    ['deployment mode', p.deploymentMode], ['underlay', p.underlayMode], ['AS', p.config.as], ['switch AS', p.config.fabricSwitchAs],
    ['switch', `${p.config.fabricSwitchName} (${p.config.fabricSwitchNos}, ${p.config.fabricSwitchRole})`],
    ['switch peering IP', p.config.fabricSwitchPeeringIp], ['management CIDR', p.config.managementCidr],
    ['VTEP pool', `${p.config.routerIdBase}/${p.config.routerIdPrefixLen} (${p.vtepCapacity} addresses)`],
    ['VXLAN MTU', p.config.vxlanMtu], ['public MTU', p.config.publicMtu], ['rollout status', p.config.rolloutStatus], ['plan hash', p.planHash],
  ]);
  for (const risk of p.risks) invocation.out.line(`risk: ${oneLine(risk)}`);
  for (const note of p.notes) invocation.out.line(`note: ${oneLine(note)}`);
  invocation.out.line('(--switch-config prints the rendered switch configuration)');
}

/** --override NODE_IP,IFACE,IP/PREFIX[,BRIDGE] */
function parseOverride(value: string, previous: FabricPreflightInput['nodeOverrides']): NonNullable<FabricPreflightInput['nodeOverrides']> {
  const parts = value.split(',').map((s) => s.trim());
  if (parts.length < 3 || parts.length > 4 || parts.some((p) => p === '')) {
    throw new InvalidArgumentError('--override is NODE_IP,IFACE,IP/PREFIX[,BRIDGE]');
  }
  const [nodeIp, underlayIfaceHint, underlayIp, underlayBridgeName] = parts as [string, string, string, string | undefined];
  return [...(previous ?? []), { nodeIp, underlayIfaceHint, underlayIp, ...(underlayBridgeName ? { underlayBridgeName } : {}) }];
}

interface PreflightOpts { underlayCidr: string; expectedNodes?: number; routerIdBase?: string; routerIdPrefixLen?: number; override?: FabricPreflightInput['nodeOverrides'] }

async function preflight(invocation: Cli, opts: PreflightOpts): Promise<void> {
  const input: FabricPreflightInput = { underlayCidr: opts.underlayCidr };
  if (opts.expectedNodes !== undefined) input.expectedNodes = opts.expectedNodes;
  if (opts.routerIdBase !== undefined) input.routerIdBase = opts.routerIdBase;
  if (opts.routerIdPrefixLen !== undefined) input.routerIdPrefixLen = opts.routerIdPrefixLen;
  if (opts.override?.length) input.nodeOverrides = opts.override;
  const { fabricPreflight: r } = await invocation.client().request(FabricPreflightDocument, { input });
  if (invocation.out.json) return invocation.out.printJson(r);
  invocation.out.table(['node', 'fqdn', 'mode', 'bridge', 'mtu', 'underlay ip', 'reason'],
    r.nodes.map((n) => [n.nodeIp, n.fqdn, n.mode, n.bridge, n.bridgeMtu || '', n.underlayIp, n.reason]));
  for (const d of r.mtuDrift) invocation.out.line(oneLine(`mtu drift: ${d.nodeIp} (${d.fqdn}) ${d.bridge} has MTU ${d.bridgeMtu}`));
  const pool = r.vtepPool;
  invocation.out.line(`VTEP pool ${pool.routerIdBase}/${pool.routerIdPrefixLen}: ${pool.capacity} addresses for ${pool.expectedNodes} expected nodes (headroom ${pool.headroom})${pool.overallocWarn ? ' OVER-ALLOCATED' : ''}`);
  invocation.out.line(oneLine(`underlay ${r.underlayCidr}: MTU consensus ${r.underlayMtu || 'none'}; ready: ${r.ready ? 'yes' : 'no'}`));
}

type JobView = FabricJobViewFragment;
const TERMINAL = new Set(['completed', 'failed', 'partial']);

/** Where one node is: apply (or teardown) steps done, and what it does now. */
interface NodeState { key: string; done: number; detail: string }

function nodeKey(n: { nodeIp: string; fqdn: string }): string {
  return n.fqdn || n.nodeIp;
}

/** The node states a job view says (steps recorded so far): the starting point before the events. */
function statesOf(job: JobView): Map<string, NodeState> {
  const mainPhase = job.jobType === 'fabric_teardown' ? 'teardown' : 'apply';
  const states = new Map<string, NodeState>();
  for (const n of job.nodes) {
    const done = n.steps.filter((s) => s.phase === mainPhase && (s.status === 'ok' || s.status === 'skipped')).length;
    const last = n.steps.at(-1);
    const detail = n.finished ? (n.ok ? 'done' : `failed: ${n.error}`) + (n.rolledBack ? ' (rolled back)' : '') : last ? `${last.step} ${last.status}` : 'waiting';
    states.set(n.nodeIp, { key: nodeKey(n), done, detail });
  }
  return states;
}

function summary(invocation: Cli, job: JobView): void {
  invocation.out.table(['node', 'fqdn', 'vtep', 'result', 'steps', 'error'], job.nodes.map((n) => [
    n.nodeIp, n.fqdn, n.vtepIp, n.finished ? (n.ok ? 'ok' : n.rolledBack ? 'rolled back' : 'failed') : 'unfinished',
    n.steps.map((s) => `${s.phase === 'teardown' ? '-' : ''}${s.step}:${s.status}`).join(' '), n.error,
  ]));
  invocation.out.line(oneLine(`job ${job.jobId} ${job.jobType} ${job.jobStatus} (${job.state}): ${job.completedNodes} ok, ${job.failedNodes} failed of ${job.totalNodes}${job.error ? `: ${job.error}` : ''}`));
}

/** Fails the command (exit 1, the code printed) unless the job completed. */
function outcome(job: JobView): void {
  if (job.jobStatus === 'completed') return;
  const why = job.firstFailError ? `${job.firstFailNode}: ${job.firstFailError}` : job.error || job.state;
  throw new Refusal(job.state.toUpperCase(), `fabric job ${job.jobId} ended ${job.jobStatus}: ${why}`);
}

/**
 * Follows a fabric job to its end: the job's nodes first (fabricJob), then every event of the
 * job from its first (fabricRollout replays them, then goes live; the SDK resubscribes from the
 * last cursor after a dropped connection). A bar per node on a terminal, a line per node change
 * otherwise; with --json one JSON object per event, then the job. Ctrl-C stops watching (the job
 * goes on): INTERRUPTED.
 */
export async function watchFabricJob(invocation: Cli, jobId: string, transport: Transport = 'ws'): Promise<JobView> {
  let job = (await invocation.client().request(FabricJobDocument, { jobId })).fabricJob;
  const total = job.jobType === 'fabric_teardown' ? TEARDOWN_STEPS : APPLY_STEPS;
  const mainPhase = job.jobType === 'fabric_teardown' ? 'teardown' : 'apply';
  const view = invocation.out.json ? null : itemProgress(invocation.out.interactive);
  if (TERMINAL.has(job.jobStatus)) {
    if (view) for (const s of statesOf(job).values()) view.update(s.key, s.done, total, s.detail);
  } else {
    const states = new Map<string, NodeState>();
    for (const n of job.nodes) states.set(n.nodeIp, { key: nodeKey(n), done: 0, detail: 'waiting' });
    const show = (ip: string) => {
      const s = states.get(ip);
      if (s && view) view.update(s.key, s.done, total, s.detail);
    };
    for (const ip of states.keys()) show(ip);
    const interrupted = invocation.interrupted();
    try {
      for await (const r of invocation.client().subscribe(FabricRolloutDocument, { jobId }, { transport, signal: interrupted, cursor: (x) => x.fabricRollout.cursor })) {
        const e = r.fabricRollout;
        const p = (e.payload ?? {}) as Record<string, unknown>;
        if (invocation.out.json) invocation.out.jsonLine({ cursor: e.cursor, type: e.type, state: e.state, progress: e.progress, nodeIp: e.nodeIp, fqdn: e.fqdn, at: e.createdAt, payload: p });
        const s = e.nodeIp ? states.get(e.nodeIp) : undefined;
        if (s) {
          if (e.state === 'node_step') {
            if (p.phase === mainPhase && (p.status === 'ok' || p.status === 'skipped')) s.done = Math.min(total, s.done + 1);
            const phase = p.phase === mainPhase ? '' : `${String(p.phase)} `;
            s.detail = `${phase}${String(p.step)} ${String(p.status)}${p.status === 'failed' && p.message ? `: ${String(p.message)}` : ''}`;
          } else if (e.state === 'node_ok') {
            s.done = total;
            s.detail = 'done';
          } else if (e.state === 'node_failed') {
            s.detail = `failed: ${String(p.error ?? '')}`;
          } else if (e.state === 'node_rolled_back') {
            s.detail = 'rolled back to baseline';
          } else if (e.state === 'node_rollback_failed') {
            s.detail = `rollback failed: ${String(p.error ?? '')}`;
          }
          show(e.nodeIp);
        } else if (view) {
          view.log(`${when(e.createdAt)}  job ${e.state} ${e.progress}%${p.error ? `: ${String(p.error)}` : ''}`);
        }
        if (typeof p.job_status === 'string' && TERMINAL.has(p.job_status)) break;
      }
    } catch (err) {
      if (!interrupted.aborted) throw err;
    } finally {
      view?.stop();
    }
    job = (await invocation.client().request(FabricJobDocument, { jobId })).fabricJob;
    if (interrupted.aborted && !TERMINAL.has(job.jobStatus)) {
      throw new Refusal('INTERRUPTED', `stopped watching; fabric job ${jobId} goes on (metalctl fabric watch ${jobId})`);
    }
  }
  view?.stop();
  if (invocation.out.json) invocation.out.jsonLine(job);
  else summary(invocation, job);
  return job;
}

type Transport = 'ws' | 'sse';

async function apply(invocation: Cli, opts: { node?: string; strict?: boolean; watch?: boolean; transport: Transport }): Promise<void> {
  const strict = opts.strict ?? false;
  const r = opts.node
    ? (await invocation.client().request(ApplyFabricNodeDocument, { nodeIp: opts.node, strict })).applyFabricNode
    : (await invocation.client().request(ApplyFabricDocument, { strict })).applyFabric;
  if (!opts.watch) {
    if (invocation.out.json) return invocation.out.printJson(r);
    invocation.out.line(oneLine(`${r.message}${r.created ? '' : ' (the same apply was already running)'}`));
    invocation.out.line(`job ${r.applyJobId}: follow it with \`metalctl fabric watch ${r.applyJobId}\`, stop it with \`metalctl fabric cancel ${r.applyJobId}\``);
    return;
  }
  if (invocation.out.json) invocation.out.jsonLine(r);
  else invocation.out.line(oneLine(`${r.message}: job ${r.applyJobId}`));
  outcome(await watchFabricJob(invocation, r.applyJobId, opts.transport));
}

async function teardown(invocation: Cli, nodeIp: string, opts: { watch?: boolean; transport: Transport }): Promise<void> {
  const r = (await invocation.client().request(TeardownFabricNodeDocument, { nodeIp })).teardownFabricNode;
  if (!opts.watch) {
    if (invocation.out.json) return invocation.out.printJson(r);
    invocation.out.line(oneLine(r.message));
    invocation.out.line(`job ${r.jobId}: follow it with \`metalctl fabric watch ${r.jobId}\``);
    return;
  }
  if (invocation.out.json) invocation.out.jsonLine(r);
  else invocation.out.line(oneLine(`${r.message}: job ${r.jobId}`));
  outcome(await watchFabricJob(invocation, r.jobId, opts.transport));
}

async function cancel(invocation: Cli, jobId: string | undefined): Promise<void> {
  let id = jobId;
  if (!id) {
    const latest = (await invocation.client().request(FabricLatestJobDocument, {})).fabricLatestJob;
    if (!latest || latest.jobStatus !== 'running' || latest.jobType !== 'fabric_apply') throw new Refusal('NOT_FOUND', 'no fabric apply is running');
    id = latest.jobId;
  }
  const r = (await invocation.client().request(CancelFabricApplyDocument, { jobId: id })).cancelFabricApply;
  if (invocation.out.json) return invocation.out.printJson(r);
  invocation.out.line(oneLine(`${r.message} (${r.state})`));
}

async function show(invocation: Cli, jobId: string | undefined): Promise<void> {
  const job = jobId
    ? (await invocation.client().request(FabricJobDocument, { jobId })).fabricJob
    : (await invocation.client().request(FabricLatestJobDocument, {})).fabricLatestJob;
  if (!job) throw new Refusal('NOT_FOUND', 'there is no fabric job yet');
  if (invocation.out.json) return invocation.out.printJson(job);
  summary(invocation, job);
}

const transportOption = () => new Option('--transport <t>', 'event stream transport').choices(['ws', 'sse']).default('ws');

export function register(program: Command): void {
  const fabric = program.command('fabric').description('the EVPN fabric: plan, preflight, roll out (with a bar per node), follow and cancel');

  fabric.command('plan')
    .description('dry run of a fabric config: the planned settings, risks, notes and plan hash (nothing is written)')
    .option('-f, --file <file>', 'plan fields from a YAML or JSON file (camelCase or snake_case); flags override it')
    .option('--management-cidr <cidr>', 'the management subnet, e.g. 192.168.111.0/24')
    .option('--nos <nos>', 'the switch NOS: sonic, cumulus, nxos, eos, other')
    .option('--vxlan-mtu <mtu>', 'fabric MTU, 1280..9216', int('--vxlan-mtu'))
    .option('--public-mtu <mtu>', 'VR public-side MTU (DC mode)', int('--public-mtu'))
    .option('--expected-nodes <n>', 'sizing hint for the VTEP pool', int('--expected-nodes'))
    .option('--expected-vms <n>', 'sizing hint for tenant networks', int('--expected-vms'))
    .option('--local-as <as>', 'the hosts\' AS (0 = the planner picks)', int('--local-as'))
    .option('--switch-as <as>', 'the switch\'s AS (0 = the planner picks)', int('--switch-as'))
    .option('--switch-name <name>', 'the fabric switch\'s name')
    .option('--switch-peering-ip <ip>', 'the switch\'s peering address (empty = the planner picks)')
    .option('--switch-role <role>', 'spine, leaf or border-leaf')
    .option('--router-id-base <ip>', 'VTEP pool base (empty = 10.255.0.0)')
    .option('--router-id-prefix-len <len>', 'VTEP pool prefix (0 = auto-size)', int('--router-id-prefix-len'))
    .addOption(new Option('--underlay-mode <mode>', 'the underlay').choices(['ospf', 'bgp']))
    .option('--switch-config', 'print only the rendered switch configuration')
    .action((opts: PlanOpts, cmd: Command) => plan(cli(cmd), opts));

  fabric.command('preflight')
    .description('reads every compute node over SSH (read-only): how each reaches the underlay, the MTU consensus, the VTEP pool')
    .requiredOption('--underlay-cidr <cidr>', 'IPv4 CIDR of the underlay, e.g. 10.60.200.0/24')
    .option('--expected-nodes <n>', 'overrides the stored sizing hint', int('--expected-nodes'))
    .option('--router-id-base <ip>', 'VTEP pool base (else the stored config\'s)')
    .option('--router-id-prefix-len <len>', 'VTEP pool prefix (else the stored config\'s)', int('--router-id-prefix-len'))
    .option('--override <NODE_IP,IFACE,IP/PREFIX[,BRIDGE]>', 'a node\'s underlay given by hand (repeatable)', parseOverride)
    .action((opts: PreflightOpts, cmd: Command) => preflight(cli(cmd), opts));

  fabric.command('apply')
    .description('rolls the fabric out to every compute node (or one); --watch follows it with a bar per node')
    .option('--node <ip>', 'only this compute node (its OS address)')
    .option('--strict', 'on the first node failure, every touched node goes back to baseline')
    .option('-w, --watch', 'follow the job to its end (exit 1 unless it completed)')
    .addOption(transportOption())
    .action((opts: { node?: string; strict?: boolean; watch?: boolean; transport: Transport }, cmd: Command) => apply(cli(cmd), opts));

  fabric.command('teardown')
    .description('tears EVPN/FRR down on one compute node, back to its baseline; --watch follows it')
    .argument('<node-ip>', 'the compute node\'s OS address')
    .option('-w, --watch', 'follow the job to its end (exit 1 unless it completed)')
    .addOption(transportOption())
    .action((nodeIp: string, opts: { watch?: boolean; transport: Transport }, cmd: Command) => teardown(cli(cmd), nodeIp, opts));

  fabric.command('watch')
    .description('follows a fabric job to its end: a bar per node (exit 1 unless it completed)')
    .argument('<job-id>', 'the fabric job')
    .addOption(transportOption())
    .action(async (jobId: string, opts: { transport: Transport }, cmd: Command) => outcome(await watchFabricJob(cli(cmd), jobId, opts.transport)));

  fabric.command('job')
    .description('a fabric job with its nodes and steps (default: the latest)')
    .argument('[job-id]', 'the fabric job')
    .action((jobId: string | undefined, _opts: unknown, cmd: Command) => show(cli(cmd), jobId));

  fabric.command('cancel')
    .description('cancels the running fabric apply: every touched node goes back to baseline')
    .argument('[job-id]', 'the apply job (default: the one running)')
    .action((jobId: string | undefined, _opts: unknown, cmd: Command) => cancel(cli(cmd), jobId));
}
