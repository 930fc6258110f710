import { notFound } from '../../errors';
import type { Route } from '../../rest/routes';
import { schemaTypes, type JsonSchema } from '../../rest/schemas';
import type { FabricJobView, StepRecord } from './rollout';
import { wireJobView } from './rollout';

/**
 * The seed's rollout routes under /controlnode/fabric-config: snake_case on the wire, the GraphQL
 * operations of schema/operations/fabric-rollout.graphql underneath. Apply, per-node apply,
 * teardown and cancel answer 202: they queue a job, whose progress the SSE channel `fabric`
 * (event fabric_switch) and the fabricRollout subscription stream.
 */

const { str, int, bool } = schemaTypes;
const nullableStr: JsonSchema = { anyOf: [str, { type: 'null' }] };
const AUTH_WRITE = 'Needs fabric:admin on the platform (platform admin holds it).';
const AUTH_READ = 'Needs a platform-scoped grant (any permission).';
const NODE_IP: Record<string, JsonSchema> = { node_ip: { ...str, description: 'the node\'s OS address (IPv4)' } };

/** GraphQL's camelCase job (the FabricJobView fragment) -> the seed's wire shape. */
function wireOf(job: unknown): Record<string, unknown> {
  const j = job as Omit<FabricJobView, 'createdAt' | 'updatedAt' | 'finishedAt' | 'cancelRequestedAt'> & {
    createdAt: string; updatedAt: string; finishedAt: string | null; cancelRequestedAt: string | null;
  };
  return wireJobView({
    ...j,
    createdAt: new Date(j.createdAt),
    updatedAt: new Date(j.updatedAt),
    finishedAt: j.finishedAt ? new Date(j.finishedAt) : null,
    cancelRequestedAt: j.cancelRequestedAt ? new Date(j.cancelRequestedAt) : null,
    nodes: j.nodes.map((n) => ({ ...n, steps: n.steps as StepRecord[] })),
  });
}

const STEP: JsonSchema = {
  type: 'object',
  required: ['step', 'phase', 'status', 'message', 'started_at', 'finished_at'],
  properties: { step: str, phase: str, status: str, message: str, started_at: str, finished_at: nullableStr },
};

const JOB_NODE: JsonSchema = {
  type: 'object',
  required: ['node_id', 'node_ip', 'fqdn', 'vtep_ip', 'ok', 'reachable', 'finished', 'rolled_back', 'error', 'steps'],
  properties: {
    node_id: str,
    node_ip: str,
    fqdn: str,
    vtep_ip: str,
    ok: bool,
    reachable: { ...bool, description: 'false = SSH dial failed before EVPN step ran' },
    finished: bool,
    rolled_back: bool,
    error: str,
    steps: { type: 'array', items: STEP },
  },
};

export const JOB_VIEW: JsonSchema = {
  type: 'object',
  title: 'FabricJobView',
  required: ['job_id', 'job_type', 'scope', 'target_node_ip', 'strict', 'job_status', 'state', 'progress', 'total_nodes', 'completed_nodes',
    'failed_nodes', 'first_fail_node', 'first_fail_error', 'error', 'fabric_id', 'cancel_requested_at', 'created_at', 'updated_at', 'finished_at', 'nodes'],
  properties: {
    job_id: str,
    job_type: { type: 'string', enum: ['fabric_apply', 'fabric_teardown'] },
    scope: { type: 'string', enum: ['all', 'node'] },
    target_node_ip: nullableStr,
    strict: bool,
    job_status: { type: 'string', enum: ['running', 'completed', 'failed', 'partial'] },
    state: { ...str, description: 'last SSE state: apply_*/teardown_*/node_*' },
    progress: { ...int, description: '0..100' },
    total_nodes: int,
    completed_nodes: int,
    failed_nodes: int,
    first_fail_node: str,
    first_fail_error: { ...str, description: 'the first per-node failure verbatim, e.g. "BGP neighbor 172.30.10.254 not Established"' },
    error: str,
    fabric_id: str,
    cancel_requested_at: nullableStr,
    created_at: { type: 'string', format: 'date-time' },
    updated_at: { type: 'string', format: 'date-time' },
    finished_at: nullableStr,
    nodes: { type: 'array', items: JOB_NODE },
  },
};

