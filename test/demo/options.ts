import { parseArgs } from 'node:util';
import type { FlavourName } from '../sim/redfish/flavours';
import { FLAVOURS } from '../sim/redfish/flavours';

export const MAX_MACHINES = 200;

export interface DemoOptions {
  machines: number;
  /** One vendor flavour for every machine, or `mix` (round robin over all of them). */
  flavour: FlavourName | 'mix';
  /** Machines whose DCGM diagnostics fail, so the demo shows a failed node with its lastError. */
  fail: number;
  /** How many ready machines to deploy, then how many of those to release. */
  deploy: number;
  release: number;
  /** Print the summary as one JSON line at the end too (for scripts and the demo's test). */
  json: boolean;
  /** Force plain progress lines even on a terminal. */
  plain: boolean;
  /** Give up on a phase after this long (a safety net, not an expectation). */
  timeoutSeconds: number;
  /** After the summary, keep the service (and its status page) up until Ctrl-C. */
  hold: boolean;
}

export class UsageError extends Error {
  override name = 'UsageError';
}

export const USAGE = `usage: npm run demo -- [options]

  --machines N     simulated Redfish machines to enroll (1..${MAX_MACHINES}, default 20)
  --flavour F      BMC flavour of every machine: mix (default), ${Object.keys(FLAVOURS).join(', ')}
  --fail K         K machines fail their DCGM diagnostics (0..N, default 0): failed, with lastError
  --deploy D       ready machines to deploy (default min(3, ready))
  --release R      deployed machines to release back to ready (default min(2, deployed))
  --timeout S      give up on a phase after S seconds (default 600)
  --hold           after the summary, keep everything running (the status page at /ui too) until Ctrl-C
  --plain          progress lines instead of a live table, even on a terminal
  --json           also print the summary as one JSON line`;

function int(name: string, raw: string | undefined, min: number, max: number): number | undefined {
  if (raw === undefined) return undefined;
  if (!/^\d+$/.test(raw.trim())) throw new UsageError(`--${name} must be a whole number from ${min} to ${max}, got "${raw}"`);
  const n = Number(raw);
  if (n < min || n > max) throw new UsageError(`--${name} must be from ${min} to ${max}, got ${n}`);
  return n;
}

export function parseDemoArgs(argv: string[]): DemoOptions {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        machines: { type: 'string' },
        flavour: { type: 'string' },
        fail: { type: 'string' },
        deploy: { type: 'string' },
        release: { type: 'string' },
        timeout: { type: 'string' },
        plain: { type: 'boolean' },
        hold: { type: 'boolean' },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  if (values.help) throw new UsageError('');
  const str = (k: string) => values[k] as string | undefined;
  const machines = int('machines', str('machines'), 1, MAX_MACHINES) ?? 20;
  const flavour = (str('flavour') ?? 'mix') as FlavourName | 'mix';
  if (flavour !== 'mix' && !Object.hasOwn(FLAVOURS, flavour)) {
    throw new UsageError(`--flavour must be mix or one of ${Object.keys(FLAVOURS).join(', ')}, got "${flavour}"`);
  }
  const fail = int('fail', str('fail'), 0, machines) ?? 0;
  const ready = machines - fail;
  const deploy = int('deploy', str('deploy'), 0, ready) ?? Math.min(3, ready);
  const release = int('release', str('release'), 0, deploy) ?? Math.min(2, deploy);
  const timeoutSeconds = int('timeout', str('timeout'), 10, 3600) ?? 600;
  return { machines, flavour, fail, deploy, release, json: values.json === true, plain: values.plain === true, timeoutSeconds, hold: values.hold === true };
}
