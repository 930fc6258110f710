import type { Logger } from 'pino';
import { AppError, invalidInput, unauthenticated } from '../errors';
import { isPlatformAdmin, mayRead } from '../auth/decide';
import type { Principal, Resource } from '../auth/permissions';
import type { TokenStore } from '../auth/tokens';
import type { Sql } from '../db/sql';
import type { Notifications } from '../db/listen';
import { SerialTask } from './serial';
import { nodeResource, poolResource, siteResource, tenantResource } from '../modules/tenancy/resources';

/** One committed, sequenced outbox row as subscribers see it. */
export interface StreamEvent {
  seq: bigint;
  cursor: string;
  type: string;
  tenantId: string | null;
  siteId: string | null;
  poolId: string | null;
  nodeId: string | null;
  subject: string;
  payload: Record<string, unknown>;
  createdAt: Date;
}

/** How long a stopping hub waits for its streams' consumers to take their last item. */
const STOP_GRACE_MS = 1000;

/**
 * The last item of every stream open when the service stops: ABORTED with the reason
 * `server-stopping` and the cursor to resume after (on this or another process).
 */
export function serverStopping(lastCursor: bigint): AppError {
  return new AppError('ABORTED', 'the server is stopping: reconnect and resume after details.lastCursor', {
    lastCursor: String(lastCursor),
    reason: 'server-stopping',
  });
}

/** The last item of a stream that was closed by the server: why, and where to resume. */
export interface StreamEnd {
  error: AppError;
}

export type StreamItem = StreamEvent | StreamEnd;

export const isStreamEnd = (item: StreamItem): item is StreamEnd => 'error' in item;

/** What a subscriber wants; every field narrows (all must match). */
export interface EventFilter {
  types?: string[] | null;
  /** Type prefixes, e.g. `node.` for the REST channel `metal`. */
  typePrefixes?: string[] | null;
  siteId?: string | null;
  poolId?: string | null;
  nodeId?: string | null;
  subject?: string | null;
  /** The subject, or payload.workflowId, is this run (workflow progress). */
  workflowId?: string | null;
}

export interface SubscribeOptions {
  principal: Principal;
  /** The bearer token, re-checked when tokens or grants change: a revoked token ends the stream. */
  token: string;
  filter: EventFilter;
  /** Replay everything after this cursor first; without it the stream starts at the live head. */
  after?: string | null;
  /** Without `after`: replay from the oldest event retention kept, instead of starting live. */
  fromOldest?: boolean;
  /** Bytes the transport has queued and not yet sent (WebSocket bufferedAmount). */
  backlog?: () => number;
}

const COLUMNS = `seq::text AS seq, type, tenant_id AS "tenantId", site_id AS "siteId", pool_id AS "poolId", node_id AS "nodeId",
                 subject, payload, created_at AS "createdAt"`;

type Row = Omit<StreamEvent, 'seq' | 'cursor'> & { seq: string };
const toEvent = (row: Row): StreamEvent => ({ ...row, seq: BigInt(row.seq), cursor: row.seq });

/** Where an event sits, for the same read decision as the rows it is about. */
export function resourceOf(e: Pick<StreamEvent, 'tenantId' | 'siteId' | 'poolId' | 'nodeId'>): Resource {
  const { tenantId, siteId, poolId, nodeId } = e;
  if (!tenantId) return { type: 'platform' };
  if (nodeId && siteId && poolId) return nodeResource({ id: nodeId, tenantId, siteId, poolId });
  if (poolId && siteId) return poolResource({ id: poolId, tenantId, siteId });
  if (siteId) return siteResource({ id: siteId, tenantId });
  return tenantResource({ id: tenantId });
}

export function matches(filter: EventFilter, e: StreamEvent): boolean {
  if (filter.types?.length && !filter.types.includes(e.type)) return false;
  if (filter.typePrefixes?.length && !filter.typePrefixes.some((p) => e.type.startsWith(p))) return false;
  if (filter.siteId && e.siteId !== filter.siteId) return false;
  if (filter.poolId && e.poolId !== filter.poolId) return false;
  if (filter.nodeId && e.nodeId !== filter.nodeId) return false;
  if (filter.subject && e.subject !== filter.subject) return false;
  if (filter.workflowId && e.subject !== filter.workflowId && e.payload.workflowId !== filter.workflowId) return false;
  return true;
}

