/**
 * Power over Redfish: the ComputerSystem.Reset action and the read-back that proves it.
 *
 * Power actions pick a ResetType from the BMC's AllowableValues (inline or its @Redfish.ActionInfo)
 * in the order of POWER_PLANS; a ResetType that answers 501 although listed falls to the next
 * choice, and the notes say so ("ResetType PowerCycle answered 501; used ForceOff then On").
 * Every action is read back until it shows or the call's deadline passes (BMC_NOT_APPLIED).
 */
import { BmcError, type PowerAction, type PowerState } from '../driver';
import { awaitTask, idempotencyHeader, readSystem, TaskEnded, type CallContext, type System } from './call';
import { sleep, type Doc } from './client';

/** What a ResetType must lead to. */
type ResetOutcome = 'on' | 'off' | 'restart' | 'nmi';
/** One step of a plan: the ResetTypes that do it, in preference order, and what it must lead to. */
interface ResetStep { types: string[]; expect: ResetOutcome }
const ON: ResetStep = { types: ['On', 'ForceOn'], expect: 'on' };
const FORCE_OFF: ResetStep = { types: ['ForceOff'], expect: 'off' };

/**
 * The fallback table: each action's alternatives in order; the first whose ResetTypes the BMC
 * lists (and does not answer 501 to) is used.
 *   on:               On | ForceOn, else PushPowerButton (the machine is off, so a push powers it on)
 *   off:              ForceOff
 *   graceful-off:     GracefulShutdown, else PushPowerButton
 *   reset:            ForceRestart, else PowerCycle, else ForceOff then On
 *   graceful-restart: GracefulRestart, else GracefulShutdown then On
 *   cycle:            PowerCycle, else ForceRestart, else ForceOff then On
 *   nmi:              Nmi
 * reset, cycle and graceful-restart of a machine that is off power it on (noted): there is nothing to restart.
 */
export const POWER_PLANS: Readonly<Record<PowerAction, ResetStep[][]>> = {
  on: [[ON], [{ types: ['PushPowerButton'], expect: 'on' }]],
  off: [[FORCE_OFF]],
  'graceful-off': [[{ types: ['GracefulShutdown'], expect: 'off' }], [{ types: ['PushPowerButton'], expect: 'off' }]],
  reset: [[{ types: ['ForceRestart'], expect: 'restart' }], [{ types: ['PowerCycle'], expect: 'restart' }], [FORCE_OFF, ON]],
  'graceful-restart': [[{ types: ['GracefulRestart'], expect: 'restart' }], [{ types: ['GracefulShutdown'], expect: 'off' }, ON]],
  cycle: [[{ types: ['PowerCycle'], expect: 'restart' }], [{ types: ['ForceRestart'], expect: 'restart' }], [FORCE_OFF, ON]],
  nmi: [[{ types: ['Nmi'], expect: 'nmi' }]],
};

/** The Reset action's target and the ResetTypes it allows (null: the BMC does not say). */
interface ResetAction { target: string; allowed: string[] | null }

/** A ResetType the BMC refused as such (501, or a 400 that says it is not supported): the next choice is tried. */
class ResetTypeRefused extends Error {}

/** How long a restart is watched for a power transition on a BMC with no usable LastResetTime. */
const RESTART_OBSERVE_MS = 10_000;

/** Redfish's PowerState as the driver's. */
export function powerStateOf(value: unknown): PowerState {
  switch (value) {
    case 'On': return 'on';
    case 'Off': return 'off';
    case 'PoweringOn': return 'powering-on';
    case 'PoweringOff': return 'powering-off';
    default: return 'unknown';
  }
}

/** A LastResetTime that can show a restart: a real date after 1970 (Dell reports 0000-00-00, OpenBMC the epoch: QUIRKS.md). */
function resetTimeOf(value: unknown): number | null {
  if (typeof value !== 'string') return null;
  const time = Date.parse(value);
  return Number.isFinite(time) && time > 86_400_000 ? time : null;
}

/** The system's power state, read now. */
export async function readPowerState(call: CallContext): Promise<PowerState> {
  return powerStateOf((await readSystem(call)).doc.PowerState);
}

/** BMC_UNSUPPORTED, before anything is sent, for an action that is not one of POWER_PLANS. */
export function assertPowerAction(action: PowerAction): void {
  if (!Object.hasOwn(POWER_PLANS, action)) throw new BmcError('BMC_UNSUPPORTED', `power action "${String(action)}" is not one of ${Object.keys(POWER_PLANS).join(', ')}`);
}

