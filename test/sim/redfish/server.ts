/**
 * A Redfish BMC simulator (issue 9 item 6): one node:http server per machine, each on its own
 * 127.0.0.1 port as a real BMC has its own address, so every `@odata.id` and `Actions.*.target` of the
 * mockup is served unchanged and a client that follows links works; plus one admin server
 * (GET /sim/machines) for the state and the destructive-call counts. No dependency beyond node:http.
 */
import http from 'node:http';
import https from 'node:https';
import { randomBytes, randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { loadMockup, members, normalize, type Doc, type MockupName } from './mockup';
import { FLAVOURS, type Flavour, type FlavourName } from './flavours';

export type RedfishPowerState = 'On' | 'Off' | 'PoweringOn' | 'PoweringOff';

export interface MachineOptions {
  id?: string;
  mockup?: MockupName;
  flavour?: FlavourName;
  username?: string;
  password?: string;
  uuid?: string;
  macs?: string[];
  serial?: string;
  powerState?: 'On' | 'Off';
  /** Delay before a Reset's power change shows; a client must read back. */
  applyDelayMs?: number;
  /**
   * PATCH of the ComputerSystem needs If-Match with the current @odata.etag (428 without, 412 on mismatch).
   * Source: NVIDIA/libredfish src/nvidia_viking.rs (set_boot_override: DGX H100's AMI BMC gets the boot PATCH with If-Match of the
   * SD object's @odata.etag); the 428/412 statuses follow RFC 6585/7232, no vendor capture of them found.
   */
  requireEtag?: boolean;
  /**
   * No SessionService: the root has no Links.Sessions and POST Sessions is 405 (basic auth only).
   * Source: mrlhansen/idrac_exporter issue #132 (iDRAC 8: POST SessionService/Sessions answers 405, basic auth works). Every root in
   * ../shared/redfish-captures links Sessions, so the missing link is modelled, not seen.
   */
  noSessions?: boolean;
  /**
   * The Reset's ResetType@Redfish.AllowableValues instead of the mockup's (e.g. one that lists PowerCycle).
   * The vendors' lists differ: redfish-captures/QUIRKS.md, "Reset" (who lists ForceOn, PowerCycle; inline vs @Redfish.ActionInfo).
   */
  resetTypes?: string[];
  /**
   * The system links no EthernetInterfaces, so the BMC reports no MAC: DMTF's public-bladed blades
   * (../shared/redfish-mockups/public-bladed/Systems/529QB945*R6) link none. The machine still
   * PXE-boots from its MACs; a node of it needs PXE discovery.
   */
  noEthernetInterfaces?: boolean;
  /**
   * Where the BMC listens; default 127.0.0.1 on a free port. A BMC known only by its IP (the
   * control-node API's bmc_ip) is reached on 443: e.g. { host: '127.77.0.5', port: 443 } (root only).
   */
  listen?: { host: string; port: number };
}

export interface Faults {
  /** Added to every request. */
  latencyMs?: number;
  /** The next N requests answer 500. */
  fail500Next?: number;
  /** The next N destructive calls (Reset, InsertMedia, EjectMedia, boot PATCH) answer 500, reads go on. */
  fail500Destructive?: number;
  /**
   * Requests answer 503 with Retry-After (for `count` requests, or until cleared); with
   * destructiveOnly, only destructive calls do. Source: ironcore-dev/metal-operator issue #170 (iDRAC: 503 with
   * Base.1.12.ServiceTemporarilyUnavailable "Retry in 30 seconds"; whether it also sends a Retry-After header is not shown).
   */
  unavailable?: { retryAfterS: number; count?: number; destructiveOnly?: boolean } | null;
  /** Requests are read and never answered. */
  hang?: boolean;
  /**
   * Only destructive calls (Reset, InsertMedia, EjectMedia, boot PATCH) hang: the call is received
   * and counted, and never answered, as a BMC whose answer is lost after it acted.
   */
  hangDestructive?: boolean;
  /** Reset, InsertMedia, EjectMedia and the boot PATCH answer 204 and change nothing. */
  lies?: boolean;
  /**
   * Request path as sent -> Location: the path answers 308 (method and body kept) to the Location.
   * Source: ansible/ansible issues #48296 (iLO 4 2.61 redirects /redfish/v1 to /redfish/v1/) and #45513 ("HTTP Error: 308");
   * bb-Ricardo/check_redfish PR #187 (older Supermicro BMCs redirect POST SessionService/Sessions to a trailing slash).
   */
  redirects?: Record<string, string>;
  /**
   * These ResetTypes answer 501 although AllowableValues lists them. Source: the DGX H100 (AMI) lists ForceRestart in
   * redfish-captures/nvidia-libredfish/tests/mockups/nvidia_viking/redfish/v1/Systems/DGX/ResetActionInfo/index.json and its ForceRestart
   * task ended ActionNotSupported (.../TaskService/Tasks/3/index.json: a task there, not a 501).
   */
  notImplementedResetTypes?: string[];
  /**
   * Reset answers 202 with a task monitor; the task completes when the change applies.
   * Source: redfish-captures/nvidia-libredfish/tests/mockups/nvidia_viking/redfish/v1/TaskService/Tasks/1/index.json (DGX H100 AMI: a "Computer Reset"
   * task); DMTF/Redfishtool issue #55 (a service answers ComputerSystem.Reset with 202 and a task).
   */
  asyncTasks?: boolean;
  /**
   * With asyncTasks: the task ends Exception (TaskStatus OK) instead of Completed, after the change
   * was applied or (applied false) without it. NVIDIA DGX H100's AMI BMC ends tasks Exception with
   * TaskStatus OK, Gigabyte's with Critical (../shared/redfish-captures/QUIRKS.md, "Other"; DGX:
   * redfish-captures/nvidia-libredfish/tests/mockups/nvidia_viking/redfish/v1/TaskService/Tasks/3/index.json, a reset whose power did not change).
   */
  taskEnds?: { state: 'Exception'; applied: boolean };
  /**
   * BootSourceOverrideEnabled reads Continuous after any boot PATCH, whatever was sent: sushy-tools
   * ignores it (../shared/peers/README.md), older Supermicro X11/X12 read Continuous (QUIRKS.md;
   * redfish-captures/bmclib/internal/redfishwrapper/fixtures/smc_1.14.0_systems_1.json).
   */
  overrideReadsContinuous?: boolean;
  /** Overrides the machine's applyDelayMs while set (a test that must see the change in flight). */
  applyDelayMs?: number;
}

export type DestructiveKind = 'reset' | 'insertMedia' | 'ejectMedia' | 'bootOverride';
export interface DestructiveCall {
  kind: DestructiveKind;
  /** ResetType, image URL, or the Boot patch as JSON. */
  detail: string;
  idempotencyKey: string | null;
  status: number;
  at: number;
}
export interface Counts {
  reset: number;
  insertMedia: number;
  ejectMedia: number;
  bootOverride: number;
  total: number;
  /**
   * Idempotency keys accepted (2xx) more than once on destructive calls: a call refused before it
   * did anything (401, 412, 428, 503, ...) and sent again under its key is not a duplicate.
   */
  duplicateKeys: string[];
  calls: DestructiveCall[];
}

/** Every request a machine answered (the last 2,000), for tests that check what a client asked. */
export interface RequestRecord {
  method: string;
  path: string;
  status: number;
  at: number;
}

export interface MachineState {
  powerState: RedfishPowerState;
  boot: { target: string; enabled: string; mode: string | null };
  virtualMedia: { id: string; path: string; image: string | null; inserted: boolean; connectedVia: string; bootOnNextServerReset?: boolean }[];
  /** iDRAC flavour: the DellAttributes that choose a boot from the virtual CD. */
  dell?: { firstBootDevice: string; bootOnce: string };
  uuid: string;
  macs: string[];
  serial: string;
  resetsApplied: number;
  nmis: number;
  continuousDiskOverrides: number;
  sessions: number;
  /** TCP connections accepted so far (a client that pools its connections opens few). */
  connections: number;
}

export interface SimMachine {
  id: string;
  /** http://127.0.0.1:<port> (https:// with the tls option), the BMC's address (the service root is url + /redfish/v1). */
  url: string;
  flavour: FlavourName;
  username: string;
  password: string;
  systemPath: string;
  state(): MachineState;
}

/** What a machine boots from when its power comes on (after a Reset that powers it on or cycles it). */
export interface BootEvent {
  /** BootSourceOverrideTarget when the override is Once or Continuous, else 'Hdd' (the machine's own disk). */
  target: string;
  /** The override that was in force; a Once override is consumed by this boot, as on a real BMC. */
  enabled: string;
  /**
   * The image the machine boots: the inserted virtual media image for a boot from the virtual CD,
   * else null (an iDRAC's Cd override boots its physical drive, which is empty).
   */
  image: string | null;
}

export interface RedfishSimOptions {
  /**
   * Called when a machine powers on (a Reset to On or a cycle applies): the simulated machine
   * (test/sim/machine) plays PXE/iPXE and the ramdisk from here.
   */
  onBoot?: (machine: SimMachine, boot: BootEvent) => void;
  machines?: number | MachineOptions[];
  /** Defaults for every machine. */
  defaults?: MachineOptions;
  /** Serve the machines over HTTPS with this key and certificate (the admin server stays http). */
  tls?: { key: string | Buffer; cert: string | Buffer };
}

export interface RedfishSim {
  /** The admin server: GET /sim/machines, GET /sim/machines/:id, POST /sim/machines/:id/faults. */
  url: string;
  machines: SimMachine[];
  setFault(id: string, faults: Faults): void;
  counts(id: string): Counts;
  /** TCP connections the machine's BMC accepted so far. */
  connections(id: string): number;
  requests(id: string): RequestRecord[];
  /** Forgets every session of the machine, as a BMC restart or a session timeout does. */
  expireSessions(id: string): void;
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function redfishError(status: number, messageId: string, message: string, args: string[] = []): Doc {
  return {
    error: {
      code: status >= 500 ? 'Base.1.8.GeneralError' : messageId,
      message,
      '@Message.ExtendedInfo': [
        { '@odata.type': '#Message.v1_1_1.Message', MessageId: messageId, Message: message, MessageArgs: args, Severity: 'Critical', Resolution: 'See the message.' },
      ],
    },
  };
}

const POWER_TARGET: Record<string, 'On' | 'Off' | 'Cycle' | 'Nmi' | 'Toggle'> = {
  On: 'On', ForceOn: 'On', ForceOff: 'Off', GracefulShutdown: 'Off', ForceRestart: 'Cycle', GracefulRestart: 'Cycle',
  PowerCycle: 'Cycle', Nmi: 'Nmi', PushPowerButton: 'Toggle', FullPowerCycle: 'Cycle',
};

class Machine {
  readonly id: string;
  readonly flavour: Flavour;
  readonly username: string;
  readonly password: string;
  readonly docs: Map<string, Doc>;
  readonly systemPath: string;
  readonly resetTarget: string;
  /** Action target path -> the VirtualMedia resource path it acts on. */
  readonly insertTargets = new Map<string, string>();
  readonly ejectTargets = new Map<string, string>();
  /** Every virtual media slot, in collection order. */
  readonly slots: string[] = [];
  /** iDRAC flavour: the DellAttributes resource the manager links. */
  dellAttributesPath: string | null = null;
  readonly applyDelayMs: number;
  readonly requireEtag: boolean;
  faults: Faults = {};
  etagVersion = 1;
  readonly sessions = new Map<string, { id: string; user: string }>();
  readonly tasks = new Map<string, { state: 'Running' | 'Completed' | 'Exception'; resetType: string }>();
  readonly calls: DestructiveCall[] = [];
  readonly requests: RequestRecord[] = [];
  readonly noSessions: boolean;
  readonly listenAt: { host: string; port: number } | undefined;
  connections = 0;
  readonly timers = new Set<NodeJS.Timeout>();
  resetsApplied = 0;
  nmis = 0;
  continuousDiskOverrides = 0;
  url = '';
  server!: http.Server | https.Server;
  /** Set by startRedfishSim: the public view handed to onBoot. */
  onBoot: ((boot: BootEvent) => void) | null = null;

  constructor(index: number, o: MachineOptions) {
    this.id = o.id ?? `m${index}`;
    this.flavour = FLAVOURS[o.flavour ?? 'plain'];
    if (!this.flavour) throw new Error(`unknown flavour ${o.flavour}`);
    this.username = o.username ?? 'admin';
    this.password = o.password ?? 'password';
    this.applyDelayMs = o.applyDelayMs ?? 0;
    this.requireEtag = o.requireEtag ?? false;
    this.noSessions = o.noSessions ?? false;
    this.listenAt = o.listen;
    let docs = loadMockup(o.mockup ?? 'public-rackmount1');
    const systems = members(docs.get('/redfish/v1/Systems'));
    if (!systems[0]) throw new Error('mockup has no ComputerSystem');
    this.systemPath = systems[0];
    if (this.flavour.virtualMediaOnSystem) docs = moveVirtualMediaToSystem(docs, this.systemPath);
    if (this.flavour.patchMountSlots) docs = renameCdSlots(docs, 'EXT');
    this.docs = docs;
    const own = (p: string): Doc => { const d = structuredClone(docs.get(p)!); docs.set(p, d); return d; };
    own(this.systemPath);
    // Sessions are this machine's own, not the mockup's samples.
    for (const k of [...docs.keys()]) if (k.startsWith('/redfish/v1/SessionService/Sessions/')) docs.delete(k);
    if (this.noSessions) {
      const root = own('/redfish/v1');
      delete root.SessionService;
      delete (root.Links as Doc | undefined)?.Sessions;
      for (const k of [...docs.keys()]) if (k.startsWith('/redfish/v1/SessionService')) docs.delete(k);
    }
    const sys = this.system();
    if (o.noEthernetInterfaces) delete sys.EthernetInterfaces;
    sys.UUID = o.uuid ?? randomUUID();
    sys.SerialNumber = o.serial ?? `SIM${String(index).padStart(6, '0')}`;
    sys.PowerState = o.powerState ?? 'Off';
    const boot = (sys.Boot ??= {}) as Doc;
    boot.BootSourceOverrideTarget = 'None';
    boot.BootSourceOverrideEnabled = 'Disabled';
    if (this.flavour.noBootSourceOverrideMode) delete boot.BootSourceOverrideMode;
    else boot.BootSourceOverrideMode ??= 'UEFI';
    delete boot.UefiTargetBootSourceOverride;
    const reset = ((sys.Actions as Doc | undefined)?.['#ComputerSystem.Reset'] ?? null) as Doc | null;
    if (!reset) throw new Error('mockup system has no #ComputerSystem.Reset');
    if (o.resetTypes) {
      const actions = (sys.Actions = structuredClone(sys.Actions)) as Doc;
      const r = actions['#ComputerSystem.Reset'] as Doc;
      delete r['@Redfish.ActionInfo'];
      r['ResetType@Redfish.AllowableValues'] = [...o.resetTypes];
    }
    this.resetTarget = normalize(reset.target as string);
    // MACs: the system's EthernetInterfaces in collection order.
    const nics = members(docs.get(`${this.systemPath}/EthernetInterfaces`)).filter((p) => docs.has(p));
    const macs = o.macs ?? nics.map((_, i) => `52:54:00:${hex(index >> 16)}:${hex(index >> 8)}:${hex((index + i * 0x40) & 0xff)}`);
    nics.forEach((p, i) => {
      const nic = own(p);
      if (macs[i]) { nic.MACAddress = macs[i]; nic.PermanentMACAddress = macs[i]; }
    });
    // Virtual media: empty at start; action targets as the mockup declares them, else the standard
    // ones (none at all where the flavour mounts by PATCH).
    for (const [p, shared] of [...docs]) {
      if (!String(shared['@odata.type'] ?? '').startsWith('#VirtualMedia.') || String(shared['@odata.type']).includes('Collection')) continue;
      const d = own(p);
      d.Image = null; d.ImageName = null; d.Inserted = false; d.ConnectedVia = 'NotConnected';
      this.slots.push(p);
      if (this.flavour.bootOnNextServerReset) d.Oem = { [this.flavour.bootOnNextServerReset]: { BootOnNextServerReset: false } };
      if (this.flavour.patchMountSlots && isCdSlot(d)) {
        delete d.Actions;
        continue;
      }
      const actions = (d.Actions ??= {}) as Doc;
      const ins = (actions['#VirtualMedia.InsertMedia'] ??= { target: `${p}/Actions/VirtualMedia.InsertMedia` }) as Doc;
      const ej = (actions['#VirtualMedia.EjectMedia'] ??= { target: `${p}/Actions/VirtualMedia.EjectMedia` }) as Doc;
      this.insertTargets.set(normalize(ins.target as string), p);
      this.ejectTargets.set(normalize(ej.target as string), p);
    }
    if (this.flavour.dellFirstBootDevice) {
      const managedBy = (((sys.Links ?? {}) as Doc).ManagedBy ?? []) as Doc[];
      const manager = (managedBy[0]?.['@odata.id'] as string | undefined) ?? members(docs.get('/redfish/v1/Managers'))[0];
      if (!manager || !docs.has(manager)) throw new Error('mockup system has no manager for the DellAttributes');
      const m = own(manager);
      this.dellAttributesPath = `${manager}/Oem/Dell/DellAttributes/iDRAC.Embedded.1`;
      m.Links = { ...((m.Links ?? {}) as Doc), Oem: { Dell: { DellAttributes: [{ '@odata.id': this.dellAttributesPath }] } } };
      docs.set(this.dellAttributesPath, {
        '@odata.type': '#DellAttributes.v1_0_0.DellAttributes', '@odata.id': this.dellAttributesPath, Id: 'iDRAC.Embedded.1', Name: 'iDRAC Attributes',
        Attributes: { 'ServerBoot.1.FirstBootDevice': 'Normal', 'VirtualMedia.1.BootOnce': 'Disabled', 'VirtualMedia.1.Attached': 'AutoAttach' },
      });
    }
  }

  dellAttributes(): Doc | null {
    return this.dellAttributesPath ? (this.docs.get(this.dellAttributesPath)!.Attributes as Doc) : null;
  }

  /** The first slot holding an inserted image, and that image. */
  insertedSlot(): { path: string; doc: Doc } | null {
    for (const p of this.slots) {
      const d = this.docs.get(p)!;
      if (isCdSlot(d) && d.Inserted === true && typeof d.Image === 'string') return { path: p, doc: d };
    }
    return null;
  }

  system(): Doc { return this.docs.get(this.systemPath)!; }
  etag(): string { return `W/"${this.etagVersion}"`; }

  allowedResetTypes(): string[] {
    const reset = (this.system().Actions as Doc)['#ComputerSystem.Reset'] as Doc;
    const inline = reset['ResetType@Redfish.AllowableValues'] as string[] | undefined;
    if (inline) return inline;
    const infoPath = reset['@Redfish.ActionInfo'] as string | undefined;
    const info = infoPath ? this.docs.get(normalize(infoPath)) : undefined;
    const param = ((info?.Parameters ?? []) as Doc[]).find((x) => x.Name === 'ResetType');
    return (param?.AllowableValues as string[] | undefined) ?? Object.keys(POWER_TARGET);
  }

  /** The machine came up: report what it boots from, then consume a Once override. */
  booted(): void {
    const boot = this.system().Boot as Doc;
    const enabled = String(boot.BootSourceOverrideEnabled ?? 'Disabled');
    let target = enabled === 'Once' || enabled === 'Continuous' ? String(boot.BootSourceOverrideTarget ?? 'None') : 'Hdd';
    const inserted = this.insertedSlot();
    let image = target === 'Cd' && !this.flavour.dellFirstBootDevice ? ((inserted?.doc.Image as string | undefined) ?? null) : null;
    if (enabled === 'Once') { boot.BootSourceOverrideEnabled = 'Disabled'; this.etagVersion++; }
    // The vendors' own ways to boot the virtual CD come before the override, as their firmware does.
    const dell = this.dellAttributes();
    const hpe = this.flavour.bootOnNextServerReset;
    const hpeFlag = hpe && inserted ? ((inserted.doc.Oem as Doc)[hpe] as Doc) : null;
    if (dell && dell['ServerBoot.1.FirstBootDevice'] === 'VCD-DVD' && inserted) {
      target = 'Cd';
      image = inserted.doc.Image as string;
      if (dell['VirtualMedia.1.BootOnce'] === 'Enabled') { dell['VirtualMedia.1.BootOnce'] = 'Disabled'; dell['ServerBoot.1.FirstBootDevice'] = 'Normal'; }
      this.etagVersion++;
    } else if (hpeFlag?.BootOnNextServerReset === true) {
      target = 'Cd';
      image = inserted!.doc.Image as string;
      hpeFlag.BootOnNextServerReset = false;
      this.etagVersion++;
    }
    this.onBoot?.({ target, enabled, image });
  }

  state(): MachineState {
    const sys = this.system();
    const boot = sys.Boot as Doc;
    const vms: MachineState['virtualMedia'] = [];
    for (const p of this.slots) {
      const d = this.docs.get(p)!;
      const hpe = this.flavour.bootOnNextServerReset ? ((d.Oem as Doc)[this.flavour.bootOnNextServerReset] as Doc).BootOnNextServerReset === true : undefined;
      vms.push({ id: d.Id as string, path: p, image: (d.Image as string | null) ?? null, inserted: d.Inserted === true, connectedVia: d.ConnectedVia as string, ...(hpe === undefined ? {} : { bootOnNextServerReset: hpe }) });
    }
    const dell = this.dellAttributes();
    const nics = members(this.docs.get(`${this.systemPath}/EthernetInterfaces`)).map((p) => this.docs.get(p)?.MACAddress as string).filter(Boolean);
    return {
      powerState: sys.PowerState as RedfishPowerState,
      boot: { target: boot.BootSourceOverrideTarget as string, enabled: boot.BootSourceOverrideEnabled as string, mode: (boot.BootSourceOverrideMode as string | undefined) ?? null },
      virtualMedia: vms, ...(dell ? { dell: { firstBootDevice: dell['ServerBoot.1.FirstBootDevice'] as string, bootOnce: dell['VirtualMedia.1.BootOnce'] as string } } : {}),
      uuid: sys.UUID as string, macs: nics, serial: sys.SerialNumber as string,
      resetsApplied: this.resetsApplied, nmis: this.nmis, continuousDiskOverrides: this.continuousDiskOverrides, sessions: this.sessions.size, connections: this.connections,
    };
  }

  counts(): Counts {
    const c: Counts = { reset: 0, insertMedia: 0, ejectMedia: 0, bootOverride: 0, total: 0, duplicateKeys: [], calls: [...this.calls] };
    const seen = new Map<string, number>();
    for (const call of this.calls) {
      c[call.kind]++; c.total++;
      if (call.idempotencyKey && call.status >= 200 && call.status < 300) seen.set(call.idempotencyKey, (seen.get(call.idempotencyKey) ?? 0) + 1);
    }
    c.duplicateKeys = [...seen].filter(([, n]) => n > 1).map(([k]) => k);
    return c;
  }

  later(ms: number, fn: () => void): void {
    const t = setTimeout(() => { this.timers.delete(t); fn(); }, ms);
    this.timers.add(t);
  }
}

function hex(n: number): string { return (n & 0xff).toString(16).padStart(2, '0'); }

/** iDRAC 6.00.02+: the Manager's VirtualMedia moves under the System (paths and targets rewritten). */
function moveVirtualMediaToSystem(docs: Map<string, Doc>, systemPath: string): Map<string, Doc> {
  const managers = members(docs.get('/redfish/v1/Managers'));
  const from = managers.map((m) => `${m}/VirtualMedia`).find((p) => docs.has(p));
  if (!from) return docs;
  const to = `${systemPath}/VirtualMedia`;
  const out = new Map<string, Doc>();
  for (const [k, v] of docs) {
    const nk = k === from || k.startsWith(`${from}/`) ? to + k.slice(from.length) : k;
    out.set(nk, JSON.parse(JSON.stringify(v).split(`"${from}`).join(`"${to}`)) as Doc);
  }
  for (const m of managers) delete out.get(m)?.VirtualMedia;
  out.get(systemPath)!.VirtualMedia = { '@odata.id': to };
  return out;
}

const isCdSlot = (d: Doc): boolean => Array.isArray(d.MediaTypes) && (d.MediaTypes as unknown[]).some((t) => t === 'CD' || t === 'DVD');

/** Lenovo XCC: the CD/DVD slots are EXT1, EXT2, ... (paths, Ids and every link to them rewritten). */
function renameCdSlots(docs: Map<string, Doc>, prefix: string): Map<string, Doc> {
  const renames: [string, string][] = [];
  for (const [coll, doc] of docs) {
    if (!String(doc['@odata.type'] ?? '').startsWith('#VirtualMediaCollection.')) continue;
    let n = 0;
    for (const p of members(doc)) {
      const d = docs.get(p);
      if (d && isCdSlot(d)) renames.push([p, `${coll}/${prefix}${++n}`]);
    }
  }
  const out = new Map<string, Doc>();
  for (const [k, v] of docs) {
    let text = JSON.stringify(v);
    for (const [from, to] of renames) text = text.split(`"${from}"`).join(`"${to}"`).split(`"${from}/`).join(`"${to}/`);
    const doc = JSON.parse(text) as Doc;
    const hit = renames.find(([from]) => k === from || k.startsWith(`${from}/`));
    const nk = hit ? hit[1] + k.slice(hit[0].length) : k;
    if (hit && nk === hit[1]) {
      doc.Id = nk.split('/').pop();
      doc.Name = `External virtual media ${String(doc.Id)}`;
    }
    out.set(nk, doc);
  }
  return out;
}

/** The If-Match rules of every PATCH: 428 without one when the BMC requires it, 412 when it is stale. */
function precondition(m: Machine, req: http.IncomingMessage): [number, Doc] | null {
  const ifMatch = req.headers['if-match'];
  if (m.requireEtag && !ifMatch) return [428, redfishError(428, 'Base.1.8.PreconditionRequired', 'A precondition header or annotation is required to change the resource: If-Match.')];
  if (ifMatch && ifMatch !== m.etag() && ifMatch !== '*') return [412, redfishError(412, 'Base.1.8.PreconditionFailed', 'The ETag supplied did not match the ETag required to change this resource.')];
  return null;
}

function send(res: http.ServerResponse, status: number, body?: unknown, headers: Record<string, string> = {}): void {
  const text = body === undefined ? '' : JSON.stringify(body);
  res.writeHead(status, { 'OData-Version': '4.0', ...(text ? { 'Content-Type': 'application/json; charset=utf-8' } : {}), ...headers });
  res.end(text);
}

async function readBody(req: http.IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function idempotencyKey(req: http.IncomingMessage): string | null {
  const v = req.headers['idempotency-key'] ?? req.headers['x-idempotency-key'];
  return (Array.isArray(v) ? v[0] : v) ?? null;
}

function authorized(m: Machine, req: http.IncomingMessage): boolean {
  const token = req.headers['x-auth-token'];
  if (typeof token === 'string') return m.sessions.has(token);
  const auth = req.headers.authorization;
  if (!auth?.startsWith('Basic ')) return false;
  const dec = Buffer.from(auth.slice(6), 'base64').toString('utf8');
  const i = dec.indexOf(':');
  return i >= 0 && dec.slice(0, i) === m.username && dec.slice(i + 1) === m.password;
}

const UNAUTHENTICATED = new Set(['/redfish', '/redfish/v1', '/redfish/v1/odata', '/redfish/v1/$metadata']);

async function handle(m: Machine, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
  const f = m.faults;
  const at = Date.now();
  res.on('finish', () => {
    m.requests.push({ method: req.method ?? 'GET', path: normalize(req.url ?? '/'), status: res.statusCode, at });
    if (m.requests.length > 2000) m.requests.splice(0, m.requests.length - 2000);
  });
  if (f.hang) return; // read, never answered; stop() destroys the socket
  if (f.hangDestructive) {
    const kind = destructiveKind(m, req);
    if (kind) {
      await readBody(req);
      m.calls.push({ kind, detail: 'fault:hang', idempotencyKey: idempotencyKey(req), status: 0, at });
      return;
    }
  }
  if (f.latencyMs) await sleep(f.latencyMs);
  const redirect = f.redirects?.[req.url ?? '/'];
  if (redirect) {
    await readBody(req);
    return send(res, 308, undefined, { Location: redirect });
  }
  if (f.unavailable && (!f.unavailable.destructiveOnly || destructiveKind(m, req))) {
    if (f.unavailable.count !== undefined && --f.unavailable.count <= 0) m.faults = { ...f, unavailable: null };
    await readBody(req);
    const kind = destructiveKind(m, req);
    if (kind) m.calls.push({ kind, detail: 'fault:503', idempotencyKey: idempotencyKey(req), status: 503, at });
    return send(res, 503, redfishError(503, 'Base.1.8.ServiceTemporarilyUnavailable', 'The service is temporarily unavailable.', [String(f.unavailable.retryAfterS)]), { 'Retry-After': String(f.unavailable.retryAfterS) });
  }
  if ((f.fail500Next && f.fail500Next > 0) || (f.fail500Destructive && f.fail500Destructive > 0 && destructiveKind(m, req))) {
    if (f.fail500Next && f.fail500Next > 0) f.fail500Next--;
    else f.fail500Destructive!--;
    await readBody(req);
    // A destructive call that failed is still a call received.
    const kind = destructiveKind(m, req);
    if (kind) m.calls.push({ kind, detail: 'fault:500', idempotencyKey: idempotencyKey(req), status: 500, at: Date.now() });
    return send(res, 500, redfishError(500, 'Base.1.8.InternalError', 'The request failed due to an internal service error.'));
  }
  const path = normalize(req.url ?? '/');
  const method = req.method ?? 'GET';
  const body = method === 'GET' || method === 'HEAD' ? '' : await readBody(req);

  if (path === '/redfish' && method === 'GET') return send(res, 200, { v1: '/redfish/v1/' });
  if (path === '/redfish/v1/SessionService/Sessions' && method === 'POST') {
    if (m.noSessions) return send(res, 405, redfishError(405, 'Base.1.8.OperationNotAllowed', 'Sessions are not supported: use basic authentication.'), { Allow: 'GET' });
    return createSession(m, body, res);
  }
  if (!(UNAUTHENTICATED.has(path) && method === 'GET') && !authorized(m, req)) {
    return send(res, 401, redfishError(401, 'Base.1.8.ResourceAtUriUnauthorized', `While accessing the resource at ${path}, the service received an authorization error: wrong or missing credentials.`, [path, 'Unauthorized']), { 'WWW-Authenticate': 'Basic realm="Redfish"' });
  }
  let parsed: Doc = {};
  if (body) {
    try { parsed = JSON.parse(body) as Doc; } catch { return send(res, 400, redfishError(400, 'Base.1.8.MalformedJSON', 'The request body submitted was malformed JSON.')); }
  }

  if (method === 'GET') return get(m, path, res);
  if (method === 'DELETE' && path.startsWith('/redfish/v1/SessionService/Sessions/')) {
    const id = path.split('/').pop()!;
    const tok = [...m.sessions].find(([, s]) => s.id === id)?.[0];
    if (!tok) return send(res, 404, redfishError(404, 'Base.1.8.ResourceMissingAtURI', `The resource at the URI ${path} was not found.`, [path]));
    m.sessions.delete(tok);
    return send(res, 204);
  }
  if (method === 'PATCH' && path === m.systemPath) return patchSystem(m, req, parsed, res);
  if (method === 'POST' && path === m.resetTarget) return reset(m, req, parsed, res);
  if (method === 'PATCH' && path === m.dellAttributesPath) return patchDellAttributes(m, req, parsed, res);
  if (method === 'PATCH' && m.slots.includes(path) && (m.flavour.patchMountSlots || m.flavour.bootOnNextServerReset)) return patchSlot(m, req, path, parsed, res);
  if (method === 'POST' && m.insertTargets.has(path)) return insertMedia(m, req, m.insertTargets.get(path)!, parsed, res);
  if (method === 'POST' && m.ejectTargets.has(path)) return ejectMedia(m, req, m.ejectTargets.get(path)!, res);
  if (m.docs.has(path)) return send(res, 405, redfishError(405, 'Base.1.8.OperationNotAllowed', `${method} is not allowed on ${path}.`), { Allow: 'GET' });
  return send(res, 404, redfishError(404, 'Base.1.8.ResourceMissingAtURI', `The resource at the URI ${path} was not found.`, [path]));
}

function destructiveKind(m: Machine, req: http.IncomingMessage): DestructiveKind | null {
  const path = normalize(req.url ?? '/');
  if (req.method === 'POST' && path === m.resetTarget) return 'reset';
  if (req.method === 'POST' && m.insertTargets.has(path)) return 'insertMedia';
  if (req.method === 'POST' && m.ejectTargets.has(path)) return 'ejectMedia';
  if (req.method === 'PATCH' && (path === m.systemPath || path === m.dellAttributesPath)) return 'bootOverride';
  if (req.method === 'PATCH' && m.slots.includes(path) && (m.flavour.patchMountSlots || m.flavour.bootOnNextServerReset)) return m.flavour.patchMountSlots ? 'insertMedia' : 'bootOverride';
  return null;
}

function createSession(m: Machine, body: string, res: http.ServerResponse): void {
  let cred: Doc = {};
  try { cred = JSON.parse(body || '{}') as Doc; } catch { /* refused below */ }
  if (cred.UserName !== m.username || cred.Password !== m.password) {
    return send(res, 401, redfishError(401, 'Base.1.8.NoValidSession', 'There is no valid session established with the implementation: wrong user name or password.'));
  }
  const id = randomBytes(8).toString('hex');
  const token = randomBytes(24).toString('hex');
  m.sessions.set(token, { id, user: m.username });
  const location = `/redfish/v1/SessionService/Sessions/${id}`;
  send(res, 201, sessionDoc(id, m.username), { 'X-Auth-Token': token, Location: location });
}

function sessionDoc(id: string, user: string): Doc {
  return { '@odata.type': '#Session.v1_7_0.Session', '@odata.id': `/redfish/v1/SessionService/Sessions/${id}`, Id: id, Name: 'User Session', UserName: user };
}

function get(m: Machine, path: string, res: http.ServerResponse): void {
  if (path === '/redfish/v1/SessionService/Sessions') {
    const ms = [...m.sessions.values()].map((s) => ({ '@odata.id': `/redfish/v1/SessionService/Sessions/${s.id}` }));
    return send(res, 200, { '@odata.type': '#SessionCollection.SessionCollection', '@odata.id': path, Name: 'Session Collection', 'Members@odata.count': ms.length, Members: ms });
  }
  if (path.startsWith('/redfish/v1/SessionService/Sessions/')) {
    const s = [...m.sessions.values()].find((x) => x.id === path.split('/').pop());
    if (s) return send(res, 200, sessionDoc(s.id, s.user));
  }
  const monitor = /^\/redfish\/v1\/TaskService\/(TaskMonitors|Tasks)\/([^/]+)$/.exec(path);
  const task = monitor ? m.tasks.get(monitor[2]!) : undefined;
  if (monitor && task) {
    const doc = { '@odata.type': '#Task.v1_7_0.Task', '@odata.id': `/redfish/v1/TaskService/Tasks/${monitor[2]}`, Id: monitor[2], Name: `Reset ${task.resetType}`, TaskState: task.state, TaskStatus: 'OK', PercentComplete: task.state === 'Completed' ? 100 : 50, TaskMonitor: `/redfish/v1/TaskService/TaskMonitors/${monitor[2]}` };
    // A task monitor answers 202 while the task runs, then the operation's result (204 here).
    if (monitor[1] === 'TaskMonitors' && task.state === 'Running') return send(res, 202, doc, { Location: doc.TaskMonitor, 'Retry-After': '1' });
    if (monitor[1] === 'TaskMonitors' && task.state === 'Completed') return send(res, 204);
    if (task.state === 'Exception') Object.assign(doc, { Messages: [{ MessageId: 'TaskEvent.1.0.TaskAborted', MessageArgs: [monitor[2]], Message: `The task with Id '${monitor[2]}' has been aborted.` }] });
    return send(res, 200, doc);
  }
  const doc = m.docs.get(path);
  if (!doc) return send(res, 404, redfishError(404, 'Base.1.8.ResourceMissingAtURI', `The resource at the URI ${path} was not found.`, [path]));
  if (path === m.systemPath || path === m.dellAttributesPath || m.slots.includes(path)) return send(res, 200, { ...doc, '@odata.etag': m.etag() }, { ETag: m.etag() });
  send(res, 200, doc);
}

function patchSystem(m: Machine, req: http.IncomingMessage, body: Doc, res: http.ServerResponse): void {
  const call: DestructiveCall = { kind: 'bootOverride', detail: JSON.stringify(body.Boot ?? body), idempotencyKey: idempotencyKey(req), status: 0, at: Date.now() };
  m.calls.push(call);
  const done = (status: number, b?: unknown, h?: Record<string, string>) => { call.status = status; send(res, status, b, h); };
  const refused = precondition(m, req);
  if (refused) return done(...refused);
  const keys = Object.keys(body);
  if (keys.some((k) => k !== 'Boot') || typeof body.Boot !== 'object' || body.Boot === null) {
    return done(400, redfishError(400, 'Base.1.8.PropertyNotWritable', `Only Boot is writable here; got ${keys.join(', ')}.`, keys));
  }
  const patch = body.Boot as Doc;
  const boot = m.system().Boot as Doc;
  const allowedTargets = (boot['BootSourceOverrideTarget@Redfish.AllowableValues'] as string[] | undefined) ?? ['None', 'Pxe', 'Cd', 'Hdd', 'BiosSetup'];
  const allowed: Record<string, string[]> = {
    BootSourceOverrideTarget: allowedTargets,
    BootSourceOverrideEnabled: ['Disabled', 'Once', 'Continuous'],
    BootSourceOverrideMode: ['UEFI', 'Legacy'],
  };
  if (m.flavour.noBootSourceOverrideMode) delete allowed.BootSourceOverrideMode;
  for (const [k, v] of Object.entries(patch)) {
    if (!allowed[k]) return done(400, redfishError(400, 'Base.1.8.PropertyUnknown', `The property ${k} is not in the list of valid properties for the resource.`, [k]));
    if (!allowed[k].includes(v as string)) return done(400, redfishError(400, 'Base.1.8.PropertyValueNotInList', `The value ${String(v)} for the property ${k} is not in the list of acceptable values.`, [String(v), k]));
  }
  if (m.faults.lies) return done(204);
  Object.assign(boot, patch);
  if (m.faults.overrideReadsContinuous) boot.BootSourceOverrideEnabled = 'Continuous';
  if (boot.BootSourceOverrideEnabled === 'Continuous' && boot.BootSourceOverrideTarget === 'Hdd') m.continuousDiskOverrides++;
  m.etagVersion++;
  done(204, undefined, { ETag: m.etag() });
}

function reset(m: Machine, req: http.IncomingMessage, body: Doc, res: http.ServerResponse): void {
  const type = body.ResetType;
  const call: DestructiveCall = { kind: 'reset', detail: String(type), idempotencyKey: idempotencyKey(req), status: 0, at: Date.now() };
  // Nmi does not change power: not a destructive call for the counts.
  if (type !== 'Nmi') m.calls.push(call);
  const done = (status: number, b?: unknown, h?: Record<string, string>) => { call.status = status; send(res, status, b, h); };
  if (typeof type !== 'string') return done(400, redfishError(400, 'Base.1.8.ActionParameterMissing', 'The action ComputerSystem.Reset requires the parameter ResetType to be present in the request body.', ['ComputerSystem.Reset', 'ResetType']));
  const allowed = m.allowedResetTypes();
  if (!allowed.includes(type) || !POWER_TARGET[type]) {
    return done(400, redfishError(400, 'Base.1.8.ActionParameterValueNotInList', `The value ${type} for the parameter ResetType in the action ComputerSystem.Reset is not in the list of acceptable values.`, [type, 'ResetType', 'ComputerSystem.Reset']));
  }
  if (m.faults.notImplementedResetTypes?.includes(type)) return done(501, redfishError(501, 'Base.1.8.ActionNotSupported', `The action ComputerSystem.Reset with ResetType ${type} is not supported by the resource.`, ['ComputerSystem.Reset']));
  if (m.faults.lies) return done(204);
  const sys = m.system();
  const kind = POWER_TARGET[type]!;
  const from = sys.PowerState as RedfishPowerState;
  const on = from === 'On' || from === 'PoweringOn';
  const target: 'On' | 'Off' | null = kind === 'On' ? 'On' : kind === 'Off' ? 'Off' : kind === 'Cycle' ? (on ? 'On' : null) : kind === 'Toggle' ? (on ? 'Off' : 'On') : null;
  const apply = () => {
    if (kind === 'Nmi') m.nmis++;
    else if (target) {
      sys.PowerState = target; m.resetsApplied++;
      // Only a BMC that reports LastResetTime (rackmount1 does) moves it: a client can tell a restart happened.
      if ('LastResetTime' in sys) sys.LastResetTime = new Date().toISOString();
    }
    m.etagVersion++;
    if (target === 'On') m.booted();
  };
  if (kind === 'Cycle' && on) sys.PowerState = 'PoweringOn';
  else if (target && target !== from) sys.PowerState = target === 'On' ? 'PoweringOn' : 'PoweringOff';
  let taskId: string | null = null;
  if (m.faults.asyncTasks) {
    taskId = randomBytes(6).toString('hex');
    m.tasks.set(taskId, { state: 'Running', resetType: type });
  }
  const ends = taskId ? m.faults.taskEnds : undefined;
  const finish = () => {
    if (!ends || ends.applied) apply();
    else if (target) sys.PowerState = from;
    if (taskId) m.tasks.get(taskId)!.state = ends?.state ?? 'Completed';
  };
  const delayMs = m.faults.applyDelayMs ?? m.applyDelayMs;
  if (delayMs > 0 || taskId) m.later(Math.max(delayMs, 0), finish);
  else finish();
  if (taskId) {
    const monitor = `/redfish/v1/TaskService/TaskMonitors/${taskId}`;
    return done(202, { '@odata.type': '#Task.v1_7_0.Task', '@odata.id': `/redfish/v1/TaskService/Tasks/${taskId}`, Id: taskId, TaskState: 'Running', TaskMonitor: monitor }, { Location: monitor, 'Retry-After': '1' });
  }
  done(204);
}

/** iDRAC: the DellAttributes that choose the first boot device (VCD-DVD: the virtual CD) and whether once. */
function patchDellAttributes(m: Machine, req: http.IncomingMessage, body: Doc, res: http.ServerResponse): void {
  const call: DestructiveCall = { kind: 'bootOverride', detail: JSON.stringify(body), idempotencyKey: idempotencyKey(req), status: 0, at: Date.now() };
  m.calls.push(call);
  const done = (status: number, b?: unknown, h?: Record<string, string>) => { call.status = status; send(res, status, b, h); };
  const refused = precondition(m, req);
  if (refused) return done(...refused);
  const attrs = body.Attributes;
  if (Object.keys(body).some((k) => k !== 'Attributes') || typeof attrs !== 'object' || attrs === null || Array.isArray(attrs)) {
    return done(400, redfishError(400, 'Base.1.8.PropertyNotWritable', 'Only Attributes is writable here.', Object.keys(body)));
  }
  const allowed: Record<string, string[]> = {
    'ServerBoot.1.FirstBootDevice': ['Normal', 'PXE', 'HDD', 'BIOS', 'VCD-DVD', 'VFDD', 'F10', 'F11'],
    'VirtualMedia.1.BootOnce': ['Enabled', 'Disabled'],
    'VirtualMedia.1.Attached': ['Attached', 'Detached', 'AutoAttach'],
  };
  for (const [k, v] of Object.entries(attrs as Doc)) {
    if (!allowed[k]) return done(400, redfishError(400, 'Base.1.8.PropertyUnknown', `The property ${k} is not in the list of valid properties for the resource.`, [k]));
    if (!allowed[k].includes(v as string)) return done(400, redfishError(400, 'Base.1.8.PropertyValueNotInList', `The value ${String(v)} for the property ${k} is not in the list of acceptable values.`, [String(v), k]));
  }
  if (m.faults.lies) return done(204);
  Object.assign(m.dellAttributes()!, attrs);
  m.etagVersion++;
  done(204, undefined, { ETag: m.etag() });
}

/**
 * A PATCH of a virtual media slot: Lenovo XCC mounts or clears an image this way (its slots have
 * no actions); HPE iLO sets Oem.<Hpe|Hp>.BootOnNextServerReset on an inserted slot.
 */
function patchSlot(m: Machine, req: http.IncomingMessage, vmPath: string, body: Doc, res: http.ServerResponse): void {
  const vm = m.docs.get(vmPath)!;
  const mount = Boolean(m.flavour.patchMountSlots) && isCdSlot(vm);
  const image = typeof body.Image === 'string' && body.Image ? body.Image : null;
  const call: DestructiveCall = { kind: mount ? (image ? 'insertMedia' : 'ejectMedia') : 'bootOverride', detail: mount ? String(image) : JSON.stringify(body), idempotencyKey: idempotencyKey(req), status: 0, at: Date.now() };
  m.calls.push(call);
  const done = (status: number, b?: unknown, h?: Record<string, string>) => { call.status = status; send(res, status, b, h); };
  const refused = precondition(m, req);
  if (refused) return done(...refused);
  const keys = Object.keys(body);
  if (mount) {
    const bad = keys.find((k) => !['Image', 'Inserted', 'WriteProtected', 'TransferProtocolType'].includes(k));
    if (bad) return done(400, redfishError(400, 'Base.1.8.PropertyUnknown', `The property ${bad} is not in the list of valid properties for the resource.`, [bad]));
    if (body.Image !== null && !image) return done(400, redfishError(400, 'Base.1.8.PropertyValueTypeError', 'The value for the property Image is of a different type than the property can accept.', [String(body.Image), 'Image']));
    if (m.faults.lies) return done(204);
    if (image) {
      vm.Image = image; vm.ImageName = image.split('/').pop() ?? image;
      vm.Inserted = body.Inserted !== false; vm.WriteProtected = body.WriteProtected ?? true;
      vm.ConnectedVia = vm.Inserted ? 'URI' : 'NotConnected';
    } else {
      vm.Image = null; vm.ImageName = null; vm.Inserted = false; vm.ConnectedVia = 'NotConnected';
    }
    m.etagVersion++;
    return done(204, undefined, { ETag: m.etag() });
  }
  const vendor = m.flavour.bootOnNextServerReset;
  const flag = vendor ? ((body.Oem as Doc | undefined)?.[vendor] as Doc | undefined) : undefined;
  if (!vendor || keys.some((k) => k !== 'Oem') || !flag || Object.keys(body.Oem as Doc).some((k) => k !== vendor)
      || Object.keys(flag).some((k) => k !== 'BootOnNextServerReset') || typeof flag.BootOnNextServerReset !== 'boolean') {
    return done(400, redfishError(400, 'Base.1.8.PropertyNotWritable', `Only Oem.${vendor ?? '(none)'}.BootOnNextServerReset is writable here.`, keys));
  }
  if (flag.BootOnNextServerReset && vm.Inserted !== true) return done(400, redfishError(400, 'iLO.2.15.UnableToModifyDuringNoMedia', 'BootOnNextServerReset cannot be set: no media is inserted.'));
  if (m.faults.lies) return done(204);
  ((vm.Oem as Doc)[vendor] as Doc).BootOnNextServerReset = flag.BootOnNextServerReset;
  m.etagVersion++;
  done(204, undefined, { ETag: m.etag() });
}

function insertMedia(m: Machine, req: http.IncomingMessage, vmPath: string, body: Doc, res: http.ServerResponse): void {
  const call: DestructiveCall = { kind: 'insertMedia', detail: String(body.Image), idempotencyKey: idempotencyKey(req), status: 0, at: Date.now() };
  m.calls.push(call);
  const done = (status: number, b?: unknown) => { call.status = status; send(res, status, b); };
  const vm = m.docs.get(vmPath)!;
  const cdSlots = m.slots.filter((p) => isCdSlot(m.docs.get(p)!));
  if (m.flavour.firstCdSlotRefuses405 && cdSlots.length > 1 && vmPath === cdSlots[0]) {
    return done(405, redfishError(405, 'Base.1.8.OperationNotAllowed', `InsertMedia is not allowed on ${vmPath}: this slot is reserved for the KVM console.`));
  }
  if (typeof body.Image !== 'string' || !body.Image) return done(400, redfishError(400, 'Base.1.8.ActionParameterMissing', 'The action VirtualMedia.InsertMedia requires the parameter Image to be present in the request body.', ['VirtualMedia.InsertMedia', 'Image']));
  if (m.flavour.insertAcceptsOnlyImage) {
    const extra = Object.keys(body).filter((k) => k !== 'Image');
    if (extra.length) return done(400, redfishError(400, 'Base.1.8.ActionParameterNotSupported', `The parameter ${extra[0]} for the action VirtualMedia.InsertMedia is not supported on the target resource.`, [extra[0]!, 'VirtualMedia.InsertMedia']));
  }
  if (m.flavour.refuseInsertWhileConnected && vm.Inserted === true) {
    return done(500, redfishError(500, 'IDRAC.2.8.VRM0012', 'The requested operation cannot be completed because the Virtual Media image is already connected.'));
  }
  if (m.flavour.refuseInsertWhileImageSet && vm.Image) {
    return done(400, redfishError(400, 'Base.1.8.ActionNotSupported', 'Virtual media is already mounted: eject the current image first.', ['VirtualMedia.InsertMedia']));
  }
  if (m.faults.lies) return done(204);
  vm.Image = body.Image;
  vm.ImageName = body.Image.split('/').pop() ?? body.Image;
  vm.Inserted = body.Inserted === undefined ? true : body.Inserted === true;
  vm.WriteProtected = body.WriteProtected ?? true;
  // Staged but not inserted (Inserted: false) is not connected yet.
  vm.ConnectedVia = vm.Inserted ? 'URI' : 'NotConnected';
  done(204);
}

function ejectMedia(m: Machine, req: http.IncomingMessage, vmPath: string, res: http.ServerResponse): void {
  const vm = m.docs.get(vmPath)!;
  const call: DestructiveCall = { kind: 'ejectMedia', detail: String(vm.Image), idempotencyKey: idempotencyKey(req), status: 0, at: Date.now() };
  m.calls.push(call);
  const done = (status: number, b?: unknown) => { call.status = status; send(res, status, b); };
  if (m.flavour.ejectFailsWhenEmpty && vm.Inserted !== true && !vm.Image) {
    return done(400, redfishError(400, 'iLO.2.15.UnableToEject', 'Unable to eject the virtual media: no media is inserted.'));
  }
  if (m.faults.lies) return done(204);
  vm.Image = null; vm.ImageName = null; vm.Inserted = false; vm.ConnectedVia = 'NotConnected';
  done(204);
}

function listen(server: http.Server | https.Server, scheme: 'http' | 'https' = 'http', at: { host: string; port: number } = { host: '127.0.0.1', port: 0 }): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(at.port, at.host, () => {
      const port = (server.address() as AddressInfo).port;
      resolve(`${scheme}://${at.host}${(scheme === 'https' && port === 443) || (scheme === 'http' && port === 80) ? '' : `:${port}`}`);
    });
  });
}

