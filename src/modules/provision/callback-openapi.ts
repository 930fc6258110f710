import { MAX_BODY_BYTES } from '../../http/body';
import { callbackError, databaseUnavailable } from '../boot/openapi';
import { STEP_STATES } from './callbacks';

/**
 * /openapi.json's entries for the installer's callbacks (callback-routes.ts), which the route table
 * does not hold: their callers have a job's callback token, not an API token.
 */

export const INSTALLER_SECURITY_SCHEME = {
  type: 'http',
  scheme: 'bearer',
  description: 'The job\'s callback token: written into the job\'s ISO (metal/callback-token in its second initrd) and, for the first boot, into the installed system. It ends with the job.',
};

const EXAMPLE_JOB = 'wr_01KB3Q9XK7F2M4N6P8R0T2V4X7';
const jobParam = { name: 'id', in: 'path', required: true, schema: { type: 'string', maxLength: 128, description: 'Job ID: the job_id provision answered with, which the job\'s ISO carries (for a new BMC, the enrollment that began the job; its install run\'s id is taken too)' }, example: EXAMPLE_JOB };
const unauthenticated = callbackError(401, 'UNAUTHENTICATED', 'the job\'s callback token (the one its ISO carries) is required',
  'UNAUTHENTICATED: no callback token, or one that is unknown, of another job, or of a job that ended (its ISO was revoked); nothing was changed');
const invalid = (field: string, message: string) => callbackError(400, 'INVALID_INPUT', `${field}: ${message}`,
  'INVALID_INPUT: malformed JSON, a wrong type, an unknown field, nesting past 32 levels; the message names the field first', { field });
const tooBig = callbackError(413, 'INVALID_INPUT', `body: larger than ${MAX_BODY_BYTES} bytes`, `INVALID_INPUT: the body is over ${MAX_BODY_BYTES} bytes`, { field: 'body', limit: MAX_BODY_BYTES });
const internal = callbackError(500, 'INTERNAL', 'internal error', 'INTERNAL: a fault of the service: quote the requestId');

const stored = (kind: string) => ['200', {
  description: 'Stored with the job, which it wakes',
  content: {
    'application/json': {
      schema: {
        type: 'object', required: ['success', 'job_id', 'kind', 'report_id', 'created_at'],
        properties: { success: { type: 'boolean' }, job_id: { type: 'string' }, kind: { type: 'string' }, report_id: { type: 'string' }, created_at: { type: 'string', format: 'date-time' } },
      },
      example: { success: true, job_id: EXAMPLE_JOB, kind, report_id: '912', created_at: '2026-12-02T04:40:00.000Z' },
    },
  },
}] as const;

function post(operationId: string, summary: string, description: string, schema: Record<string, unknown>, example: Record<string, unknown>, kind: string, firstRequired: string, withJob: boolean) {
  return {
    post: {
      operationId, summary, description, tags: ['controlnode'],
      security: [{ installerToken: [] }],
      parameters: withJob ? [jobParam] : [],
      requestBody: { required: true, content: { 'application/json': { schema, example } } },
      responses: Object.fromEntries([stored(kind), invalid(`body.${firstRequired}`, 'is required'), unauthenticated, tooBig, internal, databaseUnavailable]),
    },
  };
}

export function installerOpenApiPaths(): Record<string, Record<string, unknown>> {
  return {
    '/controlnode/job/{id}/step': post('ControlNodeJobStep', 'Receive an install step status report from the live ISO',
      'Called by the provisioning script running on the target node to report each OS installation step. Broadcasts step progress (the REST SSE channel provision, event provision_step), updates the job\'s Installing OS step, and resets the stuck-detection timer (CONTROLNODE_INSTALL_STUCK_S). A state failed fails the job naming the step. The seed says "No auth required": here the job\'s callback token is.',
      { type: 'object', additionalProperties: false, required: ['step', 'state'], properties: { step: { type: 'string', maxLength: 128 }, state: { type: 'string', enum: [...STEP_STATES] }, percent: { type: 'integer', minimum: 0, maximum: 100 } } },
      { step: 'partitioning', state: 'active', percent: 20 }, 'step', 'step', true),
    '/controlnode/job/{id}/complete': post('ControlNodeJobComplete', 'Mark job as installation complete',
      'HTTP callback from installation script to signal that OS installation is complete: the OS address; a reported os_password goes straight to the secret broker (the node\'s control-node record points at it), never into a row or a response.',
      { type: 'object', additionalProperties: false, properties: { os_ip: { type: 'string' }, os_password: { type: 'string', maxLength: 1024 } } },
      { os_ip: '10.40.0.10' }, 'complete', 'os_ip', true),
    '/controlnode/firstboot': post('ControlNodeFirstboot', 'Receive first boot OS IP report',
      'Called by installed OS on first boot to report its IP address (with the job\'s callback token, which the installed system keeps until this call succeeds). bmc_ip must be the BMC of the token\'s job. The job then ejects the ISO and the node becomes deployed with that address.',
      { type: 'object', additionalProperties: false, required: ['bmc_ip', 'os_ip'], properties: { bmc_ip: { type: 'string' }, os_ip: { type: 'string' }, job_id: { type: 'string' } } },
      { bmc_ip: '10.20.0.11', os_ip: '10.40.0.10' }, 'firstboot', 'bmc_ip', false),
  };
}
