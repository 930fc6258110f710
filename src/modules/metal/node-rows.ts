import { Prisma, type HardwareProfile, type Node, type Pool, type Site } from '../../generated/prisma/client';

/**
 * Node rows read with plain SQL, in exactly the shape Prisma returns (camelCase fields, Dates, parsed
 * JSON, the hardware profile included), so the GraphQL metal view resolves them without a reload.
 * The column lists come from Prisma's own field enums; test/node-rows.test.ts checks the shape
 * against Prisma's findUnique on a node with every field set.
 */
export type NodeRow = Node & { hardwareProfile: HardwareProfile | null };

const snake = (field: string) => field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
export const NODE_FIELDS: readonly string[] = Object.values(Prisma.NodeScalarFieldEnum);
export const PROFILE_FIELDS: readonly string[] = Object.values(Prisma.HardwareProfileScalarFieldEnum);
const PROFILE_PREFIX = 'hardwareProfile.';
export const POOL_FIELDS: readonly string[] = Object.values(Prisma.PoolScalarFieldEnum);
export const SITE_FIELDS: readonly string[] = Object.values(Prisma.SiteScalarFieldEnum);

/**
 * The select list of a node view: `<alias>` is a node row (the table or a RETURNING CTE), `hp` the
 * LEFT JOINed hardware_profile. Use with {@link toNodeRow}.
 */
const viewColumns = new Map<string, string>();
export function nodeViewColumns(alias: string): string {
  // Built once per alias: the engine asks for it at every step (it was a tenth of its load's time).
  let columns = viewColumns.get(alias);
  if (columns === undefined) {
    columns = [
      ...NODE_FIELDS.map((f) => `${alias}.${snake(f)} AS "${f}"`),
      ...PROFILE_FIELDS.map((f) => `hp.${snake(f)} AS "${PROFILE_PREFIX}${f}"`),
    ].join(', ');
    viewColumns.set(alias, columns);
  }
  return columns;
}

/** `FROM <source> <alias> LEFT JOIN hardware_profile hp ...` for {@link nodeViewColumns}. */
export function nodeViewFrom(source: string, alias: string): string {
  return `${source} ${alias} LEFT JOIN hardware_profile hp ON hp.id = ${alias}.hardware_profile_id`;
}

export function toNodeRow(raw: Record<string, unknown>): NodeRow {
  const row: Record<string, unknown> = {};
  for (const f of NODE_FIELDS) row[f] = raw[f];
  if (raw[`${PROFILE_PREFIX}id`] == null) row.hardwareProfile = null;
  else {
    const profile: Record<string, unknown> = {};
    for (const f of PROFILE_FIELDS) profile[f] = raw[`${PROFILE_PREFIX}${f}`];
    row.hardwareProfile = profile;
  }
  return row as NodeRow;
}

/** A node row with the pool and site a page of nodes shows with it, as Prisma's include returns them. */
export type NodePageRow = Node & { hardwareProfile?: HardwareProfile | null; pool?: Pool; site?: Site };

/**
 * A node view read with `rowMode: 'array'`: the columns in a fixed order and a reader that builds
 * the Prisma-shaped row from their positions. pg then builds no object per row keyed by column
 * name, which the reader would only copy again: on a bulk answer of 10,000 wide rows that copy
 * was a tenth of the Node side's time. `profile` (default true), `pool` and `site` say which
 * relations the row carries, as Prisma's include would: the hardware profile from the alias `hp`,
 * the pool and site from the aliases given (a relation the outer join found none for is null for
 * the optional profile and left out for the others).
 */
export interface ArrayView<R> {
  /** The select list, in the order `read` expects. */
  columns: string;
  /** How many columns the view takes; columns a statement selects after them start here. */
  width: number;
  read(row: unknown[]): R;
}

type RowReader = (row: unknown[]) => Record<string, unknown>;

/**
 * `(row) => ({ field: row[at], ... })`, compiled once per view. Filling `{}` in a loop made V8
 * switch the 29-field node objects to dictionary mode: 50-120 ms to build 10,000 of them here
 * against 1-2 ms for the literal, and slower property reads in every resolver after. The field
 * names are Prisma's own identifiers, checked below.
 */
function compileReader(fields: readonly string[], at: number): RowReader {
  for (const f of fields) if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(f)) throw new Error(`node-rows: "${f}" is not a plain field name`);
  return new Function('row', `return { ${fields.map((f, i) => `${f}: row[${at + i}]`).join(', ')} };`) as RowReader;
}

/**
 * The Prisma fields a view reads of each relation, when not all of them: a page of nodes reads only
 * what its query selects. `id` is always read (first), so an outer join that found no row is seen.
 */
export interface ViewFields {
  node?: readonly string[];
  profile?: readonly string[];
  pool?: readonly string[];
  site?: readonly string[];
}

