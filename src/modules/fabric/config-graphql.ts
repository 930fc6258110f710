import { builder } from '../../graphql/builder';
import { deleteFabricConfig, getFabricConfig, upsertFabricConfig, type FabricConfigView, type UpsertResult } from './config';
import { planFabricConfig, type FabricPlan, type PlannedConfig } from './plan';
import { EVPN_CAPABLE_NOS, OSPF_AUTH_TYPES, ROLLOUT_STATUSES, SNIPPET_NOS, SWITCH_ROLES } from './validate';

/**
 * AS numbers go up to 4294967295, past GraphQL's 32-bit Int: they are Float here (exact for every
 * integer of that range) and the domain refuses a fraction.
 */
const AS_DOC = 'an integer 1..4294967295 (a Float only because GraphQL Int is 32-bit)';

export const FabricConfigRef = builder.objectRef<FabricConfigView>('FabricConfig').implement({
  description: 'The cluster-wide network fabric configuration (seed: /controlnode/fabric-config). Secrets are never returned, only whether they are set.',
  fields: (t) => ({
    as: t.exposeFloat('as', { description: `BGP core AS: ${AS_DOC}` }),
    fabricSwitchAs: t.exposeFloat('fabricSwitchAs', { description: `0 = none; ${AS_DOC}` }),
    bgpMode: t.exposeString('bgpMode', { description: 'read-only derived: ibgp | ebgp (from as and fabricSwitchAs)' }),
    advertiseAllVni: t.exposeBoolean('advertiseAllVni'),
    bfdEnabled: t.exposeBoolean('bfdEnabled'),
    externalRouteReflector: t.exposeBoolean('externalRouteReflector', { description: 'true: the BGP route reflector lives on the fabric switch' }),
    bgpPasswordIsSet: t.exposeBoolean('bgpPasswordIsSet'),
    fabricSwitchName: t.exposeString('fabricSwitchName'),
    fabricSwitchNos: t.exposeString('fabricSwitchNos', { description: `${EVPN_CAPABLE_NOS.join(', ')}, other, or empty` }),
    fabricSwitchPeeringIp: t.exposeString('fabricSwitchPeeringIp', { description: 'Loopback IP = BGP peer address' }),
    fabricSwitchRole: t.exposeString('fabricSwitchRole', { description: SWITCH_ROLES.filter(Boolean).join(', ') }),
    managementCidr: t.exposeString('managementCidr'),
    routerIdBase: t.exposeString('routerIdBase', { description: 'VTEP loopback start IP' }),
    routerIdPrefixLen: t.exposeInt('routerIdPrefixLen'),
    routerIdCidr: t.exposeString('routerIdCidr', { description: 'read-only derived: routerIdBase/routerIdPrefixLen, empty when unset' }),
    ospfEnabled: t.exposeBoolean('ospfEnabled'),
    ospfArea: t.exposeString('ospfArea'),
    ospfFabricInterface: t.exposeString('ospfFabricInterface'),
    ospfHelloInterval: t.exposeInt('ospfHelloInterval'),
    ospfDeadInterval: t.exposeInt('ospfDeadInterval'),
    ospfAutoRefBw: t.exposeInt('ospfAutoRefBw'),
    ospfAuthType: t.exposeString('ospfAuthType', { description: `${OSPF_AUTH_TYPES.filter(Boolean).join(' | ')}, or empty (= none)` }),
    ospfAuthKeyId: t.exposeInt('ospfAuthKeyId'),
    ospfAuthKeyIsSet: t.exposeBoolean('ospfAuthKeyIsSet'),
    expectedNodes: t.exposeInt('expectedNodes'),
    expectedVms: t.exposeInt('expectedVms'),
    vxlanMtu: t.exposeInt('vxlanMtu'),
    publicMtu: t.exposeInt('publicMtu'),
    rolloutStatus: t.exposeString('rolloutStatus', { description: ROLLOUT_STATUSES.join(' | ') }),
    frrHmacShaCapable: t.exposeBoolean('frrHmacShaCapable', {
      nullable: true,
      description: 'The preflight FRR probe\'s finding: null = never probed, false = unsupported, true = supported. Read-only.',
    }),
    physnet: t.expose('physnet', { type: 'JSON', nullable: true, description: 'The VXLAN physnet projection: null until a network module exists' }),
    lastJob: t.expose('lastJob', { type: 'JSON', nullable: true, description: 'The latest apply/teardown job when rolloutStatus is failed or degraded' }),
    lastSwitchAckKind: t.exposeString('lastSwitchAckKind', { nullable: true, description: 'Audit of the switch re-config ack gate: acked | skipped (fabric:admin), null = never' }),
    lastSwitchAckBy: t.exposeString('lastSwitchAckBy', { nullable: true, description: 'acked: the operator\'s ackedBy; skipped: the token\'s name' }),
    lastSwitchAckAt: t.expose('lastSwitchAckAt', { type: 'DateTime', nullable: true }),
    lastSwitchAckNos: t.exposeString('lastSwitchAckNos', { nullable: true, description: 'The NOS whose snippet was acked' }),
    lastSwitchAckHash: t.exposeString('lastSwitchAckHash', { nullable: true, description: 'The sha256 of the acked snippet' }),
    version: t.exposeInt('version'),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
    updatedAt: t.expose('updatedAt', { type: 'DateTime' }),
  }),
});

