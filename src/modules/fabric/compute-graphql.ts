import { builder } from '../../graphql/builder';
import {
  computeNodeViews, removeComputeNode, serviceSshKeyView, setComputeNode,
  type ComputeNodeView, type SetComputeNodeResult,
} from './compute-nodes';

/**
 * The compute nodes' admin surface (issue 10 item 9): which deployed nodes the fabric reaches and
 * how. Keys are write-only: a view says whether one is pinned or stored, never what it is.
 */

export const ComputeNodeRef = builder.objectRef<ComputeNodeView>('ComputeNode').implement({
  description: 'A metal node\'s compute access: its OS address and SSH settings. Only deployed nodes are reached by the fabric.',
  fields: (t) => ({
    nodeId: t.exposeID('nodeId', { description: 'The metal node\'s id' }),
    osIp: t.exposeString('osIp', { description: 'The OS address SSH connects to (and the fabric routes name the node by)' }),
    fqdn: t.exposeString('fqdn', { description: 'The recorded FQDN, else the metal name, else the OS address' }),
    sshPort: t.exposeInt('sshPort'),
    sshUser: t.exposeString('sshUser'),
    hostKeyPinned: t.exposeBoolean('hostKeyPinned', { description: 'false: the next contact trusts on first use and pins the key it sees' }),
    sshHostKey: t.exposeString('sshHostKey', { nullable: true, description: 'The pinned host key fingerprint (SHA256:..., public), null when none is pinned' }),
    perNodeKeySet: t.exposeBoolean('perNodeKeySet', { description: 'true: this node is reached with its own private key (kept in the secret broker), not the service\'s' }),
    underlayIface: t.exposeString('underlayIface', { description: 'The underlay interface; empty = the fabric-wide ospfFabricInterface' }),
    isGateway: t.exposeBoolean('isGateway', { description: 'Hosts the software route reflector: the marked node, else the oldest compute node' }),
    vtepIp: t.exposeString('vtepIp', { nullable: true, description: 'The VTEP loopback from the pool; null until a rollout allocates one' }),
    deployed: t.exposeBoolean('deployed', { description: 'Only deployed nodes are listed and reached' }),
  }),
});

const SetComputeNodeInputRef = builder.inputType('SetComputeNodeInput', {
  description: 'A node\'s compute access. Fields left out keep their value; a new record starts with port 22, user root, trust on first use and the service\'s key.',
  fields: (t) => ({
    nodeId: t.id({ required: true, description: 'An existing metal node' }),
    osIp: t.string({ required: true, description: 'IPv4 address A.B.C.D' }),
    fqdn: t.string({ required: false }),
    sshPort: t.int({ required: false, description: '1..65535' }),
    sshUser: t.string({ required: false }),
    sshHostKey: t.string({ required: false, description: 'Pins the host key: SHA256:... as ssh-keygen -lf prints it on the node' }),
    clearSshHostKey: t.boolean({ required: false, description: 'Unpins: the next contact trusts on first use again' }),
    sshPrivateKey: t.string({ required: false, description: 'Write-only: an unencrypted OpenSSH or PEM private key for this node alone; empty = unchanged; never returned' }),
    clearSshPrivateKey: t.boolean({ required: false, description: 'Removes the per-node key: the service\'s key is used again' }),
    underlayIface: t.string({ required: false, description: 'A Linux interface name, or empty for the fabric-wide default' }),
    isGateway: t.boolean({ required: false, description: 'true moves the gateway mark to this node (from any other, atomically)' }),
  }),
});

const SetPayload = builder.objectRef<SetComputeNodeResult>('SetComputeNodePayload').implement({
  fields: (t) => ({
    created: t.exposeBoolean('created', { description: 'true when the node had no compute access recorded before' }),
    node: t.field({ type: ComputeNodeRef, resolve: (r) => r.node }),
  }),
});

const RemovePayload = builder.objectRef<{ removed: boolean }>('RemoveComputeNodePayload').implement({
  fields: (t) => ({ removed: t.exposeBoolean('removed') }),
});

const ServiceSshKeyRef = builder.objectRef<{ algorithm: string; publicKey: string; fingerprint: string }>('ServiceSshKey').implement({
  description: 'The service\'s own SSH key: put publicKey in each compute node\'s authorized_keys. The private key never leaves the secret broker.',
  fields: (t) => ({
    algorithm: t.exposeString('algorithm'),
    publicKey: t.exposeString('publicKey', { description: 'An OpenSSH public key line' }),
    fingerprint: t.exposeString('fingerprint', { description: 'SHA256:...' }),
  }),
});

builder.queryField('computeNodes', (t) =>
  t.field({
    type: [ComputeNodeRef],
    description: 'The deployed compute nodes, by OS address. Needs a platform-scoped grant.',
    resolve: (_root, _args, ctx) => computeNodeViews(ctx),
  }),
);

builder.queryField('serviceSshKey', (t) =>
  t.field({
    type: ServiceSshKeyRef,
    description: 'The service\'s SSH public key (the key pair is created on the first read). Needs a platform-scoped grant.',
    resolve: (_root, _args, ctx) => serviceSshKeyView(ctx),
  }),
);

builder.mutationField('setComputeNode', (t) =>
  t.field({
    type: SetPayload,
    description: 'Records or changes a node\'s compute access. Needs platform admin.',
    args: { input: t.arg({ type: SetComputeNodeInputRef, required: true }) },
    resolve: (_root, { input }, ctx) => setComputeNode(ctx, { ...input, nodeId: String(input.nodeId) }),
  }),
);

builder.mutationField('removeComputeNode', (t) =>
  t.field({
    type: RemovePayload,
    description: 'Removes a node\'s compute access, its VTEP address and its per-node key. NOT_FOUND when none is recorded. Needs platform admin.',
    args: { nodeId: t.arg.id({ required: true }) },
    resolve: async (_root, { nodeId }, ctx) => {
      await removeComputeNode(ctx, String(nodeId));
      return { removed: true };
    },
  }),
);
