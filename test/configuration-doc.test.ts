import fs from 'node:fs';
import { loadConfig } from '../src/config';
import { fromRoot } from '../src/paths';

/**
 * docs/configuration.md's table names exactly the variables src/config.ts reads: every one it reads
 * has a row, and every row's variable is one it reads (a renamed or removed variable cannot linger
 * in the documentation).
 */
describe('docs/configuration.md and src/config.ts', () => {
  const read = new Set<string>();
  loadConfig(new Proxy({} as NodeJS.ProcessEnv, {
    get(_target, key) {
      if (typeof key === 'string') read.add(key);
      return undefined;
    },
  }));
  const rows = fs.readFileSync(fromRoot('docs', 'configuration.md'), 'utf8').split('\n').filter((l) => l.startsWith('| `'));
  const documented = new Set(rows.flatMap((r) => [...r.split('|')[1]!.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((m) => m[1]!)));

  it('reads variables and documents them (the recorder and the table parser work)', () => {
    expect(read.size).toBeGreaterThan(30);
    expect(documented.has('DATABASE_URL')).toBe(true);
  });

  it('every variable src/config.ts reads has a row', () => {
    expect([...read].filter((n) => !documented.has(n)).sort()).toEqual([]);
  });

  it('every row names a variable src/config.ts reads', () => {
    expect([...documented].filter((n) => !read.has(n)).sort()).toEqual([]);
  });
});
