/**
 * The status page's script (/ui; src/ui/page.ts serves it). Everything it shows comes from the
 * public API with the operator's token: GraphQL queries for the snapshot (nodeCounts, the failed
 * nodes, the moving nodes' current runs, fabricLatestJob, controlNodeJob) and the `events`
 * subscription over SSE (fetch streaming: EventSource cannot send an Authorization header, and a
 * token in a query string ends up in logs) for what changes. An event schedules a fresh read of
 * what it touches (counts, failed nodes, the rollout, a job) and moves a run's current step at once.
 *
 * The token: pasted into the form, or given once as /ui#token=... (the fragment is never sent to
 * a server); either way it is kept in sessionStorage (this tab only) and the fragment is removed
 * from the address bar and the history entry at once.
 */

const TOKEN_KEY = 'metal.token';
const STATE_ORDER = ['enrolling', 'adopting', 'inspecting', 'commissioning', 'ready', 'deploying', 'deployed', 'rescue', 'releasing', 'retiring', 'adopted', 'retired', 'failed'];
/** States a node is in while a workflow run moves it. */
const MOVING = ['enrolling', 'adopting', 'inspecting', 'commissioning', 'deploying', 'releasing', 'retiring', 'rescue'];
const ACTIVE_RUN = ['queued', 'running', 'waiting', 'aborting'];
const SHOWN = 200;
/** A node's steps in a fabric apply (connect ... verify_bgp) and a teardown (connect ... release_vtep). */
const APPLY_STEPS = 8;
const TEARDOWN_STEPS = 6;

interface ApiErrorShape {
  message: string;
  extensions?: { code?: string; details?: Record<string, unknown> };
}

class ApiError extends Error {
  constructor(readonly code: string, message: string, readonly details?: Record<string, unknown>) {
    super(message);
  }
}

function apiError(e: ApiErrorShape | undefined, status: number): ApiError {
  if (!e) return new ApiError(`HTTP_${status}`, `the service answered HTTP ${status}`);
  return new ApiError(e.extensions?.code ?? 'ERROR', e.message, e.extensions?.details);
}

// ---------------------------------------------------------------- the token

/** Moves a #token=... fragment into sessionStorage and out of the address bar; the token, if any. */
function takeToken(): string | null {
  // Not URLSearchParams: it would read a '+' of the token as a space.
  const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (match) {
    let given = match[1]!;
    try {
      given = decodeURIComponent(given).trim();
    } catch { /* not percent-encoded: taken as it is */ }
    if (given) sessionStorage.setItem(TOKEN_KEY, given);
    history.replaceState(history.state, '', location.pathname + location.search);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

let token = '';

// ---------------------------------------------------------------- the API

/** How long a read that failed below HTTP (fetch's TypeError) waits before its one retry. */
const NETWORK_RETRY_MS = 500;

async function gql<T>(query: string, variables: Record<string, unknown> = {}): Promise<T> {
  const send = () => fetch('/graphql', {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/graphql-response+json, application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
    cache: 'no-store',
    credentials: 'omit',
  });
  // Every query here is a read: one that failed below HTTP (a connection dropped on a busy
  // machine) is asked once more before the page says it cannot reach the service.
  const response = await send().catch(async (error: unknown) => {
    if (!(error instanceof TypeError)) throw error;
    await new Promise((resolve) => setTimeout(resolve, NETWORK_RETRY_MS));
    return send();
  });
  const body = (await response.json().catch(() => null)) as { data?: T; errors?: ApiErrorShape[] } | null;
  if (body?.errors?.length) throw apiError(body.errors[0], response.status);
  if (!response.ok || !body?.data) throw apiError(undefined, response.status);
  return body.data;
}

const EVENTS = `subscription Events($after: String) { events(after: $after) { cursor type nodeId siteId poolId subject payload createdAt } }`;

interface StreamEvent {
  cursor: string;
  type: string;
  nodeId: string | null;
  siteId: string | null;
  poolId: string | null;
  subject: string;
  payload: Record<string, unknown>;
  createdAt: string;
}

/**
 * The `events` subscription over GraphQL SSE: resolves when the server ends the stream, throws
 * ApiError when it refuses or closes it with an error, and calls onOpen once it is established.
 */
async function streamEvents(after: string | null, signal: AbortSignal, onOpen: () => void, onEvent: (e: StreamEvent) => void): Promise<void> {
  const response = await fetch('/graphql', {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query: EVENTS, variables: { after } }),
    cache: 'no-store',
    credentials: 'omit',
    signal,
  });
  if (!(response.headers.get('content-type') ?? '').startsWith('text/event-stream') || !response.body) {
    const body = (await response.json().catch(() => null)) as { errors?: ApiErrorShape[] } | null;
    throw apiError(body?.errors?.[0], response.status);
  }
  onOpen();
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    buffer += value;
    let end: number;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, '');
      let event = 'message';
      const data: string[] = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (event === 'complete') return;
      if (!data.length) continue;
      const result = JSON.parse(data.join('\n')) as { data?: { events: StreamEvent }; errors?: ApiErrorShape[] };
      if (result.errors?.length) throw apiError(result.errors[0], 200);
      if (result.data?.events) onEvent(result.data.events);
    }
  }
}

