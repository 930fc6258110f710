/**
 * The machine player behind sushy-tools (helpers/sushy-machine.ts) against the real emulator: a
 * restart whose Off no poll of the player caught still boots the machine. sushy's ForceRestart
 * reads Off until the first GET after its deadline (int(time) + randint(1, 11)); here that GET is
 * the test's own, made at once and again until On, as the service's read-back makes it, while the
 * player polls every 15 s: the player only ever reads On. Before it read sushy's access log, such a
 * restart booted nothing (CI, 2026-12-07: a release waited 200 s for a ramdisk that never booted).
 */
import { startSushy, SUSHY_SYSTEMS, type Sushy } from './helpers/sushy';
import { RESET_APPLIED_MS, startSushyMachines, type SushyMachines } from './helpers/sushy-machine';

describe('sushy machine player', () => {
  let sushy: Sushy;
  let machines: SushyMachines | undefined;

  beforeAll(async () => {
    sushy = await startSushy();
  }, 60000);

  afterAll(async () => {
    await machines?.stop();
    await sushy?.stop();
  }, 60000);

  it('boots at a ForceRestart of a running machine whose Off it never read (node-3, On from the start)', async () => {
    const node = 'node-3';
    const uuid = SUSHY_SYSTEMS[node].uuid;
    // No service answers: this machine's target is its disk (sushy's default Hdd), so nothing calls it.
    machines = await startSushyMachines({ sushy, serviceUrl: 'http://127.0.0.1:9', nodes: [node], pollMs: 15000 });
    const machine = machines.machine(node);
    const deadline = Date.now() + 10000;
    while (machine.observations.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(machine.observations.map((o) => [o.power, o.booted])).toEqual([['On', null]]);

    const reset = await sushy.post(`/redfish/v1/Systems/${uuid}/Actions/ComputerSystem.Reset`, { ResetType: 'ForceRestart' });
    expect(reset.status).toBe(204);
    // The read-back the service would make: Off at once, then On once the deadline passed.
    const seen: string[] = [];
    for (let i = 0; i < 200 && seen.at(-1) !== 'On'; i += 1) {
      const power = String((await sushy.get(`/redfish/v1/Systems/${uuid}`)).body.PowerState);
      if (seen.at(-1) !== power) seen.push(power);
      if (power !== 'On') await new Promise((r) => setTimeout(r, 50));
    }
    expect(seen).toEqual(['Off', 'On']);
    const onAgain = Date.now();

    // The player's next poll reads the Reset in the log and On; one sent RESET_APPLIED_MS later boots.
    while (machine.observations.length < 2 && Date.now() < onAgain + 2 * 15000 + RESET_APPLIED_MS) await new Promise((r) => setTimeout(r, 200));
    expect(machine.observations.map((o) => [o.power, o.booted, o.offMissed ?? false])).toEqual([['On', null, false], ['On', 'Hdd', true]]);
    expect(machine.counts().diskBoots).toBe(1);
    expect(machines.errors).toEqual([]);
  }, 90000);
});
