/**
 * One Redfish driver call and what every part of the driver (power.ts, boot-override.ts,
 * virtual-media.ts, the vendor files) shares within it: the call's context (client, deadlines,
 * idempotency key, notes), finding the node's system, reading and PATCHing a resource with the
 * ETag dance BMCs want, following a 202's task monitor, and polling until a change shows.
 */
import { BmcError, type BmcCallOptions, type BmcEndpoint, type DriverResult } from '../driver';
import { redfishMessage, retryAfterMs, sleep, type Doc, type RedfishClient, type RedfishTransport, type Response } from './client';
import { lastSegment, link, memberLinks } from './doc';

export interface DriverTuning {
  /** Read-back interval while waiting for a power change, a boot override or media to show. */
  pollMs?: number;
  /** Default for BmcCallOptions.verifyDeadlineMs. */
  verifyDeadlineMs?: number;
  /** Longest wait between task monitor polls, whatever Retry-After the BMC suggests. */
  taskPollMaxMs?: number;
}

export const DEFAULT_TUNING: Required<DriverTuning> = { pollMs: 1000, verifyDeadlineMs: 60_000, taskPollMaxMs: 5000 };

/** One driver call: its client, deadline, poll intervals, idempotency key, node options, and what it noted so far. */
export interface CallContext {
  client: RedfishClient;
  deadlineMs: number;
  /** Read-back interval (DriverTuning.pollMs). */
  pollMs: number;
  /** Longest wait between task monitor polls (DriverTuning.taskPollMaxMs). */
  taskPollMaxMs: number;
  idempotencyKey: string | undefined;
  options: Readonly<Record<string, unknown>>;
  notes: string[];
  /** Set when an action was sent and accepted but this BMC shows nothing that proves its effect. */
  unverified: string | null;
}

/** The node's ComputerSystem: its path and the document GET gave. */
export interface System { path: string; doc: Doc }

/** Opens a call's context; BMC_UNSUPPORTED for a driverOptions.systemId that is not a string. */
export function openCall(transport: RedfishTransport, tuning: Required<DriverTuning>, bmc: BmcEndpoint, opts: BmcCallOptions | undefined): CallContext {
  const options = bmc.options ?? {};
  const systemId = options.systemId;
  if (systemId !== undefined && typeof systemId !== 'string') throw new BmcError('BMC_UNSUPPORTED', 'driverOptions.systemId must be a string (the Id of one member of the BMC\'s Systems)');
  return {
    client: transport.client(bmc, opts?.signal),
    deadlineMs: opts?.verifyDeadlineMs ?? tuning.verifyDeadlineMs,
    pollMs: tuning.pollMs,
    taskPollMaxMs: tuning.taskPollMaxMs,
    idempotencyKey: opts?.idempotencyKey,
    options,
    notes: [],
    unverified: null,
  };
}

/** A call's value with the client's and the call's notes (and its unverified reason, if any). */
export function callResult<T>(call: CallContext, value: T): DriverResult<T> {
  return { value, notes: [...call.client.notes, ...call.notes], ...(call.unverified ? { unverified: call.unverified } : {}) };
}

/** Idempotency-Key of one destructive request: the step's key and what this request does. */
export function idempotencyHeader(call: CallContext, part: string): Record<string, string> {
  return call.idempotencyKey ? { 'Idempotency-Key': `${call.idempotencyKey}:${part}` } : {};
}

/** Adds a note unless the call noted the same text already. */
export function noteOnce(call: { notes: string[] }, text: string): void {
  if (!call.notes.includes(text)) call.notes.push(text);
}

// ---- the node's system ----

async function systemPath(call: CallContext): Promise<string> {
  const info = await call.client.root();
  const want = call.options.systemId as string | undefined;
  const known = info.systems.get(want ?? '');
  if (known) return known;
  const systems = link(info.root.Systems);
  if (!systems) throw call.client.error('BMC_UNSUPPORTED', `the BMC at ${call.client.origin} lists no Systems in its service root`);
  const members = memberLinks(await call.client.get(systems, 'the Systems collection'));
  let path: string | undefined;
  if (want) {
    path = members.find((member) => lastSegment(member) === want);
    if (!path) throw call.client.error('BMC_UNSUPPORTED', `driverOptions.systemId "${want}" is not among the BMC's systems (${members.map(lastSegment).join(', ') || 'none'})`);
  } else if (members.length === 1) {
    path = members[0];
  } else {
    throw call.client.error('BMC_UNSUPPORTED', `the BMC at ${call.client.origin} has ${members.length} systems (${members.map(lastSegment).join(', ')}): set driverOptions.systemId to the one this node is`);
  }
  info.systems.set(want ?? '', path!);
  return path!;
}

/** The node's system (driverOptions.systemId, or the BMC's only one), read now. */
export async function readSystem(call: CallContext): Promise<System> {
  const cached = (await call.client.root()).systems.has((call.options.systemId as string | undefined) ?? '');
  const path = await systemPath(call);
  const res = await call.client.request('GET', path, { repeatable: true, what: 'the system' });
  if (res.status === 404 && cached) {
    // The BMC renumbered its systems (firmware update): find the system again, once.
    call.client.forgetSystems();
    return readSystem(call);
  }
  if (res.status !== 200 || !res.body) throw call.client.statusError(res, 'GET the system', true);
  if (res.headers.etag && !res.body['@odata.etag']) res.body['@odata.etag'] = res.headers.etag;
  return { path, doc: res.body };
}

