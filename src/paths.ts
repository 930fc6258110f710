import fs from 'node:fs';
import path from 'node:path';

/** The project root (where package.json is), whether running from src/ under jest or from dist/. */
function findRoot(start: string): string {
  let dir = start;
  while (!fs.existsSync(path.join(dir, 'package.json'))) {
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`no package.json above ${start}`);
    dir = parent;
  }
  return dir;
}

export const PROJECT_ROOT = findRoot(__dirname);
export const fromRoot = (...parts: string[]) => path.join(PROJECT_ROOT, ...parts);
