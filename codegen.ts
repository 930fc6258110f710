import type { CodegenConfig } from '@graphql-codegen/cli';

const scalarsConfig = {
  scalars: { DateTime: 'string', JSON: 'unknown', ID: 'string' },
  enumType: 'string-literal',
  useTypeImports: true,
} as const;

// Typed documents for every operation in schema/operations/: the REST layer and the tests use them,
// so a document that no longer fits the schema fails the build, not a request.
// The SDK (clients/sdk) gets the same documents plus its own (clients/sdk/operations/), so that
// every root field of Query, Mutation and Subscription has one (test/sdk-operations.test.ts).
// Codegen validates every document against the schema: a schema change that breaks one fails
// `npm run generate`, hence `npm run build`.
const config: CodegenConfig = {
  schema: 'schema/schema.graphql',
  generates: {
    'src/generated/operations.ts': {
      documents: 'schema/operations/*.graphql',
      plugins: ['typescript-operations', 'typed-document-node'],
      config: scalarsConfig,
    },
    'clients/sdk/src/generated.ts': {
      documents: ['schema/operations/*.graphql', 'clients/sdk/operations/*.graphql'],
      plugins: ['typescript-operations', 'typed-document-node'],
      config: scalarsConfig,
    },
  },
};

export default config;
