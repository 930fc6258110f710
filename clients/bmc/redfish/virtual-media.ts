/**
 * Virtual media over Redfish: the CD/DVD slots found by following links (the system's own
 * VirtualMedia, else its managers'), an image inserted with #VirtualMedia.InsertMedia (or, on the
 * flavour's patch-mount slots, a PATCH of the slot) after an occupied slot is ejected, and every
 * change read back until it shows.
 */
import { BmcError } from '../driver';
import { awaitTask, idempotencyHeader, patchResource, pollUntil, readSystem, systemManagers, type CallContext, type System } from './call';
import { redfishMessage, type Doc } from './client';
import { isErrorBody, lastSegment, link, memberLinks, str } from './doc';
import { slotEmpty, type RedfishFlavour } from './flavour';

/** A slot as listMediaSlots reads it. */
export interface MediaSlot {
  id: string;
  path: string;
  empty: boolean;
  /** action: #VirtualMedia.InsertMedia; patch: a PATCH of the slot (Lenovo XCC's EXT slots); none: neither. */
  mount: 'action' | 'patch' | 'none';
  insertTarget: string | null;
  ejectTarget: string | null;
}

/** A virtual media slot: its path and the document GET gave. */
export interface SlotDoc { path: string; doc: Doc }

/** The target of #VirtualMedia.<name>, whatever its key's spelling (DMTF's telemetry mockup lists .../Actions/VM.InsertMedia). */
function actionTarget(actions: Doc, name: 'InsertMedia' | 'EjectMedia'): string | null {
  const entry = (actions[`#VirtualMedia.${name}`] ?? Object.entries(actions).find(([key]) => key.endsWith(`.${name}`))?.[1]) as Doc | undefined;
  return typeof entry?.target === 'string' && entry.target ? entry.target : null;
}

/**
 * Whether a slot with no InsertMedia action is mounted by a PATCH of the slot: only the
 * flavour's patch-mount slots (Lenovo XCC's EXT1-4; its Remote and RDOC slots are not, as
 * Lenovo's own xcc_redfish_command skips them).
 */
function patchMountable(flavour: RedfishFlavour, path: string): boolean {
  const prefix = flavour.patchMountSlots;
  return prefix !== null && lastSegment(path).startsWith(prefix);
}

/**
 * The CD/DVD slots, found by following links: the system's own VirtualMedia when it links one
 * that answers (iDRAC 6.00.02+, rackmount, sushy-tools), else its managers' (a manager's link
 * that answers 404 is passed over: sushy-tools links Managers/<id>/VirtualMedia and serves 404
 * there). A slot that lists no MediaTypes counts (Gigabyte's AMI CD1).
 */
export async function cdSlots(call: CallContext, sys: System, noneIsAnswer = false): Promise<SlotDoc[]> {
  const collections: Doc[] = [];
  const tryGet = async (path: string, what: string): Promise<Doc | null> => {
    const res = await call.client.request('GET', path, { repeatable: true, what });
    return res.status === 200 && res.body && !isErrorBody(res.body) ? res.body : null;
  };
  const own = link(sys.doc.VirtualMedia);
  const ownCollection = own ? await tryGet(own, 'the VirtualMedia collection') : null;
  if (ownCollection) collections.push(ownCollection);
  else {
    for (const manager of await systemManagers(call, sys)) {
      const media = link((await call.client.get(manager, 'the manager')).VirtualMedia);
      const collection = media ? await tryGet(media, 'the VirtualMedia collection') : null;
      if (collection) collections.push(collection);
    }
  }
  if (!collections.length) {
    if (noneIsAnswer) return [];
    throw call.client.error('BMC_UNSUPPORTED', `the BMC at ${call.client.origin} has no VirtualMedia under the system or its managers`);
  }
  const slots: SlotDoc[] = [];
  for (const collection of collections) {
    for (const path of memberLinks(collection)) {
      const doc = await tryGet(path, `virtual media ${lastSegment(path)}`);
      if (!doc) continue;
      const types = Array.isArray(doc.MediaTypes) ? (doc.MediaTypes as unknown[]).map(String) : null;
      if (types === null || types.includes('CD') || types.includes('DVD')) slots.push({ path, doc });
    }
  }
  if (!slots.length && !noneIsAnswer) throw call.client.error('BMC_UNSUPPORTED', `the BMC at ${call.client.origin} has no CD/DVD virtual media`);
  return slots;
}