/**
 * Every writable field, all optional (left out = unchanged). No input for the read-only fields
 * (bgpMode, *IsSet, rolloutStatus, frrHmacShaCapable, physnet, lastJob): GraphQL refuses them as
 * unknown fields.
 */
export const FabricConfigInputRef = builder.inputType('FabricConfigInput', {
  fields: (t) => ({
    as: t.float({ required: false, description: AS_DOC }),
    fabricSwitchAs: t.float({ required: false, description: `0 = none; ${AS_DOC}` }),
    advertiseAllVni: t.boolean({ required: false }),
    bfdEnabled: t.boolean({ required: false }),
    externalRouteReflector: t.boolean({ required: false }),
    bgpPassword: t.string({ required: false, description: 'write-only; empty = unchanged' }),
    clearBgpPassword: t.boolean({ required: false }),
    fabricSwitchName: t.string({ required: false }),
    fabricSwitchNos: t.string({ required: false }),
    fabricSwitchPeeringIp: t.string({ required: false }),
    fabricSwitchRole: t.string({ required: false }),
    managementCidr: t.string({ required: false }),
    routerIdBase: t.string({ required: false }),
    routerIdPrefixLen: t.int({ required: false }),
    routerIdCidr: t.string({ required: false, description: 'A.B.C.D/N: decoded into routerIdBase and routerIdPrefixLen' }),
    ospfEnabled: t.boolean({ required: false }),
    ospfArea: t.string({ required: false }),
    ospfFabricInterface: t.string({ required: false }),
    ospfHelloInterval: t.int({ required: false }),
    ospfDeadInterval: t.int({ required: false }),
    ospfAutoRefBw: t.int({ required: false }),
    ospfAuthType: t.string({ required: false }),
    ospfAuthKey: t.string({ required: false, description: 'write-only; empty = unchanged' }),
    ospfAuthKeyId: t.int({ required: false }),
    clearOspfAuthKey: t.boolean({ required: false }),
    expectedNodes: t.int({ required: false }),
    expectedVms: t.int({ required: false }),
    vxlanMtu: t.int({ required: false }),
    publicMtu: t.int({ required: false }),
    // Transient: read by the write, never stored (the ack's audit record aside).
    switchAcked: t.boolean({ required: false, description: 'The switch was re-configured with the snippet of the REQUIRES_SWITCH_RECONFIG_ACK answer' }),
    switchNos: t.string({ required: false, description: `The NOS acked (${SNIPPET_NOS.join(', ')}); empty = fabricSwitchNos, or other when unset` }),
    switchSnippetHash: t.string({ required: false, description: 'The sha256 of the acked snippet, echoed from the REQUIRES_SWITCH_RECONFIG_ACK answer' }),
    ackedBy: t.string({ required: false, description: 'Who re-configured the switch (required with switchAcked), recorded with the time' }),
    skipSwitchAck: t.boolean({ required: false, description: 'Lab/CI bypass of the ack gate; needs fabric:admin' }),
    planHash: t.string({ required: false, description: 'The planHash of the fabricPlan reviewed: CONFLICT when the plan of what would be stored no longer has it' }),
  }),
});

const UpsertPayload = builder.objectRef<UpsertResult>('FabricConfigUpsertPayload').implement({
  fields: (t) => ({
    created: t.exposeBoolean('created', { description: 'true if the config was created, false if updated' }),
    config: t.field({ type: FabricConfigRef, resolve: (r) => r.config }),
  }),
});

const DeletePayload = builder.objectRef<{ deleted: boolean }>('FabricConfigDeletePayload').implement({
  fields: (t) => ({ deleted: t.exposeBoolean('deleted') }),
});

builder.queryField('fabricConfig', (t) =>
  t.field({
    type: FabricConfigRef,
    nullable: true,
    description: 'The cluster-wide fabric config, null when none is stored. Needs a platform-scoped grant.',
    resolve: (_root, _args, ctx) => getFabricConfig(ctx),
  }),
);

builder.mutationField('upsertFabricConfig', (t) =>
  t.field({
    type: UpsertPayload,
    description: 'Creates the fabric config or updates it (fields left out keep their value). Needs platform admin.',
    args: { input: t.arg({ type: FabricConfigInputRef, required: true }) },
    resolve: (_root, { input }, ctx) => upsertFabricConfig(ctx, input),
  }),
);

builder.mutationField('deleteFabricConfig', (t) =>
  t.field({
    type: DeletePayload,
    description: 'Hard-deletes the fabric config and its secrets. NOT_FOUND when there is none. Needs platform admin.',
    resolve: async (_root, _args, ctx) => {
      await deleteFabricConfig(ctx);
      return { deleted: true };
    },
  }),
);