/** Does a power action (POWER_PLANS; assertPowerAction first) and reads its effect back; the power state it ends in. */
export async function setPower(call: CallContext, action: PowerAction): Promise<PowerState> {
  const sys = await readSystem(call);
  const now = powerStateOf(sys.doc.PowerState);
  const on = now === 'on' || now === 'powering-on';
  // An unknown state (no PowerState, or Paused) is neither: the action is sent as asked.
  const off = now === 'off' || now === 'powering-off';
  if (action === 'on' && on) {
    call.notes.push('the machine was already on: nothing sent');
    return waitPower(call, sys.path, 'on', 'none');
  }
  if ((action === 'off' || action === 'graceful-off') && off) {
    call.notes.push('the machine was already off: nothing sent');
    return waitPower(call, sys.path, 'off', 'none');
  }
  let plans = POWER_PLANS[action];
  if ((action === 'cycle' || action === 'reset' || action === 'graceful-restart') && off) {
    call.notes.push(`the machine was off: powered it on instead of ${action}`);
    plans = POWER_PLANS.on;
  }
  if (action === 'nmi' && off) throw call.client.error('BMC_ERROR', 'the machine is off: an NMI needs it running');
  // A button push toggles: without a known state it could turn the machine the wrong way.
  if (!on && !off) plans = plans.filter((plan) => !plan.some((step) => step.types.includes('PushPowerButton')));
  const reset = await resetAction(call, sys);
  return runPlans(call, sys, reset, plans);
}

/** The Reset target and its AllowableValues (inline, or from its ActionInfo); null when the BMC does not say. */
async function resetAction(call: CallContext, sys: System): Promise<ResetAction> {
  const reset = ((sys.doc.Actions ?? {}) as Doc)['#ComputerSystem.Reset'] as Doc | undefined;
  const target = reset?.target;
  if (typeof target !== 'string') throw call.client.error('BMC_UNSUPPORTED', `the system at ${call.client.origin} offers no #ComputerSystem.Reset action`);
  const inline = reset!['ResetType@Redfish.AllowableValues'];
  if (Array.isArray(inline)) return { target, allowed: inline.map(String) };
  const infoPath = reset!['@Redfish.ActionInfo'];
  if (typeof infoPath === 'string') {
    const info = await call.client.get(infoPath, 'the Reset ActionInfo');
    const param = ((info.Parameters ?? []) as Doc[]).find((parameter) => parameter.Name === 'ResetType');
    if (Array.isArray(param?.AllowableValues)) return { target, allowed: (param!.AllowableValues as unknown[]).map(String) };
  }
  return { target, allowed: null };
}

async function runPlans(call: CallContext, sys: System, reset: ResetAction, plans: ResetStep[][]): Promise<PowerState> {
  const refused: string[] = [];
  const listed = (type: string) => reset.allowed === null || reset.allowed.includes(type);
  for (const [planIndex, plan] of plans.entries()) {
    if (!plan.every((step) => step.types.some(listed))) {
      for (const step of plan) if (!step.types.some(listed)) refused.push(`${step.types.join('/')} is not in the BMC's ResetType AllowableValues`);
      continue;
    }
    const used: string[] = [];
    let state: PowerState = 'unknown';
    let abandoned = false;
    for (const [stepIndex, step] of plan.entries()) {
      let done = false;
      for (const type of step.types.filter(listed)) {
        try {
          state = await sendReset(call, sys, reset.target, type, step.expect);
          used.push(type);
          done = true;
          break;
        } catch (e) {
          if (!(e instanceof ResetTypeRefused)) throw e;
          refused.push(e.message);
        }
      }
      if (!done) {
        // Part of a plan already ran (ForceOff): the machine is not where it was, so no other plan may start over.
        if (stepIndex > 0) throw call.client.error('BMC_UNSUPPORTED', `${refused.join('; ')}; the machine was left ${state} after ${used.join(' then ')}`);
        abandoned = true;
        break;
      }
    }
    if (abandoned) continue;
    if (planIndex > 0 || refused.length) call.notes.push(`${refused.join('; ')}; used ${used.join(' then ')}`);
    return state;
  }
  throw call.client.error('BMC_UNSUPPORTED', `no ResetType the BMC accepts does this: ${refused.join('; ')}`);
}