/** The CD/DVD slots as the driver reads them (the interop tests compare them with each captured BMC). */
export async function listMediaSlots(call: CallContext, flavour: RedfishFlavour): Promise<MediaSlot[]> {
  // A BMC with no virtual media (DGX's empty collection, BlueField) lists none: that is an answer here.
  const slots = await cdSlots(call, await readSystem(call), true);
  return slots.map((slot) => {
    const actions = (slot.doc.Actions ?? {}) as Doc;
    const insert = actionTarget(actions, 'InsertMedia');
    const eject = actionTarget(actions, 'EjectMedia');
    const id = str(slot.doc.Id) ?? lastSegment(slot.path);
    const mount: MediaSlot['mount'] = insert ? 'action' : patchMountable(flavour, slot.path) ? 'patch' : 'none';
    return { id, path: slot.path, empty: slotEmpty(slot.doc), mount, insertTarget: insert, ejectTarget: eject };
  });
}

function requireAction(call: CallContext, slot: SlotDoc, name: 'InsertMedia' | 'EjectMedia'): string {
  const target = actionTarget((slot.doc.Actions ?? {}) as Doc, name);
  if (!target) throw call.client.error('BMC_UNSUPPORTED', `virtual media ${lastSegment(slot.path)} offers no #VirtualMedia.${name} action`);
  return target;
}

/** Inserts an image in a CD/DVD slot (ejecting an occupied one first) and reads it back. */
export async function insertMedia(call: CallContext, flavour: RedfishFlavour, imageUrl: string): Promise<void> {
  let url: URL;
  try { url = new URL(imageUrl); } catch { throw new BmcError('BMC_ERROR', 'imageUrl is not an absolute URL'); }
  if (!['http:', 'https:', 'nfs:', 'cifs:', 'smb:'].includes(url.protocol)) throw new BmcError('BMC_UNSUPPORTED', `imageUrl scheme ${url.protocol} is not one a BMC mounts (http, https, nfs, cifs)`);
  const sys = await readSystem(call);
  let slots = await cdSlots(call, sys);
  if (slots.some((slot) => slot.doc.Image === imageUrl && slot.doc.Inserted === true)) {
    call.notes.push('the image was already inserted: nothing sent');
    return;
  }
  // Only slots that take an image: an InsertMedia action, or the flavour's PATCH-mounted ones (first).
  const mountable = slots.filter((slot) => actionTarget((slot.doc.Actions ?? {}) as Doc, 'InsertMedia') || patchMountable(flavour, slot.path));
  if (!mountable.length) throw call.client.error('BMC_UNSUPPORTED', `virtual media ${slots.map((slot) => lastSegment(slot.path)).join(', ')}: none offers #VirtualMedia.InsertMedia`);
  slots = [...mountable.filter((slot) => patchMountable(flavour, slot.path)), ...mountable.filter((slot) => !patchMountable(flavour, slot.path))];
  // A slot that answers 405 cannot take an image (Cisco CIMC blades: another slot can): the next one is tried.
  const refused: string[] = [];
  for (const slot of slots) {
    const name = lastSegment(slot.path);
    const busy = flavour.occupied(slot.doc);
    if (busy) {
      await ejectSlot(call, flavour, slot);
      call.notes.push(`ejected ${name} first: ${busy}, and the BMC refuses InsertMedia over it`);
    }
    if (!(await mountSlot(call, flavour, slot, imageUrl))) {
      refused.push(name);
      continue;
    }
    if (refused.length) call.notes.push(`InsertMedia answered 405 on ${refused.join(', ')}; mounted on ${name} instead`);
    await pollUntil(call, async () => {
      const now = await call.client.get(slot.path, `virtual media ${name}`);
      return now.Image === imageUrl && now.Inserted !== false ? true : `${name} shows ${now.Image ? 'another image' : 'no image'} (Inserted ${String(now.Inserted)})`;
    }, `the BMC accepted the image on ${name}`);
    return;
  }
  throw call.client.error('BMC_UNSUPPORTED', `every CD/DVD slot refused InsertMedia with HTTP 405 (${refused.join(', ')})`);
}

/**
 * Sends the image to one slot: its InsertMedia action, or (patchMountSlots, a slot with no such
 * action) a PATCH of the slot. False when the action answered 405.
 */
