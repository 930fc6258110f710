import { builder } from '../../graphql/builder';
import { runMoveVerb, unrescue, WIPE_MODES, type MoveVerb, type VerbResult } from './verbs';
import { enrollNode } from './enroll';
import { AppError } from '../../errors';

const WipeMode = builder.enumType('WipeMode', {
  description: 'How undeploy wipes the disks (default quick).',
  values: Object.fromEntries(WIPE_MODES.map((mode) => [mode.replace('-', '_'), { value: mode }])) as Record<string, { value: (typeof WIPE_MODES)[number] }>,
});

const NodePayload = builder.objectRef<VerbResult>('MetalNodePayload').implement({
  description: 'The node\'s metal view after the verb.',
  fields: (t) => ({
    node: t.prismaField({
      type: 'Node',
      // A verb that read the node back in its own statement hands over that row (hardware profile
      // included); relations it lacks are loaded by Pothos as for any other node.
      resolve: (query, parent, _args, ctx) => parent.row ?? ctx.prisma.node.findUniqueOrThrow({ ...query, where: { id: parent.nodeId } }),
    }),
  }),
});

const NodeVerbInput = builder.inputType('MetalNodeVerbInput', {
  fields: (t) => ({ nodeId: t.id({ required: true }) }),
});
const AbortInput = builder.inputType('MetalAbortInput', {
  fields: (t) => ({ nodeId: t.id({ required: true }), reason: t.string({ required: false }) }),
});
const UndeployInput = builder.inputType('MetalUndeployInput', {
  fields: (t) => ({ nodeId: t.id({ required: true }), wipe: t.field({ type: WipeMode, required: false }) }),
});

/** The seed's one-line descriptions, as the mutations' descriptions. */
const SIMPLE: [MoveVerb, string, string][] = [
  ['manage', 'manageNode', 'Moves a ready node back to enrolling to re-verify BMC access. Publishes node.provision.enrolling.'],
  ['inspect', 'inspectNode', 'Moves a ready node to inspecting. Publishes node.provision.inspecting.'],
  ['provide', 'provideNode', 'Moves a ready node to commissioning. Publishes node.provision.commissioning.'],
  ['recover', 'recoverNode', 'Moves a failed node to the last stable point for the state it failed in, starting that point\'s workflow run; clears failedFrom and lastError, leaves maintenance on. CONFLICT while the node\'s aborted run still runs its cleanup steps.'],
  ['rescue', 'rescueNode', 'Moves a deployed node to rescue, whose workflow boots the rescue ramdisk. Publishes node.provision.rescue. On a pool with agent: none the node fails with UNSUPPORTED at once (failedFrom rescue, node.provision.failed), since such a machine cannot boot the ramdisk.'],
  ['retire', 'retireNode', 'Moves a node to retiring (legal from adopting, adopted, enrolling, ready and failed); from failed it clears failedFrom and lastError, as recover does. CONFLICT while the node\'s aborted run still runs its cleanup steps. Publishes node.provision.retiring.'],
];

for (const [verb, field, description] of SIMPLE) {
  builder.mutationField(field, (t) =>
    t.field({
      type: NodePayload,
      description: `${description} Decided as compute:nodes:provision on the node.`,
      args: { input: t.arg({ type: NodeVerbInput, required: true }) },
      resolve: async (_root, { input }, ctx) => runMoveVerb(ctx, verb, input.nodeId),
    }),
  );
}

builder.mutationField('unrescueNode', (t) =>
  t.field({
    type: NodePayload,
    description: 'Starts the metal-unrescue workflow; the node stays in rescue until it succeeds. Idempotent while that workflow runs; CONFLICT while the rescue ramdisk is still booting. Publishes node.provision.unrescuing with the workflowId.',
    args: { input: t.arg({ type: NodeVerbInput, required: true }) },
    resolve: async (_root, { input }, ctx) => unrescue(ctx, input.nodeId),
  }),
);