export const FabricPlanInputRef = builder.inputType('FabricPlanInput', {
  description: 'The plan request (seed: POST /controlnode/fabric-config/plan). routerIdBase empty and routerIdPrefixLen 0 are the planner\'s (10.255.0.0, auto-sized) whatever is stored; other 0 / empty = the stored value, else the planner\'s pick.',
  fields: (t) => ({
    expectedNodes: t.int({ required: false, description: 'Sizing hint for the VTEP pool, 1..1000 (0 = unset: a /24)' }),
    expectedVms: t.int({ required: false, description: 'Sizing hint for tenant networks (notes only), 1..10000' }),
    fabricSwitchAs: t.float({ required: false, description: `0 = the planner suggests; ${AS_DOC}` }),
    fabricSwitchName: t.string({ required: false }),
    fabricSwitchNos: t.string({ required: false, description: 'sonic | cumulus | nxos | eos | other (required)' }),
    fabricSwitchPeeringIp: t.string({ required: false, description: 'empty = the planner suggests' }),
    fabricSwitchRole: t.string({ required: false, description: 'spine | leaf | border-leaf' }),
    localAs: t.float({ required: false, description: `0 = auto-pick (65000); ${AS_DOC}` }),
    managementCidr: t.string({ required: false, description: 'e.g. 192.168.111.0/24 (required)' }),
    publicMtu: t.int({ required: false, description: 'VR public-side MTU: required in DC mode, ignored in Cube' }),
    routerIdBase: t.string({ required: false, description: 'empty = 10.255.0.0, whatever is stored' }),
    routerIdPrefixLen: t.int({ required: false, description: '0 = auto-size, whatever is stored; a value is kept verbatim' }),
    underlayMode: t.string({ required: false, description: '"" / ospf (default) | bgp' }),
    vxlanMtu: t.int({ required: false, description: 'Fabric MTU, 1280..9216 (required)' }),
  }),
});

const FabricPlanConfigRef = builder.objectRef<PlannedConfig>('FabricPlanConfig').implement({
  description: 'The planned fabric config (what POST fabric-config would store). Never a secret: bgpPassword is always empty.',
  fields: (t) => ({
    advertiseAllVni: t.exposeBoolean('advertiseAllVni'),
    as: t.exposeFloat('as'),
    bfdEnabled: t.exposeBoolean('bfdEnabled'),
    bgpPassword: t.exposeString('bgpPassword', { description: 'Always empty' }),
    fabricSwitchAs: t.exposeFloat('fabricSwitchAs'),
    fabricSwitchName: t.exposeString('fabricSwitchName'),
    fabricSwitchNos: t.exposeString('fabricSwitchNos'),
    fabricSwitchPeeringIp: t.exposeString('fabricSwitchPeeringIp'),
    fabricSwitchRole: t.exposeString('fabricSwitchRole'),
    managementCidr: t.exposeString('managementCidr'),
    ospfArea: t.exposeString('ospfArea'),
    ospfAutoRefBw: t.exposeInt('ospfAutoRefBw'),
    ospfDeadInterval: t.exposeInt('ospfDeadInterval'),
    ospfEnabled: t.exposeBoolean('ospfEnabled'),
    ospfFabricInterface: t.exposeString('ospfFabricInterface'),
    ospfHelloInterval: t.exposeInt('ospfHelloInterval'),
    publicMtu: t.exposeInt('publicMtu'),
    rolloutStatus: t.exposeString('rolloutStatus'),
    routerIdBase: t.exposeString('routerIdBase'),
    routerIdPrefixLen: t.exposeInt('routerIdPrefixLen'),
    vxlanMtu: t.exposeInt('vxlanMtu'),
  }),
});

const FabricPlanRef = builder.objectRef<FabricPlan>('FabricPlan').implement({
  description: 'A dry run of a fabric config: nothing is written.',
  fields: (t) => ({
    config: t.field({ type: FabricPlanConfigRef, resolve: (p) => p.config }),
    deploymentMode: t.exposeString('deploymentMode', { description: 'dc (external route reflector, a VR) | cube (the GW node\'s software RR)' }),
    underlayMode: t.exposeString('underlayMode', { description: 'ospf | bgp' }),
    notes: t.exposeStringList('notes'),
    risks: t.exposeStringList('risks', { description: 'Operator-actionable: each says what to change' }),
    planHash: t.exposeString('planHash', { description: 'sha256 of the planned config and switchConfig: pass it as planHash to upsertFabricConfig' }),
    switchConfig: t.exposeString('switchConfig', { description: 'Rendered for config.fabricSwitchNos only; other = vendor-neutral reference' }),
    vtepCapacity: t.exposeInt('vtepCapacity', { description: 'Usable VTEP addresses of the planned pool' }),
  }),
});

builder.queryField('fabricPlan', (t) =>
  t.field({
    type: FabricPlanRef,
    description: 'Dry-runs a fabric config: auto-sized VTEP pool, suggested switch ASN and peering IP, VNI range, planHash, risks and notes. No write. Needs a platform-scoped grant.',
    args: { input: t.arg({ type: FabricPlanInputRef, required: true }) },
    resolve: (_root, { input }, ctx) => planFabricConfig(ctx, input),
  }),
);
