import fs from 'node:fs';
import { getNamedType, isAbstractType, isObjectType, parse, TypeInfo, visit, visitWithTypeInfo, type GraphQLNamedType, type GraphQLObjectType, type GraphQLSchema } from 'graphql';
import { fromRoot } from '../paths';

/**
 * Which tables each GraphQL type's cached results are computed from, so that a committed change to
 * a table drops exactly the cached results holding those types. One source, three parts:
 * - a type built by `prismaObject`/`prismaNode` reads its model's table (from the Pothos type and
 *   prisma/schema.prisma, nothing by hand);
 * - a Relay connection or edge reads what its `node` type reads;
 * - every other type a cached query can return is listed below with the tables its fields come
 *   from. A type that is none of these makes `cacheDependencies` throw, so a new computed type
 *   cannot be cached until someone says what it reads.
 * Authorization lookups of a row's owner (its tenant, which never changes) are not dependencies.
 */
export const COMPUTED_TYPE_TABLES: Readonly<Record<string, readonly string[]>> = {
  Bmc: ['node'],
  NodeError: ['node'],
  // A GROUP BY over node rows.
  NodeStateCount: ['node'],
  DriverBindings: ['node', 'hardware_profile'],
  PoolPolicy: ['pool'],
  ApproverKey: ['pool'],
  Grant: ['api_grant'],
  // Sightings by MAC, with the node enrolled with that MAC or proposed for it (node columns).
  DiscoveredMachine: ['sighting', 'node'],
  ProfileValidation: ['deploy_profile_version'],
  // The one fabric_config row with its derived fields (physnet is null until the network module
  // exists, then its tables join this list; lastJob is never cached, see NEVER_CACHED_FIELDS).
  FabricConfig: ['fabric_config'],
  // The pool's bounds from fabric_config, its use from fabric_vtep.
  FabricVtepPool: ['fabric_config', 'fabric_vtep'],
  // A compute node is listed while its metal node is deployed; its VTEP address is fabric_vtep's.
  ComputeNode: ['compute_node', 'node', 'fabric_vtep'],
  // The method table is part of the build.
  ApiMethod: [],
  // Only ever inside its connection, which is dropped with its node type's table.
  PageInfo: [],
};

/**
 * Fields whose results are never stored, and why. The cache's TTL per schema coordinate is 0 for
 * them (a result that selects one is not stored), and the types reached only through them need no
 * entry above.
 */
export const NEVER_CACHED_FIELDS: Readonly<Record<string, string>> = {
  // The principal comes from the token store, whose own cache (TOKEN_CACHE_MS) decides how fresh
  // it is; storing it again would add the read cache's lifetime to it. It costs no SQL.
  'Query.viewer': 'the principal, already cached by the token store',
  // Depends on the clock (heartbeat age), which sends no notification.
  'SiteAgent.serving': 'depends on the clock',
  // Fabric rollouts change every few hundred milliseconds while they run, and a UI reads them to
  // replay what it missed: a cached copy would only be dropped again at once.
  'FabricConfig.lastJob': 'the latest rollout job, which changes while a rollout runs',
  'Query.fabricLatestJob': 'a running rollout changes it continuously',
  'Query.fabricJob': 'a running rollout changes it continuously',
  // A run's steps change every second while it runs (workflow_step), as rollout steps do.
  'Query.workflowRun': 'workflow steps, which change continuously while a run runs',
  'Query.controlNodeJob': 'a job is a workflow run: its steps change continuously while it runs',
  'Query.provisionProgress': 'workflow steps, which change continuously while a job runs',
  'Query.provisionIsoQueue': 'the ISO-build queue (pg-boss), which sends no notification',
  // NetBox sends this service no notification: the inventory's own cache (NETBOX_CACHE_MS) decides.
  'Query.controlNodeInventory': 'NetBox\'s data, kept by the inventory\'s own short cache',
  'MetalNode.timeline': 'workflow steps, which change continuously while a run runs',
  'Query.fabricNodePostdeploy': 'rollout steps, which change continuously while a rollout runs',
  'Query.fabricBatchPostdeploy': 'rollout steps, which change continuously while a rollout runs',
  // The first read creates the key pair: a stored result must not stand in for that write.
  'Query.serviceSshKey': 'creates the service key pair on first read',
  // Its risks read the preflight's MTU consensus (fabric_preflight has no cache trigger); a plan costs one render.
  'Query.fabricPlan': 'reads fabric_preflight, which sends no notification',
};

/**
 * Tables no cached query reads, and why. They carry no cache trigger: a notification from them
 * would drop nothing and only refuse to store results computed meanwhile.
 */
export const TABLES_NO_CACHED_QUERY_READS: Readonly<Record<string, string>> = {
  event: 'read only by subscriptions, which are never cached (and written on every change)',
  event_horizon: 'read only by subscriptions',
  workflow_run: 'read only by mutations and the workflowProgress subscription',
  workflow_step: 'read only by the workflow engine (a timeline query reading it must be never-cached: steps change every second)',
  boot_entry: 'read only by the iPXE route and the ramdisk callbacks, never by GraphQL',
  boot_token: 'read only by the ramdisk callbacks (token check)',
  ramdisk_report: 'read only by the workflow engine',
  installer_iso: 'read only by the ISO route BMCs fetch from (/boot/iso/) and the installer callbacks (token check), never by GraphQL',
  install_report: 'read only by the workflow engine (a control-node job\'s steps) and the installer callbacks',
  iso_build_job: 'read only by GET /controlnode/provision/queue (REST) and the ISO build worker, never by GraphQL',
  fabric_job: 'read only by never-cached fields (rollout jobs: see NEVER_CACHED_FIELDS) and the rollout worker',
  fabric_job_node: 'read only by never-cached fields (rollout jobs and post-deploy checklists) and the rollout worker',
  fabric_node_baseline: 'read only by the rollout worker (the MTU a teardown restores)',
  service_ssh_key: 'read only by Query.serviceSshKey, never cached (its first read writes the row)',
  fabric_preflight: 'read only by the fabricPreflight mutation, fabric-config writes (the MTU drift check) and Query.fabricPlan (never cached), never by a cached query',
  secret: 'never read by GraphQL: a node view says only whether it holds a secret:// reference',
};

