/**
 * bulk VERB --pool P --nodes FILE|--state S: one lifecycle verb on many nodes of a pool as one batch,
 * all or nothing (the service refuses the whole call, listing every refused node, before anything
 * changes). Prints the batch: a verb that sends destructive commands gets one (with its digest),
 * which waits for approvals when the pool has approver keys.
 *
 * batch get BATCH, batch approve BATCH --key FILE: signs the batch digest with an Ed25519 private key
 * (PEM, as `openssl genpkey -algorithm ed25519` writes it) and adds the approval. The key id is found
 * by matching the key's public half with the pool's approver keys (or given with --key-id). The
 * digest is what the service computes over the batch (bulk.ts: sha256 of [id, poolId, verb, reason,
 * sorted nodeIds, wipe]); with --nodes the CLI recomputes it from the node list the approver expects
 * and refuses to sign a batch that is not that one.
 */
import { createHash, createPrivateKey, createPublicKey, sign, type KeyObject } from 'node:crypto';
import fs from 'node:fs';
import { Argument, Option, type Command } from 'commander';
import { ApproveCommandBatchDocument, BulkDocument, MetalNodesDocument, PoolDocument, type BulkMutation } from '../../sdk/src';
import { cli, type Cli } from '../context';
import { Refusal, UsageError } from '../errors';
import { when } from '../output';
import { CommandBatchByIdDocument, type BatchView } from '../operations';
import { isId, poolOf, PROVISION_STATES, ref } from '../resolve';
import { WIPE_MODES, wipeValue } from './verbs';

export const BULK_VERBS = ['manage', 'inspect', 'provide', 'undeploy', 'rescue', 'retire'] as const;
const MAX_FILE = 4 * 1024 * 1024;