const withId = (fields: readonly string[] | undefined, all: readonly string[]) =>
  fields ? ['id', ...all.filter((f) => f !== 'id' && fields.includes(f))] : all;

export function nodeArrayView(alias: string, joins: { profile?: boolean; pool?: string; site?: string } = {}, only: ViewFields = {}): ArrayView<NodePageRow> {
  const withProfile = joins.profile ?? true;
  const nodeFields = withId(only.node, NODE_FIELDS);
  const profileFields = withId(only.profile, PROFILE_FIELDS);
  const poolFields = withId(only.pool, POOL_FIELDS);
  const siteFields = withId(only.site, SITE_FIELDS);
  const columns = [
    ...nodeFields.map((f) => `${alias}.${snake(f)}`),
    ...(withProfile ? profileFields.map((f) => `hp.${snake(f)}`) : []),
    ...(joins.pool ? poolFields.map((f) => `${joins.pool}.${snake(f)}`) : []),
    ...(joins.site ? siteFields.map((f) => `${joins.site}.${snake(f)}`) : []),
  ];
  const profileAt = nodeFields.length;
  const poolAt = profileAt + (withProfile ? profileFields.length : 0);
  const siteAt = poolAt + (joins.pool ? poolFields.length : 0);
  const readNode = compileReader(nodeFields, 0);
  const readProfile = compileReader(profileFields, profileAt);
  const readPool = compileReader(poolFields, poolAt);
  const readSite = compileReader(siteFields, siteAt);
  const withPool = Boolean(joins.pool);
  const withSite = Boolean(joins.site);
  return {
    columns: columns.join(', '),
    width: columns.length,
    read(row) {
      const node = readNode(row);
      // An id is never null in a row that exists: a null one is the outer join finding none.
      if (withProfile) node.hardwareProfile = row[profileAt] == null ? null : readProfile(row);
      if (withPool && row[poolAt] != null) node.pool = readPool(row);
      if (withSite && row[siteAt] != null) node.site = readSite(row);
      return node as NodePageRow;
    },
  };
}

/** The columns a verb may change, with the SQL type each parameter is cast to. */
const CHANGE_CASTS = {
  provisionState: '"ProvisionState"',
  failedFrom: '"ProvisionState"',
  lastErrorCode: 'text',
  lastErrorMessage: 'text',
  maintenance: 'boolean',
  profileId: 'text',
  profileVersion: 'int',
  workflowId: 'text',
  discoveredMac: 'text',
  macs: 'text[]',
  // The UUID the BMC reports, for a node enrolled without one (the enroll workflow).
  productUuid: 'uuid',
  // The workflow engine's writes: inspection results, the BMC-reported addresses, discovery's
  // PXE window, the role a deploy gives.
  inventory: 'jsonb',
  addresses: 'text[]',
  pxeCycledAt: 'timestamptz',
  role: 'text',
  // The control-node API's register: a control node's BMC as it now is (a BMC re-addressed, new
  // credentials, the vendor's flavour) and its name. Never while a run is active (register refuses).
  name: 'text',
  bmcAddress: 'text',
  bmcDriver: 'text',
  bmcDriverOptions: 'jsonb',
  bmcCredentialsRef: 'text',
  driverBindings: 'jsonb',
} as const;

export type NodeChange = Partial<{
  provisionState: string;
  failedFrom: string | null;
  lastErrorCode: string | null;
  lastErrorMessage: string | null;
  maintenance: boolean;
  profileId: string;
  profileVersion: number;
  workflowId: string;
  discoveredMac: string | null;
  macs: string[];
  productUuid: string | null;
  inventory: Record<string, unknown> | null;
  addresses: string[];
  pxeCycledAt: Date | null;
  role: string | null;
  name: string | null;
  bmcAddress: string;
  bmcDriver: string;
  bmcDriverOptions: Record<string, unknown>;
  bmcCredentialsRef: string;
  driverBindings: Record<string, unknown>;
}>;

/** `col = $n::type, ...` for a change, its parameters numbered from `first`. */
export function setClause(change: NodeChange, first: number): { sql: string; values: unknown[]; types: string[] } {
  const parts: string[] = [];
  const values: unknown[] = [];
  const types: string[] = [];
  for (const [field, value] of Object.entries(change)) {
    if (value === undefined) continue;
    const cast = CHANGE_CASTS[field as keyof typeof CHANGE_CASTS];
    if (!cast) throw new Error(`setClause: ${field} is not a column a verb may change`);
    // jsonb parameters go as JSON text: pg would send an object as its own JSON, an array as a PG array.
    values.push(cast === 'jsonb' && value !== null ? JSON.stringify(value) : value);
    types.push(cast);
    parts.push(`${snake(field)} = $${first + values.length - 1}::${cast}`);
  }
  return { sql: parts.join(', '), values, types };
}
