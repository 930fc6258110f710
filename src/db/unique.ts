import { AppError } from '../errors';
import { getDatamodel } from '../generated/pothos-prisma-types';

const snake = (name: string) => name.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase();

let indexes: Map<string, { model: string; fields: string[] }> | null = null;

/**
 * Unique index name -> model and fields, from the Prisma datamodel and its naming convention
 * (`<table>_<columns>_key`, tables and columns the snake_case of models and fields): Prisma over
 * the pg adapter reports only the index name.
 */
function indexByName(): Map<string, { model: string; fields: string[] }> {
  if (indexes) return indexes;
  indexes = new Map();
  for (const [model, { fields, uniqueIndexes }] of Object.entries(getDatamodel().datamodel.models)) {
    const sets = [...uniqueIndexes.map((u) => [...u.fields]), ...fields.filter((f) => f.isUnique).map((f) => [f.name])];
    for (const set of sets) indexes.set(`${snake(model)}_${set.map(snake).join('_')}_key`, { model, fields: set });
  }
  return indexes;
}

/**
 * A unique violation anywhere in an error's cause chain (PostgreSQL's 23505 through `pg`, or
 * Prisma's P2002 over the pg adapter) as CONFLICT. Check-then-insert paths (create site, pool,
 * agent...) check first for a clear message; this covers the race where another request inserts
 * between the check and the insert. The message names the columns, never the values (PostgreSQL's
 * `detail` repeats them, so only its column list is read).
 */
export function uniqueViolation(error: unknown): AppError | null {
  const seen = new Set<unknown>();
  for (let e: unknown = error; e && typeof e === 'object' && !seen.has(e); ) {
    seen.add(e);
    const candidate = e as Record<string, unknown>;
    if (candidate.code === '23505' || candidate.code === 'P2002' || isAdapterUniqueViolation(candidate)) {
      return conflict(columnsOf(candidate), typeof candidate.table === 'string' ? candidate.table : modelOf(candidate));
    }
    e = candidate.originalError ?? candidate.cause;
  }
  return null;
}

function isAdapterUniqueViolation(e: Record<string, unknown>): boolean {
  const cause = e.cause as Record<string, unknown> | undefined;
  return e.name === 'DriverAdapterError' && cause?.kind === 'UniqueConstraintViolation';
}

const camel = (column: string) => column.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());

function columnsOf(e: Record<string, unknown>): string[] {
  // pg: detail is `Key (tenant_id, name)=(...) already exists.`: the part before `)=` only.
  if (typeof e.detail === 'string') {
    const match = /^Key \(([^)]*)\)=/.exec(e.detail);
    if (match) return match[1]!.split(',').map((c) => camel(c.trim().replace(/^"|"$/g, '')));
  }
  const meta = e.meta as Record<string, unknown> | undefined;
  const adapterCause = (meta?.driverAdapterError as { cause?: { constraint?: { index?: unknown } } } | undefined)?.cause
    ?? (e.cause as { constraint?: { index?: unknown } } | undefined);
  const index = typeof adapterCause?.constraint?.index === 'string' ? adapterCause.constraint.index
    : typeof e.constraint === 'string' ? e.constraint : undefined;
  const known = index ? indexByName().get(index) : undefined;
  if (known) return known.fields;
  const target = meta?.target;
  if (Array.isArray(target)) return target.map(String).map(camel);
  const adapter = (meta?.driverAdapterError as { cause?: { constraint?: { fields?: unknown } } } | undefined)?.cause?.constraint?.fields
    ?? (e.cause as { constraint?: { fields?: unknown } } | undefined)?.constraint?.fields;
  if (Array.isArray(adapter)) return adapter.map((f) => camel(String(f).replace(/^"|"$/g, '')));
  return [];
}

function modelOf(e: Record<string, unknown>): string | undefined {
  const model = (e.meta as Record<string, unknown> | undefined)?.modelName;
  return typeof model === 'string' ? model : undefined;
}

function conflict(columns: string[], table: string | undefined): AppError {
  const what = table ? table.replace(/_/g, ' ').replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase() : 'row';
  // The field a caller chose: the last column (the name in (tenant_id, name)), not the scope.
  const field = columns.at(-1);
  const message = columns.length
    ? `another ${what} already has this ${columns.join(' and ')} (it was created concurrently)`
    : `another ${what} already exists with these values (it was created concurrently)`;
  return new AppError('CONFLICT', message, field ? { field, columns } : undefined);
}
