/**
 * metalctl: the bare-metal control plane from a terminal, built on the SDK (clients/sdk).
 *
 * Run as `npx metalctl ...` in a clone (package.json's bin, bin/metalctl.js) after `npm run build`,
 * or `node dist/clients/cli/main.js ...`. Exit codes: 0 done, 1 refused (stderr says
 * `error: CODE: message`), 2 usage (errors.ts). Configuration: config.ts.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Command, Option } from 'commander';
import { reportFailure } from './errors';
import { closeClients } from './context';
import * as nodes from './commands/nodes';
import * as enroll from './commands/enroll';
import * as verbs from './commands/verbs';
import * as bulk from './commands/bulk';
import * as power from './commands/power';
import * as timeline from './commands/timeline';
import * as fabric from './commands/fabric';
import * as provision from './commands/provision';
import * as jobs from './commands/jobs';

interface Family {
  register(program: Command): void;
}

/** The command families, in the order --help lists them. */
const FAMILIES: Family[] = [nodes, enroll, verbs, bulk, power, timeline, fabric, provision, jobs];

function version(): string {
  // dist/clients/cli/main.js or clients/cli/main.ts: the repository's package.json is above either.
  for (const up of ['../../../package.json', '../../package.json']) {
    try {
      return (JSON.parse(fs.readFileSync(path.join(__dirname, up), 'utf8')) as { version: string }).version;
    } catch {
      // not there
    }
  }
  return 'unknown';
}

export function buildProgram(): Command {
  const program = new Command('metalctl')
    .description('Operate the bare-metal control plane: nodes, enrollment, verbs, bulk batches, power, timelines, the fabric, control-node provisioning and jobs.\n\n' +
      'Configuration: METAL_URL (default http://127.0.0.1:4000) and METAL_TOKEN or METAL_TOKEN_FILE, then the flags below.\n' +
      'There is no flag that takes the token itself: it would land in the shell history and in ps.\n' +
      'Exit codes: 0 done, 1 refused (stderr: "error: CODE: message"), 2 usage.')
    .version(version(), '-V, --version')
    .addOption(new Option('--url <url>', 'the service\'s base URL (overrides METAL_URL)'))
    .addOption(new Option('--token-file <file>', 'a file holding the API token (overrides METAL_TOKEN_FILE and METAL_TOKEN)'))
    .addOption(new Option('--json', 'print JSON instead of tables (reads), one JSON object per line (streams)'))
    .addOption(new Option('--insecure-http', 'allow sending the token over plain http:// to a host that is not loopback'))
    .showHelpAfterError('(run with --help for usage)')
    .configureHelp({ showGlobalOptions: true, sortSubcommands: false })
    .exitOverride();
  for (const family of FAMILIES) family.register(program);
  return program;
}

/** Runs metalctl with `argv` (node, script, ...args) and returns the exit code. */
export async function run(argv: string[] = process.argv): Promise<number> {
  try {
    await buildProgram().parseAsync(argv);
    return 0;
  } catch (e) {
    return reportFailure(e);
  } finally {
    await closeClients();
  }
}

if (require.main === module) {
  void run().then((code) => {
    // exitCode, not exit(): stdout (a pipe) is flushed before the process ends.
    process.exitCode = code;
    // A stream or a timer left behind must not keep metalctl running once its command is done.
    setTimeout(() => process.exit(code), 2000).unref();
  });
}
