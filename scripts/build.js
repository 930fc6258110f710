#!/usr/bin/env node
'use strict';
/**
 * `npm run build` (and so `npm start`, `npm test`, `npm run demo`...): every build step, each run only
 * when it has something to do, so that an unchanged tree starts in about a second.
 *
 * - A generator step (prisma generate, graphql-codegen) runs when the hash of its inputs (the files
 *   it reads, package-lock.json for the generator's own version, and its command line) differs from
 *   the stamp it left in dist/.build/, or when its outputs are missing or were changed since.
 * - A tsc step runs every time, incrementally (its .tsbuildinfo beside its outputs): an unchanged
 *   tree costs tsc a check of file hashes, a changed file is compiled again with what depends on it.
 *   tsc does not notice a deleted output, so when an emitted .js is missing the .tsbuildinfo goes
 *   and that project builds from scratch.
 *
 * Adding a step: append to STEPS (a `tscStep('clients/sdk/tsconfig.json')`, or a generator with its
 * inputs and outputs). `--force` runs every step from scratch. Paths are relative to the project
 * root (the folder of package.json above this script), or to `--root DIR` (the build test's copy).
 */
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const args = process.argv.slice(2);
const force = args.includes('--force');
const rootArg = args.indexOf('--root');
const ROOT = path.resolve(rootArg >= 0 ? args[rootArg + 1] : path.join(__dirname, '..'));
const STAMPS = path.join(ROOT, 'dist', '.build');
/** Never part of a step's inputs or outputs. */
const SKIP_DIRS = new Set(['node_modules', 'dist', '.git', '.data', 'coverage']);

const bin = (name) => path.join(ROOT, 'node_modules', '.bin', name);

