/**
 * LocalAdvancer (jobs/local-wake.ts): the runs a process wakes itself, advanced there with a bound
 * on how many at once, each run once at a time, and again when woken meanwhile. The database side
 * (no job queued, the sweep as the fallback) is in engine.test.ts and site-agent-builtin.test.ts.
 */
import pino from 'pino';
import { LocalAdvancer } from '../jobs/local-wake';

const log = pino({ level: 'silent' });
const tick = () => new Promise((r) => setImmediate(r));

/** An advance that ends when the test says so. */
function gate() {
  const started: string[] = [];
  const open = new Map<string, Array<(e?: Error) => void>>();
  const advance = (runId: string) => new Promise<void>((resolve, reject) => {
    started.push(runId);
    open.set(runId, [...(open.get(runId) ?? []), (e?: Error) => (e ? reject(e) : resolve())]);
  });
  const finish = async (runId: string, error?: Error) => {
    const waiting = open.get(runId)!;
    waiting.shift()!(error);
    await tick();
    await tick();
  };
  return { started, advance, finish };
}

describe('LocalAdvancer', () => {
  it('advances at most `concurrency` runs at once, the rest in the order they were woken', async () => {
    const g = gate();
    const a = new LocalAdvancer(g.advance, async () => undefined, 2, log);
    for (const id of ['r1', 'r2', 'r3', 'r4']) a.wake(id);
    expect(g.started).toEqual(['r1', 'r2']);
    expect(a.backlog).toBe(2);
    await g.finish('r2');
    expect(g.started).toEqual(['r1', 'r2', 'r3']);
    await g.finish('r1');
    await g.finish('r3');
    await g.finish('r4');
    expect(g.started).toEqual(['r1', 'r2', 'r3', 'r4']);
    expect(a.backlog).toBe(0);
  });

  it('a run woken twice before its turn is advanced once; woken while it is advanced, once more afterwards', async () => {
    const g = gate();
    const a = new LocalAdvancer(g.advance, async () => undefined, 1, log);
    a.wake('busy');
    a.wake('r1');
    a.wake('r1');
    expect(a.backlog).toBe(1);
    await g.finish('busy');
    expect(g.started).toEqual(['busy', 'r1']);
    // News while r1 is being advanced: its advance may have read the rows before it.
    a.wake('r1');
    a.wake('r1');
    expect(g.started).toEqual(['busy', 'r1']);
    await g.finish('r1');
    expect(g.started).toEqual(['busy', 'r1', 'r1']);
    await g.finish('r1');
    expect(g.started).toEqual(['busy', 'r1', 'r1']);
  });

  it('an advance that throws hands the run to the queue (fallback), and the others go on', async () => {
    const g = gate();
    const queued: string[] = [];
    const a = new LocalAdvancer(g.advance, async (id) => { queued.push(id); }, 1, log);
    a.wake('bad');
    a.wake('good');
    await g.finish('bad', new Error('connection terminated'));
    expect(queued).toEqual(['bad']);
    expect(g.started).toEqual(['bad', 'good']);
    await g.finish('good');
    expect(queued).toEqual(['bad']);
  });

  it('stop waits for the advances under way, drops the rest (the sweep finds them) and takes no more', async () => {
    const g = gate();
    const a = new LocalAdvancer(g.advance, async () => undefined, 1, log);
    a.wake('r1');
    a.wake('r2');
    let stopped = false;
    const stopping = a.stop().then(() => { stopped = true; });
    await tick();
    expect(stopped).toBe(false);
    a.wake('r3');
    await g.finish('r1');
    await stopping;
    expect(stopped).toBe(true);
    expect(g.started).toEqual(['r1']);
    a.wake('r4');
    expect(g.started).toEqual(['r1']);
  });
});
