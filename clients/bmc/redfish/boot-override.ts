/**
 * The boot device over Redfish: DMTF's Boot override (BootSourceOverrideTarget, -Enabled, -Mode)
 * sent to the system, or to its @Redfish.Settings object where the BMC keeps its boot settings
 * there (AMI, OpenBMC/NVIDIA), and read back until it shows; a boot from the virtual CD the
 * flavour's own way where DMTF's Cd override would not boot it (RedfishFlavour.bootFromVirtualCd).
 */
import { BmcError, type BootDevice, type BootOverrideHeld } from '../driver';
import { awaitTask, checkPatchAnswer, noteOnce, patchResource, pollUntil, readSystem, sendPatch, type CallContext, type System } from './call';
import type { Doc } from './client';
import { link } from './doc';
import type { RedfishFlavour } from './flavour';

export interface BootMode { persistent: boolean; uefi?: boolean }

const BOOT_TARGET: Record<BootDevice, string> = { pxe: 'Pxe', disk: 'Hdd', cd: 'Cd', bios: 'BiosSetup' };

/** The Redfish target of a boot device; BMC_UNSUPPORTED before anything is sent for one that is none. */
export function bootTargetOf(device: BootDevice): string {
  const target = Object.hasOwn(BOOT_TARGET, device) ? BOOT_TARGET[device] : undefined;
  if (!target) throw new BmcError('BMC_UNSUPPORTED', `boot device "${String(device)}" is not one of ${Object.keys(BOOT_TARGET).join(', ')}`);
  return target;
}

/** Where setBootDevice sends the override, and what (planBootOverride). */
export interface BootOverridePlan {
  /** The system, or its @Redfish.Settings SettingsObject. */
  path: string;
  via: 'system' | 'settings';
  /** { Boot: { BootSourceOverrideTarget, BootSourceOverrideEnabled, BootSourceOverrideMode? } }, plus @Redfish.SettingsApplyTime on a settings object. */
  body: Doc;
  enabled: 'Once' | 'Continuous';
}

/** A plan and the Boot its settings object holds now ({} when it goes to the system). */
type PlanWithPending = BootOverridePlan & { pendingBoot: Doc };

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
function showsOverride(boot: Doc, want: Doc, enabled: 'Once' | 'Continuous'): boolean {
  if (boot.BootSourceOverrideTarget !== want.BootSourceOverrideTarget) return false;
  const readEnabled = boot.BootSourceOverrideEnabled;
  if (!(readEnabled === enabled || (enabled === 'Once' && readEnabled === 'Continuous'))) return false;
  return want.BootSourceOverrideMode === undefined || boot.BootSourceOverrideMode === want.BootSourceOverrideMode || boot.BootSourceOverrideMode === null;
}

