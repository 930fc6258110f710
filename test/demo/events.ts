/**
 * The demo's live feed: the service's REST event stream (`GET /api/events?channel=all`, Server-Sent
 * Events) read over HTTP with the operator's token in the Authorization header, as any client of
 * the public API would: never the database. Events are kept until `drain()` takes them; a dropped
 * stream is opened again after the last cursor received (Last-Event-ID), so nothing is lost or
 * repeated.
 */

export interface FeedEvent {
  cursor: string;
  type: string;
  nodeId: string | null;
  subject: string;
  payload: Record<string, unknown>;
  createdAt: string;
}

export class EventFeed {
  private readonly queue: FeedEvent[] = [];
  private readonly abort = new AbortController();
  private lastCursor: string | null = null;
  private failure: Error | null = null;
  private running: Promise<void> | null = null;

  private constructor(private readonly url: string, private readonly token: string) {}

  /** Resolves once the stream is open: every event committed from then on will be received. */
  static async open(url: string, token: string): Promise<EventFeed> {
    const feed = new EventFeed(url, token);
    const body = await feed.connect();
    feed.running = feed.pump(body);
    return feed;
  }

  private async connect(): Promise<ReadableStream<Uint8Array>> {
    const response = await fetch(`${this.url}/api/events?channel=all`, {
      headers: { authorization: `Bearer ${this.token}`, accept: 'text/event-stream', ...(this.lastCursor ? { 'last-event-id': this.lastCursor } : {}) },
      signal: this.abort.signal,
    });
    if (response.status !== 200 || !response.body) {
      const text = await response.text().catch(() => '');
      let code = `HTTP ${response.status}`;
      try {
        code = (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? code;
      } catch { /* not JSON: the status says enough */ }
      throw new Error(`the event stream was refused: ${code}`);
    }
    return response.body;
  }

  private async pump(first: ReadableStream<Uint8Array>): Promise<void> {
    let body: ReadableStream<Uint8Array> | null = first;
    for (let failures = 0; !this.abort.signal.aborted;) {
      try {
        body ??= await this.connect();
        await this.read(body);
        failures = 0;
      } catch (error) {
        if (this.abort.signal.aborted) return;
        failures += 1;
        if (failures > 20) {
          this.failure = error instanceof Error ? error : new Error(String(error));
          return;
        }
      }
      body = null;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }

  private async read(body: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    let buffer = '';
    for await (const chunk of body) {
      buffer += decoder.decode(chunk, { stream: true });
      let end: number;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let event = 'message';
        const data: string[] = [];
        for (const line of block.split('\n')) {
          if (line.startsWith('event:')) event = line.slice(6).trim();
          else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
        }
        if (!data.length) continue;
        const parsed = JSON.parse(data.join('\n')) as FeedEvent & { code?: string; details?: { lastCursor?: string } };
        if (event === 'error') {
          // The server closed it (stopping, or this reader fell behind): resume where it says.
          if (parsed.details?.lastCursor) this.lastCursor = parsed.details.lastCursor;
          throw new Error(`the event stream ended: ${parsed.code ?? 'error'}`);
        }
        this.lastCursor = parsed.cursor;
        this.queue.push(parsed);
      }
    }
  }

  /** The events received since the last call, in the stream's order. */
  drain(): FeedEvent[] {
    if (this.failure) throw this.failure;
    return this.queue.splice(0);
  }

  async close(): Promise<void> {
    this.abort.abort();
    await this.running?.catch(() => undefined);
  }
}
