/**
 * `npm run ha -- start|status|stop`: the tests' Patroni cluster (test/helpers/patroni.ts) by hand,
 * on loopback, to run the service against or to try a failover with patronictl.
 *
 * - start: starts it, writes what it is (DATABASE_URL, the members' ports, the cluster folder,
 *   this process's pid) to the state file (0600: it holds the password), prints the same, and runs
 *   until SIGINT or SIGTERM, then stops the cluster (nothing is left running) and removes the file.
 * - status: each member's role and state from its Patroni REST API.
 * - stop: SIGTERM to the `start` process named in the state file.
 *
 * The state file: --state FILE, default .data/ha-cluster.json.
 */
import fs from 'node:fs';
import path from 'node:path';
import { startPatroniCluster, type Member } from './patroni';

interface State {
  pid: number;
  dir: string;
  url: string;
  members: Member[];
  patroniConfig: string[];
}

function usage(): never {
  process.stderr.write('usage: npm run ha -- start|status|stop [--state FILE]\n');
  process.exit(2);
}

function readState(file: string): State {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8')) as State;
  } catch {
    process.stderr.write(`no cluster: ${file} is missing or unreadable (npm run ha -- start writes it)\n`);
    process.exit(1);
  }
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const command = args[0];
  const at = args.indexOf('--state');
  const stateFile = path.resolve(at >= 0 ? (args[at + 1] ?? usage()) : path.join('.data', 'ha-cluster.json'));
  if (command === 'start') {
    if (fs.existsSync(stateFile)) {
      const old = readState(stateFile);
      let alive = false;
      try {
        process.kill(old.pid, 0);
        alive = true;
      } catch {
        // stale file
      }
      if (alive) {
        process.stderr.write(`a cluster is already running (pid ${old.pid}, ${stateFile}): npm run ha -- stop\n`);
        process.exit(1);
      }
    }
    const cluster = await startPatroniCluster();
    const state: State = {
      pid: process.pid, dir: cluster.dir, url: cluster.url, members: cluster.members,
      patroniConfig: cluster.members.map((m) => path.join(path.dirname(m.dataDir), 'patroni.yml')),
    };
    fs.mkdirSync(path.dirname(stateFile), { recursive: true });
    fs.writeFileSync(stateFile, JSON.stringify(state, null, 2) + '\n', { mode: 0o600 });
    process.stdout.write(`${JSON.stringify(state, null, 2)}\nrunning; Ctrl-C or \`npm run ha -- stop\` stops it\n`);
    let stopping = false;
    const stop = () => {
      if (stopping) return;
      stopping = true;
      void cluster.stop().then(() => {
        fs.rmSync(stateFile, { force: true });
        const left = cluster.leftovers();
        process.stdout.write(left.length ? `left running: ${left.map((p) => p.pid).join(' ')}\n` : 'stopped; nothing left running\n');
        process.exit(left.length ? 1 : 0);
      });
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
    setInterval(() => undefined, 1 << 30);
    return;
  }
  if (command === 'status') {
    const state = readState(stateFile);
    for (const m of state.members) {
      let line: string;
      try {
        const res = await fetch(`http://127.0.0.1:${m.restPort}/patroni`, { signal: AbortSignal.timeout(2000) });
        const body = (await res.json()) as { role?: string; state?: string; timeline?: number; sync_standby?: boolean };
        line = `${m.name} 127.0.0.1:${m.port} ${body.role ?? '?'} ${body.state ?? '?'}${body.sync_standby ? ' (synchronous standby)' : ''} timeline ${body.timeline ?? '?'}`;
      } catch {
        line = `${m.name} 127.0.0.1:${m.port} no answer from Patroni (127.0.0.1:${m.restPort})`;
      }
      process.stdout.write(line + '\n');
    }
    return;
  }
  if (command === 'stop') {
    const state = readState(stateFile);
    try {
      process.kill(state.pid, 'SIGTERM');
    } catch {
      process.stderr.write(`the start process (pid ${state.pid}) is gone; removing ${stateFile} (its cluster folder ${state.dir} may remain)\n`);
      fs.rmSync(stateFile, { force: true });
      process.exit(1);
    }
    return;
  }
  usage();
}

main().catch((error: unknown) => {
  process.stderr.write(`${(error as Error).message}\n`);
  process.exit(1);
});