/** POSTs one ResetType, follows its task, and reads the state back. ResetTypeRefused when the BMC refuses the type itself. */
async function sendReset(call: CallContext, sys: System, target: string, type: string, expect: ResetOutcome): Promise<PowerState> {
  const before = sys.doc.LastResetTime;
  const res = await call.client.request('POST', target, { repeatable: false, what: `Reset (${type})`, body: { ResetType: type }, headers: idempotencyHeader(call, type) });
  if (res.status === 501) throw new ResetTypeRefused(`ResetType ${type} answered 501`);
  if (res.status === 400 && /ActionParameterValueNotInList|ActionParameterNotSupported|ActionNotSupported/.test(JSON.stringify(res.body ?? {}))) {
    throw new ResetTypeRefused(`ResetType ${type} was refused as not supported (HTTP 400)`);
  }
  if (res.status >= 300) throw call.client.statusError(res, `Reset (${type})`, false);
  let taskEnded: TaskEnded | null = null;
  if (res.status === 202) {
    try {
      await awaitTask(call, res, `Reset (${type})`);
    } catch (e) {
      // The task's end says nothing of the machine: the power state does (a DGX's Reset task ends
      // Exception after the BMC applied it, QUIRKS.md "Other"). Only without the effect is it a failure.
      if (!(e instanceof TaskEnded)) throw e;
      taskEnded = e;
    }
  }
  if (expect === 'nmi') {
    if (taskEnded) throw taskEnded;
    call.unverified = 'an NMI changes nothing the BMC can show';
    call.notes.push('NMI sent; an NMI changes no state the BMC can show: not verifiable');
    return powerStateOf((await call.client.get(sys.path, 'the system')).PowerState);
  }
  try {
    const state = expect === 'restart' ? await waitRestart(call, sys.path, before, type) : await waitPower(call, sys.path, expect, type);
    if (taskEnded) {
      if (call.unverified) throw taskEnded;
      call.notes.push(`${taskEnded.message}; yet the machine shows the ${type}: taken as done`);
    }
    return state;
  } catch (e) {
    throw taskEnded ?? e;
  }
}

async function waitPower(call: CallContext, path: string, want: 'on' | 'off', sent: string): Promise<PowerState> {
  const until = Date.now() + call.deadlineMs;
  for (;;) {
    const state = powerStateOf((await call.client.get(path, 'the system')).PowerState);
    if (state === want) return state;
    if (Date.now() >= until) {
      throw call.client.error('BMC_NOT_APPLIED', sent === 'none'
        ? `the machine did not settle ${want} within ${call.deadlineMs} ms (power state ${state})`
        : `the BMC accepted ResetType ${sent} but the power state was still ${state} after ${call.deadlineMs} ms (wanted ${want})`);
    }
    await sleep(call.pollMs, call.client.signal);
  }
}

/**
 * A restart is proven by LastResetTime moving, or by a power state other than On seen on the
 * way. A BMC with no usable LastResetTime (HPE, Lenovo, Supermicro have none; Dell reports
 * 0000-00-00, OpenBMC the epoch) that shows no transition within RESTART_OBSERVE_MS cannot prove
 * it: the result says so (unverified) instead of success, and the workflow's next wait (the
 * ramdisk's call, the machine's boot) is the proof. With a usable LastResetTime, no sign of a
 * restart within the deadline is BMC_NOT_APPLIED.
 */
async function waitRestart(call: CallContext, path: string, lastResetBefore: unknown, sent: string): Promise<PowerState> {
  const start = Date.now();
  const until = start + call.deadlineMs;
  const before = resetTimeOf(lastResetBefore);
  let sawOther = false;
  for (;;) {
    const doc = await call.client.get(path, 'the system');
    const state = powerStateOf(doc.PowerState);
    if (state !== 'on') sawOther = true;
    const after = resetTimeOf(doc.LastResetTime);
    const moved = after !== null && after !== before;
    if (state === 'on' && (sawOther || moved)) return state;
    if (state === 'on' && after === null && Date.now() - start >= Math.min(RESTART_OBSERVE_MS, call.deadlineMs)) {
      call.unverified = `the BMC accepted ResetType ${sent} but reports no usable LastResetTime and showed no power transition within ${Math.min(RESTART_OBSERVE_MS, call.deadlineMs)} ms`;
      call.notes.push(`sent ResetType ${sent}; not verifiable on this BMC (no LastResetTime, no power transition seen): the machine's next boot is the proof`);
      return state;
    }
    if (Date.now() >= until) {
      throw call.client.error('BMC_NOT_APPLIED', `the BMC accepted ResetType ${sent} but showed no restart within ${call.deadlineMs} ms (power state ${state}, LastResetTime unchanged)`);
    }
    await sleep(call.pollMs, call.client.signal);
  }
}