// ---------------------------------------------------------------- what the page knows

interface Count { siteId: string; poolId: string; provisionState: string; count: number }
interface FailedNode { id: string; name: string | null; siteId: string; poolId: string; failedFrom: string | null; lastError: { code: string; message: string } | null; updatedAt: string }
interface Run { runId: string; nodeId: string; kind: string; step: string; stepStatus: string; attempt: number; since: number }
interface FabricNode { fqdn: string; nodeIp: string; ok: boolean; finished: boolean; reachable: boolean; error: string; steps: { step: string; status: string }[] }
interface FabricJob { jobId: string; jobType: string; jobStatus: string; state: string; progress: number; totalNodes: number; completedNodes: number; failedNodes: number; updatedAt: string; nodes: FabricNode[] }
interface Job { id: string; jobType: string; jobStatus: string; status: string; progress: number; resourceName: string; nodeIp: string; lastError: string | null; updatedAt: string }

const known = {
  sites: new Map<string, string>(),
  pools: new Map<string, string>(),
  nodes: new Map<string, string>(),
  counts: [] as Count[],
  failed: [] as FailedNode[],
  runs: new Map<string, Run>(),
  fabric: null as FabricJob | null,
  fabricNote: '',
  jobs: new Map<string, Job>(),
  /** Run ids already asked about that are no control-node job. */
  notJobs: new Set<string>(),
  lastEventAt: 0,
  events: 0,
};

// ---------------------------------------------------------------- reads

const COUNTS = `query Counts { nodeCounts { siteId poolId provisionState count } nodes(filter: { provisionState: failed }, first: ${SHOWN}) { edges { node { id name siteId poolId failedFrom lastError { code message } updatedAt } } } }`;

async function readNames(): Promise<void> {
  const data = await gql<{ sites: { id: string; name: string }[]; pools: { id: string; name: string }[] }>('query Names { sites { id name } pools { id name } }');
  for (const s of data.sites) known.sites.set(s.id, s.name);
  for (const p of data.pools) known.pools.set(p.id, p.name);
}

async function readCounts(): Promise<void> {
  const data = await gql<{ nodeCounts: Count[]; nodes: { edges: { node: FailedNode }[] } }>(COUNTS);
  known.counts = data.nodeCounts;
  known.failed = data.nodes.edges.map((e) => e.node);
  for (const n of known.failed) if (n.name) known.nodes.set(n.id, n.name);
  if (known.counts.some((c) => !known.sites.has(c.siteId) || !known.pools.has(c.poolId))) await readNames();
}

interface TimelineNode {
  id: string;
  name: string | null;
  timeline: { id: string; kind: string; status: string; attempt: number; steps: { idx: number; title: string; status: string; startedAt: string | null; attempts: number }[] }[];
}

