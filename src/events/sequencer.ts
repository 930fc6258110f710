import pg from 'pg';
import type { Logger } from 'pino';
import type { Notifications } from '../db/listen';
import { SerialTask } from './serial';
import { databaseClient } from '../db/target';

const SEQUENCER_LOCK = 7243916083;
const BUSY_RETRY_MS = 10;
/**
 * A pass's numbering: the committed rows without a seq, in id order, after the current head (the
 * highest seq, or what retention pruned through), at most $1 of them; NOTIFYs metal_events with the
 * new head.
 */
const PASS_SQL = `WITH head AS (
    SELECT GREATEST(COALESCE((SELECT max(seq) FROM event), 0), (SELECT pruned_through FROM event_horizon WHERE id = 1)) AS h
  ), pending AS (
    SELECT p.id, row_number() OVER (ORDER BY p.id) AS rn
      FROM (SELECT id FROM event WHERE seq IS NULL ORDER BY id LIMIT $1) p
  ), upd AS (
    UPDATE event e SET seq = head.h + pending.rn FROM pending, head WHERE e.id = pending.id RETURNING e.seq
  )
  SELECT count(*)::int AS n, CASE WHEN count(*) > 0 THEN pg_notify('metal_events', max(seq)::text) END FROM upd`;

/** The least time between the starts of two passes a notification asks for (see wakeSoon). */
const NOTIFY_BATCH_MS = 15;

/**
 * Numbers committed outbox rows. Event ids come from a sequence at insert time, so two
 * transactions can commit out of id order; a reader that followed ids could pass an id that commits
 * later. The sequencer gives every committed row a cursor (`seq`) in the order it sees commits:
 * a row that commits later gets a larger seq, so "everything up to seq C" stays true forever.
 *
 * Every process runs one, woken by each commit of events (NOTIFY metal_event_pending) and by a tick.
 * A pass numbers under a transaction-level advisory lock, so passes never overlap across processes
 * and the head each reads is the last one's. A process killed mid-pass loses only its open
 * transaction; the others number those rows on their next pass: nothing committed is lost, only
 * delayed. (A session lock held by one leader would let a hung or partitioned leader stall the
 * stream until TCP gave up.)
 */
export class Sequencer {
  private client: pg.Client | null = null;
  private passes = new SerialTask(() => this.run(), () => !this.stopped);
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private soon: NodeJS.Timeout | null = null;
  /** When the last pass a notification asked for was started (performance.now()). */
  private lastNotifiedPass = -Infinity;
  /** A wake that knows rows are waiting (a notification, a retry, start): the next pass skips the look. */
  private sure = true;
  /** Rows numbered per statement: a bulk verb's 10,000 events are numbered in one or two passes. */
  private batch = 5000;

  private subscription: { stop(): void } | null = null;

  constructor(
    private databaseUrl: string,
    private notifications: Notifications,
    private log: Logger,
    private tickMs = 250,
  ) {}

  async start(): Promise<void> {
    await this.connect();
    // Its wake-ups come through the process's shared LISTEN connection: its own connection does
    // the numbering and listens to nothing (every listener is signalled at every notifying commit).
    this.subscription = await this.notifications.subscribe('metal_event_pending', () => this.wakeSoon(), { back: () => this.wake() });
    // The tick is the fallback for a notification lost with a connection: it looks (one cheap
    // statement) before it passes, so an idle service does not run a pass four times a second.
    this.timer = setInterval(() => this.wake(true), this.tickMs);
    this.timer.unref();
    this.wake();
  }

  private async connect(): Promise<void> {
    const client = databaseClient(this.databaseUrl, { application_name: 'metal-sequencer', keepAlive: true });
    client.on('error', (error) => {
      this.log.warn({ err: error }, 'event sequencer connection lost; reconnecting');
      if (this.client === client) this.client = null;
      client.end().catch(() => undefined);
    });
    await client.connect();
    // Its "what is unnumbered" scan must be a plain index scan: those mark the index entries of
    // already-numbered rows dead as they pass them, where a bitmap scan would re-check every one of
    // them on every pass until the next vacuum (O(events since vacuum) per pass).
    await client.query('SET enable_bitmapscan = off');
    // A pass is milliseconds: one that hangs (a lock, a lost client) must not hold the stream.
    await client.query("SET statement_timeout = '30s'");
    await client.query("SET idle_in_transaction_session_timeout = '10s'");
    await client.query(`PREPARE sequencer_pass(int) AS ${PASS_SQL}`);
    this.client = client;
  }

