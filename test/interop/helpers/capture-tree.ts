/**
 * A small short-form mockup tree in a temporary directory, for captures that are single saved
 * responses (../shared/redfish-captures: bmclib, sushy): each captured file is copied byte for byte
 * to the path of the resource it is, plus the minimal scaffolding a caller adds (a service root, a
 * collection) as `body`. Served by startMockupServer (mockup.ts); remove() deletes the directory.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export function buildTree(files: { path: string; from?: string; body?: unknown }[]): { dir: string; remove(): void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'interop-tree-'));
  for (const f of files) {
    const rel = f.path.replace(/^\/redfish\/v1\/?/, '').replace(/\/+$/, '');
    const target = path.join(dir, rel, 'index.json');
    fs.mkdirSync(path.dirname(target), { recursive: true });
    if (f.from) fs.copyFileSync(f.from, target);
    else fs.writeFileSync(target, JSON.stringify(f.body, null, 2));
  }
  return { dir, remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}
