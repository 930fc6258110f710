/**
 * The provision state machine, as data: every state named and described once, then every verb
 * with its legal sources, its target and the event it publishes, then the moves the workflows make
 * on their own. Verbs, bulk, recover, the docs diagram and the tests all read this table; nothing
 * else says which move is legal. Source: the metal seed (shared/seeds/000_*.txt). What each verb's
 * workflows do (their steps, which are destructive) is the workflows' own word: step-facts.ts reads
 * it from jobs/workflows.
 */
export const PROVISION_STATES = [
  'adopting',
  'adopted',
  'enrolling',
  'inspecting',
  'ready',
  'commissioning',
  'deploying',
  'deployed',
  'releasing',
  'rescue',
  'failed',
  'retiring',
  'retired',
] as const;
export type ProvisionState = (typeof PROVISION_STATES)[number];

export const STATE_DOCS: Record<ProvisionState, string> = {
  adopting: 'an already-running machine is being taken under management without touching its OS',
  adopted: 'taken under management; its OS was left as it was',
  enrolling: 'the reconciler verifies BMC access and inspects the machine out of band',
  inspecting: 'the machine boots the ramdisk and reports its inventory',
  ready: 'verified, inspected and commissioned: available to deploy',
  commissioning: 'DCGM diagnostics, a quick wipe and a power-off',
  deploying: 'a workflow of the recorded deploy profile version runs',
  deployed: 'the profile\'s OS runs; the node has the profile\'s role',
  releasing: 'disks are wiped with the chosen mode and the machine powered off',
  rescue: 'the rescue ramdisk runs, for repairs from outside the installed OS',
  failed: 'a workflow failed or was aborted; failedFrom says where, maintenance is on',
  retiring: 'crypto-erase (bcd pools), power-off and identity revocation',
  retired: 'terminal',
};

/**
 * power, from every state: null where it is accepted, else why it is refused (INVALID_STATE). The
 * seed names the four workflow states; retiring's workflow powers the machine off itself, and
 * retired is terminal, so a power command there would fight or outlive the node's management.
 */
export const POWER_REFUSED: Record<ProvisionState, string | null> = {
  adopting: null,
  adopted: null,
  enrolling: null,
  inspecting: 'its workflow controls its power',
  ready: null,
  commissioning: 'its workflow controls its power',
  deploying: 'its workflow controls its power',
  deployed: null,
  releasing: 'its workflow controls its power',
  rescue: null,
  failed: null,
  retiring: 'its retire workflow powers it off',
  retired: 'retired is terminal',
};

export interface VerbRule {
  /** Legal source states. Empty for enroll, which creates the node. */
  from: readonly ProvisionState[];
  /** The state the verb moves the node to; for recover it depends on failedFrom (see RECOVER_TO). */
  to: ProvisionState | 'stable-point' | 'unchanged';
  /** The event the verb publishes. For recover: node.provision.<stable point>. */
  event: string;
  /** Whether `bulk` may run this verb. */
  bulk: boolean;
  /** Whether the move clears failedFrom and lastError (a node leaving failed carries no stale failure). */
  clearsFailure?: boolean;
}

export const VERBS = {
  enroll: {
    from: [],
    to: 'enrolling',
    event: 'node.enrolled',
    bulk: false,
  },
  manage: {
    from: ['ready'],
    to: 'enrolling',
    event: 'node.provision.enrolling',
    bulk: true,
  },
  inspect: {
    from: ['ready'],
    to: 'inspecting',
    event: 'node.provision.inspecting',
    bulk: true,
  },
  provide: {
    from: ['ready'],
    to: 'commissioning',
    event: 'node.provision.commissioning',
    bulk: true,
  },
  deploy: {
    from: ['ready'],
    to: 'deploying',
    event: 'node.provision.deploying',
    bulk: false,
  },
  undeploy: {
    from: ['deployed', 'rescue'],
    to: 'releasing',
    event: 'node.provision.releasing',
    bulk: true,
  },
  rescue: {
    from: ['deployed'],
    to: 'rescue',
    event: 'node.provision.rescue',
    bulk: true,
  },
  unrescue: {
    from: ['rescue'],
    to: 'unchanged',
    event: 'node.provision.unrescuing',
    bulk: false,
  },
  abort: {
    from: ['enrolling', 'inspecting', 'commissioning', 'deploying', 'releasing'],
    to: 'failed',
    event: 'node.provision.failed',
    bulk: false,
  },
  recover: {
    from: ['failed'],
    to: 'stable-point',
    event: 'node.provision.<stable point>',
    bulk: false,
    clearsFailure: true,
  },
  retire: {
    from: ['adopting', 'adopted', 'enrolling', 'ready', 'failed'],
    to: 'retiring',
    event: 'node.provision.retiring',
    bulk: true,
    // Not in the seed's words: a node retired out of failed would otherwise keep the failure it
    // left behind, and a later failure of its retire workflow would look like the old one.
    clearsFailure: true,
  },
} as const satisfies Record<string, VerbRule>;
export type Verb = keyof typeof VERBS;