const APPLY_RESPONSE: JsonSchema = {
  type: 'object',
  required: ['apply_job_id', 'created', 'id', 'message'],
  properties: {
    apply_job_id: str,
    created: { ...bool, description: 'true if a new job was started, false when the identical apply was already running (its id is returned)' },
    id: { ...int, description: 'the fabric config id' },
    message: str,
  },
};

const POSTDEPLOY_STEP: JsonSchema = {
  type: 'object',
  required: ['step_id', 'step', 'node_ip', 'bmc_ip', 'batch_id', 'job_id', 'status', 'progress', 'message', 'created_at', 'updated_at'],
  properties: {
    step_id: str,
    step: str,
    node_ip: str,
    bmc_ip: { ...str, description: 'the node\'s BMC address: the web batch surface keys by bmc_ip' },
    batch_id: str,
    job_id: str,
    status: { type: 'string', enum: ['pending', 'running', 'completed', 'failed', 'skipped'] },
    progress: int,
    message: str,
    created_at: { type: 'string', format: 'date-time', description: 'when the step started; a step not reached yet: when its checklist was made (the latest apply, or the node joining the fabric)' },
    updated_at: { type: 'string', format: 'date-time', description: 'when the step last changed; a step not reached yet: as created_at' },
  },
};

interface GqlStep {
  stepId: string; step: string; nodeIp: string; bmcIp: string; batchId: string; jobId: string;
  status: string; progress: number; message: string; createdAt: string; updatedAt: string;
}

const wireStep = (s: GqlStep) => ({
  step_id: s.stepId, step: s.step, node_ip: s.nodeIp, bmc_ip: s.bmcIp, batch_id: s.batchId, job_id: s.jobId,
  status: s.status, progress: s.progress, message: s.message, created_at: s.createdAt, updated_at: s.updatedAt,
});

const applyRespond = (key: 'applyFabric' | 'applyFabricNode') => (data: Record<string, unknown>) => {
  const p = data[key] as { applyJobId: string; created: boolean; id: number; message: string };
  return { apply_job_id: p.applyJobId, created: p.created, id: p.id, message: p.message };
};

const exampleJobId = '0193a4f0-7c2e-7d41-9a51-3f1b2c4d5e6f';
const exampleStep = { step: 'verify_bgp', phase: 'apply', status: 'failed', message: 'BGP neighbor 172.30.10.254 not Established', started_at: '2026-12-01T10:00:05.000Z', finished_at: '2026-12-01T10:02:05.000Z' };
const exampleJob = {
  job_id: exampleJobId, job_type: 'fabric_apply', scope: 'all', target_node_ip: null, strict: false, job_status: 'partial', state: 'apply_partial',
  progress: 100, total_nodes: 2, completed_nodes: 1, failed_nodes: 1, first_fail_node: 'cn2.example.net',
  first_fail_error: 'BGP neighbor 172.30.10.254 not Established', error: '1 of 2 nodes failed', fabric_id: '1', cancel_requested_at: null,
  created_at: '2026-12-01T10:00:00.000Z', updated_at: '2026-12-01T10:02:05.000Z', finished_at: '2026-12-01T10:02:05.000Z',
  nodes: [
    { node_id: 'mn_example1', node_ip: '192.168.111.11', fqdn: 'cn1.example.net', vtep_ip: '10.255.0.1', ok: true, reachable: true, finished: true, rolled_back: false, error: '', steps: [{ ...exampleStep, status: 'ok', message: 'BGP neighbor 172.30.10.254 Established' }] },
    { node_id: 'mn_example2', node_ip: '192.168.111.12', fqdn: 'cn2.example.net', vtep_ip: '10.255.0.2', ok: false, reachable: true, finished: true, rolled_back: false, error: 'BGP neighbor 172.30.10.254 not Established', steps: [exampleStep] },
  ],
};
const examplePostdeploy = {
  step_id: `${exampleJobId}:verify_bgp`, step: 'verify_bgp', node_ip: '192.168.111.12', bmc_ip: '10.0.0.12', batch_id: '', job_id: exampleJobId,
  status: 'failed', progress: 0, message: 'BGP neighbor 172.30.10.254 not Established', created_at: '2026-12-01T10:00:05.000Z', updated_at: '2026-12-01T10:02:05.000Z',
};

