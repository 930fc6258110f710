import { utils } from 'ssh2';
import type { SecretBroker } from '../../../clients/secrets/broker';
import { fingerprintOfPublicKeyLine, type HostKeyPolicy, type SshTarget } from '../../../clients/ssh';
import { AppError } from '../../errors';
import type { Tx } from '../../db/client';
import type { PrismaClient } from '../../generated/prisma/client';

/**
 * Compute nodes (issue 10 item 9): the deployed metal nodes whose OS address and SSH access are
 * recorded in `compute_node`. The fabric's preflight and rollouts reach these and nothing else; a
 * node that leaves `deployed` drops out of the list at once (its row stays, for when it returns).
 */

type Db = Pick<PrismaClient, 'computeNode' | 'serviceSshKey' | 'secret' | '$executeRawUnsafe'> | Tx;

export interface ComputeNode {
  nodeId: string;
  /** The OS address the fabric routes name a node by (`/node/{node_ip}`) and SSH connects to. */
  nodeIp: string;
  /** The node's FQDN, or its metal name, or its OS address: what the seed's `fqdn` fields show. */
  fqdn: string;
  sshPort: number;
  sshUser: string;
  /** Pinned SHA256 host key fingerprint; null until the first contact pins it. */
  sshHostKey: string | null;
  /** A per-node private key in the broker, when the node does not trust the service's key. */
  sshKeyRef: string | null;
  /** The underlay interface the operator named for this node; empty = the fabric-wide default. */
  underlayIface: string;
  /** The software route reflector's host when the fabric has no external reflector. */
  isGateway: boolean;
}

const SELECT = {
  nodeId: true, osIp: true, fqdn: true, sshPort: true, sshUser: true, sshHostKey: true, sshKeyRef: true,
  underlayIface: true, isGateway: true, createdAt: true, node: { select: { name: true } },
} as const;

type Row = {
  nodeId: string; osIp: string; fqdn: string; sshPort: number; sshUser: string; sshHostKey: string | null;
  sshKeyRef: string | null; underlayIface: string; isGateway: boolean; createdAt: Date; node: { name: string | null };
};

/** A marked gateway wins; with none marked the oldest compute node is it, so it never moves as nodes join. */
function withGateway(rows: Row[]): ComputeNode[] {
  const marked = rows.some((r) => r.isGateway);
  const oldest = marked ? null : rows.reduce<Row | null>((best, r) => (!best || r.createdAt < best.createdAt
    || (r.createdAt.getTime() === best.createdAt.getTime() && r.nodeId < best.nodeId) ? r : best), null);
  return rows.map((r) => ({
    nodeId: r.nodeId,
    nodeIp: r.osIp,
    fqdn: r.fqdn || r.node.name || r.osIp,
    sshPort: r.sshPort,
    sshUser: r.sshUser,
    sshHostKey: r.sshHostKey,
    sshKeyRef: r.sshKeyRef,
    underlayIface: r.underlayIface,
    isGateway: marked ? r.isGateway : r === oldest,
  }));
}

/** Every compute node, ordered by OS address as text (stable, so fan-out results line up run to run). */
export async function listComputeNodes(db: Db): Promise<ComputeNode[]> {
  const rows = await db.computeNode.findMany({ where: { node: { provisionState: 'deployed' } }, select: SELECT, orderBy: { osIp: 'asc' } });
  return withGateway(rows);
}

/** One compute node by OS address (the gateway flag is computed over all of them); null when none. */
export async function computeNodeByIp(db: Db, nodeIp: string): Promise<ComputeNode | null> {
  return (await listComputeNodes(db)).find((n) => n.nodeIp === nodeIp) ?? null;
}

/** Pins the host key a trust-on-first-use contact saw; a pinned key is never replaced here. */
export async function pinHostKey(db: Db, nodeId: string, fingerprint: string): Promise<void> {
  await db.computeNode.updateMany({ where: { nodeId, sshHostKey: null }, data: { sshHostKey: fingerprint, updatedAt: new Date() } });
}

export interface ServiceSshIdentity {
  algorithm: string;
  /** The OpenSSH public key line to put in every node's authorized_keys. */
  publicKey: string;
  fingerprint: string;
  privateKeyRef: string;
}

const IDENTITY_LOCK = 0x7373686b; // "sshk"

/**
 * The service's own SSH key pair, created on first use (ed25519). The private key goes to the
 * broker in the same transaction as the row, so two first uses never leave two keys.
 */
export async function serviceSshIdentity(prisma: PrismaClient, secrets: SecretBroker | null): Promise<ServiceSshIdentity> {
  const existing = await prisma.serviceSshKey.findUnique({ where: { id: 1 } });
  if (existing) return existing;
  if (!secrets) throw new AppError('INVALID_CONFIG', 'no secret broker is configured (SECRET_KEY): the service cannot keep an SSH key');
  return prisma.$transaction(async (tx) => {
    await tx.$executeRawUnsafe('SELECT pg_advisory_xact_lock($1)', IDENTITY_LOCK);
    const raced = await tx.serviceSshKey.findUnique({ where: { id: 1 } });
    if (raced) return raced;
    const pair = utils.generateKeyPairSync('ed25519', { comment: 'metal-control-plane' });
    const privateKeyRef = await secrets.put(null, pair.private, tx);
    return tx.serviceSshKey.create({
      data: { id: 1, algorithm: 'ssh-ed25519', publicKey: pair.public, fingerprint: fingerprintOfPublicKeyLine(pair.public), privateKeyRef },
    });
  });
}

/**
 * How to reach a node: its own key from the broker when it has one, else the service's; its pinned
 * host key, or trust on first use (the caller pins what it saw with {@link pinHostKey}).
 */
export async function sshTargetOf(node: ComputeNode, identity: ServiceSshIdentity, secrets: SecretBroker | null,
  opts: { connectTimeoutMs?: number; signal?: AbortSignal } = {}): Promise<SshTarget> {
  const keyRef = node.sshKeyRef ?? identity.privateKeyRef;
  if (!secrets) throw new AppError('INVALID_CONFIG', 'no secret broker is configured (SECRET_KEY): no SSH key can be read');
  const privateKey = await secrets.get(keyRef, null);
  if (typeof privateKey !== 'string') throw new AppError('INTERNAL', `the SSH key of ${node.nodeIp} in the broker is not a key`);
  const hostKey: HostKeyPolicy = node.sshHostKey ? { fingerprint: node.sshHostKey } : { trustOnFirstUse: true };
  return { host: node.nodeIp, port: node.sshPort, username: node.sshUser, privateKey, hostKey, ...opts };
}
