import SchemaBuilder from '@pothos/core';
import PrismaPlugin from '@pothos/plugin-prisma';
import RelayPlugin from '@pothos/plugin-relay';
import ScopeAuthPlugin from '@pothos/plugin-scope-auth';
import type PrismaTypes from '../generated/pothos-prisma-types';
import { getDatamodel } from '../generated/pothos-prisma-types';
import type { Context } from '../context';
import { isPlatformAdmin } from '../auth/decide';
import { AppError, unauthenticated } from '../errors';
import { typeOfId } from '../ids';
import { resolveNodeQuery } from './node-query';

/**
 * The one schema builder. Plugins: prisma (typed models and query planning, so a page of nodes with
 * their pool and site is one planned query), relay (Node interface, connections; global ids are
 * our own prefixed ids, not base64), scope-auth (coarse gates: signed in, platform admin). Fine
 * decisions are `decide()` in the domain code. The errors plugin is left out on purpose: every
 * refusal is an `extensions.code` from one vocabulary, not a union result type.
 */
export const builder = new SchemaBuilder<{
  Context: Context;
  PrismaTypes: PrismaTypes;
  AuthScopes: { authenticated: boolean; platformAdmin: boolean };
  DefaultFieldNullability: false;
  Scalars: {
    ID: { Input: string; Output: string };
    DateTime: { Input: Date; Output: Date };
    JSON: { Input: unknown; Output: unknown };
  };
}>({
  plugins: [ScopeAuthPlugin, PrismaPlugin, RelayPlugin],
  defaultFieldNullability: false,
  prisma: {
    client: (ctx) => ctx.prisma,
    dmmf: getDatamodel(),
    exposeDescriptions: false,
    filterConnectionTotalCount: true,
    onUnusedQuery: null,
  },
  relay: {
    clientMutationId: 'omit',
    cursorType: 'String',
    nodesQueryOptions: false,
    nodeQueryOptions: { resolve: resolveNodeQuery as never },
    encodeGlobalID: (_typename, id) => String(id),
    decodeGlobalID: (globalID) => {
      const typename = typeOfId(globalID);
      if (!typename) throw new AppError('INVALID_INPUT', 'id: is not an id of this service', { field: 'id' });
      return { typename, id: globalID };
    },
  },
  scopeAuth: {
    authScopes: (ctx) => ({
      authenticated: ctx.principal !== null,
      platformAdmin: ctx.principal !== null && isPlatformAdmin(ctx.principal),
    }),
    unauthorizedError: (_parent, ctx) =>
      ctx.principal ? new AppError('PERMISSION_DENIED', 'this needs the platform admin permission') : unauthenticated(),
  },
});

builder.scalarType('DateTime', {
  serialize: (value) => (value instanceof Date ? value.toISOString() : String(value)),
  parseValue: (value) => {
    const date = new Date(String(value));
    // No echo of the value: input errors never repeat what was sent.
    if (typeof value !== 'string' || Number.isNaN(date.getTime())) throw new AppError('INVALID_INPUT', 'is not an ISO 8601 date-time');
    return date;
  },
});
builder.scalarType('JSON', {
  description: 'Any JSON value',
  serialize: (value) => value,
  parseValue: (value) => value,
});

builder.queryType({ authScopes: { authenticated: true } });
builder.mutationType({ authScopes: { authenticated: true } });
