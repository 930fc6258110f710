import pino from 'pino';
import { Sequencer } from '../src/events/sequencer';
import type { Notifications } from '../src/db/listen';

/**
 * When the sequencer's passes start, for the notifications of committed events (wakeSoon). Only
 * the scheduling is under test: wake() (which starts a pass against the database) is replaced, no
 * connection is made, and time is jest's fake clock, so nothing here depends on the machine's speed.
 *
 * The rule: the first notification after a quiet spell passes at once (holding it back for the
 * batch window was added to every event's delivery: npm run bench -- events); notifications that
 * follow within the window share one pass at its end, so a busy moment is still numbered in
 * batches, not one pass per commit.
 */
describe('sequencer wake-ups from notifications', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  function sequencer() {
    const seq = new Sequencer('postgresql://unused.invalid/none', {} as Notifications, pino({ level: 'silent' }));
    const wake = jest.spyOn(seq, 'wake').mockImplementation(() => undefined);
    const notify = () => (seq as unknown as { wakeSoon(): void }).wakeSoon();
    return { wake, notify };
  }

  it('passes at once for the first notification after a quiet spell', () => {
    const { wake, notify } = sequencer();
    notify();
    expect(wake).toHaveBeenCalledTimes(1);
    jest.advanceTimersByTime(1000);
    expect(wake).toHaveBeenCalledTimes(1);
    notify();
    expect(wake).toHaveBeenCalledTimes(2);
  });

  it('folds the notifications of a busy moment into one more pass, not one each', () => {
    const { wake, notify } = sequencer();
    notify();
    expect(wake).toHaveBeenCalledTimes(1);
    jest.advanceTimersByTime(2);
    for (let i = 0; i < 10; i += 1) notify();
    expect(wake).toHaveBeenCalledTimes(1);
    jest.advanceTimersByTime(100);
    expect(wake).toHaveBeenCalledTimes(2);
    // Nothing left over: no further pass without a further notification.
    jest.advanceTimersByTime(1000);
    expect(wake).toHaveBeenCalledTimes(2);
  });

  it('keeps passes for a steady stream of commits at least the window apart', () => {
    const { wake, notify } = sequencer();
    // A commit every 5 ms for 300 ms: 60 notifications.
    for (let t = 0; t < 300; t += 5) {
      notify();
      jest.advanceTimersByTime(5);
    }
    jest.advanceTimersByTime(100);
    // One pass per 15 ms window at most (300 / 15 = 20, plus the last window's), never one per commit.
    expect(wake.mock.calls.length).toBeGreaterThanOrEqual(15);
    expect(wake.mock.calls.length).toBeLessThanOrEqual(22);
  });
});
