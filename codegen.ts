import type { CodegenConfig } from '@graphql-codegen/cli';

// Typed documents for every operation in schema/operations/: the REST layer and the tests use them,
// so a document that no longer fits the schema fails the build, not a request.
const config: CodegenConfig = {
  schema: 'schema/schema.graphql',
  documents: 'schema/operations/*.graphql',
  generates: {
    'src/generated/operations.ts': {
      plugins: ['typescript-operations', 'typed-document-node'],
      config: {
        scalars: { DateTime: 'string', JSON: 'unknown', ID: 'string' },
        enumType: 'string-literal',
        useTypeImports: true,
      },
    },
  },
};

export default config;
