import ipaddr from 'ipaddr.js';
import { utils } from 'ssh2';
import type { SecretBroker } from '../../../clients/secrets/broker';
import { fingerprintOfPublicKeyLine, parseFingerprint, type HostKeyPolicy, type SshTarget } from '../../../clients/ssh';
import { decide } from '../../auth/decide';
import { requirePrincipal, type Context } from '../../context';
import { AppError, invalidInput, notFound } from '../../errors';
import { publish } from '../../events/outbox';
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

/**
 * Pins the host key a trust-on-first-use contact saw; a pinned key is never replaced here (an
 * admin unpins with setComputeNode). True when this call pinned it. The fingerprint is checked
 * first: the table's CHECK would refuse a malformed one only as an opaque database error.
 */
export async function pinHostKey(db: Db, nodeId: string, fingerprint: string): Promise<boolean> {
  const pinned = parseFingerprint(fingerprint, 'fingerprint');
  const { count } = await db.computeNode.updateMany({ where: { nodeId, sshHostKey: null }, data: { sshHostKey: pinned, updatedAt: new Date() } });
  return count > 0;
}

export interface ServiceSshIdentity {
  algorithm: string;
  /** The OpenSSH public key line to put in every node's authorized_keys. */
  publicKey: string;
  fingerprint: string;
  privateKeyRef: string;
}

const IDENTITY_LOCK = 0x7373686b; // "sshk"

type KeyPair = { private: string; public: string };

/**
 * An ed25519 key pair ssh2 can read back. ssh2's generator strips the leading zero bytes of the
 * public key (mscdex/ssh2#1390, #1513), so about one pair in 256 is one its own parseKey refuses:
 * the service would be left with a key it can never connect with. Such a pair is generated again.
 */
export function usableEd25519Pair(generate: () => KeyPair = () => utils.generateKeyPairSync('ed25519', { comment: 'metal-control-plane' })): KeyPair {
  for (let attempt = 1; attempt <= 16; attempt += 1) {
    const pair = generate();
    const parses = (text: string) => { const k = utils.parseKey(text); return !(k instanceof Error) && !(Array.isArray(k) && k.length === 0); };
    if (parses(pair.private) && parses(pair.public)) return pair;
  }
  throw new Error('could not generate an ed25519 key pair that ssh2 can read back');
}

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
    const pair = usableEd25519Pair();
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

// ---------------------------------------------------------------------------------------------
// The admin surface: list, set and remove a node's compute access, the service's public key.
// Reading needs a platform-scoped grant, writing platform admin (the fabric config's rule).

/** What an admin sees of a compute node: whether a key is pinned or stored, never a key. */
export interface ComputeNodeView {
  nodeId: string;
  osIp: string;
  fqdn: string;
  sshPort: number;
  sshUser: string;
  /** The pinned host key fingerprint (public: what `ssh-keygen -lf` prints on the node); null = trust on first use. */
  sshHostKey: string | null;
  hostKeyPinned: boolean;
  perNodeKeySet: boolean;
  underlayIface: string;
  isGateway: boolean;
  vtepIp: string | null;
  /** Only deployed nodes are reached by the fabric; a recorded node waits for its deploy. */
  deployed: boolean;
}

export interface SetComputeNodeInput {
  nodeId: string;
  osIp: string;
  fqdn?: string | null;
  sshPort?: number | null;
  sshUser?: string | null;
  /** "SHA256:..." pins it; left out keeps what is pinned. */
  sshHostKey?: string | null;
  /** Unpins the host key: the next contact trusts on first use again. */
  clearSshHostKey?: boolean | null;
  /** Write-only: an OpenSSH/PEM private key for this node, kept in the broker; empty = unchanged. */
  sshPrivateKey?: string | null;
  clearSshPrivateKey?: boolean | null;
  underlayIface?: string | null;
  isGateway?: boolean | null;
}

const COMPUTE_WRITE_LOCK = 0x636d706e; // "cmpn": one writer moves the gateway flag at a time
const IFNAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$/;
const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;
/** What useradd accepts, and nothing a shell or an ssh option could read as more than a name. */
const SSH_USER = /^[A-Za-z_][A-Za-z0-9._-]{0,31}$/;
const PRIVATE_KEY_MAX = 16384;

const field = (name: keyof SetComputeNodeInput) => `input.${name}`;
const given = <T>(value: T | null | undefined): value is T => value !== undefined && value !== null;

