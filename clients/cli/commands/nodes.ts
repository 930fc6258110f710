/**
 * nodes ls|get|watch: the metal nodes the token may read.
 *
 * `watch` draws the nodes once, then redraws from the event stream (subscription `events`, which
 * resumes from its cursor after a dropped connection): every event about a node re-reads that node,
 * so the table shows what the service holds, not what an event implied. It ends on Ctrl-C (exit 0),
 * when --until's state is reached by every watched node (exit 0), or at --timeout (exit 0 without
 * --until; with --until, not reached in time is `error: TIMEOUT`, exit 1).
 */
import { Option, type Command } from 'commander';
import { EventsDocument, MetalNodeDocument, MetalNodesDocument, type EventFilter, type MetalNodeViewFragment, type NodeFilter } from '../../sdk/src';
import { cli, type Cli } from '../context';
import { Refusal } from '../errors';
import { when } from '../output';
import { nodeId, poolId, positiveInt, PROVISION_STATES, ref, siteId, type ProvisionStateName } from '../resolve';

type Node = MetalNodeViewFragment;

interface FilterOptions {
  pool?: string;
  site?: string;
  state?: ProvisionStateName;
  maintenance?: boolean;
}

function filterOptions(cmd: Command): Command {
  return cmd
    .addOption(new Option('--pool <pool>', 'only this pool (id or name)').argParser(ref('pool')))
    .addOption(new Option('--site <site>', 'only this site (id or name)').argParser(ref('site')))
    .addOption(new Option('--state <state>', 'only nodes in this provision state').choices(PROVISION_STATES))
    .addOption(new Option('--maintenance', 'only nodes in maintenance'));
}

async function nodeFilter(c: Cli, o: FilterOptions): Promise<NodeFilter> {
  const client = c.client();
  const filter: NodeFilter = {};
  if (o.pool) filter.poolId = await poolId(client, o.pool);
  if (o.site) filter.siteId = await siteId(client, o.site);
  if (o.state) filter.provisionState = o.state;
  if (o.maintenance) filter.maintenance = true;
  return filter;
}

async function listNodes(c: Cli, filter: NodeFilter, limit?: number): Promise<Node[]> {
  const nodes: Node[] = [];
  for await (const node of c.client().paginate(MetalNodesDocument, { filter }, (d) => d.nodes, { pageSize: 500 })) {
    nodes.push(node);
    if (limit && nodes.length >= limit) break;
  }
  return nodes;
}

/** A long text cut to fit a table cell (nodes get and --json keep it whole). */
const clip = (text: string, max: number) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);

const HEAD = ['ID', 'NAME', 'STATE', 'POOL', 'MAINT', 'BMC', 'ERROR', 'UPDATED'];
function row(n: Node): unknown[] {
  const state = n.failedFrom ? `${n.provisionState} (from ${n.failedFrom})` : n.provisionState;
  return [n.id, n.name, state, n.poolId, n.maintenance ? 'yes' : '', `${n.bmc.driver} ${n.bmc.address}`, n.lastError ? clip(`${n.lastError.code}: ${n.lastError.message}`, 60) : '', when(n.updatedAt)];
}

export async function getNode(c: Cli, id: string): Promise<Node> {
  const { node } = await c.client().request(MetalNodeDocument, { id });
  if (!node || !('provisionState' in node)) throw new Refusal('NOT_FOUND', `node ${id} not found (or the token may not read it)`);
  return node as Node;
}

/** One node as a two-column table. */
export function printNode(c: Cli, n: Node): void {
  c.out.record([
    ['id', n.id], ['name', n.name], ['state', n.provisionState], ['failed from', n.failedFrom],
    ['last error', n.lastError ? `${n.lastError.code}: ${n.lastError.message}` : null], ['maintenance', n.maintenance],
    ['site', n.siteId], ['pool', n.poolId], ['bmc', `${n.bmc.driver} ${n.bmc.address}${n.bmc.credentialsSet ? '' : ' (no credentials)'}`],
    ['macs', n.macs.join(', ')], ['addresses', n.addresses.join(', ')], ['product uuid', n.productUuid],
    ['hardware profile', n.hardwareProfile?.name], ['profile', n.profileId ? `${n.profileId} v${n.profileVersion}` : null], ['role', n.role],
    ['workflow', n.workflowId], ['version', n.version], ['created', when(n.createdAt)], ['updated', when(n.updatedAt)],
  ]);
}

interface WatchOptions extends FilterOptions {
  until?: ProvisionStateName;
  timeout?: number;
  transport: 'ws' | 'sse';
}

