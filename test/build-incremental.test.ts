import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fromRoot } from '../src/paths';

/**
 * `npm start` builds first (prestart), so an unchanged tree must not be built from scratch: the
 * generators (prisma generate, graphql-codegen) run only when their inputs change, tsc compiles
 * incrementally. On a copy of the tree (the files git knows, and the untracked ones it does not
 * ignore; node_modules linked), the real `npm run build`, several times:
 * cold, then nothing changed (generators skipped, much faster), then a changed .ts, a changed
 * Prisma schema, a deleted generated file and a deleted output, each rebuilt.
 */
describe('npm run build: an unchanged tree is not rebuilt from scratch', () => {
  const copy = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'metal-build-')));

  const build = (): { seconds: number; out: string } => {
    const started = process.hrtime.bigint();
    const r = spawnSync('npm', ['run', 'build'], { cwd: copy, encoding: 'utf8', env: { ...process.env, NO_COLOR: '1' } });
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    if (r.status !== 0) throw new Error(`npm run build failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
    return { seconds, out: r.stdout + r.stderr };
  };
  const mtime = (rel: string) => fs.statSync(path.join(copy, rel)).mtimeMs;
  const read = (rel: string) => fs.readFileSync(path.join(copy, rel), 'utf8');
  const PRISMA_OUT = 'src/generated/prisma/client.ts';
  const CODEGEN_OUT = 'src/generated/operations.ts';
  const MAIN = 'dist/src/main.js';

  beforeAll(() => {
    const listed = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: fromRoot(), encoding: 'utf8' })
      .split('\0')
      .filter((f) => f && f !== 'node_modules' && fs.existsSync(fromRoot(f)) && fs.statSync(fromRoot(f)).isFile());
    for (const f of listed) {
      fs.mkdirSync(path.dirname(path.join(copy, f)), { recursive: true });
      fs.copyFileSync(fromRoot(f), path.join(copy, f));
    }
    fs.symlinkSync(fs.realpathSync(fromRoot('node_modules')), path.join(copy, 'node_modules'));
  });

  afterAll(() => fs.rmSync(copy, { recursive: true, force: true }));

  let cold = 0;
  it('a cold build runs every step', () => {
    const { seconds } = build();
    cold = seconds;
    for (const f of [PRISMA_OUT, CODEGEN_OUT, MAIN]) expect(fs.existsSync(path.join(copy, f))).toBe(true);
  }, 300000);

  it('with nothing changed, the generators are skipped, nothing is rewritten, and it is much faster', () => {
    const before = [PRISMA_OUT, CODEGEN_OUT, MAIN].map(mtime);
    const { seconds } = build();
    expect([PRISMA_OUT, CODEGEN_OUT, MAIN].map(mtime)).toEqual(before);
    // Cold is generate + codegen + a full tsc (over 10 s here); unchanged is one incremental tsc check.
    expect(seconds).toBeLessThan(cold / 3);
  }, 300000);

  it('a changed .ts is compiled again; the generators still skipped', () => {
    const before = [PRISMA_OUT, CODEGEN_OUT].map(mtime);
    fs.appendFileSync(path.join(copy, 'src/paths.ts'), '\nexport const BUILD_PROBE = 20261206;\n');
    fs.writeFileSync(path.join(copy, 'src/build-probe.ts'), 'export const NEW_FILE = 1;\n');
    const { out } = build();
    expect(read('dist/src/paths.js')).toContain('BUILD_PROBE = 20261206');
    // A new file is compiled as part of the incremental build, not by a build from scratch.
    expect(read('dist/src/build-probe.js')).toContain('NEW_FILE = 1');
    expect(out).not.toContain('from scratch');
    expect([PRISMA_OUT, CODEGEN_OUT].map(mtime)).toEqual(before);
  }, 300000);

  it('a changed Prisma schema runs prisma generate again (and not codegen)', () => {
    const codegen = mtime(CODEGEN_OUT);
    const prisma = mtime(PRISMA_OUT);
    fs.appendFileSync(path.join(copy, 'prisma/schema.prisma'), '\n// changed\n');
    build();
    expect(mtime(PRISMA_OUT)).toBeGreaterThan(prisma);
    expect(mtime(CODEGEN_OUT)).toBe(codegen);
  }, 300000);

  it('a new GraphQL operation runs codegen again', () => {
    expect(read(CODEGEN_OUT)).not.toContain('BuildProbeQuery');
    fs.writeFileSync(path.join(copy, 'schema/operations/build-probe.graphql'), 'query BuildProbe { __typename }\n');
    build();
    expect(read(CODEGEN_OUT)).toContain('BuildProbeQuery');
  }, 300000);

  it('a deleted generated file or compiled output is made again', () => {
    fs.rmSync(path.join(copy, CODEGEN_OUT));
    fs.rmSync(path.join(copy, 'dist/src/ids.js'));
    const { out } = build();
    expect(out).toContain('the output of src/ids.ts is missing');
    expect(fs.existsSync(path.join(copy, CODEGEN_OUT))).toBe(true);
    expect(fs.existsSync(path.join(copy, 'dist/src/ids.js'))).toBe(true);
  }, 300000);
});