/** Every field checked, before any read or write; the key's text never reaches a message. */
function checkInput(input: SetComputeNodeInput): void {
  if (input.nodeId.trim() === '') throw invalidInput(field('nodeId'), 'is required');
  // The underlay renders the OS address as the node's IPv4 address on the management subnet.
  if (!ipaddr.IPv4.isValidFourPartDecimal(input.osIp)) throw invalidInput(field('osIp'), 'must be an IPv4 address (A.B.C.D)');
  if (given(input.fqdn) && input.fqdn !== '' && !HOSTNAME.test(input.fqdn)) throw invalidInput(field('fqdn'), 'must be a hostname (RFC 1123 labels) or empty');
  if (given(input.sshPort) && (!Number.isInteger(input.sshPort) || input.sshPort < 1 || input.sshPort > 65535)) {
    throw invalidInput(field('sshPort'), 'must be an integer 1..65535');
  }
  if (given(input.sshUser) && !SSH_USER.test(input.sshUser)) throw invalidInput(field('sshUser'), 'must be a user name: a letter or _, then up to 31 of letters, digits, . _ -');
  if (given(input.sshHostKey)) {
    if (input.clearSshHostKey) throw invalidInput(field('clearSshHostKey'), 'cannot be combined with input.sshHostKey');
    try {
      parseFingerprint(input.sshHostKey, field('sshHostKey'));
    } catch {
      throw invalidInput(field('sshHostKey'), 'must be an OpenSSH SHA-256 fingerprint (SHA256: and 43 base64 characters, as ssh-keygen -l prints)');
    }
  }
  if (given(input.sshPrivateKey) && input.sshPrivateKey !== '') {
    if (input.clearSshPrivateKey) throw invalidInput(field('clearSshPrivateKey'), 'cannot be combined with input.sshPrivateKey');
    if (input.sshPrivateKey.length > PRIVATE_KEY_MAX) throw invalidInput(field('sshPrivateKey'), `must be at most ${PRIVATE_KEY_MAX} characters`);
    let parsed: ReturnType<typeof utils.parseKey>;
    try {
      parsed = utils.parseKey(input.sshPrivateKey);
    } catch {
      // The parser's own message may quote the input; none of it reaches the answer.
      parsed = new Error('unparsable');
    }
    if (parsed instanceof Error || !parsed.isPrivateKey()) {
      throw invalidInput(field('sshPrivateKey'), 'must be an unencrypted private key (OpenSSH or PEM); a passphrase-protected key cannot be used unattended');
    }
  }
  if (given(input.underlayIface) && input.underlayIface !== '' && !IFNAME.test(input.underlayIface)) {
    throw invalidInput(field('underlayIface'), 'must be a Linux interface name (up to 15 of letters, digits, _ . -) or empty');
  }
}

function viewOf(node: ComputeNode, deployed: boolean, vtepIp: string | null): ComputeNodeView {
  return {
    nodeId: node.nodeId, osIp: node.nodeIp, fqdn: node.fqdn, sshPort: node.sshPort, sshUser: node.sshUser,
    sshHostKey: node.sshHostKey, hostKeyPinned: node.sshHostKey !== null, perNodeKeySet: node.sshKeyRef !== null,
    underlayIface: node.underlayIface, isGateway: node.isGateway, vtepIp, deployed,
  };
}

/** The deployed compute nodes as admins see them, with their VTEP address when one is allocated. */
export async function computeNodeViews(ctx: Context): Promise<ComputeNodeView[]> {
  decide(requirePrincipal(ctx), 'read', { type: 'platform' });
  const nodes = await listComputeNodes(ctx.prisma);
  const vteps = await ctx.prisma.fabricVtep.findMany({ where: { nodeId: { in: nodes.map((n) => n.nodeId) } }, select: { nodeId: true, ip: true } });
  const byNode = new Map(vteps.map((v) => [v.nodeId, v.ip]));
  return nodes.map((n) => viewOf(n, true, byNode.get(n.nodeId) ?? null));
}

/** One node's view: the gateway flag as the list computes it when the node is deployed. */
async function viewOfNode(db: PrismaClient | Tx, nodeId: string): Promise<ComputeNodeView> {
  const listed = (await listComputeNodes(db)).find((n) => n.nodeId === nodeId);
  const vtep = await db.fabricVtep.findUnique({ where: { nodeId }, select: { ip: true } });
  if (listed) return viewOf(listed, true, vtep?.ip ?? null);
  const row = await db.computeNode.findUnique({ where: { nodeId }, select: SELECT });
  if (!row) throw notFound('compute node', nodeId);
  const [node] = withGateway([row]);
  return viewOf({ ...node!, isGateway: row.isGateway }, false, vtep?.ip ?? null);
}

export interface SetComputeNodeResult {
  created: boolean;
  node: ComputeNodeView;
}

/**
 * Records (or changes) a node's compute access. Fields left out keep their value (a new row takes
 * the defaults: port 22, user root, trust on first use, the service's key). isGateway true moves
 * the flag to this node in the same transaction, so there is never a moment with two.
 */