/** The same filter as SQL, so a replay reads only what it may deliver (mayRead still decides each row). */
function filterSql(filter: EventFilter, principal: Principal, values: unknown[]): string {
  const where: string[] = [];
  const param = (value: unknown) => {
    values.push(value);
    return `$${values.length}`;
  };
  // A platform token that is not an admin reads the platform's events only (tenant_id NULL).
  if (!isPlatformAdmin(principal)) where.push(principal.tenantId === null ? 'tenant_id IS NULL' : `tenant_id = ${param(principal.tenantId)}`);
  if (filter.types?.length) where.push(`type = ANY(${param(filter.types)}::text[])`);
  if (filter.typePrefixes?.length) where.push(`type LIKE ANY(${param(filter.typePrefixes.map((p) => `${p.replace(/[%_\\]/g, '\\$&')}%`))}::text[])`);
  if (filter.siteId) where.push(`site_id = ${param(filter.siteId)}`);
  if (filter.poolId) where.push(`pool_id = ${param(filter.poolId)}`);
  if (filter.nodeId) where.push(`node_id = ${param(filter.nodeId)}`);
  if (filter.subject) where.push(`subject = ${param(filter.subject)}`);
  if (filter.workflowId) {
    const w = param(filter.workflowId);
    where.push(`(subject = ${w} OR payload->>'workflowId' = ${w})`);
  }
  return where.length ? ` AND ${where.join(' AND ')}` : '';
}

/** Parses a cursor argument: a decimal sequence number. */
export function parseCursor(value: string, field: string): bigint {
  if (!/^\d{1,19}$/.test(value)) throw invalidInput(field, 'is not a cursor (a decimal event sequence number)');
  return BigInt(value);
}

const MAX_BACKLOG_BYTES = 8 * 1024 * 1024;
const YIELD_AFTER_MS = 5;
const REPLAY_PAGE = 500;

/**
 * One subscriber: replays from its cursor, then follows the live stream with no gap and no
 * duplicate at the seam (events dispatched during the replay wait in `pending` and are deduplicated
 * by seq). Its buffers are bounded: falling further behind closes it with an ABORTED error that
 * carries the last cursor it received, so it can resume with `after`.
 */
export class Subscription implements AsyncIterableIterator<StreamItem> {
  /** The last cursor handed to the consumer (or where it started). */
  cursor: bigint;
  private fetched: bigint;
  private queue: StreamEvent[] = [];
  private pending: StreamEvent[] = [];
  private failure: AppError | null = null;
  private finished = false;
  private wakeUp: (() => void) | null = null;
  private lastYield = performance.now();
  private settle!: () => void;
  /** Resolves when the consumer has taken the stream's last item (or left). */
  readonly ended = new Promise<void>((resolve) => (this.settle = resolve));

  constructor(
    private hub: EventHub,
    public principal: Principal,
    readonly token: string,
    readonly filter: EventFilter,
    start: bigint,
    private replayUntil: bigint | null,
    private buffer: number,
    private backlog?: () => number,
  ) {
    this.cursor = start;
    this.fetched = start;
  }

  get replaying(): boolean {
    return this.replayUntil !== null;
  }

  /** Offered every dispatched event; keeps the ones it may deliver. */
  offer(e: StreamEvent): void {
    if (this.finished || this.failure) return;
    if (!matches(this.filter, e) || !mayRead(this.principal, resourceOf(e))) return;
    if (this.replaying) {
      this.pending.push(e);
      if (this.pending.length > this.buffer) this.slow();
      return;
    }
    if (e.seq <= this.cursor) return;
    this.queue.push(e);
    if (this.queue.length > this.buffer || (this.backlog?.() ?? 0) > MAX_BACKLOG_BYTES) this.slow();
    this.wake();
  }

  private slow(): void {
    this.fail(
      new AppError(
        'ABORTED',
        `subscription closed: it fell more than ${this.buffer} events behind; resume with after: "${this.cursor}"`,
        { lastCursor: String(this.cursor), reason: 'slow-consumer' },
      ),
    );
  }

  /** Ends the stream with an error, delivered as its last item. */
  fail(error: AppError): void {
    if (this.finished || this.failure) return;
    this.failure = error;
    this.queue = [];
    this.pending = [];
    this.hub.remove(this);
    this.wake();
  }

  private wake(): void {
    const wake = this.wakeUp;
    this.wakeUp = null;
    wake?.();
  }

