export { SshError, type SshErrorCode } from './errors';
export { fingerprintOfKeyBlob, fingerprintOfPublicKeyLine, parseFingerprint, type HostKeyPolicy } from './host-key';
export {
  connect,
  shQuote,
  withSession,
  SshSession,
  DEFAULT_COMMAND_TIMEOUT_MS,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_MAX_OUTPUT_BYTES,
  type ExecOptions,
  type ExecResult,
  type HostKeySeen,
  type SshTarget,
} from './client';
export { fanOut, fanOutSsh, DEFAULT_CONCURRENCY, type FanOutCode, type FanOutOptions, type FanOutResult, type FanOutStatus, type TaskContext } from './fan-out';
