import { WORKFLOWS } from '../../../jobs/workflows';
import { STABLE_POINT_RUNS, VERB_RUNS, VERBS, WORKFLOW_CHAINS, type Verb, type WorkflowKind } from './states';

/**
 * What each verb's workflows do, read from the workflow definitions themselves (jobs/workflows:
 * their steps' names and destructive flags), never from a copy: which runs a verb starts, their
 * steps, and whether any of them sends a destructive command. bulk decides its quorum batch with
 * {@link isDestructive}, and docs/provision-states.md lists {@link verbSteps}; a test keeps both on
 * the definitions. Functions, not tables built at load: states.ts stays free of the workflows (they
 * import it), and this module may be loaded before them.
 */

export interface StepFact {
  /** The run kind the step belongs to. */
  kind: WorkflowKind;
  name: string;
  title: string;
  /** Whether the step sends a destructive command (a power change, a boot, a wipe). */
  destructive: boolean;
}

/** A run kind's steps, in order (cleanup steps aside: they run only when a run aborts or fails). */
export function workflowStepFacts(kind: WorkflowKind): StepFact[] {
  const def = WORKFLOWS[kind];
  if (!def) return [];
  // A title that depends on the run (a wipe's mode) is named by the step's machine name.
  return def.steps.map((s) => ({ kind, name: s.name, title: typeof s.title === 'string' ? s.title : s.name, destructive: s.destructive === true }));
}

/** A run and the runs its success chains to (enrolling chains re-inspection, inspecting commissioning). */
export function chainOf(kind: WorkflowKind): WorkflowKind[] {
  const kinds: WorkflowKind[] = [];
  for (let k: WorkflowKind | undefined = kind; k && !kinds.includes(k); k = WORKFLOW_CHAINS[k]) kinds.push(k);
  return kinds;
}

/**
 * The runs a verb's move starts, in order, with what they chain to. recover: the run of each of its
 * stable points (which one depends on where the node failed). abort starts none.
 */
export function verbRunKinds(verb: Verb): WorkflowKind[] {
  const run = VERB_RUNS[verb];
  if (run === null) return [];
  const roots = run === 'stable-point' ? [...new Set(Object.values(STABLE_POINT_RUNS))] : [run];
  return [...new Set(roots.flatMap(chainOf))];
}

/** Every step a verb's runs take, in order. */
export function verbSteps(verb: Verb): StepFact[] {
  return verbRunKinds(verb).flatMap(workflowStepFacts);
}

/** Whether any step of the verb's runs sends a destructive command (bulk then records a quorum batch). */
export function isDestructive(verb: Verb): boolean {
  return verbSteps(verb).some((s) => s.destructive);
}

/** The verbs bulk runs that need a quorum batch (every one whose runs send a destructive command). */
export function bulkBatchVerbs(): Verb[] {
  return (Object.keys(VERBS) as Verb[]).filter((v) => VERBS[v].bulk && isDestructive(v));
}