/** Node ids (or names) from a file: one per line, or separated by commas/spaces; # starts a comment. */
export function readNodeList(file: string): string[] {
  let text: string;
  try {
    if (fs.statSync(file).size > MAX_FILE) throw new UsageError(`--nodes: the file is larger than ${MAX_FILE} bytes`);
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    if (e instanceof UsageError) throw e;
    throw new UsageError(`--nodes: cannot read the file (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  return text.split('\n').map((l) => l.replace(/#.*$/, '')).flatMap((l) => l.split(/[\s,]+/)).filter(Boolean);
}

function printBatch(invocation: Cli, batch: Partial<BatchView>): void {
  const approvals = Array.isArray(batch.approvals) ? (batch.approvals as { keyId: string; at: string }[]) : [];
  invocation.out.record([
    ['batch', batch.id], ['pool', batch.poolId], ['verb', batch.verb], ['reason', batch.reason], ['wipe', batch.wipe],
    ['nodes', batch.nodeCount], ['status', batch.status], ['quorum', batch.quorum],
    ['approvals', approvals.map((a) => `${a.keyId} (${when(a.at)})`).join(', ')], ['digest', batch.digest],
    ['created', when(batch.createdAt)], ['released', when(batch.releasedAt)],
  ]);
}

async function bulk(invocation: Cli, verb: string, o: { pool: string; nodes?: string; state?: string; reason?: string; wipe?: string }): Promise<void> {
  if (Boolean(o.nodes) === Boolean(o.state)) throw new UsageError('give exactly one of --nodes FILE and --state STATE');
  if (o.wipe && verb !== 'undeploy') throw new UsageError('--wipe applies to undeploy only');
  const client = invocation.client();
  const pool = await poolOf(client, o.pool);
  // The pool's nodes, for names and for --state (the service decides again, per node, in one statement).
  const inPool: { id: string; name?: string | null; provisionState: string }[] = [];
  for await (const n of client.paginate(MetalNodesDocument, { filter: { poolId: pool.id, ...(o.state ? { provisionState: o.state as 'ready' } : {}) } }, (d) => d.nodes, { pageSize: 500 })) {
    inPool.push(n);
  }
  let nodeIds: string[];
  if (o.nodes) {
    const listed = readNodeList(o.nodes);
    if (listed.length === 0) throw new Refusal('INVALID_INPUT', '--nodes: the file lists no node');
    const unknown: number[] = [];
    nodeIds = listed.map((v, i) => {
      if (isId(v, 'node')) return v;
      const named = inPool.filter((n) => n.name === v);
      if (named.length !== 1) unknown.push(i + 1);
      return named[0]?.id ?? v;
    });
    if (unknown.length) {
      throw new Refusal('INVALID_INPUT', `--nodes: ${unknown.length} entr${unknown.length === 1 ? 'y' : 'ies'} (number ${unknown.slice(0, 20).join(', ')}${unknown.length > 20 ? ' ...' : ''}) name no single node of pool ${pool.id}; nothing was sent`);
    }
  } else {
    nodeIds = inPool.map((n) => n.id);
    if (nodeIds.length === 0) throw new Refusal('INVALID_INPUT', `pool ${pool.id} has no node in state ${o.state}: nothing to do`);
  }
  const { bulkNodes } = await client.request(BulkDocument, {
    input: { poolId: pool.id, verb: verb as 'manage', nodeIds, ...(o.reason ? { reason: o.reason } : {}), ...(o.wipe ? { wipe: wipeValue(o.wipe) } : {}) },
  });
  if (invocation.out.json) return invocation.out.printJson(bulkNodes);
  printSummary(invocation, verb, bulkNodes);
}

function printSummary(invocation: Cli, verb: string, result: BulkMutation['bulkNodes']): void {
  const byState = new Map<string, number>();
  for (const n of result.nodes) byState.set(n.provisionState, (byState.get(n.provisionState) ?? 0) + 1);
  invocation.out.line(`bulk ${verb}: ${result.nodes.length} node(s), now ${[...byState].map(([s, k]) => `${k} ${s}`).join(', ')}`);
  if (result.batch) {
    printBatch(invocation, result.batch);
    if (result.batch.status === 'awaiting-approval') {
      invocation.out.line(`waiting for ${result.batch.quorum} approval(s): metalctl batch approve ${result.batch.id} --key <ed25519 private key file>`);
    }
  } else {
    invocation.out.line('no batch: this verb sends nothing destructive');
  }
}

async function getBatch(invocation: Cli, id: string): Promise<Partial<BatchView>> {
  if (!isId(id, 'bat')) throw new UsageError('BATCH must be a batch id (bat_...)');
  const { node } = await invocation.client().request(CommandBatchByIdDocument, { id });
  if (!node || node.__typename !== 'CommandBatch') throw new Refusal('NOT_FOUND', `batch ${id} not found (or the token may not read it)`);
  return node;
}

function readPrivateKey(file: string): KeyObject {
  let pem: Buffer;
  try {
    const stat = fs.statSync(file);
    if (stat.size > 64 * 1024) throw new UsageError('--key: the file is too large for a key');
    if ((stat.mode & 0o077) !== 0) process.stderr.write(`warning: --key: the private key can be read by other users (mode ${(stat.mode & 0o777).toString(8)}); chmod 600 it\n`);
    pem = fs.readFileSync(file);
  } catch (e) {
    if (e instanceof UsageError) throw e;
    throw new UsageError(`--key: cannot read the file (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  let key: KeyObject;
  try {
    key = createPrivateKey(pem);
  } catch {
    // The parser's own message can quote the file: not repeated.
    throw new Refusal('INVALID_INPUT', '--key: not a PEM (or DER) private key');
  } finally {
    pem.fill(0);
  }
  if (key.asymmetricKeyType !== 'ed25519') throw new Refusal('INVALID_INPUT', `--key: an Ed25519 private key is needed, not ${key.asymmetricKeyType}`);
  return key;
}

/** An approver key's 32 raw bytes, from base64 or PEM as pool policies hold them (null if unreadable). */
function rawPublicKey(value: string): string | null {
  try {
    const key = value.includes('BEGIN PUBLIC KEY')
      ? createPublicKey(value)
      : createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(value, 'base64').toString('base64url') }, format: 'jwk' });
    return (key.export({ format: 'jwk' }) as { x?: string }).x ?? null;
  } catch {
    return null;
  }
}

export function batchDigest(b: { id: string; poolId: string; verb: string; reason: string; nodeIds: string[]; wipe: string | null }): string {
  return createHash('sha256').update(JSON.stringify([b.id, b.poolId, b.verb, b.reason, [...b.nodeIds].sort(), b.wipe])).digest('hex');
}