  async next(): Promise<IteratorResult<StreamItem>> {
    // A consumer that never waits (a tenant-wide subscriber in a burst) would otherwise hold the
    // event loop for the whole burst: let I/O in every few milliseconds.
    const now = performance.now();
    if (now - this.lastYield > YIELD_AFTER_MS) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      this.lastYield = performance.now();
    }
    for (;;) {
      if (this.failure) {
        const error = this.failure;
        this.failure = null;
        this.finished = true;
        this.settle();
        return { value: { error }, done: false };
      }
      const e = this.queue.shift();
      if (e) {
        this.cursor = e.seq;
        return { value: e, done: false };
      }
      if (this.finished) return { value: undefined, done: true };
      if (this.replaying) {
        await this.replayPage();
        continue;
      }
      await new Promise<void>((resolve) => (this.wakeUp = resolve));
      this.lastYield = performance.now(); // it waited: the loop has run since
    }
  }

  /**
   * One page of history, pulled only as fast as the consumer takes it: a transport that queues
   * without waiting (WebSocket) is held while it has more than MAX_BACKLOG_BYTES unsent, so a
   * replay never piles history into memory. Then the switch to live.
   */
  private async replayPage(): Promise<void> {
    while ((this.backlog?.() ?? 0) > MAX_BACKLOG_BYTES && !this.finished && !this.failure) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    if (this.finished || this.failure) return;
    const until = this.replayUntil!;
    const values: unknown[] = [String(this.fetched), String(until)];
    const { rows } = await this.hub.sql.query<Row & { pruned: string }>(
      `SELECT ${COLUMNS}, (SELECT pruned_through FROM event_horizon WHERE id = 1)::text AS pruned
         FROM event WHERE seq > $1 AND seq <= $2${filterSql(this.filter, this.principal, values)} ORDER BY event.seq LIMIT ${REPLAY_PAGE}`,
      values,
      // As the live reads: a plan kept from when the table was small would scan it all.
      { planEachTime: true },
    );
    if (this.finished || this.failure) return;
    // Retention may have pruned past this replay since it started: say so rather than skip events.
    const pruned = rows.length ? BigInt(rows[0]!.pruned) : (await this.hub.bounds()).pruned;
    if (pruned > this.fetched) {
      this.fail(
        new AppError('INVALID_INPUT', `after: events after cursor ${this.fetched} were pruned by retention during the replay; read the current state and resume from "${pruned}"`, {
          field: 'after',
          prunedThrough: String(pruned),
          lastCursor: String(this.cursor),
        }),
      );
      return;
    }
    for (const { pruned: _pruned, ...row } of rows) {
      const e = toEvent(row);
      this.fetched = e.seq;
      if (mayRead(this.principal, resourceOf(e))) this.queue.push(e);
    }
    if (rows.length < REPLAY_PAGE) {
      this.fetched = until;
      this.replayUntil = null;
      for (const e of this.pending) if (e.seq > this.fetched) this.queue.push(e);
      this.pending = [];
    }
  }

  async return(): Promise<IteratorResult<StreamItem>> {
    this.finished = true;
    this.settle();
    this.queue = [];
    this.pending = [];
    this.hub.remove(this);
    this.wake();
    return { value: undefined, done: true };
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<StreamItem> {
    return this;
  }
}

/**
 * The process's end of the event stream. One LISTEN connection learns that the sequencer numbered
 * new events (and, on `metal_cache`, that tokens or grants changed); one reader fetches them in
 * cursor order and offers each to the local subscribers. A missed NOTIFY costs at most a poll
 * interval: the reader also polls, and catches up from the table after a reconnect.
 */
export class EventHub {
  private listening: { stop(): void }[] = [];
  private head = 0n;
  private subs = new Set<Subscription>();
  /** Subscribers that follow one node, by node: an event is offered only to its node's. */
  private byNode = new Map<string, Set<Subscription>>();
  /** The others (tenant-, site-, pool- or type-wide), offered every event. */
  private wide = new Set<Subscription>();
  /** Subscriptions ever opened here: a read that skipped must see no new one since it looked. */
  private subscriptions = 0;
  /** Reads that moved the head without fetching (no subscriber); for tests and diagnostics. */
  skipped = 0;
  private reader = new SerialTask(
    () =>
      this.read().catch((error: unknown) => {
        if (!this.stopped) this.log.warn({ err: error }, 'event stream read failed; retrying on the next poll');
      }),
    () => !this.stopped,
  );
  private rechecker = new SerialTask(
    () => this.recheckAll().catch((error: unknown) => this.log.warn({ err: error }, 'token re-check failed; retrying on the next one')),
    () => !this.stopped,
  );
  private timers: NodeJS.Timeout[] = [];
  private stopped = false;

