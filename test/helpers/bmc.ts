import { BmcError } from '../../clients/bmc/driver';

/** The BmcError a driver call rejects with; anything else (or success) fails the test. */
export async function failure(p: Promise<unknown>): Promise<BmcError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof BmcError) return e;
    throw e;
  }
  throw new Error('the call succeeded; a BmcError was expected');
}
