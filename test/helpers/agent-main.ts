/**
 * A remote site agent process for the tests: src/agent/process.ts's runAgentProcess, exactly as
 * `ROLE=agent node dist/src/main.js` runs it, with the test driver (SimBmcDriver over the Redfish
 * simulator) in its registry instead of defaultDriverRegistry(). Run from dist after `npm run build`.
 */
import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/ops/log';
import { runAgentProcess } from '../../src/agent/process';
import { simDriverRegistry } from './sim-bmc-driver';

const config = loadConfig();
const log = createLogger(config.logLevel);
runAgentProcess(config, log, simDriverRegistry()).then(
  (code) => log.flush(() => process.exit(code)),
  (error: unknown) => {
    console.error(error instanceof Error ? error.message : String(error));
    process.exit(1);
  },
);
