import WebSocket from 'ws';
import { createClient as createWsClient, type Client as WsClient } from 'graphql-ws';
import { createClient as createSseClient } from 'graphql-sse';
import { CSRF_HEADER } from '../../src/graphql/yoga';

export interface Received {
  events: any[];
  errors: any[];
  done: boolean;
  stop(): void;
}

/** Waits until `check` holds, polling (for streams that deliver asynchronously). */
export async function until(check: () => boolean, timeoutMs = 10000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export function wsClient(baseUrl: string, token: string | null): WsClient {
  return createWsClient({
    url: baseUrl.replace(/^http/, 'ws') + '/graphql',
    webSocketImpl: WebSocket,
    connectionParams: token ? { authorization: `Bearer ${token}` } : {},
    retryAttempts: 0,
    lazy: true,
  });
}

/** What both clients call: each result's one field (or its errors), then how the stream ended. */
function collector(received: Received) {
  return {
    next: (result: { data?: Record<string, unknown> | null; errors?: readonly unknown[] }) => {
      if (result.errors) received.errors.push(...result.errors);
      if (result.data) received.events.push(Object.values(result.data)[0]);
    },
    error: (error: unknown) => {
      received.errors.push(Array.isArray(error) ? error[0] : error);
      received.done = true;
    },
    complete: () => {
      received.done = true;
    },
  };
}

/** Subscribes with the real graphql-ws client and collects what arrives. */
export function wsSubscribe(client: WsClient, query: string, variables: Record<string, unknown> = {}): Received {
  const received: Received = { events: [], errors: [], done: false, stop: () => undefined };
  received.stop = client.subscribe({ query, variables }, collector(received));
  return received;
}

/** Subscribes with the real graphql-sse client (distinct connections mode, Yoga's built-in SSE). */
export function sseSubscribe(baseUrl: string, token: string, query: string, variables: Record<string, unknown> = {}): Received {
  const client = createSseClient({
    url: `${baseUrl}/graphql`,
    headers: { authorization: `Bearer ${token}`, [CSRF_HEADER]: '1' },
    retryAttempts: 0,
  });
  const received: Received = { events: [], errors: [], done: false, stop: () => undefined };
  const unsubscribe = client.subscribe({ query, variables }, collector(received));
  received.stop = () => {
    unsubscribe();
    client.dispose();
  };
  return received;
}

/** The messages of an SSE body as they arrive: id, event and data (lines joined), comments skipped. */
export async function* sseMessages(body: ReadableStream<Uint8Array>): AsyncGenerator<{ id?: string; event?: string; data?: string }> {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) !== -1) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const message: { id?: string; event?: string; data?: string } = {};
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue;
        const i = line.indexOf(':');
        const key = line.slice(0, i);
        const value = line.slice(i + 1).replace(/^ /, '');
        if (key === 'id' || key === 'event') message[key] = value;
        if (key === 'data') message.data = (message.data ? message.data + '\n' : '') + value;
      }
      yield message;
    }
  }
}

/** The REST event stream, read with fetch: `{ id, event, data }` per SSE message. */
export function restStream(baseUrl: string, token: string, query: string, headers: Record<string, string> = {}) {
  const abort = new AbortController();
  const messages: { id?: string; event?: string; data: any }[] = [];
  const state = { status: 0, body: '' as string, done: false };
  const started = (async () => {
    const response = await fetch(`${baseUrl}/api/events${query}`, { headers: { authorization: `Bearer ${token}`, ...headers }, signal: abort.signal });
    state.status = response.status;
    if (!response.ok || !response.body) {
      state.body = await response.text();
      state.done = true;
      return;
    }
    try {
      for await (const message of sseMessages(response.body)) {
        if (message.data !== undefined) messages.push({ ...message, data: JSON.parse(message.data) });
      }
    } catch {
      // aborted
    }
    state.done = true;
  })();
  return { messages, state, started, stop: () => abort.abort() };
}
