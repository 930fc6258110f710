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

const method = (name: string, kind: ApiMethod['kind'], permission: ApiMethod['permission'], scope: ApiMethod['scope'], phase: string): ApiMethod => ({
  name,
  path: `/api/compute/metal/${name}`,
  kind,
  permission,
  scope,
  module: 'metal',
  phase,
});

export const METAL_METHODS: readonly ApiMethod[] = [
  method('enroll', 'mutation', 'compute:nodes:provision', 'compute-pool', 'v0.2'),
  method('manage', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  method('inspect', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  method('provide', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  method('deploy', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  method('undeploy', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  method('rescue', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  method('unrescue', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  method('abort', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  method('recover', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  method('retire', 'mutation', 'compute:nodes:provision', 'compute-node', 'v0.2'),
  method('power', 'mutation', 'compute:nodes:power', 'compute-node', 'v0.2'),
  method('bulk', 'mutation', 'compute:nodes:provision', 'compute-pool', 'v1.0'),
  method('confirmMac', 'mutation', 'compute:nodes:provision', 'compute-node', 'v1.0'),
  method('discovered', 'read', 'compute:sites:read', 'compute-site', 'v1.0'),
];
