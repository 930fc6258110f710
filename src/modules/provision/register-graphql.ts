import { builder } from '../../graphql/builder';
import { bmcInfoOfNode } from '../../graphql/loaders';
import { registerControlNode, type RegisterResult } from './register';

/**
 * The seed's POST /controlnode/register in GraphQL (registerControlNode), and what it records: a
 * node's control-node record (MetalNode.bmcInfo, seed 004's bmc_infos row). Passwords are never
 * readable: the record says only whether the broker holds the OS user's.
 */

const BmcInfoRef = builder.prismaObject('BmcInfo', {
  description: 'What the control-node API records of a node beyond its BMC (seed 004\'s bmc_infos): its serial, vendor, OS facts and NetBox ids',
  fields: (t) => ({
    isControlNode: t.exposeBoolean('isControlNode', { description: 'Registered as the control (management) node by registerControlNode' }),
    serialNumber: t.exposeString('serialNumber', { nullable: true, description: 'The machine\'s serial: its identity for registerControlNode' }),
    vendor: t.exposeString('vendor', { nullable: true }),
    osHostname: t.exposeString('osHostname', { nullable: true }),
    fqdn: t.exposeString('fqdn', { nullable: true }),
    osIp: t.exposeString('osIp', { nullable: true }),
    osUsername: t.exposeString('osUsername', { nullable: true }),
    osPasswordSet: t.boolean({ description: 'Whether the secret broker holds the OS user\'s password (it is never returned)', resolve: (b) => b.osCredentialsRef !== null }),
    primaryMac: t.exposeString('primaryMac', { nullable: true }),
    atlasDeviceId: t.exposeInt('atlasDeviceId', { nullable: true, description: 'NetBox device id' }),
    atlasLocationId: t.exposeInt('atlasLocationId', { nullable: true }),
    atlasRackId: t.exposeInt('atlasRackId', { nullable: true }),
    atlasSiteId: t.exposeInt('atlasSiteId', { nullable: true }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
    updatedAt: t.expose('updatedAt', { type: 'DateTime' }),
  }),
});

builder.prismaObjectField('Node', 'bmcInfo', (t) =>
  t.field({
    type: BmcInfoRef,
    nullable: true,
    description: 'The control-node API\'s record of this node (registerControlNode, provision); null when it has none',
    resolve: (node, _args, ctx) => bmcInfoOfNode(ctx, node.id),
  }),
);

const RegisterInput = builder.inputType('RegisterControlNodeInput', {
  description: 'The seed\'s register request (POST /controlnode/register), camelCased',
  fields: (t) => ({
    bmcIp: t.string({ required: true, description: 'The BMC\'s IPv4 or IPv6 address, optionally with a port (127.0.0.1:8443, [fd00::1]:8443), or its http(s) URL (https://127.0.0.1:8443): the control node\'s key when it gives no serial. A bare address is the BMC on 443' }),
    systemId: t.string({ required: false, description: 'For a BMC with several systems: the Id of this machine\'s (a member of /redfish/v1/Systems); it becomes the node\'s driverOptions.systemId. Left out, a known node keeps its own' }),
    bmcUsername: t.string({ required: false, description: 'With bmcPassword: the BMC credentials, kept in the secret broker' }),
    bmcPassword: t.string({ required: false }),
    serialNumber: t.string({ required: false, description: 'The machine\'s serial: its identity (a second register with it updates the same node)' }),
    vendor: t.string({ required: false, description: 'dell, hp, lenovo, cisco, supermicro, or the Manufacturer a BMC reports (Dell Inc., HPE, Hewlett Packard Enterprise, Lenovo, Supermicro, Cisco Systems Inc; any case): their Redfish flavours (idrac, ilo, xcc, cimc, supermicro); anything else is generic Redfish. Left out, a known node keeps its flavour' }),
    osHostname: t.string({ required: false, description: 'e.g. mgmt-01; also the node\'s name' }),
    osIp: t.string({ required: false }),
    osUsername: t.string({ required: false, description: 'Default root when an OS password is given' }),
    osPassword: t.string({ required: false, description: 'Kept in the secret broker, never stored in a row or returned' }),
    fqdn: t.string({ required: false }),
    primaryMac: t.string({ required: false }),
    atlasDeviceId: t.int({ required: false, description: 'NetBox device id' }),
    atlasLocationId: t.int({ required: false }),
    atlasRackId: t.int({ required: false }),
    atlasSiteId: t.int({ required: false }),
  }),
});

const RegisterPayload = builder.objectRef<RegisterResult>('RegisterControlNodePayload').implement({
  fields: (t) => ({
    created: t.exposeBoolean('created', { description: 'True when the node is new, false when a known one was updated' }),
    message: t.exposeString('message'),
    hostname: t.exposeString('hostname', { description: 'The OS host name given (empty when none)' }),
    nodeIp: t.exposeString('nodeIp', { description: 'The OS address given (empty when none)' }),
    node: t.prismaField({ type: 'Node', resolve: (query, p, _a, ctx) => ctx.prisma.node.findUniqueOrThrow({ ...query, where: { id: p.nodeId } }) }),
  }),
});

builder.mutationField('registerControlNode', (t) =>
  t.field({
    type: RegisterPayload,
    description: 'Records the control (management) node: a metal node by its BMC, with its serial, vendor, OS facts and NetBox ids. A machine not known yet (by serialNumber, else by bmcIp) is created in CONTROLNODE_POOL_ID\'s pool in adopting, whose workflow verifies the BMC and reads it out of band without touching the OS; a known one keeps its state and gets its facts updated (its BMC too, unless a workflow is running: CONFLICT). Passwords go to the secret broker. Decided as compute:nodes:provision on the pool; INVALID_CONFIG without CONTROLNODE_POOL_ID. Publishes node.registered.',
    args: { input: t.arg({ type: RegisterInput, required: true }) },
    resolve: (_root, { input }, ctx) => registerControlNode(ctx, input),
  }),
);
