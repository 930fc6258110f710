import pg from 'pg';
import type { Logger } from 'pino';

const SEQUENCER_LOCK = 7243916083;

/**
 * Numbers committed outbox rows. Event ids come from a sequence at insert time, so two
 * transactions can commit out of id order; a reader that followed ids could pass an id that commits
 * later. The sequencer gives every committed row a cursor (`seq`) in the order it sees commits:
 * a row that commits later gets a larger seq, so "everything up to seq C" stays true forever.
 *
 * Every process runs one; the one holding a session advisory lock is the leader and the only one
 * that writes seq. When its connection dies (the process is killed), PostgreSQL drops the lock and
 * another process takes over within a tick: nothing committed is lost, only delayed.
 */
export class Sequencer {
  private client: pg.Client | null = null;
  private leader = false;
  private running: Promise<void> | null = null;
  private again = false;
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  /** Rows numbered per statement: a bulk verb's 10,000 events are numbered in one or two passes. */
  private batch = 5000;

  constructor(
    private databaseUrl: string,
    private log: Logger,
    private tickMs = 250,
  ) {}

  async start(): Promise<void> {
    await this.connect();
    this.timer = setInterval(() => this.wake(), this.tickMs);
    this.timer.unref();
    this.wake();
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.databaseUrl, application_name: 'metal-sequencer' });
    client.on('error', (error) => {
      this.log.warn({ err: error }, 'event sequencer connection lost; reconnecting');
      this.leader = false;
      if (this.client === client) this.client = null;
      client.end().catch(() => undefined);
    });
    client.on('notification', () => this.wake());
    await client.connect();
    // Its "what is unnumbered" scan must be a plain index scan: those mark the index entries of
    // already-numbered rows dead as they pass them, where a bitmap scan would re-check every one of
    // them on every pass until the next vacuum (O(events since vacuum) per pass).
    await client.query('SET enable_bitmapscan = off');
    await client.query('LISTEN metal_event_pending');
    this.client = client;
  }

  /** Asks for a pass; passes never overlap, and a wake during one runs another after it. */
  wake(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.run().finally(() => {
      this.running = null;
      if (this.again && !this.stopped) {
        this.again = false;
        this.wake();
      }
    });
  }

  private async run(): Promise<void> {
    try {
      if (!this.client) await this.connect();
      const client = this.client!;
      if (!this.leader) {
        const { rows } = await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1) AS ok', [SEQUENCER_LOCK]);
        this.leader = rows[0]!.ok;
        if (!this.leader) return;
        this.log.info('this process now numbers the event stream');
      }
      for (;;) {
        const numbered = await this.pass(client);
        if (numbered < this.batch) break;
      }
    } catch (error) {
      if (!this.stopped) this.log.warn({ err: error }, 'event sequencer pass failed; retrying on the next tick');
    }
  }

  /** One statement: number the committed rows without a seq, in id order, after the current head. */
  private async pass(client: pg.Client): Promise<number> {
    const { rows } = await client.query<{ n: number }>(
      `WITH head AS (
         SELECT GREATEST(COALESCE((SELECT max(seq) FROM event), 0), (SELECT pruned_through FROM event_horizon WHERE id = 1)) AS h
       ), pending AS (
         SELECT p.id, row_number() OVER (ORDER BY p.id) AS rn
           FROM (SELECT id FROM event WHERE seq IS NULL ORDER BY id LIMIT $1) p
       ), upd AS (
         UPDATE event e SET seq = head.h + pending.rn FROM pending, head WHERE e.id = pending.id RETURNING e.seq
       )
       SELECT count(*)::int AS n, CASE WHEN count(*) > 0 THEN pg_notify('metal_events', max(seq)::text) END FROM upd`,
      [this.batch],
    );
    return rows[0]!.n;
  }

  get isLeader(): boolean {
    return this.leader;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.running;
    const client = this.client;
    this.client = null;
    this.leader = false;
    await client?.end().catch(() => undefined);
  }
}