export async function setComputeNode(ctx: Context, input: SetComputeNodeInput): Promise<SetComputeNodeResult> {
  decide(requirePrincipal(ctx), 'admin', { type: 'platform' });
  checkInput(input);
  const newKey = given(input.sshPrivateKey) && input.sshPrivateKey !== '' ? input.sshPrivateKey : null;
  if (newKey && !ctx.secrets) throw new AppError('INVALID_CONFIG', 'no secret broker is configured (SECRET_KEY): a per-node SSH key cannot be stored');
  const retired: string[] = [];
  const result = await ctx.prisma.$transaction(async (tx) => {
    await tx.$executeRawUnsafe('SELECT pg_advisory_xact_lock($1)', COMPUTE_WRITE_LOCK);
    const node = await tx.node.findUnique({ where: { id: input.nodeId }, select: { id: true } });
    if (!node) throw new AppError('NOT_FOUND', `${field('nodeId')}: node ${input.nodeId} not found`, { field: field('nodeId') });
    const holder = await tx.computeNode.findUnique({ where: { osIp: input.osIp }, select: { nodeId: true } });
    if (holder && holder.nodeId !== input.nodeId) {
      throw new AppError('CONFLICT', `${field('osIp')}: is already the OS address of node ${holder.nodeId}`, { field: field('osIp') });
    }
    const existing = await tx.computeNode.findUnique({ where: { nodeId: input.nodeId }, select: { sshKeyRef: true } });
    let sshKeyRef = existing?.sshKeyRef ?? null;
    if (newKey || input.clearSshPrivateKey) {
      if (sshKeyRef) retired.push(sshKeyRef);
      sshKeyRef = newKey ? await ctx.secrets!.put(null, newKey, tx) : null;
    }
    if (input.isGateway === true) {
      await tx.computeNode.updateMany({ where: { isGateway: true, nodeId: { not: input.nodeId } }, data: { isGateway: false, updatedAt: new Date() } });
    }
    const data = {
      osIp: input.osIp,
      ...(given(input.fqdn) ? { fqdn: input.fqdn } : {}),
      ...(given(input.sshPort) ? { sshPort: input.sshPort } : {}),
      ...(given(input.sshUser) ? { sshUser: input.sshUser } : {}),
      ...(given(input.sshHostKey) ? { sshHostKey: input.sshHostKey.trim() } : input.clearSshHostKey ? { sshHostKey: null } : {}),
      ...(given(input.underlayIface) ? { underlayIface: input.underlayIface } : {}),
      ...(given(input.isGateway) ? { isGateway: input.isGateway } : {}),
      sshKeyRef,
    };
    if (existing) await tx.computeNode.update({ where: { nodeId: input.nodeId }, data: { ...data, updatedAt: new Date() } });
    else await tx.computeNode.create({ data: { nodeId: input.nodeId, ...data } });
    await publish(tx, {
      type: existing ? 'fabric.compute_node.updated' : 'fabric.compute_node.created',
      tenantId: null,
      subject: input.nodeId,
      // Names of what was given, never a value a secret could be in.
      payload: { nodeId: input.nodeId, osIp: input.osIp, fields: Object.keys(input).filter((k) => k !== 'nodeId' && given(input[k as keyof SetComputeNodeInput])) },
    });
    return { created: existing === null, node: await viewOfNode(tx, input.nodeId) };
  });
  await retire(ctx, retired);
  return result;
}

/** Removes a node's compute access (its VTEP address goes with it, by cascade) and its per-node key. */
export async function removeComputeNode(ctx: Context, nodeId: string): Promise<void> {
  decide(requirePrincipal(ctx), 'admin', { type: 'platform' });
  const retired = await ctx.prisma.$transaction(async (tx) => {
    await tx.$executeRawUnsafe('SELECT pg_advisory_xact_lock($1)', COMPUTE_WRITE_LOCK);
    const row = await tx.computeNode.findUnique({ where: { nodeId }, select: { sshKeyRef: true, osIp: true } });
    if (!row) throw notFound('compute node', nodeId);
    await tx.computeNode.delete({ where: { nodeId } });
    await publish(tx, { type: 'fabric.compute_node.removed', tenantId: null, subject: nodeId, payload: { nodeId, osIp: row.osIp } });
    return row.sshKeyRef ? [row.sshKeyRef] : [];
  });
  await retire(ctx, retired);
}

/** The service's public key for admins to install; the pair is created on first read. */
export async function serviceSshKeyView(ctx: Context): Promise<{ algorithm: string; publicKey: string; fingerprint: string }> {
  decide(requirePrincipal(ctx), 'read', { type: 'platform' });
  const { algorithm, publicKey, fingerprint } = await serviceSshIdentity(ctx.prisma, ctx.secrets);
  return { algorithm, publicKey, fingerprint };
}

/** After the commit, so a rollback never leaves a row pointing at a deleted key. */
async function retire(ctx: Context, refs: string[]): Promise<void> {
  for (const ref of refs) {
    try {
      await ctx.secrets?.delete(ref, null);
    } catch (error) {
      ctx.log.warn({ err: { message: (error as Error).message }, ref }, 'compute node: a replaced SSH key could not be removed from the broker');
    }
  }
}
