import { MAX_BODY_BYTES } from '../../http/body';
import { withStringLimits } from '../../rest/router';
import { BOOT_PURPOSES, REPORT_KINDS, type ReportKind } from './entries';
import { REPORT_SCHEMAS } from './reports';
import { HEARTBEAT_SECONDS, REPORT_PATHS } from './routes';

/**
 * The ramdisk callbacks in /openapi.json: they are not GraphQL-backed routes (a ramdisk holds a
 * boot token, not an API token), so they are described here, beside the handlers. `GET /boot/ipxe`
 * is firmware's, answers text and never 401: docs/boot.md describes it.
 */

const EXAMPLE_ENTRY = 'boot_01936f3e-6c1a-7b2e-9f40-5d8e2a1c7b90';
const EXAMPLE_REQUEST_ID = '6f1c2e0a-9b7d-4c1e-8a55-3d2f7e9b1a40';

export const BOOT_SECURITY_SCHEME = {
  type: 'http',
  scheme: 'bearer',
  description: 'The per-boot token of a boot entry (mbt_...), from the metal.token kernel argument of the iPXE script: each fetch of the script mints a new one and revokes the last.',
};

const EXAMPLES: Record<ReportKind, Record<string, unknown>> = {
  heartbeat: { message: 'rescue shell up' },
  inventory: {
    uuid: '3a8f2c71-5b0d-4e6a-9c13-7d2e4f8a1b06',
    nics: [{ mac: '52:54:00:12:34:56', name: 'eno1', speedMbps: 25000 }],
    cpus: [{ model: 'Multi-Core Intel(R) Xeon(R) processor 7xxx Series', cores: 8, threads: 16 }],
    memoryMiB: 32768,
    disks: [{ name: 'sda', serial: 'S3EWNX0K123456', sizeBytes: 899527000000, model: 'Contoso 3000GT8' }],
    gpus: [{ model: 'NVIDIA H100 80GB HBM3', serial: '1652923012345', memoryMiB: 81559, pciAddress: '0000:1b:00.0' }],
  },
  step: { name: 'erase-devices', status: 'started', message: 'sanitizing 2 disks' },
  dcgm: { passed: true, level: 1, tests: [{ name: 'software', result: 'pass' }, { name: 'pcie', result: 'pass', details: 'PCIe link Gen5 x16' }] },
  wipe: { disks: [{ serial: 'S3EWNX0K123456', name: 'sda', mode: 'quick', attested: true, method: 'blkdiscard', evidence: 'discard of 899527000000 bytes verified by read-back' }] },
};

const DESCRIPTIONS: Record<ReportKind, string> = {
  heartbeat: 'The ramdisk is up (rescue keeps calling every heartbeatSeconds).',
  inventory: 'What the inspection ramdisk found. The engine compares it with the node (and, with trustProvisioningNetwork, checks the UUID and NICs) before anything is written to the node: this route only stores it.',
  step: 'A ramdisk step started, succeeded or failed, for the timeline.',
  dcgm: 'The DCGM diagnostics (dcgmi diag -r <level>): passed is false when any test failed.',
  wipe: 'One record per disk wiped: a release reaches ready only with an attested record for every disk of the inventory.',
};

export function callbackError(status: number, code: string, message: string, description: string, details?: Record<string, unknown>) {
  return [String(status), {
    description,
    content: {
      'application/json': {
        schema: { $ref: '#/components/schemas/Error' },
        examples: { [code]: { summary: code, value: { error: { code, message, requestId: EXAMPLE_REQUEST_ID, ...(details ? { details } : {}) } } } },
      },
    },
  }] as const;
}

/** Any callback answers 503 while the database is down or cannot write (issue 21 item 1): nothing was stored; try again after Retry-After. */
export const databaseUnavailable = callbackError(503, 'UPSTREAM_UNAVAILABLE', 'the database is unavailable: try again after Retry-After',
  'UPSTREAM_UNAVAILABLE with details.upstream "database" (unreachable, or its connection was lost), or STORAGE_UNAVAILABLE (it cannot write): nothing was stored; try again after the Retry-After header\'s seconds', { upstream: 'database' });

const entryParam = {
  name: 'entryId',
  in: 'path',
  required: true,
  schema: { type: 'string', maxLength: 128, description: 'The boot entry (metal.entry in the kernel arguments)' },
  example: EXAMPLE_ENTRY,
};

const unauthenticated = callbackError(401, 'UNAUTHENTICATED', 'a valid boot token for this boot entry is required',
  'UNAUTHENTICATED: no boot token, or one that is unknown, expired, revoked (a newer fetch of the script, the run ended, the node was retired) or of another boot entry; nothing was changed');
