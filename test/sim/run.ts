/**
 * The machine simulator on its own: `node dist/test/sim/run.js --machines 50 [--service URL]
 * [--mockup public-localstorage] [--flavour idrac]` (after `npm run build`). Prints each machine's
 * BMC (Redfish root, user, password), MACs and UUID, as JSON lines an enroll script can read, then
 * one line per PXE boot, until SIGINT or SIGTERM stops it all.
 */
import { parseArgs } from 'node:util';
import { startMachineSim } from './machine';
import type { MockupName } from './redfish/mockup';
import type { FlavourName } from './redfish/flavours';

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      machines: { type: 'string', default: '10' },
      service: { type: 'string', default: process.env.SERVICE_URL ?? 'http://127.0.0.1:4000' },
      mockup: { type: 'string', default: 'public-localstorage' },
      flavour: { type: 'string', default: 'plain' },
    },
  });
  const count = Number(values.machines);
  if (!Number.isInteger(count) || count < 1 || count > 5000) throw new Error('--machines must be an integer from 1 to 5000');
  const sim = await startMachineSim({
    serviceUrl: values.service!,
    redfish: { machines: count, defaults: { mockup: values.mockup as MockupName, flavour: values.flavour as FlavourName } },
    onPxe: (e) => console.log(JSON.stringify({ pxe: e, at: new Date().toISOString() })),
  });
  console.log(JSON.stringify({ simulator: sim.redfish.url, service: values.service, machines: count }));
  for (const m of sim.machines) {
    console.log(JSON.stringify({ id: m.id, redfish: `${m.bmc.url}/redfish/v1`, username: m.bmc.username, password: m.bmc.password, macs: m.macs, uuid: m.uuid }));
  }
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    void sim.stop().then(() => {
      console.log(JSON.stringify({ stopped: true, totals: sim.totals() }));
      process.exit(0);
    });
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
