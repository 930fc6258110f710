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
  type BmcEndpoint,
  type BootDevice,
  type DriverCapabilities,
  type DriverResult,
  type OutOfBandInventory,
  type PowerAction,
  type PowerState,
} from '../driver';
import { retryAfterMs, sleep, type Doc, type RedfishClient, type RedfishTransport, type Response } from './client';

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
  /**
   * A slot with no InsertMedia/EjectMedia actions is mounted and unmounted by a PATCH of the slot
   * itself (Lenovo XCC's EXT slots); slots whose Id starts with this prefix are preferred. Null:
   * such a slot is unsupported.
   */
  patchMountSlots: string | null;
}

/** Which slot state makes DMTF's InsertMedia unsafe: an image inserted or a connection up. */
export function genericOccupied(vm: Doc): string | null {
  if (vm.Inserted === true) return `${String(vm.Image ?? 'an image')} is inserted`;
  if (typeof vm.ConnectedVia === 'string' && vm.ConnectedVia !== 'NotConnected') return `${String(vm.Image ?? 'an image')} is connected (${vm.ConnectedVia})`;
  return null;
}

export const redfishGeneric: RedfishFlavour = {
  name: 'redfish',
  capabilities: { reportsMacs: true, virtualMedia: true, nmi: true, persistentBoot: true, bootMode: true },
  insertBody: (imageUrl) => ({ Image: imageUrl, Inserted: true, WriteProtected: true }),
  occupied: genericOccupied,
  continuousAllowed: () => true,
  ejectOfEmptyError: () => false,
  virtualCdBoot: 'override',
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

function powerOf(v: unknown): PowerState {
  switch (v) {
    case 'On': return 'on';
    case 'Off': return 'off';
    case 'PoweringOn': return 'powering-on';
    case 'PoweringOff': return 'powering-off';
    default: return 'unknown';
  }
}

function link(v: unknown): string | null {
  const id = (v as Doc | null | undefined)?.['@odata.id'];
  return typeof id === 'string' && id ? id : null;
}

function memberLinks(doc: Doc): string[] {
  return ((doc.Members ?? []) as unknown[]).map(link).filter((x): x is string => x !== null);
}

function lastSegment(p: string): string {
  return p.replace(/\/+$/, '').split('/').pop() ?? p;
}

interface Ctx {
  c: RedfishClient;
  deadlineMs: number;
  key: string | undefined;
  options: Readonly<Record<string, unknown>>;
  notes: string[];
}

interface System { path: string; doc: Doc }

class Unsupported501 extends Error {}

export class RedfishDriver implements BmcDriver {
  readonly name: string;
  readonly capabilities: DriverCapabilities;
  private readonly tuning: Required<DriverTuning>;

  constructor(readonly flavour: RedfishFlavour, private readonly transport: RedfishTransport, tuning: DriverTuning = {}) {
    this.name = flavour.name;
    this.capabilities = flavour.capabilities;
    this.tuning = { ...TUNING, ...tuning };
  }

  private ctx(bmc: BmcEndpoint, opts: BmcCallOptions | undefined): Ctx {
    const options = bmc.options ?? {};
    const systemId = options.systemId;
    if (systemId !== undefined && typeof systemId !== 'string') throw new BmcError('BMC_UNSUPPORTED', 'driverOptions.systemId must be a string (the Id of one member of the BMC\'s Systems)');
    return {
      c: this.transport.client(bmc, opts?.signal),
      deadlineMs: opts?.verifyDeadlineMs ?? this.tuning.verifyDeadlineMs,
      key: opts?.idempotencyKey,
      options,
      notes: [],
    };
  }

  private result<T>(x: Ctx, value: T): DriverResult<T> {
    return { value, notes: [...x.c.notes, ...x.notes] };
  }

  /** Idempotency-Key of one destructive request: the step's key and what this request does. */
  private keyed(x: Ctx, part: string): Record<string, string> {
    return x.key ? { 'Idempotency-Key': `${x.key}:${part}` } : {};
  }

  // ---- discovery ----

  private async systemPath(x: Ctx): Promise<string> {
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

  private async system(x: Ctx): Promise<System> {
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
  private async resetInfo(x: Ctx, sys: System): Promise<{ target: string; allowed: string[] | null }> {
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

  private async runPlans(x: Ctx, sys: System, reset: { target: string; allowed: string[] | null }, plans: Step[][]): Promise<PowerState> {
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
  private async sendReset(x: Ctx, sys: System, target: string, type: string, expect: Expect): Promise<PowerState> {
    const before = sys.doc.LastResetTime;
    const res = await x.c.request('POST', target, { repeatable: false, what: `Reset (${type})`, body: { ResetType: type }, headers: this.keyed(x, type) });
    if (res.status === 501) throw new Unsupported501(`ResetType ${type} answered 501`);
    if (res.status === 400 && /ActionParameterValueNotInList|ActionParameterNotSupported|ActionNotSupported/.test(JSON.stringify(res.body ?? {}))) {
      throw new Unsupported501(`ResetType ${type} was refused as not supported (HTTP 400)`);
    }
    if (res.status >= 300) throw x.c.statusError(res, `Reset (${type})`, false);
    if (res.status === 202) await this.awaitTask(x, res, `Reset (${type})`);
    if (expect === 'nmi') {
      x.notes.push('NMI sent; an NMI changes no state the BMC can show, so it is not read back');
      return powerOf((await x.c.get(sys.path, 'the system')).PowerState);
    }
    if (expect === 'restart') return this.waitRestart(x, sys.path, before, type);
    return this.waitPower(x, sys.path, expect, type);
  }

  private async waitPower(x: Ctx, path: string, want: 'on' | 'off', sent: string): Promise<PowerState> {
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
   * A restart shows as LastResetTime moving, or a power state other than On on the way: a BMC
   * that reports neither can only be seen to end up On (noted).
   */
  private async waitRestart(x: Ctx, path: string, lastResetBefore: unknown, sent: string): Promise<PowerState> {
    const until = Date.now() + x.deadlineMs;
    let sawOther = false;
    for (;;) {
      const doc = await x.c.get(path, 'the system');
      const state = powerOf(doc.PowerState);
      if (state !== 'on') sawOther = true;
      const moved = lastResetBefore !== undefined && doc.LastResetTime !== lastResetBefore;
      if (state === 'on' && (sawOther || moved)) return state;
      if (state === 'on' && lastResetBefore === undefined) {
        x.notes.push(`the BMC reports no LastResetTime: ResetType ${sent} is verified only by the machine being on`);
        return state;
      }
      if (Date.now() >= until) {
        throw x.c.error('BMC_NOT_APPLIED', `the BMC accepted ResetType ${sent} but showed no restart within ${x.deadlineMs} ms (power state ${state}, LastResetTime unchanged)`);
      }
      await sleep(this.tuning.pollMs, x.c.signal);
    }
  }

  /** A 202's task monitor (its Location), polled until the task ends or the deadline passes. */
  private async awaitTask(x: Ctx, accepted: Response, what: string): Promise<void> {
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
        const msg = ((res.body?.Messages ?? []) as Doc[]).map((m) => String(m.Message ?? '')).filter(Boolean).join('; ');
        throw x.c.error('BMC_ERROR', `${what}: the BMC's task ended ${state}${msg ? `: ${msg}` : ''}`);
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

  async setBootDevice(bmc: BmcEndpoint, device: BootDevice, mode: { persistent: boolean; uefi?: boolean }, opts?: BmcCallOptions): Promise<DriverResult> {
    const x = this.ctx(bmc, opts);
    const target = Object.hasOwn(BOOT_TARGET, device) ? BOOT_TARGET[device] : undefined;
    if (!target) throw new BmcError('BMC_UNSUPPORTED', `boot device "${String(device)}" is not one of ${Object.keys(BOOT_TARGET).join(', ')}`);
    const sys = await this.system(x);
    // The virtual CD the vendor's own way (a persistent boot from it on iLO is DMTF's override).
    if (device === 'cd' && this.flavour.virtualCdBoot === 'dell-vcd') {
      await this.dellVirtualCdBoot(x, sys, mode.persistent);
      return this.result(x, undefined);
    }
    if (device === 'cd' && this.flavour.virtualCdBoot === 'hpe-next-reset' && !mode.persistent) {
      await this.hpeVirtualCdBoot(x, sys);
      return this.result(x, undefined);
    }
    const boot = (sys.doc.Boot ?? null) as Doc | null;
    if (!boot) throw x.c.error('BMC_UNSUPPORTED', `the system at ${x.c.origin} has no Boot settings`);
    const allowed = boot['BootSourceOverrideTarget@Redfish.AllowableValues'];
    if (Array.isArray(allowed) && !allowed.includes(target)) {
      throw x.c.error('BMC_UNSUPPORTED', `the BMC does not offer boot target ${target} (for ${device}); it offers ${allowed.join(', ')}`);
    }
    let enabled = mode.persistent ? 'Continuous' : 'Once';
    if (mode.persistent && !this.flavour.continuousAllowed(device)) {
      enabled = 'Once';
      x.notes.push(`${this.name}: a Continuous ${device} boot override can boot-loop this firmware; set it Once instead`);
    }
    const patch: Doc = { BootSourceOverrideTarget: target, BootSourceOverrideEnabled: enabled };
    if (mode.uefi !== undefined) {
      if (!this.capabilities.bootMode) x.notes.push(`${this.name} has no BootSourceOverrideMode: the boot mode was left as the firmware has it`);
      else if (!('BootSourceOverrideMode' in boot)) x.notes.push('the BMC shows no BootSourceOverrideMode: the boot mode was left as the firmware has it');
      else patch.BootSourceOverrideMode = mode.uefi ? 'UEFI' : 'Legacy';
    }
    if (Object.entries(patch).every(([k, v]) => boot[k] === v)) {
      x.notes.push(`the boot override was already ${target} ${enabled}: nothing sent`);
      return this.result(x, undefined);
    }
    await this.patch(x, sys.path, { Boot: patch }, 'the boot override', sys.doc, 'boot');
    await this.until(x, async () => {
      const b = ((await x.c.get(sys.path, 'the system')).Boot ?? {}) as Doc;
      return Object.entries(patch).every(([k, v]) => b[k] === v) ? true : `the boot override reads ${String(b.BootSourceOverrideTarget)} ${String(b.BootSourceOverrideEnabled)}`;
    }, `the BMC accepted the boot override ${target} ${enabled}`);
    return this.result(x, undefined);
  }

  /** A resource as GET gives it, its ETag header folded into @odata.etag when the body has none. */
  private async read(x: Ctx, path: string, what: string): Promise<Doc> {
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
  private async patch(x: Ctx, path: string, body: Doc, what: string, current: Doc | null, keyPart: string): Promise<void> {
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
    if (res.status === 412 || res.status === 428) throw x.c.error('BMC_BUSY', `${what} was refused twice for a changed ETag (HTTP ${res.status}): something else is changing it`, true);
    if (res.status >= 300) throw x.c.statusError(res, `PATCH ${what}`, true);
    if (res.status === 202) await this.awaitTask(x, res, what);
  }

  /**
   * iDRAC: a Cd boot override boots the machine's physical drive, so a boot from the virtual CD is
   * Dell's first-boot device VCD-DVD, set in the manager's DellAttributes (Links.Oem.Dell), once
   * (VirtualMedia.1.BootOnce) or for every boot.
   */
  private async dellVirtualCdBoot(x: Ctx, sys: System, persistent: boolean): Promise<void> {
    let attrsPath: string | null = null;
    for (const m of await this.managers(x, sys)) {
      const oem = ((((await x.c.get(m, 'the manager')).Links ?? {}) as Doc).Oem ?? {}) as Doc;
      const dell = (oem.Dell ?? {}) as Doc;
      const listed = Array.isArray(dell.DellAttributes) ? (dell.DellAttributes as unknown[]).map(link) : [link(dell.DellAttributes)];
      attrsPath = listed.find((p): p is string => p !== null) ?? null;
      if (attrsPath) break;
    }
    if (!attrsPath) throw x.c.error('BMC_UNSUPPORTED', `the iDRAC at ${x.c.origin} links no DellAttributes from its manager: the virtual CD (VCD-DVD) cannot be set as the boot device`);
    const want = { 'ServerBoot.1.FirstBootDevice': 'VCD-DVD', 'VirtualMedia.1.BootOnce': persistent ? 'Disabled' : 'Enabled' };
    const current = await this.read(x, attrsPath, 'the iDRAC attributes');
    const has = (d: Doc) => Object.entries(want).every(([k, v]) => ((d.Attributes ?? {}) as Doc)[k] === v);
    if (has(current)) {
      x.notes.push(`the iDRAC's first boot device was already VCD-DVD${persistent ? '' : ' once'}: nothing sent`);
      return;
    }
    await this.patch(x, attrsPath, { Attributes: want }, 'the iDRAC first boot device (VCD-DVD)', current, 'boot');
    await this.until(x, async () => (has(await this.read(x, attrsPath!, 'the iDRAC attributes')) ? true : 'the attributes do not show FirstBootDevice VCD-DVD'), 'the iDRAC accepted FirstBootDevice VCD-DVD');
    x.notes.push(`idrac: set Dell's first boot device VCD-DVD${persistent ? '' : ' once'} (a Cd override would boot the physical drive)`);
  }

  /** HPE iLO: a boot from the virtual CD is BootOnNextServerReset on the slot that holds the image (Oem.Hpe, Oem.Hp on iLO 4). */
  private async hpeVirtualCdBoot(x: Ctx, sys: System): Promise<void> {
    const slot = (await this.cdSlots(x, sys)).find((s) => s.doc.Inserted === true && s.doc.Image);
    if (!slot) throw x.c.error('BMC_ERROR', 'no virtual media is inserted: insert the image before setting the boot from it');
    const oem = (slot.doc.Oem ?? {}) as Doc;
    const vendor = 'Hpe' in oem || !('Hp' in oem) ? 'Hpe' : 'Hp';
    const name = lastSegment(slot.path);
    const flag = (d: Doc) => (((d.Oem ?? {}) as Doc)[vendor] as Doc | undefined)?.BootOnNextServerReset === true;
    if (flag(slot.doc)) {
      x.notes.push(`${name} was already set to boot on the next server reset: nothing sent`);
      return;
    }
    await this.patch(x, slot.path, { Oem: { [vendor]: { BootOnNextServerReset: true } } }, `BootOnNextServerReset on ${name}`, slot.doc, `boot:${name}`);
    await this.until(x, async () => (flag(await this.read(x, slot.path, `virtual media ${name}`)) ? true : `${name} does not show BootOnNextServerReset`), `the BMC accepted BootOnNextServerReset on ${name}`);
    x.notes.push(`ilo: set ${name} to boot on the next server reset (Oem.${vendor}.BootOnNextServerReset)`);
  }

  /** Polls check() until it is true; its last string says what was seen when the deadline passes. */
  private async until(x: Ctx, check: () => Promise<true | string>, accepted: string): Promise<void> {
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
  private async managers(x: Ctx, sys: System): Promise<string[]> {
    const managers = (((sys.doc.Links ?? {}) as Doc).ManagedBy as unknown[] | undefined ?? []).map(link).filter((m): m is string => m !== null);
    if (managers.length) return managers;
    const all = link((await x.c.root()).root.Managers);
    return all ? memberLinks(await x.c.get(all, 'the Managers collection')) : [];
  }

  /** The CD/DVD slots: the system's own VirtualMedia when it links one (iDRAC 6.00.02+, rackmount), else its managers'. */
  private async cdSlots(x: Ctx, sys: System): Promise<{ path: string; doc: Doc }[]> {
    const collections: string[] = [];
    const own = link(sys.doc.VirtualMedia);
    if (own) collections.push(own);
    else {
      for (const m of await this.managers(x, sys)) {
        const vm = link((await x.c.get(m, 'the manager')).VirtualMedia);
        if (vm) collections.push(vm);
      }
    }
    if (!collections.length) throw x.c.error('BMC_UNSUPPORTED', `the BMC at ${x.c.origin} has no VirtualMedia under the system or its managers`);
    const slots: { path: string; doc: Doc }[] = [];
    for (const coll of collections) {
      for (const p of memberLinks(await x.c.get(coll, 'the VirtualMedia collection'))) {
        const doc = await x.c.get(p, `virtual media ${lastSegment(p)}`);
        const types = Array.isArray(doc.MediaTypes) ? (doc.MediaTypes as unknown[]).map(String) : [];
        if (types.includes('CD') || types.includes('DVD')) slots.push({ path: p, doc });
      }
    }
    if (!slots.length) throw x.c.error('BMC_UNSUPPORTED', `the BMC at ${x.c.origin} has no CD/DVD virtual media`);
    return slots;
  }

  private action(x: Ctx, slot: { path: string; doc: Doc }, name: 'InsertMedia' | 'EjectMedia'): string {
    const t = (((slot.doc.Actions ?? {}) as Doc)[`#VirtualMedia.${name}`] as Doc | undefined)?.target;
    if (typeof t !== 'string') throw x.c.error('BMC_UNSUPPORTED', `virtual media ${lastSegment(slot.path)} offers no #VirtualMedia.${name} action`);
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
    const prefix = this.flavour.patchMountSlots;
    if (prefix !== null) slots = [...slots.filter((s) => lastSegment(s.path).startsWith(prefix)), ...slots.filter((s) => !lastSegment(s.path).startsWith(prefix))];
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
  private async mountSlot(x: Ctx, slot: { path: string; doc: Doc }, imageUrl: string): Promise<boolean> {
    const name = lastSegment(slot.path);
    const target = (((slot.doc.Actions ?? {}) as Doc)['#VirtualMedia.InsertMedia'] as Doc | undefined)?.target;
    if (typeof target !== 'string') {
      if (this.flavour.patchMountSlots === null) throw x.c.error('BMC_UNSUPPORTED', `virtual media ${name} offers no #VirtualMedia.InsertMedia action`);
      await this.patch(x, slot.path, { Image: imageUrl, Inserted: true, WriteProtected: true }, `the image of ${name}`, slot.doc, 'insert');
      x.notes.push(`${this.name}: ${name} has no InsertMedia action; mounted by a PATCH of the slot`);
      return true;
    }
    const res = await x.c.request('POST', target, { repeatable: true, what: `InsertMedia on ${name}`, body: this.flavour.insertBody(imageUrl), headers: this.keyed(x, 'insert') });
    if (res.status === 405) return false;
    if (res.status >= 300) throw x.c.statusError(res, `InsertMedia on ${name}`, true);
    if (res.status === 202) await this.awaitTask(x, res, 'InsertMedia');
    return true;
  }

  private async ejectSlot(x: Ctx, slot: { path: string; doc: Doc }): Promise<void> {
    const name = lastSegment(slot.path);
    const target = (((slot.doc.Actions ?? {}) as Doc)['#VirtualMedia.EjectMedia'] as Doc | undefined)?.target;
    if (typeof target !== 'string' && this.flavour.patchMountSlots !== null) {
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

  async inventory(bmc: BmcEndpoint, opts?: BmcCallOptions): Promise<DriverResult<OutOfBandInventory>> {
    const x = this.ctx(bmc, opts);
    const sys = (await this.system(x)).doc;
    const str = (v: unknown) => (typeof v === 'string' && v.trim() ? v.trim() : null);
    let uuid = str(sys.UUID)?.toLowerCase() ?? null;
    if (uuid && /^[0-]+$/.test(uuid)) {
      x.notes.push('the BMC reports an all-zero UUID: treated as unknown');
      uuid = null;
    }
    const inv: OutOfBandInventory = {
      uuid, macs: [], cpus: null, memoryMiB: null, storage: null,
      manufacturer: str(sys.Manufacturer), model: str(sys.Model), serial: str(sys.SerialNumber),
    };
    const members = async (l: unknown, what: string): Promise<Doc[]> => {
      const coll = link(l);
      if (!coll) return [];
      const docs: Doc[] = [];
      for (const p of memberLinks(await x.c.get(coll, what))) docs.push(await x.c.get(p, `${what} member ${lastSegment(p)}`));
      return docs;
    };
    const present = (d: Doc) => ((d.Status ?? {}) as Doc).State !== 'Absent';

    const nics = await members(sys.EthernetInterfaces, 'the EthernetInterfaces');
    const macs = new Set<string>();
    for (const n of nics) {
      const mac = str(n.PermanentMACAddress) ?? str(n.MACAddress);
      if (mac && /^([0-9a-f]{2}[:-]){5}[0-9a-f]{2}$/i.test(mac) && !/^(00[:-]){5}00$/.test(mac)) macs.add(mac.toLowerCase().replace(/-/g, ':'));
    }
    inv.macs = [...macs];

    if (link(sys.Processors)) {
      inv.cpus = (await members(sys.Processors, 'the Processors'))
        .filter((p) => present(p) && (p.ProcessorType === undefined || p.ProcessorType === 'CPU'))
        .map((p) => ({ model: str(p.Model) ?? 'unknown', cores: Number(p.TotalCores ?? 0), threads: Number(p.TotalThreads ?? p.TotalCores ?? 0) }));
    }

    const gib = ((sys.MemorySummary ?? {}) as Doc).TotalSystemMemoryGiB;
    if (typeof gib === 'number') inv.memoryMiB = Math.round(gib * 1024);
    else if (link(sys.Memory)) {
      inv.memoryMiB = (await members(sys.Memory, 'the Memory')).filter(present).reduce((sum, d) => sum + Number(d.CapacityMiB ?? 0), 0);
    }

    if (link(sys.Storage)) {
      inv.storage = [];
      for (const s of await members(sys.Storage, 'the Storage')) {
        for (const l of ((s.Drives ?? []) as unknown[]).map(link).filter((d): d is string => d !== null)) {
          const res = await x.c.request('GET', l, { repeatable: true, what: `drive ${lastSegment(l)}` });
          if (res.status === 404) { x.notes.push(`drive ${l} is listed by its storage but answers 404: left out`); continue; }
          if (res.status !== 200 || !res.body) throw x.c.statusError(res, `GET drive ${lastSegment(l)}`, true);
          if (!present(res.body)) continue;
          inv.storage.push({ name: str(res.body.Name) ?? lastSegment(l), sizeBytes: Number(res.body.CapacityBytes ?? 0), serial: str(res.body.SerialNumber) });
        }
      }
    } else if (link(sys.SimpleStorage)) {
      inv.storage = [];
      for (const s of await members(sys.SimpleStorage, 'the SimpleStorage')) {
        for (const d of (s.Devices ?? []) as Doc[]) {
          if (!present(d)) continue;
          inv.storage.push({ name: str(d.Name) ?? 'device', sizeBytes: Number(d.CapacityBytes ?? 0), serial: str(d.SerialNumber) });
        }
      }
    }
    return this.result(x, inv);
  }
}
