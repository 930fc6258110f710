/**
 * The generic Redfish driver (DMTF Redfish over undici, see client.ts for addresses, TLS and
 * sessions); each vendor flavour (idrac.ts, ilo.ts, xcc.ts, cimc.ts, supermicro.ts) is this driver
 * with a RedfishFlavour of its quirks.
 *
 * Every URL comes from the BMC: the service root's Systems and Links.Sessions, the system's
 * Actions['#ComputerSystem.Reset'].target, its VirtualMedia (or its managers' VirtualMedia), each
 * VirtualMedia's Actions targets, task monitors' Location headers, and redirects. Nothing is built.
 *
 * Power actions pick a ResetType from the BMC's AllowableValues (inline or its @Redfish.ActionInfo)
 * in the order of POWER_PLANS; a ResetType that answers 501 although listed falls to the next
 * choice, and the notes say so ("ResetType PowerCycle answered 501; used ForceOff then On").
 * Every action is read back until it shows or verifyDeadlineMs passes (BMC_NOT_APPLIED).
 */
import {
  BmcError,
  type BmcCallOptions,
  type BmcDriver,
  type BootOverrideHeld,
  type BmcEndpoint,
  type BootDevice,
  type DriverCapabilities,
  type DriverResult,
  type OutOfBandInventory,
  type PowerAction,
  type PowerState,
} from '../driver';
import { redfishMessage, retryAfterMs, sleep, type Doc, type RedfishClient, type RedfishTransport, type Response } from './client';
import { isErrorBody, lastSegment, link, memberLinks, str } from './doc';
import { readInventory, type RedfishInventory } from './inventory';

/** A vendor's quirks; `redfishGeneric` is DMTF's behaviour. */
export interface RedfishFlavour {
  name: string;
  capabilities: DriverCapabilities;
  /** The InsertMedia body for an image URL. */
  insertBody(imageUrl: string): Doc;
  /** Why a virtual media slot must be ejected before InsertMedia, or null when it is free. */
  occupied(vm: Doc): string | null;
  /** Whether a Continuous override is sent for this device (else Once, with a note). */
  continuousAllowed(device: BootDevice): boolean;
  /** An EjectMedia error answer that only means "nothing was inserted" (the slot is re-read to be sure). */
  ejectOfEmptyError(res: Response): boolean;
  /**
   * How a boot from the virtual CD is set: DMTF's Boot override to Cd (`override`); Dell's own
   * first-boot device VCD-DVD in the manager's DellAttributes (`dell-vcd`: iDRAC's Cd override
   * boots the physical drive); HPE's BootOnNextServerReset on the inserted slot (`hpe-next-reset`).
   */
  virtualCdBoot: 'override' | 'dell-vcd' | 'hpe-next-reset';
  /** How the flavour sets a `dell-vcd` or `hpe-next-reset` boot (idrac.ts, ilo.ts); null for `override`. */
  setVirtualCdBoot: ((driver: RedfishDriver, x: CallContext, sys: System, persistent: boolean) => Promise<void>) | null;
  /**
   * A slot with no InsertMedia/EjectMedia actions is mounted and unmounted by a PATCH of the slot
   * itself (Lenovo XCC's EXT slots); slots whose Id starts with this prefix are preferred. Null:
   * such a slot is unsupported.
   */
  patchMountSlots: string | null;
}

/** Whether a slot reads as holding no image: Inserted false, or an empty, null or "None" Image, whatever ConnectedVia says. */
export function slotEmpty(vm: Doc): boolean {
  const img = typeof vm.Image === 'string' ? vm.Image.trim() : '';
  return vm.Inserted === false || img === '' || img === 'None';
}

/**
 * Which slot state makes DMTF's InsertMedia unsafe: an image in it. sushy-tools' empty slot reads
 * ConnectedVia "URI" with Image "" and Inserted false (peers README), Gigabyte's AMI Image "None"
 * (QUIRKS.md "VirtualMedia"): both are empty.
 */
export function genericOccupied(vm: Doc): string | null {
  if (slotEmpty(vm)) return null;
  return `${String(vm.Image)} is ${vm.Inserted === true ? 'inserted' : `connected (${String(vm.ConnectedVia ?? 'Inserted not said')})`}`;
}

export const redfishGeneric: RedfishFlavour = {
  name: 'redfish',
  capabilities: { reportsMacs: true, virtualMedia: true, nmi: true, persistentBoot: true, bootMode: true },
  insertBody: (imageUrl) => ({ Image: imageUrl, Inserted: true, WriteProtected: true }),
  occupied: genericOccupied,
  continuousAllowed: () => true,
  ejectOfEmptyError: () => false,
  virtualCdBoot: 'override',
  setVirtualCdBoot: null,
  patchMountSlots: null,
};

export interface DriverTuning {
  /** Read-back interval while waiting for a power change, a boot override or media to show. */
  pollMs?: number;
  /** Default for BmcCallOptions.verifyDeadlineMs. */
  verifyDeadlineMs?: number;
  /** Longest wait between task monitor polls, whatever Retry-After the BMC suggests. */
  taskPollMaxMs?: number;
}

const TUNING: Required<DriverTuning> = { pollMs: 1000, verifyDeadlineMs: 60_000, taskPollMaxMs: 5000 };

type Expect = 'on' | 'off' | 'restart' | 'nmi';
/** One step of a plan: the ResetTypes that do it, in preference order, and what it must lead to. */
interface Step { types: string[]; expect: Expect }
const ON: Step = { types: ['On', 'ForceOn'], expect: 'on' };
const FORCE_OFF: Step = { types: ['ForceOff'], expect: 'off' };

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
export const POWER_PLANS: Readonly<Record<PowerAction, Step[][]>> = {
  on: [[ON], [{ types: ['PushPowerButton'], expect: 'on' }]],
  off: [[FORCE_OFF]],
  'graceful-off': [[{ types: ['GracefulShutdown'], expect: 'off' }], [{ types: ['PushPowerButton'], expect: 'off' }]],
  reset: [[{ types: ['ForceRestart'], expect: 'restart' }], [{ types: ['PowerCycle'], expect: 'restart' }], [FORCE_OFF, ON]],
  'graceful-restart': [[{ types: ['GracefulRestart'], expect: 'restart' }], [{ types: ['GracefulShutdown'], expect: 'off' }, ON]],
  cycle: [[{ types: ['PowerCycle'], expect: 'restart' }], [{ types: ['ForceRestart'], expect: 'restart' }], [FORCE_OFF, ON]],
  nmi: [[{ types: ['Nmi'], expect: 'nmi' }]],
};

const BOOT_TARGET: Record<BootDevice, string> = { pxe: 'Pxe', disk: 'Hdd', cd: 'Cd', bios: 'BiosSetup' };

