import fs from 'node:fs';
import { fromRoot } from '../paths';
import { printedSchema } from './schema';

// `npm run schema:print` rewrites schema/schema.graphql; a test fails when the committed copy is stale.
fs.writeFileSync(fromRoot('schema', 'schema.graphql'), printedSchema());
console.log('wrote schema/schema.graphql');