/** The runs of the nodes in a moving state, with their current step: the snapshot the events then move. */
async function readRuns(): Promise<void> {
  // One query per state: all eight in one would pass the API's query cost limit.
  const query = 'query Runs($s: ProvisionState!) { nodes(filter: { provisionState: $s }, first: ' + SHOWN + ') { edges { node { id name timeline(last: 1) { id kind status attempt steps { idx title status startedAt attempts } } } } } }';
  const pages = await Promise.all(MOVING.map((s) => gql<{ nodes: { edges: { node: TimelineNode }[] } }>(query, { s })));
  const runs = new Map<string, Run>();
  for (const page of pages) {
    for (const { node } of page.nodes.edges) {
      if (node.name) known.nodes.set(node.id, node.name);
      const run = node.timeline[0];
      if (!run || !ACTIVE_RUN.includes(run.status)) continue;
      const steps = [...run.steps].sort((a, b) => a.idx - b.idx);
      const current = steps.find((s) => s.status === 'running' || s.status === 'waiting') ?? [...steps].reverse().find((s) => s.startedAt) ?? steps[0];
      runs.set(run.id, {
        runId: run.id, nodeId: node.id, kind: run.kind, step: current?.title ?? 'queued', stepStatus: current?.status ?? run.status,
        attempt: current?.attempts ?? 0, since: current?.startedAt ? Date.parse(current.startedAt) : Date.now(),
      });
      if (run.kind === 'metal-install') jobEvent(run.id);
    }
  }
  known.runs = runs;
}

async function readFabric(): Promise<void> {
  try {
    const data = await gql<{ fabricLatestJob: FabricJob | null }>(
      'query Fabric { fabricLatestJob { jobId jobType jobStatus state progress totalNodes completedNodes failedNodes updatedAt nodes { fqdn nodeIp ok finished reachable error steps { step status } } } }',
    );
    known.fabric = data.fabricLatestJob;
    known.fabricNote = data.fabricLatestJob ? '' : 'no fabric rollout yet';
  } catch (error) {
    if (!(error instanceof ApiError) || !['FORBIDDEN', 'PERMISSION_DENIED'].includes(error.code)) throw error;
    known.fabric = null;
    known.fabricNote = 'this token may not read the fabric (it needs a platform-scoped grant)';
  }
}

async function readJob(id: string): Promise<void> {
  if (known.notJobs.has(id)) return;
  try {
    const { controlNodeJob } = await gql<{ controlNodeJob: Job }>(
      'query Job($id: ID!) { controlNodeJob(id: $id) { id jobType jobStatus status progress resourceName nodeIp lastError updatedAt } }', { id },
    );
    known.jobs.set(controlNodeJob.id, controlNodeJob);
    if (controlNodeJob.id !== id) known.notJobs.add(id); // a later run of the job's chain: the job is its first run
    jobAliases.set(id, controlNodeJob.id);
  } catch (error) {
    if (error instanceof ApiError && error.code === 'NOT_FOUND') known.notJobs.add(id);
    else throw error;
  }
  draw();
}
const jobAliases = new Map<string, string>();

/** Names of nodes the page saw in events only, 25 per request (the API allows 30 aliases). */
async function readNodeNames(ids: string[]): Promise<void> {
  const batch = ids.slice(0, 25);
  if (!batch.length) return;
  if (ids.length > batch.length) {
    for (const id of ids.slice(batch.length)) pendingNames.add(id);
    refreshNames();
  }
  const vars = Object.fromEntries(batch.map((id, i) => [`i${i}`, id]));
  const query = `query NodeNames(${batch.map((_, i) => `$i${i}: ID!`).join(', ')}) { ${batch.map((_, i) => `n${i}: node(id: $i${i}) { ... on MetalNode { id name } }`).join(' ')} }`;
  const data = await gql<Record<string, { id: string; name: string | null } | null>>(query, vars);
  for (const id of batch) known.nodes.set(id, id); // asked once, whatever the answer
  for (const n of Object.values(data)) if (n?.name) known.nodes.set(n.id, n.name);
}

// ---------------------------------------------------------------- scheduling

