/**
 * `npm run test:interop`: the interop suite (issue 20) against peers nobody here wrote (sushy-tools,
 * DMTF's Redfish Mockup Server, real BMC captures), found through INTEROP_PEERS / INTEROP_MOCKUPS /
 * INTEROP_CAPTURES (default ../shared/... beside the clone). The plain `npm test` (jest.config.js)
 * leaves test/interop out and needs none of them.
 */
const base = require('./jest.config.js');

/** @type {import('jest').Config} */
module.exports = {
  ...base,
  roots: ['<rootDir>/test/interop'],
  testPathIgnorePatterns: ['/node_modules/'],
  globalSetup: '<rootDir>/test/interop/global-setup.ts',
  globalTeardown: '<rootDir>/test/setup/global-teardown.ts',
  // A lifecycle against sushy-tools waits for its deferred power changes (1-11 s each).
  testTimeout: 240000,
};