builder.mutationField('abortNode', (t) =>
  t.field({
    type: NodePayload,
    description: 'Stops the node\'s workflow and moves it to failed with an ABORTED error, the reason, and maintenance on. Its run becomes aborting and still runs its cleanup steps; recover and retire wait for it to end (CONFLICT). Publishes node.provision.failed.',
    args: { input: t.arg({ type: AbortInput, required: true }) },
    resolve: async (_root, { input }, ctx) => runMoveVerb(ctx, 'abort', input.nodeId, { reason: input.reason }),
  }),
);

const DeployInput = builder.inputType('MetalDeployInput', {
  fields: (t) => ({
    nodeId: t.id({ required: true }),
    profileId: t.id({ required: true }),
    profileVersion: t.int({ required: true }),
  }),
});

builder.mutationField('deployNode', (t) =>
  t.field({
    type: NodePayload,
    description: 'Moves a ready node to deploying with the given profile version recorded on it, without running it (run validateProfile first). Publishes node.provision.deploying.',
    args: { input: t.arg({ type: DeployInput, required: true }) },
    resolve: (_root, { input }, ctx) =>
      runMoveVerb(ctx, 'deploy', input.nodeId, { profile: { profileId: input.profileId, profileVersion: input.profileVersion } }),
  }),
);

builder.mutationField('undeployNode', (t) =>
  t.field({
    type: NodePayload,
    description: 'Moves a deployed or rescue node to releasing, which wipes its disks (default quick) and powers it off. Publishes node.provision.releasing.',
    args: { input: t.arg({ type: UndeployInput, required: true }) },
    resolve: async (_root, { input }, ctx) => runMoveVerb(ctx, 'undeploy', input.nodeId, { wipe: input.wipe }),
  }),
);

const BmcCredentialsInput = builder.inputType('BmcCredentialsInput', {
  description: 'Either ref (a secret:// reference) or username and password (stored in the secret broker; never returned).',
  fields: (t) => ({
    ref: t.string({ required: false }),
    username: t.string({ required: false }),
    password: t.string({ required: false }),
  }),
});

const BmcInput = builder.inputType('BmcInput', {
  fields: (t) => ({
    address: t.string({ required: true }),
    driver: t.string({ required: true, description: 'redfish, ipmi, idrac, ilo, xcc, cimc or supermicro' }),
    credentials: t.field({ type: BmcCredentialsInput, required: true }),
    driverOptions: t.field({ type: 'JSON', required: false, description: 'A JSON object of at most 1 KiB (a caCert PEM string aside: at most 16 KiB); no credential-like keys.' }),
  }),
});

const EnrollInputRef = builder.inputType('MetalEnrollInput', {
  fields: (t) => ({
    poolId: t.id({ required: true }),
    siteId: t.id({ required: false }),
    name: t.string({ required: false }),
    bmc: t.field({ type: BmcInput, required: true }),
    hardwareProfile: t.string({ required: false }),
    addresses: t.stringList({ required: false }),
    macs: t.stringList({ required: false }),
    productUuid: t.string({ required: false }),
  }),
});

builder.mutationField('enrollNode', (t) =>
  t.field({
    type: NodePayload,
    description: 'Creates a metal node in enrolling from its BMC, in the given pool. Decided as compute:nodes:provision on the pool. Publishes node.enrolled.',
    args: { input: t.arg({ type: EnrollInputRef, required: true }) },
    resolve: async (_root, { input }, ctx) => {
      const credentialsInput = input.bmc.credentials;
      const given = [credentialsInput.ref != null, credentialsInput.username != null || credentialsInput.password != null].filter(Boolean).length;
      if (given !== 1) {
        throw new AppError('INVALID_INPUT', 'bmc.credentials: give either ref or username and password', { field: 'bmc.credentials' });
      }
      const credentials = credentialsInput.ref != null ? credentialsInput.ref : { username: credentialsInput.username ?? '', password: credentialsInput.password ?? '' };
      return enrollNode(ctx, { ...input, bmc: { ...input.bmc, credentials } });
    },
  }),
);