/** Runs `read` at most once per `ms`, never two at a time, and once more if asked while running. */
function throttled(what: string, read: () => Promise<void>, ms: number): () => void {
  let timer: number | null = null;
  let running = false;
  let again = false;
  const run = async () => {
    timer = null;
    if (running) {
      again = true;
      return;
    }
    running = true;
    const sentWith = token;
    try {
      await read();
      setNote(what, '');
    } catch (error) {
      handleError(what, error, sentWith);
    } finally {
      running = false;
      draw();
      if (again) {
        again = false;
        schedule();
      }
    }
  };
  const schedule = () => {
    if (timer === null) timer = window.setTimeout(() => void run(), ms);
  };
  return schedule;
}

const refreshCounts = throttled('counts', readCounts, 300);
const refreshFabric = throttled('fabric', readFabric, 300);
const pendingNames = new Set<string>();
const refreshNames = throttled('names', async () => {
  const ids = [...pendingNames];
  pendingNames.clear();
  await readNodeNames(ids);
}, 50);
const pendingJobs = new Set<string>();
const refreshJobs = throttled('jobs', async () => {
  const ids = [...pendingJobs];
  pendingJobs.clear();
  await Promise.all(ids.map((id) => readJob(id)));
}, 500);

function jobEvent(id: unknown): void {
  if (typeof id !== 'string' || !id) return;
  pendingJobs.add(jobAliases.get(id) ?? id);
  refreshJobs();
}

function onEvent(e: StreamEvent): void {
  known.lastEventAt = Date.now();
  known.events += 1;
  const p = e.payload ?? {};
  if (e.nodeId && !known.nodes.has(e.nodeId)) {
    pendingNames.add(e.nodeId);
    refreshNames();
  }
  if (e.type === 'node.enrolled' || e.type === 'node.registered' || e.type.startsWith('node.provision.')) refreshCounts();
  // A node has one active run at most: a newer one supersedes the last (which sends no
  // workflow.finished when the node store supersedes it).
  if (e.nodeId && typeof p.workflowId === 'string' && (e.type === 'workflow.step' || e.type.startsWith('node.provision.'))) {
    for (const [id, run] of known.runs) if (run.nodeId === e.nodeId && id !== p.workflowId) known.runs.delete(id);
  }
  if (e.type === 'workflow.step' && e.nodeId) {
    const runId = String(p.workflowId);
    const before = known.runs.get(runId);
    const step = String(p.title ?? p.step ?? '');
    const status = String(p.status ?? '');
    const sameStep = before && before.step === step;
    known.runs.set(runId, {
      runId, nodeId: e.nodeId, kind: String(p.kind ?? before?.kind ?? ''), step, stepStatus: status,
      attempt: Number(p.attempt ?? 0), since: sameStep && status !== 'running' ? before.since : Date.parse(e.createdAt),
    });
    if (p.kind === 'metal-install') jobEvent(runId);
  }
  if (e.type === 'workflow.finished') {
    known.runs.delete(String(p.workflowId));
    if (jobAliases.has(String(p.workflowId)) || p.kind === 'metal-install') jobEvent(p.workflowId);
  }
  if (e.type.startsWith('fabric.')) refreshFabric();
  if (e.type.startsWith('provision.')) jobEvent(e.subject);
  if (p.jobId) jobEvent(p.jobId);
  if (e.type.startsWith('node.provision.') && (p.verb === 'provision' || p.verb === 'unprovision')) jobEvent(p.workflowId);
  draw();
}

// ---------------------------------------------------------------- the live stream

let cursor: string | null = null;
let connection: 'connecting' | 'live' | 'reconnecting' | 'stopped' = 'connecting';
let stop: AbortController | null = null;

