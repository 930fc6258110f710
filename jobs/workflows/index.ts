import type { WorkflowDef } from '../engine-types';
import type { WorkflowKind } from '../../src/modules/metal/states';
import { enrollWorkflow } from './enroll';
import { inspectWorkflow } from './inspect';
import { commissionWorkflow } from './commission';
import { releaseWorkflow } from './release';
import { retireWorkflow } from './retire';
import { rescueWorkflow, unrescueWorkflow } from './rescue';
import { deployWorkflow } from './deploy';
import { adoptWorkflow } from './adopt';
import { installWorkflow } from './install';

/** Every workflow the engine runs, by run kind (states.ts WORKFLOW_KINDS); a kind without one fails its run UNSUPPORTED. */
export const WORKFLOWS: Readonly<Partial<Record<WorkflowKind, WorkflowDef>>> = {
  'metal-adopt': adoptWorkflow,
  'metal-install': installWorkflow,
  'metal-enroll': enrollWorkflow,
  'metal-inspect': inspectWorkflow,
  'metal-commission': commissionWorkflow,
  'metal-release': releaseWorkflow,
  'metal-retire': retireWorkflow,
  'metal-rescue': rescueWorkflow,
  'metal-unrescue': unrescueWorkflow,
  'metal-deploy': deployWorkflow,
};
