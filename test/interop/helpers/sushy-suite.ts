/**
 * The sushy-tools part of the interop suite (issue 20), once per transport: sushy.test.ts over HTTP
 * with basic auth, sushy-tls.test.ts over HTTPS with its self-signed certificate as caCert. Two
 * files so jest runs them side by side: every power change on sushy waits 1-11 s.
 *
 * Everything real but the machine: the service (engine, REST API, boot API, built-in site agent)
 * with its default driver registry, so the agent runs the real `redfish` driver against sushy.
 * The machine is the project's machine play driven by a watcher of sushy's power state
 * (sushy-machine.ts). Nodes are enrolled without MACs, with driverOptions.systemId (sushy has
 * three systems). The pool is the fixtures' (agent bcd); nothing in its policy shortens a workflow:
 * the machine play answers DCGM and the wipes at once, so the time is sushy's.
 */
import { isRunning } from '../../helpers/service';
import { startControlPlane, describeNode, deployProfile, enroll, nodeRow, powerVerb, runCommand, runsOf, settle, timeline, until, verb, type ControlPlane } from './control-plane';
import { startImageServer } from './image-server';
import { startSushy, SUSHY_SYSTEMS, type Sushy, type SushyNode } from './sushy';
import { startSushyMachines, type SushyMachines } from './sushy-machine';

const NODES: SushyNode[] = ['node-1', 'node-2'];