/** The managers of the system (Links.ManagedBy), else every manager the service root lists. */
export async function systemManagers(call: CallContext, sys: System): Promise<string[]> {
  const managers = (((sys.doc.Links ?? {}) as Doc).ManagedBy as unknown[] | undefined ?? []).map(link).filter((path): path is string => path !== null);
  if (managers.length) return managers;
  const all = link((await call.client.root()).root.Managers);
  return all ? memberLinks(await call.client.get(all, 'the Managers collection')) : [];
}

// ---- reading, PATCHing, tasks, polling ----

/** A resource as GET gives it, its ETag header folded into @odata.etag when the body has none. */
export async function readResource(call: CallContext, path: string, what: string): Promise<Doc> {
  const res = await call.client.request('GET', path, { repeatable: true, what });
  if (res.status !== 200 || !res.body) throw call.client.statusError(res, `GET ${what}`, true);
  if (res.headers.etag && !res.body['@odata.etag']) res.body['@odata.etag'] = res.headers.etag;
  return res.body;
}

/**
 * PATCHes a resource: with If-Match once the BMC is known to want it (several refuse a PATCH
 * without one); a 428 (If-Match required) or 412 (our ETag was stale) reads the resource's
 * current @odata.etag and sends once more. A 202 is followed to its task's end.
 */
export async function patchResource(call: CallContext, path: string, body: Doc, what: string, current: Doc | null, keyPart: string): Promise<void> {
  const res = await sendPatch(call, path, body, what, current, keyPart);
  checkPatchAnswer(call, res, what);
  if (res.status === 202) await awaitTask(call, res, what);
}

/** The PATCH's answer, after at most one resend with the current ETag (428, 412). */
export async function sendPatch(call: CallContext, path: string, body: Doc, what: string, current: Doc | null, keyPart: string): Promise<Response> {
  const etagOf = (doc: Doc | null) => (doc && typeof doc['@odata.etag'] === 'string' ? doc['@odata.etag'] : null);
  const send = (etag: string | null) => call.client.request('PATCH', path, {
    repeatable: true, what, body, headers: { ...(etag ? { 'If-Match': etag } : {}), ...idempotencyHeader(call, keyPart) },
  });
  let res = await send(call.client.etagRequired ? etagOf(current) : null);
  if (res.status === 428 || res.status === 412) {
    if (res.status === 428) call.client.markEtagRequired();
    const etag = etagOf(await readResource(call, path, what));
    if (!etag) throw call.client.statusError(res, `PATCH ${what} (the BMC wants If-Match but shows no @odata.etag)`, false);
    call.notes.push(`the BMC answered ${res.status} to ${what}; sent it again with If-Match ${etag}`);
    res = await send(etag);
  }
  return res;
}

/** Throws for a PATCH answer that is not a success: BMC_BUSY for a second 412/428, else the status's error. */
export function checkPatchAnswer(call: CallContext, res: Response, what: string): void {
  if (res.status === 412 || res.status === 428) throw call.client.error('BMC_BUSY', `${what} was refused twice for a changed ETag (HTTP ${res.status}): something else is changing it`, true);
  if (res.status >= 300) throw call.client.statusError(res, `PATCH ${what}`, true);
}

/** A BMC task that ended Exception, Killed, Cancelled or Interrupted: the action may still have been applied. */
export class TaskEnded extends BmcError {}

/** A 202's task monitor (its Location), polled until the task ends or the deadline passes. */
export async function awaitTask(call: CallContext, accepted: Response, what: string): Promise<void> {
  const monitor = accepted.headers.location ?? (typeof accepted.body?.TaskMonitor === 'string' ? accepted.body.TaskMonitor : null);
  if (!monitor) {
    call.notes.push(`${what} answered 202 without a task monitor; verified by reading back`);
    return;
  }
  const until = Date.now() + call.deadlineMs;
  for (;;) {
    const res = await call.client.request('GET', monitor, { repeatable: true, what: `the task monitor of ${what}` });
    const state = typeof res.body?.TaskState === 'string' ? res.body.TaskState : null;
    if (state === 'Exception' || state === 'Killed' || state === 'Cancelled' || state === 'Interrupted') {
      const msg = redfishMessage({ '@Message.ExtendedInfo': res.body?.Messages ?? [] });
      const e = call.client.error('BMC_ERROR', `${what}: the BMC's task ended ${state}${msg ? `: ${msg}` : ''}`);
      throw new TaskEnded(e.code, e.message, false);
    }
    if (res.status === 404) {
      call.notes.push(`the task monitor of ${what} is gone (404); verified by reading back`);
      return;
    }
    const running = res.status === 202 || (res.status === 200 && state !== null && state !== 'Completed');
    if (!running) {
      if (res.status >= 400) throw call.client.statusError(res, `${what}'s task`, false);
      return;
    }
    if (Date.now() >= until) throw call.client.error('BMC_TIMEOUT', `${what}: the BMC's task was still ${state ?? 'running'} after ${call.deadlineMs} ms`, false);
    const hint = retryAfterMs(res.headers['retry-after']) ?? call.pollMs;
    await sleep(Math.min(Math.max(hint, call.pollMs), call.taskPollMaxMs), call.client.signal);
  }
}

/** Polls check() until it is true; its last string says what was seen when the deadline passes. */
export async function pollUntil(call: CallContext, check: () => Promise<true | string>, accepted: string): Promise<void> {
  const end = Date.now() + call.deadlineMs;
  for (;;) {
    const seen = await check();
    if (seen === true) return;
    if (Date.now() >= end) throw call.client.error('BMC_NOT_APPLIED', `${accepted} but after ${call.deadlineMs} ms ${seen}`);
    await sleep(call.pollMs, call.client.signal);
  }
}
