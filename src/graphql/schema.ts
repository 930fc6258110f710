import { lexicographicSortSchema, printSchema, type GraphQLSchema } from 'graphql';
import { builder } from './builder';
// Each module registers its types and fields on the builder when loaded.
import '../modules/tenancy/tenant';
import '../modules/tenancy/site';
import '../modules/tenancy/pool';
import '../modules/tenancy/hardware-profile';
import '../modules/tenancy/token';
import '../modules/metal/node';
import '../modules/metal/deploy-profile';
import '../modules/metal/mutations';
import '../modules/metal/api-methods';
import '../modules/metal/power';
import '../modules/metal/bulk-graphql';
import '../modules/metal/discovery-graphql';
import '../modules/sites/agent';

let schema: GraphQLSchema | undefined;

export function getSchema(): GraphQLSchema {
  schema ??= builder.toSchema({ sortSchema: true });
  return schema;
}

export function printedSchema(): string {
  return printSchema(lexicographicSortSchema(getSchema())) + '\n';
}
