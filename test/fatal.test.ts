import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fromRoot } from '../src/paths';
import { describeThrown, fatalLine, StartupError } from '../src/ops/fatal';

/** A start-up failure is one line saying what was thrown, whatever it was. */
describe('start-up failure reports', () => {
  it('describe whatever was thrown', () => {
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    expect(describeThrown(new Error('boom'))).toBe('boom');
    expect(describeThrown('a string')).toBe('a string');
    expect(describeThrown(undefined)).toBe('undefined');
    expect(describeThrown(null)).toBe('null');
    expect(describeThrown({ reason: 'x' })).toBe('{"reason":"x"}');
    expect(describeThrown(Object.create(null))).toBe('{}');
    expect(describeThrown(circular)).toBe('[object Object]');
    expect(describeThrown(10n)).toBe('10');
    expect(describeThrown(Symbol('s'))).toBe('Symbol(s)');
    expect(describeThrown('x'.repeat(5000)).length).toBeLessThan(2100);
  });

  it('a StartupError is its message only; another error also names its type and code', () => {
    expect(JSON.parse(fatalLine(new StartupError('DATA_DIR /x is in use')))).toEqual(expect.objectContaining({ level: 'fatal', error: 'DATA_DIR /x is in use' }));
    expect(JSON.parse(fatalLine(new StartupError('x'))).type).toBeUndefined();
    const error = Object.assign(new TypeError('bad'), { code: 'E_BAD' });
    expect(JSON.parse(fatalLine(error))).toEqual(expect.objectContaining({ error: 'bad', type: 'TypeError', code: 'E_BAD' }));
    expect(fatalLine(error)).not.toContain(' at ');
  });

  it('main reports a start-up rejection that is not an Error in one line, and exits 1', () => {
    if (!fs.existsSync(fromRoot('dist', 'src', 'main.js'))) throw new Error('run `npm run build` first (npm test does)');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'metal-fatal-'));
    try {
      // The first thing the start does is create DATA_DIR: make that reject with `undefined`.
      const preload = path.join(dir, 'reject.js');
      fs.writeFileSync(preload, "require('fs').promises.mkdir = () => Promise.reject(undefined);\n");
      const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: path.join(dir, 'data'), PORT: '0' };
      delete env.DATABASE_URL;
      const run = spawnSync(process.execPath, ['-r', preload, fromRoot('dist', 'src', 'main.js')], { env, encoding: 'utf8', timeout: 30000 });
      expect(run.status).toBe(1);
      const out = (run.stdout + run.stderr).trim().split('\n');
      expect(out).toHaveLength(1);
      expect(JSON.parse(out[0]!)).toEqual(expect.objectContaining({ level: 'fatal', msg: 'start-up failed', error: 'undefined' }));
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