/** Every file under dir (relative to ROOT) whose name passes `keep`, sorted; hidden and SKIP_DIRS folders left out. */
function walk(dir, keep = () => true) {
  const out = [];
  const visit = (rel) => {
    let entries;
    try {
      entries = fs.readdirSync(path.join(ROOT, rel), { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const child = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) {
        if (!SKIP_DIRS.has(e.name) && !e.name.startsWith('.')) visit(child);
      } else if (keep(e.name)) out.push(child);
    }
  };
  visit(dir);
  return out.sort();
}

/** The files a list of entries names: a path (file or folder) or `{ find: (name) => bool }` over the whole tree. */
function files(entries) {
  const out = [];
  for (const entry of entries) {
    if (typeof entry === 'object') out.push(...walk('', entry.find));
    else if (fs.existsSync(path.join(ROOT, entry)) && fs.statSync(path.join(ROOT, entry)).isDirectory()) out.push(...walk(entry));
    else out.push(entry);
  }
  return [...new Set(out)].sort();
}

/** sha256 over names and contents; a missing file hashes as missing (so it is noticed). */
function hashFiles(list, extra = '') {
  const h = crypto.createHash('sha256').update(extra);
  for (const rel of list) {
    h.update(`\0${rel}\0`);
    try {
      h.update(fs.readFileSync(path.join(ROOT, rel)));
    } catch {
      h.update('\0missing');
    }
  }
  return h.digest('hex');
}

/** The files codegen.ts generates (the keys of its `generates`), so that a new target is checked too. */
function codegenOutputs() {
  const text = fs.readFileSync(path.join(ROOT, 'codegen.ts'), 'utf8');
  const generates = text.slice(text.indexOf('generates'));
  return [...generates.matchAll(/['"]([^'"\s]+\.(?:ts|js|json|graphql))['"]\s*:/g)].map((m) => m[1]);
}

function generator({ name, inputs, outputs, command, env }) {
  return { name, kind: 'generate', inputs, outputs, command, env };
}

/** A tsc project, compiled incrementally; its outputs checked for files a cleanup removed. */
function tscStep(project, { optional = false } = {}) {
  return { name: `tsc -p ${project}`, kind: 'tsc', project, optional };
}

const STEPS = [
  generator({
    name: 'prisma generate',
    inputs: ['prisma/schema.prisma', 'prisma.config.ts', 'package-lock.json'],
    outputs: () => ['src/generated/prisma', 'src/generated/pothos-prisma-types.ts'],
    command: [bin('prisma'), 'generate'],
    // Generate needs no migrate engine; Prisma 7 still looks for one unless told where it is.
    env: { PRISMA_SCHEMA_ENGINE_BINARY: process.env.PRISMA_SCHEMA_ENGINE_BINARY || 'package.json' },
  }),
  generator({
    name: 'graphql-codegen',
    inputs: ['codegen.ts', 'package-lock.json', { find: (n) => n.endsWith('.graphql') }],
    outputs: codegenOutputs,
    command: [bin('graphql-codegen'), '--config', 'codegen.ts'],
  }),
  tscStep('tsconfig.json'),
  // The SDK and the status page's browser code, each its own project (skipped where not present).
  tscStep('clients/sdk/tsconfig.json', { optional: true }),
  tscStep('src/ui/client/tsconfig.json', { optional: true }),
];

function run(step, command, env) {
  const started = Date.now();
  const result = spawnSync(command[0], command.slice(1), { cwd: ROOT, stdio: 'inherit', env: { ...process.env, ...env } });
  if (result.error) throw result.error;
  if (result.status !== 0) {
    console.error(`build: ${step.name} failed (exit ${result.status ?? result.signal})`);
    process.exit(result.status || 1);
  }
  return ((Date.now() - started) / 1000).toFixed(1);
}

function runGenerator(step) {
  const stampFile = path.join(STAMPS, `${step.name.replace(/[^a-z0-9]+/gi, '-')}.json`);
  const inputs = hashFiles(files(step.inputs), JSON.stringify(step.command.map((c) => path.relative(ROOT, c) || c)) + JSON.stringify(step.env ?? {}));
  const outputList = () => files(step.outputs());
  let stamp = null;
  try {
    stamp = JSON.parse(fs.readFileSync(stampFile, 'utf8'));
  } catch {
    stamp = null;
  }
  if (!force && stamp && stamp.inputs === inputs && stamp.outputs === hashFiles(outputList())) {
    console.log(`build: ${step.name}: up to date`);
    return;
  }
  const seconds = run(step, step.command, step.env);
  fs.mkdirSync(STAMPS, { recursive: true });
  fs.writeFileSync(stampFile, JSON.stringify({ inputs, outputs: hashFiles(outputList()) }) + '\n');
  console.log(`build: ${step.name}: ran (${seconds} s)`);
}

/** tsconfig.json is JSON with comments allowed; enough of it to find the sources and their outputs. */
function readTsconfig(project) {
  const text = fs.readFileSync(path.join(ROOT, project), 'utf8').replace(/^\s*\/\/.*$/gm, '');
  return JSON.parse(text);
}

function runTsc(step) {
  const projectDir = path.dirname(step.project);
  let config = null;
  try {
    config = readTsconfig(step.project);
  } catch {
    config = null; // extends, trailing commas...: tsc reads it; the missing-output check is skipped
  }
  const outDir = config?.compilerOptions?.outDir;
  const buildInfo = path.join(ROOT, projectDir, outDir ?? '.', `.${path.basename(step.project, '.json')}.tsbuildinfo`);
  if (force) fs.rmSync(buildInfo, { force: true });
  else if (config && outDir && fs.existsSync(buildInfo)) {
    const rootDir = path.join(projectDir, config.compilerOptions.rootDir ?? '.');
    const sources = (config.include ?? ['.']).flatMap((dir) => walk(path.join(projectDir, dir).replace(/^\.\/?/, ''), (n) => /\.(?:ts|tsx|mts|cts)$/.test(n) && !/\.d\.[mc]?ts$/.test(n)));
    // exclude entries as folder or file prefixes (a glob's fixed part): good enough to not look for outputs tsc never writes.
    const excluded = (config.exclude ?? []).map((e) => path.join(projectDir, e.replace(/[/]?\*.*$/, '')).replace(/^\.\/?/, ''));
    // A source the last build compiled (its .tsbuildinfo lists it) whose output is gone; a new
    // source has no output yet, and the incremental build compiles it anyway.
    let known = null;
    try {
      const info = JSON.parse(fs.readFileSync(buildInfo, 'utf8'));
      known = new Set(info.fileNames.map((f) => path.relative(ROOT, path.resolve(path.dirname(buildInfo), f))));
    } catch {
      known = null; // unreadable: every missing output counts
    }
    const missing = sources.find((src) => {
      if (excluded.some((e) => e && (src === e || src.startsWith(`${e}/`)))) return false;
      if (known && !known.has(src)) return false;
      const js = path.join(ROOT, projectDir, outDir, path.relative(rootDir, src)).replace(/\.([mc]?)tsx?$/, '.$1js');
      return !fs.existsSync(js);
    });
    if (missing) {
      console.log(`build: ${step.name}: the output of ${missing} is missing: compiling from scratch`);
      fs.rmSync(buildInfo, { force: true });
    }
  }
  const seconds = run(step, [bin('tsc'), '-p', step.project, '--incremental', '--tsBuildInfoFile', buildInfo]);
  console.log(`build: ${step.name}: done (${seconds} s)`);
}

const started = Date.now();
for (const step of STEPS) {
  if (step.optional && !fs.existsSync(path.join(ROOT, step.project))) continue;
  if (step.kind === 'tsc') runTsc(step);
  else runGenerator(step);
}
console.log(`build: done in ${((Date.now() - started) / 1000).toFixed(1)} s`);
