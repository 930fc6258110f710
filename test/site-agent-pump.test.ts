/**
 * The loop both agents share (src/agent/pump.ts): it never runs more than its concurrency, and a
 * stop reports what is still running by what the BMC may have seen.
 */
import pino from 'pino';
import { CommandPump, type PumpItem } from '../src/agent/pump';
import type { CommandResult } from '../src/modules/sites/commands';

describe('the command pump', () => {
  it('claims only free slots, and on stop reports unfinished commands by whether they reached the BMC', async () => {
    const queue: PumpItem[] = [
      { id: 'c1', kind: 'bmc.power' }, { id: 'c2', kind: 'bmc.power' }, { id: 'c3', kind: 'bmc.inventory' }, { id: 'c4', kind: 'bmc.power' },
    ];
    const asked: number[] = [];
    const abandoned: [string, CommandResult][] = [];
    let running = 0;
    let most = 0;
    let allStarted!: () => void;
    const threeRunning = new Promise<void>((r) => (allStarted = r));
    const pump = new CommandPump<PumpItem>({
      log: pino({ level: 'silent' }),
      concurrency: 3,
      pollMs: 10,
      renewMs: 1000,
      claim: async (max) => {
        asked.push(max);
        return queue.splice(0, max);
      },
      renew: async () => undefined,
      abandon: async (item, result) => {
        abandoned.push([item.id, result]);
      },
      // c2 waits for its credentials forever (never sent); the others reach the "BMC" and hang there.
      run: (item, signal) => {
        running += 1;
        most = Math.max(most, running);
        if (item.id !== 'c2') item.started = true;
        if (running === 3) allStarted();
        return new Promise<void>((resolve) => signal.addEventListener('abort', () => {
          running -= 1;
          resolve();
        }));
      },
    });
    pump.start();
    await threeRunning;
    await pump.stop(20);
    expect(most).toBe(3);
    expect(asked[0]).toBe(3);
    expect(asked.every((n) => n >= 1 && n <= 3)).toBe(true);
    expect(queue.map((q) => q.id)).toEqual(['c4']);
    expect(Object.fromEntries(abandoned.map(([id, r]) => [id, r.ok ? 'ok' : [r.code, r.retryable]]))).toEqual({
      c1: ['AGENT_LOST', false],
      c2: ['AGENT_ERROR', true],
      c3: ['AGENT_ERROR', true],
    });
    expect(await pump.ended).toBeNull();
  });

  it('stops by itself on a fatal claim error (a revoked token) and says why', async () => {
    const refused = new Error('UNAUTHENTICATED');
    const pump = new CommandPump<PumpItem>({
      log: pino({ level: 'silent' }), concurrency: 1, pollMs: 10, renewMs: 1000,
      claim: async () => { throw refused; },
      renew: async () => undefined, abandon: async () => undefined, run: async () => undefined,
      isFatal: (e) => e === refused,
    });
    pump.start();
    expect(await pump.ended).toBe(refused);
    await pump.stop(10);
  });

  it('reports a command whose run threw (a fault of the agent) instead of holding its claim', async () => {
    const queue: PumpItem[] = [{ id: 'd1', kind: 'bmc.power' }, { id: 'd2', kind: 'bmc.power' }, { id: 'd3', kind: 'bmc.inventory' }];
    const reported: [string, CommandResult][] = [];
    let all!: () => void;
    const three = new Promise<void>((r) => (all = r));
    const pump = new CommandPump<PumpItem>({
      log: pino({ level: 'silent' }),
      concurrency: 3,
      pollMs: 10,
      renewMs: 1000,
      claim: async (max) => queue.splice(0, max),
      renew: async () => undefined,
      abandon: async (item, result) => {
        reported.push([item.id, result]);
        if (reported.length === 3) all();
      },
      // d1 throws after the BMC saw it, d2 and d3 before.
      run: async (item) => {
        if (item.id === 'd1') item.started = true;
        throw new Error('a fault of the agent');
      },
    });
    pump.start();
    await three;
    await pump.stop(20);
    expect(Object.fromEntries(reported.map(([id, r]) => [id, r.ok ? 'ok' : [r.code, r.retryable]]))).toEqual({
      d1: ['AGENT_LOST', false],
      d2: ['AGENT_ERROR', true],
      d3: ['AGENT_ERROR', true],
    });
  });
});
