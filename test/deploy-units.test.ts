import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/config';
import { fromRoot } from '../src/paths';

/**
 * The systemd units under deploy/ (docs/deploy.md): each passes `systemd-analyze verify` with
 * nothing said about it, runs the built service as `node dist/src/main.js` (not npm), and every
 * variable the units and their example environment files set is one the service reads.
 *
 * verify checks that ExecStart's program exists, so it runs on a copy where the install folder
 * (/opt/metal-control-plane) is this checkout and /usr/bin/node the node running this test; the
 * service's own file, dist/src/main.js, must then exist too (npm test builds first).
 */
const INSTALL = '/opt/metal-control-plane';
const NODE = '/usr/bin/node';
const SYSTEMD_ANALYZE = '/usr/bin/systemd-analyze';
const deployDir = fromRoot('deploy');
const units = fs.readdirSync(deployDir).filter((f) => f.endsWith('.service')).sort();
/** The example file each EnvironmentFile= stands for. */
const EXAMPLES: Record<string, string> = {
  '/etc/metal/metal.env': 'metal.env.example',
  '/etc/metal/agent-%i.env': 'metal-agent.env.example',
};
/** Read by Node itself, not by src/config.ts: a private CA for the agent's API_URL. */
const NODE_RUNTIME_VARIABLES = new Set(['NODE_EXTRA_CA_CERTS']);

/** Every variable name src/config.ts reads: loadConfig over an environment that records each read. */
function configVariables(): Set<string> {
  const read = new Set<string>();
  const env = new Proxy({} as NodeJS.ProcessEnv, {
    get(_target, key) {
      if (typeof key === 'string') read.add(key);
      return undefined;
    },
  });
  loadConfig(env);
  return read;
}

/** [Section] key=value lines of a unit (comments and blank lines dropped; no line continuations used). */
function directives(text: string): { section: string; key: string; value: string }[] {
  let section = '';
  const out: { section: string; key: string; value: string }[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#') || line.startsWith(';')) continue;
    if (line.endsWith('\\')) throw new Error(`line continuation not expected: ${line}`);
    const s = /^\[(.+)\]$/.exec(line);
    if (s) {
      section = s[1]!;
      continue;
    }
    const at = line.indexOf('=');
    out.push({ section, key: line.slice(0, at).trim(), value: line.slice(at + 1).trim() });
  }
  return out;
}

/** NAME=value assignments of an Environment= value (space separated, optionally double-quoted). */
const assignedNames = (value: string) => [...value.matchAll(/(?:^|\s)"?([A-Za-z_][A-Za-z0-9_]*)=/g)].map((m) => m[1]!);

describe('deploy/: systemd units', () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'metal-units-'));
  afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

  it('there are units for the API, the worker and a remote agent', () => {
    expect(units).toEqual(expect.arrayContaining(['metal-api.service', 'metal-worker.service', 'metal-agent@.service']));
  });

  it.each(units)('%s passes systemd-analyze verify with nothing said about it', (unit) => {
    expect(fs.existsSync(SYSTEMD_ANALYZE)).toBe(true); // CI: Debian package systemd (.ci/run)
    expect(fs.existsSync(fromRoot('dist', 'src', 'main.js'))).toBe(true); // `npm run build` first (npm test does)
    const text = fs.readFileSync(path.join(deployDir, unit), 'utf8');
    fs.writeFileSync(path.join(tmp, unit), text.split(INSTALL).join(fromRoot()).split(`${NODE} `).join(`${process.execPath} `));
    const r = spawnSync(SYSTEMD_ANALYZE, ['verify', '--man=no', path.join(tmp, unit)], { encoding: 'utf8' });
    const said = `${r.stdout}${r.stderr}`.split('\n').filter(Boolean);
    // Lines about this unit (its name, or its instance's for a template, or its file) are warnings.
    const stem = unit.replace(/@?\.service$/, '');
    expect({ status: r.status, about: said.filter((l) => l.includes(stem) || l.includes(tmp)) }).toEqual({ status: 0, about: [] });
  });

  it.each(units)('%s runs the built service with node, not npm', (unit) => {
    const exec = directives(fs.readFileSync(path.join(deployDir, unit), 'utf8')).filter((d) => d.key === 'ExecStart');
    expect(exec.map((d) => d.value)).toEqual([`${NODE} ${INSTALL}/dist/src/main.js`]);
  });

  it.each(units)('%s sets only variables src/config.ts reads, and its role', (unit) => {
    const known = configVariables();
    expect(known.has('DATABASE_URL')).toBe(true); // the recorder works
    const d = directives(fs.readFileSync(path.join(deployDir, unit), 'utf8')).filter((x) => x.section === 'Service');
    const names = d.filter((x) => x.key === 'Environment').flatMap((x) => assignedNames(x.value));
    const files = d.filter((x) => x.key === 'EnvironmentFile').map((x) => x.value.replace(/^-/, ''));
    expect(files.length).toBeGreaterThan(0);
    const unknown: string[] = [];
    for (const file of files) {
      const example = EXAMPLES[file];
      expect(example ? `${file}: ${example}` : `${file}: no example in deploy/`).toBe(`${file}: ${example}`);
      const lines = fs.readFileSync(path.join(deployDir, example!), 'utf8').split('\n');
      // Set (NAME=...) or offered commented out (# NAME=...): both must be real.
      const exampleNames = lines.flatMap((l) => /^#?\s*([A-Z][A-Z0-9_]*)=/.exec(l)?.[1] ?? []);
      expect(exampleNames.length).toBeGreaterThan(0);
      // The unit's own Environment= (ROLE above all) would be overridden by the file's.
      const overriding = lines.flatMap((l) => /^([A-Z][A-Z0-9_]*)=/.exec(l)?.[1] ?? []).filter((n) => names.includes(n));
      expect(`${example} overrides the unit's ${overriding.join(', ')}`).toBe(`${example} overrides the unit's `);
      unknown.push(...exampleNames.filter((n) => !known.has(n) && !NODE_RUNTIME_VARIABLES.has(n)).map((n) => `${example}: ${n}`));
    }
    unknown.push(...names.filter((n) => !known.has(n)).map((n) => `${unit}: ${n}`));
    expect(unknown).toEqual([]);
    const role = d.filter((x) => x.key === 'Environment').flatMap((x) => [...x.value.matchAll(/ROLE=(\w+)/g)].map((m) => m[1]));
    expect(role).toEqual([{ 'metal-api.service': 'api', 'metal-worker.service': 'worker', 'metal-agent@.service': 'agent' }[unit] ?? 'all']);
  });
});
