import { Kind, type FieldNode, type FragmentDefinitionNode, type GraphQLResolveInfo, type SelectionSetNode } from 'graphql';

/**
 * The names of the fields selected at `path` below the field being resolved (through inline
 * fragments and fragment spreads, aliases ignored), for a resolver that reads only what the query
 * asks for. `@skip`/`@include` are not evaluated: a field under them counts as selected, so
 * the answer may read more than needed, never less. Callers on a hot path keep the result per
 * field node (documents are cached, so that is once per distinct query).
 */
export function selectedFields(info: Pick<GraphQLResolveInfo, 'fieldNodes' | 'fragments'>, path: readonly string[]): ReadonlySet<string> {
  let level: SelectionSetNode[] = info.fieldNodes.flatMap((f) => (f.selectionSet ? [f.selectionSet] : []));
  for (const name of path) {
    const next: SelectionSetNode[] = [];
    for (const set of level) for (const field of fieldsOf(set, info.fragments)) if (field.name.value === name && field.selectionSet) next.push(field.selectionSet);
    level = next;
  }
  const names = new Set<string>();
  for (const set of level) for (const field of fieldsOf(set, info.fragments)) names.add(field.name.value);
  return names;
}

function fieldsOf(set: SelectionSetNode, fragments: Record<string, FragmentDefinitionNode>, seen = new Set<string>()): FieldNode[] {
  const out: FieldNode[] = [];
  for (const selection of set.selections) {
    if (selection.kind === Kind.FIELD) out.push(selection);
    else if (selection.kind === Kind.INLINE_FRAGMENT) out.push(...fieldsOf(selection.selectionSet, fragments, seen));
    else {
      const name = selection.name.value;
      const fragment = fragments[name];
      if (!fragment || seen.has(name)) continue;
      seen.add(name);
      out.push(...fieldsOf(fragment.selectionSet, fragments, seen));
    }
  }
  return out;
}