  /**
   * Asks for a pass; passes never overlap, and a wake during one runs another after it. `check`:
   * only when a row is waiting for its number (the tick); any other wake passes at once.
   */
  wake(check = false): void {
    if (!check) this.sure = true;
    void this.passes.run();
  }

  /**
   * The pass a notification (one per transaction that wrote events) asks for: at once when none
   * was asked for in the last NOTIFY_BATCH_MS, else when that much time has passed since the last
   * one started, so the commits of a busy moment are numbered together (in the lifecycle bench
   * every commit of a step's events made a pass of its own, four statements, in every process).
   * A quiet stream's first commit is not held back: delaying every notification by the whole
   * window added it to every event's delivery (npm run bench -- events, 100 commits a second).
   */
  private wakeSoon(): void {
    if (this.soon) return;
    const wait = this.lastNotifiedPass + NOTIFY_BATCH_MS - performance.now();
    if (wait <= 0) {
      this.lastNotifiedPass = performance.now();
      this.wake();
      return;
    }
    this.soon = setTimeout(() => {
      this.soon = null;
      this.lastNotifiedPass = performance.now();
      this.wake();
    }, wait);
    this.soon.unref();
  }

  private async run(): Promise<void> {
    try {
      if (!this.client) await this.connect();
      const client = this.client!;
      const sure = this.sure;
      this.sure = false;
      if (!sure) {
        const { rows } = await client.query<{ waiting: boolean }>({ name: 'sequencer-waiting', text: 'SELECT EXISTS (SELECT 1 FROM event WHERE seq IS NULL) AS waiting' });
        if (!rows[0]!.waiting) return;
      }
      for (;;) {
        const numbered = await this.pass(client);
        if (numbered === null) {
          // Another process is numbering right now; rows that committed after its snapshot still
          // need a pass: look again shortly rather than wait for the tick.
          setTimeout(() => this.wake(), BUSY_RETRY_MS).unref();
          return;
        }
        if (numbered < this.batch) return;
      }
    } catch (error) {
      if (!this.stopped) this.log.warn({ err: error }, 'event sequencer pass failed; retrying on the next tick');
    }
  }

  /**
   * One transaction: the sequencing lock (a transaction-level advisory lock, so a process that hangs
   * or is cut off cannot keep it past its transaction), then the numbering of the committed rows
   * without a seq, in id order, after the current head. null when another process holds the lock.
   */
  private async pass(client: pg.Client): Promise<number | null> {
    try {
      // BEGIN and the lock in one round trip (the simple protocol, a constant: nothing to bind).
      const begun = (await client.query(`BEGIN; SELECT pg_try_advisory_xact_lock(${SEQUENCER_LOCK}) AS ok`)) as unknown as pg.QueryResult<{ ok: boolean }>[];
      if (!begun[1]!.rows[0]!.ok) {
        await client.query('ROLLBACK');
        return null;
      }
      // The numbering and the COMMIT in one round trip: the statement was PREPARE'd when the
      // connection was made (parsed and planned once, not at every pass: its planning cost more
      // than its execution under the lifecycle bench). A statement of its own, after the lock: its
      // snapshot sees what the lock's last holder committed.
      const done = (await client.query(`EXECUTE sequencer_pass(${Math.max(1, Math.trunc(this.batch))}); COMMIT`)) as unknown as pg.QueryResult<{ n: number }>[];
      return done[0]!.rows[0]!.n;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.subscription?.stop();
    if (this.timer) clearInterval(this.timer);
    if (this.soon) clearTimeout(this.soon);
    await this.passes.current;
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => undefined);
  }
}