export function sushySuite(tls: boolean): void {
  describe(`sushy-tools over ${tls ? 'HTTPS with its certificate as caCert' : 'HTTP with basic auth'}: the real service, built-in agent and redfish driver`, () => {
    let sushy: Sushy;
    let cp: ControlPlane;
    let machines: SushyMachines;
    let image: Awaited<ReturnType<typeof startImageServer>>;
    const ids = {} as Record<SushyNode, string>;
    let sushyPid = 0;

    const bmc = (node: SushyNode) => ({
      address: sushy.url, username: sushy.username, password: sushy.password,
      driverOptions: { systemId: SUSHY_SYSTEMS[node].uuid, ...(sushy.caCert ? { caCert: sushy.caCert } : {}) },
    });
    const describeAll = async () => (await Promise.all(NODES.filter((n) => ids[n]).map((n) => describeNode(cp, ids[n])))).join('\n');
    /** Fails with every node's runs when the states are not the ones expected. */
    const expectStates = async (states: string[], want: string) => {
      if (states.some((s) => s !== want)) throw new Error(`expected every node ${want}, got ${states.join(', ')}:\n${await describeAll()}`);
    };
    const system = async (node: SushyNode) => (await sushy.get(`/redfish/v1/Systems/${SUSHY_SYSTEMS[node].uuid}`)).body;

    beforeAll(async () => {
      sushy = await startSushy({ tls });
      sushyPid = sushy.pid;
      image = await startImageServer();
      cp = await startControlPlane(tls ? 'sushy-tls' : 'sushy');
      machines = await startSushyMachines({ sushy, serviceUrl: cp.t.url, nodes: NODES });
    }, 120000);

    afterAll(async () => {
      await machines?.stop();
      await cp?.t.stop();
      await image?.stop();
      await sushy?.stop();
      // The emulator the start script recorded is gone (stop() checks nothing else runs from its HARNESS_DIR).
      if (sushyPid) expect(isRunning(sushyPid)).toBe(false);
    }, 60000);

    it('node-1 enrolled with no MACs takes 52:54:00:aa:00:01, 52:54:00:bb:00:01 and its UUID from the BMC and reaches inspecting with no error', async () => {
      for (const node of NODES) ids[node] = await enroll(cp, `sushy-${node}`, bmc(node));
      // Out of enrolling, or stuck there waiting for confirmMac (the MACs never taken from the BMC).
      await until('node-1 out of enrolling', async () => ({ node: await nodeRow(cp, ids['node-1']), runs: await runsOf(cp, ids['node-1']) }),
        (v) => v.node.state !== 'enrolling' || v.runs.some((r) => r.kind === 'metal-enroll' && /confirmMac/.test(r.waitingFor ?? '')), 90000, () => describeNode(cp, ids['node-1']));
      const node1 = await nodeRow(cp, ids['node-1']);
      const runs = await runsOf(cp, ids['node-1']);
      expect({
        macs: node1.macs, productUuid: node1.productUuid, lastError: node1.lastError,
        enroll: runs[0]!.status, inspectionStarted: runs.some((r) => r.kind === 'metal-inspect'),
      }).toEqual({
        macs: [...SUSHY_SYSTEMS['node-1'].macs], productUuid: SUSHY_SYSTEMS['node-1'].uuid, lastError: null,
        enroll: 'succeeded', inspectionStarted: true,
      });
      // Its broken Memory link (404) is named, not fatal.
      expect(node1.inventory.outOfBand).toMatchObject({ uuid: SUSHY_SYSTEMS['node-1'].uuid, macs: [...SUSHY_SYSTEMS['node-1'].macs] });
      expect(node1.inventory.outOfBand.unreadable).toEqual(expect.arrayContaining([expect.objectContaining({ part: 'Memory' })]));
    }, 120000);

    it('node-1 and node-2 go enrolling -> inspecting -> commissioning -> ready; the machines PXE-booted the inspection and commissioning ramdisks', async () => {
      if (!ids['node-2']) throw new Error('not enrolled (the test before failed to enroll)');
      const states = await settle(cp, NODES.map((n) => ids[n]), ['enrolling', 'inspecting', 'commissioning'], 200000, () => machines.describe());
      await expectStates(states, 'ready');
      for (const node of NODES) {
        const runs = await runsOf(cp, ids[node]);
        expect(runs.map((r) => [r.kind, r.status])).toEqual([['metal-enroll', 'succeeded'], ['metal-inspect', 'succeeded'], ['metal-commission', 'succeeded']]);
        const row = await nodeRow(cp, ids[node]);
        expect(row.macs).toEqual([...SUSHY_SYSTEMS[node].macs]);
        const m = machines.machine(node);
        expect(m.boots.map((b) => b.purpose)).toEqual(['inspect', 'commission']);
        expect(row.inventory.ramdisk).toEqual(m.inventory());
        for (const run of await timeline(cp, ids[node])) for (const s of run.steps) expect([s.name, s.status]).toEqual([s.name, expect.stringMatching(/^(succeeded|skipped)$/)]);
      }
      expect(machines.errors).toEqual([]);
    }, 240000);

    it('deploy -> deployed (the machine boots its disk after the installer), undeploy with a quick wipe -> ready', async () => {
      await expectStates(await Promise.all(NODES.map(async (n) => (ids[n] ? (await nodeRow(cp, ids[n])).state : 'not enrolled'))), 'ready');
      const profile = await deployProfile(cp);
      const before = Object.fromEntries(NODES.map((n) => [n, machines.machine(n).counts()]));
      const deployedAt = Date.now();
      for (const node of NODES) expect((await verb(cp, 'deploy', { nodeId: ids[node], ...profile })).status).toBe(200);
      await expectStates(await settle(cp, NODES.map((n) => ids[n]), ['deploying'], 200000, () => machines.describe()), 'deployed');
      for (const node of NODES) {
        const m = machines.machine(node);
        expect(m.boots.at(-1)?.purpose).toBe('deploy');
        // bootInstalledOs: disk, then a cycle (on sushy ForceRestart: Off at once, On 1-11 s later),
        // which the machine sees as a power-on into its disk. A restart whose Off lasted less than
        // one poll is not seen at all (sushy-machine.ts): then the machine stayed on since the
        // deploy ramdisk's boot, and the BMC must read On with no override but the disk.
        const since = m.observations.filter((o) => o.at >= deployedAt);
        const afterRamdisk = since.slice(since.map((o) => o.booted).lastIndexOf('Pxe') + 1);
        if (afterRamdisk.length > 0) {
          expect(m.counts().diskBoots).toBeGreaterThan(before[node]!.diskBoots);
        } else {
          const sys = await system(node);
          expect([sys.PowerState, ['Hdd', 'None'].includes(sys.Boot?.BootSourceOverrideTarget)]).toEqual(['On', true]);
        }
      }
      for (const node of NODES) expect((await verb(cp, 'undeploy', { nodeId: ids[node], wipe: 'quick' })).status).toBe(200);
      await expectStates(await settle(cp, NODES.map((n) => ids[n]), ['releasing'], 200000, () => machines.describe()), 'ready');
      for (const node of NODES) {
        const m = machines.machine(node);
        expect(m.boots.at(-1)?.purpose).toBe('release');
        expect(m.counts().wipesPerformed - before[node]!.wipesPerformed).toBe(m.inventory().disks.length);
      }
    }, 420000);

    it('power on, cycle, reset and off end with the truth read back from sushy; nmi of the running machine (501 there) ends BMC_UNSUPPORTED', async () => {
      if (!ids['node-2']) throw new Error('not enrolled');
      // No run of its own may still send power commands (a failed run's cleanup).
      await settle(cp, [ids['node-2']], [], 120000, () => machines.describe());
      const seen: unknown[] = [];
      const want: unknown[] = [];
      const power = async (action: string, expected: string) => {
        const cmd = await powerVerb(cp, ids['node-2'], action);
        const truth = String((await system('node-2')).PowerState).toLowerCase();
        seen.push({ action, status: cmd.status, value: cmd.result?.value ?? `${cmd.result?.code}: ${cmd.result?.message}`, truth });
        want.push({ action, status: 'succeeded', value: expected, truth: expected });
      };
      await power('on', 'on');
      await power('cycle', 'on');
      await power('reset', 'on');
      // While it runs (an NMI of a machine that is off is refused before the BMC is asked).
      const nmi = await powerVerb(cp, ids['node-2'], 'nmi');
      await power('off', 'off');
      expect(seen).toEqual(want);
      if (nmi.status !== 'failed' || nmi.result?.code !== 'BMC_UNSUPPORTED') throw new Error(`nmi ended ${nmi.status} ${nmi.result?.code ?? ''}: ${nmi.result?.message ?? JSON.stringify(nmi.result)}`);
    }, 300000);

    it('virtual media: insert puts a loopback image in the empty Cd slot (sushy downloads it), eject empties it', async () => {
      if (!ids['node-2']) throw new Error('not enrolled');
      // One active run per node: the commands below run under a run of their own.
      await settle(cp, [ids['node-2']], [], 200000, () => machines.describe());
      const slotPath = `/redfish/v1/Systems/${SUSHY_SYSTEMS['node-2'].uuid}/VirtualMedia/Cd`;
      // sushy's empty slot: ConnectedVia "URI", Image "", Inserted false (peers README).
      expect((await sushy.get(slotPath)).body).toMatchObject({ Inserted: false, Image: '' });
      const inserted = await runCommand(cp, ids['node-2'], 'bmc.media-insert', { imageUrl: image.url });
      expect({ status: inserted.status, error: inserted.result?.ok === false ? `${inserted.result.code}: ${inserted.result.message}` : null }).toEqual({ status: 'succeeded', error: null });
      expect((await sushy.get(slotPath)).body).toMatchObject({ Inserted: true, Image: image.url });
      expect(image.gets).toContain('GET /interop.iso');
      const ejected = await runCommand(cp, ids['node-2'], 'bmc.media-eject', {});
      expect({ status: ejected.status, error: ejected.result?.ok === false ? `${ejected.result.code}: ${ejected.result.message}` : null }).toEqual({ status: 'succeeded', error: null });
      expect((await sushy.get(slotPath)).body).toMatchObject({ Inserted: false });
    }, 300000);
  });
}
