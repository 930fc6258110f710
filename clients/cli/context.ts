/**
 * What a command's action needs: its options (its own and the program's), the output, and a client
 * for the service built from the configuration (config.ts) on first use, closed when metalctl ends.
 */
import type { Command } from 'commander';
import { MetalClient } from '../sdk/src';
import { resolveConfig, type CliConfig, type GlobalOptions } from './config';
import { Output } from './output';

const open = new Set<MetalClient>();

export interface Cli {
  opts: GlobalOptions & Record<string, unknown>;
  out: Output;
  config(): CliConfig;
  client(): MetalClient;
  /** Aborted on the first SIGINT/SIGTERM (a second one ends metalctl at once): for commands that follow a stream. */
  interrupted(): AbortSignal;
}

let interrupt: AbortController | undefined;

export function cli(cmd: Command): Cli {
  const opts = cmd.optsWithGlobals() as GlobalOptions & Record<string, unknown>;
  const out = new Output({ json: opts.json });
  let config: CliConfig | undefined;
  let client: MetalClient | undefined;
  const self: Cli = {
    opts,
    out,
    config: () => (config ??= resolveConfig(opts)),
    client: () => {
      if (!client) {
        const c = self.config();
        client = new MetalClient({ url: c.url, token: c.token });
        open.add(client);
      }
      return client;
    },
    interrupted: () => {
      if (!interrupt) {
        const controller = new AbortController();
        interrupt = controller;
        const stop = (signal: NodeJS.Signals) => {
          if (controller.signal.aborted) process.exit(signal === 'SIGINT' ? 130 : 143);
          controller.abort(signal);
        };
        process.on('SIGINT', stop);
        process.on('SIGTERM', stop);
      }
      return interrupt.signal;
    },
  };
  return self;
}

/** Closes every client a command opened (their sockets), so the process can end by itself. */
export async function closeClients(): Promise<void> {
  const all = [...open];
  open.clear();
  await Promise.allSettled(all.map((c) => c.close()));
}