/** recover: the last stable point for the state a node failed in. */
export const RECOVER_TO: Partial<Record<ProvisionState, ProvisionState>> = {
  enrolling: 'enrolling',
  inspecting: 'enrolling',
  commissioning: 'enrolling',
  deploying: 'releasing',
  releasing: 'releasing',
  rescue: 'deployed',
  retiring: 'retiring',
};

/** Moves the workflows make on their own (success), for the diagram and the reconciler. */
export const WORKFLOW_MOVES: readonly { from: ProvisionState; to: ProvisionState; when: string }[] = [
  { from: 'adopting', to: 'adopted', when: 'adoption verified' },
  { from: 'enrolling', to: 'inspecting', when: 'BMC verified' },
  { from: 'inspecting', to: 'commissioning', when: 'inventory reported' },
  { from: 'commissioning', to: 'ready', when: 'diagnostics and wipe passed' },
  { from: 'deploying', to: 'deployed', when: 'profile workflow succeeded' },
  { from: 'releasing', to: 'ready', when: 'wipe attested (UNVERIFIED_WIPE fails it)' },
  { from: 'rescue', to: 'deployed', when: 'unrescue workflow succeeded' },
  { from: 'retiring', to: 'retired', when: 'erased, off, identity revoked' },
];

/** States a running workflow can fail out of (to failed, with failedFrom). */
export const FAILABLE: readonly ProvisionState[] = ['adopting', 'enrolling', 'inspecting', 'commissioning', 'deploying', 'releasing', 'rescue', 'retiring'];

export type Decision =
  | { legal: true; to: ProvisionState | null; event: string }
  | { legal: false; current: ProvisionState; legalFrom: readonly ProvisionState[] };

/** Is `verb` legal for a node in `state` (with `failedFrom` when failed)? The one check every verb makes. */
export function decideMove(verb: Exclude<Verb, 'enroll'>, state: ProvisionState, failedFrom: ProvisionState | null = null): Decision {
  const rule: VerbRule = VERBS[verb];
  if (!rule.from.includes(state)) return { legal: false, current: state, legalFrom: rule.from };
  if (rule.to === 'stable-point') {
    const to = failedFrom ? RECOVER_TO[failedFrom] : undefined;
    if (!to) return { legal: false, current: state, legalFrom: rule.from };
    return { legal: true, to, event: `node.provision.${to}` };
  }
  return { legal: true, to: rule.to === 'unchanged' ? null : rule.to, event: rule.event };
}

/**
 * The workflows, one per kind of workflow run: the state it runs in and where a success takes the
 * node. The engine asks {@link decideWorkflowMove}; WORKFLOW_MOVES above is the same table as the
 * diagram reads it (a test keeps the two equal). metal-rescue's success boots the ramdisk and leaves
 * the node in rescue; metal-unrescue's takes it back to deployed.
 */
export const WORKFLOW_KINDS = {
  'metal-adopt': { state: 'adopting', onSuccess: 'adopted' },
  'metal-enroll': { state: 'enrolling', onSuccess: 'inspecting' },
  'metal-inspect': { state: 'inspecting', onSuccess: 'commissioning' },
  'metal-commission': { state: 'commissioning', onSuccess: 'ready' },
  'metal-deploy': { state: 'deploying', onSuccess: 'deployed' },
  // The control-node API's provision: a deploy whose installer is a per-job ISO booted over virtual media.
  'metal-install': { state: 'deploying', onSuccess: 'deployed' },
  'metal-release': { state: 'releasing', onSuccess: 'ready' },
  'metal-rescue': { state: 'rescue', onSuccess: null },
  'metal-unrescue': { state: 'rescue', onSuccess: 'deployed' },
  'metal-retire': { state: 'retiring', onSuccess: 'retired' },
} as const satisfies Record<string, { state: ProvisionState; onSuccess: ProvisionState | null }>;
export type WorkflowKind = keyof typeof WORKFLOW_KINDS;

