import { setTimeout as sleep } from 'node:timers/promises';
import { forEachLimited } from '../clients/concurrency';

describe('forEachLimited', () => {
  it('runs every item once, in order, never more than the limit at once', async () => {
    const items = Array.from({ length: 23 }, (_, i) => i);
    let running = 0;
    let peak = 0;
    const started: number[] = [];
    await forEachLimited(items, 4, async (item, index) => {
      expect(index).toBe(item);
      started.push(item);
      running += 1;
      peak = Math.max(peak, running);
      await sleep(item % 3 === 0 ? 15 : 2);
      running -= 1;
    });
    expect(started).toEqual(items);
    expect(peak).toBe(4);
    expect(running).toBe(0);
  });

  it('starts nothing more once until() is true, and lets the running ones finish', async () => {
    const finished: number[] = [];
    let stop = false;
    await forEachLimited([0, 1, 2, 3, 4, 5, 6, 7], 2, async (item) => {
      if (item === 2) stop = true;
      await sleep(5);
      finished.push(item);
    }, { until: () => stop });
    expect(finished.sort()).toEqual([0, 1, 2]);
  });

  it('does nothing for no items or a limit below one, and rejects when an item throws', async () => {
    let calls = 0;
    await forEachLimited([], 3, async () => { calls += 1; });
    await forEachLimited([1, 2], 0, async () => { calls += 1; });
    expect(calls).toBe(0);
    await expect(forEachLimited([1, 2, 3], 2, async (item) => { if (item === 2) throw new Error('boom'); })).rejects.toThrow('boom');
  });
});
