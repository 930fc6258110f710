import type { Context } from '../../context';
import type { GraphQLResolveInfo } from 'graphql';
import { PothosValidationError, getConnectionPageSize, validateConnectionArguments } from '@pothos/core';
import { formatPrismaCursor, parsePrismaCursor } from '@pothos/plugin-prisma';
import { selectedFields } from '../../graphql/selection';
import { NODE_FIELDS, POOL_FIELDS, PROFILE_FIELDS, SITE_FIELDS, nodeArrayView, type ArrayView, type NodePageRow, type ViewFields } from './node-rows';

/**
 * The `nodes` connection in one SQL statement: the page of nodes with the pool, site and hardware
 * profile the selection includes, joined, in exactly the rows Prisma's `findMany` with that include
 * returns.
 *
 * Through Prisma a page was three statements (nodes, then pools and sites by `IN` lists) and most
 * of a cache miss's server CPU went to Prisma's query compiler and result mapping and to the two
 * extra round trips (npm run bench -- read --query nodes). The connection plumbing (arguments,
 * cursors, pageInfo) stays the prisma plugin's: it hands over its planned query (take, skip,
 * cursor, include), and this answers it when it is a shape it knows; anything else returns null
 * and the caller runs the query through Prisma as before.
 */

/** What the prisma plugin's connection passes to its resolver, as far as this reads it. */
/** The `nodes` connection's filter argument (GraphQL `NodeFilter`). */
export interface NodeListFilter {
  siteId?: string | null;
  poolId?: string | null;
  provisionState?: string | null;
  maintenance?: boolean | null;
}

/**
 * The Prisma `where` of a `nodes` page: the caller's read scope and the filter, in the one shape
 * {@link whereSql} translates (anything else goes to Prisma as before).
 */
export function nodeListWhere(access: object | null, filter: NodeListFilter) {
  return {
    AND: [
      access ?? {},
      filter.siteId ? { siteId: filter.siteId } : {},
      filter.poolId ? { poolId: filter.poolId } : {},
      filter.provisionState ? { provisionState: filter.provisionState } : {},
      filter.maintenance != null ? { maintenance: filter.maintenance } : {},
    ],
  };
}

export interface PlannedQuery {
  take?: number;
  skip?: number;
  cursor?: Record<string, unknown>;
  include?: Record<string, unknown>;
  [key: string]: unknown;
}

/** The node columns a page may filter on, with the SQL type their parameters are cast to. */
const FILTER_COLUMNS: Record<string, string> = {
  id: 'text',
  tenantId: 'text',
  siteId: 'text',
  poolId: 'text',
  provisionState: '"ProvisionState"',
  maintenance: 'boolean',
};

/** Relations the statement joins; an include of anything else (or of their own relations) goes to Prisma. */
const JOINED = new Set(['pool', 'site', 'hardwareProfile']);

const snake = (field: string) => field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A Prisma where-input over node columns as SQL on alias `n`, its values appended to `values`.
 * Only the forms the read filters and the page filter build: `{col: value}`, `{col: {in: [...]}}`,
 * AND and OR lists. Anything else is null, so a filter this does not understand can never be
 * read more widely than Prisma would: the caller then uses Prisma.
 */
export function whereSql(where: unknown, values: unknown[]): string | null {
  if (!isPlainObject(where)) return null;
  const parts: string[] = [];
  for (const [key, value] of Object.entries(where)) {
    if (value === undefined) continue;
    if (key === 'AND' || key === 'OR') {
      if (!Array.isArray(value)) return null;
      const inner: string[] = [];
      for (const item of value) {
        const sql = whereSql(item, values);
        if (sql === null) return null;
        inner.push(`(${sql})`);
      }
      // Prisma: an empty AND is true, an empty OR matches nothing.
      parts.push(inner.length ? inner.join(key === 'AND' ? ' AND ' : ' OR ') : key === 'AND' ? 'TRUE' : 'FALSE');
      continue;
    }
    const cast = FILTER_COLUMNS[key];
    if (!cast) return null;
    if (typeof value === 'string' || typeof value === 'boolean') {
      values.push(value);
      parts.push(`n.${snake(key)} = $${values.length}::${cast}`);
    } else if (isPlainObject(value) && Object.keys(value).length === 1 && Array.isArray(value.in) && value.in.every((v) => typeof v === 'string')) {
      values.push(value.in);
      parts.push(`n.${snake(key)} = ANY($${values.length}::${cast}[])`);
    } else {
      return null;
    }
  }
  return parts.length ? parts.join(' AND ') : 'TRUE';
}