/** Sets the boot device and reads it back; what the BMC holds, or nothing for a vendor's virtual CD boot. */
export async function setBootDevice(call: CallContext, flavour: RedfishFlavour, device: BootDevice, mode: BootMode): Promise<BootOverrideHeld | void> {
  bootTargetOf(device);
  const sys = await readSystem(call);
  // The virtual CD the vendor's own way (a persistent boot from it on iLO is DMTF's override).
  if (device === 'cd' && flavour.bootFromVirtualCd && (await flavour.bootFromVirtualCd(call, sys, mode.persistent))) return undefined;
  let plan = await planBootOverride(call, flavour, sys, device, mode);
  const boot = plan.via === 'system' ? ((sys.doc.Boot ?? {}) as Doc) : plan.pendingBoot;
  const want = plan.body.Boot as Doc;
  if (showsOverride(boot, want, plan.enabled)) {
    call.notes.push(`the boot override was already ${String(want.BootSourceOverrideTarget)} ${plan.enabled}: nothing sent`);
    return { enabled: boot.BootSourceOverrideEnabled === 'Continuous' ? 'Continuous' : plan.enabled };
  }
  const res = await sendPatch(call, plan.path, plan.body, 'the boot override', plan.via === 'system' ? sys.doc : null, 'boot');
  if (res.status === 405 && plan.via === 'system') {
    // AMI and OpenBMC refuse the override on the System and keep it in their settings object;
    // the 405 names it (its MessageArgs), or the system links it (@Redfish.Settings).
    const settings = settingsPathOf(sys.doc) ?? pathInMessage(res.body);
    if (!settings) throw call.client.statusError(res, 'PATCH the boot override', true);
    plan = await planBootOverride(call, flavour, sys, device, mode, settings);
    call.notes.push(`the BMC refused the override on the system (HTTP 405): sent it to its settings object ${settings}`);
    await patchResource(call, plan.path, plan.body, 'the boot override (settings object)', null, 'boot:settings');
  } else {
    checkPatchAnswer(call, res, 'the boot override');
    if (res.status === 202) await awaitTask(call, res, 'the boot override');
  }
  let held: BootOverrideHeld['enabled'] = plan.enabled;
  await pollUntil(call, async () => {
    const readBack = await bootReadBack(call, sys, plan);
    if (typeof readBack !== 'string') held = readBack.enabled;
    return typeof readBack === 'string' ? readBack : true;
  }, `the BMC accepted the boot override ${String(want.BootSourceOverrideTarget)} ${plan.enabled}`);
  return { enabled: held };
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
export async function planBootOverride(call: CallContext, flavour: RedfishFlavour, sys: System, device: BootDevice, mode: BootMode, forceSettings?: string): Promise<PlanWithPending> {
  const target = BOOT_TARGET[device];
  const sysBoot = (sys.doc.Boot ?? null) as Doc | null;
  const settingsPath = forceSettings ?? settingsPathOf(sys.doc);
  let pendingBoot: Doc = {};
  let settingsDoc: Doc | null = null;
  if (settingsPath) {
    const res = await call.client.request('GET', settingsPath, { repeatable: true, what: 'the system\'s settings object' });
    if (res.status === 200 && res.body && !res.body.error) {
      settingsDoc = res.body;
      if (res.headers.etag && !settingsDoc['@odata.etag']) settingsDoc['@odata.etag'] = res.headers.etag;
      pendingBoot = (settingsDoc.Boot ?? {}) as Doc;
    } else call.notes.push(`the system's settings object ${settingsPath} answered HTTP ${res.status}: the override goes to the system`);
  }
  const allowedOf = (boot: Doc | null, key: string) => (boot && Array.isArray(boot[`${key}@Redfish.AllowableValues`]) ? (boot[`${key}@Redfish.AllowableValues`] as unknown[]).map(String) : null);
  const keys = ['BootSourceOverrideTarget', 'BootSourceOverrideEnabled', 'BootSourceOverrideMode'];
  // The BMC keeps its boot override in the settings object when that object's Boot carries the
  // override itself (BlueField's /Settings lists BootSourceOverrideTarget and its values, as
  // NVIDIA's libredfish sends it there) or values the system lacks (AMI's /SD). Dell's Settings
  // (BootSourceOverrideMode null, BootOrder) and Lenovo's Pending (BootOrder) hold no override.
  const holdsOverride = settingsDoc !== null && ('BootSourceOverrideTarget' in pendingBoot || keys.some((key) => allowedOf(pendingBoot, key) !== null && allowedOf(sysBoot, key) === null));
  const via: 'system' | 'settings' = settingsDoc !== null && (forceSettings !== undefined || holdsOverride || !sysBoot) ? 'settings' : 'system';
  if (!sysBoot && via === 'system') throw call.client.error('BMC_UNSUPPORTED', `the system at ${call.client.origin} has no Boot settings`);
  const allowed = (key: string) => (via === 'settings' ? allowedOf(pendingBoot, key) ?? allowedOf(sysBoot, key) : allowedOf(sysBoot, key) ?? allowedOf(pendingBoot, key));

  const targets = allowed('BootSourceOverrideTarget');
  if (targets && !targets.includes(target)) {
    throw call.client.error('BMC_UNSUPPORTED', `the BMC does not offer boot target ${target} (for ${device}); it offers ${targets.join(', ')}`);
  }
  const enables = allowed('BootSourceOverrideEnabled');
  const offered = (value: string) => enables === null || enables.includes(value);
  let enabled: 'Once' | 'Continuous' = mode.persistent ? 'Continuous' : 'Once';
  if (enabled === 'Continuous' && !flavour.continuousAllowed(device)) {
    enabled = 'Once';
    call.notes.push(`${flavour.name}: a Continuous ${device} boot override can boot-loop this firmware; set it Once instead`);
  }
  if (enabled === 'Continuous' && !offered('Continuous')) {
    enabled = 'Once';
    call.notes.push('the BMC offers no Continuous boot override: set it Once');
  } else if (enabled === 'Once' && !offered('Once')) {
    if (!offered('Continuous')) throw call.client.error('BMC_UNSUPPORTED', `the BMC offers neither Once nor Continuous for BootSourceOverrideEnabled (it offers ${enables!.join(', ')})`);
    enabled = 'Continuous';
    call.notes.push('the BMC offers no Once boot override: set it Continuous, which stays until the next override replaces it');
  }
  const override: Doc = { BootSourceOverrideTarget: target, BootSourceOverrideEnabled: enabled };
  const modes = allowed('BootSourceOverrideMode');
  const showsMode = modes !== null || (sysBoot !== null && 'BootSourceOverrideMode' in sysBoot) || 'BootSourceOverrideMode' in pendingBoot;
  const wantMode = mode.uefi === false ? 'Legacy' : 'UEFI';
  if (!flavour.capabilities.bootMode) {
    if (mode.uefi !== undefined) call.notes.push(`${flavour.name} has no BootSourceOverrideMode: the boot mode was left as the firmware has it`);
  } else if (!showsMode) {
    call.notes.push('the BMC shows no BootSourceOverrideMode: the boot mode was left as the firmware has it');
  } else if (modes && !modes.includes(wantMode)) {
    call.notes.push(`the BMC offers no ${wantMode} boot mode (it offers ${modes.join(', ')}): the boot mode was left as the firmware has it`);
  } else override.BootSourceOverrideMode = wantMode;
  const body: Doc = { Boot: override };
  if (via === 'settings') {
    const times = (((sys.doc['@Redfish.Settings'] ?? {}) as Doc).SupportedApplyTimes ?? null) as unknown;
    const list = Array.isArray(times) ? times.map(String) : [];
    const applyTime = ['Immediate', 'OnReset', 'AtMaintenanceWindowStart'].find((time) => list.includes(time) && time !== 'AtMaintenanceWindowStart');
    if (applyTime) body['@Redfish.SettingsApplyTime'] = { ApplyTime: applyTime };
  }
  return { path: via === 'settings' ? settingsPath! : sys.path, via, body, enabled, pendingBoot };
}

/**
 * The evidence that the override is in place: the system reads it back, or (a BMC that keeps
 * pending settings) its settings object holds it until the next reset applies it. Enabled may
 * read Continuous where Once was sent (sushy-tools, older Supermicro: QUIRKS.md "Boot override").
 */
async function bootReadBack(call: CallContext, sys: System, plan: BootOverridePlan): Promise<BootOverrideHeld | string> {
  const want = plan.body.Boot as Doc;
  const held = (boot: Doc): BootOverrideHeld => ({ enabled: boot.BootSourceOverrideEnabled === 'Continuous' ? 'Continuous' : plan.enabled });
  const now = ((await call.client.get(sys.path, 'the system')).Boot ?? {}) as Doc;
  if (showsOverride(now, want, plan.enabled)) {
    if (plan.enabled === 'Once' && now.BootSourceOverrideEnabled === 'Continuous') noteOnce(call, 'the BMC reads the override back as Continuous: it stays until the next override replaces it');
    return held(now);
  }
  const settings = plan.via === 'settings' ? plan.path : settingsPathOf(sys.doc);
  if (settings) {
    const pending = ((await call.client.get(settings, 'the system\'s settings object')).Boot ?? {}) as Doc;
    if (showsOverride(pending, want, plan.enabled)) {
      noteOnce(call, `the override is held in the BMC's pending settings (${settings}): it applies at the next reset`);
      return held(pending);
    }
  }
  return `the boot override reads ${String(now.BootSourceOverrideTarget)} ${String(now.BootSourceOverrideEnabled)}`;
}
