import type { SecretBroker } from '../clients/secrets/broker';
import { SshError, type SshTarget } from '../clients/ssh';
import type { PrismaClient } from '../src/generated/prisma/client';
import { listComputeNodes, serviceSshIdentity, sshTargetOf, type ComputeNode } from '../src/modules/fabric/compute-nodes';
import { fabricConfigRow, settingsOf } from '../src/modules/fabric/config';
import { findGateway, renderHostFrr } from '../src/modules/fabric/render/host-frr';
import { nodeIntentsOf, renderIntentOf } from '../src/modules/fabric/render-intent';
import { allocateVteps } from '../src/modules/fabric/vtep';
import type { FabricIntent, FabricNodeIntent, FabricSecrets } from '../src/modules/fabric/intent';
import { StepFailure } from './fabric-steps';

/**
 * What a fabric rollout needs to know before it touches a node: the fabric's secrets (and a
 * scrubber that keeps them out of every message), each node's SSH target, and an apply's per-node
 * plan (rendered frr.conf, VTEP, the neighbours verify_bgp waits for, the underlay). Pure reads;
 * the VTEP allocation is the one write (idempotent: a node keeps its VTEP).
 */

export interface NodePlan {
  node: ComputeNode;
  target: SshTarget;
  config: string;
  vtepIp: string;
  expectedNeighbours: string[];
  underlayIface: string;
  vxlanMtu: number;
  /** The FRR daemons the config needs (bgpd; ospfd under the OSPF underlay; bfdd with BFD). */
  daemons: string[];
}

export interface PlanDeps {
  prisma: PrismaClient;
  secrets: SecretBroker | null;
  connectTimeoutMs: number;
}

/** A message as it may be recorded: no fabric secret in it, whatever a command printed. */
function scrubber(secrets: string[]): (text: string) => string {
  const values = secrets.filter((s) => s.length >= 4);
  return (text) => values.reduce((out, s) => out.split(s).join('[redacted]'), text);
}

export function messageOf(err: unknown): string {
  if (err instanceof SshError || err instanceof StepFailure) return err.message;
  if (err instanceof Error) return err.message.slice(0, 500);
  return String(err).slice(0, 500);
}

/** The fabric's stored secrets, read through the broker; the scrubber that hides them. */
async function fabricSecrets(deps: PlanDeps, refs: { bgpPasswordRef: string | null; ospfAuthKeyRef: string | null }): Promise<{ secrets: FabricSecrets; scrub: (text: string) => string }> {
  const read = async (ref: string | null, what: string): Promise<string | undefined> => {
    if (!ref) return undefined;
    if (!deps.secrets) throw new Error(`no secret broker is configured (SECRET_KEY): the ${what} cannot be read`);
    const value = await deps.secrets.get(ref, null);
    if (typeof value !== 'string') throw new Error(`the stored ${what} is not a string`);
    return value;
  };
  const secrets: FabricSecrets = {};
  const bgp = await read(refs.bgpPasswordRef, 'BGP password');
  const ospf = await read(refs.ospfAuthKeyRef, 'OSPF key');
  if (bgp) secrets.bgpPassword = bgp;
  if (ospf) secrets.ospfAuthKey = ospf;
  return { secrets, scrub: scrubber([bgp ?? '', ospf ?? '']) };
}

/** Each node's SSH target (the service's key, or the node's own from the broker). */
export async function targetsOf(deps: PlanDeps, nodes: ComputeNode[]): Promise<Map<string, SshTarget>> {
  const identity = await serviceSshIdentity(deps.prisma, deps.secrets);
  const out = new Map<string, SshTarget>();
  for (const node of nodes) {
    out.set(node.nodeId, await sshTargetOf(node, identity, deps.secrets, { connectTimeoutMs: deps.connectTimeoutMs }));
  }
  return out;
}

/**
 * The per-node plans of an apply of `wanted` (node ids): the nodes still deployed compute nodes
 * get a plan; `gone` lists the others. The gateway (the software route reflector) is rendered
 * with them even when it is not applied, so the clients' neighbour is known.
 */
export async function planApply(deps: PlanDeps, wanted: string[]): Promise<{ plans: Map<string, NodePlan>; gone: string[]; scrub: (text: string) => string }> {
  const config = await fabricConfigRow(deps.prisma);
  if (!config) throw new Error('the fabric config was deleted before the rollout ran');
  const settings = settingsOf(config);
  const { secrets, scrub } = await fabricSecrets(deps, config);
  const intent = renderIntentOf(settings);
  const all = await listComputeNodes(deps.prisma);
  const byId = new Map(all.map((n) => [n.nodeId, n]));
  const present = wanted.map((id) => byId.get(id)).filter((n): n is ComputeNode => n !== undefined);
  const gone = wanted.filter((id) => !byId.has(id));
  const gatewayNode = intent.externalRouteReflector ? undefined : all.find((n) => n.isGateway);
  const renderSet = gatewayNode && !present.some((n) => n.nodeId === gatewayNode.nodeId) ? [...present, gatewayNode] : present;
  const vteps = await allocateVteps(deps.prisma, renderSet.map((n) => n.nodeId));
  const intents = nodeIntentsOf(renderSet, vteps);
  const intentById = new Map(renderSet.map((n, i) => [n.nodeId, intents[i]!]));
  const gateway = intent.externalRouteReflector || renderSet.length === 0 ? undefined : findGateway(intents);
  const targets = await targetsOf(deps, present);
  const plans = new Map<string, NodePlan>();
  for (const node of present) {
    const nodeIntent = intentById.get(node.nodeId)!;
    plans.set(node.nodeId, {
      node,
      target: targets.get(node.nodeId)!,
      config: renderHostFrr(intent, nodeIntent, secrets, gateway),
      vtepIp: nodeIntent.vtepIp,
      expectedNeighbours: expectedNeighbours(intent, nodeIntent, gateway),
      underlayIface: node.underlayIface || (settings.ospfEnabled ? settings.ospfFabricInterface : ''),
      vxlanMtu: settings.vxlanMtu,
      daemons: ['bgpd', ...(intent.underlay === 'ospf' ? ['ospfd'] : []), ...(intent.bfdEnabled ? ['bfdd'] : [])],
    });
  }
  return { plans, gone, scrub };
}

/**
 * The neighbours a node must see Established: its route reflector (the switch, or the gateway's
 * BGP source); on the software reflector itself only the switch, when it peers with one (its
 * clients arrive through the listen range and are not known in advance).
 */
export function expectedNeighbours(intent: FabricIntent, node: FabricNodeIntent, gateway: FabricNodeIntent | undefined): string[] {
  const source = (peer: FabricNodeIntent) => (intent.underlay === 'bgp' ? peer.underlayIp : peer.vtepIp);
  if (intent.externalRouteReflector) return intent.switch.peeringIp ? [intent.switch.peeringIp] : [];
  if (node.isGateway) return intent.switch.peeringIp ? [intent.switch.peeringIp] : [];
  return gateway ? [source(gateway)] : [];
}