async function follow(): Promise<void> {
  stop = new AbortController();
  const mine = token;
  let delay = 1000;
  for (;;) {
    if (stop.signal.aborted) return;
    try {
      await streamEvents(cursor, stop.signal, () => {
        connection = 'live';
        delay = 1000;
        draw();
        // What happened before the stream opened (or while it was down) comes from a fresh read.
        void refreshAll();
      }, (e) => {
        cursor = e.cursor;
        onEvent(e);
      });
    } catch (error) {
      if (stop.signal.aborted) return;
      if (error instanceof ApiError) {
        if (error.code === 'UNAUTHENTICATED') return void askToken('the service refused this token: paste another', mine);
        // The server stopped or this page fell behind: resume after the cursor it names.
        if (error.code === 'ABORTED' && typeof error.details?.lastCursor === 'string') cursor = error.details.lastCursor;
        // A cursor older than the retention: start live again (the reads fill in).
        else if (error.code === 'INVALID_INPUT') cursor = null;
        else setNote('stream', `event stream: ${error.code}: ${error.message}`);
      }
    }
    connection = 'reconnecting';
    draw();
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 15000);
  }
}

async function refreshAll(): Promise<void> {
  const reads: [string, () => Promise<void>][] = [['names', readNames], ['counts', readCounts], ['runs', readRuns], ['fabric', readFabric]];
  const sentWith = token;
  await Promise.all(reads.map(async ([what, read]) => {
    try {
      await read();
      setNote(what, '');
    } catch (error) {
      handleError(what, error, sentWith);
    }
  }));
  setNote('stream', '');
  draw();
}

/** A read's failure; `sentWith`: the token the read was sent with (a refusal of an older one is no news). */
function handleError(what: string, error: unknown, sentWith: string): void {
  if (error instanceof ApiError && error.code === 'UNAUTHENTICATED') return void askToken('the service refused this token: paste another', sentWith);
  setNote(what, error instanceof ApiError ? `${what}: ${error.code}: ${error.message}` : `${what}: cannot reach the service (${error instanceof Error ? error.message : String(error)})`);
}

// ---------------------------------------------------------------- drawing

type Child = Node | string | number | null | undefined | false;

