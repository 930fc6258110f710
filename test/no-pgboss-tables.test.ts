/**
 * Issue 23: pg-boss is used only through its public API (send/insert with `db`, work, fetch,
 * complete, getQueueSize, getJobById, ...). No statement under src/, jobs/ or clients/ names one of
 * its tables (pgboss.job, a queue's partition, pgboss.queue, ...), so that moving up a pg-boss
 * version is a version bump. And domain modules (src/modules/**) do not import jobs/ internals:
 * only its public modules.
 */
import fs from 'node:fs';
import path from 'node:path';

const root = path.resolve(__dirname, '..');

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const entry of fs.readdirSync(path.join(root, dir), { withFileTypes: true })) {
    const rel = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name === 'node_modules' || entry.name === 'generated' || entry.name === 'dist') continue;
      out.push(...sources(rel));
    } else if (/\.(ts|js|mjs|cjs|sql)$/.test(entry.name) && !entry.name.endsWith('.d.ts')) {
      out.push(rel);
    }
  }
  return out;
}

/**
 * `pgboss.` followed by a name, in any case, quoted or not: a table (or function) of pg-boss's
 * schema. The TypeScript namespace PgBoss (PgBoss.Job, PgBoss.Db) is pg-boss's public typing, not SQL.
 */
const PGBOSS_RE = /\bpgboss"?\s*\.\s*"?[a-z_]/i;
const namesPgbossObject = (line: string) => PGBOSS_RE.test(line.replace(/\bPgBoss\.(?=[A-Z])/g, ''));

/**
 * The modules of jobs/ that domain modules may import: the wake-up API, the in-transaction send
 * (pg-boss's send with `db`), the ISO build's queueing, and the workflow definitions (read as data:
 * which steps a kind has, their titles; the step facts and the provision job views).
 */
const ALLOWED_JOBS_IMPORTS = new Set(['jobs/wake', 'jobs/send', 'jobs/workflows', 'jobs/workflows/install']);

describe('pg-boss through its public API only', () => {
  it('no file under src/, jobs/ or clients/ names a pgboss table', () => {
    const offenders: string[] = [];
    for (const file of ['src', 'jobs', 'clients'].flatMap(sources)) {
      const lines = fs.readFileSync(path.join(root, file), 'utf8').split('\n');
      lines.forEach((line, i) => {
        if (namesPgbossObject(line)) offenders.push(`${file}:${i + 1}: ${line.trim()}`);
      });
    }
    expect(offenders).toEqual([]);
  });

  it('the scan finds a pgboss table however it is written', () => {
    for (const line of ['FROM pgboss.job j', 'JOIN PGBOSS.queue q', 'INSERT INTO "pgboss"."job"', 'pgboss . j715b0c80fb8f69c9', 'pgboss.queue']) {
      expect([line, namesPgbossObject(line)]).toEqual([line, true]);
    }
    for (const line of ['const db: PgBoss.Db = x', 'PgBoss.Job<QueueData[K]>[]', 'the pgboss schema']) {
      expect([line, namesPgbossObject(line)]).toEqual([line, false]);
    }
  });

  it('no file under src/modules imports jobs/ other than its public modules', () => {
    const offenders: string[] = [];
    for (const file of sources('src/modules')) {
      const text = fs.readFileSync(path.join(root, file), 'utf8');
      for (const m of text.matchAll(/\bfrom\s+['"]([^'"]+)['"]|\bimport\(\s*['"]([^'"]+)['"]\s*\)|\brequire\(\s*['"]([^'"]+)['"]\s*\)/g)) {
        const spec = m[1] ?? m[2] ?? m[3]!;
        if (!spec.startsWith('.')) continue;
        const target = path.relative(root, path.resolve(root, path.dirname(file), spec)).replace(/\\/g, '/').replace(/\.(ts|js)$/, '').replace(/\/index$/, '');
        if (target.startsWith('jobs/') && !ALLOWED_JOBS_IMPORTS.has(target)) offenders.push(`${file}: ${spec}`);
      }
    }
    expect(offenders).toEqual([]);
  });
});