/** The Redfish target of a boot device; BMC_UNSUPPORTED before anything is sent for one that is none. */
function bootTarget(device: BootDevice): string {
  const target = Object.hasOwn(BOOT_TARGET, device) ? BOOT_TARGET[device] : undefined;
  if (!target) throw new BmcError('BMC_UNSUPPORTED', `boot device "${String(device)}" is not one of ${Object.keys(BOOT_TARGET).join(', ')}`);
  return target;
}

/** Where setBootDevice sends the override, and what (bootOverridePlan). */
export interface BootOverridePlan {
  /** The system, or its @Redfish.Settings SettingsObject. */
  path: string;
  via: 'system' | 'settings';
  /** { Boot: { BootSourceOverrideTarget, BootSourceOverrideEnabled, BootSourceOverrideMode? } }, plus @Redfish.SettingsApplyTime on a settings object. */
  body: Doc;
  enabled: 'Once' | 'Continuous';
}

/** A slot as mediaSlots reads it. */
export interface MediaSlot {
  id: string;
  path: string;
  empty: boolean;
  /** action: #VirtualMedia.InsertMedia; patch: a PATCH of the slot (Lenovo XCC's EXT slots); none: neither. */
  mount: 'action' | 'patch' | 'none';
  insertTarget: string | null;
  ejectTarget: string | null;
}

/** The target of #VirtualMedia.<name>, whatever its key's spelling (DMTF's telemetry mockup lists .../Actions/VM.InsertMedia). */
function actionTarget(actions: Doc, name: 'InsertMedia' | 'EjectMedia'): string | null {
  const entry = (actions[`#VirtualMedia.${name}`] ?? Object.entries(actions).find(([k]) => k.endsWith(`.${name}`))?.[1]) as Doc | undefined;
  return typeof entry?.target === 'string' && entry.target ? entry.target : null;
}

/** The system's @Redfish.Settings SettingsObject, if it links one. */
function settingsPathOf(sys: Doc): string | null {
  return link(((sys['@Redfish.Settings'] ?? {}) as Doc).SettingsObject);
}

