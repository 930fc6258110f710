import fs from 'node:fs';
import path from 'node:path';
import { Kind, parse, print, visit, type DefinitionNode, type FragmentDefinitionNode, type OperationDefinitionNode } from 'graphql';
import { fromRoot } from '../paths';

/**
 * The documents of schema/operations/*.graphql, one self-contained text per named operation (the
 * operation plus the fragments it uses), ready to execute.
 */
export function loadOperations(dir = fromRoot('schema', 'operations')): Map<string, string> {
  const definitions: DefinitionNode[] = [];
  for (const file of fs.readdirSync(dir).filter((f) => f.endsWith('.graphql')).sort()) {
    definitions.push(...parse(fs.readFileSync(path.join(dir, file), 'utf8')).definitions);
  }
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const d of definitions) if (d.kind === Kind.FRAGMENT_DEFINITION) fragments.set(d.name.value, d);
  const spreadsOf = (node: DefinitionNode): string[] => {
    const names: string[] = [];
    visit(node, { FragmentSpread: (s) => void names.push(s.name.value) });
    return names;
  };
  const out = new Map<string, string>();
  for (const d of definitions) {
    if (d.kind !== Kind.OPERATION_DEFINITION || !d.name) continue;
    const needed = new Set<string>();
    const queue = spreadsOf(d);
    while (queue.length) {
      const name = queue.pop()!;
      if (needed.has(name)) continue;
      const fragment = fragments.get(name);
      if (!fragment) throw new Error(`operation ${d.name.value} uses unknown fragment ${name}`);
      needed.add(name);
      queue.push(...spreadsOf(fragment));
    }
    const doc = [d as OperationDefinitionNode, ...[...needed].sort().map((n) => fragments.get(n)!)];
    out.set(d.name.value, doc.map((node) => print(node)).join('\n\n'));
  }
  return out;
}