async function approve(invocation: Cli, id: string, o: { key: string; keyId?: string; nodes?: string }): Promise<void> {
  const key = readPrivateKey(o.key);
  const batch = await getBatch(invocation, id);
  if (batch.status !== 'awaiting-approval') throw new Refusal('INVALID_STATE', `batch ${id} is ${batch.status}, not awaiting approval`);
  if (!batch.digest || !/^[0-9a-f]{64}$/.test(batch.digest)) throw new Refusal('INVALID_STATE', `batch ${id} has no sha256 digest to sign`);
  if (o.nodes) {
    const expected = batchDigest({ id: batch.id!, poolId: batch.poolId!, verb: batch.verb!, reason: batch.reason!, nodeIds: readNodeList(o.nodes), wipe: batch.wipe ?? null });
    if (expected !== batch.digest) throw new Refusal('DIGEST_MISMATCH', `batch ${id} is not the batch of these nodes (its digest differs): not signed`);
  }
  let keyId = o.keyId;
  if (!keyId) {
    const { node: pool } = await invocation.client().request(PoolDocument, { id: batch.poolId! });
    const mine = (createPublicKey(key).export({ format: 'jwk' }) as { x?: string }).x;
    const keys = pool && 'policy' in pool ? pool.policy.approverKeys : [];
    const match = keys.find((k) => rawPublicKey(k.publicKey) === mine);
    if (!match) throw new Refusal('INVALID_INPUT', `--key: its public key is not one of pool ${batch.poolId}'s approver keys (give --key-id to try anyway)`);
    keyId = match.id;
  }
  const signature = sign(null, Buffer.from(batch.digest, 'hex'), key).toString('base64');
  const { approveCommandBatch: after } = await invocation.client().request(ApproveCommandBatchDocument, { batchId: id, keyId, signature });
  if (invocation.out.json) return invocation.out.printJson(after);
  invocation.out.line(`approved batch ${id} as ${keyId}: ${after.status}${after.status === 'approved' ? '' : ` (${Array.isArray(after.approvals) ? after.approvals.length : '?'} of ${after.quorum})`}`);
  printBatch(invocation, after);
}

export function register(program: Command): void {
  program.command('bulk').description('one lifecycle verb on many nodes of a pool, as one batch (all or nothing); prints the batch')
    .addArgument(new Argument('<verb>', 'the verb').choices(BULK_VERBS))
    .requiredOption('--pool <pool>', 'the pool (id or name)', ref('pool'))
    .option('--nodes <file>', 'a file of node ids or names (one per line, # comments)')
    .addOption(new Option('--state <state>', 'every node of the pool in this state').choices(PROVISION_STATES))
    .option('--reason <text>', 'why (required by the service for verbs that send destructive commands)')
    .addOption(new Option('--wipe <mode>', 'undeploy only: how the disks are wiped').choices(WIPE_MODES))
    .action(async (verb: string, o: { pool: string; nodes?: string; state?: string; reason?: string; wipe?: string }, cmd: Command) => {
      await bulk(cli(cmd), verb, o);
    });

  const batch = program.command('batch').description('show and approve command batches');
  batch.command('get').description('show a batch: verb, reason, nodes, digest, approvals')
    .argument('<batch>', 'batch id (bat_...)', ref('batch'))
    .action(async (id: string, _o: unknown, cmd: Command) => {
      const invocation = cli(cmd);
      const b = await getBatch(invocation, id);
      if (invocation.out.json) return invocation.out.printJson(b);
      printBatch(invocation, b);
    });
  batch.command('approve').description('sign the batch digest with an Ed25519 private key and add the approval')
    .argument('<batch>', 'batch id (bat_...)', ref('batch'))
    .requiredOption('--key <file>', 'the approver\'s Ed25519 private key (PEM); never sent, only its signature')
    .option('--key-id <id>', 'the approver key id in the pool policy (default: found from the key)')
    .option('--nodes <file>', 'the node ids the batch must be for: refuse to sign unless the digest matches')
    .action(async (id: string, o: { key: string; keyId?: string; nodes?: string }, cmd: Command) => {
      await approve(cli(cmd), id, o);
    });
}
