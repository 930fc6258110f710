import fs from 'node:fs';
import { fromRoot } from '../src/paths';
import { printedSchema } from '../src/graphql/schema';
import { loadOperations } from '../src/rest/operations';
import { buildSchema, parse, validate } from 'graphql';
import { routes } from '../src/rest/routes';

describe('the printed schema', () => {
  it('schema/schema.graphql is the schema the builder prints (run `npm run build && npm run schema:print`)', () => {
    const committed = fs.readFileSync(fromRoot('schema', 'schema.graphql'), 'utf8');
    expect(committed).toBe(printedSchema());
  });

  it('every document in schema/operations validates against it', () => {
    const schema = buildSchema(fs.readFileSync(fromRoot('schema', 'schema.graphql'), 'utf8'));
    const operations = loadOperations();
    expect(operations.size).toBeGreaterThan(0);
    for (const [name, text] of operations) {
      expect([name, validate(schema, parse(text)).map((e) => e.message)]).toEqual([name, []]);
    }
  });

  it('every REST route names an operation that exists', () => {
    const operations = loadOperations();
    for (const route of routes) expect([route.path, operations.has(route.operation)]).toEqual([route.path, true]);
  });
});
