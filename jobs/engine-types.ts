import type { StepResult } from './steps';
import type { WorkflowKind } from '../src/modules/metal/states';
import type { NodeRow, NodeChange } from '../src/modules/metal/node-rows';
import type { NodeEvent, Runner } from '../src/modules/metal/node-store';
import type { PoolPolicy } from '../src/modules/tenancy/pool';
import type { CommandKind, CommandParams } from '../src/modules/sites/commands';
import type { BootPurpose, ReportKind, ReportRow } from '../src/modules/boot/entries';

/**
 * The shapes a workflow definition (jobs/workflows/*) is written against: a workflow is data (its
 * steps, in order, each with a human title, whether it is destructive, its deadline, its retry
 * policy and an optional cleanup), and each step's body is a re-entrant function of a StepContext.
 * A body runs again every time its run is woken until it returns something other than "wait";
 * what it did before is found by idempotency key (its commands) or in its memo (its boot entry),
 * never by the body remembering it in memory.
 */

/** The intent a run carries out (runs.md): the engine reads its inputs only from here and from the node row. */
export interface RunParams {
  verb?: string;
  reason?: string;
  wipe?: string;
  profileId?: string;
  profileVersion?: number;
  batchId?: string;
  requestId?: string;
  chainedFrom?: string;
  /**
   * The control-node job a chain of runs belongs to (its first run's id): provision of a BMC no
   * node had enrolls it, and the job is that enrollment's chain plus the install after it.
   */
  jobId?: string;
  /** A run to start when this chain reaches ready (provision's install after the enrollment), carried along the chain. */
  then?: { kind: WorkflowKind; params: Record<string, unknown> };
}

export interface RunInfo {
  id: string;
  kind: WorkflowKind;
  params: RunParams;
  batchId: string | null;
}

export interface StepInfo {
  idx: number;
  name: string;
  title: string;
  /** 1-based; a retry after a recorded failure is the next attempt (and a new idempotency key). */
  attempt: number;
  /** `<runId>:<idx>:<attempt>`: stable across a crash resume of the same attempt. */
  key: string;
  startedAt: Date;
  /** Past it, a step still waiting fails the run with CALLBACK_TIMEOUT. */
  deadline: Date;
}

/** One command of StepContext.commands: its kind and parameters. */
export type CommandCall = { [K in CommandKind]: { kind: K; params: CommandParams[K] } }[CommandKind];

export interface StepContext {
  readonly run: RunInfo;
  /** The node as it is now (locked for the step's transaction); updateNode replaces it. */
  readonly node: NodeRow;
  readonly pool: { id: string; policy: PoolPolicy };
  readonly step: StepInfo;
  /** The database's clock at the start of the step's transaction. */
  readonly now: Date;
  /** The step's transaction: everything a body writes commits with the step's result or not at all. */
  readonly db: Runner;
  /**
   * Queues a command for the node's site agent (key `<step key>/<n>`, n = call order in the
   * step) or finds the one already queued. Resolves to the command's value once it succeeded;
   * a command not finished yet suspends the step until its expiry (its result wakes the run
   * earlier); a failed or expired one fails the step with the command's code.
   */
  command<K extends CommandKind>(kind: K, params: CommandParams[K], opts?: { ttlMs?: number }): Promise<unknown>;
  /**
   * Several commands that do not depend on each other, queued together (keys in list order, as
   * that many command() calls would have them) so one agent can run them at once and the run is
   * woken once, when the last of them has a result (recordResult). Resolves to their values in
   * order once all succeeded; suspends while any has no result; a failed one fails the step.
   */
  commands(list: readonly CommandCall[]): Promise<unknown[]>;
  /** The run's boot entry for this step attempt: issued once, then found again (NO_CONFIRMED_MAC without a MAC). */
  bootEntry(purpose: BootPurpose, params: Record<string, unknown>): Promise<string[]>;
  /** The run's ramdisk reports of one kind, oldest first. */
  reports(kind: ReportKind): Promise<ReportRow[]>;
  /** "Wait for `what` until the step's deadline" (then CALLBACK_TIMEOUT). */
  waitFor(what: string): StepResult;
  /** Changes the node through the node store (one statement with its events). */
  updateNode(data: NodeChange, events?: NodeEvent[]): Promise<NodeRow>;
  /** A line for the step's timeline message (e.g. a driver's fallback note). */
  note(text: string): void;
  /** The step's own memo, persisted with its result for the next wake-up of the same attempt. */
  readonly memo: Record<string, unknown>;
}

export interface StepDef {
  /** Machine name (erase-devices). */
  name: string;
  /** What an operator reads in the timeline ("Securely erasing disks"); may depend on the run's params. */
  title: string | ((run: RunInfo) => string);
  /** Sends a command that must never run twice (informational for the timeline; the keys enforce it). */
  destructive?: boolean;
  /** How long the step may wait for a callback; default WAITS[kind] (states.ts). */
  deadlineSeconds?: number;
  /** Attempts in all for retryable failures (default 3), with retryDelayMs backoff between them. */
  retry?: { attempts: number };
  run(ctx: StepContext): Promise<StepResult>;
  /** Run on abort or failure when this step had started, newest first. */
  cleanup?: { name: string; title: string; run(ctx: StepContext): Promise<StepResult> };
}

export interface FinishContext {
  readonly run: RunInfo;
  readonly node: NodeRow;
  readonly pool: { id: string; policy: PoolPolicy };
  readonly db: Runner;
  reports(kind: ReportKind): Promise<ReportRow[]>;
}

export interface WorkflowDef {
  kind: WorkflowKind;
  steps: readonly StepDef[];
  /** On success, before the state move: releasing's attestation, deploy's role. */
  finish?(ctx: FinishContext): Promise<{ wipeAttested?: boolean; data?: NodeChange }>;
}

/** Thrown by a StepContext call that cannot go on yet or failed: the engine turns it into the step's result. */
export class StepInterrupt extends Error {
  readonly result!: StepResult;
  constructor(result: StepResult) {
    // No stack trace: it is control flow (every wait throws one), and capturing the stack was a
    // visible share of the engine's CPU in the lifecycle bench.
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(result.kind === 'failed' ? `${result.code}: ${result.message}` : `step ${result.kind}`);
    Error.stackTraceLimit = limit;
    this.result = result;
    this.name = 'StepInterrupt';
  }
}