/**
 * The Prisma fields each GraphQL field of a type reads, for the fields that are not a column of
 * the same name. A field in neither (one added later and not listed here) makes the page read
 * every column of that type, so a new field can make a page slower but never wrong.
 */
const NODE_READS: Record<string, readonly string[]> = {
  __typename: [],
  site: ['siteId'],
  pool: ['poolId'],
  hardwareProfile: ['hardwareProfileId'],
  lastError: ['lastErrorCode', 'lastErrorMessage'],
  bmc: ['bmcAddress', 'bmcDriver', 'bmcDriverOptions', 'bmcCredentialsRef'],
  // Loaded by the node's id (always read).
  bmcInfo: [],
};
const POOL_READS: Record<string, readonly string[]> = { __typename: [], site: ['siteId'] };
const PLAIN_READS: Record<string, readonly string[]> = { __typename: [] };

/** The fields of a row the selected GraphQL fields read; undefined: all of them. */
export function readsOf(selected: Iterable<string>, columns: readonly string[], reads: Record<string, readonly string[]>): string[] | undefined {
  const out = new Set<string>();
  for (const field of selected) {
    const listed = reads[field] ?? (columns.includes(field) ? [field] : undefined);
    if (!listed) return undefined;
    for (const f of listed) out.add(f);
  }
  return [...out];
}

/** What a page's statement joins and reads, from the query's selection below `edges.node`. */
export interface PageShape {
  include: { pool: boolean; site: boolean; hardwareProfile: boolean };
  only: ViewFields;
}

const shapes = new WeakMap<object, PageShape>();
export function pageShape(info: Pick<GraphQLResolveInfo, 'fieldNodes' | 'fragments'>): PageShape {
  const key = info.fieldNodes.length === 1 ? info.fieldNodes[0]! : null;
  const known = key && shapes.get(key);
  if (known) return known;
  const node = selectedFields(info, ['edges', 'node']);
  const shape: PageShape = {
    include: { pool: node.has('pool'), site: node.has('site'), hardwareProfile: node.has('hardwareProfile') },
    only: {
      node: readsOf(node, NODE_FIELDS, NODE_READS),
      pool: readsOf(selectedFields(info, ['edges', 'node', 'pool']), POOL_FIELDS, POOL_READS),
      site: readsOf(selectedFields(info, ['edges', 'node', 'site']), SITE_FIELDS, PLAIN_READS),
      profile: readsOf(selectedFields(info, ['edges', 'node', 'hardwareProfile']), PROFILE_FIELDS, PLAIN_READS),
    },
  };
  if (key) shapes.set(key, shape);
  return shape;
}

/**
 * One view and join list per combination of joined relations and fields read. The combinations
 * are as many as the distinct selections clients send, so the map is bounded: past its size it
 * starts again (a view costs microseconds to build).
 */
const VIEWS = new Map<string, { view: ArrayView<NodePageRow>; from: string }>();
const MAX_VIEWS = 256;
function viewFor(profile: boolean, pool: boolean, site: boolean, only: ViewFields) {
  const key = `${+profile}${+pool}${+site}|${only.node?.join(',') ?? '*'}|${only.profile?.join(',') ?? '*'}|${only.pool?.join(',') ?? '*'}|${only.site?.join(',') ?? '*'}`;
  let entry = VIEWS.get(key);
  if (!entry) {
    entry = {
      view: nodeArrayView('n', { profile, pool: pool ? 'p' : undefined, site: site ? 's' : undefined }, only),
      from: ['node n',
        profile ? 'LEFT JOIN hardware_profile hp ON hp.id = n.hardware_profile_id' : '',
        pool ? 'LEFT JOIN pool p ON p.id = n.pool_id' : '',
        site ? 'LEFT JOIN site s ON s.id = n.site_id' : ''].filter(Boolean).join(' '),
    };
    if (VIEWS.size >= MAX_VIEWS) VIEWS.clear();
    VIEWS.set(key, entry);
  }
  return entry;
}

export interface NodePageStatement {
  text: string;
  values: unknown[];
  backward: boolean;
  view: ArrayView<NodePageRow>;
}

/**
 * The statement for `findMany({ ...query, where, orderBy: { id: 'asc' } })`, or null when the
 * planned query is not one it answers. Prisma's cursor semantics are kept exactly: the page starts
 * at the cursor row's position (no rows when that row does not exist), `skip` rows are skipped
 * (the cursor row itself when it is in the filtered set), and a negative `take` pages backwards
 * and is returned in ascending order.
 */
