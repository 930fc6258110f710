/**
 * Names or ids: an operator may name a pool, a site or a node by its name; the API takes ids.
 * An argument shaped like one of the service's ids (`pool_<uuid>`) is used as it is; anything else
 * is looked up by name among what the token may read, and must match exactly one.
 */
import { InvalidArgumentError } from 'commander';
import { MetalNodesDocument, PoolsDocument, SitesDocument, type MetalClient, type MetalNodeViewFragment, type PoolViewFragment } from '../sdk/src';
import { Refusal } from './errors';

const ID = /^[a-z]+_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
export const isId = (value: string, prefix: string): boolean => ID.test(value) && value.startsWith(`${prefix}_`);

export const PROVISION_STATES = ['adopting', 'adopted', 'enrolling', 'inspecting', 'commissioning', 'ready', 'deploying', 'deployed',
  'rescue', 'releasing', 'failed', 'retiring', 'retired'] as const;
export type ProvisionStateName = (typeof PROVISION_STATES)[number];

/** commander argParser: a non-empty single-line value of at most 200 characters (an id or a name). */
export function ref(what: string) {
  return (value: string): string => {
    if (!value || value.length > 200 || /[\u0000-\u001f]/.test(value)) throw new InvalidArgumentError(`not a ${what} id or name`);
    return value;
  };
}

/** commander argParser for a positive integer. */
export function positiveInt(max = Number.MAX_SAFE_INTEGER) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < 1 || n > max) throw new InvalidArgumentError(`must be a whole number from 1 to ${max}`);
    return n;
  };
}

function one<T extends { id: string }>(found: T[], what: string, name: string): T {
  if (found.length === 1) return found[0]!;
  if (found.length === 0) throw new Refusal('NOT_FOUND', `no ${what} is named "${name}" (or the token may not read it)`);
  throw new Refusal('INVALID_INPUT', `${found.length} ${what}s are named "${name}": give the id (${found.map((f) => f.id).join(', ')})`);
}

export async function poolOf(client: MetalClient, value: string): Promise<PoolViewFragment> {
  const { pools } = await client.request(PoolsDocument, {});
  if (isId(value, 'pool')) {
    const pool = pools.find((p) => p.id === value);
    if (!pool) throw new Refusal('NOT_FOUND', `pool ${value} not found (or the token may not read it)`);
    return pool;
  }
  return one(pools.filter((p) => p.name === value), 'pool', value);
}

export async function poolId(client: MetalClient, value: string): Promise<string> {
  return isId(value, 'pool') ? value : (await poolOf(client, value)).id;
}

export async function siteId(client: MetalClient, value: string): Promise<string> {
  if (isId(value, 'site')) return value;
  const { sites } = await client.request(SitesDocument, {});
  return one(sites.filter((s) => s.name === value), 'site', value).id;
}

/** A node by id, or by name among the nodes the token may read (paged through). */
export async function nodeId(client: MetalClient, value: string): Promise<string> {
  if (isId(value, 'node')) return value;
  const found: MetalNodeViewFragment[] = [];
  for await (const node of client.paginate(MetalNodesDocument, {}, (d) => d.nodes, { pageSize: 500 })) {
    if (node.name === value) found.push(node);
  }
  return one(found, 'node', value).id;
}
