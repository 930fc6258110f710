import { print, type DocumentNode, type OperationDefinitionNode } from 'graphql';
import type { TypedDocumentNode } from '@graphql-typed-document-node/core';
import { createClient as createWsClient, type Client as WsClient } from 'graphql-ws';
import { createClient as createSseClient, NetworkError as SseNetworkError } from 'graphql-sse';
import { MetalError, type GraphQLErrorLike } from './errors';

export interface MetalClientOptions {
  /** The service's base URL, e.g. http://127.0.0.1:8080 (no trailing /graphql). */
  url: string;
  /** A bearer token: sent as `Authorization: Bearer ...` (graphql-ws: in connectionParams), never in a query string. */
  token?: string;
  /** Default: the global fetch. */
  fetch?: typeof fetch;
  /** Per request (request, rest), default 30000. */
  timeoutMs?: number;
  /**
   * The WebSocket class graphql-ws uses. Default: globalThis.WebSocket, else the `ws` package
   * (Node 20 has no global WebSocket).
   */
  webSocketImpl?: unknown;
  /**
   * Keep-alive: over graphql-ws a ping this often, and a socket whose pong does not come within
   * as long again is cut; over SSE a stream on which nothing (not even the service's 12 s ping)
   * arrived for twice as long is cut. Either way its subscriptions resume from their cursor: a
   * connection that died without closing (a frozen NAT, a pulled cable) is noticed. Default 15000.
   */
  keepAliveMs?: number;
}

export type Transport = 'ws' | 'sse';

export interface SubscribeOptions<R> {
  /** 'ws' (default) = graphql-ws on ws(s)://host/graphql; 'sse' = GraphQL over SSE on /graphql. */
  transport?: Transport;
  /** Aborting it ends the iteration (without an error) and closes the stream. */
  signal?: AbortSignal;
  /**
   * The cursor of a result, used as `after` when the subscription is opened again. Default: the
   * `cursor` of the operation's one root field (every event of the service has one).
   */
  cursor?: (result: R) => string | null | undefined;
  /**
   * How many times in a row to try again after the connection dropped or the server closed the
   * stream (server-stopping, slow-consumer) before the iteration fails with that error; the count
   * starts again after each result received. Default 10; 0 = never reconnect.
   */
  retries?: number;
  /** Delay before the n-th reconnect in a row (n from 1). Default: 250 ms doubling up to 10 s, with jitter. */
  retryDelayMs?: (attempt: number) => number;
  /**
   * How many results may wait for the loop to take them (default 10000). Past that the stream is
   * closed and opened again from the last result taken (the service replays the rest from its
   * table), as the service itself does with a subscriber that falls behind: memory stays bounded
   * and nothing is lost.
   */
  bufferSize?: number;
  /** Called before each reconnect, with the error that ended the previous stream. */
  onReconnect?: (info: { attempt: number; error: MetalError; after: string | null | undefined }) => void;
}

/** A Relay connection as `pick` returns it from a page's data. */
export interface ConnectionPage<N> {
  edges: readonly { node: N }[];
  pageInfo: { hasNextPage: boolean; endCursor?: string | null };
}

export const CSRF_HEADER = 'x-graphql-csrf';

/** Reasons the service closes a subscription with ABORTED after which subscribing again (from details.lastCursor) is right. */
const RESUMABLE_REASONS = new Set(['server-stopping', 'slow-consumer']);
/** Codes that say the service cannot serve for now (its database): a subscription tries again. */
const RETRYABLE_CODES = new Set(['UPSTREAM_UNAVAILABLE', 'STORAGE_UNAVAILABLE']);
/** graphql-ws close codes that say the request itself is wrong: trying again would not help. */
const FATAL_CLOSE_CODES = new Set([4400, 4401, 4403, 4406, 4409, 4429]);

const printed = new WeakMap<DocumentNode, { query: string; operationName?: string; takesAfter: boolean }>();

function source(doc: DocumentNode): { query: string; operationName?: string; takesAfter: boolean } {
  let entry = printed.get(doc);
  if (!entry) {
    const op = doc.definitions.find((d): d is OperationDefinitionNode => d.kind === 'OperationDefinition');
    entry = {
      query: print(doc),
      operationName: op?.name?.value,
      takesAfter: !!op?.variableDefinitions?.some((v) => v.variable.name.value === 'after'),
    };
    printed.set(doc, entry);
  }
  return entry;
}

