import { isObjectType, lexicographicSortSchema, printSchema, type GraphQLSchema } from 'graphql';
import { builder } from './builder';
// Each module registers its types and fields on the builder when loaded.
import '../modules/tenancy/tenant-graphql';
import '../modules/tenancy/site-graphql';
import '../modules/tenancy/pool-graphql';
import '../modules/tenancy/hardware-profile-graphql';
import '../modules/tenancy/token-graphql';
import '../modules/metal/node-graphql';
import '../modules/metal/deploy-profile-graphql';
import '../modules/metal/verbs-graphql';
import '../modules/metal/api-methods-graphql';
import '../modules/metal/power-graphql';
import '../modules/metal/bulk-graphql';
import '../modules/metal/discovery-graphql';
import '../modules/metal/timeline-graphql';
import '../modules/sites/agent-graphql';
import '../modules/fabric/config-graphql';
import '../modules/fabric/rollout-graphql';
import '../modules/fabric/preflight-graphql';
import '../modules/fabric/vtep-graphql';
import '../modules/fabric/compute-graphql';
import '../modules/provision/inventory-graphql';
import '../modules/provision/register-graphql';
import '../modules/provision/provision-graphql';
import '../events/graphql';

let schema: GraphQLSchema | undefined;

/**
 * A Node's global id is its row id (encodeGlobalID is the identity, see builder.ts), but the relay
 * plugin resolves every `id` through an async function, so graphql-js settled one promise per
 * object: a bulk answer of 10,000 nodes paid for 10,000 of them. Resolve it synchronously.
 */
function syncNodeIds(built: GraphQLSchema): GraphQLSchema {
  for (const type of Object.values(built.getTypeMap())) {
    if (!isObjectType(type) || !type.getInterfaces().some((i) => i.name === 'Node')) continue;
    const id = type.getFields().id;
    if (!id) throw new Error(`${type.name} implements Node without an id field`);
    id.resolve = (parent: { id: unknown }) => String(parent.id);
  }
  return built;
}

export function getSchema(): GraphQLSchema {
  schema ??= syncNodeIds(builder.toSchema({ sortSchema: true }));
  return schema;
}

export function printedSchema(): string {
  return printSchema(lexicographicSortSchema(getSchema())) + '\n';
}