export const rolloutRoutes: Route[] = [
  {
    method: 'POST',
    path: '/controlnode/fabric-config/apply',
    operation: 'ApplyFabric',
    tag: 'fabric',
    summary: 'Manually trigger a fabric rollout to compute nodes',
    description: 'Re-runs the EVPN setup steps (FRR install, dpkg-divert, vtep0, BGP config, MTU sync, then a bounded wait for every BGP neighbour to be Established) on every compute node, as a queued job. '
      + 'Returns 202 with apply_job_id at once; the SSE channel "fabric" (event fabric_switch) streams per-node progress. `?strict=true`: the first node failure tears every touched node back to baseline and the job ends failed. '
      + `The identical apply already running is returned with created false; another fabric job running is CONFLICT naming it. INVALID_STATE without a fabric config, or with no compute node to roll out to. ${AUTH_WRITE}`,
    query: { type: 'object', additionalProperties: false, properties: { strict: { ...bool, description: 'roll every touched node back on the first failure' } } },
    variables: ({ query }) => ({ strict: query.strict ?? null }),
    respond: applyRespond('applyFabric'),
    successStatus: 202,
    response: APPLY_RESPONSE,
    refusals: ['PERMISSION_DENIED', 'CONFLICT', 'INVALID_STATE'],
    example: { response: { apply_job_id: exampleJobId, created: true, id: 1, message: 'fabric apply started on 2 compute nodes' } },
  },
  {
    method: 'POST',
    path: '/controlnode/fabric-config/apply/{job_id}/cancel',
    operation: 'CancelFabricApply',
    tag: 'fabric',
    summary: 'Cancel an in-flight fabric apply',
    description: 'Marks the running apply for cancellation and returns 202 at once; the job stops its fan-out and rolls every touched node back to baseline, announced by apply_cancelling then apply_cancelled. '
      + `Idempotent while the cancellation runs. 404 when job_id is not the in-flight apply (already terminal, a teardown, unknown, or not a UUID). ${AUTH_WRITE}`,
    params: { job_id: { ...str, description: 'the apply job UUID' } },
    variables: ({ params }) => ({ jobId: params.job_id }),
    respond: (data) => {
      const p = data.cancelFabricApply as { jobId: string; state: string; message: string };
      return { job_id: p.jobId, state: p.state, message: p.message };
    },
    successStatus: 202,
    response: { type: 'object', required: ['job_id', 'state', 'message'], properties: { job_id: str, state: str, message: str } },
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND'],
    example: { params: { job_id: exampleJobId }, response: { job_id: exampleJobId, state: 'apply_cancelling', message: `cancelling fabric apply ${exampleJobId}: every touched node goes back to baseline` } },
  },
  {
    method: 'GET',
    path: '/controlnode/fabric-config/latest',
    operation: 'FabricLatestJob',
    tag: 'fabric',
    summary: 'Get the most recent fabric lifecycle job',
    description: `The newest fabric_apply or fabric_teardown job with its per-node results (job_type tells them apart); first_fail_node / first_fail_error carry the first node failure verbatim. NOT_FOUND when no job ever ran. ${AUTH_READ}`,
    variables: () => ({}),
    respond: (data) => {
      if (!data.fabricLatestJob) throw notFound('fabric job');
      return wireOf(data.fabricLatestJob);
    },
    response: JOB_VIEW,
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND'],
    example: { response: exampleJob },
  },
  {
    method: 'DELETE',
    path: '/controlnode/fabric-config/node/{node_ip}',
    operation: 'TeardownFabricNode',
    tag: 'fabric',
    summary: 'Tear down EVPN/FRR on a single node',
    description: 'Queues a teardown of one compute node back to its baseline (frr stopped, the distribution frr.conf restored from its dpkg diversion, vtep0 removed, the underlay MTU restored, the VTEP released) and returns 202. '
      + `removed says whether the node had fabric state; steps[] lists the steps the job runs; job_id follows it (GET .../latest). NOT_FOUND for an address that is not a compute node; CONFLICT while another fabric job runs. ${AUTH_WRITE}`,
    params: NODE_IP,
    variables: ({ params }) => ({ nodeIp: params.node_ip }),
    respond: (data) => {
      const p = data.teardownFabricNode as { jobId: string; removed: boolean; steps: string[]; message: string };
      return { message: p.message, removed: p.removed, steps: p.steps, job_id: p.jobId };
    },
    successStatus: 202,
    response: { type: 'object', required: ['message', 'removed', 'steps', 'job_id'], properties: { message: str, removed: bool, steps: { type: 'array', items: str }, job_id: str } },
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND', 'CONFLICT'],
    example: {
      params: { node_ip: '192.168.111.12' },
      response: { message: 'teardown of 192.168.111.12 started', removed: true, steps: ['connect', 'stop_frr', 'restore_config', 'remove_vtep', 'restore_mtu', 'release_vtep'], job_id: exampleJobId },
    },
  },
  {
    method: 'POST',
    path: '/controlnode/fabric-config/node/{node_ip}/apply',
    operation: 'ApplyFabricNode',
    tag: 'fabric',
    summary: 'Apply EVPN/FRR config to a single node',
    description: `The apply's steps on one compute node, as a queued job: 202 with apply_job_id. \`?strict=true\` rolls the node back on failure. NOT_FOUND for an address that is not a compute node; CONFLICT while another fabric job runs. ${AUTH_WRITE}`,
    params: NODE_IP,
    query: { type: 'object', additionalProperties: false, properties: { strict: bool } },
    variables: ({ params, query }) => ({ nodeIp: params.node_ip, strict: query.strict ?? null }),
    respond: applyRespond('applyFabricNode'),
    successStatus: 202,
    response: APPLY_RESPONSE,
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND', 'CONFLICT', 'INVALID_STATE'],
    example: { params: { node_ip: '192.168.111.12' }, response: { apply_job_id: exampleJobId, created: true, id: 1, message: 'fabric apply started on node 192.168.111.12' } },
  },
  {
    method: 'GET',
    path: '/controlnode/fabric-config/node/{node_ip}/postdeploy',
    operation: 'FabricNodePostdeploy',
    tag: 'fabric',
    summary: 'Post-deployment step checklist for one node',
    description: `The fabric steps of the node's latest apply, one entry each (pending before the apply reached it), with the node's bmc_ip and the provisioning batch that named it. NOT_FOUND for an address that is not a compute node. ${AUTH_READ}`,
    params: NODE_IP,
    variables: ({ params }) => ({ nodeIp: params.node_ip }),
    respond: (data) => (data.fabricNodePostdeploy as GqlStep[]).map(wireStep),
    response: { type: 'array', items: POSTDEPLOY_STEP },
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND'],
    example: { params: { node_ip: '192.168.111.12' }, response: [examplePostdeploy] },
  },
  {
    method: 'GET',
    path: '/controlnode/fabric-config/batches/{id}/postdeploy',
    operation: 'FabricBatchPostdeploy',
    tag: 'fabric',
    summary: 'Post-deployment aggregate for a provisioning batch',
    description: `Each node of the batch with its post-deploy checklist (a node that is not a compute node has an empty node_ip and no steps). NOT_FOUND for an unknown batch. ${AUTH_READ}`,
    params: { id: { ...str, description: 'provision batch id' } },
    variables: ({ params }) => ({ batchId: params.id }),
    respond: (data) => {
      const b = data.fabricBatchPostdeploy as { batchId: string; nodes: { nodeId: string; nodeIp: string; bmcIp: string; steps: GqlStep[] }[] };
      return { batch_id: b.batchId, nodes: b.nodes.map((n) => ({ node_id: n.nodeId, node_ip: n.nodeIp, bmc_ip: n.bmcIp, steps: n.steps.map(wireStep) })) };
    },
    response: {
      type: 'object',
      required: ['batch_id', 'nodes'],
      properties: {
        batch_id: str,
        nodes: { type: 'array', items: { type: 'object', required: ['node_id', 'node_ip', 'bmc_ip', 'steps'], properties: { node_id: str, node_ip: str, bmc_ip: str, steps: { type: 'array', items: POSTDEPLOY_STEP } } } },
      },
    },
    refusals: ['PERMISSION_DENIED', 'NOT_FOUND'],
    example: { params: { id: 'cb_example' }, response: { batch_id: 'cb_example', nodes: [{ node_id: 'mn_example2', node_ip: '192.168.111.12', bmc_ip: '10.0.0.12', steps: [examplePostdeploy] }] } },
  },
];
