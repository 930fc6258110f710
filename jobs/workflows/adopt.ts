import type { WorkflowDef } from '../engine-types';
import { enrollWorkflow } from './enroll';

/**
 * adopting (seed: "an already-running machine is being taken under management without touching
 * its OS"): enroll's BMC verification and out-of-band inventory, and nothing that changes the
 * machine (no boot override, no power action); then adopted.
 */
export const adoptWorkflow: WorkflowDef = {
  kind: 'metal-adopt',
  steps: enrollWorkflow.steps.filter((s) => s.name === 'verify-bmc' || s.name === 'inspect-out-of-band'),
};
