/**
 * The metal group's 15 methods as the seed lists them: path, kind, authorization, module, phase.
 * `apiMethods` reads this table, and says for each whether this build serves it (its REST route
 * exists and its module is registered), so the answer is never a claim the routes do not back.
 */
export interface ApiMethod {
  name: string;
  path: string;
  kind: 'mutation' | 'read';
  permission: 'compute:nodes:provision' | 'compute:nodes:power' | 'compute:sites:read';
  scope: 'compute-pool' | 'compute-node' | 'compute-site';
  module: string;
  phase: string;
}

const m = (name: string, kind: ApiMethod['kind'], permission: ApiMethod['permission'], scope: ApiMethod['scope'], phase: string): ApiMethod => ({
  name,
  path: `/api/compute/metal/${name}`,
  kind,
  permission,
  scope,
  module: 'metal',
  phase,
});

export const METAL_METHODS: readonly ApiMethod[] = [
  m('enroll', 'mutation', 'compute:nodes:provision', 'compute-pool', 'v0.2'),
  m('manage', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  m('inspect', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  m('provide', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  m('deploy', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  m('undeploy', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  m('rescue', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  m('unrescue', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  m('abort', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  m('recover', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  m('retire', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  m('power', 'mutation', 'compute:nodes:power', 'compute-node', 'v0.2'),
  m('bulk', 'mutation', 'compute:nodes:provision', 'compute-pool', 'v1.0'),
  m('confirmMac', 'mutation', 'compute:nodes:provision', 'compute-node', 'v1.0'),
  m('discovered', 'read', 'compute:sites:read', 'compute-site', 'v1.0'),
];
