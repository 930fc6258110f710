import { builder } from '../../graphql/builder';
import { isPlatformAdmin } from '../../auth/decide';
import { requirePrincipal } from '../../context';
import { PERMISSIONS, SCOPE_TYPES, type Grant, type Principal } from '../../auth/permissions';
import { createApiToken, revokeApiToken } from './token';

/** The API tokens' GraphQL face; the rules are token.ts's. */

const ScopeTypeEnum = builder.enumType('ScopeType', { values: SCOPE_TYPES });

const GrantRef = builder.objectRef<Grant>('Grant').implement({
  description: 'A permission on a scope (and everything under it).',
  fields: (t) => ({
    permission: t.exposeString('permission', { description: `One of: ${PERMISSIONS.join(', ')}` }),
    scopeType: t.expose('scopeType', { type: ScopeTypeEnum }),
    scopeId: t.exposeID('scopeId', { nullable: true }),
  }),
});

builder.prismaNode('ApiToken', {
  id: { field: 'id' },
  nullable: true,
  fields: (t) => ({
    name: t.exposeString('name'),
    tenantId: t.exposeID('tenantId', { nullable: true }),
    grants: t.field({
      type: [GrantRef],
      select: { grants: true },
      resolve: (token) => token.grants.map((g) => ({ ...g, permission: g.permission as Grant['permission'] })),
    }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
    expiresAt: t.expose('expiresAt', { type: 'DateTime', nullable: true }),
    revokedAt: t.expose('revokedAt', { type: 'DateTime', nullable: true }),
  }),
});

const Viewer = builder.objectRef<Principal>('Viewer').implement({
  description: 'Who the bearer token says the caller is.',
  fields: (t) => ({
    tokenId: t.exposeID('tokenId'),
    name: t.exposeString('name'),
    tenantId: t.exposeID('tenantId', { nullable: true }),
    platformAdmin: t.boolean({ resolve: (p) => isPlatformAdmin(p) }),
    grants: t.expose('grants', { type: [GrantRef] }),
  }),
});

builder.queryField('viewer', (t) => t.field({ type: Viewer, resolve: (_root, _args, ctx) => requirePrincipal(ctx) }));

const GrantInput = builder.inputType('GrantInput', {
  fields: (t) => ({
    permission: t.string({ required: true, description: `One of: ${PERMISSIONS.join(', ')}` }),
    scopeType: t.field({ type: ScopeTypeEnum, required: true }),
    scopeId: t.id({ required: false, description: 'Required for every scope but platform.' }),
  }),
});

const CreateApiTokenInput = builder.inputType('CreateApiTokenInput', {
  fields: (t) => ({
    name: t.string({ required: true }),
    tenantId: t.id({ required: false, description: 'Defaults to the caller\'s tenant; omit for a platform token.' }),
    grants: t.field({ type: [GrantInput], required: true }),
    expiresAt: t.field({ type: 'DateTime', required: false }),
  }),
});

const CreatedApiToken = builder.objectRef<{ token: string; id: string }>('CreatedApiToken').implement({
  fields: (t) => ({
    token: t.exposeString('token', { description: 'The bearer token. Shown once: only its hash is stored.' }),
    apiToken: t.prismaField({
      type: 'ApiToken',
      resolve: (query, parent, _args, ctx) => ctx.prisma.apiToken.findUniqueOrThrow({ ...query, where: { id: parent.id } }),
    }),
  }),
});

builder.mutationField('createApiToken', (t) =>
  t.field({
    type: CreatedApiToken,
    description: 'Needs admin on the token\'s tenant (platform admin for platform tokens).',
    args: { input: t.arg({ type: CreateApiTokenInput, required: true }) },
    resolve: (_root, { input }, ctx) => createApiToken(ctx, input),
  }),
);

builder.mutationField('revokeApiToken', (t) =>
  t.prismaField({
    type: 'ApiToken',
    description: 'Needs admin on the token\'s tenant. Revoking twice is harmless.',
    args: { id: t.arg.id({ required: true }) },
    resolve: async (query, _root, { id }, ctx) => {
      await revokeApiToken(ctx, id);
      return ctx.prisma.apiToken.findUniqueOrThrow({ ...query, where: { id } });
    },
  }),
);