function h(tag: string, attrs: Record<string, string> = {}, ...children: (Child | Child[])[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(typeof c === 'number' ? String(c) : c);
  return el;
}

const app = () => document.getElementById('app')!;
/** What failed, by the read that failed (cleared when that read next succeeds). */
const notes = new Map<string, string>();
function setNote(what: string, text: string): void {
  if (text) notes.set(what, text);
  else notes.delete(what);
}

function seconds(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  return s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

const nodeName = (id: string) => known.nodes.get(id) ?? id;
const stateClass = (s: string) => (s === 'failed' ? 'failed' : MOVING.includes(s) ? 'running' : s === 'ready' || s === 'deployed' ? 'good' : '');

function countsSection(): HTMLElement {
  const states = STATE_ORDER.filter((s) => known.counts.some((c) => c.provisionState === s));
  const rows = new Map<string, Count[]>();
  for (const c of known.counts) {
    const key = `${c.siteId}/${c.poolId}`;
    rows.set(key, [...(rows.get(key) ?? []), c]);
  }
  const total = known.counts.reduce((n, c) => n + c.count, 0);
  const cell = (list: Count[], s: string, attrs: Record<string, string>) => {
    const n = list.filter((c) => c.provisionState === s).reduce((sum, c) => sum + c.count, 0);
    return h('td', { class: `n ${n ? stateClass(s) : 'mute'}`, 'data-state': s, ...attrs }, n);
  };
  return h('section', { id: 'counts', class: 'wide' },
    h('h2', {}, 'Nodes by provision state ', h('small', {}, `${total} node(s)`)),
    known.counts.length === 0 ? h('p', { class: 'mute' }, 'no nodes') : h('table', {},
      h('thead', {}, h('tr', {}, h('th', {}, 'site'), h('th', {}, 'pool'), states.map((s) => h('th', { class: 'n' }, s)), h('th', { class: 'n' }, 'total'))),
      h('tbody', {}, [...rows.values()].map((list) => h('tr', { 'data-pool': list[0]!.poolId },
        h('td', {}, known.sites.get(list[0]!.siteId) ?? list[0]!.siteId),
        h('td', {}, known.pools.get(list[0]!.poolId) ?? list[0]!.poolId),
        states.map((s) => cell(list, s, { 'data-pool': list[0]!.poolId })),
        h('td', { class: 'n' }, list.reduce((n, c) => n + c.count, 0))))),
      h('tfoot', {}, h('tr', { 'data-total': '' }, h('th', {}, 'all'), h('th', {}), states.map((s) => cell(known.counts, s, { 'data-total': '' })), h('th', { class: 'n' }, total)))),
  );
}

function failedSection(): HTMLElement {
  const all = known.counts.filter((c) => c.provisionState === 'failed').reduce((n, c) => n + c.count, 0);
  return h('section', { id: 'failed' },
    h('h2', {}, 'Failed nodes ', h('small', {}, all > known.failed.length ? `the first ${known.failed.length} of ${all}` : String(known.failed.length))),
    known.failed.length === 0 ? h('p', { class: 'mute' }, 'none') : h('table', {},
      h('thead', {}, h('tr', {}, h('th', {}, 'node'), h('th', {}, 'pool'), h('th', {}, 'failed in'), h('th', {}, 'last error'))),
      h('tbody', {}, known.failed.map((n) => h('tr', { 'data-node': n.id },
        h('td', {}, n.name ?? n.id),
        h('td', {}, known.pools.get(n.poolId) ?? n.poolId),
        h('td', {}, n.failedFrom ?? ''),
        h('td', { class: 'err failed' }, n.lastError ? `${n.lastError.code}: ${n.lastError.message}` : ''))))),
  );
}

function runsSection(): HTMLElement {
  const now = Date.now();
  const runs = [...known.runs.values()].sort((a, b) => a.since - b.since);
  return h('section', { id: 'runs' },
    h('h2', {}, 'Running workflows ', h('small', {}, runs.length > SHOWN ? `the ${SHOWN} longest in their step, of ${runs.length}` : String(runs.length))),
    runs.length === 0 ? h('p', { class: 'mute' }, 'none') : h('table', {},
      h('thead', {}, h('tr', {}, h('th', {}, 'node'), h('th', {}, 'workflow'), h('th', {}, 'current step'), h('th', {}, 'status'), h('th', { class: 'n' }, 'try'), h('th', { class: 'n' }, 'in step'))),
      h('tbody', {}, runs.slice(0, SHOWN).map((r) => h('tr', { 'data-run': r.runId },
        h('td', {}, nodeName(r.nodeId)), h('td', {}, r.kind), h('td', {}, r.step),
        h('td', { class: r.stepStatus === 'failed' ? 'failed' : 'running' }, r.stepStatus),
        h('td', { class: 'n' }, r.attempt || ''), h('td', { class: 'n' }, seconds(now - r.since)))))),
  );
}

function fabricSection(): HTMLElement {
  const j = known.fabric;
  return h('section', { id: 'fabric' },
    h('h2', {}, 'Fabric rollout ', j ? h('small', {}, `${j.jobType} ${j.jobStatus} · ${j.state} · ${j.progress}% · ${j.completedNodes}/${j.totalNodes} done, ${j.failedNodes} failed`) : null),
    !j ? h('p', { class: 'mute' }, known.fabricNote) : h('table', {},
      h('thead', {}, h('tr', {}, h('th', {}, 'node'), h('th', {}, 'progress'), h('th', {}, 'step'), h('th', {}, 'error'))),
      h('tbody', {}, j.nodes.map((n) => {
        const done = n.steps.filter((s) => s.status === 'ok' || s.status === 'skipped').length;
        const planned = Math.max(j.jobType === 'fabric_teardown' ? TEARDOWN_STEPS : APPLY_STEPS, n.steps.length);
        const current = n.steps.find((s) => s.status === 'running' || s.status === 'failed') ?? n.steps.at(-1);
        const bar = h('progress', { max: String(planned), value: String(n.finished && n.ok ? planned : done) });
        return h('tr', { 'data-fabric-node': n.nodeIp },
          h('td', {}, `${n.fqdn} (${n.nodeIp})`),
          h('td', {}, bar, ` ${done}/${planned} `, n.finished ? h('span', { class: n.ok ? 'good' : 'failed' }, n.ok ? 'ok' : 'failed') : null),
          h('td', {}, current ? `${current.step} ${current.status}` : n.reachable ? '' : 'unreachable'),
          h('td', { class: 'err failed' }, n.error));
      }))),
  );
}

function jobsSection(): HTMLElement {
  const jobs = [...known.jobs.values()].sort((a, b) => b.updatedAt.localeCompare(a.updatedAt));
  return h('section', { id: 'jobs' },
    h('h2', {}, 'Control-node jobs ', h('small', {}, 'running when the page opened, and every one since')),
    jobs.length === 0 ? h('p', { class: 'mute' }, 'none seen') : h('table', {},
      h('thead', {}, h('tr', {}, h('th', {}, 'host'), h('th', {}, 'BMC'), h('th', {}, 'job'), h('th', {}, 'stage'), h('th', {}, 'progress'), h('th', {}, 'error'))),
      h('tbody', {}, jobs.map((j) => h('tr', { 'data-job': j.id },
        h('td', {}, j.resourceName || '—'), h('td', {}, j.nodeIp), h('td', {}, `${j.jobType} ${j.jobStatus.toLowerCase()}`), h('td', {}, j.status),
        h('td', {}, h('progress', { max: '100', value: String(j.progress) }), ` ${j.progress}%`),
        h('td', { class: 'err failed' }, j.lastError ?? ''))))),
  );
}

let frame = 0;
function draw(): void {
  if (frame || !token) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    // The token was refused since this frame was asked for: the login form stays.
    if (!token) return;
    const last = known.lastEventAt ? `last event ${seconds(Date.now() - known.lastEventAt)} ago` : 'no event yet';
    app().replaceChildren(
      h('header', {},
        h('h1', {}, 'Metal control plane'),
        h('span', { id: 'conn', class: connection === 'live' ? 'live' : connection === 'reconnecting' ? 'down' : '' }, `${connection} · ${known.events} event(s) · ${last}`),
        notes.size ? h('span', { id: 'note', class: 'failed' }, [...notes.values()].join(' · ')) : null,
        button('Forget token', forgetToken)),
      h('main', {}, countsSection(), failedSection(), runsSection(), fabricSection(), jobsSection()),
    );
  });
}