  constructor(
    private notifications: Notifications,
    readonly sql: Sql,
    private tokens: TokenStore,
    private log: Logger,
    private opts: { buffer: number; pollMs?: number; tokenRecheckMs?: number },
  ) {}

  async start(): Promise<void> {
    this.head = (await this.bounds()).head;
    await this.connect();
    const poll = setInterval(() => this.pump(), this.opts.pollMs ?? 1000);
    const recheck = setInterval(() => void this.recheckTokens(), this.opts.tokenRecheckMs ?? 30000);
    poll.unref();
    recheck.unref();
    this.timers.push(poll, recheck);
  }

  private async connect(): Promise<void> {
    // The process's shared LISTEN connection: after a loss, what was committed meanwhile is read
    // from the table (the head is a cursor), so nothing is missed.
    this.listening.push(
      await this.notifications.subscribe('metal_events', (head) => this.heard(head), { back: () => this.pump() }),
      await this.notifications.subscribe('metal_cache', (table) => {
        if (table === 'api_token' || table === 'api_grant') void this.recheckTokens();
      }),
    );
  }

  /**
   * The sequencer's NOTIFY, whose payload is the head it numbered up to. With nobody subscribed in
   * this process, the head moves there without a statement (as read() would move it, reading the
   * same number); a payload that is not a cursor, or a subscriber, makes it a read.
   */
  private heard(payload: string): void {
    if (this.subs.size === 0 && /^[0-9]{1,19}$/.test(payload)) {
      const head = BigInt(payload);
      if (head > this.head) this.head = head;
      this.skipped += 1;
      return;
    }
    this.pump();
  }

  /** Reads and dispatches everything after the head; runs never overlap. */
  pump(): void {
    void this.reader.run();
  }

  private async read(): Promise<void> {
    // With nobody subscribed in this process nothing could be offered the events: move the head
    // past them without reading them (a bulk call commits 10,000, whose rows and payloads cost
    // the process about as much as the call's own answer). A subscription opened while the head
    // is looked up started at the old head, so then the events are read as usual.
    if (this.subs.size === 0) {
      const subscribed = this.subscriptions;
      const { rows } = await this.sql.query<{ max: string | null }>('SELECT max(seq)::text AS max FROM event WHERE seq > $1', [String(this.head)], { planEachTime: true });
      if (this.subs.size === 0 && this.subscriptions === subscribed) {
        if (rows[0]?.max != null) this.head = BigInt(rows[0].max);
        this.skipped += 1;
        return;
      }
    }
    for (;;) {
      // Planned at every call (see Sql.query): a generic plan made while the table was small
      // scanned and sorted all of it at every read once it had grown.
      const { rows } = await this.sql.query<Row>(`SELECT ${COLUMNS} FROM event WHERE seq > $1 ORDER BY event.seq LIMIT 1000`, [String(this.head)], { planEachTime: true });
      for (const row of rows) {
        const e = toEvent(row);
        // Passed already: heard() moved the head while nobody was subscribed.
        if (e.seq <= this.head) continue;
        this.head = e.seq;
        this.dispatch(e);
      }
      if (rows.length < 1000 || this.stopped) return;
    }
  }

  private dispatch(e: StreamEvent): void {
    const targeted = e.nodeId ? this.byNode.get(e.nodeId) : undefined;
    if (targeted) for (const s of targeted) s.offer(e);
    for (const s of this.wide) s.offer(e);
  }

  /** Opens a subscription; the cursor and the retention horizon are checked here, before any event. */
  /** The stream's head (the newest cursor, or the retention horizon when pruning emptied it) and horizon. */
  async bounds(): Promise<{ head: bigint; pruned: bigint }> {
    const { rows } = await this.sql.query<{ pruned: string; max: string }>(
      'SELECT pruned_through::text AS pruned, (SELECT COALESCE(max(seq), 0) FROM event)::text AS max FROM event_horizon WHERE id = 1',
    );
    const pruned = BigInt(rows[0]!.pruned);
    const max = BigInt(rows[0]!.max);
    return { head: max > pruned ? max : pruned, pruned };
  }

  /** ABORTED server-stopping, resuming from where the stream asked to start (from the oldest retained: the retention horizon). */
  private async stoppingError(options: SubscribeOptions): Promise<AppError> {
    const from = options.after != null ? parseCursor(options.after, 'after') : options.fromOldest ? (await this.bounds()).pruned : this.head;
    return serverStopping(from);
  }

