/**
 * Issue 21 item 25: `npm ci` warned 33 times "Unsupported engine" on Node 20. The packages the
 * service runs on must accept the Node the project promises (package.json engines, >=20.19), so
 * package.json's overrides pin the runtime @graphql-tools chain (graphql-yoga's executor, merge,
 * schema and their utils) to versions built on @whatwg-node/promise-helpers 1.x, and every
 * package of package-lock.json that still wants a newer Node must be one of the few listed here,
 * each a build tool's part that this project never runs on Node 20 in a way that matters (the
 * docs/development.md say the same).
 */
import fs from 'node:fs';
import path from 'node:path';

/** Whether a semver range (npm's engines syntax: ||, >=, >, <=, <, ^, ~, x and bare majors) admits `version`. */
export function admits(range: string, version: string): boolean {
  const v = version.replace(/^v/, '').split('.').map(Number) as [number, number, number];
  const cmp = (a: number[], b: number[]) => { for (let i = 0; i < Math.max(a.length, b.length); i += 1) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) - (b[i] ?? 0); return 0; };
  const parts = (s: string) => s.replace(/^v/, '').split('.').filter((x) => x !== '' && x !== 'x' && x !== '*').map(Number);
  const one = (c: string): boolean => {
    const m = /^(>=|<=|>|<|\^|~|=)?\s*(.*)$/.exec(c.trim())!;
    const op = m[1] ?? '';
    const p = parts(m[2]!);
    const full = [p[0] ?? 0, p[1] ?? 0, p[2] ?? 0];
    switch (op) {
      case '>=': return cmp(v, full) >= 0;
      // A partial version is every version it names: <=20 admits 20.19, >20 does not.
      case '>': return cmp(v.slice(0, p.length), p) > 0;
      case '<=': return cmp(v.slice(0, p.length), p) <= 0;
      case '<': return cmp(v, full) < 0;
      case '^': return v[0] === full[0] && cmp(v, full) >= 0 && (full[0] !== 0 || v[1] === full[1]);
      case '~': return v[0] === full[0] && v[1] === full[1] && cmp(v, full) >= 0;
      default: return p.every((n, i) => v[i] === n);
    }
  };
  // "a - b" is ">=a <=b"; an operator may stand apart from its version (">= 8").
  const sets = range.split('||').map((set) => set.trim().replace(/^(\S+)\s+-\s+(\S+)$/, '>=$1 <=$2').replace(/(>=|<=|>|<|\^|~|=)\s+/g, '$1'));
  return sets.some((set) => set === '' || set === '*' || set.split(/\s+/).every(one));
}

/** What may still want a newer Node, and why that is harmless (also in the docs/development.md). */
const ALLOWED: Record<string, { dev: boolean; why: string }> = {
  '@whatwg-node/fetch@0.12.1': { dev: true, why: 'graphql-codegen\'s URL, GitHub and Apollo schema loaders; codegen.ts reads local files' },
  '@whatwg-node/node-fetch@0.9.3': { dev: true, why: 'the same loaders' },
  '@whatwg-node/promise-helpers@2.0.2': { dev: true, why: 'the same loaders' },
  '@whatwg-node/disposablestack@0.1.0': { dev: true, why: 'the same loaders' },
  'sync-fetch@0.7.1': { dev: true, why: 'the URL loader, never called' },
  'listr2@10.2.2': { dev: true, why: 'graphql-codegen\'s progress output; it runs on Node 20 (Node 20.20 builds the project with it)' },
  '@prisma/streams-local@0.1.11': { dev: false, why: 'pinned by prisma 7.10 for `prisma dev` only, which this project never runs' },
};

describe('package engines', () => {
  const root = path.join(__dirname, '..');
  const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as { engines: { node: string } };
  const lock = JSON.parse(fs.readFileSync(path.join(root, 'package-lock.json'), 'utf8')) as { packages: Record<string, { version?: string; dev?: boolean; engines?: { node?: string } }> };
  const floor = /\d+\.\d+(\.\d+)?/.exec(pkg.engines.node)![0];

  it('the range reader reads npm\'s ranges', () => {
    expect(admits('>=22.15.0', '20.19.0')).toBe(false);
    expect(admits('^20.19 || ^22.12 || >=24.0', '20.19.0')).toBe(true);
    expect(admits('20 || >=22', '20.19.0')).toBe(true);
    expect(admits('^18.14.0 || ^20.0.0 || ^22.0.0 || >=24.0.0', '20.19.0')).toBe(true);
    expect(admits('>=23.5.0 || ^22.13.0 || ^20.17.0', '20.19.0')).toBe(true);
    expect(admits('>=22.13.0', '20.19.0')).toBe(false);
    expect(admits('^20.17.0 || >=22.9.0', '20.16.0')).toBe(false);
    expect(admits('>= 8', '20.19.0')).toBe(true);
    expect(admits('>= 21', '20.19.0')).toBe(false);
    expect(admits('16 - 20', '20.19.0')).toBe(true);
  });

  it(`every package the lock installs accepts Node ${floor} (package.json engines), but the listed build-tool parts`, () => {
    const refused: string[] = [];
    for (const [where, info] of Object.entries(lock.packages)) {
      const range = info.engines?.node;
      if (!where || !range || admits(range, floor)) continue;
      const name = where.slice(where.lastIndexOf('node_modules/') + 'node_modules/'.length);
      const allowed = ALLOWED[`${name}@${info.version}`];
      if (!allowed) refused.push(`${where} ${info.version} wants node ${range}`);
      else if (allowed.dev && info.dev !== true) refused.push(`${where} ${info.version} wants node ${range} and is installed for the service, not only as a build tool`);
    }
    expect(refused).toEqual([]);
  });
});