/**
 * The workflow run each verb starts (runs.md): the verb's intent is persisted as that run, and its
 * job names only the run. abort starts none (it marks the active run aborting); recover starts the
 * run of the stable point it moves to ({@link STABLE_POINT_RUNS}).
 */
export const VERB_RUNS: Record<Verb, WorkflowKind | 'stable-point' | null> = {
  enroll: 'metal-enroll',
  // Re-verification: the enroll workflow, which chains re-inspection and re-commissioning.
  manage: 'metal-enroll',
  inspect: 'metal-inspect',
  provide: 'metal-commission',
  deploy: 'metal-deploy',
  undeploy: 'metal-release',
  rescue: 'metal-rescue',
  unrescue: 'metal-unrescue',
  abort: null,
  recover: 'stable-point',
  retire: 'metal-retire',
};

/**
 * recover: the run of each stable point. deployed (after rescue) has none: the machine runs its
 * installed OS again, nothing is left to do.
 */
export const STABLE_POINT_RUNS: Partial<Record<ProvisionState, WorkflowKind>> = {
  enrolling: 'metal-enroll',
  releasing: 'metal-release',
  retiring: 'metal-retire',
};

/** The run `verb` starts when it moves a node to `to` (null: it starts none). */
export function runKindOf(verb: Verb, to: ProvisionState): WorkflowKind | null {
  const kind = VERB_RUNS[verb];
  return kind === 'stable-point' ? (STABLE_POINT_RUNS[to] ?? null) : kind;
}

/**
 * Where a workflow waits for something outside the service, and how long at most: past the
 * deadline the node fails with CALLBACK_TIMEOUT (the ramdisk, the installer or the operator never
 * answered). A worker dying during a wait changes nothing: the wait is a row, not a process.
 */
export const WAITS: Partial<Record<WorkflowKind, { for: string; deadlineSeconds: number }>> = {
  // A machine enrolled by UUID only waits for discovery's PXE sighting and an operator's confirmMac.
  'metal-enroll': { for: 'its MAC address to be confirmed (confirmMac), for a machine enrolled by UUID only', deadlineSeconds: 24 * 3600 },
  'metal-inspect': { for: 'the inspection ramdisk to report its inventory', deadlineSeconds: 30 * 60 },
  // DCGM's long diagnostic (level 3) runs for well over an hour on an 8-GPU machine.
  'metal-commission': { for: 'the ramdisk to report DCGM diagnostics and the quick wipe', deadlineSeconds: 4 * 3600 },
  'metal-deploy': { for: "the deploy profile's installer to report its steps", deadlineSeconds: 2 * 3600 },
  // The ISO's installer reports steps as it goes; its Installing OS step fails as stuck sooner
  // (CONTROLNODE_INSTALL_STUCK_S after the last report).
  'metal-install': { for: 'the installer on the ISO to report its steps, its completion and the first boot', deadlineSeconds: 4 * 3600 },
  // A secure erase of large spinning disks takes hours.
  'metal-release': { for: 'the ramdisk to report an attested wipe of every disk', deadlineSeconds: 12 * 3600 },
  'metal-rescue': { for: 'the rescue ramdisk to come up and call back', deadlineSeconds: 30 * 60 },
  'metal-unrescue': { for: 'the installed OS to boot (metal-unrescue)', deadlineSeconds: 30 * 60 },
  'metal-retire': { for: 'the crypto-erase report (bcd pools)', deadlineSeconds: 2 * 3600 },
};

/**
 * How many times a run whose worker died mid-step is taken up again before it fails with
 * WORKER_LOST. Every step is idempotent and a destructive one carries an idempotency key recorded
 * when it started, so taking a run up again never sends a destructive command twice.
 */
export const STUCK_RESUMES = 3;

export type WorkflowOutcome =
  | { kind: 'succeeded'; /** releasing: whether every disk of the inventory has an attested wipe result. */ wipeAttested?: boolean }
  | { kind: 'failed'; code: string; message: string }
  /** The external callback of a wait (WAITS) did not come before its deadline. */
  | { kind: 'deadline-passed' }
  /** The run's worker died mid-step (its lease expired); resumes counts earlier take-ups. */
  | { kind: 'worker-lost'; resumes: number };

