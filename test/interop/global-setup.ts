import globalSetup from '../setup/global-setup';
import { missingPrerequisites } from './helpers/peers';

/** The common setup (one real PostgreSQL), after the same one-line check as check-peers.ts (for `jest -c jest.interop.config.js` run by hand). */
export default async function interopGlobalSetup(): Promise<void> {
  const missing = missingPrerequisites();
  if (missing) throw new Error(missing);
  await globalSetup();
}