/** A Redfish path a 405's MessageArgs name (the settings object to use instead), if any. */
function pathInMessage(body: Doc | null): string | null {
  const infos = [((body?.error ?? {}) as Doc)['@Message.ExtendedInfo'], body?.['@Message.ExtendedInfo']].flatMap((v) => (Array.isArray(v) ? v : [])) as Doc[];
  for (const info of infos) {
    for (const arg of Array.isArray(info?.MessageArgs) ? info.MessageArgs : []) {
      if (typeof arg === 'string' && /^\/redfish\/v1\/Systems\/[^\s?#]+$/.test(arg)) return arg;
    }
  }
  return null;
}

/** Whether a Boot object shows the wanted override (Continuous stands for Once: see bootReadBack). */
function shows(boot: Doc, want: Doc, enabled: 'Once' | 'Continuous'): boolean {
  if (boot.BootSourceOverrideTarget !== want.BootSourceOverrideTarget) return false;
  const e = boot.BootSourceOverrideEnabled;
  if (!(e === enabled || (enabled === 'Once' && e === 'Continuous'))) return false;
  return want.BootSourceOverrideMode === undefined || boot.BootSourceOverrideMode === want.BootSourceOverrideMode || boot.BootSourceOverrideMode === null;
}

function noteOnce(x: { notes: string[] }, text: string): void {
  if (!x.notes.includes(text)) x.notes.push(text);
}

function powerOf(v: unknown): PowerState {
  switch (v) {
    case 'On': return 'on';
    case 'Off': return 'off';
    case 'PoweringOn': return 'powering-on';
    case 'PoweringOff': return 'powering-off';
    default: return 'unknown';
  }
}

/** One driver call: its client, deadline, idempotency key, node options, and what it noted so far. */
export interface CallContext {
  c: RedfishClient;
  deadlineMs: number;
  key: string | undefined;
  options: Readonly<Record<string, unknown>>;
  notes: string[];
  /** Set when an action was sent and accepted but this BMC shows nothing that proves its effect. */
  unverified: string | null;
}

export interface System { path: string; doc: Doc }

class Unsupported501 extends Error {}

/** A BMC task that ended Exception, Killed, Cancelled or Interrupted: the action may still have been applied. */
class TaskEnded extends BmcError {}

/** How long a restart is watched for a power transition on a BMC with no usable LastResetTime. */
const RESTART_OBSERVE_MS = 10_000;

/** A LastResetTime that can show a restart: a real date after 1970 (Dell reports 0000-00-00, OpenBMC the epoch: QUIRKS.md). */
function resetTimeOf(v: unknown): number | null {
  if (typeof v !== 'string') return null;
  const t = Date.parse(v);
  return Number.isFinite(t) && t > 86_400_000 ? t : null;
}

export class RedfishDriver implements BmcDriver {
  readonly name: string;
  readonly capabilities: DriverCapabilities;
  private readonly tuning: Required<DriverTuning>;

  constructor(readonly flavour: RedfishFlavour, private readonly transport: RedfishTransport, tuning: DriverTuning = {}) {
    this.name = flavour.name;
    this.capabilities = flavour.capabilities;
    this.tuning = { ...TUNING, ...tuning };
  }

  private ctx(bmc: BmcEndpoint, opts: BmcCallOptions | undefined): CallContext {
    const options = bmc.options ?? {};
    const systemId = options.systemId;
    if (systemId !== undefined && typeof systemId !== 'string') throw new BmcError('BMC_UNSUPPORTED', 'driverOptions.systemId must be a string (the Id of one member of the BMC\'s Systems)');
    return {
      c: this.transport.client(bmc, opts?.signal),
      deadlineMs: opts?.verifyDeadlineMs ?? this.tuning.verifyDeadlineMs,
      key: opts?.idempotencyKey,
      options,
      notes: [],
      unverified: null,
    };
  }

  private result<T>(x: CallContext, value: T): DriverResult<T> {
    return { value, notes: [...x.c.notes, ...x.notes], ...(x.unverified ? { unverified: x.unverified } : {}) };
  }

  /** Idempotency-Key of one destructive request: the step's key and what this request does. */
  private keyed(x: CallContext, part: string): Record<string, string> {
    return x.key ? { 'Idempotency-Key': `${x.key}:${part}` } : {};
  }

  // ---- discovery ----

  private async systemPath(x: CallContext): Promise<string> {
    const info = await x.c.root();
    const want = x.options.systemId as string | undefined;
    const known = info.systems.get(want ?? '');
    if (known) return known;
    const systems = link(info.root.Systems);
    if (!systems) throw x.c.error('BMC_UNSUPPORTED', `the BMC at ${x.c.origin} lists no Systems in its service root`);
    const members = memberLinks(await x.c.get(systems, 'the Systems collection'));
    let path: string | undefined;
    if (want) {
      path = members.find((m) => lastSegment(m) === want);
      if (!path) throw x.c.error('BMC_UNSUPPORTED', `driverOptions.systemId "${want}" is not among the BMC's systems (${members.map(lastSegment).join(', ') || 'none'})`);
    } else if (members.length === 1) {
      path = members[0];
    } else {
      throw x.c.error('BMC_UNSUPPORTED', `the BMC at ${x.c.origin} has ${members.length} systems (${members.map(lastSegment).join(', ')}): set driverOptions.systemId to the one this node is`);
    }
    info.systems.set(want ?? '', path!);
    return path!;
  }

  private async system(x: CallContext): Promise<System> {
    const cached = (await x.c.root()).systems.has((x.options.systemId as string | undefined) ?? '');
    const path = await this.systemPath(x);
    const res = await x.c.request('GET', path, { repeatable: true, what: 'the system' });
    if (res.status === 404 && cached) {
      // The BMC renumbered its systems (firmware update): find the system again, once.
      x.c.forgetSystems();
      return this.system(x);
    }
    if (res.status !== 200 || !res.body) throw x.c.statusError(res, 'GET the system', true);
    if (res.headers.etag && !res.body['@odata.etag']) res.body['@odata.etag'] = res.headers.etag;
    return { path, doc: res.body };
  }

  /** The Reset target and its AllowableValues (inline, or from its ActionInfo); null when the BMC does not say. */
  private async resetInfo(x: CallContext, sys: System): Promise<{ target: string; allowed: string[] | null }> {
    const reset = ((sys.doc.Actions ?? {}) as Doc)['#ComputerSystem.Reset'] as Doc | undefined;
    const target = reset?.target;
    if (typeof target !== 'string') throw x.c.error('BMC_UNSUPPORTED', `the system at ${x.c.origin} offers no #ComputerSystem.Reset action`);
    const inline = reset!['ResetType@Redfish.AllowableValues'];
    if (Array.isArray(inline)) return { target, allowed: inline.map(String) };
    const infoPath = reset!['@Redfish.ActionInfo'];
    if (typeof infoPath === 'string') {
      const info = await x.c.get(infoPath, 'the Reset ActionInfo');
      const param = ((info.Parameters ?? []) as Doc[]).find((p) => p.Name === 'ResetType');
      if (Array.isArray(param?.AllowableValues)) return { target, allowed: (param!.AllowableValues as unknown[]).map(String) };
    }
    return { target, allowed: null };
  }

  // ---- power ----

  async powerState(bmc: BmcEndpoint, opts?: BmcCallOptions): Promise<PowerState> {
    const x = this.ctx(bmc, opts);
    return powerOf((await this.system(x)).doc.PowerState);
  }

  async power(bmc: BmcEndpoint, action: PowerAction, opts?: BmcCallOptions): Promise<DriverResult<PowerState>> {
    if (!Object.hasOwn(POWER_PLANS, action)) throw new BmcError('BMC_UNSUPPORTED', `power action "${String(action)}" is not one of ${Object.keys(POWER_PLANS).join(', ')}`);
    const x = this.ctx(bmc, opts);
    const sys = await this.system(x);
    const now = powerOf(sys.doc.PowerState);
    const on = now === 'on' || now === 'powering-on';
    // An unknown state (no PowerState, or Paused) is neither: the action is sent as asked.
    const off = now === 'off' || now === 'powering-off';
    if (action === 'on' && on) {
      x.notes.push('the machine was already on: nothing sent');
      return this.result(x, await this.waitPower(x, sys.path, 'on', 'none'));
    }
    if ((action === 'off' || action === 'graceful-off') && off) {
      x.notes.push('the machine was already off: nothing sent');
      return this.result(x, await this.waitPower(x, sys.path, 'off', 'none'));
    }
    let plans = POWER_PLANS[action];
    if ((action === 'cycle' || action === 'reset' || action === 'graceful-restart') && off) {
      x.notes.push(`the machine was off: powered it on instead of ${action}`);
      plans = POWER_PLANS.on;
    }
    if (action === 'nmi' && off) throw x.c.error('BMC_ERROR', 'the machine is off: an NMI needs it running');
    // A button push toggles: without a known state it could turn the machine the wrong way.
    if (!on && !off) plans = plans.filter((p) => !p.some((step) => step.types.includes('PushPowerButton')));
    const reset = await this.resetInfo(x, sys);
    return this.result(x, await this.runPlans(x, sys, reset, plans));
  }

  private async runPlans(x: CallContext, sys: System, reset: { target: string; allowed: string[] | null }, plans: Step[][]): Promise<PowerState> {
    const refused: string[] = [];
    const listed = (t: string) => reset.allowed === null || reset.allowed.includes(t);
    for (const [i, plan] of plans.entries()) {
      if (!plan.every((s) => s.types.some(listed))) {
        for (const s of plan) if (!s.types.some(listed)) refused.push(`${s.types.join('/')} is not in the BMC's ResetType AllowableValues`);
        continue;
      }
      const used: string[] = [];
      let state: PowerState = 'unknown';
      let abandoned = false;
      for (const [j, step] of plan.entries()) {
        let done = false;
        for (const type of step.types.filter(listed)) {
          try {
            state = await this.sendReset(x, sys, reset.target, type, step.expect);
            used.push(type);
            done = true;
            break;
          } catch (e) {
            if (!(e instanceof Unsupported501)) throw e;
            refused.push(e.message);
          }
        }
        if (!done) {
          // Part of a plan already ran (ForceOff): the machine is not where it was, so no other plan may start over.
          if (j > 0) throw x.c.error('BMC_UNSUPPORTED', `${refused.join('; ')}; the machine was left ${state} after ${used.join(' then ')}`);
          abandoned = true;
          break;
        }
      }
      if (abandoned) continue;
      if (i > 0 || refused.length) x.notes.push(`${refused.join('; ')}; used ${used.join(' then ')}`);
      return state;
    }
    throw x.c.error('BMC_UNSUPPORTED', `no ResetType the BMC accepts does this: ${refused.join('; ')}`);
  }

  /** POSTs one ResetType, follows its task, and reads the state back. Unsupported501 when the BMC refuses the type itself. */
  private async sendReset(x: CallContext, sys: System, target: string, type: string, expect: Expect): Promise<PowerState> {
    const before = sys.doc.LastResetTime;
    const res = await x.c.request('POST', target, { repeatable: false, what: `Reset (${type})`, body: { ResetType: type }, headers: this.keyed(x, type) });
    if (res.status === 501) throw new Unsupported501(`ResetType ${type} answered 501`);
    if (res.status === 400 && /ActionParameterValueNotInList|ActionParameterNotSupported|ActionNotSupported/.test(JSON.stringify(res.body ?? {}))) {
      throw new Unsupported501(`ResetType ${type} was refused as not supported (HTTP 400)`);
    }
    if (res.status >= 300) throw x.c.statusError(res, `Reset (${type})`, false);
    let taskEnded: TaskEnded | null = null;
    if (res.status === 202) {
      try {
        await this.awaitTask(x, res, `Reset (${type})`);
      } catch (e) {
        // The task's end says nothing of the machine: the power state does (a DGX's Reset task ends
        // Exception after the BMC applied it, QUIRKS.md "Other"). Only without the effect is it a failure.
        if (!(e instanceof TaskEnded)) throw e;
        taskEnded = e;
      }
    }
    if (expect === 'nmi') {
      if (taskEnded) throw taskEnded;
      x.unverified = 'an NMI changes nothing the BMC can show';
      x.notes.push('NMI sent; an NMI changes no state the BMC can show: not verifiable');
      return powerOf((await x.c.get(sys.path, 'the system')).PowerState);
    }
    try {
      const state = expect === 'restart' ? await this.waitRestart(x, sys.path, before, type) : await this.waitPower(x, sys.path, expect, type);
      if (taskEnded) {
        if (x.unverified) throw taskEnded;
        x.notes.push(`${taskEnded.message}; yet the machine shows the ${type}: taken as done`);
      }
      return state;
    } catch (e) {
      throw taskEnded ?? e;
    }
  }

  private async waitPower(x: CallContext, path: string, want: 'on' | 'off', sent: string): Promise<PowerState> {
    const until = Date.now() + x.deadlineMs;
    for (;;) {
      const state = powerOf((await x.c.get(path, 'the system')).PowerState);
      if (state === want) return state;
      if (Date.now() >= until) {
        throw x.c.error('BMC_NOT_APPLIED', sent === 'none'
          ? `the machine did not settle ${want} within ${x.deadlineMs} ms (power state ${state})`
          : `the BMC accepted ResetType ${sent} but the power state was still ${state} after ${x.deadlineMs} ms (wanted ${want})`);
      }
      await sleep(this.tuning.pollMs, x.c.signal);
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
  private async waitRestart(x: CallContext, path: string, lastResetBefore: unknown, sent: string): Promise<PowerState> {
    const start = Date.now();
    const until = start + x.deadlineMs;
    const before = resetTimeOf(lastResetBefore);
    let sawOther = false;
    for (;;) {
      const doc = await x.c.get(path, 'the system');
      const state = powerOf(doc.PowerState);
      if (state !== 'on') sawOther = true;
      const after = resetTimeOf(doc.LastResetTime);
      const moved = after !== null && after !== before;
      if (state === 'on' && (sawOther || moved)) return state;
      if (state === 'on' && after === null && Date.now() - start >= Math.min(RESTART_OBSERVE_MS, x.deadlineMs)) {
        x.unverified = `the BMC accepted ResetType ${sent} but reports no usable LastResetTime and showed no power transition within ${Math.min(RESTART_OBSERVE_MS, x.deadlineMs)} ms`;
        x.notes.push(`sent ResetType ${sent}; not verifiable on this BMC (no LastResetTime, no power transition seen): the machine's next boot is the proof`);
        return state;
      }
      if (Date.now() >= until) {
        throw x.c.error('BMC_NOT_APPLIED', `the BMC accepted ResetType ${sent} but showed no restart within ${x.deadlineMs} ms (power state ${state}, LastResetTime unchanged)`);
      }
      await sleep(this.tuning.pollMs, x.c.signal);
    }
  }

  /** A 202's task monitor (its Location), polled until the task ends or the deadline passes. */
  private async awaitTask(x: CallContext, accepted: Response, what: string): Promise<void> {
    const monitor = accepted.headers.location ?? (typeof accepted.body?.TaskMonitor === 'string' ? accepted.body.TaskMonitor : null);
    if (!monitor) {
      x.notes.push(`${what} answered 202 without a task monitor; verified by reading back`);
      return;
    }
    const until = Date.now() + x.deadlineMs;
    for (;;) {
      const res = await x.c.request('GET', monitor, { repeatable: true, what: `the task monitor of ${what}` });
      const state = typeof res.body?.TaskState === 'string' ? res.body.TaskState : null;
      if (state === 'Exception' || state === 'Killed' || state === 'Cancelled' || state === 'Interrupted') {
        const msg = redfishMessage({ '@Message.ExtendedInfo': res.body?.Messages ?? [] });
        const e = x.c.error('BMC_ERROR', `${what}: the BMC's task ended ${state}${msg ? `: ${msg}` : ''}`);
        throw new TaskEnded(e.code, e.message, false);
      }
      if (res.status === 404) {
        x.notes.push(`the task monitor of ${what} is gone (404); verified by reading back`);
        return;
      }
      const running = res.status === 202 || (res.status === 200 && state !== null && state !== 'Completed');
      if (!running) {
        if (res.status >= 400) throw x.c.statusError(res, `${what}'s task`, false);
        return;
      }
      if (Date.now() >= until) throw x.c.error('BMC_TIMEOUT', `${what}: the BMC's task was still ${state ?? 'running'} after ${x.deadlineMs} ms`, false);
      const hint = retryAfterMs(res.headers['retry-after']) ?? this.tuning.pollMs;
      await sleep(Math.min(Math.max(hint, this.tuning.pollMs), this.tuning.taskPollMaxMs), x.c.signal);
    }
  }

  // ---- boot device ----

  async setBootDevice(bmc: BmcEndpoint, device: BootDevice, mode: { persistent: boolean; uefi?: boolean }, opts?: BmcCallOptions): Promise<DriverResult<BootOverrideHeld | void>> {
    const x = this.ctx(bmc, opts);
    bootTarget(device);
    const sys = await this.system(x);
    // The virtual CD the vendor's own way (a persistent boot from it on iLO is DMTF's override).
    if (device === 'cd' && this.flavour.virtualCdBoot === 'dell-vcd') {
      await this.vendorVirtualCdBoot(x, sys, mode.persistent);
      return this.result(x, undefined);
    }
    if (device === 'cd' && this.flavour.virtualCdBoot === 'hpe-next-reset' && !mode.persistent) {
      await this.vendorVirtualCdBoot(x, sys, false);
      return this.result(x, undefined);
    }
    let plan = await this.planBoot(x, sys, device, mode);
    const boot = plan.via === 'system' ? ((sys.doc.Boot ?? {}) as Doc) : plan.pendingBoot;
    const want = plan.body.Boot as Doc;
    if (shows(boot, want, plan.enabled)) {
      x.notes.push(`the boot override was already ${String(want.BootSourceOverrideTarget)} ${plan.enabled}: nothing sent`);
      return this.result(x, { enabled: boot.BootSourceOverrideEnabled === 'Continuous' ? 'Continuous' : plan.enabled });
    }
    const res = await this.patchResponse(x, plan.path, plan.body, 'the boot override', plan.via === 'system' ? sys.doc : null, 'boot');
    if (res.status === 405 && plan.via === 'system') {
      // AMI and OpenBMC refuse the override on the System and keep it in their settings object;
      // the 405 names it (its MessageArgs), or the system links it (@Redfish.Settings).
      const settings = settingsPathOf(sys.doc) ?? pathInMessage(res.body);
      if (!settings) throw x.c.statusError(res, 'PATCH the boot override', true);
      plan = await this.planBoot(x, sys, device, mode, settings);
      x.notes.push(`the BMC refused the override on the system (HTTP 405): sent it to its settings object ${settings}`);
      await this.patch(x, plan.path, plan.body, 'the boot override (settings object)', null, 'boot:settings');
    } else {
      this.patchOutcome(x, res, 'the boot override');
      if (res.status === 202) await this.awaitTask(x, res, 'the boot override');
    }
    let held: BootOverrideHeld['enabled'] = plan.enabled;
    await this.until(x, async () => {
      const r = await this.bootReadBack(x, sys, plan);
      if (typeof r !== 'string') held = r.enabled;
      return typeof r === 'string' ? r : true;
    }, `the BMC accepted the boot override ${String(want.BootSourceOverrideTarget)} ${plan.enabled}`);
    return this.result(x, { enabled: held });
  }

  /**
   * What setBootDevice would PATCH, and where, without sending it (the interop tests read it for
   * every captured BMC).
   */
  async bootOverridePlan(bmc: BmcEndpoint, device: BootDevice, mode: { persistent: boolean; uefi?: boolean }, opts?: BmcCallOptions): Promise<BootOverridePlan & { notes: string[] }> {
    const x = this.ctx(bmc, opts);
    bootTarget(device);
    const { pendingBoot: _pending, ...plan } = await this.planBoot(x, await this.system(x), device, mode);
    return { ...plan, notes: [...x.c.notes, ...x.notes] };
  }

  /**
   * The override for a device, from what the BMC offers (its AllowableValues, on the system or on
   * its @Redfish.Settings object):
   * - where: the system, unless the BMC keeps its boot settings on the settings object (AMI's
   *   /SD, OpenBMC/NVIDIA's /Settings: the AllowableValues are listed only there) or
   *   `forceSettings` names it (a 405 on the system said so);
   * - Enabled: Once where offered, else Continuous (sushy-tools and older Supermicro read
   *   Continuous whatever is sent); a persistent override is Continuous where offered and allowed
   *   by the flavour, else Once;
   * - Mode: UEFI where offered (Legacy only when asked), left out where the BMC shows none.
   */
  private async planBoot(x: CallContext, sys: System, device: BootDevice, mode: { persistent: boolean; uefi?: boolean }, forceSettings?: string): Promise<BootOverridePlan & { pendingBoot: Doc }> {
    const target = BOOT_TARGET[device];
    const sysBoot = (sys.doc.Boot ?? null) as Doc | null;
    const settingsPath = forceSettings ?? settingsPathOf(sys.doc);
    let pendingBoot: Doc = {};
    let settingsDoc: Doc | null = null;
    if (settingsPath) {
      const res = await x.c.request('GET', settingsPath, { repeatable: true, what: 'the system\'s settings object' });
      if (res.status === 200 && res.body && !res.body.error) {
        settingsDoc = res.body;
        if (res.headers.etag && !settingsDoc['@odata.etag']) settingsDoc['@odata.etag'] = res.headers.etag;
        pendingBoot = (settingsDoc.Boot ?? {}) as Doc;
      } else x.notes.push(`the system's settings object ${settingsPath} answered HTTP ${res.status}: the override goes to the system`);
    }
    const allowedOf = (b: Doc | null, k: string) => (b && Array.isArray(b[`${k}@Redfish.AllowableValues`]) ? (b[`${k}@Redfish.AllowableValues`] as unknown[]).map(String) : null);
    const keys = ['BootSourceOverrideTarget', 'BootSourceOverrideEnabled', 'BootSourceOverrideMode'];
    // The BMC keeps its boot override in the settings object when that object's Boot carries the
    // override itself (BlueField's /Settings lists BootSourceOverrideTarget and its values, as
    // NVIDIA's libredfish sends it there) or values the system lacks (AMI's /SD). Dell's Settings
    // (BootSourceOverrideMode null, BootOrder) and Lenovo's Pending (BootOrder) hold no override.
    const holdsOverride = settingsDoc !== null && ('BootSourceOverrideTarget' in pendingBoot || keys.some((k) => allowedOf(pendingBoot, k) !== null && allowedOf(sysBoot, k) === null));
    const via: 'system' | 'settings' = settingsDoc !== null && (forceSettings !== undefined || holdsOverride || !sysBoot) ? 'settings' : 'system';
    if (!sysBoot && via === 'system') throw x.c.error('BMC_UNSUPPORTED', `the system at ${x.c.origin} has no Boot settings`);
    const allowed = (k: string) => (via === 'settings' ? allowedOf(pendingBoot, k) ?? allowedOf(sysBoot, k) : allowedOf(sysBoot, k) ?? allowedOf(pendingBoot, k));

    const targets = allowed('BootSourceOverrideTarget');
    if (targets && !targets.includes(target)) {
      throw x.c.error('BMC_UNSUPPORTED', `the BMC does not offer boot target ${target} (for ${device}); it offers ${targets.join(', ')}`);
    }
    const enables = allowed('BootSourceOverrideEnabled');
    const offered = (v: string) => enables === null || enables.includes(v);
    let enabled: 'Once' | 'Continuous' = mode.persistent ? 'Continuous' : 'Once';
    if (enabled === 'Continuous' && !this.flavour.continuousAllowed(device)) {
      enabled = 'Once';
      x.notes.push(`${this.name}: a Continuous ${device} boot override can boot-loop this firmware; set it Once instead`);
    }
    if (enabled === 'Continuous' && !offered('Continuous')) {
      enabled = 'Once';
      x.notes.push('the BMC offers no Continuous boot override: set it Once');
    } else if (enabled === 'Once' && !offered('Once')) {
      if (!offered('Continuous')) throw x.c.error('BMC_UNSUPPORTED', `the BMC offers neither Once nor Continuous for BootSourceOverrideEnabled (it offers ${enables!.join(', ')})`);
      enabled = 'Continuous';
      x.notes.push('the BMC offers no Once boot override: set it Continuous, which stays until the next override replaces it');
    }
    const patch: Doc = { BootSourceOverrideTarget: target, BootSourceOverrideEnabled: enabled };
    const modes = allowed('BootSourceOverrideMode');
    const showsMode = modes !== null || (sysBoot !== null && 'BootSourceOverrideMode' in sysBoot) || 'BootSourceOverrideMode' in pendingBoot;
    const wantMode = mode.uefi === false ? 'Legacy' : 'UEFI';
    if (!this.capabilities.bootMode) {
      if (mode.uefi !== undefined) x.notes.push(`${this.name} has no BootSourceOverrideMode: the boot mode was left as the firmware has it`);
    } else if (!showsMode) {
      x.notes.push('the BMC shows no BootSourceOverrideMode: the boot mode was left as the firmware has it');
    } else if (modes && !modes.includes(wantMode)) {
      x.notes.push(`the BMC offers no ${wantMode} boot mode (it offers ${modes.join(', ')}): the boot mode was left as the firmware has it`);
    } else patch.BootSourceOverrideMode = wantMode;
    const body: Doc = { Boot: patch };
    if (via === 'settings') {
      const times = (((sys.doc['@Redfish.Settings'] ?? {}) as Doc).SupportedApplyTimes ?? null) as unknown;
      const list = Array.isArray(times) ? times.map(String) : [];
      const at = ['Immediate', 'OnReset', 'AtMaintenanceWindowStart'].find((t) => list.includes(t) && t !== 'AtMaintenanceWindowStart');
      if (at) body['@Redfish.SettingsApplyTime'] = { ApplyTime: at };
    }
    return { path: via === 'settings' ? settingsPath! : sys.path, via, body, enabled, pendingBoot };
  }

  /**
   * The evidence that the override is in place: the system reads it back, or (a BMC that keeps
   * pending settings) its settings object holds it until the next reset applies it. Enabled may
   * read Continuous where Once was sent (sushy-tools, older Supermicro: QUIRKS.md "Boot override").
   */
  private async bootReadBack(x: CallContext, sys: System, plan: BootOverridePlan): Promise<BootOverrideHeld | string> {
    const want = plan.body.Boot as Doc;
    const held = (b: Doc): BootOverrideHeld => ({ enabled: b.BootSourceOverrideEnabled === 'Continuous' ? 'Continuous' : plan.enabled });
    const now = ((await x.c.get(sys.path, 'the system')).Boot ?? {}) as Doc;
    if (shows(now, want, plan.enabled)) {
      if (plan.enabled === 'Once' && now.BootSourceOverrideEnabled === 'Continuous') noteOnce(x, 'the BMC reads the override back as Continuous: it stays until the next override replaces it');
      return held(now);
    }
    const settings = plan.via === 'settings' ? plan.path : settingsPathOf(sys.doc);
    if (settings) {
      const pending = ((await x.c.get(settings, 'the system\'s settings object')).Boot ?? {}) as Doc;
      if (shows(pending, want, plan.enabled)) {
        noteOnce(x, `the override is held in the BMC's pending settings (${settings}): it applies at the next reset`);
        return held(pending);
      }
    }
    return `the boot override reads ${String(now.BootSourceOverrideTarget)} ${String(now.BootSourceOverrideEnabled)}`;
  }

  /** A resource as GET gives it, its ETag header folded into @odata.etag when the body has none. */
  async read(x: CallContext, path: string, what: string): Promise<Doc> {
    const res = await x.c.request('GET', path, { repeatable: true, what });
    if (res.status !== 200 || !res.body) throw x.c.statusError(res, `GET ${what}`, true);
    if (res.headers.etag && !res.body['@odata.etag']) res.body['@odata.etag'] = res.headers.etag;
    return res.body;
  }

  /**
   * PATCHes a resource: with If-Match once the BMC is known to want it (several refuse a PATCH
   * without one); a 428 (If-Match required) or 412 (our ETag was stale) reads the resource's
   * current @odata.etag and sends once more. A 202 is followed to its task's end.
   */
  async patch(x: CallContext, path: string, body: Doc, what: string, current: Doc | null, keyPart: string): Promise<void> {
    const res = await this.patchResponse(x, path, body, what, current, keyPart);
    this.patchOutcome(x, res, what);
    if (res.status === 202) await this.awaitTask(x, res, what);
  }

  /** The PATCH's answer, after at most one resend with the current ETag (428, 412). */
  private async patchResponse(x: CallContext, path: string, body: Doc, what: string, current: Doc | null, keyPart: string): Promise<Response> {
    const etagOf = (d: Doc | null) => (d && typeof d['@odata.etag'] === 'string' ? d['@odata.etag'] : null);
    const send = (etag: string | null) => x.c.request('PATCH', path, {
      repeatable: true, what, body, headers: { ...(etag ? { 'If-Match': etag } : {}), ...this.keyed(x, keyPart) },
    });
    let res = await send(x.c.etagRequired ? etagOf(current) : null);
    if (res.status === 428 || res.status === 412) {
      if (res.status === 428) x.c.markEtagRequired();
      const etag = etagOf(await this.read(x, path, what));
      if (!etag) throw x.c.statusError(res, `PATCH ${what} (the BMC wants If-Match but shows no @odata.etag)`, false);
      x.notes.push(`the BMC answered ${res.status} to ${what}; sent it again with If-Match ${etag}`);
      res = await send(etag);
    }
    return res;
  }

  private patchOutcome(x: CallContext, res: Response, what: string): void {
    if (res.status === 412 || res.status === 428) throw x.c.error('BMC_BUSY', `${what} was refused twice for a changed ETag (HTTP ${res.status}): something else is changing it`, true);
    if (res.status >= 300) throw x.c.statusError(res, `PATCH ${what}`, true);
  }

  /** The flavour's own boot from the virtual CD (virtualCdBoot dell-vcd: idrac.ts, hpe-next-reset: ilo.ts). */
  private async vendorVirtualCdBoot(x: CallContext, sys: System, persistent: boolean): Promise<void> {
    if (!this.flavour.setVirtualCdBoot) throw new Error(`the ${this.name} flavour says virtualCdBoot ${this.flavour.virtualCdBoot} but has no setVirtualCdBoot`);
    await this.flavour.setVirtualCdBoot(this, x, sys, persistent);
  }

  /** Polls check() until it is true; its last string says what was seen when the deadline passes. */
  async until(x: CallContext, check: () => Promise<true | string>, accepted: string): Promise<void> {
    const end = Date.now() + x.deadlineMs;
    for (;;) {
      const r = await check();
      if (r === true) return;
      if (Date.now() >= end) throw x.c.error('BMC_NOT_APPLIED', `${accepted} but after ${x.deadlineMs} ms ${r}`);
      await sleep(this.tuning.pollMs, x.c.signal);
    }
  }

  // ---- virtual media ----

  /** The managers of the system (Links.ManagedBy), else every manager the service root lists. */
  async managers(x: CallContext, sys: System): Promise<string[]> {
    const managers = (((sys.doc.Links ?? {}) as Doc).ManagedBy as unknown[] | undefined ?? []).map(link).filter((m): m is string => m !== null);
    if (managers.length) return managers;
    const all = link((await x.c.root()).root.Managers);
    return all ? memberLinks(await x.c.get(all, 'the Managers collection')) : [];
  }

  /**
   * Whether a slot with no InsertMedia action is mounted by a PATCH of the slot: only the
   * flavour's patch-mount slots (Lenovo XCC's EXT1-4; its Remote and RDOC slots are not, as
   * Lenovo's own xcc_redfish_command skips them).
   */
  private patchMountable(path: string): boolean {
    const prefix = this.flavour.patchMountSlots;
    return prefix !== null && lastSegment(path).startsWith(prefix);
  }

  /**
   * The CD/DVD slots, found by following links: the system's own VirtualMedia when it links one
   * that answers (iDRAC 6.00.02+, rackmount, sushy-tools), else its managers' (a manager's link
   * that answers 404 is passed over: sushy-tools links Managers/<id>/VirtualMedia and serves 404
   * there). A slot that lists no MediaTypes counts (Gigabyte's AMI CD1).
   */
  async cdSlots(x: CallContext, sys: System, noneIsAnswer = false): Promise<{ path: string; doc: Doc }[]> {
    const collections: Doc[] = [];
    const tryGet = async (p: string, what: string): Promise<Doc | null> => {
      const res = await x.c.request('GET', p, { repeatable: true, what });
      return res.status === 200 && res.body && !isErrorBody(res.body) ? res.body : null;
    };
    const own = link(sys.doc.VirtualMedia);
    const ownColl = own ? await tryGet(own, 'the VirtualMedia collection') : null;
    if (ownColl) collections.push(ownColl);
    else {
      for (const m of await this.managers(x, sys)) {
        const vm = link((await x.c.get(m, 'the manager')).VirtualMedia);
        const coll = vm ? await tryGet(vm, 'the VirtualMedia collection') : null;
        if (coll) collections.push(coll);
      }
    }
    if (!collections.length) {
      if (noneIsAnswer) return [];
      throw x.c.error('BMC_UNSUPPORTED', `the BMC at ${x.c.origin} has no VirtualMedia under the system or its managers`);
    }
    const slots: { path: string; doc: Doc }[] = [];
    for (const coll of collections) {
      for (const p of memberLinks(coll)) {
        const doc = await tryGet(p, `virtual media ${lastSegment(p)}`);
        if (!doc) continue;
        const types = Array.isArray(doc.MediaTypes) ? (doc.MediaTypes as unknown[]).map(String) : null;
        if (types === null || types.includes('CD') || types.includes('DVD')) slots.push({ path: p, doc });
      }
    }
    if (!slots.length && !noneIsAnswer) throw x.c.error('BMC_UNSUPPORTED', `the BMC at ${x.c.origin} has no CD/DVD virtual media`);
    return slots;
  }

  /** The CD/DVD slots as the driver reads them (the interop tests compare them with each captured BMC). */
  async mediaSlots(bmc: BmcEndpoint, opts?: BmcCallOptions): Promise<MediaSlot[]> {
    const x = this.ctx(bmc, opts);
    // A BMC with no virtual media (DGX's empty collection, BlueField) lists none: that is an answer here.
    const slots = await this.cdSlots(x, await this.system(x), true);
    return slots.map((s) => {
      const actions = (s.doc.Actions ?? {}) as Doc;
      const insert = actionTarget(actions, 'InsertMedia');
      const eject = actionTarget(actions, 'EjectMedia');
      const id = str(s.doc.Id) ?? lastSegment(s.path);
      const mount: MediaSlot['mount'] = insert ? 'action' : this.patchMountable(s.path) ? 'patch' : 'none';
      return { id, path: s.path, empty: slotEmpty(s.doc), mount, insertTarget: insert, ejectTarget: eject };
    });
  }

  private action(x: CallContext, slot: { path: string; doc: Doc }, name: 'InsertMedia' | 'EjectMedia'): string {
    const t = actionTarget((slot.doc.Actions ?? {}) as Doc, name);
    if (!t) throw x.c.error('BMC_UNSUPPORTED', `virtual media ${lastSegment(slot.path)} offers no #VirtualMedia.${name} action`);
    return t;
  }

  async insertMedia(bmc: BmcEndpoint, imageUrl: string, opts?: BmcCallOptions): Promise<DriverResult> {
    const x = this.ctx(bmc, opts);
    let url: URL;
    try { url = new URL(imageUrl); } catch { throw new BmcError('BMC_ERROR', 'imageUrl is not an absolute URL'); }
    if (!['http:', 'https:', 'nfs:', 'cifs:', 'smb:'].includes(url.protocol)) throw new BmcError('BMC_UNSUPPORTED', `imageUrl scheme ${url.protocol} is not one a BMC mounts (http, https, nfs, cifs)`);
    const sys = await this.system(x);
    let slots = await this.cdSlots(x, sys);
    if (slots.some((s) => s.doc.Image === imageUrl && s.doc.Inserted === true)) {
      x.notes.push('the image was already inserted: nothing sent');
      return this.result(x, undefined);
    }
    // Only slots that take an image: an InsertMedia action, or the flavour's PATCH-mounted ones (first).
    const mountable = slots.filter((s) => actionTarget((s.doc.Actions ?? {}) as Doc, 'InsertMedia') || this.patchMountable(s.path));
    if (!mountable.length) throw x.c.error('BMC_UNSUPPORTED', `virtual media ${slots.map((s) => lastSegment(s.path)).join(', ')}: none offers #VirtualMedia.InsertMedia`);
    slots = [...mountable.filter((s) => this.patchMountable(s.path)), ...mountable.filter((s) => !this.patchMountable(s.path))];
    // A slot that answers 405 cannot take an image (Cisco CIMC blades: another slot can): the next one is tried.
    const refused: string[] = [];
    for (const slot of slots) {
      const name = lastSegment(slot.path);
      const busy = this.flavour.occupied(slot.doc);
      if (busy) {
        await this.ejectSlot(x, slot);
        x.notes.push(`ejected ${name} first: ${busy}, and the BMC refuses InsertMedia over it`);
      }
      if (!(await this.mountSlot(x, slot, imageUrl))) {
        refused.push(name);
        continue;
      }
      if (refused.length) x.notes.push(`InsertMedia answered 405 on ${refused.join(', ')}; mounted on ${name} instead`);
      await this.until(x, async () => {
        const d = await x.c.get(slot.path, `virtual media ${name}`);
        return d.Image === imageUrl && d.Inserted !== false ? true : `${name} shows ${d.Image ? 'another image' : 'no image'} (Inserted ${String(d.Inserted)})`;
      }, `the BMC accepted the image on ${name}`);
      return this.result(x, undefined);
    }
    throw x.c.error('BMC_UNSUPPORTED', `every CD/DVD slot refused InsertMedia with HTTP 405 (${refused.join(', ')})`);
  }

  /**
   * Sends the image to one slot: its InsertMedia action, or (patchMountSlots, a slot with no such
   * action) a PATCH of the slot. False when the action answered 405.
   */
  private async mountSlot(x: CallContext, slot: { path: string; doc: Doc }, imageUrl: string): Promise<boolean> {
    const name = lastSegment(slot.path);
    const actions = (slot.doc.Actions ?? {}) as Doc;
    const target = actionTarget(actions, 'InsertMedia');
    if (!target) {
      if (!this.patchMountable(slot.path)) throw x.c.error('BMC_UNSUPPORTED', `virtual media ${name} offers no #VirtualMedia.InsertMedia action`);
      await this.patch(x, slot.path, { Image: imageUrl, Inserted: true, WriteProtected: true }, `the image of ${name}`, slot.doc, 'insert');
      x.notes.push(`${this.name}: ${name} has no InsertMedia action; mounted by a PATCH of the slot`);
      return true;
    }
    let body = this.flavour.insertBody(imageUrl);
    const info = link({ '@odata.id': ((actions['#VirtualMedia.InsertMedia'] ?? {}) as Doc)['@Redfish.ActionInfo'] });
    if (info) body = await this.insertBodyFromInfo(x, info, body, imageUrl);
    let res = await x.c.request('POST', target, { repeatable: true, what: `InsertMedia on ${name}`, body, headers: this.keyed(x, 'insert') });
    if (res.status === 400 && Object.keys(body).length > 1 && /ActionParameterNotSupported|PropertyUnknown|ActionParameterUnknown/.test(redfishMessage(res.body))) {
      // iLO 4 takes only Image (QUIRKS.md; issue 20): the same insert with the one parameter every BMC takes.
      x.notes.push(`InsertMedia on ${name} refused a parameter (${redfishMessage(res.body)}): sent again with Image only`);
      body = { Image: imageUrl };
      res = await x.c.request('POST', target, { repeatable: true, what: `InsertMedia on ${name}`, body, headers: this.keyed(x, 'insert:minimal') });
    }
    if (res.status === 405) return false;
    if (res.status >= 300) throw x.c.statusError(res, `InsertMedia on ${name}`, true);
    if (res.status === 202) await this.awaitTask(x, res, 'InsertMedia');
    return true;
  }

  /**
   * The InsertMedia body an action's @Redfish.ActionInfo allows: only the parameters it lists
   * (Image always), and a required TransferProtocolType from the image URL's scheme (Supermicro
   * X13 and newer iDRAC list theirs there: QUIRKS.md "VirtualMedia").
   */
  private async insertBodyFromInfo(x: CallContext, infoPath: string, body: Doc, imageUrl: string): Promise<Doc> {
    const res = await x.c.request('GET', infoPath, { repeatable: true, what: 'the InsertMedia ActionInfo' });
    if (res.status !== 200 || !res.body || isErrorBody(res.body)) return body;
    const params = (Array.isArray(res.body.Parameters) ? res.body.Parameters : []) as Doc[];
    if (!params.length) return body;
    const named = new Map(params.filter((p) => typeof p?.Name === 'string').map((p) => [p.Name as string, p]));
    const out: Doc = { Image: imageUrl };
    for (const [k, v] of Object.entries(body)) if (k !== 'Image' && named.has(k)) out[k] = v;
    const proto = named.get('TransferProtocolType');
    if (proto && proto.Required === true && out.TransferProtocolType === undefined) {
      const want = new URL(imageUrl).protocol.replace(':', '').toUpperCase();
      const allowed = Array.isArray(proto.AllowableValues) ? proto.AllowableValues.map(String) : null;
      if (!allowed || allowed.includes(want)) out.TransferProtocolType = want;
    }
    return out;
  }

  private async ejectSlot(x: CallContext, slot: { path: string; doc: Doc }): Promise<void> {
    const name = lastSegment(slot.path);
    const target = actionTarget((slot.doc.Actions ?? {}) as Doc, 'EjectMedia');
    if (!target && this.flavour.patchMountSlots !== null) {
      await this.patch(x, slot.path, { Image: null, Inserted: false }, `the image of ${name} (eject)`, slot.doc, `eject:${name}`);
    } else {
      const res = await x.c.request('POST', this.action(x, slot, 'EjectMedia'), { repeatable: true, what: `EjectMedia on ${name}`, body: {}, headers: this.keyed(x, `eject:${name}`) });
      if (res.status >= 300) {
        const now = await x.c.get(slot.path, `virtual media ${name}`);
        // An eject of an empty slot is an error on some BMCs (iLO); empty is what we wanted.
        if (this.flavour.ejectOfEmptyError(res) && !this.flavour.occupied(now)) {
          x.notes.push(`EjectMedia on ${name} said nothing was inserted (HTTP ${res.status}): treated as ejected`);
          return;
        }
        throw x.c.statusError(res, `EjectMedia on ${name}`, true);
      }
      if (res.status === 202) await this.awaitTask(x, res, 'EjectMedia');
    }
    await this.until(x, async () => {
      const d = await x.c.get(slot.path, `virtual media ${name}`);
      const still = this.flavour.occupied(d);
      return still ? `${name}: ${still}` : true;
    }, `the BMC accepted EjectMedia on ${name}`);
  }

  async ejectMedia(bmc: BmcEndpoint, opts?: BmcCallOptions): Promise<DriverResult> {
    const x = this.ctx(bmc, opts);
    const sys = await this.system(x);
    const busy = (await this.cdSlots(x, sys)).filter((s) => this.flavour.occupied(s.doc));
    if (!busy.length) x.notes.push('no virtual media was inserted: nothing sent');
    for (const slot of busy) await this.ejectSlot(x, slot);
    return this.result(x, undefined);
  }

  // ---- inventory ----

  async inventory(bmc: BmcEndpoint, opts?: BmcCallOptions): Promise<DriverResult<RedfishInventory>> {
    const x = this.ctx(bmc, opts);
    const inv = await readInventory(x.c, (await this.system(x)).doc, x.notes);
    if (inv.unreadable.length) x.notes.push(`read without ${inv.unreadable.map((u) => `${u.part} (${u.reason})`).join(', ')}`);
    return this.result(x, inv);
  }
}