  async subscribe(options: SubscribeOptions): Promise<Subscription> {
    // A stream asked for while the service stops ends as the open ones did (ABORTED
    // server-stopping), so a client resubscribing after that error (the SDK) reconnects again
    // rather than giving up on what looked like a refusal; it resumes where it asked to start.
    if (this.stopped) throw await this.stoppingError(options);
    let start = this.head;
    let replayUntil: bigint | null = null;
    if (options.after != null || options.fromOldest) {
      const { head, pruned } = await this.bounds();
      const after = options.after != null ? parseCursor(options.after, 'after') : pruned;
      const known = head > this.head ? head : this.head;
      if (after < pruned) {
        throw new AppError('INVALID_INPUT', `after: the cursor is older than the event retention; events up to ${pruned} were pruned. Read the current state and resume from "${pruned}"`, {
          field: 'after',
          prunedThrough: String(pruned),
        });
      }
      if (after > known) throw invalidInput('after', `the cursor is ahead of the stream (its head is ${known})`);
      // The service began stopping while the bounds were read.
      if (this.stopped) throw await this.stoppingError(options);
      // Registered below, synchronously with reading the head: events after it are dispatched to
      // this subscriber, events up to it are in the table. A cursor past this process's head (it
      // came from a process that is ahead) replays nothing and skips what it already has.
      start = after;
      replayUntil = after > this.head ? after : this.head;
    }
    const sub = new Subscription(this, options.principal, options.token, options.filter, start, replayUntil, this.opts.buffer, options.backlog);
    this.add(sub);
    return sub;
  }

  private add(sub: Subscription): void {
    this.subscriptions += 1;
    this.subs.add(sub);
    if (sub.filter.nodeId) {
      let set = this.byNode.get(sub.filter.nodeId);
      if (!set) this.byNode.set(sub.filter.nodeId, (set = new Set()));
      set.add(sub);
    } else this.wide.add(sub);
  }

  remove(sub: Subscription): void {
    this.subs.delete(sub);
    this.wide.delete(sub);
    if (sub.filter.nodeId) {
      const set = this.byNode.get(sub.filter.nodeId);
      set?.delete(sub);
      if (set?.size === 0) this.byNode.delete(sub.filter.nodeId);
    }
  }

  get subscriberCount(): number {
    return this.subs.size;
  }

  /**
   * Re-authenticates every subscriber's token without the cache: revoked ones end their streams.
   * Runs never overlap; a burst of token changes during one run costs one more run, not one each.
   */
  recheckTokens(): Promise<void> {
    return this.rechecker.run();
  }

  private async recheckAll(): Promise<void> {
    const byToken = new Map<string, Subscription[]>();
    for (const s of this.subs) {
      const list = byToken.get(s.token);
      if (list) list.push(s);
      else byToken.set(s.token, [s]);
    }
    for (const [token, subs] of byToken) {
      this.tokens.forget(subs[0]!.principal.tokenId);
      try {
        const principal = await this.tokens.authenticate(token);
        for (const s of subs) s.principal = principal;
      } catch (error) {
        const reason = error instanceof AppError && error.code === 'UNAUTHENTICATED' ? error : null;
        if (!reason) {
          this.log.warn({ err: error }, 'token re-check failed; the streams stay open until the next check');
          continue;
        }
        for (const s of subs) s.fail(unauthenticated('the token was revoked or has expired; the stream is closed'));
      }
    }
  }

  private stopping: Promise<void> | null = null;

  stop(): Promise<void> {
    return (this.stopping ??= this.shutdown());
  }

  private async shutdown(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers) clearInterval(t);
    // Every stream ends saying why, with where to resume (REST SSE: `event: error`; GraphQL, over
    // SSE or graphql-ws: the subscription's last error), rather than just stopping. A consumer
    // gets a moment to take that last item; whatever has not by then is ended plainly.
    const subs = [...this.subs];
    for (const s of subs) s.fail(serverStopping(s.cursor));
    await Promise.race([Promise.all(subs.map((s) => s.ended)), new Promise((resolve) => setTimeout(resolve, STOP_GRACE_MS).unref())]);
    await new Promise((resolve) => setImmediate(resolve)); // the last items' writes
    for (const s of subs) await s.return();
    await this.reader.current;
    await this.rechecker.current;
    for (const sub of this.listening) sub.stop();
    this.listening = [];
  }
}
