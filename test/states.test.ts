import fs from 'node:fs';
import { fromRoot } from '../src/paths';
import {
  FAILABLE, POWER_REFUSED, PROVISION_STATES, RECOVER_TO, STABLE_POINT_RUNS, STUCK_RESUMES, VERBS, WAITS, WORKFLOW_KINDS, WORKFLOW_MOVES, clearedFailure, decideMove, decidePower,
  runKindOf,
  decideWorkflowMove, VERB_RUNS, WORKFLOW_CHAINS, type ProvisionState, type Verb, type WorkflowKind,
} from '../src/modules/metal/states';
import { provisionStatesDoc } from '../src/modules/metal/print-diagram';
import { bulkBatchVerbs, isDestructive, verbSteps } from '../src/modules/metal/step-facts';
import { WORKFLOWS } from '../jobs/workflows';

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
  });

  /**
   * Issue 21 item 20: the step facts are the workflows' own (jobs/workflows), never a copy. For each
   * verb, the steps of the runs it starts (and what they chain to) are read here straight from the
   * definitions; the docs list exactly them, and bulk's batch rule is "any of them destructive".
   */
  it('the docs and bulk\'s quorum rule read the step facts from the workflow definitions', () => {
    const doc = provisionStatesDoc();
    for (const verb of Object.keys(VERBS) as Verb[]) {
      if (verb === 'recover') continue;
      const kinds: WorkflowKind[] = [];
      for (let k = VERB_RUNS[verb] as WorkflowKind | null | undefined; k; k = WORKFLOW_CHAINS[k]) kinds.push(k);
      const defined = kinds.flatMap((k) => WORKFLOWS[k]!.steps.map((s) => [s.name, s.destructive === true] as const));
      expect([verb, verbSteps(verb).map((s) => [s.name, s.destructive])]).toEqual([verb, defined]);
      const destructive = defined.some(([, d]) => d);
      expect([verb, isDestructive(verb)]).toEqual([verb, destructive]);
      // The doc's row: every step by its workflow name, destructive ones in bold, and bulk's rule.
      const row = doc.slice(doc.indexOf('## Verbs and their workflow steps')).split('\n').find((l) => l.startsWith(`| \`${verb}\` |`));
      expect(row).toBeDefined();
      expect(row).toContain(defined.map(([name, d]) => (d ? `**${name}**` : name)).join(', ') || '—');
      expect(row!.endsWith(!VERBS[verb].bulk ? '| not in bulk |' : destructive ? '| a quorum batch (approver keys: waits for the quorum) |' : '| runs at once, no batch |')).toBe(true);
    }
    // What the hand copy in states.ts had wrong: inspect boots a ramdisk (and chains commissioning's
    // wipe), provide powers off; undeploy's steps are the release workflow's.
    expect(verbSteps('inspect')[0]).toMatchObject({ name: 'boot-inspection-ramdisk', destructive: true });
    expect(verbSteps('provide').find((s) => s.name === 'power-off')).toMatchObject({ destructive: true });
    expect(verbSteps('undeploy').map((s) => s.name)).toEqual(['boot-wipe-ramdisk', 'wipe-disks', 'power-off']);
    // So every bulk verb records a quorum batch (bulk.ts asks isDestructive).
    expect(bulkBatchVerbs().sort()).toEqual(['inspect', 'manage', 'provide', 'rescue', 'retire', 'undeploy']);
    expect(fs.readFileSync(fromRoot('docs', 'provision-states.md'), 'utf8')).toBe(doc);
  });

  it('docs/provision-states.md is generated from the table (run `npm run docs:states`)', () => {
    expect(fs.readFileSync(fromRoot('docs', 'provision-states.md'), 'utf8')).toBe(provisionStatesDoc());
  });
});

/**
 * The workflows' own moves, from the seed's sentences: "then chain to inspecting", "then
 * commissioning", "then ready", "on success deployed", releasing "ready only with an attested wipe
 * result for every disk ... otherwise failed with UNVERIFIED_WIPE", unrescue "stays in rescue until
 * it succeeds, then deployed; failure goes to failed, and recover returns it to deployed",
 * retiring "then retired".
 */