async function watch(c: Cli, ids: string[], o: WatchOptions): Promise<void> {
  const client = c.client();
  const filter = await nodeFilter(c, o);
  const only = new Set(await Promise.all(ids.map((v) => nodeId(client, v))));
  const watched = new Map<string, Node>();
  const load = async () => {
    const found = only.size ? await Promise.all([...only].map((id) => getNode(c, id))) : await listNodes(c, filter);
    return found;
  };
  for (const n of await load()) watched.set(n.id, n);
  const live = await c.out.live();
  const draw = (note: string) =>
    live.draw(`${c.out.renderTable(HEAD, [...watched.values()].map(row))}\n${watched.size} node(s)  ${note}  (Ctrl-C to stop)`);
  const reached = () => o.until !== undefined && watched.size > 0 && [...watched.values()].every((n) => n.provisionState === o.until);

  /** A node's new view: a changed state is printed (plain line or JSON line), the screen redrawn. */
  const apply = (n: Node, cause: string) => {
    const before = watched.get(n.id);
    if (!before && only.size) return;
    if (!before && (filter.poolId && n.poolId !== filter.poolId || filter.siteId && n.siteId !== filter.siteId)) return;
    watched.set(n.id, n);
    const moved = !before || before.provisionState !== n.provisionState || before.maintenance !== n.maintenance ||
      JSON.stringify(before.lastError) !== JSON.stringify(n.lastError);
    if (!moved) return;
    const from = before?.provisionState ?? '-';
    if (c.out.json) c.out.jsonLine({ at: n.updatedAt, event: cause, nodeId: n.id, name: n.name, from, to: n.provisionState, lastError: n.lastError ?? null, node: n });
    else if (!c.out.interactive) {
      c.out.line(`${when(n.updatedAt)}  ${n.id}  ${n.name ?? ''}  ${from} -> ${n.provisionState}${n.lastError ? `  ${n.lastError.code}: ${n.lastError.message}` : ''}`);
    }
    draw(`last: ${n.name ?? n.id} ${from} -> ${n.provisionState}`);
  };

  if (!c.out.json && !c.out.interactive) c.out.line(`watching ${watched.size} node(s)${o.until ? ` until ${o.until}` : ''}`);
  draw('waiting for events');
  if (reached()) {
    live.done();
    if (!c.out.json && !c.out.interactive) c.out.line(`every node is ${o.until}`);
    return;
  }

  const stop = new AbortController();
  const interrupted = c.interrupted();
  const onInterrupt = () => stop.abort('interrupted');
  interrupted.addEventListener('abort', onInterrupt, { once: true });
  let timedOut = false;
  const timer = o.timeout ? setTimeout(() => { timedOut = true; stop.abort('timeout'); }, o.timeout * 1000) : undefined;
  // Moves between the first read and the subscription's start: read again once it runs, then now and then.
  const reread = async () => {
    try {
      for (const n of await load()) apply(n, 'reread');
      if (reached()) stop.abort('reached');
    } catch {
      // the next reread or event tries again
    }
  };
  const first = setTimeout(() => void reread(), 1000);
  const every = setInterval(() => void reread(), 30_000);
  const eventFilter: EventFilter = {};
  if (only.size === 1) eventFilter.nodeId = [...only][0];
  else {
    if (filter.poolId) eventFilter.poolId = filter.poolId;
    if (filter.siteId) eventFilter.siteId = filter.siteId;
  }
  try {
    for await (const data of client.subscribe(EventsDocument, { filter: eventFilter }, { transport: o.transport, signal: stop.signal, cursor: (d) => d.events.cursor })) {
      const event = data.events;
      if (!event.nodeId || (only.size && !only.has(event.nodeId))) continue;
      if (!event.type.startsWith('node.')) continue;
      apply(await getNode(c, event.nodeId), event.type);
      if (reached()) break;
    }
  } catch (e) {
    if (!stop.signal.aborted) throw e;
  } finally {
    clearTimeout(timer);
    clearTimeout(first);
    clearInterval(every);
    interrupted.removeEventListener('abort', onInterrupt);
    stop.abort('done');
    live.done();
  }
  if (timedOut && o.until && !reached()) {
    const behind = [...watched.values()].filter((n) => n.provisionState !== o.until).map((n) => `${n.id} (${n.provisionState})`);
    throw new Refusal('TIMEOUT', `not every node reached ${o.until} within ${o.timeout}s: ${behind.slice(0, 20).join(', ')}${behind.length > 20 ? ' ...' : ''}`);
  }
  if (!c.out.json && !c.out.interactive) c.out.line(reached() ? `every node is ${o.until}` : 'stopped');
}

export function register(program: Command): void {
  const nodes = program.command('nodes').description('list, show and watch metal nodes');

  filterOptions(nodes.command('ls').description('list the nodes the token may read (filters combine)'))
    .addOption(new Option('--limit <n>', 'at most n nodes').argParser(positiveInt()))
    .action(async (o: FilterOptions & { limit?: number }, cmd: Command) => {
      const c = cli(cmd);
      const list = await listNodes(c, await nodeFilter(c, o), o.limit);
      if (c.out.json) return c.out.printJson(list);
      c.out.table(HEAD, list.map(row));
      c.out.line(`${list.length} node(s)`);
    });

  nodes.command('get').description('show one node (id or name)')
    .argument('<node>', 'node id or name', ref('node'))
    .action(async (value: string, _o: unknown, cmd: Command) => {
      const c = cli(cmd);
      const n = await getNode(c, await nodeId(c.client(), value));
      if (c.out.json) return c.out.printJson(n);
      printNode(c, n);
    });

  filterOptions(nodes.command('watch').description('show the nodes and redraw as they move (from the event stream); plain lines when not a terminal'))
    .argument('[node...]', 'only these nodes (ids or names); default: every node the filters select')
    .addOption(new Option('--until <state>', 'stop once every watched node is in this state').choices(PROVISION_STATES))
    .addOption(new Option('--timeout <seconds>', 'stop after this many seconds (with --until: error TIMEOUT if not reached)').argParser(positiveInt(7 * 24 * 3600)))
    .addOption(new Option('--transport <t>', 'event stream transport').choices(['ws', 'sse']).default('ws'))
    .action(async (ids: string[], o: WatchOptions, cmd: Command) => {
      await watch(cli(cmd), ids, o);
    });
}
