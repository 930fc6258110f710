import type { FirstStatement, Sql } from './sql';
import { databaseFailure } from './failure';

/** How many statements one message carries at most. */
export const STATEMENTS_PER_MESSAGE = 64;
/** How many messages may be in flight at once. */
export const MESSAGE_LANES = 2;

/** How a JoinedWriter writes one item. */
export interface JoinedWrite<I, R> {
  /** The item's statement (its answer is its first row). */
  statement(item: I): FirstStatement;
  /** What the item's write resolves to, from its statement's first row (undefined: no row). */
  settle(row: Record<string, unknown> | undefined, item: I): R;
  /** The item written alone, as without the writer: after its message was refused for another reason than the database's state. */
  alone(item: I): Promise<R>;
}

interface Waiting<I, R> {
  item: I;
  resolve(value: R): void;
  reject(error: unknown): void;
}

/**
 * One-statement writes that arrive from many callers at once (a site agent's command results,
 * ramdisk reports), sent together: every item that arrived while the previous message waited for
 * a database connection goes in the next one (Sql.joinedWhenConnected), one round trip and one
 * commit for all of them instead of one each. With an idle pool a lone item goes at once, alone.
 * Each item's statement is the one it would send alone, and each answer is settled as it would be.
 *
 * A message is one transaction, and each of its statements sees the ones before it. When the
 * database is down or cannot write, every item of the message is refused with that failure (the
 * callers try again, as they would alone). When the database refuses the message for another
 * reason (one bad item, a deadlock), nothing of it was kept, and each item is written alone, so
 * that one item's fault stays its own.
 */
export class JoinedWriter<I, R> {
  private readonly waiting: Waiting<I, R>[] = [];
  private lanes = 0;
  /** A lane waiting for its connection takes whatever waits once it has one: no second lane meanwhile. */
  private connecting = false;

  constructor(
    private readonly sql: Sql,
    private readonly how: JoinedWrite<I, R>,
    private readonly maxLanes = MESSAGE_LANES,
    private readonly perMessage = STATEMENTS_PER_MESSAGE,
  ) {}

  write(item: I): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.waiting.push({ item, resolve, reject });
      this.send();
    });
  }

  private send(): void {
    if (this.waiting.length === 0 || this.connecting || this.lanes >= this.maxLanes) return;
    this.lanes += 1;
    this.connecting = true;
    let taken: Waiting<I, R>[] | null = null;
    const take = () => {
      this.connecting = false;
      taken = this.waiting.splice(0, this.perMessage);
      return taken.map((w) => this.how.statement(w.item));
    };
    this.sql.joinedWhenConnected(take)
      .then(({ results }) => {
        taken!.forEach((w, i) => {
          try {
            w.resolve(this.how.settle(results[i]!.rows[0], w.item));
          } catch (error) {
            w.reject(error);
          }
        });
      }, (error: unknown) => {
        if (taken === null) {
          // No connection: what waits now is refused with the failure (each caller tries again).
          this.connecting = false;
          for (const w of this.waiting.splice(0)) w.reject(error);
          return undefined;
        }
        if (databaseFailure(error)) {
          for (const w of taken) w.reject(error);
          return undefined;
        }
        return Promise.all(taken.map((w) => this.how.alone(w.item).then(w.resolve, w.reject)));
      })
      .finally(() => {
        this.lanes -= 1;
        this.send();
      });
  }
}
