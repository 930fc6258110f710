/**
 * `npm run test:interop` runs this before jest: one clear line and exit 1 when the peers, the
 * mockups, the captures or the peers' Debian packages are missing (jest would otherwise start
 * PostgreSQL and fail suite by suite).
 */
import { interopPaths, missingPrerequisites } from './helpers/peers';

const missing = missingPrerequisites();
if (missing) {
  console.error(missing);
  process.exit(1);
}
const p = interopPaths();
console.log(`test:interop: peers ${p.peers}, mockups ${p.mockups}, captures ${p.captures}`);
