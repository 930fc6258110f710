import { builder } from '../../graphql/builder';
import type { MtuDriftEntry, PreflightNode, PreflightResult, VtepPoolView } from './preflight';
import { runPreflight } from './preflight-run';

const NodeRef = builder.objectRef<PreflightNode>('FabricPreflightNode').implement({
  description: 'How one compute node reaches the underlay.',
  fields: (t) => ({
    nodeIp: t.exposeString('nodeIp'),
    fqdn: t.exposeString('fqdn'),
    mode: t.exposeString('mode', {
      description: 'reuse (a bridge with an address in the underlay CIDR), needs_override, override (a node_overrides entry resolves it), unreachable',
    }),
    needsOverride: t.exposeBoolean('needsOverride'),
    bridge: t.exposeString('bridge', { description: 'the matched bridge (reuse) or the override\'s bridge (override); empty otherwise' }),
    bridgeMtu: t.exposeInt('bridgeMtu', { description: 'live kernel MTU of the matched bridge (reuse only); 0 otherwise' }),
    underlayIp: t.exposeString('underlayIp', { description: 'IP/CIDR on the bridge (reuse) or the override\'s (override)' }),
    reason: t.exposeString('reason', { description: 'human-readable explanation for needs_override, override and unreachable' }),
  }),
});

const DriftRef = builder.objectRef<MtuDriftEntry>('FabricPreflightMtuDrift').implement({
  fields: (t) => ({
    nodeIp: t.exposeString('nodeIp'),
    fqdn: t.exposeString('fqdn'),
    bridge: t.exposeString('bridge'),
    bridgeMtu: t.exposeInt('bridgeMtu'),
  }),
});

const PoolRef = builder.objectRef<VtepPoolView>('FabricPreflightVtepPool').implement({
  fields: (t) => ({
    routerIdBase: t.exposeString('routerIdBase'),
    routerIdPrefixLen: t.exposeInt('routerIdPrefixLen'),
    capacity: t.exposeInt('capacity', { description: 'usable host count in the pool' }),
    expectedNodes: t.exposeInt('expectedNodes', { description: 'the input\'s expectedNodes, else the stored fabric config\'s' }),
    headroom: t.exposeInt('headroom', { description: 'capacity - expectedNodes' }),
    overallocWarn: t.exposeBoolean('overallocWarn', { description: 'true when headroom < 0' }),
  }),
});

const ResultRef = builder.objectRef<PreflightResult>('FabricPreflight').implement({
  description: 'The preflight\'s findings (seed: POST /controlnode/fabric-config/preflight). Nothing is changed on any node.',
  fields: (t) => ({
    underlayCidr: t.exposeString('underlayCidr'),
    ready: t.exposeBoolean('ready', { description: 'true ⟺ every node ∈ {reuse} (also with no compute node: apply refuses that); needs_override or unreachable flips this to false' }),
    underlayMtu: t.exposeInt('underlayMtu', {
      description: 'consensus MTU of the reuse nodes\' bridges: N when all agree, 0 when they disagree (mtuDrift lists them) or none is reuse. A fabric config\'s vxlanMtu must equal it.',
    }),
    matchedBridges: t.exposeStringList('matchedBridges'),
    mtuDrift: t.field({ type: [DriftRef], resolve: (r) => r.mtuDrift }),
    nodes: t.field({ type: [NodeRef], resolve: (r) => r.nodes }),
    vtepPool: t.field({ type: PoolRef, resolve: (r) => r.vtepPool }),
    frrHmacShaCapable: t.exposeBoolean('frrHmacShaCapable', {
      nullable: true,
      description: 'The FRR probe\'s finding this run (also written to FabricConfig.frrHmacShaCapable); null when no node answered',
    }),
  }),
});

const OverrideInput = builder.inputType('FabricPreflightNodeOverrideInput', {
  fields: (t) => ({
    nodeIp: t.string({ required: true, description: 'a compute node\'s OS address' }),
    underlayIfaceHint: t.string({ required: true, description: 'the node\'s interface facing the underlay' }),
    underlayIp: t.string({ required: true, description: 'host/CIDR inside underlayCidr, e.g. 10.60.200.5/24' }),
    underlayBridgeName: t.string({ required: false, description: 'empty = derived from the CIDR' }),
  }),
});

const PreflightInputRef = builder.inputType('FabricPreflightInput', {
  fields: (t) => ({
    underlayCidr: t.string({ required: true, description: 'IPv4 CIDR, e.g. 10.60.200.0/24' }),
    expectedNodes: t.int({ required: false, description: 'overrides the stored sizing hint for the capacity warning' }),
    routerIdBase: t.string({ required: false, description: 'VTEP pool base; falls back to the stored fabric config' }),
    routerIdPrefixLen: t.int({ required: false, description: 'VTEP pool prefix; falls back to the stored fabric config' }),
    nodeOverrides: t.field({ type: [OverrideInput], required: false }),
  }),
});

builder.mutationField('fabricPreflight', (t) =>
  t.field({
    type: ResultRef,
    description: 'Reads every compute node over SSH (read-only) and resolves its underlay bridge; records the MTU consensus and the FRR capability. Needs platform admin.',
    args: { input: t.arg({ type: PreflightInputRef, required: true }) },
    resolve: (_root, { input }, ctx) => runPreflight(ctx, input),
  }),
);
