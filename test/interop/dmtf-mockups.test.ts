/**
 * DMTF's public mockups (INTEROP_MOCKUPS, default ../shared/redfish-mockups), each that has a
 * ComputerSystem, served by DMTF's Redfish Mockup Server (../shared/peers): enroll through the real
 * service, the built-in agent and the real redfish driver reads the out-of-band inventory. The
 * machines are static (peers README: Reset answers 204 and PowerState never changes, PATCH is
 * merged and echoed): nothing can prove a power change or a boot there, so no power or boot step
 * may read succeeded. The node ends failed (BMC_NOT_APPLIED) or its step says it is unverified,
 * and its run waits for the machine's own evidence (a ramdisk that never calls).
 *
 * The agent's redfish driver is the real one with a 15 s read-back deadline instead of 60 s
 * (redfishDrivers' verifyDeadlineMs): a static machine never shows a change, so every power
 * step waits the whole deadline; the default would make this file take minutes.
 */
import fs from 'node:fs';
import path from 'node:path';
import { DriverRegistry } from '../../clients/bmc/registry';
import { RedfishTransport, redfishDrivers } from '../../clients/bmc/redfish';
import { isRunning } from '../helpers/service';
import { addPool, describeNode, enroll, nodeRow, runsOf, startControlPlane, timeline, until, ACTIVE_RUN, type ControlPlane } from './helpers/control-plane';
import { mockupSystemIds, startMockupServer, type MockupServer } from './helpers/mockup';
import { interopPaths } from './helpers/peers';

const { mockups } = interopPaths();
/** Every mockup of the folder that has a system, with its systems' Ids. */
const WITH_SYSTEMS = fs.readdirSync(mockups).sort()
  .filter((name) => fs.existsSync(path.join(mockups, name, 'index.json')))
  .map((name) => ({ name, systems: mockupSystemIds(path.join(mockups, name)) }))
  .filter((m) => m.systems.length > 0);

/** What the mockup says of a system: its UUID as a machine identity (null: none, or the all-zero placeholder). */
function mockupUuid(mockup: string, systemId: string): string | null {
  const doc = JSON.parse(fs.readFileSync(path.join(mockups, mockup, 'Systems', systemId, 'index.json'), 'utf8')) as { UUID?: string };
  const uuid = doc.UUID?.toLowerCase() ?? null;
  return uuid && !/^[0-]+$/.test(uuid) ? uuid : null;
}

/** A power or boot step's message that says no evidence backs it (the "sent; not verifiable on this BMC"). */
const UNVERIFIED = /not verifiable|unverified|not verified|cannot be verified|could not be verified/i;

describe('DMTF Redfish mockups, served by the DMTF Mockup Server: enroll reads the inventory; nothing proves a power or boot step', () => {
  let cp: ControlPlane;
  const transport = new RedfishTransport();
  const servers = new Map<string, MockupServer>();
  const nodes: { mockup: string; systemId: string; nodeId: string }[] = [];

  beforeAll(async () => {
    const registry = new DriverRegistry();
    for (const driver of redfishDrivers({ transport, verifyDeadlineMs: 15000, pollMs: 500 })) registry.register(driver);
    cp = await startControlPlane('dmtf', registry);
    for (const m of WITH_SYSTEMS) servers.set(m.name, await startMockupServer(path.join(mockups, m.name)));
  }, 120000);

  afterAll(async () => {
    await cp?.t.stop();
    await transport.close();
    const pids = [...servers.values()].map((s) => s.pid);
    for (const s of servers.values()) await s.stop();
    expect(pids.filter(isRunning)).toEqual([]);
  }, 60000);

  it('finds the four mockups with systems (public-bladed has four)', () => {
    expect(Object.fromEntries(WITH_SYSTEMS.map((m) => [m.name, m.systems.length]))).toEqual({
      'public-bladed': 4, 'public-localstorage': 1, 'public-rackmount1': 1, 'public-telemetry': 1,
    });
  });

  it('enroll, each system by its systemId and without MACs: the out-of-band inventory is read, and no power or boot step reads succeeded', async () => {
    for (const m of WITH_SYSTEMS) {
      // A site per mockup: rackmount1 and localstorage are the same machine (same UUID and MACs).
      const poolId = await addPool(cp, `dmtf-${m.name}`);
      for (const systemId of m.systems) {
        const nodeId = await enroll(cp, `${m.name}-${systemId}`, { address: servers.get(m.name)!.url, username: 'interop', password: 'any-password', driverOptions: { systemId } }, { poolId });
        nodes.push({ mockup: m.name, systemId, nodeId });
      }
    }
    // Settled: failed with no run left, or a run waiting for the machine itself (never for the agent).
    const settled = async (nodeId: string) => {
      const node = await nodeRow(cp, nodeId);
      const active = (await runsOf(cp, nodeId)).filter((r) => ACTIVE_RUN.includes(r.status));
      return active.length === 0 || active.every((r) => r.status === 'waiting' && r.waitingFor !== null && !r.waitingFor.startsWith('the site agent')) ? node : null;
    };
    const problems: string[] = [];
    await Promise.all(nodes.map(async ({ mockup, systemId, nodeId }) => {
      const node = (await until(`${mockup}/${systemId} to settle`, () => settled(nodeId), (n) => n !== null, 180000, () => describeNode(cp, nodeId)))!;
      const label = `${mockup}/${systemId}`;
      if (!node.inventory?.outOfBand) problems.push(`${label}: no out-of-band inventory (${node.lastError ?? node.state})`);
      else if (node.inventory.outOfBand.uuid !== mockupUuid(mockup, systemId)) problems.push(`${label}: UUID ${node.inventory.outOfBand.uuid}, the mockup's is ${mockupUuid(mockup, systemId)}`);
      if (['ready', 'deployed'].includes(node.state)) problems.push(`${label}: reached ${node.state} on a machine that never booted`);
      // Every step that sent a power or boot command: never succeeded without saying it is unverified.
      const { rows } = await cp.sql.query(`SELECT DISTINCT run_id, step_idx FROM command WHERE node_id = $1 AND kind IN ('bmc.power', 'bmc.boot-device')`, [nodeId]);
      const sent = new Set(rows.map((r) => `${r.run_id as string}/${Number(r.step_idx)}`));
      for (const run of await timeline(cp, nodeId)) {
        for (const step of run.steps) {
          if (!sent.has(`${run.id}/${step.idx}`)) continue;
          if (step.status === 'succeeded' && !UNVERIFIED.test(step.message ?? '')) problems.push(`${label}: ${run.kind} step ${step.name} succeeded: "${step.message ?? ''}"`);
        }
      }
    }));
    expect(problems).toEqual([]);
  }, 300000);
});
