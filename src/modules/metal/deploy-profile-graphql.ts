import { builder } from '../../graphql/builder';
import { saveProfileVersion, STEP_KINDS, validateProfile } from './deploy-profile';

/** The deploy profiles' GraphQL face; the rules are deploy-profile.ts's. */

const DeployProfileVersionRef = builder.prismaObject('DeployProfileVersion', {
  fields: (t) => ({
    version: t.exposeInt('version'),
    role: t.exposeString('role'),
    steps: t.expose('steps', { type: 'JSON' }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
  }),
});

builder.prismaNode('DeployProfile', {
  id: { field: 'id' },
  nullable: true,
  fields: (t) => ({
    name: t.exposeString('name'),
    tenantId: t.exposeID('tenantId'),
    versions: t.relation('versions', { query: { orderBy: { version: 'asc' } } }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
  }),
});
void DeployProfileVersionRef;

const ProfileStepInput = builder.inputType('ProfileStepInput', {
  fields: (t) => ({
    name: t.string({ required: true }),
    kind: t.string({ required: true, description: STEP_KINDS.join(', ') }),
    params: t.field({ type: 'JSON', required: false }),
  }),
});

const DeployProfileVersionInput = builder.inputType('DeployProfileVersionInput', {
  fields: (t) => ({
    profileId: t.id({ required: false, description: 'Add a version to this profile; omit to create a profile named `name`.' }),
    name: t.string({ required: false }),
    tenantId: t.id({ required: false }),
    role: t.string({ required: true }),
    steps: t.field({ type: [ProfileStepInput], required: true }),
  }),
});

builder.mutationField('saveDeployProfileVersion', (t) =>
  t.prismaField({
    type: 'DeployProfile',
    description: 'Creates a deploy profile (version 1) or adds the next version; versions never change. Needs admin on the tenant.',
    args: { input: t.arg({ type: DeployProfileVersionInput, required: true }) },
    resolve: async (query, _root, { input }, ctx) => {
      const id = await saveProfileVersion(ctx, input);
      return ctx.prisma.deployProfile.findUniqueOrThrow({ ...query, where: { id } });
    },
  }),
);

const Validation = builder.objectRef<{ valid: boolean; problems: string[] }>('ProfileValidation').implement({
  fields: (t) => ({ valid: t.exposeBoolean('valid'), problems: t.exposeStringList('problems') }),
});

builder.queryField('validateProfile', (t) =>
  t.field({
    type: Validation,
    description: 'profiles.validate: the problems a deploy of this profile version would hit before its workflow starts.',
    args: { profileId: t.arg.id({ required: true }), profileVersion: t.arg.int({ required: true }) },
    resolve: (_root, args, ctx) => validateProfile(ctx, args.profileId, args.profileVersion),
  }),
);