const internal = callbackError(500, 'INTERNAL', 'internal error', 'INTERNAL: a fault of the service: quote the requestId');

export function bootOpenApiPaths(): Record<string, Record<string, unknown>> {
  const paths: Record<string, Record<string, unknown>> = {};
  paths['/boot/v1/entries/{entryId}/instructions'] = {
    get: {
      operationId: 'BootInstructions',
      summary: 'What this boot of the ramdisk is to do',
      description: 'The boot entry\'s purpose and params (wipe mode, DCGM level, expected disks; never a secret) and the reports it takes.',
      tags: ['boot'],
      security: [{ bootToken: [] }],
      parameters: [entryParam],
      responses: Object.fromEntries([
        ['200', {
          description: 'OK',
          content: {
            'application/json': {
              schema: {
                type: 'object',
                required: ['entryId', 'purpose', 'params', 'expiresAt', 'reports', 'heartbeatSeconds'],
                properties: {
                  entryId: { type: 'string' },
                  purpose: { type: 'string', enum: [...BOOT_PURPOSES] },
                  params: { type: 'object' },
                  expiresAt: { type: 'string', format: 'date-time' },
                  reports: { type: 'array', items: { type: 'string', enum: [...REPORT_KINDS] } },
                  heartbeatSeconds: { type: 'integer' },
                },
              },
              example: { entryId: EXAMPLE_ENTRY, purpose: 'release', params: { wipe: 'secure-erase' }, expiresAt: '2026-12-01T21:00:00.000Z', reports: ['heartbeat', 'step', 'wipe'], heartbeatSeconds: HEARTBEAT_SECONDS },
            },
          },
        }],
        callbackError(400, 'INVALID_INPUT', 'query.verbose: is not a known field', 'INVALID_INPUT: a query parameter or a body (this route takes neither)', { field: 'query.verbose' }),
        unauthenticated,
        internal,
        databaseUnavailable,
      ]),
    },
  };
  for (const [segment, kind] of Object.entries(REPORT_PATHS)) {
    const schema = withStringLimits(REPORT_SCHEMAS[kind]);
    const required = (schema.required ?? []) as string[];
    paths[`/boot/v1/entries/{entryId}/${segment}`] = {
      post: {
        operationId: `BootReport${kind[0]!.toUpperCase()}${kind.slice(1)}`,
        summary: `Report ${kind === 'step' ? 'a step' : kind === 'heartbeat' ? 'a heartbeat' : kind === 'inventory' ? 'the inventory' : kind === 'dcgm' ? 'DCGM diagnostics' : 'per-disk wipe results'}`,
        description: `${DESCRIPTIONS[kind]} Stored with the entry's workflow run, which it wakes (due_at), in one transaction.`,
        tags: ['boot'],
        security: [{ bootToken: [] }],
        parameters: [entryParam],
        requestBody: { required: true, content: { 'application/json': { schema, example: EXAMPLES[kind] } } },
        responses: Object.fromEntries([
          ['201', {
            description: 'Created',
            content: {
              'application/json': {
                schema: {
                  type: 'object', required: ['report'],
                  properties: { report: { type: 'object', required: ['id', 'kind', 'createdAt'], properties: { id: { type: 'string' }, kind: { type: 'string', enum: [...REPORT_KINDS] }, createdAt: { type: 'string', format: 'date-time' } } } },
                },
                example: { report: { id: '4182', kind, createdAt: '2026-12-01T19:02:11.480Z' } },
              },
            },
          }],
          callbackError(400, 'INVALID_INPUT', required.length ? `body.${required[0]}: is required` : 'body.colour: is not a known field',
            'INVALID_INPUT: malformed JSON, a wrong type, an unknown field, a NUL or lone surrogate, nesting past 32 levels; the message names the field first', { field: required.length ? `body.${required[0]}` : 'body.colour' }),
          unauthenticated,
          // Heartbeats and steps are taken from every boot; the other kinds only from some purposes.
          ...(kind === 'heartbeat' || kind === 'step' ? [] : [callbackError(409, 'INVALID_STATE', `a rescue boot takes no ${kind} report`,
            'INVALID_STATE: this boot\'s purpose takes no report of this kind (instructions.reports lists those it takes)', { purpose: 'rescue', reports: ['heartbeat', 'step'] })]),
          callbackError(413, 'INVALID_INPUT', `body: larger than ${MAX_BODY_BYTES} bytes`, `INVALID_INPUT: the body is over ${MAX_BODY_BYTES} bytes`, { field: 'body', limit: MAX_BODY_BYTES }),
          internal,
          databaseUnavailable,
        ]),
      },
    };
  }
  return paths;
}
