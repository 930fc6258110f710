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
import { DiscoveredDocument, EventsDocument, MetalNodeDocument, MetalNodesDocument, type EventFilter, type MetalNodeViewFragment, type NodeFilter } from '../../sdk/src';
import { cli, type Cli } from '../context';
import { oneLine, Refusal } from '../errors';
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

async function nodeFilter(invocation: Cli, o: FilterOptions): Promise<NodeFilter> {
  const client = invocation.client();
  const filter: NodeFilter = {};
  if (o.pool) filter.poolId = await poolId(client, o.pool);
  if (o.site) filter.siteId = await siteId(client, o.site);
  if (o.state) filter.provisionState = o.state;
  if (o.maintenance) filter.maintenance = true;
  return filter;
}

async function listNodes(invocation: Cli, filter: NodeFilter, limit?: number): Promise<Node[]> {
  const nodes: Node[] = [];
  for await (const node of invocation.client().paginate(MetalNodesDocument, { filter }, (d) => d.nodes, { pageSize: 500 })) {
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

export async function getNode(invocation: Cli, id: string): Promise<Node> {
  const { node } = await invocation.client().request(MetalNodeDocument, { id });
  if (!node || !('provisionState' in node)) throw new Refusal('NOT_FOUND', `node ${id} not found (or the token may not read it)`);
  return node as Node;
}

/** One node as a two-column table. */
export function printNode(invocation: Cli, n: Node): void {
  invocation.out.record([
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

/** What a node.* event's payload says of a move (the service's events carry from/to, failures their error). */
interface MovePayload {
  from?: string;
  to?: string;
  error?: { code?: string; message?: string };
  reason?: string | null;
}

async function watch(invocation: Cli, ids: string[], o: WatchOptions): Promise<void> {
  const client = invocation.client();
  const filter = await nodeFilter(invocation, o);
  const only = new Set(await Promise.all(ids.map((v) => nodeId(client, v))));
  const load = async () => (only.size ? await Promise.all([...only].map((id) => getNode(invocation, id))) : await listNodes(invocation, filter));
  /** The nodes on screen, by id: their view as last read, their state as the stream last moved it. */
  const watched = new Map<string, Node>();
  const state = new Map<string, string>();
  for (const n of await load()) {
    watched.set(n.id, n);
    state.set(n.id, n.provisionState);
  }
  const live = await invocation.out.live();
  const rows = () => [...watched.values()].map((n) => row({ ...n, provisionState: (state.get(n.id) ?? n.provisionState) as Node['provisionState'] }));
  const draw = (note: string) => {
    if (!invocation.out.interactive) return;
    live.draw(`${fit(invocation, rows())}\n${watched.size} node(s)  ${oneLine(note)}  (Ctrl-C to stop)`);
  };
  const reached = () => o.until !== undefined && watched.size > 0 && [...watched.keys()].every((id) => state.get(id) === o.until);

  /** A move, printed as it happened: a plain line, or a JSON line; on a terminal the table is redrawn instead. */
  const moved = (at: string, id: string, from: string, to: string, event: string, payload: MovePayload) => {
    const name = watched.get(id)?.name ?? null;
    const why = payload.error?.code ? `${payload.error.code}: ${payload.error.message ?? ''}` : payload.reason ? `reason: ${payload.reason}` : '';
    if (invocation.out.json) invocation.out.jsonLine({ at, event, nodeId: id, name, from, to, ...(payload.error ? { error: payload.error } : {}), ...(payload.reason ? { reason: payload.reason } : {}) });
    else if (!invocation.out.interactive) invocation.out.line(`${when(at)}  ${id}  ${name ?? ''}  ${from} -> ${to}${why ? `  ${why}` : ''}`);
    draw(`last: ${name ?? id} ${from} -> ${to}`);
  };

  // Details (maintenance, lastError, updatedAt) re-read in the background after each event, a few at a time.
  const pending = new Set<string>();
  let reading: Promise<void> | null = null;
  const readDetails = async () => {
    while (pending.size) {
      const batch = [...pending].slice(0, 16);
      for (const id of batch) pending.delete(id);
      const views = await Promise.all(batch.map((id) => getNode(invocation, id).catch(() => null)));
      for (const n of views) if (n && watched.has(n.id)) watched.set(n.id, n);
      draw('');
    }
    reading = null;
  };
  const detail = (id: string) => {
    pending.add(id);
    reading ??= readDetails();
  };

  if (!invocation.out.json && !invocation.out.interactive) invocation.out.line(`watching ${watched.size} node(s)${o.until ? ` until ${o.until}` : ''}`);
  draw('waiting for events');
  if (reached()) {
    live.done();
    if (!invocation.out.json && !invocation.out.interactive) invocation.out.line(`every node is ${o.until}`);
    return;
  }

  const stop = new AbortController();
  const interrupted = invocation.interrupted();
  const onInterrupt = () => stop.abort('interrupted');
  interrupted.addEventListener('abort', onInterrupt, { once: true });
  let timedOut = false;
  const timer = o.timeout ? setTimeout(() => { timedOut = true; stop.abort('timeout'); }, o.timeout * 1000) : undefined;
  // A move between the first read and the stream's start is not on the stream: read again once it
  // runs (nodes no event has moved yet, nodes that joined meanwhile), then now and then.
  const moving = new Set<string>();
  const reread = async (joining: boolean) => {
    try {
      for (const n of await load()) {
        // Nodes that join later come with their event (node.enrolled, or a move into --state).
        if (!watched.has(n.id) && !joining) continue;
        if (!watched.has(n.id)) {
          watched.set(n.id, n);
          state.set(n.id, n.provisionState);
          moved(n.updatedAt, n.id, '-', n.provisionState, 'reread', {});
        } else if (!moving.has(n.id) && state.get(n.id) !== n.provisionState) {
          const from = state.get(n.id)!;
          watched.set(n.id, n);
          state.set(n.id, n.provisionState);
          moved(n.updatedAt, n.id, from, n.provisionState, 'reread', {});
        }
      }
      if (reached()) stop.abort('reached');
    } catch {
      // the next reread or event tries again
    }
  };
  const first = setTimeout(() => void reread(true), 1000);
  const every = setInterval(() => void reread(false), 30_000);
  const eventFilter: EventFilter = {};
  if (only.size === 1) eventFilter.nodeId = [...only][0];
  else {
    if (filter.poolId) eventFilter.poolId = filter.poolId;
    if (filter.siteId) eventFilter.siteId = filter.siteId;
  }
  try {
    for await (const data of client.subscribe(EventsDocument, { filter: eventFilter }, { transport: o.transport, signal: stop.signal, cursor: (d) => d.events.cursor })) {
      const event = data.events;
      const id = event.nodeId;
      if (!id || !event.type.startsWith('node.') || (only.size && !only.has(id))) continue;
      const payload = (event.payload && typeof event.payload === 'object' ? event.payload : {}) as MovePayload;
      const to = typeof payload.to === 'string' ? payload.to : null;
      if (!watched.has(id)) {
        // A node that joins the pool or site (enrolled meanwhile): shown if it fits the filters.
        if (only.size || (filter.provisionState && to !== filter.provisionState)) continue;
        const n = await getNode(invocation, id).catch(() => null);
        if (!n || (filter.maintenance && !n.maintenance)) continue;
        watched.set(id, n);
      }
      moving.add(id);
      if (to) {
        const from = state.get(id) ?? (typeof payload.from === 'string' ? payload.from : '-');
        state.set(id, to);
        if (from !== to) moved(event.createdAt, id, from, to, event.type, payload);
      }
      detail(id);
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
    await reading;
    draw('');
    live.done();
  }
  if (timedOut && o.until && !reached()) {
    const behind = [...watched.keys()].filter((id) => state.get(id) !== o.until).map((id) => `${id} (${state.get(id)})`);
    throw new Refusal('TIMEOUT', `not every node reached ${o.until} within ${o.timeout}s: ${behind.slice(0, 20).join(', ')}${behind.length > 20 ? ' ...' : ''}`);
  }
  if (!invocation.out.json && !invocation.out.interactive) invocation.out.line(reached() ? `every node is ${o.until}` : 'stopped');
}

/**
 * The table when it fits the terminal; otherwise the count of nodes per state and the nodes that
 * changed last, as many as fit (2,000 machines do not fit a screen).
 */
function fit(invocation: Cli, rows: unknown[][]): string {
  const room = Math.max(8, (process.stdout.rows || 40) - 6);
  if (rows.length + 4 <= room) return invocation.out.renderTable(HEAD, rows);
  const counts = new Map<string, number>();
  for (const r of rows) counts.set(String(r[2]).split(' ')[0]!, (counts.get(String(r[2]).split(' ')[0]!) ?? 0) + 1);
  const summary = invocation.out.renderTable(['STATE', 'NODES'], [...counts].sort((a, b) => b[1] - a[1]));
  const recent = [...rows].sort((a, b) => String(b[7]).localeCompare(String(a[7]))).slice(0, Math.max(1, room - counts.size - 8));
  return `${summary}\n${invocation.out.renderTable(HEAD, recent)}`;
}

export function register(program: Command): void {
  const nodes = program.command('nodes').description('list, show and watch metal nodes');

  filterOptions(nodes.command('ls').description('list the nodes the token may read (filters combine)'))
    .addOption(new Option('--limit <n>', 'at most n nodes').argParser(positiveInt()))
    .action(async (o: FilterOptions & { limit?: number }, cmd: Command) => {
      const invocation = cli(cmd);
      const list = await listNodes(invocation, await nodeFilter(invocation, o), o.limit);
      if (invocation.out.json) return invocation.out.printJson(list);
      invocation.out.table(HEAD, list.map(row));
      invocation.out.line(`${list.length} node(s)`);
    });

  nodes.command('get').description('show one node (id or name)')
    .argument('<node>', 'node id or name', ref('node'))
    .action(async (value: string, _o: unknown, cmd: Command) => {
      const invocation = cli(cmd);
      const n = await getNode(invocation, await nodeId(invocation.client(), value));
      if (invocation.out.json) return invocation.out.printJson(n);
      printNode(invocation, n);
    });

  nodes.command('discovered').description('machines the site\'s agents saw PXE-booting from a MAC with no boot entry (last 24 h): candidates for confirm-mac')
    .requiredOption('--site <site>', 'the site (id or name)', ref('site'))
    .action(async (o: { site: string }, cmd: Command) => {
      const invocation = cli(cmd);
      const { discovered } = await invocation.client().request(DiscoveredDocument, { siteId: await siteId(invocation.client(), o.site) });
      if (invocation.out.json) return invocation.out.printJson(discovered);
      invocation.out.table(['MAC', 'PRODUCT UUID', 'ARCH', 'FIRST SEEN', 'LAST SEEN', 'REQUESTS', 'NODE', 'CANDIDATE FOR'], discovered.map((d) => [
        d.mac, d.productUuid, d.arch, when(d.firstSeen), when(d.lastSeen), d.requestCount, d.nodeId, d.candidateFor,
      ]));
      invocation.out.line(`${discovered.length} machine(s)`);
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
