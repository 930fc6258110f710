import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { buildSchema, concatAST, parse, validate, type DocumentNode, type GraphQLObjectType, type OperationDefinitionNode } from 'graphql';
import * as sdk from '../clients/sdk/src';

/**
 * The SDK has a typed document for every root field of Query, Mutation and Subscription: the
 * operations in schema/operations/ and clients/sdk/operations/, generated into
 * clients/sdk/src/generated.ts by `npm run generate` (codegen.ts). A field added to the schema
 * without an operation fails here; an operation the schema no longer fits fails codegen (the build)
 * and the validation below.
 */

const ROOT = path.join(__dirname, '..');
const DIRS = ['schema/operations', 'clients/sdk/operations'];

function documents(): { file: string; doc: DocumentNode }[] {
  return DIRS.flatMap((dir) =>
    readdirSync(path.join(ROOT, dir))
      .filter((f) => f.endsWith('.graphql'))
      .map((f) => ({ file: `${dir}/${f}`, doc: parse(readFileSync(path.join(ROOT, dir, f), 'utf8')) })),
  );
}

const operationsOf = (doc: DocumentNode) => doc.definitions.filter((d): d is OperationDefinitionNode => d.kind === 'OperationDefinition');

describe('the SDK\'s operations', () => {
  const schema = buildSchema(readFileSync(path.join(ROOT, 'schema/schema.graphql'), 'utf8'));
  const all = documents();
  const combined = concatAST(all.map((d) => d.doc));

  it('every root field of Query, Mutation and Subscription has an operation', () => {
    const covered = new Set<string>();
    for (const op of operationsOf(combined)) {
      const root = { query: 'Query', mutation: 'Mutation', subscription: 'Subscription' }[op.operation];
      for (const selection of op.selectionSet.selections) {
        if (selection.kind === 'Field') covered.add(`${root}.${selection.name.value}`);
      }
    }
    const roots = [schema.getQueryType(), schema.getMutationType(), schema.getSubscriptionType()].filter((t): t is GraphQLObjectType => !!t);
    const fields = roots.flatMap((t) => Object.keys(t.getFields()).map((f) => `${t.name}.${f}`));
    expect(fields.length).toBeGreaterThan(60);
    expect(fields.filter((f) => !covered.has(f))).toEqual([]);
  });

  it('every operation fits the schema, has a unique name, and is exported as <Name>Document', () => {
    expect(validate(schema, combined).map((e) => e.message)).toEqual([]);
    const names = operationsOf(combined).map((op) => op.name?.value);
    expect(names.every((n) => typeof n === 'string')).toBe(true);
    expect(new Set(names).size).toBe(names.length);
    const exported = sdk as unknown as Record<string, unknown>;
    const missing = names.filter((n) => {
      const doc = exported[`${n}Document`] as DocumentNode | undefined;
      return !doc || operationsOf(doc)[0]?.name?.value !== n;
    });
    expect(missing).toEqual([]);
  });

  it('a subscription document that takes `after` selects `cursor` (what reconnecting replays from)', () => {
    for (const op of operationsOf(combined).filter((o) => o.operation === 'subscription')) {
      const takesAfter = op.variableDefinitions?.some((v) => v.variable.name.value === 'after');
      if (!takesAfter) continue;
      const [root] = op.selectionSet.selections;
      const selected = root?.kind === 'Field' ? JSON.stringify(root.selectionSet) : '';
      // Directly or through a fragment that does.
      const viaFragment = combined.definitions.some(
        (d) => d.kind === 'FragmentDefinition' && selected.includes(`"${d.name.value}"`) && d.selectionSet.selections.some((s) => s.kind === 'Field' && s.name.value === 'cursor'),
      );
      const direct = root?.kind === 'Field' && !!root.selectionSet?.selections.some((s) => s.kind === 'Field' && s.name.value === 'cursor');
      expect({ op: op.name?.value, cursor: direct || viaFragment }).toEqual({ op: op.name?.value, cursor: true });
    }
  });
});
