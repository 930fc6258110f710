import { WIPE_STEP } from './ramdisk-steps';
import Ajv, { type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import { AppError, invalidInput } from '../../errors';
import { checkJsonStrings } from '../../limits';
import { explain, withStringLimits } from '../../rest/router';
import type { JsonSchema } from '../../rest/schemas';
import { machineMac } from '../metal/mac';
import { WIPE_MODES } from '../metal/verbs';
import type { BootPurpose, ReportKind } from './entries';

/**
 * What a ramdisk may report, kind by kind: the JSON Schemas the callback routes validate against
 * (and /openapi.json shows), then the rules a schema cannot say (MAC syntax, duplicates, a DCGM
 * verdict that contradicts its tests). A report is stored only once all of it holds, so the engine
 * reads shapes it can trust: this module never decides what a report means for the node.
 */

const str = { type: 'string', minLength: 1 } as const;
const count = { type: 'integer', minimum: 1, maximum: 65536 } as const;
/** Free text a tool printed (DCGM details, a wipe's evidence): longer than a name, still bounded. */
const text = { type: 'string', maxLength: 4096 } as const;

/** The wipe modes a disk can be wiped with (a release with wipe "none" reports no wipe). */
export const WIPE_REPORT_MODES = WIPE_MODES.filter((m) => m !== 'none');
export const DCGM_RESULTS = ['pass', 'fail', 'warn', 'skip'] as const;
export const STEP_STATUSES = ['started', 'succeeded', 'failed'] as const;

export interface InventoryReport {
  /** The SMBIOS system UUID the ramdisk read (lower case). */
  uuid: string;
  nics: { mac: string; name?: string; speedMbps?: number }[];
  cpus: { model: string; cores: number; threads: number }[];
  memoryMiB: number;
  disks: { name: string; serial: string; sizeBytes: number; model?: string }[];
  gpus?: { model: string; serial?: string; uuid?: string; memoryMiB?: number; pciAddress?: string }[];
}
export interface DcgmReport {
  passed: boolean;
  /** dcgmi diag's run level: 1 (quick) to 4 (longest). */
  level: number;
  tests: { name: string; result: (typeof DCGM_RESULTS)[number]; details?: string }[];
}
export interface WipeReport {
  disks: { serial: string; name?: string; mode: (typeof WIPE_REPORT_MODES)[number]; attested: boolean; method: string; evidence?: string }[];
}
export interface StepReport {
  name: string;
  status: (typeof STEP_STATUSES)[number];
  message?: string;
}
export interface HeartbeatReport {
  message?: string;
}
export interface ReportPayloads {
  heartbeat: HeartbeatReport;
  inventory: InventoryReport;
  step: StepReport;
  dcgm: DcgmReport;
  wipe: WipeReport;
}

const object = (properties: Record<string, JsonSchema>, required: string[] = []): JsonSchema => ({
  type: 'object', additionalProperties: false, required, properties,
});

/** Each kind's body, as the callback routes take it. */
export const REPORT_SCHEMAS: Record<ReportKind, JsonSchema> = {
  heartbeat: object({ message: { type: 'string', description: 'What the ramdisk is doing, for the timeline' } }),
  inventory: object({
    uuid: { type: 'string', format: 'uuid', description: 'The SMBIOS system UUID' },
    nics: {
      type: 'array', minItems: 1, maxItems: 256,
      items: object({ mac: { ...str, description: 'aa:bb:cc:dd:ee:ff' }, name: str, speedMbps: { type: 'integer', minimum: 0, maximum: 10_000_000 } }, ['mac']),
    },
    cpus: { type: 'array', minItems: 1, maxItems: 64, items: object({ model: str, cores: count, threads: count }, ['model', 'cores', 'threads']) },
    memoryMiB: { type: 'integer', minimum: 1, maximum: 1 << 30 },
    disks: {
      type: 'array', maxItems: 1024,
      items: object({ name: str, serial: str, sizeBytes: { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER }, model: str }, ['name', 'serial', 'sizeBytes']),
    },
    gpus: {
      type: 'array', maxItems: 64,
      items: object({ model: str, serial: str, uuid: str, memoryMiB: { type: 'integer', minimum: 0, maximum: 1 << 30 }, pciAddress: str }, ['model']),
    },
  }, ['uuid', 'nics', 'cpus', 'memoryMiB', 'disks']),
  step: object({
    name: { ...str, description: 'The ramdisk step, e.g. erase-devices' },
    status: { type: 'string', enum: [...STEP_STATUSES] },
    message: { type: 'string' },
  }, ['name', 'status']),
  dcgm: object({
    passed: { type: 'boolean' },
    level: { type: 'integer', minimum: 1, maximum: 4 },
    tests: { type: 'array', minItems: 1, maxItems: 256, items: object({ name: str, result: { type: 'string', enum: [...DCGM_RESULTS] }, details: text }, ['name', 'result']) },
  }, ['passed', 'level', 'tests']),
  wipe: object({
    disks: {
      type: 'array', minItems: 1, maxItems: 1024,
      items: object({
        serial: str,
        name: str,
        mode: { type: 'string', enum: [...WIPE_REPORT_MODES] },
        attested: { type: 'boolean', description: 'The drive itself confirmed the erase (sanitize status, crypto key rotated)' },
        method: { ...str, description: 'e.g. nvme-format-crypto, ata-secure-erase, blkdiscard' },
        evidence: text,
      }, ['serial', 'mode', 'attested', 'method']),
    },
  }, ['disks']),
};

/**
 * The reports each boot purpose takes besides heartbeat and step: a release boot has no inventory
 * to give and an inspection none to wipe, so a token that leaked from one cannot put the other's
 * evidence into its run.
 */
export const REPORTS_BY_PURPOSE: Record<BootPurpose, readonly ReportKind[]> = {
  inspect: ['inventory'],
  commission: ['inventory', 'dcgm', 'wipe'],
  release: ['wipe'],
  retire: ['wipe'],
  rescue: [],
  deploy: [],
};

export function reportAllowed(purpose: BootPurpose, kind: ReportKind): boolean {
  return kind === 'heartbeat' || kind === 'step' || REPORTS_BY_PURPOSE[purpose].includes(kind);
}

/**
 * Whether a report may end what its run waits for, so it wakes the run (due_at): a
 * heartbeat only for a rescue boot (the rescue workflow waits for the ramdisk's first call), a
 * step report only when a workflow reads it: a deploy's profile steps, and the end of the wipe
 * (WIPE_STEP), both by their outcome, never by their start; anything else always. The others
 * are stored alike and read at the run's next wake-up; waking the run for them only made it
 * look and wait again (in the lifecycle bench, 9 of a machine's 12 reports: the inspection's and
 * the DCGM run's step ends came right after the inventory and the DCGM report they follow, and
 * woke a run already waiting on its next command). A run past its deadline is woken by its own
 * timer either way. A workflow that comes to read another step report must be named here.
 */
export function reportWakesRun(purpose: BootPurpose, kind: ReportKind, payload: unknown): boolean {
  if (kind === 'heartbeat') return purpose === 'rescue';
  if (kind === 'step') {
    const step = payload as { name?: unknown; status?: unknown } | null;
    if (step?.status === 'started') return false;
    return purpose === 'deploy' || step?.name === WIPE_STEP;
  }
  return true;
}

const ajv = new Ajv({ allErrors: false, strict: false });
addFormats(ajv);
const validators = Object.fromEntries(
  Object.entries(REPORT_SCHEMAS).map(([kind, schema]) => [kind, ajv.compile(withStringLimits(schema))]),
) as Record<ReportKind, ValidateFunction>;

function refuseDuplicates(values: readonly string[], field: (i: number) => string, what: string): void {
  const seen = new Set<string>();
  values.forEach((v, i) => {
    if (seen.has(v)) throw invalidInput(field(i), `the same ${what} is reported twice`);
    seen.add(v);
  });
}

/**
 * A report body (already parsed JSON) checked against its kind, with MACs and the UUID normalised:
 * what gets stored, or INVALID_INPUT naming the field (`body.disks[2].serial`). Never repeats a value
 * it refuses beyond what the MAC rule quotes.
 */
export function checkReport<K extends ReportKind>(kind: K, body: unknown): ReportPayloads[K] {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw new AppError('INVALID_INPUT', 'body: must be a JSON object', { field: 'body' });
  const bad = checkJsonStrings(body, 'body');
  if (bad) throw bad;
  const validate = validators[kind];
  if (!validate(body)) throw explain('body', validate.errors![0]!);
  switch (kind) {
    case 'inventory': {
      const inv = body as InventoryReport;
      const nics = inv.nics.map((n, i) => ({ ...n, mac: machineMac(n.mac, `body.nics[${i}].mac`) }));
      refuseDuplicates(nics.map((n) => n.mac), (i) => `body.nics[${i}].mac`, 'MAC');
      refuseDuplicates(inv.disks.map((d) => d.serial), (i) => `body.disks[${i}].serial`, 'disk serial');
      inv.cpus.forEach((c, i) => {
        if (c.threads < c.cores) throw invalidInput(`body.cpus[${i}].threads`, 'must be at least cores');
      });
      return { ...inv, uuid: inv.uuid.toLowerCase(), nics } as ReportPayloads[K];
    }
    case 'wipe': {
      const wipe = body as WipeReport;
      refuseDuplicates(wipe.disks.map((d) => d.serial), (i) => `body.disks[${i}].serial`, 'disk serial');
      return wipe as ReportPayloads[K];
    }
    case 'dcgm': {
      const dcgm = body as DcgmReport;
      const failed = dcgm.tests.findIndex((t) => t.result === 'fail');
      if (dcgm.passed && failed >= 0) throw invalidInput('body.passed', `is true, but body.tests[${failed}] failed`);
      return dcgm as ReportPayloads[K];
    }
    default:
      return body as ReportPayloads[K];
  }
}

/** What the wipe reports of a run prove about the disks that had to be wiped. */
export interface WipeVerdict {
  /** Every expected disk has an attested record in the mode asked (or a stronger one). */
  attested: boolean;
  /** Expected serials with no record at all. */
  missing: string[];
  /** Expected serials whose latest record is not attested. */
  unattested: string[];
  /** Expected serials wiped in another mode than asked (a quick wipe for a secure erase, ...). */
  weaker: string[];
}

/**
 * Whether a disk wiped in `done` mode meets a request for `asked`: any erase is at least a quick
 * one, but a secure erase and a crypto-erase are different promises (the block contents versus
 * the media key), so neither stands in for the other.
 */
function satisfies(asked: (typeof WIPE_REPORT_MODES)[number], done: (typeof WIPE_REPORT_MODES)[number]): boolean {
  return done === asked || asked === 'quick';
}

/**
 * A release's rule, as data the engine can apply: `ready` only with an attested wipe record for
 * every disk of the inventory, in the mode asked. `reports` are the run's wipe payloads oldest
 * first (one per disk, or several disks each); a later record of a disk replaces an earlier one (a
 * retried erase). Disks reported beyond the expected ones do not matter.
 */
export function wipeVerdict(expectedSerials: readonly string[], mode: (typeof WIPE_REPORT_MODES)[number], reports: readonly WipeReport[]): WipeVerdict {
  const latest = new Map<string, WipeReport['disks'][number]>();
  for (const report of reports) for (const disk of report.disks) latest.set(disk.serial, disk);
  const verdict: WipeVerdict = { attested: false, missing: [], unattested: [], weaker: [] };
  for (const serial of expectedSerials) {
    const record = latest.get(serial);
    if (!record) verdict.missing.push(serial);
    else if (!record.attested) verdict.unattested.push(serial);
    else if (!satisfies(mode, record.mode)) verdict.weaker.push(serial);
  }
  verdict.attested = !verdict.missing.length && !verdict.unattested.length && !verdict.weaker.length;
  return verdict;
}
