import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import pg from 'pg';
import { databaseClient } from './target';

/** What a subscriber hears besides its notifications. */
export interface ListenEvents {
  /** The connection was lost: notifications may be missed until `back`. */
  lost?(): void;
  /** LISTEN is in place again after a loss: whatever was committed meanwhile is to be caught up. */
  back?(): void;
}

interface Subscriber extends ListenEvents {
  channel: string;
  onNotify(payload: string): void;
}

/** The connection's application_name in pg_stat_activity. */
export const LISTEN_APPLICATION = 'metal-listen';

/**
 * The process's one LISTEN connection, shared by everything that waits for a notification: the
 * response cache (metal_cache), the event hub (metal_events, metal_cache), the sequencer
 * (metal_event_pending), the built-in agent (metal_command_queued) and the engine's fetch
 * loop (workflow_run_due).
 *
 * One connection, not one each: at every commit that notifies, PostgreSQL (18) signals every
 * backend of the database that listens on any channel, and each wakes to read the queue (about
 * 28 us of PostgreSQL's CPU per listener and commit on this machine; a workflow step commits four
 * to five notifying transactions, and a process had five listeners).
 *
 * When the connection drops, each subscriber's `lost` runs (their polling carries on), and it
 * reconnects with a growing delay (100 ms to 5 s); once every channel is listened to again, each
 * `back` runs.
 */
export class Notifications {
  private client: pg.Client | null = null;
  private subscribers = new Set<Subscriber>();
  private channels = new Set<string>();
  private stopped = false;
  private connecting: Promise<void> | null = null;
  private reconnecting = false;

  constructor(private databaseUrl: string, private log: Logger) {}

  /** Connects and LISTENs to the channels subscribed so far; resolves when that is in place. */
  async start(): Promise<void> {
    await this.ensure();
  }

  /**
   * Listens on `channel` for the rest of the process (or until the returned stop). Resolves once
   * LISTEN is in place, or at once when the connection is down (its `back` runs later).
   */
  async subscribe(channel: string, onNotify: (payload: string) => void, events: ListenEvents = {}): Promise<{ stop(): void }> {
    if (!/^[a-z_][a-z0-9_]*$/.test(channel)) throw new Error(`not a channel name: ${channel}`);
    const sub: Subscriber = { channel, onNotify, ...events };
    this.subscribers.add(sub);
    if (!this.channels.has(channel)) {
      this.channels.add(channel);
      const client = this.client;
      if (client) {
        await client.query(`LISTEN ${channel}`).catch((error: unknown) => this.log.warn({ err: error, channel }, 'LISTEN failed; the reconnect listens again'));
      } else if (!this.stopped) {
        // A subscriber polls anyway: a connection that cannot be made now is retried, not thrown.
        await this.ensure().catch((error: unknown) => {
          this.log.warn({ err: error }, 'could not LISTEN; polling, and trying again');
          void this.reconnect();
        });
      }
    }
    return { stop: () => { this.subscribers.delete(sub); } };
  }

  /** Whether LISTEN is in place now (a subscriber may not rely on notifications otherwise). */
  get listening(): boolean {
    return this.client !== null;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.connecting?.catch(() => undefined);
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => undefined);
  }

  private ensure(): Promise<void> {
    if (this.client || this.stopped) return Promise.resolve();
    if (!this.connecting) {
      this.connecting = this.connect().finally(() => { this.connecting = null; });
    }
    return this.connecting;
  }

  private async connect(): Promise<void> {
    const c = databaseClient(this.databaseUrl, { application_name: LISTEN_APPLICATION, keepAlive: true });
    c.on('notification', (n) => {
      const payload = n.payload ?? '';
      for (const s of this.subscribers) {
        if (s.channel !== n.channel) continue;
        try {
          s.onNotify(payload);
        } catch (error) {
          this.log.warn({ err: error, channel: n.channel }, 'a notification handler threw');
        }
      }
    });
    c.on('error', (error) => this.onLost(c, error));
    c.on('end', () => this.onLost(c, null));
    try {
      await c.connect();
      for (const channel of this.channels) await c.query(`LISTEN ${channel}`);
    } catch (error) {
      await c.end().catch(() => undefined);
      throw error;
    }
    if (this.stopped) {
      await c.end().catch(() => undefined);
      return;
    }
    this.client = c;
  }

  private onLost(c: pg.Client, error: Error | null): void {
    if (this.client !== c) return;
    this.client = null;
    void c.end().catch(() => undefined);
    if (this.stopped) return;
    this.log.warn({ err: error ?? undefined }, 'the LISTEN connection was lost; polling until it is back');
    for (const s of this.subscribers) s.lost?.();
    void this.reconnect();
  }

  /** Reconnects with a growing delay (one loop at a time), then tells every subscriber it is back. */
  private async reconnect(): Promise<void> {
    if (this.reconnecting) return;
    this.reconnecting = true;
    try {
      for (let delay = 100; !this.stopped && !this.client; delay = Math.min(delay * 2, 5000)) {
        await sleep(delay, undefined, { ref: false });
        if (this.stopped) return;
        await this.ensure().catch((error: unknown) => this.log.warn({ err: error }, 'could not LISTEN again; retrying'));
      }
      if (this.stopped || !this.client) return;
      for (const s of this.subscribers) s.back?.();
    } finally {
      this.reconnecting = false;
    }
  }
}