function close(server: http.Server | https.Server): Promise<void> {
  return new Promise((resolve) => { server.close(() => resolve()); server.closeAllConnections(); });
}

export async function startRedfishSim(opts: RedfishSimOptions = {}): Promise<RedfishSim> {
  const list: MachineOptions[] = Array.isArray(opts.machines) ? opts.machines : Array.from({ length: opts.machines ?? 1 }, () => ({}));
  const machines = list.map((o, i) => new Machine(i, { ...opts.defaults, ...o }));
  const byId = new Map(machines.map((m) => [m.id, m]));
  if (byId.size !== machines.length) throw new Error('machine ids must be unique');
  const servers: (http.Server | https.Server)[] = [];
  const lookup = (id: string) => { const m = byId.get(id); if (!m) throw new Error(`no simulated machine ${id}`); return m; };
  const view = (m: Machine) => ({ id: m.id, url: m.url, flavour: m.flavour.name, systemPath: m.systemPath, faults: m.faults, state: m.state(), counts: m.counts() });
  try {
    for (const m of machines) {
      const onRequest = (req: http.IncomingMessage, res: http.ServerResponse) => { handle(m, req, res).catch((e: unknown) => { if (!res.headersSent) send(res, 500, redfishError(500, 'Base.1.8.InternalError', String(e))); }); };
      m.server = opts.tls ? https.createServer({ key: opts.tls.key, cert: opts.tls.cert }, onRequest) : http.createServer(onRequest);
      m.server.on(opts.tls ? 'secureConnection' : 'connection', () => { m.connections++; });
      servers.push(m.server);
      m.url = await listen(m.server, opts.tls ? 'https' : 'http', m.listenAt);
    }
    const admin = http.createServer((req, res) => {
      void (async () => {
        const p = normalize(req.url ?? '/');
        const mm = /^\/sim\/machines\/([^/]+)(\/faults)?$/.exec(p);
        if (p === '/sim/machines' && req.method === 'GET') return send(res, 200, machines.map(view));
        if (mm && !mm[2] && req.method === 'GET' && byId.has(mm[1]!)) return send(res, 200, view(byId.get(mm[1]!)!));
        if (mm && mm[2] && req.method === 'POST' && byId.has(mm[1]!)) {
          byId.get(mm[1]!)!.faults = JSON.parse((await readBody(req)) || '{}') as Faults;
          return send(res, 204);
        }
        send(res, 404, { error: 'not found' });
      })().catch((e: unknown) => send(res, 400, { error: String(e) }));
    });
    servers.push(admin);
    const url = await listen(admin);
    const publicMachines: SimMachine[] = machines.map((m) => ({ id: m.id, url: m.url, flavour: m.flavour.name, username: m.username, password: m.password, systemPath: m.systemPath, state: () => m.state() }));
    if (opts.onBoot) {
      const onBoot = opts.onBoot;
      machines.forEach((m, i) => { m.onBoot = (boot) => onBoot(publicMachines[i]!, boot); });
    }
    return {
      url,
      machines: publicMachines,
      setFault: (id, faults) => { lookup(id).faults = structuredClone(faults); },
      counts: (id) => lookup(id).counts(),
      connections: (id) => lookup(id).connections,
      requests: (id) => [...lookup(id).requests],
      expireSessions: (id) => { lookup(id).sessions.clear(); },
      stop: async () => {
        for (const m of machines) { for (const t of m.timers) clearTimeout(t); m.timers.clear(); }
        await Promise.all(servers.map(close));
      },
    };
  } catch (e) {
    await Promise.all(servers.filter((s) => s.listening).map(close));
    throw e;
  }
}