function defaultCursor(result: unknown): string | null | undefined {
  if (!result || typeof result !== 'object') return undefined;
  const values = Object.values(result as Record<string, unknown>);
  const root = values.length === 1 ? values[0] : undefined;
  const cursor = root && typeof root === 'object' ? (root as { cursor?: unknown }).cursor : undefined;
  return typeof cursor === 'string' ? cursor : undefined;
}

/** Whether cursor `a` is past `b` (the service's cursors are decimal sequence numbers). */
function isAhead(a: string, b: string | null | undefined): boolean {
  if (b == null) return true;
  if (!/^\d+$/.test(a) || !/^\d+$/.test(b)) return false;
  return BigInt(a) > BigInt(b);
}

const defaultDelay = (attempt: number) => {
  const base = Math.min(10000, 250 * 2 ** Math.min(attempt - 1, 10));
  return base / 2 + Math.random() * (base / 2);
};

/** Waits `ms`, or less when one of the signals aborts. */
function sleep(ms: number, ...signals: (AbortSignal | undefined)[]): Promise<void> {
  const given = signals.filter((s): s is AbortSignal => !!s);
  return new Promise((resolve) => {
    if (given.some((s) => s.aborted)) return resolve();
    const done = () => {
      clearTimeout(timer);
      for (const s of given) s.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    for (const s of given) s.addEventListener('abort', done, { once: true });
  });
}

/** What one attempt of a subscription hands its reader. */
type Item<R> =
  | { kind: 'next'; data: R }
  | { kind: 'end'; error?: MetalError; retry: boolean; lastCursor?: string }
  | { kind: 'aborted' };

/** A one-reader queue between a transport's callbacks and the async iterator. */
class Channel<R> {
  private readonly items: Item<R>[] = [];
  private waiter: ((item: Item<R>) => void) | null = null;
  private ended = false;

  /** `limit`: results waiting past it end the stream with `overflow` (after the ones that fit). */
  constructor(
    private readonly limit = Infinity,
    private readonly overflow?: () => Item<R>,
  ) {}

  push(item: Item<R>): void {
    if (this.ended) return;
    if (item.kind === 'next' && this.overflow && this.items.length >= this.limit) item = this.overflow();
    if (item.kind !== 'next') this.ended = true;
    // The loop asked to stop: what is still waiting is not delivered.
    if (item.kind === 'aborted') this.items.length = 0;
    const waiter = this.waiter;
    if (waiter) {
      this.waiter = null;
      waiter(item);
    } else {
      this.items.push(item);
    }
  }

  take(): Promise<Item<R>> {
    const item = this.items.shift();
    if (item) return Promise.resolve(item);
    return new Promise((resolve) => (this.waiter = resolve));
  }
}

/** What both transports' clients call with a subscription's results and end, put into `channel`. */
function sinkInto<R>(channel: Channel<R>, endFromError: (err: unknown) => Item<never>) {
  return {
    next: (result: { data?: unknown; errors?: readonly unknown[] }) => {
      if (result.errors?.length) channel.push(endFromErrors(result.errors as readonly GraphQLErrorLike[]));
      else if (result.data != null) channel.push({ kind: 'next', data: result.data as R });
    },
    error: (err: unknown) => channel.push(endFromError(err)),
    complete: () => channel.push({ kind: 'end', retry: false }),
  };
}

/** The end of a stream from the GraphQL errors it delivered: ABORTED server-stopping / slow-consumer is resumable. */
function endFromErrors(errors: readonly GraphQLErrorLike[]): Item<never> {
  const error = MetalError.fromGraphQL(errors);
  const details = (error.details ?? {}) as { reason?: unknown; lastCursor?: unknown };
  const retry =
    (error.code === 'ABORTED' && typeof details.reason === 'string' && RESUMABLE_REASONS.has(details.reason)) || RETRYABLE_CODES.has(error.code);
  return { kind: 'end', error, retry, lastCursor: typeof details.lastCursor === 'string' ? details.lastCursor : undefined };
}

/** The end of a graphql-ws stream from what its client reported as the error. */
function endFromWsError(err: unknown): Item<never> {
  if (Array.isArray(err)) return endFromErrors(err as GraphQLErrorLike[]);
  const close = err as { code?: unknown; reason?: unknown };
  if (err && typeof err === 'object' && typeof close.code === 'number' && !(err instanceof Error)) {
    const code = close.code;
    if (code === 4403) return { kind: 'end', retry: false, error: new MetalError('UNAUTHENTICATED', 'the service refused the token (WebSocket closed with 4403)') };
    if (FATAL_CLOSE_CODES.has(code)) {
      return { kind: 'end', retry: false, error: new MetalError(`WS_${code}`, `the service closed the WebSocket with ${code}${typeof close.reason === 'string' && close.reason ? `: ${close.reason}` : ''}`) };
    }
    return { kind: 'end', retry: true, error: new MetalError('NETWORK', `the WebSocket closed (${code})`) };
  }
  return { kind: 'end', retry: true, error: new MetalError('NETWORK', `the WebSocket failed: ${err instanceof Error ? err.message : 'no answer'}`, { cause: err }) };
}

/** The end of a GraphQL-over-SSE stream from what graphql-sse reported. */
function endFromSseError(err: unknown): Item<never> {
  if (Array.isArray(err)) return endFromErrors(err as GraphQLErrorLike[]);
  if (err instanceof SseNetworkError) {
    const status = err.response?.status;
    if (status === undefined || status >= 500 || status === 408 || status === 429) {
      return { kind: 'end', retry: true, error: new MetalError('NETWORK', status === undefined ? 'the event stream broke off' : `the event stream answered HTTP ${status}`, { status, cause: err }) };
    }
    const code = status === 401 ? 'UNAUTHENTICATED' : status === 403 ? 'PERMISSION_DENIED' : status === 404 ? 'NOT_FOUND' : `HTTP_${status}`;
    return { kind: 'end', retry: false, error: new MetalError(code, `the event stream answered HTTP ${status}`, { status }) };
  }
  return { kind: 'end', retry: false, error: new MetalError('INTERNAL', `the event stream failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err }) };
}

/**
 * The `ws` package's WebSocket (Node 20 has no global one), with an opening handshake that gives
 * up after `timeoutMs` (its default waits as long as TCP does: a reconnect to a host that
 * swallows packets would hang).
 */
function nodeWebSocket(timeoutMs: number): unknown {
  const Ws = require('ws') as typeof import('ws');
  return class extends Ws {
    constructor(url: string | URL, protocols?: string | string[]) {
      super(url, protocols, { handshakeTimeout: timeoutMs });
    }
  };
}

/**
 * The service's API: GraphQL (typed documents from ./generated), its Relay connections as async
 * iterators, its subscriptions with reconnect and cursor replay, and its REST routes.
 */
export class MetalClient {
  readonly url: string;
  private readonly token?: string;
  private readonly fetchImpl: typeof fetch;
  private readonly timeoutMs: number;
  private readonly webSocketImpl?: unknown;
  private readonly keepAliveMs: number;
  /** Aborted (and replaced) by close(): the subscriptions open by then end, and wait to reconnect no more. */
  private closing = new AbortController();
  private ws: WsClient | null = null;
  /** The graphql-ws streams open now: a closed socket ends each of them (see wsClient). */
  private readonly wsChannels = new Set<Channel<unknown>>();
  private readonly closers = new Set<() => void>();

  constructor(opts: MetalClientOptions) {
    if (!opts || typeof opts.url !== 'string' || !/^https?:\/\//i.test(opts.url)) throw new MetalError('INVALID_INPUT', 'url: must be an http:// or https:// URL', { field: 'url' });
    this.url = opts.url.replace(/\/+$/, '');
    this.token = opts.token;
    const f = opts.fetch ?? globalThis.fetch;
    if (typeof f !== 'function') throw new MetalError('INVALID_INPUT', 'fetch: no fetch implementation (pass options.fetch)', { field: 'fetch' });
    this.fetchImpl = f;
    this.timeoutMs = opts.timeoutMs ?? 30000;
    this.webSocketImpl = opts.webSocketImpl;
    this.keepAliveMs = opts.keepAliveMs ?? 15000;
  }

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    return { [CSRF_HEADER]: '1', ...(this.token ? { authorization: `Bearer ${this.token}` } : {}), ...extra };
  }

  /** fetch with the per-request timeout; a failure to get an answer is MetalError NETWORK. */
  private async send(url: string, init: RequestInit): Promise<Response> {
    const signal = AbortSignal.timeout(this.timeoutMs);
    try {
      return await this.fetchImpl(url, { ...init, signal });
    } catch (error) {
      const timedOut = signal.aborted;
      throw new MetalError('NETWORK', timedOut ? `no answer from the service within ${this.timeoutMs} ms` : `could not reach the service: ${error instanceof Error ? error.message : 'failed'}`, { cause: error });
    }
  }

  /** Reads a JSON body; undefined when there is none or it is not JSON. */
  private async json(response: Response): Promise<{ ok: boolean; body: unknown }> {
    let text: string;
    try {
      text = await response.text();
    } catch (error) {
      throw new MetalError('NETWORK', `the answer broke off: ${error instanceof Error ? error.message : 'failed'}`, { status: response.status, cause: error });
    }
    if (text === '') return { ok: true, body: undefined };
    try {
      return { ok: true, body: JSON.parse(text) };
    } catch {
      return { ok: false, body: undefined };
    }
  }

  /** POST /graphql; returns `data`; throws MetalError on any GraphQL error, HTTP error or network failure. */
  async request<R, V>(doc: TypedDocumentNode<R, V>, variables?: V): Promise<R> {
    const { query, operationName } = source(doc);
    const response = await this.send(`${this.url}/graphql`, {
      method: 'POST',
      headers: this.headers({ 'content-type': 'application/json', accept: 'application/graphql-response+json, application/json' }),
      body: JSON.stringify({ query, variables: variables ?? {}, ...(operationName ? { operationName } : {}) }),
    });
    const requestId = response.headers.get('x-request-id') ?? undefined;
    const { ok, body } = await this.json(response);
    if (!ok || !body || typeof body !== 'object') {
      throw new MetalError(`HTTP_${response.status}`, `the service answered HTTP ${response.status} without a GraphQL body`, { status: response.status, requestId });
    }
    const result = body as { data?: R | null; errors?: GraphQLErrorLike[] };
    if (Array.isArray(result.errors) && result.errors.length) throw MetalError.fromGraphQL(result.errors, response.status, requestId);
    if (result.data == null) {
      throw new MetalError(response.ok ? 'INTERNAL' : `HTTP_${response.status}`, `the service answered HTTP ${response.status} with neither data nor errors`, { status: response.status, requestId });
    }
    return result.data;
  }

  /**
   * Follows a Relay connection forward (`first`/`after`) page by page, yielding its nodes. The
   * document must take `$first` and `$after`; `pageSize` (default: variables.first, else 100) is
   * each page's `first`.
   */
  paginate<R, V, N>(
    doc: TypedDocumentNode<R, V>,
    variables: V,
    pick: (data: R) => ConnectionPage<N>,
    opts: { pageSize?: number } = {},
  ): AsyncIterable<N> {
    const client = this;
    const given = (variables ?? {}) as Record<string, unknown>;
    const pageSize = opts.pageSize ?? (typeof given.first === 'number' ? given.first : 100);
    return {
      async *[Symbol.asyncIterator]() {
        let after = (given.after as string | null | undefined) ?? null;
        const seen = new Set<string>();
        for (;;) {
          const data = await client.request(doc, { ...given, first: pageSize, after } as V);
          const page = pick(data);
          for (const edge of page.edges) yield edge.node;
          const next = page.pageInfo.endCursor;
          if (!page.pageInfo.hasNextPage || !next) return;
          // A service that hands the same cursor back would loop forever: refuse instead.
          if (seen.has(next)) throw new MetalError('INTERNAL', 'the connection returned a cursor it had returned before');
          seen.add(next);
          after = next;
        }
      },
    };
  }

  /**
   * A REST route (`path` like `/api/compute/pools/ID/nodes`, query string included); JSON in and
   * out. Throws MetalError from the `{ error: { code, message, details } }` body on a non-2xx.
   */
  async rest<T = unknown>(method: string, path: string, body?: unknown): Promise<T> {
    if (typeof path !== 'string' || !path.startsWith('/') || path.startsWith('//')) throw new MetalError('INVALID_INPUT', 'path: must start with a single /', { field: 'path' });
    const response = await this.send(`${this.url}${path}`, {
      method: method.toUpperCase(),
      headers: this.headers({ accept: 'application/json', ...(body !== undefined ? { 'content-type': 'application/json' } : {}) }),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const requestId = response.headers.get('x-request-id') ?? undefined;
    const { ok, body: parsed } = await this.json(response);
    if (!response.ok) {
      if (!ok) throw new MetalError(`HTTP_${response.status}`, `the service answered HTTP ${response.status} without a JSON body`, { status: response.status, requestId });
      throw MetalError.fromRest(parsed, response.status, requestId);
    }
    if (!ok) throw new MetalError(`HTTP_${response.status}`, `the service answered HTTP ${response.status} with a body that is not JSON`, { status: response.status, requestId });
    return parsed as T;
  }

  /** The graphql-ws client of this MetalClient: one socket for all its subscriptions, opened on demand. */
  private wsClient(): WsClient {
    if (this.ws) return this.ws;
    const impl = this.webSocketImpl ?? (globalThis as { WebSocket?: unknown }).WebSocket ?? nodeWebSocket(this.timeoutMs);
    const token = this.token;
    type Socket = { readyState: number; close(code?: number, reason?: string): void; terminate?: () => void };
    let socket: Socket | null = null;
    let pongWait: ReturnType<typeof setTimeout> | null = null;
    const stopWaiting = () => {
      if (pongWait) clearTimeout(pongWait);
      pongWait = null;
    };
    this.ws = createWsClient({
      url: this.url.replace(/^http/i, 'ws') + '/graphql',
      webSocketImpl: impl,
      connectionParams: token ? { authorization: `Bearer ${token}` } : {},
      lazy: true,
      keepAlive: this.keepAliveMs,
      connectionAckWaitTimeout: this.timeoutMs,
      // Reconnecting is subscribe()'s: it knows each stream's cursor; graphql-ws would resend the old `after`.
      retryAttempts: 0,
      shouldRetry: () => false,
      on: {
        connected: (s) => {
          socket = s as Socket;
        },
        // A ping sent: its pong must come back in time, or the socket is dead without knowing it.
        // (terminate: a close handshake on a dead connection would wait for ws' 30 s timeout.)
        ping: (received) => {
          if (received) return;
          stopWaiting();
          const waitingOn = socket;
          pongWait = setTimeout(() => {
            if (waitingOn && waitingOn === socket && waitingOn.readyState === 1) {
              if (waitingOn.terminate) waitingOn.terminate();
              else waitingOn.close(4408, 'no pong from the service');
            }
          }, this.keepAliveMs);
        },
        pong: (received) => {
          if (received) stopWaiting();
        },
        // graphql-ws resubscribes on its own, with the same variables, after a socket closed with
        // 1000: end each stream here instead, so subscribe() resumes it from its own cursor.
        closed: (event) => {
          stopWaiting();
          socket = null;
          for (const channel of [...this.wsChannels]) channel.push(endFromWsError(event));
        },
      },
    });
    return this.ws;
  }

  /** One attempt over graphql-ws: results and the end go into `channel`; returns how to stop it. */
  private openWs<R>(query: string, operationName: string | undefined, variables: unknown, channel: Channel<R>): () => void {
    const channels = this.wsChannels as Set<Channel<R>>;
    channels.add(channel);
    const unsubscribe = this.wsClient().subscribe<R>(
      { query, operationName, variables: variables as Record<string, unknown> },
      sinkInto(channel, endFromWsError),
    );
    return () => {
      channels.delete(channel);
      unsubscribe();
    };
  }

  /**
   * fetch for GraphQL over SSE, cut when nothing arrives for twice `keepAliveMs`: the service
   * writes a ping every 12 s on an idle stream, so a silent one is a dead connection (graphql-sse
   * then reports a network error and subscribe() resumes from the cursor). The wait for the
   * response's head counts too.
   */
  private sseFetch(): typeof fetch {
    const base = this.fetchImpl;
    const idleMs = this.keepAliveMs * 2;
    return (async (input: Parameters<typeof fetch>[0], init?: RequestInit) => {
      const control = new AbortController();
      let timer: ReturnType<typeof setTimeout> | undefined;
      const disarm = () => clearTimeout(timer);
      const arm = () => {
        disarm();
        timer = setTimeout(() => control.abort(new Error(`nothing arrived for ${idleMs} ms`)), idleMs);
        (timer as { unref?: () => void }).unref?.();
      };
      const outer = init?.signal;
      if (outer?.aborted) control.abort(outer.reason);
      outer?.addEventListener('abort', () => {
        disarm();
        control.abort(outer.reason);
      }, { once: true });
      arm();
      let response: Response;
      try {
        response = await base(input, { ...init, signal: control.signal });
      } catch (error) {
        disarm();
        throw error;
      }
      if (!response.body || !(response.headers.get('content-type') ?? '').includes('text/event-stream')) {
        disarm();
        return response;
      }
      arm();
      const body = response.body.pipeThrough(
        new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, out) {
            arm();
            out.enqueue(chunk);
          },
          flush: disarm,
        }),
      );
      return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
    }) as typeof fetch;
  }

  /** One attempt over GraphQL over SSE (distinct connections, as the service's Yoga serves it). */
  private openSse<R>(query: string, operationName: string | undefined, variables: unknown, channel: Channel<R>): () => void {
    const client = createSseClient({
      url: `${this.url}/graphql`,
      headers: this.headers(),
      fetchFn: this.sseFetch(),
      retryAttempts: 0,
    });
    const unsubscribe = client.subscribe<R>(
      { query, operationName, variables: variables as Record<string, unknown> },
      sinkInto(channel, endFromSseError),
    );
    return () => {
      unsubscribe();
      client.dispose();
    };
  }

  /**
   * A subscription as an async iterator. After a dropped connection or the service closing the
   * stream with ABORTED (details.reason server-stopping or slow-consumer) it subscribes again with
   * `after` = the cursor of the last result received (or the service's details.lastCursor), so
   * nothing is lost or repeated. Breaking out of the loop, or aborting `signal`, closes it.
   * Errors that are not about the connection (NOT_FOUND, PERMISSION_DENIED, INVALID_INPUT ...) end
   * the iteration with a MetalError.
   */
  subscribe<R, V>(doc: TypedDocumentNode<R, V>, variables: V, opts: SubscribeOptions<R> = {}): AsyncIterable<R> {
    const client = this;
    const { query, operationName, takesAfter } = source(doc);
    const transport = opts.transport ?? 'ws';
    if (transport !== 'ws' && transport !== 'sse') throw new MetalError('INVALID_INPUT', "transport: must be 'ws' or 'sse'", { field: 'transport' });
    const cursorOf = opts.cursor ?? (defaultCursor as (r: R) => string | null | undefined);
    const retries = opts.retries ?? 10;
    const delay = opts.retryDelayMs ?? defaultDelay;
    const signal = opts.signal;
    const bufferSize = opts.bufferSize ?? 10000;
    if (!(bufferSize >= 1)) throw new MetalError('INVALID_INPUT', 'bufferSize: must be at least 1', { field: 'bufferSize' });
    return {
      async *[Symbol.asyncIterator]() {
        const closed = client.closing.signal;
        const given = (variables ?? {}) as Record<string, unknown>;
        let after = given.after as string | null | undefined;
        let failures = 0;
        while (!signal?.aborted && !closed.aborted) {
          const channel = new Channel<R>(bufferSize, () => ({
            kind: 'end',
            retry: true,
            error: new MetalError('ABORTED', `more than ${bufferSize} results waited to be taken: the stream is opened again from the last one taken`, {
              details: { reason: 'slow-consumer', side: 'client' },
            }),
          }));
          const onAbort = () => channel.push({ kind: 'aborted' });
          signal?.addEventListener('abort', onAbort, { once: true });
          const vars = takesAfter && after != null ? { ...given, after } : given;
          const stop = transport === 'sse' ? client.openSse(query, operationName, vars, channel) : client.openWs(query, operationName, vars, channel);
          client.closers.add(onAbort);
          let end: Extract<Item<R>, { kind: 'end' }> | null = null;
          try {
            for (;;) {
              const item = await channel.take();
              if (item.kind === 'aborted') return;
              if (item.kind === 'end') {
                end = item;
                break;
              }
              failures = 0;
              const cursor = cursorOf(item.data);
              if (cursor) after = cursor;
              yield item.data;
            }
          } finally {
            signal?.removeEventListener('abort', onAbort);
            client.closers.delete(onAbort);
            stop();
          }
          if (!end.error) return; // completed by the service
          if (!end.retry) throw end.error;
          // The service's lastCursor is where this subscriber's stream stood: resume from it when it is
          // ahead of what arrived (events the filter skipped), never from before it.
          if (end.lastCursor && isAhead(end.lastCursor, after)) after = end.lastCursor;
          failures += 1;
          if (failures > retries) throw end.error;
          opts.onReconnect?.({ attempt: failures, error: end.error, after });
          await sleep(delay(failures), signal, closed);
        }
      },
    };
  }

  /** Ends every open subscription (their loops finish) and closes the WebSocket. */
  async close(): Promise<void> {
    this.closing.abort();
    this.closing = new AbortController();
    for (const close of [...this.closers]) close();
    const ws = this.ws;
    this.ws = null;
    if (ws) await ws.dispose();
  }
}
