import fs from 'node:fs';
import { fromRoot } from '../src/paths';
import { POWER_REFUSED, PROVISION_STATES, VERBS, clearedFailure, decideMove, decidePower, isDestructive, type ProvisionState, type Verb } from '../src/modules/metal/states';
import { provisionStatesDoc } from '../src/modules/metal/print-diagram';

/** The seed's sentences, one row per verb: legal sources, target and event, as written. */
const SEED: Record<Exclude<Verb, 'enroll' | 'recover'>, { from: ProvisionState[]; to: ProvisionState | null; event: string }> = {
  manage: { from: ['ready'], to: 'enrolling', event: 'node.provision.enrolling' },
  inspect: { from: ['ready'], to: 'inspecting', event: 'node.provision.inspecting' },
  provide: { from: ['ready'], to: 'commissioning', event: 'node.provision.commissioning' },
  deploy: { from: ['ready'], to: 'deploying', event: 'node.provision.deploying' },
  undeploy: { from: ['deployed', 'rescue'], to: 'releasing', event: 'node.provision.releasing' },
  rescue: { from: ['deployed'], to: 'rescue', event: 'node.provision.rescue' },
  unrescue: { from: ['rescue'], to: null, event: 'node.provision.unrescuing' },
  abort: { from: ['enrolling', 'inspecting', 'commissioning', 'deploying', 'releasing'], to: 'failed', event: 'node.provision.failed' },
  retire: { from: ['adopting', 'adopted', 'enrolling', 'ready', 'failed'], to: 'retiring', event: 'node.provision.retiring' },
};

/** recover: "enrolling after enrolling, inspecting or commissioning, releasing after deploying or releasing, deployed after rescue, and retiring after retiring". */
const RECOVER: [ProvisionState, ProvisionState | null][] = PROVISION_STATES.map((s) => [
  s,
  ({ enrolling: 'enrolling', inspecting: 'enrolling', commissioning: 'enrolling', deploying: 'releasing', releasing: 'releasing', rescue: 'deployed', retiring: 'retiring' } as Partial<Record<ProvisionState, ProvisionState>>)[s] ?? null,
]);

describe('the provision state table', () => {
  const rows = Object.entries(SEED).flatMap(([verb, rule]) => PROVISION_STATES.map((state) => [verb as keyof typeof SEED, state, rule] as const));
  it.each(rows)('%s from %s', (verb, state, rule) => {
    const decision = decideMove(verb, state);
    if (rule.from.includes(state)) {
      expect(decision).toEqual({ legal: true, to: rule.to, event: rule.event });
    } else {
      expect(decision).toEqual({ legal: false, current: state, legalFrom: rule.from });
    }
  });

  it.each(RECOVER)('recover of a node that failed from %s goes to %s', (failedFrom, to) => {
    const decision = decideMove('recover', 'failed', failedFrom);
    if (to) expect(decision).toEqual({ legal: true, to, event: `node.provision.${to}` });
    else expect(decision.legal).toBe(false);
  });

  it.each(PROVISION_STATES.filter((s) => s !== 'failed'))('recover from %s (not failed) is refused', (state) => {
    expect(decideMove('recover', state, 'deploying').legal).toBe(false);
  });

  it('retired is terminal and deployed cannot be retired', () => {
    for (const verb of Object.keys(SEED) as (keyof typeof SEED)[]) expect(decideMove(verb, 'retired').legal).toBe(false);
    expect(decideMove('retire', 'deployed').legal).toBe(false);
  });

  /**
   * power: "INVALID_STATE ... while it is inspecting, commissioning, deploying or releasing (a
   * workflow controls its power then)"; and, left implicit by the seed, while retiring (its
   * workflow powers the machine off) and once retired ("which is terminal").
   */
  const POWER: [ProvisionState, boolean][] = PROVISION_STATES.map((s) => [s, !['inspecting', 'commissioning', 'deploying', 'releasing', 'retiring', 'retired'].includes(s)]);
  it.each(POWER)('power from %s is legal: %s', (state, legal) => {
    const decision = decidePower(state);
    expect(decision.legal).toBe(legal);
    if (!decision.legal) expect(decision.why).toBe(POWER_REFUSED[state]);
  });

  it('recover and retire (and only they) clear failedFrom and lastError', () => {
    const clearing = (Object.keys(VERBS) as Verb[]).filter((v) => Object.keys(clearedFailure(v)).length > 0).sort();
    expect(clearing).toEqual(['recover', 'retire']);
    expect(clearedFailure('retire')).toEqual({ failedFrom: null, lastErrorCode: null, lastErrorMessage: null });
  });

  it('bulk runs exactly manage, inspect, provide, undeploy, rescue and retire', () => {
    const bulk = Object.entries(VERBS).filter(([, r]) => r.bulk).map(([v]) => v).sort();
    expect(bulk).toEqual(['inspect', 'manage', 'provide', 'rescue', 'retire', 'undeploy']);
    expect(isDestructive('undeploy')).toBe(true);
    expect(isDestructive('retire')).toBe(true);
    expect(isDestructive('inspect')).toBe(false);
  });

  it('docs/provision-states.md is generated from the table (run `npm run docs:states`)', () => {
    expect(fs.readFileSync(fromRoot('docs', 'provision-states.md'), 'utf8')).toBe(provisionStatesDoc());
  });
});
