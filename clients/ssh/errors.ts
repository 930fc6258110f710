/**
 * Why an SSH operation did not produce a result. The fan-out folds these into its four outcomes
 * (see `outcomeOf` in fan-out.ts); callers that need the finer reason read `code`.
 */
export type SshErrorCode =
  | 'INVALID_INPUT' // a bad target or option, found before any socket is opened
  | 'CONNECTION_REFUSED' // TCP RST: nothing listens on the port
  | 'UNREACHABLE' // no route, host down, DNS failure
  | 'HOST_KEY_MISMATCH' // the server's host key is not the pinned one: we refused it
  | 'AUTH_FAILED' // the server rejected our key
  | 'CONNECT_TIMEOUT' // connect + handshake + authentication did not finish in time
  | 'COMMAND_TIMEOUT' // the command ran past its own timeout and was killed
  | 'OUTPUT_LIMIT' // the command wrote more than the cap; the channel was closed
  | 'ABORTED' // the caller's AbortSignal fired (a fan-out deadline, a cancelled rollout)
  | 'CLOSED' // the connection dropped under an open session
  | 'PROTOCOL'; // anything else the SSH layer reported

/**
 * Messages are built here from fixed text plus host, port and fingerprints only: never from the
 * private key, a passphrase or the raw text of a library error that might quote them.
 */
export class SshError extends Error {
  override readonly name = 'SshError';
  constructor(
    readonly code: SshErrorCode,
    message: string,
    /** The library's error level or errno code, kept for logs (never its message). */
    readonly detail?: string,
  ) {
    super(message);
  }
}
