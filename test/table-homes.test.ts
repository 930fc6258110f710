/**
 * Each table has one home (issue 23 item 3): the workflow definitions, their step context and the
 * ISO build write other modules' tables only through those modules' stores (src/modules/<owner>),
 * never with SQL of their own.
 */
import fs from 'node:fs';
import path from 'node:path';

const root = path.join(__dirname, '..');
const files = [
  ...fs.readdirSync(path.join(root, 'jobs/workflows')).filter((f) => f.endsWith('.ts')).map((f) => `jobs/workflows/${f}`),
  'jobs/engine-context.ts',
  'jobs/iso-build.ts',
];
const WRITE = /\b(INSERT\s+INTO|UPDATE\s+[a-z_."]+\s+SET|DELETE\s+FROM)\b/i;

it.each(files)('%s writes no table with SQL of its own', (file) => {
  const text = fs.readFileSync(path.join(root, file), 'utf8');
  const writes = text.split('\n').map((line, i) => [i + 1, line] as const).filter(([, line]) => WRITE.test(line)).map(([n, line]) => `${file}:${n}: ${line.trim()}`);
  expect(writes).toEqual([]);
});
