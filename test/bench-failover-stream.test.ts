/**
 * The failover bench's SSE reader (test/bench/failover-stream.ts) against a small SSE server on
 * loopback: after a stream ends it connects again with Last-Event-ID set to the last cursor it
 * received, and it counts each cursor as often as it arrives (so a server that replays from the
 * start shows as duplicates, which the bench counts as lost events).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { readStream, type StreamReader } from './bench/failover-stream';

interface Sse {
  url: string;
  /** The Last-Event-ID header of each request, in order ('' when absent). */
  lastIds: string[];
  close(): Promise<void>;
}

/** Serves events 1..total, `perConnection` per connection, resuming after Last-Event-ID unless `ignoreLastId`. */
async function sseServer(total: number, perConnection: number, ignoreLastId = false): Promise<Sse> {
  const lastIds: string[] = [];
  const open = new Set<http.ServerResponse>();
  const server = http.createServer((req, res) => {
    const header = req.headers['last-event-id'];
    const last = typeof header === 'string' ? header : '';
    lastIds.push(last);
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(': hello\n\n');
    const from = ignoreLastId ? 1 : Number(last || '0') + 1;
    const to = Math.min(total, from + perConnection - 1);
    for (let seq = from; seq <= to; seq += 1) res.write(`id: ${seq}\nevent: node.x\ndata: {"cursor":"${seq}"}\n\n`);
    if (to < total) {
      res.end();
    } else {
      // Everything sent: hold the stream open as a live one would.
      open.add(res);
      res.on('close', () => open.delete(res));
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    lastIds,
    close: () => new Promise<void>((resolve) => {
      for (const res of open) res.destroy();
      server.close(() => resolve());
    }),
  };
}

async function until(check: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('not in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

let reader: StreamReader | null = null;
let sse: Sse | null = null;
afterEach(async () => {
  reader?.stop();
  await sse?.close();
  reader = null;
  sse = null;
});

describe('the failover bench\'s SSE reader', () => {
  it('resumes with Last-Event-ID after each end of stream and receives every event once', async () => {
    sse = await sseServer(10, 4);
    reader = readStream('t', sse.url, 'token', 0n);
    await until(() => reader!.last() === 10n);
    expect(sse.lastIds.slice(0, 3)).toEqual(['0', '4', '8']);
    expect([...reader.seen.entries()].sort((a, b) => Number(a[0] - b[0]))).toEqual(Array.from({ length: 10 }, (_, i) => [BigInt(i + 1), 1]));
    expect(reader.drops.get('stream ended')).toBe(2);
    expect(reader.connections()).toBe(3);
  });

  it('counts an event received twice (a server that replays from the start)', async () => {
    sse = await sseServer(6, 4, true);
    reader = readStream('t', sse.url, 'token', 0n);
    await until(() => reader!.last() === 4n && reader!.connections() >= 2 && (reader!.seen.get(1n) ?? 0) >= 2);
    expect(reader.seen.get(1n)).toBeGreaterThanOrEqual(2);
  });

  it('drops its own connection when told to, and resumes after the last event', async () => {
    sse = await sseServer(3, 3);
    reader = readStream('t', sse.url, 'token', 0n, 150);
    await until(() => (reader!.drops.get('dropped by the reader') ?? 0) >= 2);
    expect(sse.lastIds[0]).toBe('0');
    expect(sse.lastIds.slice(1).every((id) => id === '3')).toBe(true);
    expect([...reader.seen.values()]).toEqual([1, 1, 1]);
  });
});