/** Prisma model name -> table, read from the one data model. */
export function modelTables(schemaText = fs.readFileSync(fromRoot('prisma', 'schema.prisma'), 'utf8')): Map<string, string> {
  const tables = new Map<string, string>();
  for (const block of schemaText.matchAll(/^model\s+(\w+)\s*\{([\s\S]*?)^\}/gm)) {
    const [, model, body] = block as unknown as [string, string, string];
    tables.set(model, /^\s*@@map\("([^"]+)"\)/m.exec(body)?.[1] ?? model);
  }
  return tables;
}

export interface CacheDependencies {
  /** Every type a cached query result can hold, with the tables it is computed from. */
  tablesByType: Map<string, Set<string>>;
  /** The inverse: the types to drop when a table changes. */
  typesByTable: Map<string, string[]>;
}

function modelOf(type: GraphQLObjectType): string | undefined {
  const model = (type.extensions as { pothosPrismaModel?: unknown } | undefined)?.pothosPrismaModel;
  return typeof model === 'string' ? model : undefined;
}

/** Pothos names them <Parent><Field>Connection / ...Edge; recognised by their shape. */
function relayNodeType(type: GraphQLObjectType): GraphQLNamedType | undefined {
  const fields = type.getFields();
  if (fields.edges && fields.pageInfo) {
    const edge = getNamedType(fields.edges.type);
    return isObjectType(edge) ? relayNodeType(edge) : undefined;
  }
  if (fields.cursor && fields.node) return getNamedType(fields.node.type);
  return undefined;
}

export function cacheDependencies(
  schema: GraphQLSchema,
  tables = modelTables(),
  computed: Readonly<Record<string, readonly string[]>> = COMPUTED_TYPE_TABLES,
): CacheDependencies {
  const query = schema.getQueryType();
  if (!query) throw new Error('the schema has no Query type');
  const tablesByType = new Map<string, Set<string>>();

  const readsOf = (type: GraphQLNamedType): Set<string> => {
    const known = tablesByType.get(type.name);
    if (known) return known;
    const reads = new Set<string>();
    tablesByType.set(type.name, reads); // before recursing: types refer to each other
    if (isAbstractType(type)) {
      // A null or empty field of an interface type is recorded under the interface's name.
      for (const member of schema.getPossibleTypes(type)) for (const table of readsOf(member)) reads.add(table);
    } else if (isObjectType(type)) {
      const model = modelOf(type);
      const relayNode = model ? undefined : relayNodeType(type);
      if (model) {
        const table = tables.get(model);
        if (!table) throw new Error(`GraphQL type ${type.name} is backed by Prisma model ${model}, which prisma/schema.prisma does not define`);
        reads.add(table);
      } else if (relayNode) {
        for (const table of readsOf(relayNode)) reads.add(table);
      } else if (type.name in computed) {
        for (const table of computed[type.name]!) reads.add(table);
      } else {
        throw new Error(
          `GraphQL type ${type.name} can be held by a cached query but is neither a Prisma model's type nor listed in COMPUTED_TYPE_TABLES (src/graphql/cache-dependencies.ts): say which tables its fields come from`,
        );
      }
      for (const [name, field] of Object.entries(type.getFields())) {
        if (`${type.name}.${name}` in NEVER_CACHED_FIELDS) continue;
        const target = getNamedType(field.type);
        if (isObjectType(target) || isAbstractType(target)) readsOf(target);
      }
    }
    return reads;
  };

  for (const [name, field] of Object.entries(query.getFields())) {
    if (`${query.name}.${name}` in NEVER_CACHED_FIELDS) continue;
    const target = getNamedType(field.type);
    if (isObjectType(target) || isAbstractType(target)) readsOf(target);
  }

  const typesByTable = new Map<string, string[]>();
  for (const [type, reads] of tablesByType) {
    for (const table of reads) typesByTable.set(table, [...(typesByTable.get(table) ?? []), type]);
  }
  return { tablesByType, typesByTable };
}

/**
 * The object, interface and union types a document selects (its root type included). The cache
 * tags every stored result with these: the plugin itself only records objects that have an id,
 * plus the types of fields that came back null or empty, so a non-empty list of id-less objects
 * (discovered, grants, versions) would otherwise be dropped by nothing but its TTL.
 */
export function selectedTypes(schema: GraphQLSchema, document: string): string[] {
  const typeInfo = new TypeInfo(schema);
  const found = new Set<string>();
  const record = () => {
    const type = typeInfo.getType();
    const named = type && getNamedType(type);
    if (named && (isObjectType(named) || isAbstractType(named))) found.add(named.name);
  };
  visit(parse(document), visitWithTypeInfo(typeInfo, { OperationDefinition: record, FragmentDefinition: record, Field: record, InlineFragment: record }));
  return [...found];
}
