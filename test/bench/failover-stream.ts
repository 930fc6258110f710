/**
 * An SSE reader of `GET /api/events?channel=all` for `npm run bench -- failover`: it counts every
 * event it receives by its cursor (the event's `seq`), and whenever the stream ends or drops (a
 * process restarting, a failover ending the stream with `event: error`) it connects again with
 * `Last-Event-ID` set to the last cursor it saw, as an EventSource does. Afterwards the bench
 * compares what it saw with the event table: each seq exactly once.
 */
import { sleep } from './read';
import { sseMessages } from '../helpers/streams';

export interface StreamReader {
  name: string;
  /** seq -> times received. */
  seen: Map<bigint, number>;
  /** The highest seq received. */
  last(): bigint;
  /** Connections made (the first one included). */
  connections(): number;
  /** Why streams ended, by reason. */
  drops: Map<string, number>;
  stop(): void;
}

/**
 * `dropEveryMs`: the reader also ends its own connection that often (a client's network blip), so
 * that resuming with Last-Event-ID is exercised even when no server ends a stream.
 */
export function readStream(name: string, url: string, token: string, after: bigint, dropEveryMs = 0): StreamReader {
  const seen = new Map<bigint, number>();
  const drops = new Map<string, number>();
  let last = after;
  let connections = 0;
  let stopped = false;
  let controller: AbortController | null = null;
  const drop = (why: string) => drops.set(why, (drops.get(why) ?? 0) + 1);
  void (async () => {
    while (!stopped) {
      controller = new AbortController();
      const mine = controller;
      let dropping = false;
      const timer = dropEveryMs > 0 ? setTimeout(() => { dropping = true; mine.abort(); }, dropEveryMs) : null;
      try {
        connections += 1;
        const res = await fetch(`${url}/api/events?channel=all`, {
          headers: { authorization: `Bearer ${token}`, 'last-event-id': String(last), accept: 'text/event-stream' },
          signal: controller.signal,
        });
        if (res.status !== 200 || !res.body) {
          await res.arrayBuffer().catch(() => undefined);
          drop(`HTTP ${res.status}`);
        } else {
          for await (const message of sseMessages(res.body)) {
            const id = message.id?.trim() ?? null;
            if (message.event?.trim() === 'error') drop('event: error');
            else if (id !== null && /^\d+$/.test(id)) {
              const seq = BigInt(id);
              seen.set(seq, (seen.get(seq) ?? 0) + 1);
              if (seq > last) last = seq;
            }
          }
          drop('stream ended');
        }
      } catch {
        if (!stopped) drop(dropping ? 'dropped by the reader' : 'connection lost');
      } finally {
        if (timer) clearTimeout(timer);
      }
      if (!stopped && !dropping) await sleep(500);
    }
  })();
  return {
    name,
    seen,
    drops,
    last: () => last,
    connections: () => connections,
    stop() {
      stopped = true;
      controller?.abort();
    },
  };
}