async function mountSlot(call: CallContext, flavour: RedfishFlavour, slot: SlotDoc, imageUrl: string): Promise<boolean> {
  const name = lastSegment(slot.path);
  const actions = (slot.doc.Actions ?? {}) as Doc;
  const target = actionTarget(actions, 'InsertMedia');
  if (!target) {
    if (!patchMountable(flavour, slot.path)) throw call.client.error('BMC_UNSUPPORTED', `virtual media ${name} offers no #VirtualMedia.InsertMedia action`);
    await patchResource(call, slot.path, { Image: imageUrl, Inserted: true, WriteProtected: true }, `the image of ${name}`, slot.doc, 'insert');
    call.notes.push(`${flavour.name}: ${name} has no InsertMedia action; mounted by a PATCH of the slot`);
    return true;
  }
  let body = flavour.insertBody(imageUrl);
  const info = link({ '@odata.id': ((actions['#VirtualMedia.InsertMedia'] ?? {}) as Doc)['@Redfish.ActionInfo'] });
  if (info) body = await insertBodyFromInfo(call, info, body, imageUrl);
  let res = await call.client.request('POST', target, { repeatable: true, what: `InsertMedia on ${name}`, body, headers: idempotencyHeader(call, 'insert') });
  if (res.status === 400 && Object.keys(body).length > 1 && /ActionParameterNotSupported|PropertyUnknown|ActionParameterUnknown/.test(redfishMessage(res.body))) {
    // iLO 4 takes only Image (QUIRKS.md; issue 20): the same insert with the one parameter every BMC takes.
    call.notes.push(`InsertMedia on ${name} refused a parameter (${redfishMessage(res.body)}): sent again with Image only`);
    body = { Image: imageUrl };
    res = await call.client.request('POST', target, { repeatable: true, what: `InsertMedia on ${name}`, body, headers: idempotencyHeader(call, 'insert:minimal') });
  }
  if (res.status === 405) return false;
  if (res.status >= 300) throw call.client.statusError(res, `InsertMedia on ${name}`, true);
  if (res.status === 202) await awaitTask(call, res, 'InsertMedia');
  return true;
}

/**
 * The InsertMedia body an action's @Redfish.ActionInfo allows: only the parameters it lists
 * (Image always), and a required TransferProtocolType from the image URL's scheme (Supermicro
 * X13 and newer iDRAC list theirs there: QUIRKS.md "VirtualMedia").
 */
async function insertBodyFromInfo(call: CallContext, infoPath: string, body: Doc, imageUrl: string): Promise<Doc> {
  const res = await call.client.request('GET', infoPath, { repeatable: true, what: 'the InsertMedia ActionInfo' });
  if (res.status !== 200 || !res.body || isErrorBody(res.body)) return body;
  const params = (Array.isArray(res.body.Parameters) ? res.body.Parameters : []) as Doc[];
  if (!params.length) return body;
  const named = new Map(params.filter((param) => typeof param?.Name === 'string').map((param) => [param.Name as string, param]));
  const allowedBody: Doc = { Image: imageUrl };
  for (const [key, value] of Object.entries(body)) if (key !== 'Image' && named.has(key)) allowedBody[key] = value;
  const proto = named.get('TransferProtocolType');
  if (proto && proto.Required === true && allowedBody.TransferProtocolType === undefined) {
    const want = new URL(imageUrl).protocol.replace(':', '').toUpperCase();
    const allowed = Array.isArray(proto.AllowableValues) ? proto.AllowableValues.map(String) : null;
    if (!allowed || allowed.includes(want)) allowedBody.TransferProtocolType = want;
  }
  return allowedBody;
}

async function ejectSlot(call: CallContext, flavour: RedfishFlavour, slot: SlotDoc): Promise<void> {
  const name = lastSegment(slot.path);
  const target = actionTarget((slot.doc.Actions ?? {}) as Doc, 'EjectMedia');
  if (!target && flavour.patchMountSlots !== null) {
    await patchResource(call, slot.path, { Image: null, Inserted: false }, `the image of ${name} (eject)`, slot.doc, `eject:${name}`);
  } else {
    const res = await call.client.request('POST', requireAction(call, slot, 'EjectMedia'), { repeatable: true, what: `EjectMedia on ${name}`, body: {}, headers: idempotencyHeader(call, `eject:${name}`) });
    if (res.status >= 300) {
      const now = await call.client.get(slot.path, `virtual media ${name}`);
      // An eject of an empty slot is an error on some BMCs (iLO); empty is what we wanted.
      if (flavour.ejectOfEmptyError(res) && !flavour.occupied(now)) {
        call.notes.push(`EjectMedia on ${name} said nothing was inserted (HTTP ${res.status}): treated as ejected`);
        return;
      }
      throw call.client.statusError(res, `EjectMedia on ${name}`, true);
    }
    if (res.status === 202) await awaitTask(call, res, 'EjectMedia');
  }
  await pollUntil(call, async () => {
    const now = await call.client.get(slot.path, `virtual media ${name}`);
    const still = flavour.occupied(now);
    return still ? `${name}: ${still}` : true;
  }, `the BMC accepted EjectMedia on ${name}`);
}

/** Ejects every occupied CD/DVD slot and reads each back empty. */
export async function ejectAllMedia(call: CallContext, flavour: RedfishFlavour): Promise<void> {
  const sys = await readSystem(call);
  const busy = (await cdSlots(call, sys)).filter((slot) => flavour.occupied(slot.doc));
  if (!busy.length) call.notes.push('no virtual media was inserted: nothing sent');
  for (const slot of busy) await ejectSlot(call, flavour, slot);
}
