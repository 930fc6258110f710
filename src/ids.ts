import { randomUUID } from 'node:crypto';

/**
 * One id per entity: a type prefix plus a UUID, the same string in GraphQL (it is the Relay
 * global id) and in REST, so `node(id)` resolves it without any wrapping.
 */
export const ID_PREFIX = {
  Tenant: 'ten',
  Site: 'site',
  Pool: 'pool',
  HardwareProfile: 'hwp',
  MetalNode: 'node',
  ApiToken: 'tok',
  ApiGrant: 'grant',
  Secret: 'sec',
  DeployProfile: 'dpr',
  WorkflowRun: 'wf',
  SiteAgent: 'agt',
  Command: 'cmd',
  CommandBatch: 'bat',
  BootEntry: 'boot',
  BootToken: 'btk',
  InstallerIso: 'iso',
} as const;
export type IdType = keyof typeof ID_PREFIX;

const TYPE_BY_PREFIX = new Map<string, IdType>(
  Object.entries(ID_PREFIX).map(([type, prefix]) => [prefix, type as IdType]),
);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** UUIDv7: time-ordered, so ids sort by creation and keyset pagination stays index-friendly. */
export function uuidv7(now = Date.now()): string {
  const random = randomUUID().replace(/-/g, '');
  const ms = now.toString(16).padStart(12, '0');
  const hex = ms + '7' + random.slice(13, 16) + ((parseInt(random[16]!, 16) & 0x3) | 0x8).toString(16) + random.slice(17, 32);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

export function newId(type: IdType): string {
  return `${ID_PREFIX[type]}_${uuidv7()}`;
}

/** The entity type an id names, or undefined when it is not one of ours. */
export function typeOfId(id: string): IdType | undefined {
  const at = id.indexOf('_');
  if (at <= 0) return undefined;
  const type = TYPE_BY_PREFIX.get(id.slice(0, at));
  return type && UUID.test(id.slice(at + 1)) ? type : undefined;
}