export function nodePageStatement(query: PlannedQuery, where: unknown, only: ViewFields = {}): NodePageStatement | null {
  for (const key of Object.keys(query)) {
    if (query[key] !== undefined && key !== 'take' && key !== 'skip' && key !== 'cursor' && key !== 'include') return null;
  }
  const included = new Set<string>();
  if (query.include !== undefined) {
    if (!isPlainObject(query.include)) return null;
    for (const [relation, nested] of Object.entries(query.include)) {
      if (nested === undefined || nested === false) continue;
      // `true` or an empty selection: the related row's scalars, as the join reads them.
      if (!JOINED.has(relation) || !(nested === true || (isPlainObject(nested) && Object.keys(nested).length === 0))) return null;
      included.add(relation);
    }
  }
  const take = query.take;
  const skip = query.skip ?? 0;
  if (typeof take !== 'number' || !Number.isInteger(take) || take === 0 || !Number.isInteger(skip) || skip < 0) return null;
  const values: unknown[] = [];
  const filter = whereSql(where, values);
  if (filter === null) return null;
  const backward = take < 0;
  let cursor = '';
  if (query.cursor !== undefined) {
    const keys = isPlainObject(query.cursor) ? Object.keys(query.cursor) : [];
    const id = isPlainObject(query.cursor) ? query.cursor.id : undefined;
    if (keys.length !== 1 || typeof id !== 'string') return null;
    values.push(id);
    cursor = ` AND n.id ${backward ? '<=' : '>='} (SELECT c.id FROM node c WHERE c.id = $${values.length}::text)`;
  }
  values.push(Math.abs(take), skip);
  const { view, from } = viewFor(included.has('hardwareProfile'), included.has('pool'), included.has('site'), only);
  const text = `SELECT ${view.columns} FROM ${from} WHERE (${filter})${cursor}
    ORDER BY n.id ${backward ? 'DESC' : 'ASC'} LIMIT $${values.length - 1}::int OFFSET $${values.length}::int`;
  return { text, values, backward, view };
}

/** Runs a {@link nodePageStatement}: the rows in ascending id order, as Prisma returns them. */
export async function readNodePage(ctx: Context, statement: NodePageStatement): Promise<NodePageRow[]> {
  const rows = (await ctx.sql.queryArrays(statement.text, statement.values)).map((row) => statement.view.read(row));
  return statement.backward ? rows.reverse() : rows;
}

/** Relay arguments of the `nodes` connection. */
export interface ConnectionArgs {
  first?: number | null;
  last?: number | null;
  before?: string | null;
  after?: string | null;
}

/**
 * The page a connection's arguments ask for, as the prisma plugin's cursor connections plan it
 * (the cursors it issued before this resolver replaced it keep working): one row more than the
 * page, to know whether there is a next one; `last`/`before` page backwards; a cursor row is
 * skipped.
 */
export function connectionQuery(args: ConnectionArgs, maxSize: number, defaultSize: number): { take: number; skip: number; cursor?: { id: string } } {
  validateConnectionArguments(args);
  const { before, after, first, last } = args;
  if (before != null && after != null) throw new PothosValidationError('Arguments "before" and "after" are not supported at the same time');
  if (before != null && first != null) throw new PothosValidationError('Arguments "before" and "first" are not supported at the same time');
  if (after != null && last != null) throw new PothosValidationError('Arguments "after" and "last" are not supported at the same time');
  const cursor = before ?? after;
  const { limit } = getConnectionPageSize({ args, defaultSize, maxSize });
  const take = before != null || last != null ? -limit : limit;
  return cursor == null ? { take, skip: 0 } : { take, skip: 1, cursor: { id: parsePrismaCursor(cursor) as string } };
}

const cursorOf = (row: { id: string }) => formatPrismaCursor(row, 'id');

/** The connection object for the rows of a {@link connectionQuery} (the extra row dropped). */
export function wrapConnection<T extends { id: string }>(rows: T[], args: ConnectionArgs, take: number) {
  const full = rows.length === Math.abs(take);
  const backward = args.before != null || args.last != null;
  const nodes = full ? rows.slice(take < 0 ? 1 : 0, take < 0 ? rows.length : -1) : rows;
  const edges = nodes.map((node) => ({ cursor: cursorOf(node), node }));
  return {
    edges,
    pageInfo: {
      startCursor: edges[0]?.cursor ?? null,
      endCursor: edges[edges.length - 1]?.cursor ?? null,
      hasPreviousPage: args.after != null ? true : backward ? full : false,
      hasNextPage: args.before != null ? true : args.last != null ? false : full,
    },
  };
}
