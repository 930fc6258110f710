import { Prisma, type HardwareProfile, type Node } from '../../generated/prisma/client';

/**
 * Node rows read with plain SQL, in exactly the shape Prisma returns (camelCase fields, Dates, parsed
 * JSON, the hardware profile included), so the GraphQL metal view resolves them without a reload.
 * The column lists come from Prisma's own field enums; test/node-rows.test.ts checks the shape
 * against Prisma's findUnique on a node with every field set.
 */
export type NodeRow = Node & { hardwareProfile: HardwareProfile | null };

const snake = (field: string) => field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
const NODE_FIELDS = Object.values(Prisma.NodeScalarFieldEnum);
const PROFILE_FIELDS = Object.values(Prisma.HardwareProfileScalarFieldEnum);
const PROFILE_PREFIX = 'hardwareProfile.';

/**
 * The select list of a node view: `<alias>` is a node row (the table or a RETURNING CTE), `hp` the
 * LEFT JOINed hardware_profile. Use with {@link toNodeRow}.
 */
export function nodeViewColumns(alias: string): string {
  return [
    ...NODE_FIELDS.map((f) => `${alias}.${snake(f)} AS "${f}"`),
    ...PROFILE_FIELDS.map((f) => `hp.${snake(f)} AS "${PROFILE_PREFIX}${f}"`),
  ].join(', ');
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
}>;

/** `col = $n::type, ...` for a change, its parameters numbered from `first`. */
export function setClause(change: NodeChange, first: number): { sql: string; values: unknown[] } {
  const parts: string[] = [];
  const values: unknown[] = [];
  for (const [field, value] of Object.entries(change)) {
    if (value === undefined) continue;
    const cast = CHANGE_CASTS[field as keyof typeof CHANGE_CASTS];
    if (!cast) throw new Error(`setClause: ${field} is not a column a verb may change`);
    values.push(value);
    parts.push(`${snake(field)} = $${first + values.length - 1}::${cast}`);
  }
  return { sql: parts.join(', '), values };
}