export type WorkflowDecision =
  | { action: 'move'; to: ProvisionState | null; event: string | null }
  | { action: 'fail'; to: 'failed'; failedFrom: ProvisionState; code: string; message: string; event: 'node.provision.failed' }
  | { action: 'resume' }
  | { action: 'refuse'; why: string };

/**
 * What a workflow run's outcome does to its node: the executable rule the engine applies, as
 * decideMove is for the verbs. A node in `state` that is not the run's state is refused (the run is
 * stale: an abort or another verb moved the node), so a late worker never moves a node back.
 * A failure always lands in failed with failedFrom (recover's stable points read it).
 */
export function decideWorkflowMove(kind: WorkflowKind, state: ProvisionState, outcome: WorkflowOutcome,
  opts: { wipe?: string | null } = {}): WorkflowDecision {
  const workflow = WORKFLOW_KINDS[kind];
  if (state !== workflow.state) return { action: 'refuse', why: `${kind} runs in ${workflow.state}; the node is ${state}` };
  const fail = (code: string, message: string): WorkflowDecision =>
    ({ action: 'fail', to: 'failed', failedFrom: state, code, message, event: 'node.provision.failed' });
  switch (outcome.kind) {
    case 'succeeded': {
      if (kind === 'metal-release' && (opts.wipe ?? 'quick') !== 'none' && !outcome.wipeAttested) {
        return fail('UNVERIFIED_WIPE', 'the wipe finished without an attested result for every disk');
      }
      const to = workflow.onSuccess;
      return { action: 'move', to, event: to ? `node.provision.${to}` : null };
    }
    case 'failed':
      return fail(outcome.code, outcome.message);
    case 'deadline-passed': {
      const wait = WAITS[kind];
      return fail('CALLBACK_TIMEOUT', wait ? `gave up waiting for ${wait.for} after ${wait.deadlineSeconds} s` : 'a wait passed its deadline');
    }
    case 'worker-lost':
      return outcome.resumes < STUCK_RESUMES
        ? { action: 'resume' }
        : fail('WORKER_LOST', `the worker running ${kind} died ${outcome.resumes + 1} times; the run was given up`);
  }
}

/** The columns a verb's move clears on the node, as its single and bulk forms both write them. */
export function clearedFailure(verb: Verb): { failedFrom: null; lastErrorCode: null; lastErrorMessage: null } | Record<string, never> {
  const rule: VerbRule = VERBS[verb];
  return rule.clearsFailure ? { failedFrom: null, lastErrorCode: null, lastErrorMessage: null } : {};
}

/** power on a node in `state`: legal, or refused with why. */
export function decidePower(state: ProvisionState): { legal: true } | { legal: false; why: string } {
  const why = POWER_REFUSED[state];
  return why === null ? { legal: true } : { legal: false, why };
}

/** The Mermaid state diagram of this table (docs/provision-states.md is generated from it). */
export function mermaidDiagram(): string {
  const lines = ['stateDiagram-v2', '    [*] --> enrolling: enroll'];
  for (const [verb, rule] of Object.entries(VERBS) as [Verb, VerbRule][]) {
    if (verb === 'enroll' || verb === 'recover' || rule.to === 'unchanged') continue;
    for (const from of rule.from) lines.push(`    ${from} --> ${rule.to}: ${verb}`);
  }
  for (const [from, to] of Object.entries(RECOVER_TO)) lines.push(`    failed --> ${to}: recover (failed from ${from})`);
  for (const move of WORKFLOW_MOVES) lines.push(`    ${move.from} --> ${move.to}: ${move.when}`);
  for (const from of FAILABLE) lines.push(`    ${from} --> failed: workflow failed`);
  lines.push('    retired --> [*]');
  return lines.join('\n') + '\n';
}

/**
 * The run a workflow's success starts for the state it moves the node to (runs.md): enrolling
 * chains re-inspection, inspecting chains commissioning. Every other success lands in a state that
 * has no workflow of its own (ready, deployed, retired) or stays put (rescue).
 */
export const WORKFLOW_CHAINS: Partial<Record<WorkflowKind, WorkflowKind>> = {
  'metal-enroll': 'metal-inspect',
  'metal-inspect': 'metal-commission',
};

/** Run statuses in which a run still owns its node (at most one per node). */
export const ACTIVE_RUN_STATUSES = ['queued', 'running', 'waiting', 'aborting'] as const;
export const isWorkflowKind = (kind: string): kind is WorkflowKind => Object.hasOwn(WORKFLOW_KINDS, kind);
