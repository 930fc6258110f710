import { builder } from '../../graphql/builder';
import { routes } from '../../rest/routes';
import { METAL_METHODS, type ApiMethod } from './methods';

const served = new Set(routes.filter((r) => r.method === 'POST').map((r) => r.path));

const ApiMethodRef = builder.objectRef<ApiMethod & { served: boolean }>('ApiMethod').implement({
  description: 'One method of the API as its documentation lists it, and whether this build serves it.',
  fields: (t) => ({
    name: t.exposeString('name'),
    path: t.exposeString('path'),
    kind: t.exposeString('kind'),
    authorization: t.string({ description: 'permission @ scope', resolve: (m) => `${m.permission} @ ${m.scope}` }),
    module: t.exposeString('module'),
    phase: t.exposeString('phase'),
    served: t.exposeBoolean('served'),
  }),
});

builder.queryField('apiMethods', (t) =>
  t.field({
    type: [ApiMethodRef],
    description: 'Every method of the metal group, with whether this build serves it.',
    resolve: () => METAL_METHODS.map((method) => ({ ...method, served: served.has(method.path) })),
  }),
);