describe('the workflow moves', () => {
  const SUCCESS: [WorkflowKind, ProvisionState, ProvisionState | null][] = [
    ['metal-adopt', 'adopting', 'adopted'],
    ['metal-enroll', 'enrolling', 'inspecting'],
    ['metal-inspect', 'inspecting', 'commissioning'],
    ['metal-commission', 'commissioning', 'ready'],
    ['metal-deploy', 'deploying', 'deployed'],
    ['metal-install', 'deploying', 'deployed'],
    ['metal-release', 'releasing', 'ready'],
    ['metal-rescue', 'rescue', null],
    ['metal-unrescue', 'rescue', 'deployed'],
    ['metal-retire', 'retiring', 'retired'],
  ];
  it('every workflow kind is in the table', () => {
    expect(SUCCESS.map(([k]) => k).sort()).toEqual(Object.keys(WORKFLOW_KINDS).sort());
  });
  it.each(SUCCESS)('%s in %s succeeds to %s', (kind, state, to) => {
    expect(decideWorkflowMove(kind, state, { kind: 'succeeded', wipeAttested: true })).toEqual({ action: 'move', to, event: to ? `node.provision.${to}` : null });
  });
  it('the diagram\'s WORKFLOW_MOVES are the kinds\' successes', () => {
    // metal-deploy and metal-install are two ways of one move.
    const fromKinds = [...new Set(SUCCESS.filter(([, , to]) => to !== null).map(([, from, to]) => `${from}->${to}`))].sort();
    expect(WORKFLOW_MOVES.map((m) => `${m.from}->${m.to}`).sort()).toEqual(fromKinds);
  });
  it.each(SUCCESS.flatMap(([kind, state]) => PROVISION_STATES.filter((s) => s !== state).map((other) => [kind, other] as const)))(
    '%s is refused for a node in %s (a stale run never moves a node)', (kind, other) => {
      expect(decideWorkflowMove(kind, other, { kind: 'succeeded', wipeAttested: true }).action).toBe('refuse');
    });
  it.each([['quick', false, 'fail'], ['secure-erase', false, 'fail'], ['crypto-erase', false, 'fail'], [null, false, 'fail'], ['none', false, 'move'], ['quick', true, 'move']] as const)(
    'releasing with wipe %s, attested %s: %s', (wipe, attested, action) => {
      const decision = decideWorkflowMove('metal-release', 'releasing', { kind: 'succeeded', wipeAttested: attested }, { wipe });
      expect(decision.action).toBe(action);
      if (decision.action === 'fail') expect(decision).toMatchObject({ code: 'UNVERIFIED_WIPE', failedFrom: 'releasing', to: 'failed' });
    });
  it.each(SUCCESS)('%s failing in %s lands in failed with failedFrom, and recover has a stable point', (kind, state) => {
    const decision = decideWorkflowMove(kind, state, { kind: 'failed', code: 'BMC_TIMEOUT', message: 'no answer' });
    expect(decision).toEqual({ action: 'fail', to: 'failed', failedFrom: state, code: 'BMC_TIMEOUT', message: 'no answer', event: 'node.provision.failed' });
    if (state !== 'adopting') expect(RECOVER_TO[state]).toBeDefined();
    expect(FAILABLE).toContain(state);
  });
  it('unrescue failing goes to failed, and recover returns the node to deployed', () => {
    const decision = decideWorkflowMove('metal-unrescue', 'rescue', { kind: 'failed', code: 'UNRESCUE_FAILED', message: 'x' });
    expect(decision.action === 'fail' && decideMove('recover', 'failed', decision.failedFrom)).toEqual({ legal: true, to: 'deployed', event: 'node.provision.deployed' });
  });
  it.each(SUCCESS.map(([k, s]) => [k, s] as const))('%s past its wait deadline fails with CALLBACK_TIMEOUT naming what it waited for', (kind, state) => {
    const decision = decideWorkflowMove(kind, state, { kind: 'deadline-passed' });
    expect(decision).toMatchObject({ action: 'fail', code: 'CALLBACK_TIMEOUT', failedFrom: state });
    const wait = WAITS[kind];
    if (wait && decision.action === 'fail') expect(decision.message).toContain(wait.for);
  });
  it.each(SUCCESS.map(([k, s]) => [k, s] as const))('%s in %s whose worker died resumes up to STUCK_RESUMES times, then fails WORKER_LOST', (kind, state) => {
    for (let resumes = 0; resumes < STUCK_RESUMES; resumes++) {
      expect(decideWorkflowMove(kind, state, { kind: 'worker-lost', resumes })).toEqual({ action: 'resume' });
    }
    expect(decideWorkflowMove(kind, state, { kind: 'worker-lost', resumes: STUCK_RESUMES })).toMatchObject({ action: 'fail', code: 'WORKER_LOST', failedFrom: state });
  });
  it('every waiting workflow waits for something, with a deadline', () => {
    for (const [kind, wait] of Object.entries(WAITS)) {
      expect(Object.keys(WORKFLOW_KINDS)).toContain(kind);
      expect(wait!.for.length).toBeGreaterThan(10);
      expect(wait!.deadlineSeconds).toBeGreaterThan(0);
    }
  });
});

/** runs.md's kinds, as the seed's verbs read: the run each verb starts. */
const RUN_OF_VERB: Record<Exclude<Verb, 'recover'>, WorkflowKind | null> = {
  enroll: 'metal-enroll', manage: 'metal-enroll', inspect: 'metal-inspect', provide: 'metal-commission', deploy: 'metal-deploy',
  undeploy: 'metal-release', rescue: 'metal-rescue', unrescue: 'metal-unrescue', retire: 'metal-retire', abort: null,
};

describe('the run each verb starts (VERB_RUNS)', () => {
  it.each(Object.entries(RUN_OF_VERB) as [Exclude<Verb, 'recover'>, WorkflowKind | null][])('%s starts %s', (verb, kind) => {
    const rule = VERBS[verb];
    const to = (rule.to === 'unchanged' ? rule.from[0] : rule.to) as ProvisionState;
    expect(runKindOf(verb, to)).toBe(kind);
    // The run works in the state the verb leaves the node in (unrescue: still rescue).
    if (kind) expect(WORKFLOW_KINDS[kind].state).toBe(to);
  });
  it.each(Object.entries(RECOVER_TO) as [ProvisionState, ProvisionState][])('recover after %s (to %s) starts the stable point\'s run, whose workflow runs there', (failedFrom, to) => {
    const kind = runKindOf('recover', to);
    if (to === 'deployed') expect(kind).toBeNull();
    else expect(WORKFLOW_KINDS[kind!].state).toBe(to);
  });
  it('recover names a run only for the stable points', () => {
    expect(Object.keys(STABLE_POINT_RUNS).sort()).toEqual([...new Set(Object.values(RECOVER_TO))].filter((s) => s !== 'deployed').sort());
  });
});