function button(label: string, onClick: () => void): HTMLElement {
  const b = h('button', { type: 'button' }, label);
  b.addEventListener('click', onClick);
  return b;
}

function forgetToken(): void {
  sessionStorage.removeItem(TOKEN_KEY);
  stop?.abort();
  location.reload();
}

/**
 * The login form, saying why. `refused`: the token a refusal answered; when that is no longer the
 * page's token (another was pasted since), the refusal is old news and changes nothing. Several
 * reads refused at once ask once: a form already shown keeps its input (what is being typed) and
 * only says why again.
 */
function askToken(why: string, refused?: string): void {
  if (refused !== undefined && refused !== token) return;
  const shown = document.getElementById('login');
  if (shown && !token) {
    const reason = shown.querySelector('p');
    if (reason) reason.textContent = why;
    return;
  }
  stop?.abort();
  connection = 'stopped';
  token = '';
  sessionStorage.removeItem(TOKEN_KEY);
  const input = h('input', { type: 'password', id: 'token', autocomplete: 'off', spellcheck: 'false', placeholder: 'bearer token' }) as HTMLInputElement;
  const form = h('form', { id: 'login' },
    h('h1', {}, 'Metal control plane status'),
    h('p', {}, why),
    h('label', { for: 'token' }, 'API token (kept in this tab\'s sessionStorage only; sent as an Authorization header, never in a URL)'),
    input,
    h('button', { type: 'submit' }, 'Show status'));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (!value) return;
    sessionStorage.setItem(TOKEN_KEY, value);
    start(value);
  });
  app().replaceChildren(form);
  input.focus();
}

function start(t: string): void {
  token = t;
  connection = 'connecting';
  draw();
  void follow();
}

const given = takeToken();
if (given) start(given);
else askToken('Paste an API token (or open this page as /ui#token=...).');
// The "in step" times and "last event" age move with the clock.
setInterval(() => {
  if (token) draw();
}, 1000);

// An ES module (the page loads it with type=module): its names stay out of the window's.
export {};
