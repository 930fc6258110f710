import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fromRoot } from '../src/paths';
import { gql } from './helpers/client';
import { cleanUpServices, isRunning, postmasterPid, processGroupMembers, processesMentioning, randomPort, spawnService, waitReady, type LogLine, type Service } from './helpers/service';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * `npm start` as a terminal runs it: npm, sh and node in one process group, and Ctrl-C (SIGINT) or
 * systemd's stop (SIGTERM) sent to every process of it. npm forwards the signal to its child as
 * well, so node gets it twice. PostgreSQL must stop last, after HTTP and the workers, with none of
 * our connections still open, and nothing may be left running.
 */
describe('a signal to the whole process group of `npm start`', () => {
  const dataDir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'metal-shutdown-')));
  const clusterDir = path.join(dataDir, 'pg');
  const port = randomPort(23000);
  const pgPort = randomPort(24000);
  const url = `http://127.0.0.1:${port}`;
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, PORT: String(port), EMBEDDED_PG_PORT: String(pgPort), LOG_LEVEL: 'debug', SHUTDOWN_TIMEOUT_MS: '60000' };
  delete env.DATABASE_URL;
  delete env.ADMIN_TOKEN;
  const started: Service[] = [];

  async function startNpm(): Promise<Service> {
    if (!fs.existsSync(fromRoot('dist', 'src', 'main.js'))) throw new Error('run `npm run build` first (npm test does)');
    // --ignore-scripts skips only prestart (the build, done already); `start` itself runs as usual.
    const service = spawnService('npm', ['start', '--ignore-scripts'], { cwd: fromRoot(), env });
    started.push(service);
    await waitReady(url, 60000, service);
    return service;
  }

  function expectNothingLeft(service: Service): void {
    expect(processesMentioning(dataDir)).toEqual([]);
    expect(processGroupMembers(service.pid)).toEqual([]);
    expect(fs.existsSync(path.join(clusterDir, 'postmaster.pid'))).toBe(false);
    expect(fs.existsSync(path.join(dataDir, 'service.lock'))).toBe(false);
  }

  const at = (lines: LogLine[], test: (l: LogLine) => boolean) => lines.findIndex(test);

  afterAll(() => cleanUpServices(started, clusterDir, dataDir));

  it.each(['SIGINT', 'SIGTERM'] as const)('%s: HTTP drains, workers stop, then PostgreSQL, with no connection of ours cut; nothing is left', async (signal) => {
    const service = await startNpm();
    expect((await gql(url, null, '{ __typename }')).data).toEqual({ __typename: 'Query' });
    const postmaster = postmasterPid(clusterDir)!;
    // The postmaster is in a process group of its own: the group signal cannot reach it.
    expect(processGroupMembers(service.pid)).not.toContain(postmaster);

    service.signalGroup(signal);
    await service.exited;
    const lines = service.lines();
    const shutting = at(lines, (l) => l.msg.startsWith('shutting down'));
    const drained = at(lines, (l) => l.msg === 'HTTP drained');
    const workers = at(lines, (l) => l.msg === 'workers stopped');
    const fastShutdown = at(lines, (l) => !!l.postgres?.includes('received fast shutdown request'));
    const pgStopped = at(lines, (l) => l.msg === 'embedded PostgreSQL stopped');
    const stopped = at(lines, (l) => l.msg === 'stopped');
    expect(shutting).toBeGreaterThanOrEqual(0);
    // The last two lines ('embedded PostgreSQL stopped', then 'stopped') are written in the same
    // millisecond and, over a pipe, were seen once in a few dozen runs in the other order; what
    // matters is that PostgreSQL's own fast shutdown comes after the drain and the workers.
    expect({ drained: drained > shutting, workers: workers > drained, fastShutdown: fastShutdown > workers, pgStopped: pgStopped > fastShutdown, stopped: stopped > fastShutdown }).toEqual({
      drained: true,
      workers: true,
      fastShutdown: true,
      pgStopped: true,
      stopped: true,
    });
    // PostgreSQL got no signal before ours, and every pool of ours had closed by then.
    expect(lines.filter((l) => l.postgres?.includes('terminating connection due to administrator command'))).toEqual([]);
    expect(lines.filter((l) => l.postgres && /received (smart|immediate) shutdown/.test(l.postgres))).toEqual([]);
    // npm's forwarded copy of the signal is not taken for a second request.
    expect(lines.filter((l) => l.msg.startsWith('shutting down'))).toHaveLength(1);
    expect(lines.filter((l) => l.msg.startsWith('second signal'))).toEqual([]);
    expect(isRunning(postmaster)).toBe(false);
    expectNothingLeft(service);
  }, 90000);

  it('a second signal while the drain waits stops PostgreSQL at once and exits; nothing is left, and the next start works', async () => {
    const service = await startNpm();
    // A request whose body never comes: the drain waits for it (SHUTDOWN_TIMEOUT_MS is 60 s).
    // "100 Continue" proves the server has the request in hand before we signal.
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => undefined);
    const continued = new Promise<void>((resolve) => socket.once('data', (d) => d.toString().startsWith('HTTP/1.1 100') && resolve()));
    socket.write(`POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n`);
    await continued;
    socket.write('{"query":');

    service.signalGroup('SIGINT');
    await service.waitFor((l) => l.msg.startsWith('shutting down'), 10000, 'the first shutdown line');
    await sleep(1500); // past the window in which a repeat is npm's forwarded copy
    expect(service.lines().filter((l) => l.msg === 'HTTP drained')).toEqual([]);
    service.signalGroup('SIGINT');
    const exit = await service.exited;
    socket.destroy();
    const lines = service.lines();
    expect(lines.filter((l) => l.msg.startsWith('second signal'))).toHaveLength(1);
    // It exited on the second signal, not because the drain finished.
    expect(lines.filter((l) => l.msg === 'HTTP drained')).toEqual([]);
    expect(exit.code).not.toBe(0);
    expectNothingLeft(service);

    const again = await startNpm();
    expect((await gql(url, null, '{ __typename }')).data).toEqual({ __typename: 'Query' });
    again.signalGroup('SIGTERM');
    await again.exited;
    expectNothingLeft(again);
  }, 120000);
});
