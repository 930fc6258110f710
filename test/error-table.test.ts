import fs from 'node:fs';
import path from 'node:path';
import { ALSO_ANSWERED_AS, ERROR_CODES, HTTP_STATUS } from '../src/errors';
import { openApiDocument } from '../src/rest/openapi';
import { routes } from '../src/rest/routes';

/**
 * The error table is written twice: in docs/api.md, by hand, and on /docs (the description of
 * /openapi.json, generated from src/errors.ts). Both must say the same: every code, under every
 * status it is answered with.
 */

/** The `| code | HTTP |` table of a markdown text: each row's codes and statuses. */
function errorTable(markdown: string): { codes: string[]; statuses: number[] }[] {
  const lines = markdown.split('\n');
  const start = lines.findIndex((l) => /^\|\s*code\s*\|\s*HTTP\s*\|\s*$/.test(l));
  if (start < 0) throw new Error('no "| code | HTTP |" table');
  const rows: { codes: string[]; statuses: number[] }[] = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith('|')) break;
    const [codeCell, statusCell] = line.split('|').slice(1, 3).map((c) => c.trim());
    // A gloss in parentheses after a code ("NOT_FOUND (also: another tenant's object)") is prose.
    let bare = codeCell!;
    while (/\([^()]*\)/.test(bare)) bare = bare.replace(/\([^()]*\)/g, '');
    rows.push({ codes: bare.match(/\b[A-Z][A-Z0-9_]{2,}\b/g) ?? [], statuses: (statusCell!.match(/\b[1-5]\d\d\b/g) ?? []).map(Number) });
  }
  return rows;
}

const pairs = (rows: { codes: string[]; statuses: number[] }[]) => rows.flatMap((r) => r.codes.flatMap((c) => r.statuses.map((s) => `${c} ${s}`))).sort();

describe('the error table: docs/api.md and /docs agree', () => {
  const readme = errorTable(fs.readFileSync(path.join(__dirname, '..', 'docs', 'api.md'), 'utf8'));
  const docs = errorTable((openApiDocument(routes, 'test') as { info: { description: string } }).info.description);
  const truth = [
    ...ERROR_CODES.map((code) => `${code} ${HTTP_STATUS[code]}`),
    ...ALSO_ANSWERED_AS.map((o) => `${o.code} ${o.status}`),
  ].sort();

  it('parses both tables', () => {
    expect(readme.length).toBeGreaterThan(5);
    expect(docs.length).toBeGreaterThan(5);
  });

  it('/docs lists every code under every status src/errors.ts gives it', () => {
    expect(pairs(docs)).toEqual(truth);
  });

  it('docs/api.md lists the same codes under the same statuses (fix docs/api.md, or ALSO_ANSWERED_AS / HTTP_STATUS)', () => {
    expect(pairs(readme)).toEqual(pairs(docs));
  });

  it('each code\'s main status is the first of its row, in both tables', () => {
    for (const rows of [readme, docs]) {
      for (const row of rows) for (const code of row.codes) expect(`${code} ${row.statuses[0]}`).toBe(`${code} ${HTTP_STATUS[code as keyof typeof HTTP_STATUS]}`);
    }
  });
});
