/**
 * Loads a DMTF public mockup (test/fixtures/redfish-mockups/<name>, copied from DMTF's
 * Redfish-Publications 2025.4 with their BSD-3 licence: folders are resource paths without
 * the `/redfish/v1` prefix, each resource an index.json) into a map keyed by resource path. The map is
 * each caller's own; the resources in it are shared and must be cloned before a change (1,000 machines
 * would otherwise copy the whole mockup each).
 */
import fs from 'node:fs';
import path from 'node:path';
import { fromRoot } from '../../../src/paths';

export type MockupName = 'public-rackmount1' | 'public-localstorage' | 'public-telemetry';
export type Doc = Record<string, unknown>;

/** In the repository, so a clone anywhere has them; REDFISH_MOCKUPS points at another copy. */
export const MOCKUP_ROOT = process.env.REDFISH_MOCKUPS ?? fromRoot('test', 'fixtures', 'redfish-mockups');

const cache = new Map<string, Map<string, Doc>>();

/** `/redfish/v1/Systems/1/` and `/redfish/v1/Systems/1` are one resource. */
export function normalize(p: string): string {
  const q = p.split('?')[0]!.split('#')[0]!;
  return q.length > 1 && q.endsWith('/') ? q.slice(0, -1) : q;
}

function readTree(dir: string, rel: string, out: Map<string, Doc>): void {
  for (const ent of fs.readdirSync(dir, { withFileTypes: true })) {
    if (ent.isDirectory()) readTree(path.join(dir, ent.name), `${rel}/${ent.name}`, out);
    else if (ent.name === 'index.json') out.set(rel, JSON.parse(fs.readFileSync(path.join(dir, ent.name), 'utf8')) as Doc);
  }
}

export function loadMockup(name: MockupName, root = MOCKUP_ROOT): Map<string, Doc> {
  const key = path.join(root, name);
  let docs = cache.get(key);
  if (!docs) {
    docs = new Map();
    readTree(key, '/redfish/v1', docs);
    if (!docs.has('/redfish/v1')) throw new Error(`no service root in mockup ${key}`);
    cache.set(key, docs);
  }
  // Resources are shared between machines, read only: a machine clones the few it changes (see own()).
  return new Map(docs);
}

/** Members' @odata.id of a collection resource. */
export function members(doc: Doc | undefined): string[] {
  const m = (doc?.Members ?? []) as { '@odata.id': string }[];
  return m.map((x) => normalize(x['@odata.id']));
}
