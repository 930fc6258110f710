/**
 * Each table has one home (issue 23 item 3): the workflow definitions, their step context, the
 * fabric rollout's helpers and the ISO build write other modules' tables only through those
 * modules' stores (src/modules/<owner>), never with SQL or Prisma model writes of their own.
 */
import fs from 'node:fs';
import path from 'node:path';

const root = path.join(__dirname, '..');
const files = [
  ...fs.readdirSync(path.join(root, 'jobs/workflows')).filter((f) => f.endsWith('.ts')).map((f) => `jobs/workflows/${f}`),
  'jobs/engine-context.ts',
  'jobs/iso-build.ts',
  'jobs/fabric-node.ts',
  'jobs/fabric-steps.ts',
];

/** A write in SQL text. */
const SQL_WRITE = /\b(INSERT\s+INTO|UPDATE\s+[a-z_."]+\s+SET|DELETE\s+FROM)\b/gi;
/**
 * A write through a Prisma model: `<tx|prisma|db>.<model>.<write>(`, the chain possibly split over
 * lines. Only a database handle followed by a model name matches: a Map's or Set's `.delete(` does not.
 */
const MODEL_WRITE = /\b(?:tx|prisma|db)\s*\.\s*[a-z][A-Za-z0-9_]*\s*\.\s*(?:create|createMany|createManyAndReturn|update|updateMany|updateManyAndReturn|upsert|delete|deleteMany)\s*\(/g;

/** Every match of the two patterns in `text`, as `file:line: text`. */
function writesIn(file: string, text: string): string[] {
  const found: string[] = [];
  for (const pattern of [SQL_WRITE, MODEL_WRITE]) {
    for (const match of text.matchAll(pattern)) {
      const line = text.slice(0, match.index).split('\n').length;
      found.push(`${file}:${line}: ${match[0].replace(/\s+/g, ' ')}`);
    }
  }
  return found;
}

describe('the guard itself', () => {
  it('sees SQL and Prisma model writes, over split lines too', () => {
    const sample = [
      "await tx.$executeRawUnsafe('UPDATE fabric_job SET progress = 1 WHERE id = $1', id);",
      'await tx.fabricJobNode.update({ where, data });',
      'await r.deps.prisma.fabricNodeBaseline.upsert({ where, create, update: {} });',
      'await db.fabricJob',
      '  .updateMany({ where, data });',
      'await tx.fabricNodeBaseline.deleteMany({ where });',
      'await prisma.fabricJobNode.createMany({ data });',
      'await tx.workflowRun.delete({ where });',
      'await prisma.fabricJob.create({ data });',
    ].join('\n');
    expect(writesIn('sample.ts', sample).map((w) => w.split(':')[1])).toEqual(['1', '2', '3', '4', '6', '7', '8', '9']);
  });

  it('leaves reads and Map/Set deletes alone', () => {
    const sample = [
      'base.catch(() => bases.delete(key));',
      'seen.delete(id); this.cache.delete(key); pending.update?.(x);',
      'await tx.fabricJob.findUnique({ where });',
      'await prisma.fabricNodeBaseline.findMany({});',
      "const updated = 'the row was updated'; db.close();",
      'await lease.end(tx, { status: "succeeded" });',
    ].join('\n');
    expect(writesIn('sample.ts', sample)).toEqual([]);
  });
});

it.each(files)('%s writes no table of its own (no SQL, no Prisma model write)', (file) => {
  const text = fs.readFileSync(path.join(root, file), 'utf8');
  expect(writesIn(file, text)).toEqual([]);
});
